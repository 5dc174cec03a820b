//! `l2-xconnect`: a frame received on interface A leaves on its cross-connected peer B,
//! untouched. Counts packets and bytes per cross-connect (by receiving interface).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dataplane::{Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::names;
use crate::state::{ForwardingState, MAX_INTERFACES};

const OUTPUT: Next = Next::declared(0);
const NO_XCONNECT: u16 = 0;

/// One worker's per-cross-connect counters, indexed by receiving interface. Written only by
/// that worker; read by anyone.
pub struct XconnectStats {
    packets: Box<[AtomicU64]>,
    bytes: Box<[AtomicU64]>,
}

impl XconnectStats {
    /// Packets and bytes cross-connected from interface `rx`.
    pub fn get(&self, rx: u32) -> (u64, u64) {
        let i = rx as usize;
        match (self.packets.get(i), self.bytes.get(i)) {
            (Some(p), Some(b)) => (p.load(Ordering::Relaxed), b.load(Ordering::Relaxed)),
            _ => (0, 0),
        }
    }
}

#[inline(always)]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// The `l2-xconnect` node.
pub struct L2Xconnect {
    nexts: [Next; FRAME_SIZE],
    stats: Arc<XconnectStats>,
}

impl L2Xconnect {
    /// A new node.
    pub fn new() -> Self {
        L2Xconnect {
            nexts: [OUTPUT; FRAME_SIZE],
            stats: Arc::new(XconnectStats {
                packets: (0..MAX_INTERFACES).map(|_| AtomicU64::new(0)).collect(),
                bytes: (0..MAX_INTERFACES).map(|_| AtomicU64::new(0)).collect(),
            }),
        }
    }

    /// This worker's counters.
    pub fn stats(&self) -> Arc<XconnectStats> {
        self.stats.clone()
    }
}

impl Default for L2Xconnect {
    fn default() -> Self {
        Self::new()
    }
}

impl Node<ForwardingState> for L2Xconnect {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::L2_XCONNECT)
            .nexts(&[names::INTERFACE_OUTPUT])
            .errors(&[(
                "no-xconnect",
                "L2 frame on an interface with no cross-connect",
            )])
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let xc = &cx.state().xconnect;
        let no_xc = cx.error_id(NO_XCONNECT);
        let n = frame.len();
        let bis = frame.as_slice();
        let mut dropped = false;
        for (i, &bi) in bis.iter().enumerate() {
            let meta = cx.buffers.meta_mut(bi);
            let rx = meta.rx_interface as usize;
            match xc.get(rx).copied().filter(|&t| t != u32::MAX) {
                Some(tx) => {
                    meta.tx_interface = tx;
                    self.nexts[i] = OUTPUT;
                    if let (Some(p), Some(b)) =
                        (self.stats.packets.get(rx), self.stats.bytes.get(rx))
                    {
                        bump(p, 1);
                        bump(b, meta.total_length() as u64);
                    }
                }
                None => {
                    meta.error = no_xc;
                    self.nexts[i] = Next::DROP;
                    dropped = true;
                }
            }
        }
        if dropped {
            cx.enqueue_to_nexts(&self.nexts[..bis.len()], bis);
            self.nexts[..bis.len()].fill(OUTPUT);
        } else {
            cx.enqueue_frame(OUTPUT, frame);
        }
        n
    }
}
