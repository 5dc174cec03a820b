//! `ethernet-input`: Ethernet II with at most one 802.1Q tag. L2-mode interfaces go to the
//! cross-connect untouched; L3 interfaces dispatch IPv4, ARP and IPv6 by EtherType, after
//! `offload-resolve` has done any checksum or segmentation work a kernel left on the frame.
//! A tagged frame for a VLAN sub-interface in L2 mode (cross-connected, NSM's VLAN mechanism)
//! loses its tag here (VPP's `pop 1` tag rewrite) and goes to the cross-connect as the
//! sub-interface's; `l2-xconnect` pushes the tag again on the way out.

use dataplane::buffer::{flags, BufferMeta};
use dataplane::offload::Offload;
use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::arcs::Arcs;
use super::names;
use crate::state::{ForwardingState, IfIndex, Interface, InterfaceMode};
use crate::wire::{self, Ethernet, Vlan};

next_arcs! {
    IP4 => names::IP4_INPUT,
    ARP => names::ARP_INPUT,
    XCONNECT => names::L2_XCONNECT,
    RESOLVE => names::OFFLOAD_RESOLVE,
    IP6 => names::IP6_INPUT,
}

node_errors! {
    RUNT => ("runt", "frame shorter than its Ethernet header"),
    UNKNOWN_INTERFACE => ("unknown-interface", "received on an interface that does not exist"),
    UNKNOWN_ETHERTYPE => ("unknown-ethertype", "EtherType not handled on an L3 interface"),
    UNKNOWN_VLAN => ("unknown-vlan", "802.1Q tag with no sub-interface"),
    NOT_FOR_US => ("not-for-us", "destination MAC is neither ours nor broadcast/multicast"),
}

/// Packets ahead whose buffer is prefetched.
const PREFETCH_AHEAD: usize = 4;

/// The `ethernet-input` node.
pub struct EthernetInput {
    nexts: [Next; FRAME_SIZE],
}

impl EthernetInput {
    /// A new node.
    pub fn new() -> Self {
        EthernetInput {
            nexts: [Next::DROP; FRAME_SIZE],
        }
    }
}

impl Default for EthernetInput {
    fn default() -> Self {
        Self::new()
    }
}

/// The interface frames last came from, resolved once per run of frames from it.
struct RxCache<'s> {
    rx: IfIndex,
    iface: Option<&'s Interface>,
    /// For the fast path: the interface's MAC as [`mac48`] reads it, when it is an L3 interface
    /// (`u64::MAX`, which no 48-bit value equals, otherwise).
    l3_mac: u64,
    /// Whether it is an L2 (cross-connected) interface.
    l2: bool,
}

impl<'s> RxCache<'s> {
    fn new() -> Self {
        RxCache {
            rx: IfIndex::NONE,
            iface: None,
            l3_mac: u64::MAX,
            l2: false,
        }
    }

    #[inline(always)]
    fn update(&mut self, state: &'s ForwardingState, rx: IfIndex) {
        if rx != self.rx {
            self.rx = rx;
            self.iface = state.interface(rx);
            self.l3_mac = match self.iface {
                Some(i) if i.mode == InterfaceMode::L3 => mac48(&i.mac),
                _ => u64::MAX,
            };
            self.l2 = self.iface.is_some_and(|i| i.mode == InterfaceMode::L2);
        }
    }
}

/// A MAC address as a number (for comparing in one instruction).
#[inline(always)]
fn mac48(m: &[u8; 6]) -> u64 {
    u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0])
}

/// The common case, checked with few branches: an untagged IPv4 or IPv6 frame for an L3
/// interface's own or a group address. Its next node, if it is one.
#[inline(always)]
fn plain_ip(cache: &RxCache<'_>, d: &[u8]) -> Option<Next> {
    let eth = Ethernet::new_checked(d).ok()?;
    let dst = mac48(&eth.dst());
    // Our MAC, or a group address (multicast, broadcast) on an L3 interface.
    let for_us = (dst == cache.l3_mac) | (eth.is_group() && cache.l3_mac != u64::MAX);
    match eth.ethertype() {
        wire::ETHERTYPE_IP4 if for_us => Some(IP4),
        wire::ETHERTYPE_IP6 if for_us => Some(IP6),
        _ => None,
    }
}

/// Decides where one frame goes: the next arc and the L2 header length to strip, or a drop code.
#[inline(never)]
fn classify<'s>(
    state: &'s ForwardingState,
    cache: &mut RxCache<'s>,
    meta: &mut BufferMeta,
    d: &mut [u8],
) -> Result<(Next, u16), u16> {
    let eth = Ethernet::new_checked(&*d).map_err(|_| RUNT)?;
    cache.update(state, IfIndex::new(meta.rx_interface));
    let mut iface = cache.iface.ok_or(UNKNOWN_INTERFACE)?;
    meta.l2_offset = meta.data_offset();
    meta.flags |= flags::L2_VALID;
    if iface.mode == InterfaceMode::L2 {
        return Ok((XCONNECT, 0));
    }
    let mut ethertype = eth.ethertype();
    let mut header = wire::ETHERNET_HEADER as u16;
    if ethertype == wire::ETHERTYPE_VLAN {
        let tag = Vlan::new_checked(eth.payload()).map_err(|_| RUNT)?;
        let vlan = tag.vid();
        let &(_, sub) = iface
            .vlans
            .iter()
            .find(|(v, _)| *v == vlan)
            .ok_or(UNKNOWN_VLAN)?;
        iface = state.interface(sub).ok_or(UNKNOWN_VLAN)?;
        meta.rx_interface = sub.get();
        if iface.mode == InterfaceMode::L2 {
            pop_tag(meta, d);
            return Ok((XCONNECT, 0));
        }
        ethertype = tag.ethertype();
        header += wire::VLAN_TAG as u16;
    }
    if !eth.is_group() && eth.dst() != iface.mac {
        return Err(NOT_FOR_US);
    }
    match ethertype {
        wire::ETHERTYPE_IP4 => Ok((IP4, header)),
        wire::ETHERTYPE_ARP => Ok((ARP, header)),
        wire::ETHERTYPE_IP6 => Ok((IP6, header)),
        _ => Err(UNKNOWN_ETHERTYPE),
    }
}

/// Removes the 802.1Q tag of `d` (checked to be there): the MAC addresses move up over it and
/// the packet starts 4 bytes later. Offload offsets, counted from the packet's first byte,
/// follow.
#[inline(never)]
fn pop_tag(meta: &mut BufferMeta, d: &mut [u8]) {
    const ADDRESSES: usize = 12;
    let tag = wire::VLAN_TAG;
    d.copy_within(..ADDRESSES, tag);
    meta.advance(tag as u16);
    meta.l2_offset = meta.data_offset();
    if let Some(&o) = meta.offload().filter(|o| o.needs_csum()) {
        meta.set_offload(Offload {
            csum_start: o.csum_start.saturating_sub(tag as u16),
            ..o
        });
    }
}

impl Node<ForwardingState> for EthernetInput {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::ETHERNET_INPUT)
            .nexts(NEXTS)
            .errors(ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let state = cx.state();
        let base = cx.error_id(0);
        let mut cache = RxCache::new();
        let bis = frame.as_slice();
        let n = bis.len();
        let mut arcs = Arcs::new(&mut self.nexts[..n], IP4);
        let mut buffers = cx.buffers.view();
        // Once a frame goes to `offload-resolve`, every later L3 frame of the vector follows it
        // there (passed through untouched) and comes back after it: a flow's frames keep their
        // order when some arrive as super-frames (a UDP GSO run) and some alone.
        let mut resolving = false;
        for (i, &bi) in bis.iter().enumerate() {
            if let Some(&ahead) = bis.get(i + PREFETCH_AHEAD) {
                // Frames of an L2 interface (the one of the frames just before, usually the
                // same) are not read: their metadata is enough.
                if cache.l2 {
                    buffers.prefetch_meta(ahead);
                } else {
                    buffers.prefetch(ahead);
                }
            }
            let rx = IfIndex::new(buffers.meta_mut(bi).rx_interface);
            cache.update(state, rx);
            if cache.l2 && buffers.data_len(bi) >= wire::ETHERNET_HEADER {
                // The frame goes to the cross-connect untouched: its bytes are not read, so a
                // frame still in a memif peer's memory stays there (see
                // `dataplane::buffer::ExternalSource`).
                let meta = buffers.meta_mut(bi);
                meta.l2_offset = meta.data_offset();
                meta.flags |= flags::L2_VALID;
                arcs.set(i, XCONNECT);
                continue;
            }
            let (meta, d) = buffers.meta_and_data_mut(bi);
            if resolving || meta.flags & flags::OFFLOAD != 0 {
                // A checksum to fill in or a super-frame to cut before anything reads L4;
                // it comes back without the work.
                resolving = true;
                arcs.set(i, RESOLVE);
                continue;
            }
            if let Some(to) = plain_ip(&cache, d) {
                meta.l2_offset = meta.data_offset();
                // The window holds the 14 bytes just checked.
                meta.advance(wire::ETHERNET_HEADER as u16);
                meta.l3_offset = meta.data_offset();
                meta.flags |= flags::L2_VALID | flags::L3_VALID;
                arcs.set(i, to);
                continue;
            }
            let arc = match classify(state, &mut cache, meta, d) {
                Ok((to, header)) => {
                    if header > 0 {
                        meta.advance(header);
                        meta.l3_offset = meta.data_offset();
                        meta.flags |= flags::L3_VALID;
                    }
                    to
                }
                Err(code) => {
                    meta.error = base + code;
                    Next::DROP
                }
            };
            arcs.set(i, arc);
        }
        arcs.enqueue(cx, frame);
        n
    }
}
