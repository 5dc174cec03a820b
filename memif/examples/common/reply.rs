//! The responder's protocol work: answer ARP requests for our address and ICMP echo requests to
//! it (and, with an IPv6 address, neighbour solicitations and ICMPv6 echoes: `reply6`), ignore
//! everything else with a reason. Every field is read through bounds-checked helpers,
//! so no input can make this code panic.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::reply6::{self, ETHERTYPE_IPV6};
use crate::wire::{
    be16, checksum, is_group_mac, mac_at, BROADCAST_MAC, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETH_HLEN,
    MIN_FRAME,
};

/// ARP operation codes.
const ARP_REQUEST: u16 = 1;
const ARP_REPLY: u16 = 2;
/// Ethernet + IPv4 ARP payload length (RFC 826 with 6-byte hardware, 4-byte protocol addresses).
const ARP_LEN: usize = 28;
/// IP protocol number of ICMP.
const PROTO_ICMP: u8 = 1;
const ICMP_ECHO_REPLY: u8 = 0;
const ICMP_ECHO_REQUEST: u8 = 8;
/// ICMP header length (type, code, checksum, identifier, sequence).
const ICMP_HLEN: usize = 8;
const IPV4_HLEN: usize = 20;
/// The TTL our replies carry.
const REPLY_TTL: u8 = 64;

/// Our end: MAC address, IPv4 address and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    /// Our MAC address.
    pub mac: [u8; 6],
    /// Our IPv4 address.
    pub ip: Ipv4Addr,
    /// Our prefix length (0..=32); its broadcast address is never a valid source.
    pub prefix: u8,
    /// Our IPv6 address, if we answer IPv6 too.
    pub ip6: Option<Ipv6Addr>,
}

impl Host {
    /// Our subnet's directed broadcast address (`None` for /31 and /32, which have none).
    fn subnet_broadcast(&self) -> Option<Ipv4Addr> {
        if self.prefix >= 31 {
            return None;
        }
        let host_bits = u32::MAX >> self.prefix;
        Some(Ipv4Addr::from(u32::from(self.ip) | host_bits))
    }
}

/// Parses `192.168.1.2/24` (the prefix defaults to 32).
pub fn parse_ip_prefix(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (addr, len) = s.split_once('/').unwrap_or((s, "32"));
    let ip: Ipv4Addr = addr
        .parse()
        .map_err(|_| format!("`{addr}` is not an IPv4 address"))?;
    let prefix: u8 = len
        .parse()
        .ok()
        .filter(|&p| p <= 32)
        .ok_or_else(|| format!("`{len}` is not a prefix length (0..=32)"))?;
    Ok((ip, prefix))
}

/// Why a frame got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// Shorter than an Ethernet header.
    Runt,
    /// Neither IPv4 nor ARP (VLAN-tagged frames included).
    OtherEthertype,
    /// Sent to another unicast MAC (or, for IPv4, to a group MAC).
    OtherMac,
    /// From a group MAC address, which no host has.
    GroupSource,
    /// An ARP packet too short, or not Ethernet/IPv4 ARP.
    ArpMalformed,
    /// An ARP reply or another operation: nothing to answer.
    ArpNotRequest,
    /// An ARP request for another address.
    ArpOtherTarget,
    /// An IPv4 header that is truncated, has a bad version, header or total length.
    Ipv4Malformed,
    /// An IPv4 header whose checksum is wrong.
    Ipv4BadChecksum,
    /// An IPv4 fragment (we do not reassemble).
    Ipv4Fragment,
    /// An IPv4 packet for another address.
    Ipv4OtherDestination,
    /// An IPv4 source that no host may use (0.0.0.0, broadcast, multicast, our subnet broadcast).
    Ipv4BadSource,
    /// IPv4 that is not ICMP.
    NotIcmp,
    /// ICMP shorter than its header.
    IcmpMalformed,
    /// ICMP whose checksum is wrong.
    IcmpBadChecksum,
    /// ICMP that is not an echo request.
    IcmpNotEchoRequest,
    /// An IPv6 header that is truncated or not version 6.
    Ipv6Malformed,
    /// IPv6 for another address (or a solicitation for one).
    Ipv6OtherDestination,
}

impl Ignored {
    /// Every reason, in counter order.
    pub const ALL: [Ignored; 18] = [
        Ignored::Runt,
        Ignored::OtherEthertype,
        Ignored::OtherMac,
        Ignored::GroupSource,
        Ignored::ArpMalformed,
        Ignored::ArpNotRequest,
        Ignored::ArpOtherTarget,
        Ignored::Ipv4Malformed,
        Ignored::Ipv4BadChecksum,
        Ignored::Ipv4Fragment,
        Ignored::Ipv4OtherDestination,
        Ignored::Ipv4BadSource,
        Ignored::NotIcmp,
        Ignored::IcmpMalformed,
        Ignored::IcmpBadChecksum,
        Ignored::IcmpNotEchoRequest,
        Ignored::Ipv6Malformed,
        Ignored::Ipv6OtherDestination,
    ];

    /// A short name for summaries.
    pub fn name(self) -> &'static str {
        match self {
            Ignored::Runt => "runt",
            Ignored::OtherEthertype => "other_ethertype",
            Ignored::OtherMac => "other_mac",
            Ignored::GroupSource => "group_source",
            Ignored::ArpMalformed => "arp_malformed",
            Ignored::ArpNotRequest => "arp_not_request",
            Ignored::ArpOtherTarget => "arp_other_target",
            Ignored::Ipv4Malformed => "ipv4_malformed",
            Ignored::Ipv4BadChecksum => "ipv4_bad_checksum",
            Ignored::Ipv4Fragment => "ipv4_fragment",
            Ignored::Ipv4OtherDestination => "ipv4_other_destination",
            Ignored::Ipv4BadSource => "ipv4_bad_source",
            Ignored::NotIcmp => "not_icmp",
            Ignored::IcmpMalformed => "icmp_malformed",
            Ignored::IcmpBadChecksum => "icmp_bad_checksum",
            Ignored::IcmpNotEchoRequest => "icmp_not_echo_request",
            Ignored::Ipv6Malformed => "ipv6_malformed",
            Ignored::Ipv6OtherDestination => "ipv6_other_destination",
        }
    }

    /// This reason's index in [`Ignored::ALL`].
    pub fn index(self) -> usize {
        Ignored::ALL.iter().position(|&r| r == self).unwrap_or(0)
    }
}

/// What [`respond`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An ARP reply is in the output buffer.
    ArpReply,
    /// An ICMP echo reply is in the output buffer.
    EchoReply,
    /// An ICMPv6 echo reply or neighbour advertisement is in the output buffer.
    Ipv6Reply,
    /// No answer; the output buffer is empty.
    Ignored(Ignored),
}

/// Looks at one received frame and, when it deserves an answer, writes the reply frame into
/// `out` (cleared first; its capacity is reused, so a warm buffer does not allocate).
pub fn respond(host: &Host, frame: &[u8], out: &mut Vec<u8>) -> Outcome {
    out.clear();
    let r = match ethernet(host, frame) {
        Ok(ETHERTYPE_ARP) => arp(host, frame, out).map(|()| Outcome::ArpReply),
        Ok(ETHERTYPE_IPV6) => reply6::ipv6(host, frame, out).map(|()| Outcome::Ipv6Reply),
        Ok(_) => ipv4(host, frame, out).map(|()| Outcome::EchoReply),
        Err(why) => Err(why),
    };
    r.unwrap_or_else(|why| {
        out.clear();
        Outcome::Ignored(why)
    })
}

/// Checks the Ethernet header; returns the EtherType (ARP, IPv4, or IPv6 with an IPv6 address).
fn ethernet(host: &Host, f: &[u8]) -> Result<u16, Ignored> {
    let (Some(dst), Some(src), Some(ethertype)) = (mac_at(f, 0), mac_at(f, 6), be16(f, 12)) else {
        return Err(Ignored::Runt);
    };
    let ip6 = ethertype == ETHERTYPE_IPV6 && host.ip6.is_some();
    if ethertype != ETHERTYPE_ARP && ethertype != ETHERTYPE_IPV4 && !ip6 {
        return Err(Ignored::OtherEthertype);
    }
    // ARP requests are broadcast, neighbour solicitations to a solicited-node group; echo
    // requests come to our MAC.
    let for_us = dst == host.mac
        || (ethertype == ETHERTYPE_ARP && dst == BROADCAST_MAC)
        || (ip6 && reply6::for_us(host, &dst));
    if !for_us {
        return Err(Ignored::OtherMac);
    }
    if is_group_mac(&src) {
        return Err(Ignored::GroupSource);
    }
    Ok(ethertype)
}

/// Starts a reply frame: Ethernet header to `dst` from us.
fn ethernet_header(out: &mut Vec<u8>, host: &Host, dst: &[u8; 6], ethertype: u16) {
    out.extend_from_slice(dst);
    out.extend_from_slice(&host.mac);
    out.extend_from_slice(&ethertype.to_be_bytes());
}

/// Pads a reply to the shortest Ethernet frame.
fn pad(out: &mut Vec<u8>) {
    if out.len() < MIN_FRAME {
        out.resize(MIN_FRAME, 0);
    }
}

fn arp(host: &Host, f: &[u8], out: &mut Vec<u8>) -> Result<(), Ignored> {
    let a = f
        .get(ETH_HLEN..ETH_HLEN + ARP_LEN)
        .ok_or(Ignored::ArpMalformed)?;
    // Ethernet (1) / IPv4, 6-byte and 4-byte addresses.
    if be16(a, 0) != Some(1) || be16(a, 2) != Some(ETHERTYPE_IPV4) || a[4] != 6 || a[5] != 4 {
        return Err(Ignored::ArpMalformed);
    }
    if be16(a, 6) != Some(ARP_REQUEST) {
        return Err(Ignored::ArpNotRequest);
    }
    let sender_mac = mac_at(a, 8).ok_or(Ignored::ArpMalformed)?;
    let sender_ip = &a[14..18];
    if a[24..28] != host.ip.octets() {
        return Err(Ignored::ArpOtherTarget);
    }
    if is_group_mac(&sender_mac) {
        return Err(Ignored::GroupSource);
    }
    ethernet_header(out, host, &sender_mac, ETHERTYPE_ARP);
    out.extend_from_slice(&a[0..6]); // hardware/protocol types and lengths, as asked
    out.extend_from_slice(&ARP_REPLY.to_be_bytes());
    out.extend_from_slice(&host.mac);
    out.extend_from_slice(&host.ip.octets());
    out.extend_from_slice(&sender_mac);
    out.extend_from_slice(sender_ip);
    pad(out);
    Ok(())
}

/// A checked IPv4 header: its length and the packet's total length.
struct Ipv4Header {
    header_len: usize,
    total_len: usize,
    source: Ipv4Addr,
}

fn ipv4_header(host: &Host, f: &[u8]) -> Result<Ipv4Header, Ignored> {
    let ip = f.get(ETH_HLEN..).ok_or(Ignored::Ipv4Malformed)?;
    let first = *ip.first().ok_or(Ignored::Ipv4Malformed)?;
    let header_len = usize::from(first & 0x0f) * 4;
    let total_len = usize::from(be16(ip, 2).ok_or(Ignored::Ipv4Malformed)?);
    // Trailing bytes (Ethernet padding) are allowed; a total length beyond the frame is not.
    if first >> 4 != 4 || header_len < IPV4_HLEN || total_len < header_len || total_len > ip.len() {
        return Err(Ignored::Ipv4Malformed);
    }
    if checksum(&ip[..header_len]) != 0 {
        return Err(Ignored::Ipv4BadChecksum);
    }
    let frag = be16(ip, 6).ok_or(Ignored::Ipv4Malformed)?;
    if frag & 0x3fff != 0 {
        // More-fragments set, or a non-zero offset.
        return Err(Ignored::Ipv4Fragment);
    }
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    if dst != host.ip {
        return Err(Ignored::Ipv4OtherDestination);
    }
    let source = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    if source.is_unspecified()
        || source.is_broadcast()
        || source.is_multicast()
        || Some(source) == host.subnet_broadcast()
    {
        return Err(Ignored::Ipv4BadSource);
    }
    if ip[9] != PROTO_ICMP {
        return Err(Ignored::NotIcmp);
    }
    Ok(Ipv4Header {
        header_len,
        total_len,
        source,
    })
}

fn ipv4(host: &Host, f: &[u8], out: &mut Vec<u8>) -> Result<(), Ignored> {
    let h = ipv4_header(host, f)?;
    let ip = &f[ETH_HLEN..ETH_HLEN + h.total_len];
    let icmp = &ip[h.header_len..];
    if icmp.len() < ICMP_HLEN {
        return Err(Ignored::IcmpMalformed);
    }
    if checksum(icmp) != 0 {
        return Err(Ignored::IcmpBadChecksum);
    }
    if icmp[0] != ICMP_ECHO_REQUEST || icmp[1] != 0 {
        return Err(Ignored::IcmpNotEchoRequest);
    }
    let src_mac = mac_at(f, 6).ok_or(Ignored::Runt)?;
    ethernet_header(out, host, &src_mac, ETHERTYPE_IPV4);
    // IPv4 header without options: same TOS and identification, no fragmentation.
    let ip_start = out.len();
    let total = (IPV4_HLEN + icmp.len()) as u16;
    out.extend_from_slice(&[0x45, ip[1]]);
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&ip[4..6]);
    out.extend_from_slice(&[0, 0, REPLY_TTL, PROTO_ICMP, 0, 0]);
    out.extend_from_slice(&host.ip.octets());
    out.extend_from_slice(&h.source.octets());
    let c = checksum(&out[ip_start..]);
    out[ip_start + 10..ip_start + 12].copy_from_slice(&c.to_be_bytes());
    // ICMP: echo reply with the request's identifier, sequence number and data.
    let icmp_start = out.len();
    out.extend_from_slice(&[ICMP_ECHO_REPLY, 0, 0, 0]);
    out.extend_from_slice(&icmp[4..]);
    let c = checksum(&out[icmp_start..]);
    out[icmp_start + 2..icmp_start + 4].copy_from_slice(&c.to_be_bytes());
    pad(out);
    Ok(())
}
