//! WireGuard over an IPv6 underlay in the graph (`wg6-decrypt` and what follows it): a
//! datagram from the peer's endpoint to the tunnel's port on eth0, in a well-formed outer
//! Ethernet/IPv6/UDP packet. The first byte picks what the datagram is (a transport message
//! sealed with the session's keys around the fuzzer's inner packet, at the fuzzer's counter;
//! the same with a byte flipped; the fuzzer's bytes as they are: handshakes, unknown indices,
//! truncations) and what its UDP checksum is (right, zero, or wrong: IPv6 requires one). Each
//! input starts from a fresh session. Invariants: no panic, the graph idle afterwards, every
//! buffer back in the pool; a datagram whose checksum is not right, or whose seal was
//! tampered with, puts nothing out of eth1 (where decrypted packets go) and nothing out of
//! eth0; at most one packet comes out of a datagram.
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use quiver_fuzz::ip6::{a6, fill_l4_sum, ip6};
use quiver_fuzz::wg6::{WgRig6, WG6_LOCAL, WG6_PEER};
use quiver_fuzz::{eth, mac, udp, wg_message, HOST_B};

thread_local! {
    static RIG: RefCell<WgRig6> = RefCell::new(WgRig6::new());
}

fuzz_target!(|data: &[u8]| {
    let [mode, c0, c1, rest @ ..] = data else {
        return;
    };
    let tampered = mode % 4 == 1;
    let msg = wg_message(*mode, *c0, *c1, rest);
    let (src, dst) = (a6(WG6_PEER.0), a6(WG6_LOCAL.0));
    let mut datagram = udp(WG6_PEER.1, WG6_LOCAL.1, &msg);
    // Bits 2-3 of the mode: the checksum right (0, 1), zero (2) or off by one bit (3).
    let checksum = (mode >> 2) % 4;
    fill_l4_sum(&src, &dst, 17, &mut datagram);
    match checksum {
        2 => datagram[6..8].fill(0),
        3 => datagram[7] ^= 1,
        _ => {}
    }
    let frame = eth(mac(0), HOST_B, 0x86dd, &ip6(src, dst, 64, 17, &datagram));
    if frame.len() > 1514 {
        return;
    }
    RIG.with_borrow_mut(|rig| {
        rig.reset();
        let sent = rig.inject(frame);
        assert!(
            sent[1].len() <= 1,
            "one datagram put out {} packets",
            sent[1].len()
        );
        if checksum >= 2 || tampered {
            assert!(
                sent[0].is_empty() && sent[1].is_empty(),
                "a datagram with a bad checksum ({checksum}) or a tampered seal ({tampered}) \
                 put something out"
            );
        }
    });
});
