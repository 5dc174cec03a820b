//! The definition of a match, by scanning the list: what the compiled classifier must agree
//! with (its tests compare the two), and a fallback for whoever has no classifier at hand.

use super::rule::{mask128, Prefix, Rule, RuleList};
use super::{Key4, Key6};

fn prefix_matches(p: Prefix, addr: u128, v6: bool) -> bool {
    match p {
        Prefix::Any => true,
        Prefix::V4(a, len) if !v6 => {
            (addr << 96 ^ u128::from(u32::from(a)) << 96) & mask128(len) == 0
        }
        Prefix::V6(a, len) if v6 => (addr ^ u128::from(a)) & mask128(len) == 0,
        _ => false,
    }
}

fn in_range(v: u16, (lo, hi): (u16, u16)) -> bool {
    lo <= v && v <= hi
}

/// The fields both families' keys share.
struct Common {
    proto: u8,
    src_port: u16,
    dst_port: u16,
    tcp_flags: u8,
    fragment: bool,
}

fn rest_matches(rule: &Rule, k: &Common) -> bool {
    let s = rule.spec();
    if s.proto.is_some_and(|p| p != k.proto) {
        return false;
    }
    if k.fragment {
        return true;
    }
    in_range(k.src_port, rule.l4_src())
        && in_range(k.dst_port, rule.l4_dst())
        && s.tcp_flags.is_none_or(|(v, m)| k.tcp_flags & m == v)
}

impl Rule {
    /// Whether this rule matches an IPv4 packet with `key`.
    pub fn matches4(&self, key: &Key4) -> bool {
        let s = self.spec();
        self.is_v4()
            && prefix_matches(s.src, u128::from(key.src), false)
            && prefix_matches(s.dst, u128::from(key.dst), false)
            && rest_matches(
                self,
                &Common {
                    proto: key.proto,
                    src_port: key.src_port,
                    dst_port: key.dst_port,
                    tcp_flags: key.tcp_flags,
                    fragment: key.fragment,
                },
            )
    }

    /// Whether this rule matches an IPv6 packet with `key`.
    pub fn matches6(&self, key: &Key6) -> bool {
        let s = self.spec();
        self.is_v6()
            && prefix_matches(s.src, key.src, true)
            && prefix_matches(s.dst, key.dst, true)
            && rest_matches(
                self,
                &Common {
                    proto: key.proto,
                    src_port: key.src_port,
                    dst_port: key.dst_port,
                    tcp_flags: key.tcp_flags,
                    fragment: key.fragment,
                },
            )
    }
}

impl RuleList {
    /// The index of the first rule matching `key` (IPv4), by a linear scan.
    pub fn first_match4(&self, key: &Key4) -> Option<u32> {
        self.rules()
            .iter()
            .position(|r| r.matches4(key))
            .map(|i| i as u32)
    }

    /// The index of the first rule matching `key` (IPv6), by a linear scan.
    pub fn first_match6(&self, key: &Key6) -> Option<u32> {
        self.rules()
            .iter()
            .position(|r| r.matches6(key))
            .map(|i| i as u32)
    }
}
