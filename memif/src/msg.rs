//! The 128-byte memif control messages: encoding and validating decoding.
//!
//! Every message is exactly [`MSG_SIZE`] bytes: a native-endian `u16` type at offset 0, the body
//! from offset 2, the rest zero. Strings are NUL-terminated inside fixed fields when they fit; a
//! received field may lack the NUL, so every string is treated as bounded by its field.

use thiserror::Error;

/// Size of every control message on the wire.
pub const MSG_SIZE: usize = 128;
/// The only protocol version spoken: major 2, minor 0.
pub const VERSION: u16 = 0x0200;
/// Length of the name fields (HELLO name, INIT name, CONNECT/CONNECTED interface name).
pub const NAME_LEN: usize = 32;
/// Length of the INIT secret field (at most 23 characters plus NUL).
pub const SECRET_LEN: usize = 24;
/// Length of the DISCONNECT reason field.
pub const REASON_LEN: usize = 96;

/// Message type values.
pub mod msg_type {
    /// ACK.
    pub const ACK: u16 = 1;
    /// HELLO.
    pub const HELLO: u16 = 2;
    /// INIT.
    pub const INIT: u16 = 3;
    /// ADD_REGION.
    pub const ADD_REGION: u16 = 4;
    /// ADD_RING.
    pub const ADD_RING: u16 = 5;
    /// CONNECT.
    pub const CONNECT: u16 = 6;
    /// CONNECTED.
    pub const CONNECTED: u16 = 7;
    /// DISCONNECT.
    pub const DISCONNECT: u16 = 8;
}

/// ADD_RING flag: the ring carries slave-to-master traffic.
pub const RING_FLAG_S2M: u16 = 1;

/// Interface mode carried in INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Ethernet frames (the only mode DPDK accepts).
    Ethernet,
    /// IP packets without an L2 header.
    Ip,
    /// Punt/inject (not supported by this crate's data path, but decoded).
    PuntInject,
}

impl Mode {
    /// The wire value.
    pub fn to_wire(self) -> u8 {
        match self {
            Mode::Ethernet => 0,
            Mode::Ip => 1,
            Mode::PuntInject => 2,
        }
    }

    /// Decode a wire value.
    pub fn from_wire(v: u8) -> Option<Mode> {
        match v {
            0 => Some(Mode::Ethernet),
            1 => Some(Mode::Ip),
            2 => Some(Mode::PuntInject),
            _ => None,
        }
    }
}

/// A fixed-size, possibly NUL-terminated byte string field.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FixedStr<const N: usize>(pub [u8; N]);

impl<const N: usize> FixedStr<N> {
    /// Build from a string, truncated so that a terminating NUL always fits.
    pub fn new(s: &str) -> Self {
        let mut b = [0u8; N];
        let bytes = s.as_bytes();
        let n = bytes.len().min(N.saturating_sub(1));
        b[..n].copy_from_slice(&bytes[..n]);
        FixedStr(b)
    }

    /// The bytes up to the first NUL, or the whole field if it has none.
    pub fn as_bytes(&self) -> &[u8] {
        let end = self.0.iter().position(|&c| c == 0).unwrap_or(N);
        &self.0[..end]
    }

    /// Lossy UTF-8 rendering of [`as_bytes`](Self::as_bytes).
    pub fn to_string_lossy(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

impl<const N: usize> Default for FixedStr<N> {
    fn default() -> Self {
        FixedStr([0u8; N])
    }
}

impl<const N: usize> std::fmt::Debug for FixedStr<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.to_string_lossy())
    }
}

/// HELLO body (master → slave).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hello {
    /// Master's name.
    pub name: FixedStr<NAME_LEN>,
    /// Lowest supported version.
    pub min_version: u16,
    /// Highest supported version.
    pub max_version: u16,
    /// Largest region index accepted.
    pub max_region: u16,
    /// Largest M2S ring index accepted.
    pub max_m2s_ring: u16,
    /// Largest S2M ring index accepted.
    pub max_s2m_ring: u16,
    /// Largest log2 ring size accepted.
    pub max_log2_ring_size: u8,
}

/// INIT body (slave → master).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Init {
    /// Protocol version (must be [`VERSION`]).
    pub version: u16,
    /// Interface id.
    pub id: u32,
    /// Raw mode byte (see [`Mode::from_wire`]).
    pub mode: u8,
    /// Shared secret, NUL padded.
    pub secret: FixedStr<SECRET_LEN>,
    /// Slave's name.
    pub name: FixedStr<NAME_LEN>,
}

/// ADD_REGION body (slave → master, with the region memfd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddRegion {
    /// Region index (sequential from 0).
    pub index: u16,
    /// Region size in bytes.
    pub size: u64,
}

/// ADD_RING body (slave → master, with the ring's interrupt eventfd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddRing {
    /// Flags; bit 0 ([`RING_FLAG_S2M`]) marks a slave-to-master ring.
    pub flags: u16,
    /// Ring index within its direction (sequential from 0).
    pub index: u16,
    /// Region holding the ring.
    pub region: u16,
    /// Offset of the ring header in the region.
    pub offset: u32,
    /// log2 of the number of descriptors.
    pub log2_ring_size: u8,
    /// Private header size (must be 0).
    pub private_hdr_size: u16,
}

/// DISCONNECT body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disconnect {
    /// Reason code.
    pub code: u32,
    /// Reason text.
    pub reason: FixedStr<REASON_LEN>,
}

/// A decoded control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg {
    /// ACK.
    Ack,
    /// HELLO.
    Hello(Hello),
    /// INIT.
    Init(Init),
    /// ADD_REGION.
    AddRegion(AddRegion),
    /// ADD_RING.
    AddRing(AddRing),
    /// CONNECT with the slave's interface name.
    Connect(FixedStr<NAME_LEN>),
    /// CONNECTED with the master's interface name.
    Connected(FixedStr<NAME_LEN>),
    /// DISCONNECT.
    Disconnect(Disconnect),
}

/// Why a received buffer is not a valid message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum MsgError {
    /// The message was not exactly 128 bytes.
    #[error("message size {0}, expected 128")]
    BadSize(usize),
    /// Unknown message type.
    #[error("unknown message type {0}")]
    UnknownType(u16),
}

fn rd_u16(b: &[u8; MSG_SIZE], off: usize) -> u16 {
    u16::from_ne_bytes([b[off], b[off + 1]])
}

fn rd_u32(b: &[u8; MSG_SIZE], off: usize) -> u32 {
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn rd_u64(b: &[u8; MSG_SIZE], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(a)
}

fn rd_str<const N: usize>(b: &[u8; MSG_SIZE], off: usize) -> FixedStr<N> {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[off..off + N]);
    FixedStr(a)
}

fn wr(b: &mut [u8; MSG_SIZE], off: usize, v: &[u8]) {
    b[off..off + v.len()].copy_from_slice(v);
}

impl Msg {
    /// The wire type value.
    pub fn msg_type(&self) -> u16 {
        match self {
            Msg::Ack => msg_type::ACK,
            Msg::Hello(_) => msg_type::HELLO,
            Msg::Init(_) => msg_type::INIT,
            Msg::AddRegion(_) => msg_type::ADD_REGION,
            Msg::AddRing(_) => msg_type::ADD_RING,
            Msg::Connect(_) => msg_type::CONNECT,
            Msg::Connected(_) => msg_type::CONNECTED,
            Msg::Disconnect(_) => msg_type::DISCONNECT,
        }
    }

    /// A DISCONNECT with the given code and reason (truncated to 95 bytes).
    pub fn disconnect(code: u32, reason: &str) -> Msg {
        Msg::Disconnect(Disconnect {
            code,
            reason: FixedStr::new(reason),
        })
    }

    /// Encode into the 128-byte wire form.
    pub fn encode(&self) -> [u8; MSG_SIZE] {
        let mut b = [0u8; MSG_SIZE];
        wr(&mut b, 0, &self.msg_type().to_ne_bytes());
        match self {
            Msg::Ack => {}
            Msg::Hello(h) => {
                wr(&mut b, 2, &h.name.0);
                wr(&mut b, 34, &h.min_version.to_ne_bytes());
                wr(&mut b, 36, &h.max_version.to_ne_bytes());
                wr(&mut b, 38, &h.max_region.to_ne_bytes());
                wr(&mut b, 40, &h.max_m2s_ring.to_ne_bytes());
                wr(&mut b, 42, &h.max_s2m_ring.to_ne_bytes());
                b[44] = h.max_log2_ring_size;
            }
            Msg::Init(i) => {
                wr(&mut b, 2, &i.version.to_ne_bytes());
                wr(&mut b, 4, &i.id.to_ne_bytes());
                b[8] = i.mode;
                wr(&mut b, 9, &i.secret.0);
                wr(&mut b, 33, &i.name.0);
            }
            Msg::AddRegion(r) => {
                wr(&mut b, 2, &r.index.to_ne_bytes());
                wr(&mut b, 4, &r.size.to_ne_bytes());
            }
            Msg::AddRing(r) => {
                wr(&mut b, 2, &r.flags.to_ne_bytes());
                wr(&mut b, 4, &r.index.to_ne_bytes());
                wr(&mut b, 6, &r.region.to_ne_bytes());
                wr(&mut b, 8, &r.offset.to_ne_bytes());
                b[12] = r.log2_ring_size;
                wr(&mut b, 13, &r.private_hdr_size.to_ne_bytes());
            }
            Msg::Connect(n) | Msg::Connected(n) => wr(&mut b, 2, &n.0),
            Msg::Disconnect(d) => {
                wr(&mut b, 2, &d.code.to_ne_bytes());
                wr(&mut b, 6, &d.reason.0);
            }
        }
        b
    }

    /// Decode a received buffer; anything but exactly 128 bytes of a known type is an error.
    pub fn decode(buf: &[u8]) -> Result<Msg, MsgError> {
        let b: &[u8; MSG_SIZE] = buf.try_into().map_err(|_| MsgError::BadSize(buf.len()))?;
        let t = rd_u16(b, 0);
        Ok(match t {
            msg_type::ACK => Msg::Ack,
            msg_type::HELLO => Msg::Hello(Hello {
                name: rd_str(b, 2),
                min_version: rd_u16(b, 34),
                max_version: rd_u16(b, 36),
                max_region: rd_u16(b, 38),
                max_m2s_ring: rd_u16(b, 40),
                max_s2m_ring: rd_u16(b, 42),
                max_log2_ring_size: b[44],
            }),
            msg_type::INIT => Msg::Init(Init {
                version: rd_u16(b, 2),
                id: rd_u32(b, 4),
                mode: b[8],
                secret: rd_str(b, 9),
                name: rd_str(b, 33),
            }),
            msg_type::ADD_REGION => Msg::AddRegion(AddRegion {
                index: rd_u16(b, 2),
                size: rd_u64(b, 4),
            }),
            msg_type::ADD_RING => Msg::AddRing(AddRing {
                flags: rd_u16(b, 2),
                index: rd_u16(b, 4),
                region: rd_u16(b, 6),
                offset: rd_u32(b, 8),
                log2_ring_size: b[12],
                private_hdr_size: rd_u16(b, 13),
            }),
            msg_type::CONNECT => Msg::Connect(rd_str(b, 2)),
            msg_type::CONNECTED => Msg::Connected(rd_str(b, 2)),
            msg_type::DISCONNECT => Msg::Disconnect(Disconnect {
                code: rd_u32(b, 2),
                reason: rd_str(b, 6),
            }),
            other => return Err(MsgError::UnknownType(other)),
        })
    }
}

/// Constant-time equality of two secret fields (every byte is examined whatever differs).
pub fn secret_eq(a: &FixedStr<SECRET_LEN>, b: &FixedStr<SECRET_LEN>) -> bool {
    let mut diff = 0u8;
    for i in 0..SECRET_LEN {
        diff |= std::hint::black_box(a.0[i] ^ b.0[i]);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip(m: Msg) {
        let b = m.encode();
        assert_eq!(b.len(), MSG_SIZE);
        assert_eq!(Msg::decode(&b), Ok(m));
    }

    #[test]
    fn all_messages_roundtrip() {
        roundtrip(Msg::Ack);
        roundtrip(Msg::Hello(Hello {
            name: FixedStr::new("quiver"),
            min_version: VERSION,
            max_version: VERSION,
            max_region: 255,
            max_m2s_ring: 255,
            max_s2m_ring: 255,
            max_log2_ring_size: 14,
        }));
        roundtrip(Msg::Init(Init {
            version: VERSION,
            id: 0xdead_beef,
            mode: 1,
            secret: FixedStr::new("s3cret"),
            name: FixedStr::new("slave"),
        }));
        roundtrip(Msg::AddRegion(AddRegion {
            index: 3,
            size: 1 << 40,
        }));
        roundtrip(Msg::AddRing(AddRing {
            flags: RING_FLAG_S2M,
            index: 2,
            region: 0,
            offset: 0x1234_5678,
            log2_ring_size: 10,
            private_hdr_size: 0,
        }));
        roundtrip(Msg::Connect(FixedStr::new("if0")));
        roundtrip(Msg::Connected(FixedStr::new("if1")));
        roundtrip(Msg::disconnect(7, "bad things"));
    }

    #[test]
    fn field_offsets_match_the_spec() {
        let b = Msg::AddRing(AddRing {
            flags: 1,
            index: 0x0203,
            region: 0x0405,
            offset: 0x0a0b_0c0d,
            log2_ring_size: 9,
            private_hdr_size: 0x1112,
        })
        .encode();
        assert_eq!(&b[0..2], &5u16.to_ne_bytes());
        assert_eq!(&b[4..6], &0x0203u16.to_ne_bytes());
        assert_eq!(&b[8..12], &0x0a0b_0c0du32.to_ne_bytes());
        assert_eq!(b[12], 9);
        assert_eq!(&b[13..15], &0x1112u16.to_ne_bytes());
        let b = Msg::Init(Init {
            version: VERSION,
            id: 5,
            mode: 0,
            secret: FixedStr::new("abc"),
            name: FixedStr::new("n"),
        })
        .encode();
        assert_eq!(&b[9..12], b"abc");
        assert_eq!(b[33], b'n');
        assert!(b[45..].iter().all(|&x| x == 0));
    }

    #[test]
    fn wrong_sizes_and_types_are_refused() {
        assert_eq!(Msg::decode(&[0u8; 127]), Err(MsgError::BadSize(127)));
        assert_eq!(Msg::decode(&[0u8; 129]), Err(MsgError::BadSize(129)));
        assert_eq!(Msg::decode(&[]), Err(MsgError::BadSize(0)));
        assert_eq!(Msg::decode(&[0u8; 128]), Err(MsgError::UnknownType(0)));
    }

    #[test]
    fn strings_without_nul_are_bounded() {
        let mut b = Msg::Connect(FixedStr::default()).encode();
        b[2..34].fill(b'x');
        b[34] = b'y';
        match Msg::decode(&b).unwrap() {
            Msg::Connect(n) => assert_eq!(n.as_bytes(), &[b'x'; 32]),
            m => panic!("{m:?}"),
        }
        let s = FixedStr::<SECRET_LEN>::new("0123456789012345678901234567");
        assert_eq!(s.as_bytes().len(), 23);
    }

    #[test]
    fn secret_comparison() {
        let a = FixedStr::<SECRET_LEN>::new("abc");
        assert!(secret_eq(&a, &FixedStr::new("abc")));
        assert!(!secret_eq(&a, &FixedStr::new("abd")));
        assert!(!secret_eq(&a, &FixedStr::new("")));
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_buffers_never_panics(v in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Msg::decode(&v);
        }

        #[test]
        fn decoding_arbitrary_128_byte_buffers_never_panics(
            v in proptest::collection::vec(any::<u8>(), 128),
            t in 0u16..10,
        ) {
            let mut v = v;
            v[0..2].copy_from_slice(&t.to_ne_bytes());
            if let Ok(m) = Msg::decode(&v) {
                // Re-encoding a decoded message decodes to the same message.
                prop_assert_eq!(Msg::decode(&m.encode()), Ok(m));
            }
        }
    }
}
