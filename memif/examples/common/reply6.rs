//! The responder's IPv6 work: answer neighbour solicitations for our IPv6 address with a
//! neighbour advertisement (RFC 4861) and ICMPv6 echo requests to it with echo replies (RFC
//! 4443), ignore everything else with a reason. Bounds-checked throughout, like `reply`.

use std::net::Ipv6Addr;

use crate::reply::{Host, Ignored};
use crate::wire::{mac_at, ETH_HLEN, MIN_FRAME};

/// EtherType IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPV6_HLEN: usize = 40;
/// Next header ICMPv6.
const PROTO_ICMPV6: u8 = 58;
const ECHO_REQUEST: u8 = 128;
const ECHO_REPLY: u8 = 129;
const NEIGHBOR_SOLICITATION: u8 = 135;
const NEIGHBOR_ADVERTISEMENT: u8 = 136;
/// Neighbour discovery's messages carry hop limit 255 (proof they were not routed).
const ND_HOP_LIMIT: u8 = 255;
/// The hop limit of our echo replies.
const REPLY_HOP_LIMIT: u8 = 64;
/// Option "target link-layer address".
const OPT_TARGET_LLADDR: u8 = 2;
/// Advertisement flags: solicited, override.
const NA_SOLICITED_OVERRIDE: u8 = 0x60;

/// Whether `dst` is for us: our MAC, or the Ethernet multicast of our solicited-node group
/// (33:33:ff and the address's last three bytes), where solicitations come.
pub fn for_us(host: &Host, dst: &[u8; 6]) -> bool {
    match host.ip6 {
        Some(ip6) => {
            let o = ip6.octets();
            *dst == host.mac || *dst == [0x33, 0x33, 0xff, o[13], o[14], o[15]]
        }
        None => false,
    }
}

/// The ICMPv6 checksum of `body` between `src` and `dst` (RFC 8200 pseudo-header).
fn checksum6(src: &[u8], dst: &[u8], body: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut add = |b: &[u8]| {
        for w in b.chunks(2) {
            let hi = u64::from(w[0]) << 8;
            sum += hi | w.get(1).map_or(0, |&l| u64::from(l));
        }
    };
    add(src);
    add(dst);
    add(&(body.len() as u32).to_be_bytes());
    add(&[0, 0, 0, PROTO_ICMPV6]);
    add(body);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Answers one IPv6 frame (Ethernet header checked by the caller) into `out`.
pub fn ipv6(host: &Host, f: &[u8], out: &mut Vec<u8>) -> Result<(), Ignored> {
    let ip6 = host.ip6.ok_or(Ignored::OtherEthertype)?;
    let ip = f.get(ETH_HLEN..).ok_or(Ignored::Ipv6Malformed)?;
    if ip.len() < IPV6_HLEN || ip[0] >> 4 != 6 {
        return Err(Ignored::Ipv6Malformed);
    }
    let payload = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let body = ip
        .get(IPV6_HLEN..IPV6_HLEN + payload)
        .ok_or(Ignored::Ipv6Malformed)?;
    if ip[6] != PROTO_ICMPV6 {
        return Err(Ignored::NotIcmp);
    }
    let (src, dst) = (&ip[8..24], &ip[24..40]);
    if body.len() < 8 {
        return Err(Ignored::IcmpMalformed);
    }
    if checksum6(src, dst, body) != 0 {
        return Err(Ignored::IcmpBadChecksum);
    }
    let src_mac = mac_at(f, 6).ok_or(Ignored::Runt)?;
    let own = ip6.octets();
    let (kind, hop_limit, reply): (u8, u8, Vec<u8>) = match body[0] {
        ECHO_REQUEST if dst == own => {
            let mut r = body.to_vec();
            r[0] = ECHO_REPLY;
            (ECHO_REPLY, REPLY_HOP_LIMIT, r)
        }
        NEIGHBOR_SOLICITATION => {
            let target = body.get(8..24).ok_or(Ignored::IcmpMalformed)?;
            if target != own || ip[7] != ND_HOP_LIMIT {
                return Err(Ignored::Ipv6OtherDestination);
            }
            if src.iter().all(|&b| b == 0) {
                // Duplicate address detection: someone else wants our address; not answered.
                return Err(Ignored::Ipv6OtherDestination);
            }
            let mut r = vec![
                NEIGHBOR_ADVERTISEMENT,
                0,
                0,
                0,
                NA_SOLICITED_OVERRIDE,
                0,
                0,
                0,
            ];
            r.extend_from_slice(&own);
            r.extend_from_slice(&[OPT_TARGET_LLADDR, 1]);
            r.extend_from_slice(&host.mac);
            (NEIGHBOR_ADVERTISEMENT, ND_HOP_LIMIT, r)
        }
        ECHO_REQUEST => return Err(Ignored::Ipv6OtherDestination),
        _ => return Err(Ignored::IcmpNotEchoRequest),
    };
    debug_assert!(kind == reply[0]);
    out.extend_from_slice(&src_mac);
    out.extend_from_slice(&host.mac);
    out.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    out.extend_from_slice(&[0x60, 0, 0, 0]);
    out.extend_from_slice(&(reply.len() as u16).to_be_bytes());
    out.extend_from_slice(&[PROTO_ICMPV6, hop_limit]);
    out.extend_from_slice(&own);
    out.extend_from_slice(src);
    let at = out.len();
    out.extend_from_slice(&reply);
    out[at + 2..at + 4].copy_from_slice(&[0, 0]);
    let c = checksum6(&own, src, &out[at..]);
    out[at + 2..at + 4].copy_from_slice(&c.to_be_bytes());
    if out.len() < MIN_FRAME {
        out.resize(MIN_FRAME, 0);
    }
    Ok(())
}

/// Parses an IPv6 address for `--ip6`.
pub fn parse_ip6(s: &str) -> Result<Ipv6Addr, String> {
    let addr = s.split_once('/').map_or(s, |(a, _)| a);
    addr.parse()
        .map_err(|_| format!("`{addr}` is not an IPv6 address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Host {
        Host {
            mac: [2, 0, 0, 0, 0, 2],
            ip: "10.0.0.2".parse().unwrap(),
            prefix: 24,
            ip6: Some("fd00::2".parse().unwrap()),
        }
    }

    fn frame(dst_mac: [u8; 6], dst: Ipv6Addr, hop: u8, icmp: &[u8]) -> Vec<u8> {
        let src: Ipv6Addr = "fd00::1".parse().unwrap();
        let mut body = icmp.to_vec();
        let c = checksum6(&src.octets(), &dst.octets(), &body);
        body[2..4].copy_from_slice(&c.to_be_bytes());
        let mut f = dst_mac.to_vec();
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(body.len() as u16).to_be_bytes());
        f.extend_from_slice(&[PROTO_ICMPV6, hop]);
        f.extend_from_slice(&src.octets());
        f.extend_from_slice(&dst.octets());
        f.extend_from_slice(&body);
        f
    }

    #[test]
    fn solicitations_and_echoes_are_answered_with_valid_checksums() {
        let h = host();
        let own: Ipv6Addr = "fd00::2".parse().unwrap();
        let mut ns = vec![NEIGHBOR_SOLICITATION, 0, 0, 0, 0, 0, 0, 0];
        ns.extend_from_slice(&own.octets());
        let group = [0x33, 0x33, 0xff, 0, 0, 2];
        assert!(for_us(&h, &group));
        let mut out = Vec::new();
        ipv6(
            &h,
            &frame(group, "ff02::1:ff00:2".parse().unwrap(), 255, &ns),
            &mut out,
        )
        .unwrap();
        let icmp = &out[54..];
        assert_eq!(icmp[0], NEIGHBOR_ADVERTISEMENT);
        assert_eq!(&icmp[8..24], &own.octets());
        assert_eq!(&icmp[26..32], &h.mac);
        assert_eq!(checksum6(&out[22..38], &out[38..54], icmp), 0);

        out.clear();
        let echo = [ECHO_REQUEST, 0, 0, 0, 0, 7, 0, 1, 9, 9];
        ipv6(&h, &frame(h.mac, own, 64, &echo), &mut out).unwrap();
        assert_eq!(out[54], ECHO_REPLY);
        assert_eq!(&out[58..64], &echo[4..]);
        assert_eq!(checksum6(&out[22..38], &out[38..54], &out[54..64]), 0);

        // Not ours, or not whole: ignored with a reason.
        out.clear();
        let other: Ipv6Addr = "fd00::9".parse().unwrap();
        let r = ipv6(&h, &frame(h.mac, other, 64, &echo), &mut out);
        assert_eq!(r, Err(Ignored::Ipv6OtherDestination));
        let mut bad = frame(h.mac, own, 64, &echo);
        bad[60] ^= 1;
        assert_eq!(ipv6(&h, &bad, &mut out), Err(Ignored::IcmpBadChecksum));
        assert_eq!(ipv6(&h, &bad[..50], &mut out), Err(Ignored::Ipv6Malformed));
    }
}
