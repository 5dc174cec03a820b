//! `offload-resolve`: checksum and segmentation work a kernel left on packets
//! ([`dataplane::offload`]) done in software, for packets about to meet what cannot take it:
//! `ethernet-input` sends those of L3 interfaces here before anything reads their L4 headers,
//! and `interface-output` those bound for a transmit queue that does not accept offloads
//! (memif, DPDK, TAP) or for a tunnel. A partial checksum is filled in; a super-frame is cut
//! into segments. Packets then go back where they came from: those not yet given an egress
//! (`tx_interface` unset) to `ethernet-input`, the others to `interface-output`. Headers that do
//! not hold together are dropped and counted, never passed on.

use dataplane::buffer::INVALID_INDEX;
use dataplane::offload::{resolve, BadOffload, Resolved};
use dataplane::{Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::names;
use crate::state::ForwardingState;

const INPUT: Next = Next::declared(0);
const OUTPUT: Next = Next::declared(1);

const CSUM_COMPLETED: u16 = 0;
const GSO_SEGMENTED: u16 = 1;
const GSO_SEGMENTS: u16 = 2;
const BAD_OFFLOAD: u16 = 3;
const NO_BUFFER: u16 = 4;

/// The `offload-resolve` node.
pub struct OffloadResolve {
    /// Where one packet's segments are written.
    out: Box<[u32; FRAME_SIZE]>,
}

impl OffloadResolve {
    /// A new node.
    pub fn new() -> Self {
        OffloadResolve {
            out: Box::new([0; FRAME_SIZE]),
        }
    }
}

impl Default for OffloadResolve {
    fn default() -> Self {
        Self::new()
    }
}

impl Node<ForwardingState> for OffloadResolve {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::OFFLOAD_RESOLVE)
            .nexts(&[names::ETHERNET_INPUT, names::INTERFACE_OUTPUT])
            .errors(&[
                (
                    "csum-completed",
                    "partial checksums filled in in software (not a drop)",
                ),
                (
                    "gso-segmented",
                    "super-frames segmented in software (not a drop)",
                ),
                (
                    "gso-segments",
                    "segments those super-frames were cut into (not a drop)",
                ),
                (
                    "bad-offload",
                    "checksum or segmentation work that does not fit the packet's headers",
                ),
                ("no-buffer", "no buffer left for a super-frame's segments"),
            ])
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let n = frame.len();
        let (mut completed, mut segmented, mut segments) = (0, 0, 0);
        for &bi in frame.as_slice() {
            let next = if cx.buffers.meta(bi).tx_interface == INVALID_INDEX {
                INPUT
            } else {
                OUTPUT
            };
            match resolve(cx.buffers, bi, &mut self.out[..]) {
                Ok(Resolved::Untouched) => cx.enqueue(next, bi),
                Ok(Resolved::ChecksumCompleted) => {
                    completed += 1;
                    cx.enqueue(next, bi);
                }
                Ok(Resolved::Segmented(k)) => {
                    segmented += 1;
                    segments += k as u64;
                    cx.enqueue_slice(next, &self.out[..k]);
                }
                Err(BadOffload::NoBuffer) => cx.drop_packet(bi, NO_BUFFER),
                Err(_) => cx.drop_packet(bi, BAD_OFFLOAD),
            }
        }
        for (code, count) in [
            (CSUM_COMPLETED, completed),
            (GSO_SEGMENTED, segmented),
            (GSO_SEGMENTS, segments),
        ] {
            if count > 0 {
                cx.count_error(code, count);
            }
        }
        frame.clear();
        n
    }
}
