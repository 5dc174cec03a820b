//! Neighbour discovery's solicitations and advertisements (RFC 4861 4.3, 4.4): read and checked
//! as RFC 4861 7.1 asks of a receiver, and written. The messages are ICMPv6 bodies: these
//! functions take and write the whole ICMPv6 message (from its type byte); the caller checks
//! the IPv6 header's hop limit (255), the checksum and the addresses' rules it can see.

use super::icmp6::{NEIGHBOR_ADVERTISEMENT, NEIGHBOR_SOLICITATION};
use super::ipv6::{is_multicast, Ip6Addr};
use crate::Mac;

/// A solicitation's and an advertisement's fixed part: type, code, checksum, 4 bytes (flags
/// or reserved), the target address.
pub const FIXED_LEN: usize = 24;
/// An NS or NA with one link-layer address option (8 bytes for Ethernet).
pub const WITH_LINK_LAYER_LEN: usize = FIXED_LEN + 8;
/// Option: source link-layer address.
pub const OPT_SOURCE_LL: u8 = 1;
/// Option: target link-layer address.
pub const OPT_TARGET_LL: u8 = 2;
/// NA flag: the sender is a router.
pub const FLAG_ROUTER: u8 = 0x80;
/// NA flag: sent in answer to a solicitation.
pub const FLAG_SOLICITED: u8 = 0x40;
/// NA flag: override an existing cache entry.
pub const FLAG_OVERRIDE: u8 = 0x20;

/// Why an NS or NA is not one a receiver may act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NdError {
    /// Shorter than its fixed part.
    #[error("shorter than a neighbour discovery message")]
    TooShort,
    /// Not the message type asked for.
    #[error("another ICMPv6 type")]
    WrongType,
    /// A code other than 0.
    #[error("code is not 0")]
    BadCode,
    /// The target is a multicast address.
    #[error("multicast target")]
    MulticastTarget,
    /// An option of length 0, or one running past the message.
    #[error("an option of length 0 or past the end")]
    BadOption,
}

/// A neighbour solicitation, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Solicitation {
    /// The address whose link-layer address is asked for.
    pub target: Ip6Addr,
    /// The sender's link-layer address, if it gave one.
    pub source_mac: Option<Mac>,
}

/// A neighbour advertisement, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advertisement {
    /// The address advertised.
    pub target: Ip6Addr,
    /// Its flags (R, S, O in the top three bits).
    pub flags: u8,
    /// The target's link-layer address, if the message carries one.
    pub target_mac: Option<Mac>,
}

impl Advertisement {
    /// Whether it answers a solicitation.
    pub fn solicited(&self) -> bool {
        self.flags & FLAG_SOLICITED != 0
    }
}

/// The fixed part of an NS or NA of type `t`: its target and its options' bytes.
fn fixed(m: &[u8], t: u8) -> Result<(Ip6Addr, &[u8]), NdError> {
    let (head, options) = m
        .split_first_chunk::<FIXED_LEN>()
        .ok_or(NdError::TooShort)?;
    if head[0] != t {
        return Err(NdError::WrongType);
    }
    if head[1] != 0 {
        return Err(NdError::BadCode);
    }
    let target: Ip6Addr = std::array::from_fn(|k| head[8 + k]);
    if is_multicast(&target) {
        return Err(NdError::MulticastTarget);
    }
    Ok((target, options))
}

/// The link-layer address in the options of kind `kind` (the first one), having checked that
/// every option has a length and ends inside the message.
fn link_layer(mut options: &[u8], kind: u8) -> Result<Option<Mac>, NdError> {
    let mut found = None;
    while !options.is_empty() {
        let [t, len, ..] = *options else {
            return Err(NdError::BadOption);
        };
        let bytes = usize::from(len) * 8;
        if len == 0 || bytes > options.len() {
            return Err(NdError::BadOption);
        }
        if t == kind && found.is_none() && bytes >= 8 {
            found = Some(std::array::from_fn(|k| options[2 + k]));
        }
        options = &options[bytes..];
    }
    Ok(found)
}

/// Reads a neighbour solicitation (the whole ICMPv6 message).
pub fn solicitation(m: &[u8]) -> Result<Solicitation, NdError> {
    let (target, options) = fixed(m, NEIGHBOR_SOLICITATION)?;
    Ok(Solicitation {
        target,
        source_mac: link_layer(options, OPT_SOURCE_LL)?,
    })
}

/// Reads a neighbour advertisement (the whole ICMPv6 message).
pub fn advertisement(m: &[u8]) -> Result<Advertisement, NdError> {
    let (target, options) = fixed(m, NEIGHBOR_ADVERTISEMENT)?;
    Ok(Advertisement {
        target,
        flags: m[4] & (FLAG_ROUTER | FLAG_SOLICITED | FLAG_OVERRIDE),
        target_mac: link_layer(options, OPT_TARGET_LL)?,
    })
}

/// Writes an NS (or, with `flags`, an NA) for `target` with a link-layer address option of
/// kind `option` carrying `mac`, checksum zero: [`WITH_LINK_LAYER_LEN`] bytes into the
/// front of `out` (`None` when it is shorter).
fn write(out: &mut [u8], t: u8, flags: u8, target: &Ip6Addr, option: u8, mac: &Mac) -> Option<()> {
    let m = out.first_chunk_mut::<WITH_LINK_LAYER_LEN>()?;
    *m = [0; WITH_LINK_LAYER_LEN];
    m[0] = t;
    m[4] = flags;
    m[8..24].copy_from_slice(target);
    m[24] = option;
    m[25] = 1;
    m[26..32].copy_from_slice(mac);
    Some(())
}

/// Writes a solicitation for `target` from `source_mac` (checksum zero, for the caller to fill).
pub fn write_solicitation(out: &mut [u8], target: &Ip6Addr, source_mac: &Mac) -> Option<()> {
    write(
        out,
        NEIGHBOR_SOLICITATION,
        0,
        target,
        OPT_SOURCE_LL,
        source_mac,
    )
}

/// Writes an advertisement of `target` at `mac` with `flags` (checksum zero).
pub fn write_advertisement(out: &mut [u8], target: &Ip6Addr, flags: u8, mac: &Mac) -> Option<()> {
    write(
        out,
        NEIGHBOR_ADVERTISEMENT,
        flags,
        target,
        OPT_TARGET_LL,
        mac,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::icmp6::{Icmp6, PROTO_ICMP6};
    use crate::wire::Ipv6;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// scapy: `IPv6(src="fe80::1", dst="ff02::1:ff00:2", hlim=255)/ICMPv6ND_NS(tgt="fe80::2")/
    /// ICMPv6NDOptSrcLLAddr(lladdr="02:00:00:00:00:01")`.
    const NS: &str = "6000000000203afffe800000000000000000000000000001ff0200000000000000000001ff00000287007a9700000000fe8000000000000000000000000000020101020000000001";
    /// scapy: `IPv6(src="fe80::2", dst="fe80::1", hlim=255)/ICMPv6ND_NA(tgt="fe80::2", R=0,
    /// S=1, O=1)/ICMPv6NDOptDstLLAddr(lladdr="02:00:00:00:00:02")`.
    const NA: &str = "6000000000203afffe800000000000000000000000000002fe8000000000000000000000000000018800181a60000000fe8000000000000000000000000000020201020000000002";

    fn ll(i: u8) -> Ip6Addr {
        let mut a = [0; 16];
        a[..2].copy_from_slice(&[0xfe, 0x80]);
        a[15] = i;
        a
    }

    #[test]
    fn scapys_messages_read_and_ours_are_byte_for_byte_the_same() {
        for (text, is_ns) in [(NS, true), (NA, false)] {
            let p = hex(text);
            let ip = Ipv6::new_checked(&p[..]).unwrap();
            let pseudo = ip.pseudo_header_sum(PROTO_ICMP6, 32);
            assert!(Icmp6::new_checked(&p[40..]).unwrap().checksum_ok(pseudo));
            let mut ours = [0u8; WITH_LINK_LAYER_LEN];
            if is_ns {
                let s = solicitation(&p[40..]).unwrap();
                assert_eq!(s.target, ll(2));
                assert_eq!(s.source_mac, Some([2, 0, 0, 0, 0, 1]));
                write_solicitation(&mut ours, &ll(2), &[2, 0, 0, 0, 0, 1]).unwrap();
            } else {
                let a = advertisement(&p[40..]).unwrap();
                assert_eq!((a.target, a.target_mac), (ll(2), Some([2, 0, 0, 0, 0, 2])));
                assert!(a.solicited());
                assert_eq!(a.flags, FLAG_SOLICITED | FLAG_OVERRIDE);
                write_advertisement(
                    &mut ours,
                    &ll(2),
                    FLAG_SOLICITED | FLAG_OVERRIDE,
                    &[2, 0, 0, 0, 0, 2],
                )
                .unwrap();
            }
            Icmp6::new_checked(&mut ours[..])
                .unwrap()
                .fill_checksum(pseudo);
            assert_eq!(&ours[..], &p[40..], "{text}");
        }
    }

    #[test]
    fn what_a_receiver_must_discard_is_refused_by_name() {
        let ns = hex(NS)[40..].to_vec();
        assert_eq!(solicitation(&ns[..20]), Err(NdError::TooShort));
        assert_eq!(advertisement(&ns), Err(NdError::WrongType));
        let mut bad = ns.clone();
        bad[1] = 1;
        assert_eq!(solicitation(&bad), Err(NdError::BadCode));
        let mut bad = ns.clone();
        bad[8] = 0xff;
        assert_eq!(solicitation(&bad), Err(NdError::MulticastTarget));
        let mut bad = ns.clone();
        bad[25] = 0;
        assert_eq!(solicitation(&bad), Err(NdError::BadOption), "length 0");
        let mut bad = ns.clone();
        bad[25] = 2;
        assert_eq!(solicitation(&bad), Err(NdError::BadOption), "past the end");
        // A truncated option header.
        assert_eq!(solicitation(&ns[..25]), Err(NdError::BadOption));
        // No option at all is fine: the sender gave no address.
        assert_eq!(solicitation(&ns[..24]).unwrap().source_mac, None);
        // An unknown option before it is skipped.
        let mut with_other = ns[..24].to_vec();
        with_other.extend_from_slice(&[99, 1, 0, 0, 0, 0, 0, 0]);
        with_other.extend_from_slice(&ns[24..]);
        assert_eq!(
            solicitation(&with_other).unwrap().source_mac,
            Some([2, 0, 0, 0, 0, 1])
        );
    }
}
