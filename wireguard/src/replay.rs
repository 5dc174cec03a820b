//! The receive side's replay window (RFC 6479's ring of bitmap words): a counter is accepted once,
//! and only if it is newer than the highest seen or within [`WINDOW`] of it. 1 KiB per keypair,
//! constant time per packet, no allocation.

use crate::timers::REJECT_AFTER_MESSAGES;

const WORD_BITS: u64 = 64;
const RING_WORDS: usize = 128;
/// How far below the highest counter seen a counter is still accepted (8,128 messages).
pub const WINDOW: u64 = (RING_WORDS as u64 - 1) * WORD_BITS;

/// Why a counter is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// Already received.
    #[error("counter {0} replayed")]
    Duplicate(u64),
    /// Older than the window.
    #[error("counter {0} older than the replay window")]
    TooOld(u64),
    /// At or past REJECT_AFTER_MESSAGES: no keypair may use it.
    #[error("counter {0} past REJECT_AFTER_MESSAGES")]
    Exhausted(u64),
}

/// A replay window for one keypair's receiving direction.
#[derive(Clone)]
pub struct ReplayWindow {
    /// The highest counter accepted (0 before any).
    last: u64,
    ring: [u64; RING_WORDS],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ReplayWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReplayWindow {{ last: {} }}", self.last)
    }
}

impl ReplayWindow {
    /// An empty window: every counter from 0 up is new.
    pub fn new() -> Self {
        Self {
            last: 0,
            ring: [0; RING_WORDS],
        }
    }

    /// Whether `counter` would be accepted, without recording it. Checked before decrypting, so a
    /// replay costs no cipher work; [`accept`](Self::accept) records it after the tag verified.
    pub fn check(&self, counter: u64) -> Result<(), ReplayError> {
        if counter >= REJECT_AFTER_MESSAGES {
            return Err(ReplayError::Exhausted(counter));
        }
        if counter > self.last {
            return Ok(());
        }
        if self.last - counter > WINDOW {
            return Err(ReplayError::TooOld(counter));
        }
        let (word, bit) = Self::position(counter);
        if self.ring[word] & bit != 0 {
            return Err(ReplayError::Duplicate(counter));
        }
        Ok(())
    }

    /// Checks `counter` and records it as received.
    pub fn accept(&mut self, counter: u64) -> Result<(), ReplayError> {
        self.check(counter)?;
        if counter > self.last {
            // Clear the words the window slides over (at most the whole ring).
            let current = self.last / WORD_BITS;
            let target = counter / WORD_BITS;
            let steps = (target - current).min(RING_WORDS as u64);
            for i in 1..=steps {
                self.ring[((current + i) % RING_WORDS as u64) as usize] = 0;
            }
            self.last = counter;
        }
        let (word, bit) = Self::position(counter);
        self.ring[word] |= bit;
        Ok(())
    }

    fn position(counter: u64) -> (usize, u64) {
        let word = ((counter / WORD_BITS) % RING_WORDS as u64) as usize;
        (word, 1u64 << (counter % WORD_BITS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order() {
        let mut w = ReplayWindow::new();
        for c in 0..20_000 {
            w.accept(c).unwrap();
        }
    }

    #[test]
    fn out_of_order_within_window_and_duplicates() {
        let mut w = ReplayWindow::new();
        w.accept(5000).unwrap();
        // Everything within the window below 5000, in reverse, is new once.
        for c in (0..5000).rev() {
            w.accept(c).unwrap();
        }
        for c in [0, 1, 4999, 5000] {
            assert_eq!(w.accept(c), Err(ReplayError::Duplicate(c)));
        }
        w.accept(5002).unwrap();
        w.accept(5001).unwrap();
        assert_eq!(w.accept(5001), Err(ReplayError::Duplicate(5001)));
    }

    #[test]
    fn too_old() {
        let mut w = ReplayWindow::new();
        w.accept(100_000).unwrap();
        assert_eq!(w.check(100_000 - WINDOW), Ok(()));
        assert_eq!(
            w.accept(100_000 - WINDOW - 1),
            Err(ReplayError::TooOld(100_000 - WINDOW - 1))
        );
        const { assert!(WINDOW >= 2048) };
        // A jump past the ring forgets everything older.
        w.accept(100_000 + 10 * WINDOW).unwrap();
        assert!(matches!(w.accept(100_000), Err(ReplayError::TooOld(_))));
        assert_eq!(w.check(100_000 + 10 * WINDOW - 1), Ok(()));
    }

    #[test]
    fn a_slide_clears_the_reused_words() {
        let mut w = ReplayWindow::new();
        w.accept(10).unwrap();
        // 10 + 128 words lands on the same ring word as 10; it must be clear again.
        let far = 10 + RING_WORDS as u64 * 64;
        w.accept(far).unwrap();
        assert!(matches!(w.accept(10), Err(ReplayError::TooOld(_))));
        w.accept(far - 64).unwrap();
        assert_eq!(w.accept(far - 64), Err(ReplayError::Duplicate(far - 64)));
    }

    #[test]
    fn exhausted() {
        let w = ReplayWindow::new();
        assert_eq!(
            w.check(REJECT_AFTER_MESSAGES),
            Err(ReplayError::Exhausted(REJECT_AFTER_MESSAGES))
        );
        assert_eq!(w.check(REJECT_AFTER_MESSAGES - 1), Ok(()));
    }
}
