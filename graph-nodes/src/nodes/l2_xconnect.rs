//! `l2-xconnect`: a frame received on interface A leaves on its cross-connected peer B,
//! untouched. Counts packets and bytes per cross-connect (by receiving interface). A frame
//! longer than B's MTU (with its Ethernet header and any 802.1Q tag) is dropped as
//! `mtu-exceeded`; a super-frame (segmentation left to do) is not, as its segments fit. When B
//! is a VLAN sub-interface, its 802.1Q tag is pushed first (VPP's tag rewrite for NSM's VLAN
//! mechanism; `ethernet-input` popped it from what B received), off the common case's loop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dataplane::buffer::BufferView;
use dataplane::offload::Gso;
use dataplane::BufferIndex;
use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::names;
use crate::state::{ForwardingState, IfIndex, InterfaceKind, MAX_INTERFACES};
use crate::wire::{self, Ethernet};

next_arcs! {
    OUTPUT => names::INTERFACE_OUTPUT,
}

node_errors! {
    NO_XCONNECT => ("no-xconnect", "L2 frame on an interface with no cross-connect"),
    MTU_EXCEEDED => ("mtu-exceeded", "longer than the outgoing interface's MTU (with its L2 header)"),
    NO_HEADROOM => ("no-headroom", "no room before the frame for the outgoing VLAN sub-interface's tag"),
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
            if let Some(tci) = run.tag {
                if !push_tag(cx.buffers.view(), bi, tci) {
                    cx.buffers.meta_mut(bi).error = cx.error_id(NO_HEADROOM);
                    self.nexts[first + i] = Next::DROP;
                    dropped = true;
                    continue;
                }
            }
            let len = cx.buffers.meta_mut(bi).total_length();
            if len < run.below || (!run.tx.is_none() && !exceeds(cx.buffers.view(), bi, run.bound))
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
    /// Frames shorter than this leave on `tx` untouched, in the common case's loop: the
    /// [`frame_bound`], or 0 when `tx` needs a tag pushed (every frame takes the other way).
    below: u32,
    /// `tx`'s [`frame_bound`].
    bound: u32,
    /// The 802.1Q tag (TCI) to push for `tx`, a VLAN sub-interface.
    tag: Option<u16>,
}

impl Default for Run {
    fn default() -> Self {
        Run {
            rx: IfIndex::NONE,
            packets: 0,
            bytes: 0,
            tx: IfIndex::NONE,
            below: 0,
            bound: 0,
            tag: None,
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
        self.bound = frame_bound(state, self.tx);
        self.tag = vlan_tag(state, self.tx);
        self.below = if self.tag.is_some() { 0 } else { self.bound };
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

/// The tag to push on frames leaving by `tx`, when it is a VLAN sub-interface (priority 0).
#[inline]
fn vlan_tag(state: &ForwardingState, tx: IfIndex) -> Option<u16> {
    match state.interfaces.get(tx.as_usize()).and_then(Option::as_ref) {
        Some(i) => match i.kind {
            InterfaceKind::Vlan { vlan, .. } => Some(vlan),
            _ => None,
        },
        None => None,
    }
}

/// Puts an 802.1Q tag with `tci` after buffer `bi`'s MAC addresses, in the room before the
/// frame; false (nothing changed) when there is none or the frame is shorter than its
/// addresses. Offload offsets, counted from the frame's first byte, follow.
#[cold]
#[inline(never)]
fn push_tag(mut buffers: BufferView<'_>, bi: BufferIndex, tci: u16) -> bool {
    const ADDRESSES: usize = 12;
    let tag = wire::VLAN_TAG;
    let (meta, head, d) = buffers.meta_headroom_and_data_mut(bi);
    if head.len() < tag || d.len() < ADDRESSES || !meta.retreat(tag as u16) {
        return false;
    }
    if let Some(&o) = meta.offload() {
        match o.shifted(tag as u16) {
            Some(shifted) => meta.set_offload(shifted),
            None => {
                meta.advance(tag as u16);
                return false;
            }
        }
    }
    meta.l2_offset = meta.data_offset();
    let (_, d) = buffers.meta_and_data_mut(bi);
    d.copy_within(tag..tag + ADDRESSES, 0);
    d[ADDRESSES..ADDRESSES + 2].copy_from_slice(&wire::ETHERTYPE_VLAN.to_be_bytes());
    d[ADDRESSES + 2..ADDRESSES + 4].copy_from_slice(&(tci & 0x0fff).to_be_bytes());
    true
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
