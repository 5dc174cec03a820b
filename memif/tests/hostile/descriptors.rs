//! Bad descriptors from a raw slave (a region that does not exist, offsets past the region or
//! overflowing, zero or too long lengths, a chain off the ring's end, a head far beyond the ring):
//! each counted and dropped, every slot released, the interface still up and passing good frames.

use std::sync::atomic::Ordering;

use memif::ring::{Desc, DESC_FLAG_NEXT};
use memif::InterfaceConfig;

use crate::common::frame;
use crate::harness::{RawSlave, Setup, N, REGION_SIZE};

fn bad_descriptor_case(
    test: &str,
    make: impl Fn(&RawSlave) -> Vec<Desc>,
    check: impl Fn(&memif::Counters),
) {
    let mut st = Setup::new(test, InterfaceConfig::new(1));
    let raw = RawSlave::connect(&mut st, 1);
    let descs = make(&raw);
    raw.publish(&descs, 0);
    let mut got = Vec::new();
    let mi = st.m.interface_mut(1).unwrap();
    mi.rx_burst(0, 64, &mut |p: &[u8]| got.push(p.to_vec()));
    check(&mi.counters());
    assert!(got.is_empty(), "bad frames delivered: {}", got.len());
    // Every slot was released to the slave.
    let r = raw.s2m.at(&raw.region);
    assert_eq!(
        r.tail().load(Ordering::Acquire),
        r.head().load(Ordering::Acquire)
    );
    // The bad interface stays up; a good frame after the bad ones still passes.
    let f = frame(1, 200);
    let d = raw.good_desc(0, &f);
    raw.publish(&[d], 0);
    let mi = st.m.interface_mut(1).unwrap();
    mi.rx_burst(0, 64, &mut |p: &[u8]| got.push(p.to_vec()));
    assert_eq!(got, vec![f]);
    assert!(st.m.interface(1).unwrap().is_up());
    st.check_good();
    drop(raw.sock);
}

/// [`bad_descriptor_case`] for one descriptor, a good 64-byte frame's changed by `edit`: the
/// master's counter `counter` must count it once.
fn one_bad_descriptor(
    test: &str,
    edit: impl Fn(&mut Desc),
    counter: impl Fn(&memif::Counters) -> u64,
) {
    bad_descriptor_case(
        test,
        |raw| {
            let mut d = raw.good_desc(1, &[1; 64]);
            edit(&mut d);
            vec![d]
        },
        |c| assert_eq!(counter(c), 1),
    );
}

#[test]
fn bad_region_index_is_counted_and_dropped() {
    one_bad_descriptor("bad_region", |d| d.region = 1, |c| c.bad_desc_region);
}

#[test]
fn u32_overflowing_offset_plus_length_is_dropped() {
    bad_descriptor_case(
        "overflow",
        |_| {
            let d = Desc {
                flags: 0,
                region: 0,
                length: 0x200,
                offset: 0xFFFF_FF00,
                metadata: 0,
            };
            let d2 = Desc {
                offset: (REGION_SIZE - 100) as u32,
                length: 200,
                ..d
            };
            vec![d, d2]
        },
        |c| assert_eq!(c.bad_desc_offset, 2),
    );
}

#[test]
fn zero_length_is_dropped() {
    one_bad_descriptor("zero_len", |d| d.length = 0, |c| c.bad_desc_zero_length);
}

#[test]
fn length_above_buffer_size_is_dropped() {
    one_bad_descriptor("too_long", |d| d.length = 4000, |c| c.bad_desc_too_long);
}

#[test]
fn next_on_the_last_slot_is_dropped() {
    bad_descriptor_case(
        "next_last",
        |raw| {
            let a = raw.good_desc(1, &[1; 64]);
            let mut b = raw.good_desc(2, &[2; 64]);
            b.flags = DESC_FLAG_NEXT;
            let mut c = raw.good_desc(3, &[3; 64]);
            c.flags = DESC_FLAG_NEXT;
            vec![
                Desc {
                    flags: DESC_FLAG_NEXT,
                    ..a
                },
                b,
                c,
            ]
        },
        |c| assert_eq!(c.bad_desc_chain, 1),
    );
}

#[test]
fn head_advanced_beyond_ring_size_is_clamped() {
    let mut st = Setup::new("head_overrun", InterfaceConfig::new(1));
    let raw = RawSlave::connect(&mut st, 1);
    let f = frame(3, 100);
    let descs: Vec<Desc> = (0..N).map(|s| raw.good_desc(u64::from(s), &f)).collect();
    // Claims 16 + 1000 descriptors on a 16-slot ring.
    raw.publish(&descs, 1000);
    let mut got = 0;
    let mi = st.m.interface_mut(1).unwrap();
    mi.rx_burst(0, 1000, &mut |p: &[u8]| got += usize::from(p == &f[..]));
    assert_eq!(got, 16, "only one ring's worth is consumed");
    assert_eq!(mi.counters().ring_index_overrun, 1);
    assert_eq!(raw.s2m.at(&raw.region).tail().load(Ordering::Acquire), N);
    st.check_good();
}
