//! (b) WireGuard in the graph (`wg4-decrypt` and what follows it): a datagram from the peer's
//! endpoint to the tunnel's port on eth1, in a well-formed outer packet. The first byte picks
//! what the datagram is: a transport message sealed with the session's keys (the fuzzer's
//! inner packet, at the fuzzer's counter), the same with bytes flipped, or the fuzzer's bytes
//! as they are (handshakes, unknown indices, truncations). Each input starts from a fresh
//! session. Invariants: no panic, the graph idle afterwards, every buffer back in the pool.
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use quiver_fuzz::{eth, ipv4, mac, udp, wg_message, Rig, HOST_B, WG_LOCAL, WG_PEER};

thread_local! {
    static RIG: RefCell<Rig> = RefCell::new(Rig::new());
}

fuzz_target!(|data: &[u8]| {
    let [mode, c0, c1, rest @ ..] = data else {
        return;
    };
    let msg = wg_message(*mode, *c0, *c1, rest);
    let frame = eth(
        mac(1),
        HOST_B,
        0x0800,
        &ipv4(
            WG_PEER.0,
            WG_LOCAL.0,
            17,
            64,
            &udp(WG_PEER.1, WG_LOCAL.1, &msg),
        ),
    );
    if frame.len() > 1514 {
        return;
    }
    RIG.with_borrow_mut(|rig| {
        rig.reset_wireguard();
        rig.inject(&[(1, frame)]);
    });
});
