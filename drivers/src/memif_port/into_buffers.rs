//! Where a memif receive burst puts its frames: Quiver buffers, external-payload ones for frames
//! left in the peer's memory ([`attach_held`], [`IntoBuffers`]), copies for the rest.

use dataplane::{BufferIndex, WorkerBuffers};
use memif::queue::{HeldFrames, Hold, HoldSink, Taken};
use memif::PeerFrame;

/// Bytes of the Ethernet header an IP-mode port adds on receive and leaves out on transmit.
pub(super) const ETH_HEADER: usize = 14;

/// The Ethernet header put in front of packets received in IP mode (ethertype patched per
/// packet).
pub(super) fn ip_mode_header(mac: [u8; 6]) -> [u8; ETH_HEADER] {
    let mut h = [0u8; ETH_HEADER];
    h[..6].copy_from_slice(&mac);
    h[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    h
}

/// What [`attach_held`] made of a burst's held frames.
#[derive(Default)]
pub(super) struct FastRx {
    pub(super) frames: usize,
    /// Of them, attached as external-payload buffers (the rest were copied).
    pub(super) held: u64,
    pub(super) bytes: u64,
}

/// Makes `bufs[i]` the Quiver buffer of held frame `frames[i]`: an external-payload buffer of
/// source `source`, or (should the buffers refuse that) a copy, the frame then released.
#[inline(always)]
pub(super) fn attach_held(
    buffers: &mut WorkerBuffers,
    source: u32,
    held: &HeldFrames,
    bufs: &[BufferIndex],
    frames: &[memif::HeldRx],
) -> FastRx {
    let mut r = FastRx {
        frames: frames.len(),
        ..FastRx::default()
    };
    for (&bi, f) in bufs.iter().zip(frames) {
        // `receive_held` kept frames to the buffers' data size, so the length fits a u16.
        let len = f.len as u16;
        r.bytes += u64::from(f.len);
        if buffers.attach_external(bi, source, f.token, len) {
            r.held += 1;
        } else {
            buffers.set_length(bi, len);
            held.copy_out(f.token, 0, buffers.data_mut(bi));
            held.release(f.token);
        }
    }
    r
}

/// Puts received frames into freshly allocated Quiver buffers: a one-descriptor frame that
/// fits one buffer stays in the peer's memory (an external-payload buffer, copied only when
/// something reads it, or straight into another memif peer's memory on transmit); others
/// are copied.
pub(super) struct IntoBuffers<'a> {
    pub(super) buffers: &'a mut WorkerBuffers,
    /// The buffers to fill, in order.
    pub(super) bufs: &'a [BufferIndex],
    /// How many of them hold a frame.
    pub(super) filled: usize,
    /// Of those, how many are external-payload buffers.
    pub(super) held: u64,
    /// The frames' bytes.
    pub(super) bytes: u64,
    /// The Ethernet header to put in front (IP mode).
    pub(super) header: Option<[u8; ETH_HEADER]>,
    /// The held frames' source id in `buffers`, when this queue holds frames.
    pub(super) source: Option<u32>,
    /// Whether a chain ran out of buffers.
    pub(super) no_buffer: bool,
}

impl HoldSink for IntoBuffers<'_> {
    #[inline(always)]
    fn take(&mut self, frame: &PeerFrame<'_>, hold: Option<Hold>) -> Taken {
        let Some(&bi) = self.bufs.get(self.filled) else {
            return Taken::NoRoom;
        };
        if let (Some(h), Some(source), None) = (hold, self.source, self.header) {
            let fits = u16::try_from(frame.len()).ok();
            if fits.is_some_and(|len| self.buffers.attach_external(bi, source, h.token(), len)) {
                self.filled += 1;
                self.held += 1;
                self.bytes += frame.len() as u64;
                return Taken::Held;
            }
        }
        if self.copy(bi, frame) {
            Taken::Copied
        } else {
            Taken::NoRoom
        }
    }
}

impl IntoBuffers<'_> {
    /// Copies `frame` into `bi` (and a chain when it is longer than one buffer).
    #[inline]
    fn copy(&mut self, bi: BufferIndex, frame: &PeerFrame<'_>) -> bool {
        let prefix = if self.header.is_some() { ETH_HEADER } else { 0 };
        let total = frame.len() + prefix;
        let seg_size = usize::from(self.buffers.data_size());
        let first = total.min(seg_size);
        self.buffers.set_length(bi, first as u16);
        let dst = self.buffers.data_mut(bi);
        if let Some(mut h) = self.header {
            let mut v = [0u8; 1];
            frame.copy_to(0, &mut v);
            let ethertype: u16 = if v[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
            h[12..].copy_from_slice(&ethertype.to_be_bytes());
            dst[..ETH_HEADER].copy_from_slice(&h);
        }
        frame.copy_to(0, &mut dst[prefix..first]);
        // Frames longer than one Quiver buffer continue in a chain.
        let mut done = first - prefix;
        while done < frame.len() {
            let Some(seg) = self.buffers.alloc_one() else {
                // Out of buffers: leave the frame in the ring for the next burst.
                self.buffers.unchain(bi);
                self.no_buffer = true;
                return false;
            };
            let take = (frame.len() - done).min(seg_size);
            self.buffers.set_length(seg, take as u16);
            frame.copy_to(done, self.buffers.data_mut(seg));
            self.buffers.chain_append(bi, seg);
            done += take;
        }
        self.filled += 1;
        self.bytes += frame.len() as u64;
        true
    }
}
