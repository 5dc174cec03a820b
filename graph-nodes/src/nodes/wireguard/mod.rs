//! WireGuard in the graph (issue 23), carrying IPv4 and IPv6, over an IPv4 or an IPv6 underlay
//! (issue 31): one pair of nodes per underlay family, the tunnel's listen address deciding
//! which. `wg4-encrypt` (`wg6-encrypt`) seals an IP packet routed (or L3 cross-connected) to a
//! WireGuard interface into a transport message in UDP/IPv4 (UDP/IPv6, with the checksum IPv6
//! requires) to the peer whose allowed IPs (of the packet's family) hold its destination, and
//! sends it to be routed on the underlay, as `vxlan4-encap` (`vxlan6-encap`) does;
//! `wg4-decrypt` (`wg6-decrypt`) takes UDP for a tunnel's address and port from `ip4-local`
//! (`ip6-local`; a zero or wrong UDP checksum refused), checks the receiver index and the
//! replay window, opens the message in place, checks the inner source against the peer's
//! allowed IPs and hands the inner packet, as received on the tunnel's interface, to
//! `ip4-input` or `ip6-input`. Handshake messages and transport messages of sessions the
//! control side has not confirmed are punted to it (a bounded queue: a full one is a counted
//! drop); what it sends comes back through the input node `wg-control-input`, which writes the
//! outer header of the tunnel's family. See `crate::wireguard` for the state and who writes
//! what. Nothing here allocates or blocks.
//!
//! The two families share one loop each (the nodes are generic over the family, so each
//! compiles to its own straight path): only the outer header, its checks and the next node
//! differ.

mod control;
mod decrypt;
mod encrypt;

pub use control::WgControlInput;
pub use decrypt::{Wg4Decrypt, Wg6Decrypt, WgDecrypt};
pub use encrypt::{Wg4Encrypt, Wg6Encrypt, WgEncrypt};

use crate::wire::checksum::ones_sum;
use crate::wire::{self, ipv6, Ipv4, Ipv6, Udp, WireError};

/// Outer IPv4 + UDP.
const OUTER4: u16 = (wire::IP4_HEADER + wire::UDP_HEADER) as u16;

/// Outer IPv6 + UDP.
const OUTER6: u16 = (ipv6::HEADER_LEN + wire::UDP_HEADER) as u16;

/// The outer headers' length over IPv6 (`v6`) or IPv4.
const fn outer(v6: bool) -> u16 {
    if v6 {
        OUTER6
    } else {
        OUTER4
    }
}

/// Writes an outer IPv4 + UDP header (no options, UDP checksum 0) for `payload` bytes at the
/// start of `h` (`Truncated` when it has no room for them).
fn write_outer4(
    h: &mut [u8],
    (src, sport): (u32, u16),
    (dst, dport): (u32, u16),
    payload: u16,
) -> Result<(), WireError> {
    let mut ip = Ipv4::new_checked(h)?;
    ip.reset_header();
    ip.set_total_len(payload + OUTER4);
    ip.set_ttl(64);
    ip.set_protocol(wire::PROTO_UDP);
    ip.set_src(src);
    ip.set_dst(dst);
    ip.fill_checksum();
    let mut udp = Udp::new_checked(ip.payload_mut())?;
    udp.set_src_port(sport);
    udp.set_dst_port(dport);
    udp.set_len(payload + wire::UDP_HEADER as u16);
    udp.set_checksum(0);
    Ok(())
}

/// Writes an outer IPv6 + UDP header (hop limit 64, traffic class and flow label 0, as Linux's
/// WireGuard sends) for `payload` bytes at the start of `h`, whose one's-complement sum (not
/// folded, as [`ones_sum`] gives it) is `payload_sum`: the UDP checksum is the headers' 40
/// bytes of addresses and ports summed here, the pseudo-header's length and next header, and
/// that sum (`Truncated` when `h` has no room for the headers; `payload` must fit a UDP length).
fn write_outer6(
    h: &mut [u8],
    (src, sport): (u128, u16),
    (dst, dport): (u128, u16),
    payload: u16,
    payload_sum: u64,
) -> Result<(), WireError> {
    let (ip, rest) = h
        .split_at_mut_checked(ipv6::HEADER_LEN)
        .ok_or(WireError::Truncated)?;
    let udp_len = payload + wire::UDP_HEADER as u16;
    let mut ip = Ipv6::new_checked(ip)?;
    ip.reset_header();
    ip.set_payload_len(udp_len);
    ip.set_next_header(wire::PROTO_UDP);
    ip.set_hop_limit(64);
    ip.set_src(&src.to_be_bytes());
    ip.set_dst(&dst.to_be_bytes());
    let mut udp = Udp::new_checked(rest)?;
    udp.set_src_port(sport);
    udp.set_dst_port(dport);
    udp.set_len(udp_len);
    udp.set_checksum(0);
    // The pseudo-header's addresses and the UDP header (its length once more: the
    // pseudo-header's upper-layer length), then what follows.
    let acc = ones_sum(&h[8..usize::from(OUTER6)])
        + u64::from(udp_len)
        + u64::from(wire::PROTO_UDP)
        + payload_sum;
    let mut udp = Udp::new_checked(&mut h[ipv6::HEADER_LEN..])?;
    udp.set_checksum(super::vxlan6::udp_checksum(acc));
    Ok(())
}
