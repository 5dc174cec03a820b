//! Frames for the responder (ARP and ICMP echo requests, the exact replies they must get, and a
//! table of frames it must ignore), built here independently of the examples' code.

use crate::reply::{Host, Ignored};

pub(crate) const RESPONDER_MAC: [u8; 6] = [0x02, 0xfe, 0x5a, 0, 0, 0x01];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];
pub(crate) const RESPONDER_IP: [u8; 4] = [192, 168, 1, 2];
const PEER_IP: [u8; 4] = [192, 168, 1, 1];

/// RFC 1071 checksum, written again here so the tests do not check the examples with their own
/// code.
pub(crate) fn inet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| (u32::from(c[0]) << 8) | u32::from(c.get(1).copied().unwrap_or(0)))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

pub(crate) fn arp_request(target: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&PEER_IP);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target);
    f.resize(60, 0);
    f
}

/// The reply the responder must send to `arp_request(RESPONDER_IP)`, byte for byte.
pub(crate) fn expected_arp_reply() -> Vec<u8> {
    let mut f = vec![
        0x02, 0, 0, 0, 0, 0x99, // to the asker
        0x02, 0xfe, 0x5a, 0, 0, 0x01, // from us
        0x08, 0x06, // ARP
        0, 1, 0x08, 0x00, 6, 4, // Ethernet / IPv4
        0, 2, // reply
        0x02, 0xfe, 0x5a, 0, 0, 0x01, 192, 168, 1, 2, // sender: us
        0x02, 0, 0, 0, 0, 0x99, 192, 168, 1, 1, // target: the asker
    ];
    f.resize(60, 0);
    f
}

/// An IPv4 packet in an Ethernet frame; the IPv4 header checksum is computed.
fn ipv4_frame(dst_mac: [u8; 6], src: [u8; 4], dst: [u8; 4], proto: u8, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + body.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0xbe, 0xef, 0x40, 0, 64, proto, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let c = inet_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(body);
    f
}

/// An ICMP message with a correct checksum.
fn icmp(kind: u8, id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, 0, 0, 0];
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(payload);
    let c = inet_checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

pub(crate) fn echo_request(seq: u16, payload_len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..payload_len).map(|i| (i * 7 + 3) as u8).collect();
    let body = icmp(8, 0x1234, seq, &payload);
    let mut f = ipv4_frame(RESPONDER_MAC, PEER_IP, RESPONDER_IP, 1, &body);
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// The reply to `echo_request(seq, payload_len)`, byte for byte.
pub(crate) fn expected_echo_reply(seq: u16, payload_len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..payload_len).map(|i| (i * 7 + 3) as u8).collect();
    let body = icmp(0, 0x1234, seq, &payload);
    let mut f = Vec::new();
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&RESPONDER_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + body.len()) as u16;
    // Same identification as the request, no flags, TTL 64.
    let mut ip = vec![0x45, 0, 0, 0, 0xbe, 0xef, 0, 0, 64, 1, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&RESPONDER_IP);
    ip.extend_from_slice(&PEER_IP);
    let c = inet_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&body);
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// Recomputes the IPv4 header checksum of an Ethernet frame (after a test edited the header).
fn fix_ip_checksum(f: &mut [u8]) {
    f[24] = 0;
    f[25] = 0;
    let c = inet_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

/// Frames the responder must ignore, each with the reason it must give.
pub(crate) fn garbage() -> Vec<(&'static str, Vec<u8>, Ignored)> {
    let mut v: Vec<(&'static str, Vec<u8>, Ignored)> = Vec::new();
    v.push(("one byte", vec![0xff], Ignored::Runt));
    v.push(("13 bytes", vec![0; 13], Ignored::Runt));
    let mut f = echo_request(1, 8);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    v.push(("IPv6 ethertype", f, Ignored::OtherEthertype));
    let mut f = echo_request(1, 8);
    f.splice(12..12, [0x81, 0x00, 0, 5]);
    v.push(("VLAN tagged", f, Ignored::OtherEthertype));
    v.push(("random bytes", vec![0xa5; 64], Ignored::OtherEthertype));
    v.push((
        "ARP for another address",
        arp_request([192, 168, 1, 3]),
        Ignored::ArpOtherTarget,
    ));
    let mut f = arp_request(RESPONDER_IP);
    f[21] = 2;
    v.push(("ARP reply", f, Ignored::ArpNotRequest));
    let mut f = arp_request(RESPONDER_IP);
    f.truncate(34);
    v.push(("truncated ARP", f, Ignored::ArpMalformed));
    let mut f = arp_request(RESPONDER_IP);
    f[18] = 8;
    v.push((
        "ARP with 8-byte hardware addresses",
        f,
        Ignored::ArpMalformed,
    ));
    let mut f = arp_request(RESPONDER_IP);
    f[22] = 0x01; // sender hardware address is multicast
    v.push(("ARP from a group MAC", f, Ignored::GroupSource));
    let mut f = echo_request(1, 8);
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x55]);
    v.push(("echo to another MAC", f, Ignored::OtherMac));
    let mut f = echo_request(1, 8);
    f[0..6].copy_from_slice(&[0xff; 6]);
    v.push(("echo to the broadcast MAC", f, Ignored::OtherMac));
    let mut f = echo_request(1, 8);
    f[6] = 0x01;
    v.push(("echo from a group MAC", f, Ignored::GroupSource));
    let mut f = echo_request(1, 8);
    f[24] ^= 0xff;
    v.push(("bad IPv4 checksum", f, Ignored::Ipv4BadChecksum));
    let mut f = echo_request(1, 8);
    f[14] = 0x65;
    fix_ip_checksum(&mut f);
    v.push(("IP version 6 in an IPv4 frame", f, Ignored::Ipv4Malformed));
    let mut f = echo_request(1, 8);
    f[14] = 0x44;
    v.push(("IPv4 header length 16", f, Ignored::Ipv4Malformed));
    let mut f = echo_request(1, 8);
    f[16..18].copy_from_slice(&1500u16.to_be_bytes());
    fix_ip_checksum(&mut f);
    v.push((
        "IPv4 total length past the frame",
        f,
        Ignored::Ipv4Malformed,
    ));
    let mut f = echo_request(1, 8);
    f.truncate(30);
    v.push(("truncated IPv4 header", f, Ignored::Ipv4Malformed));
    let mut f = echo_request(1, 8);
    f[20] = 0x20; // more fragments
    fix_ip_checksum(&mut f);
    v.push(("first fragment", f, Ignored::Ipv4Fragment));
    let mut f = echo_request(1, 8);
    f[30..34].copy_from_slice(&[192, 168, 1, 9]);
    fix_ip_checksum(&mut f);
    v.push(("echo to another address", f, Ignored::Ipv4OtherDestination));
    let mut f = echo_request(1, 8);
    f[26..30].copy_from_slice(&[0, 0, 0, 0]);
    fix_ip_checksum(&mut f);
    v.push(("echo from 0.0.0.0", f, Ignored::Ipv4BadSource));
    let mut f = echo_request(1, 8);
    f[26..30].copy_from_slice(&[192, 168, 1, 255]);
    fix_ip_checksum(&mut f);
    v.push(("echo from the subnet broadcast", f, Ignored::Ipv4BadSource));
    let udp = [0x04, 0x00, 0x04, 0x01, 0, 12, 0, 0, 1, 2, 3, 4];
    v.push((
        "UDP to us",
        ipv4_frame(RESPONDER_MAC, PEER_IP, RESPONDER_IP, 17, &udp),
        Ignored::NotIcmp,
    ));
    let mut f = echo_request(1, 8);
    f[36] ^= 0x55;
    v.push(("bad ICMP checksum", f, Ignored::IcmpBadChecksum));
    let body = icmp(0, 1, 1, &[0; 8]);
    v.push((
        "echo reply",
        ipv4_frame(RESPONDER_MAC, PEER_IP, RESPONDER_IP, 1, &body),
        Ignored::IcmpNotEchoRequest,
    ));
    v.push((
        "ICMP shorter than its header",
        ipv4_frame(RESPONDER_MAC, PEER_IP, RESPONDER_IP, 1, &[8, 0, 0xf7, 0xff]),
        Ignored::IcmpMalformed,
    ));
    v
}

pub(crate) fn host() -> Host {
    Host {
        mac: RESPONDER_MAC,
        ip: RESPONDER_IP.into(),
        prefix: 24,
        ip6: None,
    }
}
