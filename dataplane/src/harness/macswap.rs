//! A node that swaps the Ethernet source and destination addresses (VPP's sample node): the
//! smallest node that touches every packet's data, used by the demo and the dispatch benchmark.

use crate::frame::{Frame, FRAME_SIZE};
use crate::graph::Context;
use crate::node::{Next, Node, NodeSpec};

/// Swaps MAC addresses and sends the packet back out of the interface it came in on.
pub struct MacSwap {
    name: String,
    next: String,
    nexts: [Next; FRAME_SIZE],
}

const OUT: Next = Next::declared(0);
const RUNT: u16 = 0;

impl MacSwap {
    /// A MAC-swap node called `name` leading to `next`.
    pub fn new(name: &str, next: &str) -> MacSwap {
        MacSwap {
            name: name.into(),
            next: next.into(),
            nexts: [OUT; FRAME_SIZE],
        }
    }
}

#[inline(always)]
fn swap_macs(d: &mut [u8]) {
    let (dst, rest) = d.split_at_mut(6);
    dst.swap_with_slice(&mut rest[..6]);
}

impl<S> Node<S> for MacSwap {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(&self.name)
            .nexts(&[&self.next])
            .errors(&[("runt", "frame shorter than an Ethernet header")])
    }

    fn process(&mut self, cx: &mut Context<'_, S>, frame: &mut Frame) -> usize {
        let bis = frame.as_slice();
        let n = bis.len();
        let mut any_runt = false;
        let runt = cx.error_id(RUNT);
        for (i, &bi) in bis.iter().enumerate() {
            if let Some(&ahead) = bis.get(i + 4) {
                cx.buffers.prefetch_buffer(ahead);
            }
            let (meta, data) = cx.buffers.meta_and_data_mut(bi);
            if data.len() < 14 {
                meta.error = runt;
                self.nexts[i] = Next::DROP;
                any_runt = true;
                continue;
            }
            swap_macs(data);
            meta.tx_interface = meta.rx_interface;
        }
        if any_runt {
            cx.enqueue_to_nexts(&self.nexts[..n], bis);
            self.nexts[..n].fill(OUT);
        } else {
            cx.enqueue_frame(OUT, frame);
        }
        n
    }
}
