//! The per-packet path: a session's keys as plain data ([`TransportKeys`], shareable read-only
//! with workers), a sending counter that any number of threads may draw from ([`SendCounter`]),
//! and encryption and decryption in place on the caller's buffer. Nothing here allocates, locks or
//! reads a clock.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use zeroize::Zeroize;

use crate::crypto::{aead_open, aead_seal, TAG_LEN};
use crate::replay::{ReplayError, ReplayWindow};
use crate::timers::REJECT_AFTER_MESSAGES;
use crate::wire::{Transport, WireError, TRANSPORT_HEADER_LEN, TYPE_TRANSPORT};

/// A session's symmetric state from one side: what a worker needs to encrypt and decrypt.
#[derive(Clone)]
pub struct TransportKeys {
    /// Key of the messages this side sends.
    pub send: [u8; 32],
    /// Key of the messages this side receives.
    pub recv: [u8; 32],
    /// This side's index: the receiver index of messages sent to it.
    pub local_index: u32,
    /// The peer's index: the receiver index this side writes.
    pub remote_index: u32,
    /// When the handshake that made these keys completed here.
    pub created: Instant,
    /// Whether this side initiated that handshake (only the initiator rekeys by age).
    pub initiator: bool,
}

impl Drop for TransportKeys {
    fn drop(&mut self) {
        self.send.zeroize();
        self.recv.zeroize();
    }
}

impl std::fmt::Debug for TransportKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportKeys")
            .field("local_index", &self.local_index)
            .field("remote_index", &self.remote_index)
            .field("initiator", &self.initiator)
            .finish_non_exhaustive()
    }
}

/// Why a packet could not be sealed or opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// Not a transport message.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The message is for another session.
    #[error("receiver index {0:#x} is not this session's")]
    WrongIndex(u32),
    /// Refused by the replay window.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The tag did not verify.
    #[error("transport message failed authentication")]
    Authentication,
    /// The keypair has sent REJECT_AFTER_MESSAGES messages.
    #[error("sending counter exhausted")]
    CounterExhausted,
    /// The buffer cannot hold the header, padding and tag.
    #[error("buffer of {have} bytes too small, {need} needed")]
    BufferTooSmall {
        /// Bytes given.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
}

/// The next sending counter of a keypair; shared by every thread sending with it.
#[derive(Debug, Default)]
pub struct SendCounter(AtomicU64);

impl SendCounter {
    /// A counter starting at 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next counter, or `None` once REJECT_AFTER_MESSAGES have been sent.
    pub fn next(&self) -> Option<u64> {
        let c = self.0.fetch_add(1, Ordering::Relaxed);
        (c < REJECT_AFTER_MESSAGES).then_some(c)
    }

    /// Counters taken so far.
    pub fn sent(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// A counter that will hand out `next` next (tests of the message limits).
    pub fn starting_at(next: u64) -> Self {
        Self(AtomicU64::new(next))
    }
}

/// The padded length of an inner packet of `len` bytes: the next multiple of 16.
pub fn padded_len(len: usize) -> usize {
    len.div_ceil(16) * 16
}

/// The padded length of an inner packet of `len` bytes on a tunnel of MTU `mtu`: the next
/// multiple of 16, but never past the MTU (the protocol's padding rule, so that a packet of the
/// tunnel's full MTU still fits the underlay's), nor below `len`.
pub fn padded_len_within(len: usize, mtu: usize) -> usize {
    padded_len(len).min(mtu.max(len))
}

/// Length of the transport message for an inner packet of `len` bytes.
pub fn sealed_len(len: usize) -> usize {
    TRANSPORT_HEADER_LEN + padded_len(len) + TAG_LEN
}

/// Length of the transport message for an inner packet of `len` bytes on a tunnel of MTU
/// `mtu` (see [`padded_len_within`]).
pub fn sealed_len_within(len: usize, mtu: usize) -> usize {
    TRANSPORT_HEADER_LEN + padded_len_within(len, mtu) + TAG_LEN
}

/// Encrypts in place. The caller has put the inner packet at `buf[16..16 + len]` (leaving 16
/// bytes of headroom for the header); `buf` must hold [`sealed_len`]`(len)` bytes. Writes the
/// header, zero padding and tag and returns the message's length.
pub fn seal(
    keys: &TransportKeys,
    counter: u64,
    buf: &mut [u8],
    len: usize,
) -> Result<usize, TransportError> {
    seal_within(keys, counter, buf, len, usize::MAX)
}

/// [`seal`] on a tunnel of MTU `mtu`: the padding stops at the MTU; `buf` must hold
/// [`sealed_len_within`]`(len, mtu)` bytes.
pub fn seal_within(
    keys: &TransportKeys,
    counter: u64,
    buf: &mut [u8],
    len: usize,
    mtu: usize,
) -> Result<usize, TransportError> {
    let total = sealed_len_within(len, mtu);
    if buf.len() < total {
        return Err(TransportError::BufferTooSmall {
            have: buf.len(),
            need: total,
        });
    }
    let msg = &mut buf[..total];
    msg[TRANSPORT_HEADER_LEN + len..total - TAG_LEN].fill(0);
    let mut view = Transport::new_init(msg).map_err(TransportError::Wire)?;
    view.set_receiver(keys.remote_index);
    view.set_counter(counter);
    aead_seal(&keys.send, counter, view.payload_mut(), &[]);
    Ok(total)
}

/// The counter and receiver index of a transport message, checked, without decrypting: enough to
/// find the session and consult its replay window.
pub fn peek(buf: &[u8]) -> Result<(u32, u64), WireError> {
    let v = Transport::new_checked(buf)?;
    Ok((v.receiver(), v.counter()))
}

/// Decrypts in place and returns the message's counter and where the plaintext (the inner packet
/// and its padding; empty for a keepalive) now is in `buf`. Does not consult a replay window: see
/// [`open_checked`].
pub fn open(keys: &TransportKeys, buf: &mut [u8]) -> Result<(u64, Range<usize>), TransportError> {
    let mut view = Transport::new_checked(buf)?;
    if view.receiver() != keys.local_index {
        return Err(TransportError::WrongIndex(view.receiver()));
    }
    let counter = view.counter();
    if !aead_open(&keys.recv, counter, view.payload_mut(), &[]) {
        return Err(TransportError::Authentication);
    }
    let len = view.as_bytes().len();
    Ok((counter, TRANSPORT_HEADER_LEN..len - TAG_LEN))
}

/// [`open`] with the replay window: refuses a replayed or too old counter before any cipher work,
/// and records the counter only once the message authenticated.
pub fn open_checked(
    keys: &TransportKeys,
    window: &mut ReplayWindow,
    buf: &mut [u8],
) -> Result<(u64, Range<usize>), TransportError> {
    let (_, counter) = peek(buf)?;
    window.check(counter)?;
    let opened = open(keys, buf)?;
    window.accept(counter)?;
    Ok(opened)
}

/// The length of the IPv4 or IPv6 packet at the start of `plain` (from its header), or `None` if
/// `plain` does not start with one that fits: what a decrypted packet is trimmed to.
pub fn inner_packet_len(plain: &[u8]) -> Option<usize> {
    let len = match plain.first()? >> 4 {
        4 if plain.len() >= 20 => usize::from(u16::from_be_bytes([plain[2], plain[3]])),
        6 if plain.len() >= 40 => 40 + usize::from(u16::from_be_bytes([plain[4], plain[5]])),
        _ => return None,
    };
    (len <= plain.len()).then_some(len)
}

/// Whether `buf` starts like a transport message (for a classifier that hands handshakes
/// elsewhere).
pub fn is_transport(buf: &[u8]) -> bool {
    buf.len() >= 4 && buf[..4] == [TYPE_TRANSPORT, 0, 0, 0]
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn pair() -> (TransportKeys, TransportKeys) {
        let now = Instant::now();
        let a = TransportKeys {
            send: [1; 32],
            recv: [2; 32],
            local_index: 10,
            remote_index: 20,
            created: now,
            initiator: true,
        };
        let b = TransportKeys {
            send: [2; 32],
            recv: [1; 32],
            local_index: 20,
            remote_index: 10,
            created: now,
            initiator: false,
        };
        (a, b)
    }

    #[test]
    fn round_trip_with_padding() {
        let (a, b) = pair();
        for len in [0usize, 1, 15, 16, 17, 1400] {
            let mut buf = vec![0u8; sealed_len(len)];
            for (i, x) in buf[16..16 + len].iter_mut().enumerate() {
                *x = i as u8;
            }
            let n = seal(&a, 7, &mut buf, len).unwrap();
            assert_eq!(n, 16 + padded_len(len) + 16);
            assert_eq!(n % 16, 0);
            let (c, range) = open(&b, &mut buf).unwrap();
            assert_eq!(c, 7);
            assert_eq!(range.len(), padded_len(len));
            assert!(buf[16..16 + len]
                .iter()
                .enumerate()
                .all(|(i, x)| *x == i as u8));
            assert!(buf[16 + len..range.end].iter().all(|x| *x == 0));
        }
    }

    #[test]
    fn padding_stops_at_the_mtu() {
        // (len, mtu, padded): the next multiple of 16, never past the MTU nor below len.
        for (len, mtu, padded) in [
            (1420, 1420, 1420),
            (1410, 1420, 1420),
            (1400, 1420, 1408),
            (1440, 1440, 1440),
            (100, 1420, 112),
            (1430, 1420, 1430),
            (0, 1420, 0),
        ] {
            assert_eq!(padded_len_within(len, mtu), padded, "{len} {mtu}");
        }
        let (a, b) = pair();
        let mut buf = vec![0u8; sealed_len_within(1410, 1420)];
        let n = seal_within(&a, 3, &mut buf, 1410, 1420).unwrap();
        assert_eq!(n, 16 + 1420 + 16);
        let (_, range) = open(&b, &mut buf).unwrap();
        assert_eq!(range.len(), 1420);
    }

    #[test]
    fn refusals_are_named() {
        let (a, b) = pair();
        let mut buf = [0u8; 64];
        let n = seal(&a, 0, &mut buf, 20).unwrap();
        let sealed = buf;
        assert_eq!(open(&a, &mut buf[..n]), Err(TransportError::WrongIndex(20)));
        buf[40] ^= 1;
        assert_eq!(open(&b, &mut buf[..n]), Err(TransportError::Authentication));
        let mut window = ReplayWindow::new();
        let mut again = sealed;
        open_checked(&b, &mut window, &mut again[..n]).unwrap();
        let mut again = sealed;
        assert_eq!(
            open_checked(&b, &mut window, &mut again[..n]),
            Err(TransportError::Replay(ReplayError::Duplicate(0)))
        );
        assert_eq!(
            seal(&a, 0, &mut buf[..47], 20),
            Err(TransportError::BufferTooSmall { have: 47, need: 64 })
        );
    }

    #[test]
    fn counter_limits() {
        let c = SendCounter::starting_at(REJECT_AFTER_MESSAGES - 1);
        assert_eq!(c.next(), Some(REJECT_AFTER_MESSAGES - 1));
        assert_eq!(c.next(), None);
    }

    #[test]
    fn inner_lengths() {
        let mut p = [0u8; 48];
        p[0] = 0x45;
        p[3] = 28;
        assert_eq!(inner_packet_len(&p), Some(28));
        p[3] = 49;
        assert_eq!(inner_packet_len(&p), None);
        p[0] = 0x60;
        p[5] = 8;
        assert_eq!(inner_packet_len(&p), Some(48));
        assert_eq!(inner_packet_len(&[]), None);
    }
}
