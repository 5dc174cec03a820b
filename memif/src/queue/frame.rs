//! What crosses the data path's boundary: a received frame still in the peer's memory
//! ([`PeerFrame`]), where receive bursts put frames ([`RxSink`], [`HoldSink`]), and where
//! transmitted frames come from ([`TxSource`]).

use crate::region::Region;

use super::held::HeldFrames;
use super::shared::Segment;

/// A received frame, still in the peer's memory: its length and a bounds-checked copy.
///
/// The descriptors were read once and checked; the bytes are copied only by
/// [`PeerFrame::copy_to`], so the peer can change them under us but never make us read outside
/// its regions.
pub struct PeerFrame<'a> {
    pub(super) regions: &'a [Region],
    pub(super) segments: &'a [Segment],
    pub(super) len: usize,
}

impl PeerFrame<'_> {
    /// The frame's length in bytes (at least 1, at most [`MAX_FRAME`](crate::MAX_FRAME)).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: empty descriptors are refused before a frame is offered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the frame's bytes `[offset, offset + dst.len())` into `dst`. Returns false,
    /// copying nothing, if that range is not inside the frame.
    pub fn copy_to(&self, offset: usize, dst: &mut [u8]) -> bool {
        if offset
            .checked_add(dst.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        let (mut skip, mut out) = (offset, 0usize);
        for s in self.segments {
            if out == dst.len() {
                break;
            }
            let len = s.len as usize;
            if skip >= len {
                skip -= len;
                continue;
            }
            let take = (len - skip).min(dst.len() - out);
            let ok = self
                .regions
                .get(usize::from(s.region))
                .is_some_and(|r| r.copy_out(s.offset + skip as u64, &mut dst[out..out + take]));
            if !ok {
                return false;
            }
            out += take;
            skip = 0;
        }
        out == dst.len()
    }
}

/// Where a receive burst puts frames.
pub trait RxSink {
    /// Takes `frame` (copying it out) and returns true, or returns false when it has no room:
    /// the frame then stays in the ring for the next burst and the burst ends.
    fn deliver(&mut self, frame: &PeerFrame<'_>) -> bool;
}

impl<F: FnMut(&PeerFrame<'_>) -> bool> RxSink for F {
    fn deliver(&mut self, frame: &PeerFrame<'_>) -> bool {
        self(frame)
    }
}

/// Frames to transmit, read piecewise so they need not be contiguous.
pub trait TxSource {
    /// How many frames.
    fn frames(&self) -> usize;
    /// Length of frame `i`.
    fn frame_len(&self, i: usize) -> usize;
    /// The contiguous bytes of frame `i` starting at `offset` (non-empty while
    /// `offset < frame_len(i)`).
    fn bytes_at(&self, i: usize, offset: usize) -> &[u8];
    /// When frame `i` is a frame held in another peer's memory (see [`HeldFrames`]): where,
    /// as (frames, token, offset of frame `i`'s first byte in the held frame). It is then
    /// copied from that memory straight into this peer's, and [`TxSource::bytes_at`] is not
    /// asked for it. `None` (the default): read it with `bytes_at`.
    fn held(&self, i: usize) -> Option<(&HeldFrames, u32, usize)> {
        let _ = i;
        None
    }
}

/// What a [`HoldSink`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Copied out: the frame's slot can go back to the peer.
    Copied,
    /// Kept in the peer's memory under the [`Hold`] it was offered: the slot stays taken until
    /// [`HeldFrames::release`] is called with its token.
    Held,
    /// No room: the frame stays in the ring for the next burst and the burst ends.
    NoRoom,
}

/// The right to keep a received frame in the peer's memory, offered for one-descriptor frames
/// by [`RxQueue::receive_holding`](crate::RxQueue::receive_holding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    pub(super) token: u32,
}

impl Hold {
    /// The token naming the frame in its [`HeldFrames`].
    pub fn token(&self) -> u32 {
        self.token
    }
}

/// Where a receive burst that may hold frames puts them.
pub trait HoldSink {
    /// Copies `frame` out, or (when offered a `hold`) keeps it where it is, or has no room.
    fn take(&mut self, frame: &PeerFrame<'_>, hold: Option<Hold>) -> Taken;
}

impl TxSource for [&[u8]] {
    fn frames(&self) -> usize {
        self.len()
    }
    fn frame_len(&self, i: usize) -> usize {
        self[i].len()
    }
    fn bytes_at(&self, i: usize, offset: usize) -> &[u8] {
        self[i].get(offset..).unwrap_or(&[])
    }
}
