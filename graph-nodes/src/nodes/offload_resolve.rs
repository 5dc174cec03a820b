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
use dataplane::BufferIndex;
use dataplane::{next_arcs, node_errors, Context, Frame, Node, NodeSpec, FRAME_SIZE};

use super::names;
use crate::state::ForwardingState;

next_arcs! {
    INPUT => names::ETHERNET_INPUT,
    OUTPUT => names::INTERFACE_OUTPUT,
}

node_errors! {
    CSUM_COMPLETED => ("csum-completed", "partial checksums filled in in software (not a drop)"),
    GSO_SEGMENTED => ("gso-segmented", "super-frames segmented in software (not a drop)"),
    GSO_SEGMENTS => ("gso-segments", "segments those super-frames were cut into (not a drop)"),
    BAD_OFFLOAD => ("bad-offload", "checksum or segmentation work that does not fit the packet's headers"),
    NO_BUFFER => ("no-buffer", "no buffer left for a super-frame's segments"),
}

/// The `offload-resolve` node.
pub struct OffloadResolve {
    /// Where one packet's segments are written.
    out: Box<[BufferIndex; FRAME_SIZE]>,
}

impl OffloadResolve {
    /// A new node.
    pub fn new() -> Self {
        OffloadResolve {
            out: Box::new([BufferIndex::NONE; FRAME_SIZE]),
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
            .nexts(NEXTS)
            .errors(ERRORS)
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
