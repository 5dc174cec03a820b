//! The forwarding topology in `quiver.toml`: ports, cross-connects, addresses, routes and
//! neighbours.

use serde::Deserialize;

use super::values::{self, ValueError};

/// One `[[port]]` entry: the driver is chosen by its `type` key.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PortSection {
    /// A memif interface.
    Memif(MemifSection),
    /// A kernel interface (a veth end, say) opened with AF_PACKET.
    AfPacket(AfPacketSection),
    /// A kernel interface opened with AF_XDP and Quiver's XDP program (also a node uplink).
    AfXdp(AfXdpSection),
    /// A TAP device: Quiver's port to the host's own network stack.
    Tap(TapSection),
    /// A DPDK ethdev: a virtual device or a PCI NIC (needs the `dpdk` build feature).
    Dpdk(DpdkSection),
}

impl PortSection {
    /// The keys every port has.
    pub fn common(&self) -> CommonPortSettings<'_> {
        let (name, mac, mtu) = match self {
            PortSection::Memif(m) => (&m.name, &m.mac, m.mtu),
            PortSection::AfPacket(a) => (&a.name, &a.mac, a.mtu),
            PortSection::AfXdp(x) => (&x.name, &x.mac, x.mtu),
            PortSection::Tap(t) => (&t.name, &t.mac, t.mtu),
            PortSection::Dpdk(d) => (&d.name, &d.mac, d.mtu),
        };
        CommonPortSettings {
            name,
            mac: mac.as_deref(),
            mtu,
        }
    }
}

/// Keys every port has. Each port section repeats them (rather than flattening a shared
/// struct) so that serde can refuse unknown keys.
#[derive(Debug, Clone, Copy)]
pub struct CommonPortSettings<'a> {
    /// `name`.
    pub name: &'a str,
    /// `mac`.
    pub mac: Option<&'a str>,
    /// `mtu`.
    pub mtu: u16,
}

fn default_mtu() -> u16 {
    1500
}

/// `type = "memif"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemifSection {
    /// The port's name, used by the other sections and in every table.
    pub name: String,
    /// MAC address (`02:fe:…`); default: the device's, or a locally administered one.
    pub mac: Option<String>,
    /// MTU of the interface (default 1500).
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// `master` (listen) or `slave` (connect).
    pub role: MemifRole,
    /// Control socket: a path, or `@name` for an abstract socket.
    pub socket: String,
    /// Interface id on that socket (default 0).
    #[serde(default)]
    pub id: u32,
    /// Shared secret (at most 23 bytes).
    pub secret: Option<String>,
    /// `ethernet` (default) or `ip`.
    #[serde(default)]
    pub mode: MemifMode,
    /// Ring size in slots, a power of two up to 16384 (default 1024).
    #[serde(default = "default_ring_size")]
    pub ring_size: u32,
    /// memif buffer size in bytes (default 2048).
    #[serde(default = "default_buffer_size")]
    pub buffer_size: u32,
    /// Queue pairs, 1 to 256 (default 1, as libmemif's and VPP's): a slave asks for this many
    /// (fewer if the master offers fewer), a master accepts at most this many. They are spread
    /// over the workers; with fewer queues than workers, workers share transmit queues.
    #[serde(default = "default_memif_queues")]
    pub queues: u16,
    /// The network namespace (a `/run/netns/…` or `/proc/<pid>/ns/net` path) the control
    /// socket is created in (NSM's client side: an abstract socket in the client's pod).
    /// Default: Quiver's own.
    #[serde(default)]
    pub netns: Option<std::path::PathBuf>,
}

/// `type = "af_packet"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AfPacketSection {
    /// The port's name, used by the other sections and in every table.
    pub name: String,
    /// MAC address (`02:fe:…`); default: the device's, or a locally administered one.
    pub mac: Option<String>,
    /// MTU of the interface (default 1500).
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// The kernel interface's name.
    pub interface: String,
    /// Receive frames for any MAC (default true: needed for cross-connects).
    #[serde(default = "yes")]
    pub promiscuous: bool,
    /// The network namespace the interface is in (`/var/run/netns/x`, `/proc/<pid>/ns/net`);
    /// default: Quiver's own.
    #[serde(default)]
    pub netns: Option<std::path::PathBuf>,
    /// KiB of each of a queue's rings, receive and transmit (a power of two from
    /// [`AF_PACKET_RING_KB`]'s range; default 4096): memory the kernel pins for every queue of
    /// the port, idle or not.
    #[serde(default = "default_ring_kb")]
    pub ring_kb: u32,
}

/// The range of `ring_kb` for `type = "af_packet"`, in KiB (powers of two only).
pub const AF_PACKET_RING_KB: std::ops::RangeInclusive<u32> = 64..=65536;

/// The default `ring_kb` of `type = "af_packet"`.
pub const DEFAULT_AF_PACKET_RING_KB: u32 = 4096;

fn default_ring_kb() -> u32 {
    DEFAULT_AF_PACKET_RING_KB
}

/// `type = "af_xdp"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AfXdpSection {
    /// The port's name, used by the other sections and in every table.
    pub name: String,
    /// Not settable: the port uses its kernel interface's MAC.
    pub mac: Option<String>,
    /// MTU of the interface (default 1500; at most 3,822 without multi-buffer frames).
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// The kernel interface's name.
    pub interface: String,
    /// The network namespace the interface is in; default: Quiver's own.
    #[serde(default)]
    pub netns: Option<std::path::PathBuf>,
    /// UMEM frames per queue, half to receive and half to send (a power of two from
    /// [`AF_XDP_FRAMES`]'s range; default 2048, 4 MiB at 2 KiB frames).
    #[serde(default = "default_xdp_frames")]
    pub frames: u32,
    /// `auto` (zero-copy where the driver can, copy otherwise), `copy` or `zero-copy`.
    #[serde(default)]
    pub copy: XdpCopyKey,
    /// Where the XDP program runs: `auto` (native where the driver can), `native` or
    /// `generic`.
    #[serde(default)]
    pub attach: XdpAttachKey,
    /// Take only UDP to these destination ports and leave everything else to the kernel (a
    /// node uplink carrying Quiver's VXLAN and WireGuard); default: every frame.
    #[serde(default)]
    pub tunnel_ports: Vec<u16>,
}

/// The range of `frames` for `type = "af_xdp"` (powers of two only).
pub const AF_XDP_FRAMES: std::ops::RangeInclusive<u32> = 64..=65536;

fn default_xdp_frames() -> u32 {
    2048
}

/// `copy` of an AF_XDP port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum XdpCopyKey {
    /// Zero-copy where the driver supports it, copy mode otherwise.
    #[default]
    Auto,
    /// Copy mode.
    Copy,
    /// Zero-copy or fail.
    ZeroCopy,
}

/// `attach` of an AF_XDP port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum XdpAttachKey {
    /// Native where the driver supports it, generic otherwise.
    #[default]
    Auto,
    /// In the driver.
    Native,
    /// The generic hook.
    Generic,
}

/// `type = "tap"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TapSection {
    /// The port's name, used by the other sections and in every table.
    pub name: String,
    /// MAC address (`02:fe:…`); default: the device's, or a locally administered one.
    pub mac: Option<String>,
    /// MTU of the interface (default 1500).
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// The kernel device's name (default: the port's name).
    pub device: Option<String>,
    /// The network namespace to create the device in (a path such as `/run/netns/x`;
    /// default: Quiver's).
    #[serde(default)]
    pub netns: Option<std::path::PathBuf>,
}

/// `type = "dpdk"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpdkSection {
    /// The port's name, used by the other sections and in every table.
    pub name: String,
    /// MAC address: not settable for DPDK ports (the device's is used).
    pub mac: Option<String>,
    /// MTU of the interface (default 1500).
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// The device: a vdev created from `[dpdk] vdevs` (`net_ring0`) or a PCI address from
    /// `[dpdk] pci`.
    pub device: String,
    /// Receive descriptors per queue (default 1024).
    #[serde(default = "default_descriptors")]
    pub rx_descriptors: u16,
    /// Transmit descriptors per queue (default 1024).
    #[serde(default = "default_descriptors")]
    pub tx_descriptors: u16,
}

fn default_descriptors() -> u16 {
    1024
}

fn yes() -> bool {
    true
}

fn default_ring_size() -> u32 {
    1024
}

fn default_buffer_size() -> u32 {
    2048
}

/// libmemif's and VPP's default.
pub(crate) fn default_memif_queues() -> u16 {
    1
}

/// memif role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemifRole {
    /// Listens.
    Master,
    /// Connects.
    Slave,
}

/// memif mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemifMode {
    /// Ethernet frames.
    #[default]
    Ethernet,
    /// Bare IP packets.
    Ip,
}

/// One `[[xconnect]]`: every frame received on `a` leaves on `b` and every frame received on
/// `b` leaves on `a`, untouched.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XconnectSection {
    /// One port.
    pub a: String,
    /// The other.
    pub b: String,
}

/// One `[[address]]`: an address of ours on a port, IPv4 or IPv6 (answers ARP or neighbour
/// discovery, and ping; its subnet is connected). A port's first IPv6 address also gives it
/// its EUI-64 link-local address.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddressSection {
    /// The port.
    pub port: String,
    /// Address and prefix length, `10.0.1.1/24` or `2001:db8:1::1/64`.
    pub ip: String,
}

/// One `[[route]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// Destination prefix, `10.2.0.0/16` or `2001:db8:2::/48` (`0.0.0.0/0`, `::/0` for the
    /// default routes).
    pub prefix: String,
    /// Next hops, each `address@port` of the prefix's family (IPv6: global, or link-local as
    /// routers advertise themselves); several spread flows (ECMP). Empty: drop.
    #[serde(default)]
    pub via: Vec<String>,
    /// The `[[table]]` it is in (default: the default table); its next hops' ports must be in
    /// that table.
    #[serde(default)]
    pub table: Option<String>,
    /// A next-table route: what it matches is looked up again in this table (`default` or a
    /// `[[table]]`, not its own; no `via` then). Refused when a packet would cross tables
    /// twice (a loop back, or on to a third table).
    #[serde(default)]
    pub next_table: Option<String>,
}

/// One `[[table]]`: a routing table (a VRF) with its own IPv4 and IPv6 routes. The ports it
/// lists are in it (every other port is in the default table): their addresses' connected
/// routes are its, and what they receive is routed by its routes alone. A routed `[[vxlan]]`
/// or a `[[wireguard]]` tunnel listed here is such an interface too: what it decapsulates or
/// decrypts is routed in this table (its underlay stays the default table's).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSection {
    /// Its name (not `default`, the default table's).
    pub name: String,
    /// The ports (and tunnels) in it.
    #[serde(default)]
    pub interfaces: Vec<String>,
}

/// One `[[neighbor]]`: a static ARP entry, or for an IPv6 address a static neighbour
/// discovery one (never aged).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeighborSection {
    /// The port.
    pub port: String,
    /// The neighbour's address.
    pub ip: String,
    /// Its MAC.
    pub mac: String,
}

/// Parses `aa:bb:cc:dd:ee:ff` (see [`values::mac`]).
pub fn parse_mac(s: &str) -> Result<[u8; 6], ValueError> {
    values::mac(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_and_nonsense_is_refused() {
        assert_eq!(
            parse_mac("02:fe:00:00:0a:ff"),
            Ok([0x02, 0xfe, 0, 0, 0x0a, 0xff])
        );
        assert!(parse_mac("02:fe:00:00:0a").is_err());
        assert!(parse_mac("02:fe:00:00:0a:zz").is_err());
    }
}
