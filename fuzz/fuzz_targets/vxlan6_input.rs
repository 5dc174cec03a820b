//! vxlan6-input through the graph: the input is a VXLAN header and inner frame (after a byte
//! that picks the outer source address, UDP destination port and UDP checksum), carried in a
//! well-formed outer Ethernet/IPv6/UDP packet to the IPv6 rig's tunnel end on eth1
//! (fuzz/src/ip6.rs: VXLAN from fd00:2::fe to fd00:2::1, L2 cross-connected to eth2).
//! Invariants: no panic, exact buffer accounting and every packet under a named reason (the
//! rig's ledger), whatever leaves eth2 is the inner frame byte for byte, and nothing leaves
//! eth2 when the outer UDP checksum is zero or wrong (IPv6 requires a right one).
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use quiver_fuzz::ip6::{a6, fill_l4_sum, ip6, Rig6};
use quiver_fuzz::{eth, mac, udp, HOST_B};

thread_local! {
    static RIG: RefCell<Rig6> = RefCell::new(Rig6::new());
}

fuzz_target!(|data: &[u8]| {
    let [sel, vxlan @ ..] = data else {
        return;
    };
    // Bits 0-1: the source (the tunnel's far end, or a stranger); bit 2: a port that is not
    // VXLAN's; bits 3-4: the checksum right (0, 1), zero (2) or off by one bit (3).
    let src = match sel % 4 {
        0..=2 => a6("fd00:2::1"),
        _ => a6("fd00:2::7"),
    };
    let dport = if sel & 4 == 0 { 4789 } else { 4790 };
    let checksum = (sel >> 3) % 4;
    let dst = a6("fd00:2::fe");
    let mut datagram = udp(49152 + u16::from(*sel), dport, vxlan);
    fill_l4_sum(&src, &dst, 17, &mut datagram);
    match checksum {
        2 => datagram[6..8].fill(0),
        3 => datagram[7] ^= 1,
        _ => {}
    }
    let outer = eth(mac(1), HOST_B, 0x86dd, &ip6(src, dst, 64, 17, &datagram));
    if outer.len() > 1514 {
        return;
    }
    RIG.with_borrow_mut(|rig| {
        let (sent, _) = rig.inject(&[(1, outer)]);
        assert!(sent[2].len() <= 1);
        for f in &sent[2] {
            assert_eq!(
                f.as_slice(),
                &vxlan[8.min(vxlan.len())..],
                "eth2 sent something other than the inner frame"
            );
            assert!(
                checksum < 2,
                "a datagram with a {} UDP checksum was decapsulated",
                if checksum == 2 { "zero" } else { "wrong" }
            );
        }
    });
});
