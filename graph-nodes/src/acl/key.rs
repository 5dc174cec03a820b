//! The keys a node parses out of a packet and classifies.

/// An IPv4 packet's fields, as a node parsed them.
///
/// Addresses are host-order `u32`s (`u32::from(Ipv4Addr)`). For ICMP, `src_port` holds the
/// type and `dst_port` the code; for other protocols without ports both are 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Key4 {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// IP protocol.
    pub proto: u8,
    /// Source port, or the ICMP type.
    pub src_port: u16,
    /// Destination port, or the ICMP code.
    pub dst_port: u16,
    /// The TCP header's flags byte (FIN 0x01 … CWR 0x80); 0 for other protocols.
    pub tcp_flags: u8,
    /// A non-first fragment: no L4 header. It matches on L3 fields only (VPP's rule): the
    /// prefixes and the protocol are compared, a rule's ports, ICMP type/code and TCP flags
    /// are not.
    pub fragment: bool,
}

/// An IPv6 packet's fields: as [`Key4`], with host-order `u128` addresses
/// (`u128::from(Ipv6Addr)`) and the upper-layer protocol after the extension headers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Key6 {
    /// Source address.
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// The upper-layer protocol.
    pub proto: u8,
    /// Source port, or the ICMPv6 type.
    pub src_port: u16,
    /// Destination port, or the ICMPv6 code.
    pub dst_port: u16,
    /// The TCP flags byte; 0 for other protocols.
    pub tcp_flags: u8,
    /// A non-first fragment (a Fragment header with a non-zero offset): L3 fields only.
    pub fragment: bool,
}
