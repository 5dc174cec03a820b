//! Answering on the link a packet came from: an answer to a link-local source (an echo reply, a
//! neighbour advertisement) is not routed (link-local addresses are in no FIB) but sent back
//! out of the receiving interface, to the sender's MAC, behind the received frame's own
//! Ethernet header with its addresses turned around (an 802.1Q tag kept).

use dataplane::buffer::WorkerBuffers;
use dataplane::BufferIndex;

use crate::state::{ForwardingState, IfIndex};
use crate::wire::{self, Ethernet, Mac};

/// Turns packet `bi` (its data at its IP header, its Ethernet header before it as
/// `ethernet-input` left it) into a frame back out of its receiving interface to `to` (the
/// sender's MAC unless given): the header's addresses become (`to`, the interface's MAC), the
/// data starts at the header again, and the packet is to leave by the interface it came in on.
/// `false` (changing nothing) when the header is not there to reuse.
pub(crate) fn reply_on_link(
    state: &ForwardingState,
    buffers: &mut WorkerBuffers,
    bi: BufferIndex,
    to: Option<Mac>,
) -> bool {
    let meta = buffers.meta(bi);
    let rx = IfIndex::new(meta.rx_interface);
    let Some(iface) = state.interface(rx) else {
        return false;
    };
    let back = meta.data_offset().wrapping_sub(meta.l2_offset);
    let l2 = usize::from(back);
    if l2 != wire::ETHERNET_HEADER && l2 != wire::ETHERNET_HEADER + wire::VLAN_TAG {
        return false;
    }
    let our_mac = iface.mac;
    let Some(h) = buffers.prepend(bi, back) else {
        return false;
    };
    let Ok(mut eth) = Ethernet::new_checked(h) else {
        return false;
    };
    let sender = eth.src();
    eth.set_dst(&to.unwrap_or(sender));
    eth.set_src(&our_mac);
    let meta = buffers.meta_mut(bi);
    meta.tx_interface = rx.get();
    meta.l2_offset = meta.data_offset();
    true
}
