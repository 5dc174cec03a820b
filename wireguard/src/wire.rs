//! Checked views of WireGuard's four messages (whitepaper §5.4): a length and type check once in
//! `new_checked`, then accessors that cannot panic. Views borrow the caller's buffer (`&[u8]` to
//! read, `&mut [u8]` to write); nothing is copied or allocated. All integers are little-endian.

use crate::crypto::{MAC_LEN, TAG_LEN};

/// Message type of a handshake initiation.
pub const TYPE_INITIATION: u8 = 1;
/// Message type of a handshake response.
pub const TYPE_RESPONSE: u8 = 2;
/// Message type of a cookie reply.
pub const TYPE_COOKIE_REPLY: u8 = 3;
/// Message type of transport data.
pub const TYPE_TRANSPORT: u8 = 4;

/// Length of a handshake initiation.
pub const INITIATION_LEN: usize = 148;
/// Length of a handshake response.
pub const RESPONSE_LEN: usize = 92;
/// Length of a cookie reply.
pub const COOKIE_REPLY_LEN: usize = 64;
/// Header of a transport message (type, receiver index, counter); the ciphertext follows.
pub const TRANSPORT_HEADER_LEN: usize = 16;
/// Shortest transport message: a keepalive (header and a tag over nothing).
pub const TRANSPORT_MIN_LEN: usize = TRANSPORT_HEADER_LEN + TAG_LEN;
/// Longest datagram accepted as a transport message (a 64 KiB UDP payload).
pub const TRANSPORT_MAX_LEN: usize = 65_535 - 8;
/// Bytes a transport message adds to an inner packet (before padding).
pub const TRANSPORT_OVERHEAD: usize = TRANSPORT_MIN_LEN;

/// Why a byte string is not a WireGuard message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer than the 4 bytes of a message header.
    #[error("message truncated: {len} bytes, no header")]
    NoHeader {
        /// Bytes given.
        len: usize,
    },
    /// The first byte is not a message type, or the 3 reserved bytes are not zero.
    #[error("unknown message type {0:#x}")]
    UnknownType(u32),
    /// Shorter than its type requires.
    #[error("message of type {kind} truncated: {len} bytes, {want} needed")]
    Truncated {
        /// The message type.
        kind: u8,
        /// Bytes given.
        len: usize,
        /// Bytes its type needs.
        want: usize,
    },
    /// Longer than its type allows.
    #[error("message of type {kind} oversized: {len} bytes, at most {max}")]
    Oversized {
        /// The message type.
        kind: u8,
        /// Bytes given.
        len: usize,
        /// Bytes its type allows.
        max: usize,
    },
}

/// The type of a message, from its 4-byte header (type and 3 zero bytes).
pub fn message_type(buf: &[u8]) -> Result<u8, WireError> {
    let Some(head) = buf.get(..4) else {
        return Err(WireError::NoHeader { len: buf.len() });
    };
    let word = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    match word {
        1..=4 => Ok(word as u8),
        _ => Err(WireError::UnknownType(word)),
    }
}

fn check(buf: &[u8], kind: u8, min: usize, max: usize) -> Result<(), WireError> {
    let t = message_type(buf)?;
    if t != kind {
        return Err(WireError::UnknownType(u32::from(t)));
    }
    if buf.len() < min {
        return Err(WireError::Truncated {
            kind,
            len: buf.len(),
            want: min,
        });
    }
    if buf.len() > max {
        return Err(WireError::Oversized {
            kind,
            len: buf.len(),
            max,
        });
    }
    Ok(())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn array<const N: usize>(b: &[u8], at: usize) -> &[u8; N] {
    b[at..at + N].try_into().expect("range has length N")
}

fn array_mut<const N: usize>(b: &mut [u8], at: usize) -> &mut [u8; N] {
    (&mut b[at..at + N]).try_into().expect("range has length N")
}

/// Writes a 4-byte header: the type and three zero bytes.
fn write_header(b: &mut [u8], kind: u8) {
    b[..4].copy_from_slice(&[kind, 0, 0, 0]);
}

macro_rules! view {
    ($(#[$doc:meta])* $name:ident, $kind:expr, $min:expr, $max:expr) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name<T>(T);

        impl<T: AsRef<[u8]>> $name<T> {
            /// Checks the header and length; the view's accessors cannot fail afterwards.
            pub fn new_checked(buf: T) -> Result<Self, WireError> {
                check(buf.as_ref(), $kind, $min, $max)?;
                Ok(Self(buf))
            }

            /// The whole message.
            pub fn as_bytes(&self) -> &[u8] {
                self.0.as_ref()
            }

            /// The buffer back.
            pub fn into_inner(self) -> T {
                self.0
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// Makes `buf` this message: writes the header and checks the length (the other
            /// fields are left for the setters).
            pub fn new_init(mut buf: T) -> Result<Self, WireError> {
                let b = buf.as_mut();
                if b.len() >= 4 {
                    write_header(b, $kind);
                }
                Self::new_checked(buf)
            }
        }
    };
}

macro_rules! field {
    ($get:ident, $get_mut:ident, $at:expr, $n:expr, $doc:literal) => {
        #[doc = $doc]
        pub fn $get(&self) -> &[u8; $n] {
            array(self.0.as_ref(), $at)
        }
        #[doc = $doc]
        #[doc = " (to write)."]
        pub fn $get_mut(&mut self) -> &mut [u8; $n]
        where
            T: AsMut<[u8]>,
        {
            array_mut(self.0.as_mut(), $at)
        }
    };
}

macro_rules! index {
    ($get:ident, $set:ident, $at:expr, $doc:literal) => {
        #[doc = $doc]
        pub fn $get(&self) -> u32 {
            u32_at(self.0.as_ref(), $at)
        }
        #[doc = $doc]
        #[doc = " (to write)."]
        pub fn $set(&mut self, v: u32)
        where
            T: AsMut<[u8]>,
        {
            self.0.as_mut()[$at..$at + 4].copy_from_slice(&v.to_le_bytes());
        }
    };
}

view!(
    /// Handshake initiation (type 1, 148 bytes).
    Initiation, TYPE_INITIATION, INITIATION_LEN, INITIATION_LEN
);
view!(
    /// Handshake response (type 2, 92 bytes).
    Response, TYPE_RESPONSE, RESPONSE_LEN, RESPONSE_LEN
);
view!(
    /// Cookie reply (type 3, 64 bytes).
    CookieReply, TYPE_COOKIE_REPLY, COOKIE_REPLY_LEN, COOKIE_REPLY_LEN
);
view!(
    /// Transport data (type 4, 32 bytes or more: header, then the encrypted packet and its tag).
    Transport, TYPE_TRANSPORT, TRANSPORT_MIN_LEN, TRANSPORT_MAX_LEN
);

/// Offset of mac1 in an initiation.
pub const INITIATION_MAC1: usize = 116;
/// Offset of mac1 in a response.
pub const RESPONSE_MAC1: usize = 60;

impl<T: AsRef<[u8]>> Initiation<T> {
    index!(
        sender,
        set_sender,
        4,
        "The initiator's index for this handshake."
    );
    field!(
        ephemeral,
        ephemeral_mut,
        8,
        32,
        "The initiator's ephemeral public key."
    );
    field!(
        encrypted_static,
        encrypted_static_mut,
        40,
        48,
        "The initiator's static key, sealed."
    );
    field!(
        encrypted_timestamp,
        encrypted_timestamp_mut,
        88,
        28,
        "The TAI64N timestamp, sealed."
    );
    field!(mac1, mac1_mut, INITIATION_MAC1, MAC_LEN, "mac1.");
    field!(mac2, mac2_mut, INITIATION_MAC1 + MAC_LEN, MAC_LEN, "mac2.");
}

impl<T: AsRef<[u8]>> Response<T> {
    index!(
        sender,
        set_sender,
        4,
        "The responder's index for the session."
    );
    index!(
        receiver,
        set_receiver,
        8,
        "The initiator's index (its initiation's sender)."
    );
    field!(
        ephemeral,
        ephemeral_mut,
        12,
        32,
        "The responder's ephemeral public key."
    );
    field!(
        encrypted_nothing,
        encrypted_nothing_mut,
        44,
        TAG_LEN,
        "The sealed empty payload."
    );
    field!(mac1, mac1_mut, RESPONSE_MAC1, MAC_LEN, "mac1.");
    field!(mac2, mac2_mut, RESPONSE_MAC1 + MAC_LEN, MAC_LEN, "mac2.");
}

impl<T: AsRef<[u8]>> CookieReply<T> {
    index!(
        receiver,
        set_receiver,
        4,
        "The index of the message this answers."
    );
    field!(nonce, nonce_mut, 8, 24, "The XChaCha20 nonce.");
    field!(
        encrypted_cookie,
        encrypted_cookie_mut,
        32,
        32,
        "The cookie, sealed."
    );
}

impl<T: AsRef<[u8]>> Transport<T> {
    index!(
        receiver,
        set_receiver,
        4,
        "The receiver's index of the session."
    );

    /// The message's counter (its AEAD nonce).
    pub fn counter(&self) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.0.as_ref()[8..16]);
        u64::from_le_bytes(w)
    }

    /// Sets the counter.
    pub fn set_counter(&mut self, v: u64)
    where
        T: AsMut<[u8]>,
    {
        self.0.as_mut()[8..16].copy_from_slice(&v.to_le_bytes());
    }

    /// The encrypted packet and its tag.
    pub fn payload(&self) -> &[u8] {
        &self.0.as_ref()[TRANSPORT_HEADER_LEN..]
    }

    /// The encrypted packet and its tag (to write or decrypt in place).
    pub fn payload_mut(&mut self) -> &mut [u8]
    where
        T: AsMut<[u8]>,
    {
        &mut self.0.as_mut()[TRANSPORT_HEADER_LEN..]
    }
}

/// Any of the four messages, checked.
#[derive(Debug)]
pub enum Message<T> {
    /// Type 1.
    Initiation(Initiation<T>),
    /// Type 2.
    Response(Response<T>),
    /// Type 3.
    CookieReply(CookieReply<T>),
    /// Type 4.
    Transport(Transport<T>),
}

impl<T: AsRef<[u8]>> Message<T> {
    /// Checks `buf` as whichever message its header names.
    pub fn parse(buf: T) -> Result<Self, WireError> {
        Ok(match message_type(buf.as_ref())? {
            TYPE_INITIATION => Message::Initiation(Initiation::new_checked(buf)?),
            TYPE_RESPONSE => Message::Response(Response::new_checked(buf)?),
            TYPE_COOKIE_REPLY => Message::CookieReply(CookieReply::new_checked(buf)?),
            _ => Message::Transport(Transport::new_checked(buf)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_types_are_checked() {
        assert_eq!(
            Message::parse(&[1u8, 0][..]).unwrap_err(),
            WireError::NoHeader { len: 2 }
        );
        assert_eq!(
            Message::parse(&[5u8, 0, 0, 0][..]).unwrap_err(),
            WireError::UnknownType(5)
        );
        assert_eq!(
            Message::parse(&[1u8, 0, 1, 0][..]).unwrap_err(),
            WireError::UnknownType(0x10001)
        );
        let mut b = [0u8; 149];
        b[0] = 1;
        assert_eq!(
            Initiation::new_checked(&b[..147]).unwrap_err(),
            WireError::Truncated {
                kind: 1,
                len: 147,
                want: 148
            }
        );
        assert_eq!(
            Initiation::new_checked(&b[..]).unwrap_err(),
            WireError::Oversized {
                kind: 1,
                len: 149,
                max: 148
            }
        );
        assert!(Initiation::new_checked(&b[..148]).is_ok());
        assert_eq!(
            Response::new_checked(&b[..92]).unwrap_err(),
            WireError::UnknownType(1)
        );
        let mut t = [0u8; 31];
        t[0] = 4;
        assert_eq!(
            Transport::new_checked(&t[..]).unwrap_err(),
            WireError::Truncated {
                kind: 4,
                len: 31,
                want: 32
            }
        );
    }

    #[test]
    fn fields_round_trip() {
        let mut b = [0u8; RESPONSE_LEN];
        let mut r = Response::new_init(&mut b[..]).unwrap();
        r.set_sender(0x01020304);
        r.set_receiver(7);
        r.mac2_mut().fill(0xaa);
        assert_eq!(b[..12], [2, 0, 0, 0, 4, 3, 2, 1, 7, 0, 0, 0]);
        assert_eq!(b[76..92], [0xaa; 16]);
        let r = Response::new_checked(&b[..]).unwrap();
        assert_eq!((r.sender(), r.receiver()), (0x01020304, 7));

        let mut t = [0u8; 48];
        let mut v = Transport::new_init(&mut t[..]).unwrap();
        v.set_counter(0x1122334455667788);
        v.set_receiver(9);
        assert_eq!(v.payload_mut().len(), 32);
        assert_eq!(t[8..16], 0x1122334455667788u64.to_le_bytes());
    }
}
