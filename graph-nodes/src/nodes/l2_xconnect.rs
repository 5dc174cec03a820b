//! `l2-xconnect`: a frame received on interface A leaves on its cross-connected peer B,
//! untouched. Counts packets and bytes per cross-connect (by receiving interface). A frame
//! longer than B's MTU (with its Ethernet header and any 802.1Q tag) is dropped as
//! `mtu-exceeded`; a super-frame (segmentation left to do) is not, as its segments fit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dataplane::buffer::BufferView;
use dataplane::offload::Gso;
use dataplane::BufferIndex;
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
        let n = frame.len();
        let bis = frame.as_slice();
        let mut run = Run::default();
        // The common case, with no call in the loop (so its state stays in registers): every
        // frame cross-connected and within the MTU. The first other one hands the rest over.
        let mut i = 0;
        while let Some(&bi) = bis.get(i) {
            let meta = cx.buffers.meta_mut(bi);
            let rx = IfIndex::new(meta.rx_interface);
            if rx != run.rx {
                run.start(rx, state, &self.stats);
            }
            let len = meta.total_length();
            if len >= run.below {
                break;
            }
            meta.tx_interface = run.tx.get();
            run.count(len);
            i += 1;
        }
        let dropped = i < n && self.rest(cx, &bis[i..], i, &mut run);
        run.flush(&self.stats);
        if dropped {
            cx.enqueue_to_nexts(&self.nexts[..n], bis);
            self.nexts[..n].fill(OUTPUT);
        } else {
            cx.enqueue_frame(OUTPUT, frame);
        }
        n
    }
}

impl L2Xconnect {
    /// The frames from the first one the common case could not take (`bis`, the `first`th of
    /// the vector on): a frame without a cross-connect, or at least as long as the MTU allows
    /// untagged. Marks drops in `nexts` (which holds OUTPUT otherwise); true if any.
    #[inline(never)]
    fn rest(
        &mut self,
        cx: &mut Context<'_, ForwardingState>,
        bis: &[BufferIndex],
        first: usize,
        run: &mut Run,
    ) -> bool {
        let state = cx.state();
        let no_xc = cx.error_id(NO_XCONNECT);
        let too_long = cx.error_id(MTU_EXCEEDED);
        let mut dropped = false;
        for (i, &bi) in bis.iter().enumerate() {
            let meta = cx.buffers.meta_mut(bi);
            let rx = IfIndex::new(meta.rx_interface);
            if rx != run.rx {
                run.start(rx, state, &self.stats);
            }
            let len = meta.total_length();
            if len < run.below || (!run.tx.is_none() && !exceeds(cx.buffers.view(), bi, run.below))
            {
                cx.buffers.meta_mut(bi).tx_interface = run.tx.get();
                run.count(len);
                continue;
            }
            let meta = cx.buffers.meta_mut(bi);
            meta.error = if run.tx.is_none() { no_xc } else { too_long };
            self.nexts[first + i] = Next::DROP;
            dropped = true;
        }
        dropped
    }
}

/// Packets of one receiving interface in a row, counted once per run (usually a vector),
/// and where they go.
struct Run {
    rx: IfIndex,
    packets: u64,
    bytes: u64,
    /// The cross-connect's other side ([`IfIndex::NONE`]: none).
    tx: IfIndex,
    /// Frames shorter than this leave on `tx` ([`frame_bound`]).
    below: u32,
}

impl Default for Run {
    fn default() -> Self {
        Run {
            rx: IfIndex::NONE,
            packets: 0,
            bytes: 0,
            tx: IfIndex::NONE,
            below: 0,
        }
    }
}

impl Run {
    /// Counts the run so far and starts one from `rx`.
    #[inline(always)]
    fn start(&mut self, rx: IfIndex, state: &ForwardingState, stats: &XconnectStats) {
        self.flush(stats);
        let tx = state.xconnect.get(rx.as_usize()).copied();
        self.rx = rx;
        self.tx = tx.unwrap_or(IfIndex::NONE);
        self.below = frame_bound(state, self.tx);
    }

    #[inline(always)]
    fn count(&mut self, len: u32) {
        self.packets += 1;
        self.bytes += u64::from(len);
    }

    #[inline(always)]
    fn flush(&mut self, stats: &XconnectStats) {
        if self.packets > 0 {
            stats.add(self.rx, self.packets, self.bytes);
            (self.packets, self.bytes) = (0, 0);
        }
    }
}

/// One more than the longest untagged frame interface `tx` sends (its MTU and an Ethernet
/// header): `u32::MAX` for an MTU of 0 (no limit), 0 for no interface (nothing passes).
#[inline]
fn frame_bound(state: &ForwardingState, tx: IfIndex) -> u32 {
    if tx.is_none() {
        return 0;
    }
    match state.interfaces.get(tx.as_usize()).and_then(Option::as_ref) {
        Some(i) if i.mtu > 0 => u32::from(i.mtu) + wire::ETHERNET_HEADER as u32 + 1,
        _ => u32::MAX,
    }
}

/// Whether buffer `bi`, at least `below` long, really is too long: an 802.1Q tag is allowed on
/// top, and a super-frame is cut to size later.
#[cold]
#[inline(never)]
fn exceeds(mut buffers: BufferView<'_>, bi: BufferIndex, below: u32) -> bool {
    let (meta, d) = buffers.meta_and_data_mut(bi);
    if meta.offload().is_some_and(|o| o.gso != Gso::None) {
        return false;
    }
    let tagged = Ethernet::new_checked(&*d).is_ok_and(|e| e.ethertype() == wire::ETHERTYPE_VLAN);
    meta.total_length() >= below + if tagged { wire::VLAN_TAG as u32 } else { 0 }
}
