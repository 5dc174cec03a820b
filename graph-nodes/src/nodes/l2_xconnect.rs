//! `l2-xconnect`: a frame received on interface A leaves on its cross-connected peer B,
//! untouched. Counts packets and bytes per cross-connect (by receiving interface). A frame
//! longer than B's MTU (with its Ethernet header and any 802.1Q tag) is dropped as
//! `mtu-exceeded`; a super-frame (segmentation left to do) is not, as its segments fit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dataplane::buffer::BufferMeta;
use dataplane::offload::Gso;
use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::names;
use crate::state::{ForwardingState, IfIndex, MAX_INTERFACES};
use crate::wire::{self, Ethernet};

next_arcs! {
    OUTPUT => names::INTERFACE_OUTPUT,
}

node_errors! {
    NO_XCONNECT => ("no-xconnect", "L2 frame on an interface with no cross-connect"),
    MTU_EXCEEDED => ("mtu-exceeded", "longer than the outgoing interface's MTU (with its L2 header)"),
}

/// One worker's per-cross-connect counters, indexed by receiving interface. Written only by
/// that worker; read by anyone.
pub struct XconnectStats {
    /// (packets, bytes) per receiving interface, side by side in one cache line.
    counts: Box<[[AtomicU64; 2]]>,
}

impl XconnectStats {
    /// Packets and bytes cross-connected from interface `rx`.
    pub fn get(&self, rx: IfIndex) -> (u64, u64) {
        match self.counts.get(rx.as_usize()) {
            Some([p, b]) => (p.load(Ordering::Relaxed), b.load(Ordering::Relaxed)),
            None => (0, 0),
        }
    }

    /// Counts `packets` (of `bytes`) cross-connected from interface `rx`. Only the worker
    /// owning these counters calls it (its `l2-xconnect`, or a cut-through on its behalf).
    pub fn add(&self, rx: IfIndex, packets: u64, bytes: u64) {
        if let Some([p, b]) = self.counts.get(rx.as_usize()) {
            bump(p, packets);
            bump(b, bytes);
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
                counts: (0..MAX_INTERFACES)
                    .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                    .collect(),
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
            .nexts(NEXTS)
            .errors(ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let state = cx.state();
        let xc = &state.xconnect;
        let no_xc = cx.error_id(NO_XCONNECT);
        let too_long = cx.error_id(MTU_EXCEEDED);
        let n = frame.len();
        let bis = frame.as_slice();
        let mut dropped = false;
        // Counters are added once per run of packets from one interface (usually a frame).
        let (mut run_rx, mut run_packets, mut run_bytes) = (IfIndex::NONE, 0u64, 0u64);
        let (mut tx_of_run, mut limit) = (IfIndex::NONE, u32::MAX);
        for (i, &bi) in bis.iter().enumerate() {
            let meta = cx.buffers.meta_mut(bi);
            let rx = IfIndex::new(meta.rx_interface);
            if rx != run_rx {
                if run_packets > 0 {
                    self.stats.add(run_rx, run_packets, run_bytes);
                }
                (run_rx, run_packets, run_bytes) = (rx, 0, 0);
                tx_of_run = xc.get(rx.as_usize()).copied().unwrap_or(IfIndex::NONE);
                limit = frame_limit(state, tx_of_run);
            }
            let len = meta.total_length();
            // One compare per packet; the frame is looked at only when it is longer.
            let meta = if len > limit {
                let (meta, d) = cx.buffers.meta_and_data_mut(bi);
                if exceeds(meta, d, limit) {
                    meta.error = too_long;
                    self.nexts[i] = Next::DROP;
                    dropped = true;
                    continue;
                }
                meta
            } else {
                meta
            };
            if !tx_of_run.is_none() {
                meta.tx_interface = tx_of_run.get();
                self.nexts[i] = OUTPUT;
                run_packets += 1;
                run_bytes += len as u64;
            } else {
                meta.error = no_xc;
                self.nexts[i] = Next::DROP;
                dropped = true;
            }
        }
        if run_packets > 0 {
            self.stats.add(run_rx, run_packets, run_bytes);
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

/// The longest untagged frame interface `tx` sends: its MTU and an Ethernet header
/// (`u32::MAX`, no limit, for no interface or an MTU of 0).
#[inline]
fn frame_limit(state: &ForwardingState, tx: IfIndex) -> u32 {
    match state.interfaces.get(tx.as_usize()).and_then(Option::as_ref) {
        Some(i) if i.mtu > 0 => u32::from(i.mtu) + wire::ETHERNET_HEADER as u32,
        _ => u32::MAX,
    }
}

/// Whether a frame longer than `limit` (the untagged limit) really is too long: an 802.1Q tag
/// is allowed on top, and a super-frame is cut to size later.
#[cold]
#[inline(never)]
fn exceeds(meta: &BufferMeta, d: &[u8], limit: u32) -> bool {
    if meta.offload().is_some_and(|o| o.gso != Gso::None) {
        return false;
    }
    let tagged = Ethernet::new_checked(d).is_ok_and(|e| e.ethertype() == wire::ETHERTYPE_VLAN);
    meta.total_length() > limit + if tagged { wire::VLAN_TAG as u32 } else { 0 }
}
