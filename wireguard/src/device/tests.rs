//! The message limits and the timers' end states, through a `Device` whose sessions the test
//! reaches into.

use super::*;
use crate::timers::{REJECT_AFTER_MESSAGES, REJECT_AFTER_TIME, REKEY_ATTEMPT_TIME, REKEY_TIMEOUT};
use crate::transport::{sealed_len, SendCounter};

const A: &str = "192.0.2.1:1";
const B: &str = "192.0.2.2:2";

fn connected(t0: Instant) -> (Device, PeerId, Device, PeerId) {
    let ka = PrivateKey::generate(&mut OsRng);
    let kb = PrivateKey::generate(&mut OsRng);
    let mut a = Device::new(ka.clone());
    let mut b = Device::new(kb.clone());
    let ap = a.add_peer(
        kb.public_key(),
        PresharedKey::default(),
        Some(B.parse().unwrap()),
    );
    let bp = b.add_peer(ka.public_key(), PresharedKey::default(), None);
    let mut m = [0u8; 256];
    let mut r = [0u8; 256];
    let n = a.initiate(ap, t0, &mut m).unwrap();
    let Ok(Received::Reply { len, .. }) = b.receive(t0, A.parse().unwrap(), &mut m[..n], &mut r)
    else {
        panic!("no response")
    };
    let mut response = r[..len].to_vec();
    let Ok(Received::Reply { len, .. }) = a.receive(t0, B.parse().unwrap(), &mut response, &mut r)
    else {
        panic!("no keepalive")
    };
    let res = b.receive(t0, A.parse().unwrap(), &mut r[..len], &mut m);
    assert_eq!(res, Ok(Received::Nothing));
    (a, ap, b, bp)
}

#[test]
fn rekey_after_messages_and_reject_after_messages() {
    let t0 = Instant::now();
    let (mut a, ap, _b, _) = connected(t0);
    let mut out = [0u8; 256];
    let mut buf = [0u8; 64];
    let session = a.peers[ap.0].current.as_mut().unwrap();
    session.counter = std::sync::Arc::new(SendCounter::starting_at(REKEY_AFTER_MESSAGES - 1));
    a.send(ap, t0, &mut buf, 0).unwrap();
    assert_eq!(a.poll(t0, &mut out), None, "below the limit");
    a.send(ap, t0, &mut buf, 0).unwrap();
    assert_eq!(
        a.poll(t0, &mut out),
        None,
        "one initiation per REKEY_TIMEOUT"
    );
    let t1 = t0 + REKEY_TIMEOUT;
    a.send(ap, t1, &mut buf, 0).unwrap();
    assert_eq!(a.poll(t1, &mut out), Some((ap, INITIATION_LEN)));

    let session = a.peers[ap.0].current.as_mut().unwrap();
    session.counter = std::sync::Arc::new(SendCounter::starting_at(REJECT_AFTER_MESSAGES));
    assert_eq!(
        a.send(ap, t1, &mut buf, 0),
        Err(DeviceError::Transport(TransportError::CounterExhausted))
    );
}

#[test]
fn a_counter_past_the_limit_is_refused_on_receipt() {
    let t0 = Instant::now();
    let (mut a, ap, mut b, _) = connected(t0);
    let session = a.peers[ap.0].current.as_mut().unwrap();
    session.counter = std::sync::Arc::new(SendCounter::starting_at(REJECT_AFTER_MESSAGES - 1));
    let mut buf = [0u8; 64];
    let n = a.send(ap, t0, &mut buf, 0).unwrap();
    let mut ok = buf;
    assert_eq!(
        b.receive(t0, A.parse().unwrap(), &mut ok[..n], &mut [0u8; 128]),
        Ok(Received::Nothing)
    );
    // Forge the counter past the limit: refused before any decryption.
    buf[8..16].copy_from_slice(&REJECT_AFTER_MESSAGES.to_le_bytes());
    assert_eq!(
        b.receive(t0, A.parse().unwrap(), &mut buf[..n], &mut [0u8; 128]),
        Err(DeviceError::Transport(TransportError::Replay(
            ReplayError::Exhausted(REJECT_AFTER_MESSAGES)
        )))
    );
}

#[test]
fn give_up_then_zero_keys() {
    let t0 = Instant::now();
    let (mut a, ap, _b, _) = connected(t0);
    let mut out = [0u8; 256];
    // The peer goes silent; a forced handshake is retried until REKEY_ATTEMPT_TIME.
    a.initiate(ap, t0, &mut out).unwrap();
    let mut now = t0;
    let mut sent = 1;
    while now < t0 + REKEY_ATTEMPT_TIME + REKEY_TIMEOUT * 2 {
        now += Duration::from_millis(500);
        while let Some((_, n)) = a.poll(now, &mut out) {
            assert_eq!(n, INITIATION_LEN);
            sent += 1;
        }
    }
    assert!((17..=19).contains(&sent), "{sent} initiations");
    assert!(a.peer(ap).handshake.is_none(), "gave up");
    assert!(
        a.peer(ap).current().is_some(),
        "the old session stays until it expires"
    );
    // Keys are erased 3 × REJECT_AFTER_TIME after the last handshake.
    assert_eq!(a.poll(t0 + 3 * REJECT_AFTER_TIME, &mut out), None);
    assert!(a.peer(ap).current().is_none());
    assert!(a.indices.is_empty(), "indices forgotten");
    let mut buf = vec![0u8; sealed_len(0)];
    assert_eq!(
        a.send(ap, t0 + 3 * REJECT_AFTER_TIME, &mut buf, 0),
        Err(DeviceError::NoSession)
    );
}
