//! The copy-mode data path of one ring, shared by [`Interface`](crate::Interface)'s own burst
//! API and by queues detached from it for other threads ([`RxQueue`], [`TxQueue`]).
//!
//! Received frames are offered as a [`PeerFrame`]: the chain's descriptors, read once into a
//! private list and validated, plus a bounds-checked copy out of the peer's memory. So a frame is
//! copied exactly once, from the peer's buffer straight into wherever the application wants it
//! (a packet buffer of a forwarder, say). Transmitted frames come from any [`TxSource`] and are
//! copied once, into the peer's buffer.
//!
//! A detached [`RxQueue`] can also receive without copying ([`RxQueue::receive_holding`]): a
//! one-descriptor frame stays in the peer's memory, named by a token of the queue's
//! [`HeldFrames`], its slot kept from the peer until released. A frame held from one peer can be
//! transmitted to another ([`TxSource::held`]): one copy, region to region.
//! [`RxQueue::forward_to`] does both in one call for a cross-connect: held frames go straight
//! to another connection's transmit queue and are released, never more than its ring can take.

mod detached;
mod forward;
mod frame;
mod held;
mod receive;
mod shared;
mod transmit;

pub use detached::{RxQueue, TxQueue, TxReport, MAX_FORWARD_BURST};
pub use forward::Forwarded;
pub use frame::{Hold, HoldSink, PeerFrame, RxSink, Taken, TxSource};
pub use held::{HeldFrames, HeldRx};
pub use receive::MAX_SEGMENTS;
pub(crate) use receive::{receive, RxScratch};
pub(crate) use shared::{fd_ready, refill, Queue, Shared};
pub(crate) use transmit::{transmit, unconsumed};
