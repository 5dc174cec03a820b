//! The forwarding nodes, one per file, and the function that adds them all to a graph.

mod arcs;
mod arp;
mod ethernet_input;
mod icmp6_error;
mod interface_output;
mod ip4_icmp_error;
mod ip4_input;
mod ip4_l3xc;
mod ip4_local;
mod ip4_lookup;
mod ip4_rewrite;
mod ip6_input;
mod ip6_l3xc;
mod ip6_local;
mod ip6_lookup;
mod ip6_rewrite;
mod l2_xconnect;
mod nd;
mod offload_resolve;
mod origin;
mod reply_on_link;
mod vxlan;
mod vxlan6;
mod wireguard;

pub use arp::{ArpInput, Ip4Arp};
pub use ethernet_input::EthernetInput;
pub use icmp6_error::Ip6IcmpError;
pub use interface_output::InterfaceOutput;
pub use ip4_icmp_error::Ip4IcmpError;
pub use ip4_input::Ip4Input;
pub use ip4_l3xc::Ip4L3xc;
pub use ip4_local::Ip4Local;
pub use ip4_lookup::Ip4Lookup;
pub use ip4_rewrite::Ip4Rewrite;
pub use ip6_input::{Ip6Input, EXTENSION_BOUND};
pub use ip6_l3xc::Ip6L3xc;
pub use ip6_local::Ip6Local;
pub use ip6_lookup::Ip6Lookup;
pub use ip6_rewrite::Ip6Rewrite;
pub use l2_xconnect::{L2Xconnect, XconnectStats};
pub use nd::{Ip6Nd, Ip6NdProbe, Ip6NdResolve};
pub use offload_resolve::OffloadResolve;
pub use origin::LOCALLY_ORIGINATED;
pub use vxlan::{Vxlan4Encap, Vxlan4Input};
pub use vxlan6::{Vxlan6Encap, Vxlan6Input};
pub use wireguard::{
    Wg4Decrypt, Wg4Encrypt, Wg6Decrypt, Wg6Encrypt, WgControlInput, WgDecrypt, WgEncrypt,
};

use std::sync::Arc;

use dataplane::{GraphBuilder, TxQueue};

use crate::state::{ForwardingState, IfIndex};

/// Node names, as arcs refer to them.
pub mod names {
    /// Parses Ethernet and 802.1Q; dispatches by interface mode and EtherType.
    pub const ETHERNET_INPUT: &str = "ethernet-input";
    /// Checks IPv4 headers.
    pub const IP4_INPUT: &str = "ip4-input";
    /// L3 cross-connect: IPv4 from an interface to its peer's next hop, bypassing the FIB.
    pub const IP4_L3XC: &str = "ip4-l3xc";
    /// L3 cross-connect for IPv6.
    pub const IP6_L3XC: &str = "ip6-l3xc";
    /// Checks IPv6 headers and extension headers; local, cross-connected or looked up.
    pub const IP6_INPUT: &str = "ip6-input";
    /// IPv6 longest-prefix match and ECMP.
    pub const IP6_LOOKUP: &str = "ip6-lookup";
    /// Hop limit, MTU, L2 header.
    pub const IP6_REWRITE: &str = "ip6-rewrite";
    /// ICMPv6 errors (Packet Too Big, Time Exceeded) back to a packet's source.
    pub const IP6_ICMP_ERROR: &str = "ip6-icmp-error";
    /// IPv6 packets for this node: echo, neighbour discovery.
    pub const IP6_LOCAL: &str = "ip6-local";
    /// Neighbour discovery received: solicitations answered, advertisements learned.
    pub const IP6_ND: &str = "ip6-nd";
    /// Neighbour solicitations for unresolved next hops.
    pub const IP6_ND_RESOLVE: &str = "ip6-nd-resolve";
    /// Unicast neighbour solicitations the control side asks for.
    pub const IP6_ND_PROBE: &str = "ip6-nd-probe";
    /// Longest-prefix match and ECMP.
    pub const IP4_LOOKUP: &str = "ip4-lookup";
    /// TTL, checksum, MTU, L2 header.
    pub const IP4_REWRITE: &str = "ip4-rewrite";
    /// ICMP "fragmentation needed" back to the source of a packet too long for its next hop.
    pub const IP4_ICMP_ERROR: &str = "ip4-icmp-error";
    /// Packets for our own addresses.
    pub const IP4_LOCAL: &str = "ip4-local";
    /// ARP requests for unresolved next hops.
    pub const IP4_ARP: &str = "ip4-arp";
    /// ARP packets received.
    pub const ARP_INPUT: &str = "arp-input";
    /// L2 cross-connect.
    pub const L2_XCONNECT: &str = "l2-xconnect";
    /// VXLAN encapsulation.
    pub const VXLAN4_ENCAP: &str = "vxlan4-encap";
    /// VXLAN decapsulation.
    pub const VXLAN4_INPUT: &str = "vxlan4-input";
    /// VXLAN encapsulation over IPv6.
    pub const VXLAN6_ENCAP: &str = "vxlan6-encap";
    /// VXLAN decapsulation over IPv6.
    pub const VXLAN6_INPUT: &str = "vxlan6-input";
    /// WireGuard encryption (IP packet → transport message in UDP/IPv4).
    pub const WG4_ENCRYPT: &str = "wg4-encrypt";
    /// WireGuard decryption (UDP/IPv4 for a tunnel's port → inner IP packet).
    pub const WG4_DECRYPT: &str = "wg4-decrypt";
    /// WireGuard encryption over IPv6 (IP packet → transport message in UDP/IPv6).
    pub const WG6_ENCRYPT: &str = "wg6-encrypt";
    /// WireGuard decryption over IPv6 (UDP/IPv6 for a tunnel's port → inner IP packet).
    pub const WG6_DECRYPT: &str = "wg6-decrypt";
    /// What the WireGuard control side sends through the graph (either underlay family).
    pub const WG_CONTROL_INPUT: &str = "wg-control-input";
    /// Hands packets to ports' transmit queues.
    pub const INTERFACE_OUTPUT: &str = "interface-output";
    /// Checksums and segmentation left by a kernel, done in software.
    pub const OFFLOAD_RESOLVE: &str = "offload-resolve";
}

/// Handles on the nodes' own statistics.
pub struct ForwardingHandles {
    /// Per-cross-connect counters of this worker.
    pub xconnect: Arc<XconnectStats>,
}

/// Adds every forwarding node to `b`. `tx` gives this worker's transmit queue of each port; the
/// caller adds the ports' input nodes (`dataplane::PortInput` leading to `ethernet-input`).
pub fn add_forwarding_nodes(
    b: &mut GraphBuilder<ForwardingState>,
    tx: Vec<(IfIndex, Box<dyn TxQueue>)>,
) -> ForwardingHandles {
    let xc = L2Xconnect::new();
    let handles = ForwardingHandles {
        xconnect: xc.stats(),
    };
    b.add(EthernetInput::new())
        .add(Ip4Input::new())
        .add(Ip4L3xc::new())
        .add(Ip6L3xc::new())
        .add(Ip6Input::new())
        .add(Ip6Lookup::new())
        .add(Ip6Rewrite::new())
        .add(Ip6IcmpError::new())
        .add(Ip6Local::new())
        .add(Ip6Nd::new())
        .add(Ip6NdResolve::new())
        .add(Ip6NdProbe::new())
        .add(Ip4Lookup::new())
        .add(Ip4Rewrite::new())
        .add(Ip4IcmpError::new())
        .add(Ip4Local::new())
        .add(Ip4Arp::new())
        .add(ArpInput::new())
        .add(xc)
        .add(Vxlan4Encap::new())
        .add(Vxlan4Input::new())
        .add(Vxlan6Encap::new())
        .add(Vxlan6Input::new())
        .add(Wg4Encrypt::new())
        .add(Wg4Decrypt::new())
        .add(Wg6Encrypt::new())
        .add(Wg6Decrypt::new())
        .add(WgControlInput::new())
        .add(InterfaceOutput::new(tx))
        .add(OffloadResolve::new());
    handles
}
