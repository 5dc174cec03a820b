//! (a) The packet path: frames (records of port, length, bytes; see `records`) received on the
//! rig's ports and run through the real forwarding graph (ethernet-input, ip4-input,
//! ip4-lookup/-local/-l3xc, ip4-rewrite, ARP, ICMP errors, L2 cross-connect, VXLAN
//! encap/decap, interface-output). Invariants: no panic, the graph idle afterwards, every
//! buffer back in the pool (exact accounting, no double free), nothing sent out of an L3 port
//! larger than its MTU allows.
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use quiver_fuzz::{records, Rig};

thread_local! {
    static RIG: RefCell<Rig> = RefCell::new(Rig::new());
}

fuzz_target!(|data: &[u8]| {
    let frames = records(data);
    RIG.with_borrow_mut(|rig| {
        let sent = rig.inject(&frames);
        // eth0, eth1, eth5, eth6 are routed with MTU 1500: an Ethernet header (and a VLAN tag
        // on eth0) around at most 1500 bytes of IP. eth1 also carries VXLAN encapsulation of
        // eth2's frames, whose outer packet the MTU limits just the same.
        for p in [0, 1, 5, 6] {
            for f in &sent[p] {
                assert!(f.len() <= 1518, "eth{p} sent a {}-byte frame", f.len());
            }
        }
    });
});
