//! What the sending and receiving sides share.

use std::sync::atomic::{AtomicBool, AtomicU64};

/// A value alone on its cache lines, so that one thread writing it does not slow another reading
/// its neighbours (128 bytes: adjacent-line prefetch pairs 64-byte lines).
#[derive(Default)]
#[repr(align(128))]
pub struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// State the two sides share (across threads when they have one each). Fields written while
/// traffic flows sit on their own cache lines.
#[derive(Default)]
pub struct Shared {
    /// Stop now (a signal, or an error on the other side).
    pub stop: Padded<AtomicBool>,
    pub tx_up: AtomicBool,
    pub rx_up: AtomicBool,
    /// Frames the transmit ring took; final once `tx_done` is set.
    pub sent: Padded<AtomicU64>,
    /// Sending is over.
    pub tx_done: Padded<AtomicBool>,
    /// Distinct frames received so far; published only with `--window`.
    pub unique: Padded<AtomicU64>,
}
