//! `ethernet-input`: Ethernet II with at most one 802.1Q tag. L2-mode interfaces go to the
//! cross-connect untouched; L3 interfaces dispatch IPv4 and ARP by EtherType.

use dataplane::buffer::{flags, BufferMeta};
use dataplane::{Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::names;
use crate::state::{ForwardingState, Interface, InterfaceMode};
use crate::wire::{self, be16};

const IP4: Next = Next::declared(0);
const ARP: Next = Next::declared(1);
const XCONNECT: Next = Next::declared(2);

const RUNT: u16 = 0;
const UNKNOWN_INTERFACE: u16 = 1;
const UNKNOWN_ETHERTYPE: u16 = 2;
const UNKNOWN_VLAN: u16 = 3;
const NOT_FOR_US: u16 = 4;

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
    rx: u32,
    iface: Option<&'s Interface>,
}

/// Decides where one frame goes: the next arc and the L2 header length to strip, or a drop code.
#[inline(always)]
fn classify<'s>(
    state: &'s ForwardingState,
    cache: &mut RxCache<'s>,
    meta: &mut BufferMeta,
    d: &[u8],
) -> Result<(Next, u16), u16> {
    if d.len() < wire::ETHERNET_HEADER {
        return Err(RUNT);
    }
    if meta.rx_interface != cache.rx {
        cache.rx = meta.rx_interface;
        cache.iface = state.interface(cache.rx);
    }
    let mut iface = cache.iface.ok_or(UNKNOWN_INTERFACE)?;
    meta.l2_offset = meta.data_offset();
    meta.flags |= flags::L2_VALID;
    if iface.mode == InterfaceMode::L2 {
        return Ok((XCONNECT, 0));
    }
    let mut ethertype = be16(d, 12);
    let mut header = wire::ETHERNET_HEADER as u16;
    if ethertype == wire::ETHERTYPE_VLAN {
        if d.len() < wire::ETHERNET_HEADER + wire::VLAN_TAG {
            return Err(RUNT);
        }
        let vlan = be16(d, 14) & 0xfff;
        let &(_, sub) = iface
            .vlans
            .iter()
            .find(|(v, _)| *v == vlan)
            .ok_or(UNKNOWN_VLAN)?;
        iface = state.interface(sub).ok_or(UNKNOWN_VLAN)?;
        meta.rx_interface = sub;
        ethertype = be16(d, 16);
        header += wire::VLAN_TAG as u16;
    }
    if d[0] & 1 == 0 && d[..6] != iface.mac {
        return Err(NOT_FOR_US);
    }
    match ethertype {
        wire::ETHERTYPE_IP4 => Ok((IP4, header)),
        wire::ETHERTYPE_ARP => Ok((ARP, header)),
        _ => Err(UNKNOWN_ETHERTYPE),
    }
}

impl Node<ForwardingState> for EthernetInput {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::ETHERNET_INPUT)
            .nexts(&[names::IP4_INPUT, names::ARP_INPUT, names::L2_XCONNECT])
            .errors(&[
                ("runt", "frame shorter than its Ethernet header"),
                (
                    "unknown-interface",
                    "received on an interface that does not exist",
                ),
                (
                    "unknown-ethertype",
                    "EtherType not handled on an L3 interface",
                ),
                ("unknown-vlan", "802.1Q tag with no sub-interface"),
                (
                    "not-for-us",
                    "destination MAC is neither ours nor broadcast/multicast",
                ),
            ])
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let state = cx.state();
        let base = cx.error_id(0);
        let mut cache = RxCache {
            rx: u32::MAX,
            iface: None,
        };
        let bis = frame.as_slice();
        for (i, &bi) in bis.iter().enumerate() {
            if let Some(&ahead) = bis.get(i + 4) {
                cx.buffers.prefetch_buffer(ahead);
            }
            let (meta, d) = cx.buffers.meta_and_data_mut(bi);
            match classify(state, &mut cache, meta, d) {
                Ok((next, header)) => {
                    self.nexts[i] = next;
                    if header > 0 {
                        meta.advance(header);
                        meta.l3_offset = meta.data_offset();
                        meta.flags |= flags::L3_VALID;
                    }
                }
                Err(code) => {
                    meta.error = base + code;
                    self.nexts[i] = Next::DROP;
                }
            }
        }
        cx.enqueue_to_nexts(&self.nexts[..bis.len()], bis);
        bis.len()
    }
}
