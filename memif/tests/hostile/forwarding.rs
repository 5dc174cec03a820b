//! Frames from a raw slave's memory held and forwarded: descriptors it rewrites after they were
//! received are not followed (the frames go on as they were checked), forwarding from it skips
//! only its bad descriptors, and forwarding into bad buffers it posted loses only those frames.

use std::sync::atomic::Ordering;

use memif::queue::{Hold, HoldSink, Taken};
use memif::ring::{ring_stride, Desc, Ring, DESC_FLAG_NEXT};
use memif::{HeldRx, InterfaceConfig, PeerFrame, TxSource};

use crate::common::{frame, wait_for};
use crate::harness::{RawSlave, Setup, BSIZE, BUF_BASE, LOG2, REGION_SIZE};

/// Frames held in the peer's memory, sent from there (as a memif cross-connect sends them).
struct HeldSource<'a> {
    held: &'a memif::queue::HeldFrames,
    frames: &'a [(u32, usize)],
}

impl TxSource for HeldSource<'_> {
    fn frames(&self) -> usize {
        self.frames.len()
    }
    fn frame_len(&self, i: usize) -> usize {
        self.frames[i].1
    }
    fn bytes_at(&self, _i: usize, _offset: usize) -> &[u8] {
        panic!("a held frame must be copied from where it is held")
    }
    fn held(&self, i: usize) -> Option<(&memif::queue::HeldFrames, u32, usize)> {
        Some((self.held, self.frames[i].0, 0))
    }
}

/// Holds the one frame it is offered a hold for.
struct HoldOne(Option<(u32, usize)>);

impl HoldSink for HoldOne {
    fn take(&mut self, frame: &PeerFrame<'_>, hold: Option<Hold>) -> Taken {
        match (hold, self.0) {
            (Some(h), None) => {
                self.0 = Some((h.token(), frame.len()));
                Taken::Held
            }
            _ => Taken::NoRoom,
        }
    }
}

#[test]
fn descriptors_rewritten_after_they_were_received_are_not_followed() {
    let mut st = Setup::new("rewritten", InterfaceConfig::new(1));
    let raw = RawSlave::connect(&mut st, 1);
    let queues = st.m.interface_mut(1).unwrap().detach_queues().unwrap();
    let (mut rx, mut tx) = (
        queues.rx.into_iter().next().unwrap(),
        queues.tx.into_iter().next().unwrap(),
    );
    let held = rx.enable_holding();
    let (a, b) = (frame(1, 64), frame(2, 200));
    raw.publish(&[raw.good_desc(1, &a), raw.good_desc(2, &b)], 0);
    // Frame a taken by the fast path, frame b by the general one: both kept as checked.
    let mut fast = [HeldRx::default(); 1];
    assert_eq!(rx.receive_held(&mut fast, BSIZE as u32), 1);
    let mut general = HoldOne(None);
    assert_eq!(rx.receive_holding(8, &mut general), 1);
    let kept = [(fast[0].token, fast[0].len as usize), general.0.unwrap()];
    // The peer rewrites both descriptors: another region, an offset past the region's end,
    // the largest length, a chain.
    let s2m = raw.s2m.at(&raw.region);
    for slot in 0..2 {
        s2m.write_desc(
            slot,
            Desc {
                flags: DESC_FLAG_NEXT,
                region: 9,
                length: u32::MAX,
                offset: 0xFFFF_FF00,
                metadata: 0,
            },
        );
    }
    assert_eq!(kept.map(|(t, _)| held.len(t)), [64, 200]);
    let mut copy = vec![0; 200];
    assert!(held.copy_out(kept[1].0, 0, &mut copy));
    assert_eq!(copy, b);
    // Sent on as a cross-connect sends them: copied from the ranges checked at receive.
    let m2s = Ring::new(&raw.region, ring_stride(LOG2), LOG2).unwrap();
    let posted = m2s.at(&raw.region);
    for slot in 0..2u16 {
        posted.write_desc(
            slot,
            Desc {
                flags: 0,
                region: 0,
                length: BSIZE as u32,
                offset: (BUF_BASE + (8 + u64::from(slot)) * BSIZE) as u32,
                metadata: 0,
            },
        );
    }
    posted.head().store(2, Ordering::Release);
    let report = tx.transmit_report(&HeldSource {
        held: &held,
        frames: &kept,
    });
    assert_eq!((report.taken, report.sent, report.held_copies), (2, 2, 2));
    assert_eq!(posted.tail().load(Ordering::Acquire), 2);
    for (slot, f) in [(0u16, &a), (1, &b)] {
        let d = posted.read_desc(slot);
        assert_eq!(d.length as usize, f.len());
        let mut got = vec![0; f.len()];
        assert!(raw.region.copy_out(u64::from(d.offset), &mut got));
        assert_eq!(&got, f, "slot {slot}: the frame as it was received");
    }
    // Released: both slots go back to the peer; nothing was counted bad.
    held.release_many(&kept.map(|(t, _)| t));
    rx.give_back();
    assert_eq!(s2m.tail().load(Ordering::Acquire), 2);
    let c = st.m.interface(1).unwrap().counters();
    assert_eq!((c.rx_packets, c.tx_packets), (2, 2));
    assert_eq!(st.m.interface(1).unwrap().bad_descriptors(), 0);
    assert_eq!(held.in_flight(), 0);
    st.check_good();
    drop(raw.sock);
}

/// The good interface's (id 2) queues, detached from the master, the receive one holding.
fn good_queues(st: &mut Setup) -> (memif::RxQueue, memif::TxQueue) {
    let q = st.m.interface_mut(2).unwrap().detach_queues().unwrap();
    let mut rx = q.rx.into_iter().next().unwrap();
    rx.enable_holding();
    (rx, q.tx.into_iter().next().unwrap())
}

#[test]
fn forwarding_from_a_hostile_peer_skips_its_bad_descriptors_and_passes_the_rest() {
    let mut st = Setup::new("fwd_from_raw", InterfaceConfig::new(1));
    let raw = RawSlave::connect(&mut st, 1);
    let q = st.m.interface_mut(1).unwrap().detach_queues().unwrap();
    let mut from_raw = q.rx.into_iter().next().unwrap();
    from_raw.enable_holding();
    let (_, mut to_good) = good_queues(&mut st);
    let good = [frame(1, 64), frame(2, 700), frame(3, 1500)];
    let mut bad_region = raw.good_desc(1, &[1; 64]);
    bad_region.region = 9;
    let mut past_the_end = raw.good_desc(3, &[1; 64]);
    past_the_end.offset = (REGION_SIZE - 10) as u32;
    raw.publish(
        &[
            raw.good_desc(0, &good[0]),
            bad_region,
            raw.good_desc(2, &good[1]),
            past_the_end,
            raw.good_desc(4, &good[2]),
        ],
        0,
    );
    let f = from_raw.forward_to(&mut to_good, 256);
    assert_eq!((f.received, f.sent, f.more), (3, 3, false));
    let mut got = Vec::new();
    wait_for("the good frames at the good peer", 10, || {
        st.good
            .interface_mut()
            .rx_burst(0, 16, &mut |p: &[u8]| got.push(p.to_vec()));
        got.len() >= 3
    });
    assert_eq!(got, good, "the good frames, in order, intact");
    let c = st.m.interface(1).unwrap().counters();
    assert_eq!((c.bad_desc_region, c.bad_desc_offset), (1, 1));
    // Every slot back with the raw peer, the bad ones too.
    let s2m = raw.s2m.at(&raw.region);
    assert_eq!(s2m.tail().load(Ordering::Acquire), 5);
    assert!(st.m.interface(1).unwrap().is_up());
}

#[test]
fn forwarding_into_bad_buffers_a_hostile_peer_posted_loses_only_those_frames() {
    let mut st = Setup::new("fwd_to_raw", InterfaceConfig::new(1));
    let raw = RawSlave::connect(&mut st, 1);
    let q = st.m.interface_mut(1).unwrap().detach_queues().unwrap();
    let mut to_raw = q.tx.into_iter().next().unwrap();
    let (mut from_good, _) = good_queues(&mut st);
    // The raw peer posts four buffers: good, past its region's end, good, in a region that
    // does not exist.
    let m2s = Ring::new(&raw.region, ring_stride(LOG2), LOG2).unwrap();
    let posted = m2s.at(&raw.region);
    let buffer = |slot: u64| Desc {
        flags: 0,
        region: 0,
        length: BSIZE as u32,
        offset: (BUF_BASE + (8 + slot) * BSIZE) as u32,
        metadata: 0,
    };
    let mut past_the_end = buffer(1);
    past_the_end.offset = (REGION_SIZE - 100) as u32;
    let mut no_region = buffer(3);
    no_region.region = 7;
    for (slot, d) in [buffer(0), past_the_end, buffer(2), no_region]
        .into_iter()
        .enumerate()
    {
        posted.write_desc(slot as u16, d);
    }
    posted.head().store(4, Ordering::Release);
    let frames = [frame(1, 64), frame(2, 300), frame(3, 64), frame(4, 90)];
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    assert_eq!(st.good.interface_mut().tx_burst(0, &refs), 4);
    let mut f = memif::Forwarded::default();
    wait_for("the frames forwarded", 10, || {
        let g = from_good.forward_to(&mut to_raw, 256);
        f.received += g.received;
        f.taken += g.taken;
        f.sent += g.sent;
        f.received == 4
    });
    assert_eq!((f.taken, f.sent), (4, 2), "two lost to the bad buffers");
    assert_eq!(
        posted.tail().load(Ordering::Acquire),
        4,
        "every buffer handed back"
    );
    for (slot, sent) in [
        (0u16, Some(&frames[0])),
        (1, None),
        (2, Some(&frames[2])),
        (3, None),
    ] {
        let d = posted.read_desc(slot);
        match sent {
            Some(f) => {
                assert_eq!(d.length as usize, f.len());
                let mut v = vec![0; f.len()];
                assert!(raw.region.copy_out(u64::from(d.offset), &mut v));
                assert_eq!(&v, f, "slot {slot}");
            }
            None => assert_eq!(d.length, 0, "a bad buffer goes back empty"),
        }
    }
    let c = st.m.interface(1).unwrap().counters();
    assert_eq!(
        (c.bad_desc_offset, c.bad_desc_region, c.tx_dropped),
        (1, 1, 2)
    );
    assert!(st.m.interface(1).unwrap().is_up());
}
