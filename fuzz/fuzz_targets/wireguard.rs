//! (b) WireGuard's messages: two devices (A and B, each the other's peer, allowed IPs
//! 10.0.0.0/8) run a script the fuzzer writes — initiations, deliveries of what was sent
//! (mutated, truncated, replayed or not), data, raw datagrams, the clock moving, timers
//! polled, load on and off. Every datagram also goes through the wire views
//! (`Message::parse`). Invariants: no panic; a reply fits its buffer and parses as a message;
//! a decrypted packet's range lies in the datagram; an unmutated data message delivered once
//! decrypts to exactly the packet sent.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rand_core::{CryptoRng, RngCore};
use wireguard::allowed_ips::Prefix;
use wireguard::wire::Message;
use wireguard::{Device, PeerId, PresharedKey, PrivateKey, Received};

/// A deterministic generator (the fuzzer's seed); not for anything but fuzzing.
struct Rng(u64);

impl RngCore for Rng {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    fn next_u64(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for c in dest.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}
impl CryptoRng for Rng {}

#[derive(Arbitrary, Debug)]
enum Op {
    /// A (or B) initiates a handshake.
    Initiate { b: bool },
    /// The oldest datagram in flight is delivered, changed as said.
    Deliver {
        flips: Vec<(u16, u8)>,
        truncate: Option<u16>,
        keep: bool,
    },
    /// The last datagram delivered arrives again.
    Replay,
    /// A datagram of the fuzzer's own to A (or B).
    Raw { b: bool, bytes: Vec<u8> },
    /// A datagram of the fuzzer's own, with a valid type and length, to A (or B).
    Shaped {
        b: bool,
        kind: u8,
        receiver_of_last: bool,
        bytes: Vec<u8>,
    },
    /// A (or B) sends an IPv4 packet (or a keepalive when empty).
    Send { b: bool, payload: Vec<u8> },
    /// The clock moves on.
    Advance { ms: u16, secs: u8 },
    /// A (or B) runs its timers.
    Poll { b: bool },
    /// A (or B) is under load (or not).
    Load { b: bool, on: bool },
}

#[derive(Arbitrary, Debug)]
struct Script {
    seed: u64,
    ops: Vec<Op>,
}

struct Flight {
    to_b: bool,
    bytes: Vec<u8>,
    /// The inner packet, for a data message.
    inner: Option<Vec<u8>>,
}

const A_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 51820);
const B_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)), 51820);

fn ipv4_packet(payload: &[u8]) -> Vec<u8> {
    let total = 20 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    p[20..].copy_from_slice(payload);
    p
}

fn check_reply(reply: &[u8], len: usize) {
    assert!(len <= reply.len());
    assert!(
        Message::parse(&reply[..len]).is_ok(),
        "a reply that is no message"
    );
}

fuzz_target!(|s: Script| {
    if s.ops.len() > 64 {
        return;
    }
    let ka = PrivateKey::from_bytes([1; 32]);
    let kb = PrivateKey::from_bytes([2; 32]);
    let (pa, pb) = (ka.public_key(), kb.public_key());
    let psk = PresharedKey([7; 32]);
    let mut devs = [
        Device::with_rng(ka, Box::new(Rng(s.seed))),
        Device::with_rng(kb, Box::new(Rng(s.seed ^ 0x5555))),
    ];
    let start = Instant::now();
    let mut now = start;
    let peer_a = devs[0].add_peer(pb, psk.clone(), Some(B_ADDR));
    let peer_b = devs[1].add_peer(pa, psk, Some(A_ADDR));
    for (d, id) in [(0, peer_a), (1, peer_b)] {
        devs[d]
            .peer_mut(id)
            .allowed_ips
            .insert(Prefix::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)), 8).unwrap());
    }
    let peer = |b: bool| if b { peer_b } else { peer_a };
    let src = |to_b: bool| if to_b { A_ADDR } else { B_ADDR };
    let mut flight: std::collections::VecDeque<Flight> = Default::default();
    let mut last: Option<Flight> = None;
    let mut out = vec![0u8; 2048];
    for op in s.ops {
        let deliver = |devs: &mut [Device; 2], f: &Flight, bytes: &mut Vec<u8>, now| {
            let _ = Message::parse(&bytes[..]);
            let mut reply = [0u8; Device::MIN_REPLY];
            let d = &mut devs[usize::from(f.to_b)];
            match d.receive(now, src(f.to_b), bytes, &mut reply) {
                Ok(Received::Reply { len, .. }) => {
                    check_reply(&reply, len);
                    Some(Flight {
                        to_b: !f.to_b,
                        bytes: reply[..len].to_vec(),
                        inner: None,
                    })
                }
                Ok(Received::Data { range, .. }) => {
                    assert!(range.start <= range.end && range.end <= bytes.len());
                    None
                }
                Ok(Received::Nothing) | Err(_) => None,
            }
        };
        match op {
            Op::Initiate { b } => {
                let d = &mut devs[usize::from(b)];
                if let Ok(n) = d.initiate(peer(b), now, &mut out) {
                    flight.push_back(Flight {
                        to_b: !b,
                        bytes: out[..n].to_vec(),
                        inner: None,
                    });
                }
            }
            Op::Deliver {
                flips,
                truncate,
                keep,
            } => {
                let Some(f) = flight.pop_front() else {
                    continue;
                };
                let mut bytes = f.bytes.clone();
                let mut changed = false;
                for (at, x) in flips.iter().take(8) {
                    if !bytes.is_empty() && *x != 0 {
                        let i = usize::from(*at) % bytes.len();
                        bytes[i] ^= x;
                        changed = true;
                    }
                }
                if let Some(t) = truncate {
                    let t = usize::from(t);
                    if t < bytes.len() {
                        bytes.truncate(t);
                        changed = true;
                    }
                }
                let mut reply = [0u8; Device::MIN_REPLY];
                let _ = Message::parse(&bytes[..]);
                let d = &mut devs[usize::from(f.to_b)];
                match d.receive(now, src(f.to_b), &mut bytes, &mut reply) {
                    Ok(Received::Reply { len, .. }) => {
                        check_reply(&reply, len);
                        flight.push_back(Flight {
                            to_b: !f.to_b,
                            bytes: reply[..len].to_vec(),
                            inner: None,
                        });
                    }
                    Ok(Received::Data { range, .. }) => {
                        assert!(range.start <= range.end && range.end <= bytes.len());
                        if let (false, Some(inner)) = (changed, &f.inner) {
                            assert_eq!(&bytes[range], &inner[..], "decrypted packet differs");
                        }
                    }
                    Ok(Received::Nothing) | Err(_) => {}
                }
                if keep {
                    last = Some(f);
                }
            }
            Op::Replay => {
                if let Some(f) = last.take() {
                    let mut bytes = f.bytes.clone();
                    if let Some(r) = deliver(&mut devs, &f, &mut bytes, now) {
                        flight.push_back(r);
                    }
                }
            }
            Op::Raw { b, mut bytes } => {
                let f = Flight {
                    to_b: b,
                    bytes: Vec::new(),
                    inner: None,
                };
                if let Some(r) = deliver(&mut devs, &f, &mut bytes, now) {
                    flight.push_back(r);
                }
            }
            Op::Shaped {
                b,
                kind,
                receiver_of_last,
                bytes,
            } => {
                // Type and length right (148, 92, 64, or a transport message), the rest the
                // fuzzer's; the receiver index taken from a real message when asked.
                let kind = kind % 4 + 1;
                let len = match kind {
                    1 => 148,
                    2 => 92,
                    3 => 64,
                    _ => 32 + bytes.len().min(1500),
                };
                let mut m = vec![0u8; len];
                m[0] = kind;
                for (i, x) in bytes.iter().enumerate().take(len.saturating_sub(4)) {
                    m[4 + i] = *x;
                }
                if let (true, Some(l), true) = (receiver_of_last, &last, kind != 1) {
                    if l.bytes.len() >= 12 {
                        // A response's sender index is the next message's receiver.
                        let at = if l.bytes[0] == 2 { 4 } else { 8 };
                        m[8..12].copy_from_slice(&l.bytes[at..at + 4]);
                    }
                }
                let f = Flight {
                    to_b: b,
                    bytes: Vec::new(),
                    inner: None,
                };
                if let Some(r) = deliver(&mut devs, &f, &mut m, now) {
                    flight.push_back(r);
                }
            }
            Op::Send { b, payload } => {
                let inner = if payload.is_empty() {
                    Vec::new()
                } else {
                    ipv4_packet(&payload[..payload.len().min(1400)])
                };
                let mut buf = vec![0u8; wireguard::transport::sealed_len(inner.len())];
                buf[16..16 + inner.len()].copy_from_slice(&inner);
                let d = &mut devs[usize::from(b)];
                if let Ok(n) = d.send(peer(b), now, &mut buf, inner.len()) {
                    assert!(n <= buf.len());
                    flight.push_back(Flight {
                        to_b: !b,
                        bytes: buf[..n].to_vec(),
                        inner: (!inner.is_empty()).then_some(inner),
                    });
                }
            }
            Op::Advance { ms, secs } => {
                now += Duration::from_millis(u64::from(ms)) + Duration::from_secs(u64::from(secs));
            }
            Op::Poll { b } => {
                let d = &mut devs[usize::from(b)];
                for _ in 0..4 {
                    match d.poll(now, &mut out) {
                        Some((PeerId(_), n)) => {
                            assert!(n <= out.len());
                            assert!(Message::parse(&out[..n]).is_ok());
                            flight.push_back(Flight {
                                to_b: !b,
                                bytes: out[..n].to_vec(),
                                inner: None,
                            });
                        }
                        None => break,
                    }
                }
            }
            Op::Load { b, on } => devs[usize::from(b)].set_under_load(on),
        }
        if flight.len() > 32 {
            flight.pop_front();
        }
    }
    let _ = start;
});
