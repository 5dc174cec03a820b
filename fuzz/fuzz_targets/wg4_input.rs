//! (b) WireGuard in the graph (`wg4-decrypt` and what follows it): a datagram from the peer's
//! endpoint to the tunnel's port on eth1, in a well-formed outer packet. The first byte picks
//! what the datagram is: a transport message sealed with the session's keys (the fuzzer's
//! inner packet, at the fuzzer's counter), the same with bytes flipped, or the fuzzer's bytes
//! as they are (handshakes, unknown indices, truncations). Each input starts from a fresh
//! session. Invariants: no panic, the graph idle afterwards, every buffer back in the pool.
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use quiver_fuzz::{eth, ipv4, mac, udp, wg_keys, Rig, HOST_B, WG_LOCAL, WG_PEER};
use wireguard::transport;

thread_local! {
    static RIG: RefCell<Rig> = RefCell::new(Rig::new());
}

fuzz_target!(|data: &[u8]| {
    let [mode, c0, c1, rest @ ..] = data else {
        return;
    };
    let msg = match mode % 4 {
        // Sealed by the peer: the inner packet reaches ip4-input on the tunnel.
        0 | 1 => {
            let (_, theirs) = wg_keys();
            let inner = &rest[..rest.len().min(1400)];
            let mut buf = vec![0u8; transport::sealed_len(inner.len())];
            buf[16..16 + inner.len()].copy_from_slice(inner);
            let counter = u64::from(u16::from_le_bytes([*c0, *c1]));
            let n = transport::seal(&theirs, counter, &mut buf, inner.len()).unwrap();
            buf.truncate(n);
            if mode % 4 == 1 && !buf.is_empty() {
                let at = usize::from(*c0) % buf.len();
                buf[at] ^= c1 | 1;
            }
            buf
        }
        _ => rest.to_vec(),
    };
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
