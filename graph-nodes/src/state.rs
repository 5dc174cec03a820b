//! The forwarding state workers read: one immutable snapshot per commit of the control side,
//! except the FIB's LPM table, which is shared and updated in place (see `fib::lpm`).

use std::net::IpAddr;
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use crate::fib::LpmTable;
use crate::fib6::Lpm6Table;
use crate::wire::Mac;
use crate::wireguard::{WgDatagram, WgTunnel};

pub use crate::fast_map::{FastMap, WordHasher};

/// Most interfaces Quiver handles (interface indices are below this).
pub const MAX_INTERFACES: usize = 4096;

pub use crate::index::{AdjIndex, IfIndex, TableId};

/// How an interface's received frames are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterfaceMode {
    /// Routed: IPv4 and ARP are processed, other frames dropped.
    L3,
    /// Cross-connected: every frame leaves on the peer interface untouched.
    L2,
}

/// The destination MAC of what a point-to-point interface sends ([`Interface::point_to_point`]):
/// never on a wire, since such a port leaves the Ethernet header out.
pub const POINT_TO_POINT_PEER_MAC: Mac = [0x02, 0, 0, 0, 0, 0x01];

/// What an interface is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterfaceKind {
    /// A port with a transmit queue on every worker.
    Port,
    /// An 802.1Q sub-interface of `parent` for tag `vlan`.
    Vlan {
        /// The parent port.
        parent: IfIndex,
        /// The VLAN id.
        vlan: u16,
    },
    /// A VXLAN tunnel's L2 side: frames sent here are encapsulated in IPv4.
    Vxlan {
        /// Index into [`ForwardingState::tunnels`].
        tunnel: u32,
    },
    /// A VXLAN tunnel over IPv6's L2 side: frames sent here are encapsulated in IPv6.
    Vxlan6 {
        /// Index into [`ForwardingState::tunnels6`].
        tunnel: u32,
    },
    /// A WireGuard tunnel's L3 side: IP packets sent here are encrypted to a peer.
    Wireguard {
        /// Index into [`ForwardingState::wireguard`].
        tunnel: u32,
    },
}

/// One interface.
#[derive(Debug, Clone)]
pub struct Interface {
    /// Its index.
    pub index: IfIndex,
    /// Its name.
    pub name: String,
    /// Its MAC address.
    pub mac: Mac,
    /// The largest IPv4 packet it sends.
    pub mtu: u16,
    /// L2 or L3.
    pub mode: InterfaceMode,
    /// Port, VLAN sub-interface or tunnel.
    pub kind: InterfaceKind,
    /// Its IPv4 addresses with prefix lengths.
    pub addresses: Vec<(u32, u8)>,
    /// Its IPv6 addresses (global or unique-local) with prefix lengths.
    pub addresses6: Vec<(u128, u8)>,
    /// Its IPv6 link-local address (fe80::/64 and the EUI-64 of its MAC), once it has an IPv6
    /// address: what neighbour discovery speaks from and answers for on the link.
    pub link_local: Option<u128>,
    /// Its VLAN sub-interfaces: (tag, sub-interface).
    pub vlans: Vec<(u16, IfIndex)>,
    /// The routing table its packets are looked up in (and its connected routes are in).
    pub table: TableId,
    /// A point-to-point link (an IP-mode memif port): whatever it sends reaches the one peer
    /// at its far end, so its next hops need no neighbour resolution (no ARP is sent into a
    /// link without a link layer).
    pub point_to_point: bool,
    /// The NIC is shared with the kernel, which keeps its neighbours (a node uplink): no ARP
    /// request or neighbour solicitation is sent on it; a packet to a next hop whose MAC is
    /// unknown is dropped as `resolving` while the control side asks the kernel.
    pub neighbours_from_kernel: bool,
}

impl Interface {
    /// The address of this interface in the subnet that contains `ip`, if any.
    pub fn address_for(&self, ip: u32) -> Option<u32> {
        self.addresses
            .iter()
            .find(|&&(a, l)| crate::fib::lpm::mask(l) & (a ^ ip) == 0)
            .map(|&(a, _)| a)
    }

    /// The IPv6 address of this interface in the subnet that contains `ip` (its link-local
    /// address for a link-local `ip`), if any.
    pub fn address6_for(&self, ip: u128) -> Option<u128> {
        if ip >> 118 == 0xfe80 >> 6 {
            return self.link_local;
        }
        self.addresses6
            .iter()
            .find(|&&(a, l)| crate::fib6::mask(l) & (a ^ ip) == 0)
            .map(|&(a, _)| a)
    }

    /// Whether `ip` is one of this interface's IPv6 addresses (its link-local one included).
    pub fn has_address6(&self, ip: u128) -> bool {
        self.link_local == Some(ip) || self.addresses6.iter().any(|&(a, _)| a == ip)
    }
}

/// What an adjacency does with a packet that the FIB sent to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdjacencyKind {
    /// Rewrite the L2 header and send out of `tx`.
    Rewrite,
    /// The next hop's MAC is unknown: ask for it (ARP, or neighbour discovery for IPv6),
    /// drop the packet.
    Arp,
    /// A connected subnet: ask for the packet's destination itself.
    Glean,
    /// One of our own addresses: deliver to `ip4-local`.
    Local,
    /// Drop (a blackhole route).
    Drop,
    /// Look the packet up again in table [`Adjacency::next_table`] (a next-table route; at
    /// most one such extra lookup per packet).
    NextTable,
}

/// A next hop: how to send a packet on.
#[derive(Debug, Clone, Copy)]
pub struct Adjacency {
    /// What to do.
    pub kind: AdjacencyKind,
    /// The interface to send out of.
    pub tx: IfIndex,
    /// The largest IP packet `tx` sends.
    pub mtu: u16,
    /// The IPv4 next hop's address (for `Arp`).
    pub next_hop: u32,
    /// The IPv6 next hop's address (for `Arp`: neighbour discovery), as it lies in a header;
    /// zero for IPv4 adjacencies.
    pub next_hop6: [u8; 16],
    /// The L2 header to prepend (for `Rewrite`): Ethernet, with a VLAN tag on sub-interfaces.
    pub header: [u8; 18],
    /// The header's length: 14 or 18.
    pub header_len: u8,
    /// The table a [`AdjacencyKind::NextTable`] adjacency looks packets up in again (its
    /// number); 0 for every other kind.
    pub next_table: u16,
}

impl Adjacency {
    /// An adjacency that drops.
    pub const DROP: Adjacency = Adjacency {
        kind: AdjacencyKind::Drop,
        tx: IfIndex::NONE,
        mtu: 0,
        next_hop: 0,
        next_hop6: [0; 16],
        header: [0; 18],
        header_len: 0,
        next_table: 0,
    };
}

/// A load-balance object with one path, as `ip4-lookup` uses it: its adjacency's index and
/// kind in one word, so that the common case costs the packet one load. Objects with several
/// paths, or whose adjacency is missing, are [`SinglePath::NONE`] and take the general way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinglePath(u32);

impl SinglePath {
    const INDEX: u32 = (1 << 28) - 1;
    /// Not a single path.
    pub const NONE: SinglePath = SinglePath(u32::MAX);

    /// The single path through adjacency `index` of kind `kind`.
    pub fn new(index: AdjIndex, kind: AdjacencyKind) -> SinglePath {
        let index = index.get();
        let code = match kind {
            AdjacencyKind::Rewrite => 0,
            AdjacencyKind::Local => 1,
            AdjacencyKind::Arp => 2,
            AdjacencyKind::Glean => 3,
            AdjacencyKind::Drop => 4,
            AdjacencyKind::NextTable => 5,
        };
        if index > Self::INDEX {
            return Self::NONE;
        }
        SinglePath(code << 28 | index)
    }

    /// The adjacency's index when it is a [`AdjacencyKind::Rewrite`] (the common case, in one
    /// comparison).
    #[inline(always)]
    pub fn rewrite(self) -> Option<AdjIndex> {
        (self.0 >> 28 == 0).then_some(AdjIndex::new(self.0 & Self::INDEX))
    }

    /// The adjacency's index and kind, unless this is [`SinglePath::NONE`].
    #[inline(always)]
    pub fn get(self) -> Option<(AdjIndex, AdjacencyKind)> {
        let kind = match self.0 >> 28 {
            0 => AdjacencyKind::Rewrite,
            1 => AdjacencyKind::Local,
            2 => AdjacencyKind::Arp,
            3 => AdjacencyKind::Glean,
            4 => AdjacencyKind::Drop,
            5 => AdjacencyKind::NextTable,
            _ => return None,
        };
        Some((AdjIndex::new(self.0 & Self::INDEX), kind))
    }
}

/// ECMP: the adjacencies a route spreads flows over (by flow hash).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LoadBalance {
    /// Adjacency indices; never empty.
    pub buckets: Box<[AdjIndex]>,
}

/// A VXLAN tunnel (RFC 7348) over IPv4. The header the data path copies comes first, so that
/// one cache line holds what encapsulation reads.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub struct VxlanTunnel {
    /// The outer IPv4 + UDP + VXLAN header, with IPv4 total length, checksum, UDP source port
    /// and length zero (filled per packet).
    pub header: [u8; 36],
    /// The ones'-complement sum of `header`'s IPv4 part (without length and checksum).
    pub ip_sum: u32,
    /// The tunnel's interface.
    pub interface: IfIndex,
    /// The interface is routed (L3, in a table): what arrives goes to `ethernet-input`, not
    /// to its cross-connect.
    pub routed: bool,
    /// Our underlay address.
    pub src: u32,
    /// The far end's underlay address.
    pub dst: u32,
    /// The VXLAN network identifier (24 bits).
    pub vni: u32,
    /// The far end's UDP port.
    pub dst_port: u16,
}

/// A VXLAN tunnel over IPv6 (RFC 7348 section 5 allows either family outside). As for
/// [`VxlanTunnel`], what encapsulation reads comes first.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub struct Vxlan6Tunnel {
    /// The outer IPv6 + UDP + VXLAN header, with the flow label, payload length, UDP source
    /// port, length and checksum zero (filled per packet).
    pub header: [u8; 56],
    /// The ones'-complement sum, not folded, of what the UDP checksum covers that never
    /// changes: the pseudo-header's addresses and next header, the destination port and the
    /// VXLAN header.
    pub fixed_sum: u32,
    /// The tunnel's interface.
    pub interface: IfIndex,
    /// The interface is routed (see [`VxlanTunnel::routed`]).
    pub routed: bool,
    /// Our underlay address.
    pub src: u128,
    /// The far end's underlay address.
    pub dst: u128,
    /// The VXLAN network identifier (24 bits).
    pub vni: u32,
    /// The far end's UDP port.
    pub dst_port: u16,
}

/// How `interface-output` reaches an interface, packed in one word per interface so that the
/// per-packet lookup touches a small array: the kind in the top two bits, an index below (a
/// VXLAN or WireGuard tunnel's underlay family in the index's top bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxClass(u32);

impl TxClass {
    const INDEX: u32 = (1 << 30) - 1;
    /// No such interface.
    pub const NONE: TxClass = TxClass(u32::MAX);

    /// A port: transmit on its own queue.
    pub fn port(i: IfIndex) -> TxClass {
        TxClass(i.get() & Self::INDEX)
    }
    /// A VLAN sub-interface: transmit on its parent port's queue.
    pub fn vlan(parent: IfIndex) -> TxClass {
        TxClass(1 << 30 | (parent.get() & Self::INDEX))
    }
    /// Marks a VXLAN class's tunnel as one of [`ForwardingState::tunnels6`].
    const VXLAN6: u32 = 1 << 29;

    /// A VXLAN tunnel over IPv4: encapsulate with tunnel `t`.
    pub fn vxlan(t: u32) -> TxClass {
        TxClass(2 << 30 | (t & Self::INDEX & !Self::VXLAN6))
    }

    /// A VXLAN tunnel over IPv6: encapsulate with tunnel `t` of the IPv6 ones.
    pub fn vxlan6(t: u32) -> TxClass {
        TxClass(2 << 30 | Self::VXLAN6 | (t & Self::INDEX & !Self::VXLAN6))
    }

    /// Marks a WireGuard class's tunnel as one over IPv6.
    const WG6: u32 = 1 << 29;

    /// A WireGuard tunnel over IPv4: encrypt with tunnel `t`.
    pub fn wireguard(t: u32) -> TxClass {
        TxClass(3 << 30 | (t & Self::INDEX & !Self::WG6))
    }

    /// A WireGuard tunnel over IPv6: encrypt with tunnel `t` (of
    /// [`ForwardingState::wireguard`], as for IPv4: only the outer header differs).
    pub fn wireguard6(t: u32) -> TxClass {
        TxClass(3 << 30 | Self::WG6 | (t & Self::INDEX & !Self::WG6))
    }

    /// The tunnel, if this is a WireGuard interface over IPv4.
    #[inline(always)]
    pub fn wireguard_tunnel(self) -> Option<u32> {
        (self.0 >> 29 == 6).then_some(self.0 & Self::INDEX)
    }

    /// The tunnel, if this is a WireGuard interface over IPv6.
    #[inline(always)]
    pub fn wireguard6_tunnel(self) -> Option<u32> {
        (self.0 >> 29 == 7 && self != Self::NONE).then_some(self.0 & Self::INDEX & !Self::WG6)
    }

    /// The port whose queue sends for this interface, if it is a port or a VLAN.
    #[inline(always)]
    pub fn queue(self) -> Option<IfIndex> {
        (self.0 >> 30 <= 1).then_some(IfIndex::new(self.0 & Self::INDEX))
    }

    /// The tunnel, if this is a VXLAN interface over IPv4.
    #[inline(always)]
    pub fn tunnel(self) -> Option<u32> {
        (self.0 >> 29 == 4).then_some(self.0 & Self::INDEX)
    }

    /// The tunnel, if this is a VXLAN interface over IPv6.
    #[inline(always)]
    pub fn tunnel6(self) -> Option<u32> {
        (self.0 >> 29 == 5).then_some(self.0 & Self::INDEX & !Self::VXLAN6)
    }
}

/// Something the data path tells the control side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataplaneEvent {
    /// An ARP packet showed `ip` is at `mac` on `interface`.
    NeighborLearned {
        /// Where.
        interface: IfIndex,
        /// The neighbour's address.
        ip: u32,
        /// Its MAC.
        mac: Mac,
    },
    /// Neighbour discovery showed IPv6 `ip` is at `mac` on `interface` (an advertisement, or
    /// a solicitation's source link-layer address).
    Neighbor6Learned {
        /// Where.
        interface: IfIndex,
        /// The neighbour's address.
        ip: [u8; 16],
        /// Its MAC.
        mac: Mac,
    },
}

/// A unicast neighbour solicitation the control side asks the data path to send (to confirm
/// a stale IPv6 neighbour; see `forwarding::neighbors`), taken by `ip6-nd-probe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdProbe {
    /// The interface to send it from.
    pub interface: IfIndex,
    /// The neighbour asked, as it lies in a header.
    pub target: [u8; 16],
    /// Its link-layer address (the solicitation is sent to it).
    pub mac: Mac,
}

/// Where the packets one interface receives go through its L3 cross-connect: an adjacency per
/// family ([`AdjIndex::NONE`]: that family has no next hop; `ip4-l3xc` drops it as
/// `no-next-hop`). IPv6's is IPv4's when the peer has no IPv6 next hop (one station).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L3xconnect {
    /// IPv4's adjacency.
    pub v4: AdjIndex,
    /// IPv6's adjacency.
    pub v6: AdjIndex,
}

impl L3xconnect {
    /// Not cross-connected.
    pub const NONE: L3xconnect = L3xconnect {
        v4: AdjIndex::NONE,
        v6: AdjIndex::NONE,
    };

    /// Whether it is [`L3xconnect::NONE`].
    #[inline(always)]
    pub fn is_none(&self) -> bool {
        self.v4.is_none() && self.v6.is_none()
    }
}

/// Everything the nodes read, as of one commit.
pub struct ForwardingState {
    /// Interfaces by index.
    pub interfaces: Vec<Option<Interface>>,
    /// How to transmit on each interface (by index).
    pub tx_class: Vec<TxClass>,
    /// L2 cross-connects: `xconnect[rx] = tx` ([`IfIndex::NONE`]: none).
    pub xconnect: Vec<IfIndex>,
    /// L3 cross-connects: `l3xconnect[rx]` holds the adjacencies every IP packet received on
    /// `rx` leaves by, whatever its destination ([`L3xconnect::NONE`]: none; the FIB decides).
    pub l3xconnect: Vec<L3xconnect>,
    /// Whether any interface is L3 cross-connected (so `ip4-input` checks `l3xconnect` only
    /// then).
    pub any_l3xconnect: bool,
    /// The IPv4 FIB's longest-prefix-match table: destination → load-balance index.
    pub fib: Arc<LpmTable>,
    /// The IPv6 FIB's table, likewise.
    pub fib6: Arc<Lpm6Table>,
    /// Every routing table's IPv4 FIB by number (`fibs[0]` is `fib`; `None`: a free number).
    pub fibs: Vec<Option<Arc<LpmTable>>>,
    /// Every routing table's IPv6 FIB by number.
    pub fibs6: Vec<Option<Arc<Lpm6Table>>>,
    /// The routing table of each interface (by index).
    pub rx_table: Vec<u16>,
    /// Whether any table besides the default one exists: only then do lookups read
    /// `rx_table` (one table costs nothing).
    pub multi_table: bool,
    /// Load-balance objects by index.
    pub load_balances: Vec<LoadBalance>,
    /// Adjacencies by index.
    pub adjacencies: Vec<Adjacency>,
    /// For each load-balance object (by index), its path when it has only one.
    pub single_paths: Vec<SinglePath>,
    /// VXLAN tunnels by index.
    pub tunnels: Vec<VxlanTunnel>,
    /// VXLAN tunnels by (outer source, outer destination, VNI) as received.
    pub tunnel_by_key: FastMap<(u32, u32, u32), u32>,
    /// VXLAN tunnels over IPv6 by index.
    pub tunnels6: Vec<Vxlan6Tunnel>,
    /// VXLAN tunnels over IPv6 by (outer source, outer destination, VNI) as received.
    pub tunnel6_by_key: FastMap<(u128, u128, u32), u32>,
    /// The UDP port VXLAN is received on (both families).
    pub vxlan_port: u16,
    /// Events for the control side (bounded; the data path never blocks on it).
    pub events: Arc<ArrayQueue<DataplaneEvent>>,
    /// Unicast neighbour solicitations the control side asks for (bounded).
    pub nd_probes: Arc<ArrayQueue<NdProbe>>,
    /// WireGuard tunnels by index (`None`: a removed tunnel's slot).
    pub wireguard: Vec<Option<WgTunnel>>,
    /// What the control side sends through the graph for WireGuard (handshake messages,
    /// packets it decrypted), taken by `wg-control-input` on any worker.
    pub wg_output: Arc<ArrayQueue<WgDatagram>>,
}

impl ForwardingState {
    /// How to transmit on interface `i`.
    #[inline(always)]
    pub fn tx_class(&self, i: IfIndex) -> TxClass {
        self.tx_class
            .get(i.as_usize())
            .copied()
            .unwrap_or(TxClass::NONE)
    }

    /// The adjacencies of interface `rx`'s L3 cross-connect, if it has one.
    #[inline(always)]
    pub fn l3xconnect(&self, rx: IfIndex) -> Option<L3xconnect> {
        self.l3xconnect
            .get(rx.as_usize())
            .copied()
            .filter(|x| !x.is_none())
    }

    /// The WireGuard tunnel listening on IPv4 `local:port`, if any.
    #[inline]
    pub fn wireguard_at(&self, local: u32, port: u16) -> Option<u32> {
        self.wireguard_listening(IpAddr::V4(local.into()), port)
    }

    /// The WireGuard tunnel listening on IPv6 `local` (as a number), `port`, if any.
    #[inline]
    pub fn wireguard_at6(&self, local: u128, port: u16) -> Option<u32> {
        self.wireguard_listening(IpAddr::V6(local.into()), port)
    }

    #[inline(always)]
    fn wireguard_listening(&self, local: IpAddr, port: u16) -> Option<u32> {
        self.wireguard
            .iter()
            .position(|t| {
                t.as_ref()
                    .is_some_and(|t| t.port == port && t.local == local)
            })
            .map(|t| t as u32)
    }

    /// The IPv4 FIB packets received on `rx` are looked up in (the default table's for what
    /// Quiver sends itself, `rx` out of range); `None` for a removed table.
    #[inline(always)]
    pub fn fib_of(&self, rx: u32) -> Option<&LpmTable> {
        let t = self.rx_table.get(rx as usize).copied().unwrap_or(0);
        self.fibs.get(usize::from(t))?.as_deref()
    }

    /// The IPv6 FIB packets received on `rx` are looked up in (see [`Self::fib_of`]).
    #[inline(always)]
    pub fn fib6_of(&self, rx: u32) -> Option<&Lpm6Table> {
        let t = self.rx_table.get(rx as usize).copied().unwrap_or(0);
        self.fibs6.get(usize::from(t))?.as_deref()
    }

    /// The interface `i`, if it exists.
    #[inline(always)]
    pub fn interface(&self, i: IfIndex) -> Option<&Interface> {
        self.interfaces.get(i.as_usize())?.as_ref()
    }
}
