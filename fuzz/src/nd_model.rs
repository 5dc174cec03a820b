//! An independent model of neighbour discovery for the `nd` target: how a receiver reads a
//! solicitation or an advertisement (RFC 4861 4.3, 4.4, 4.6 and 7.1.1/7.1.2, written here from
//! the RFC, not from `net`'s code), and what the rig's graph must do with one message it
//! receives: the drop's node and reason, or the advertisement it answers with, and what it
//! reports as learned.

use graph_nodes::wire::nd::{Advertisement, NdError, Solicitation};

use crate::ip6::{a6, eui64, icmp6, icmp6_sum, multicast_mac, nd_msg, our_globals, HOST_C};
use crate::{eth, mac};

/// The sources the target picks from: the unspecified address (duplicate address detection),
/// a host's link-local address, an on-link host, our own address, a multicast address (never
/// a source), an off-link host, a configured neighbour's link-local address, a host of the
/// other port's subnet.
pub fn sources() -> [[u8; 16]; 8] {
    [
        [0; 16],
        a6("fe80::c"),
        a6("fd00:2::7"),
        a6("fd00:2::fe"),
        a6("ff02::1"),
        a6("fd00:99::1"),
        a6("fe80::b"),
        a6("fd00:1::5"),
    ]
}

/// The destinations the target picks from: the solicited-node group of our fd00:x::fe
/// addresses, that of eth1's link-local address, all nodes, our address on eth1, eth1's
/// link-local address, a group of nobody here, a link-local address of nobody here, an on-link
/// host of eth1 (routed: neighbour discovery for it).
pub fn destinations() -> [[u8; 16]; 8] {
    [
        a6("ff02::1:ff00:fe"),
        a6("ff02::1:ff00:2"),
        a6("ff02::1"),
        a6("fd00:2::fe"),
        eui64(mac(1)),
        a6("ff02::1:ff00:33"),
        a6("fe80::99"),
        a6("fd00:2::7"),
    ]
}

/// The fixed part of an NS or NA of type `t`: its target and its options.
fn fixed(m: &[u8], t: u8) -> Result<([u8; 16], &[u8]), NdError> {
    if m.len() < 24 {
        return Err(NdError::TooShort);
    }
    if m[0] != t {
        return Err(NdError::WrongType);
    }
    if m[1] != 0 {
        return Err(NdError::BadCode);
    }
    let target: [u8; 16] = m[8..24].try_into().unwrap();
    if target[0] == 0xff {
        return Err(NdError::MulticastTarget);
    }
    Ok((target, &m[24..]))
}

/// RFC 4861 4.6: options are (type, length in units of 8 bytes, ...); a length of zero, or an
/// option that does not fit, makes the whole message one to discard. The first link-layer
/// address option of `kind` counts.
fn option_mac(options: &[u8], kind: u8) -> Result<Option<[u8; 6]>, NdError> {
    let mut at = 0;
    let mut found = None;
    while at < options.len() {
        if options.len() - at < 2 {
            return Err(NdError::BadOption);
        }
        let units = usize::from(options[at + 1]);
        if units == 0 || at + units * 8 > options.len() {
            return Err(NdError::BadOption);
        }
        if options[at] == kind && found.is_none() {
            found = Some(options[at + 2..at + 8].try_into().unwrap());
        }
        at += units * 8;
    }
    Ok(found)
}

/// A solicitation as a receiver reads it.
pub fn solicitation(m: &[u8]) -> Result<Solicitation, NdError> {
    let (target, options) = fixed(m, 135)?;
    Ok(Solicitation {
        target,
        source_mac: option_mac(options, 1)?,
    })
}

/// An advertisement as a receiver reads it.
pub fn advertisement(m: &[u8]) -> Result<Advertisement, NdError> {
    let (target, options) = fixed(m, 136)?;
    Ok(Advertisement {
        target,
        flags: m[4] & 0xe0,
        target_mac: option_mac(options, 2)?,
    })
}

/// What the graph must do with one received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Dropped, counted under this node's reason.
    Dropped(&'static str, &'static str),
    /// Answered by this frame out of the receiving port.
    Answered(Vec<u8>),
    /// Routed toward a neighbour not yet resolved: dropped as `resolving` (a solicitation for
    /// it may go out of eth1).
    Resolving,
    /// Not neighbour discovery: what becomes of it is the other targets' to check.
    Other,
}

/// What the graph must do with the message `m` from `src` to `dst` with hop limit `hop`,
/// received on port `port`; and what neighbour it must report learned (address, MAC).
pub fn expect(
    port: usize,
    src: [u8; 16],
    dst: [u8; 16],
    hop: u8,
    m: &[u8],
) -> (Outcome, Option<([u8; 16], [u8; 6])>) {
    use Outcome::*;
    let link_local = eui64(mac(port as u8));
    let global = our_globals()[if port == 0 { 0 } else { 2 }];
    let multicast = |a: &[u8; 16]| a[0] == 0xff;
    let solicited_node = |a: &[u8; 16]| a[..13] == a6("ff02::1:ff00:0")[..13];
    // ip6-input: where it goes, by its addresses.
    if multicast(&src) {
        return (Dropped("ip6-input", "bad-source"), None);
    }
    if multicast(&dst) {
        let group_of = |a: &[u8; 16]| a[13..] == dst[13..];
        let ours = dst == a6("ff02::1")
            || dst == a6("ff02::2")
            || (solicited_node(&dst) && (group_of(&link_local) || group_of(&global)));
        if !ours {
            return (Dropped("ip6-input", "multicast-not-ours"), None);
        }
    } else if dst[..2] == [0xfe, 0x80] {
        if dst != link_local {
            return (Dropped("ip6-input", "link-local-not-ours"), None);
        }
    } else if !our_globals().contains(&dst) {
        // Only fd00:2::7 is among the destinations: on eth1's link, unknown.
        return (Resolving, None);
    }
    // ip6-local: ICMPv6 for us; neighbour discovery's types go on.
    let Some(&t) = m.first() else {
        return (Dropped("ip6-local", "bad-icmp"), None);
    };
    if !(133..=137).contains(&t) {
        return (Other, None);
    }
    // ip6-nd, RFC 4861 7.1: router messages are never acted on; the rest must not have been
    // routed and must verify.
    if matches!(t, 133 | 134 | 137) {
        return (Dropped("ip6-nd", "router-messages-ignored"), None);
    }
    if hop != 255 {
        return (Dropped("ip6-nd", "bad-hop-limit"), None);
    }
    if m.len() < 4 || icmp6_sum(&src, &dst, m) != 0 {
        return (Dropped("ip6-nd", "bad-checksum"), None);
    }
    const MALFORMED: Outcome = Dropped("ip6-nd", "malformed");
    if t == 136 {
        let Ok(a) = advertisement(m) else {
            return (MALFORMED, None);
        };
        if multicast(&dst) && a.flags & 0x40 != 0 {
            return (MALFORMED, None);
        }
        let learned = a.target_mac.map(|mac| (a.target, mac));
        return (Dropped("ip6-nd", "advertisements"), learned);
    }
    if t != 135 {
        return (MALFORMED, None);
    }
    let Ok(s) = solicitation(m) else {
        return (MALFORMED, None);
    };
    let dad = src == [0; 16];
    if dad && (!solicited_node(&dst) || s.source_mac.is_some()) {
        return (MALFORMED, None);
    }
    if s.target != link_local && s.target != global {
        return (Dropped("ip6-nd", "not-for-us"), None);
    }
    // Answered from the target, to the sender (all nodes for duplicate address detection):
    // router, override, and solicited unless to all nodes; at our MAC.
    let (to, l2_to, flags) = if dad {
        (a6("ff02::1"), multicast_mac(&a6("ff02::1")), 0xa0)
    } else {
        (src, s.source_mac.unwrap_or(HOST_C), 0xe0)
    };
    let na = icmp6(
        s.target,
        to,
        255,
        &nd_msg(136, flags, s.target, 2, mac(port as u8)),
    );
    let learned = s.source_mac.filter(|_| !dad).map(|mac| (src, mac));
    (Answered(eth(l2_to, mac(port as u8), 0x86dd, &na)), learned)
}
