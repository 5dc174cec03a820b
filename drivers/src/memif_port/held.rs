//! [`HeldSource`]: a memif receive queue's held frames as the source of Quiver's
//! external-payload buffers (see `dataplane::buffer::ExternalSource`).

use std::sync::Arc;

use dataplane::buffer::ExternalSource;
use memif::queue::HeldFrames;

/// A memif queue's held frames as the source of Quiver's external-payload buffers.
pub(super) struct HeldSource(pub(super) Arc<HeldFrames>);

impl ExternalSource for HeldSource {
    fn copy_out(&self, token: u32, dst: &mut [u8]) -> bool {
        self.0.copy_out(token, 0, dst)
    }

    fn release(&self, token: u32) {
        self.0.release(token);
    }

    fn release_many(&self, tokens: &[u32]) {
        self.0.release_many(tokens);
    }

    fn is_retired(&self) -> bool {
        self.0.is_retired()
    }
}
