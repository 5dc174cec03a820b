//! (c) IPv6 through the graph: records of (selector, length, IPv6 packet; see `ip6_records`),
//! each made a frame to one of two routed ports (the port's MAC, a multicast MAC, another
//! host's, or VLAN 200), its payload length and ICMPv6 checksum set when the selector asks,
//! and run through ethernet-input, ip6-input, ip6-lookup, ip6-rewrite, ip6-local, ip6-nd,
//! ip6-nd-resolve, ip6-icmp-error and interface-output with the IPv6 routes, addresses and
//! neighbours of `Rig6`. Invariants: no panic; the graph idle afterwards; every buffer back in
//! the pool; every packet forwarded or dropped under a named reason (the ledger); every frame
//! sent an IPv6 packet from the port's MAC, no longer than its header says nor than the port's
//! MTU, with a hop left; our own ICMPv6 verifying, our errors within 1280 bytes; nothing from
//! a link-local source of another's out of a port other than the one it came in by (RFC 4291
//! 2.5.6: a router never forwards such a packet off its link).
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use quiver_fuzz::ip6::{check_sent, ip6_records, our_addresses, unspoofed, Rig6};

thread_local! {
    static RIG: RefCell<Rig6> = RefCell::new(Rig6::new());
}

fuzz_target!(|data: &[u8]| {
    let frames = ip6_records(data);
    let ours = unspoofed(&frames, &our_addresses());
    RIG.with_borrow_mut(|rig| {
        let (sent, _learned) = rig.inject(&frames);
        check_sent(&sent, &ours);
        let everyone = our_addresses();
        for (p, out) in sent.iter().enumerate().take(2) {
            for f in out {
                let l2 = if f[12..14] == [0x81, 0] { 18 } else { 14 };
                let src = &f[l2 + 8..l2 + 24];
                if src[0] != 0xfe || src[1] & 0xc0 != 0x80 || everyone.iter().any(|a| a == src) {
                    continue;
                }
                let came_in_here = frames.iter().any(|(q, g)| {
                    *q == p && [14, 18].iter().any(|&o| g.get(o + 8..o + 24) == Some(src))
                });
                assert!(
                    came_in_here,
                    "eth{p} sent a packet of a link-local source from another link"
                );
            }
        }
    });
});
