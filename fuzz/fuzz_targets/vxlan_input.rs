//! (b) vxlan4-input through the graph: the input is a VXLAN header and inner frame (after two
//! bytes that pick the outer source address and UDP destination port), carried in a well-formed
//! outer Ethernet/IPv4/UDP packet to the tunnel's local end on eth1. Invariants: no panic,
//! exact buffer accounting, and whatever leaves eth2 (the tunnel's cross-connect) is the inner
//! frame byte for byte.
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use quiver_fuzz::{eth, ip, ipv4, mac, udp, Rig, HOST_B};

thread_local! {
    static RIG: RefCell<Rig> = RefCell::new(Rig::new());
}

fuzz_target!(|data: &[u8]| {
    let [sel, port_sel, vxlan @ ..] = data else {
        return;
    };
    let src = match sel % 4 {
        0 | 1 => ip(192, 168, 1, 2),
        2 => ip(192, 168, 1, 3),
        _ => ip(10, 0, 1, 2),
    };
    let dport = match port_sel % 4 {
        0..=2 => 4789,
        _ => 4790,
    };
    let sport = 49152 + u16::from(*sel);
    let outer = eth(
        mac(1),
        HOST_B,
        0x0800,
        &ipv4(src, ip(192, 168, 1, 1), 17, 64, &udp(sport, dport, vxlan)),
    );
    if outer.len() > 1514 {
        return;
    }
    RIG.with_borrow_mut(|rig| {
        let sent = rig.inject(&[(1, outer)]);
        for f in &sent[2] {
            assert_eq!(
                f.as_slice(),
                &vxlan[8.min(vxlan.len())..],
                "eth2 sent something other than the inner frame"
            );
        }
        assert!(sent[2].len() <= 1);
    });
});
