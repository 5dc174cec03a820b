//! Rules and keys as points and boxes in a space of 32-bit fields, the form the tree cuts.
//!
//! IPv4: source, destination, source port (or ICMP type), destination port (or ICMP code),
//! protocol. IPv6: each address as four 32-bit words (a prefix is exactly a range in each word:
//! the words before its end exact, the one it ends in a prefix, the rest whole), then the same
//! three. TCP flags are not a dimension: the leaf checks them.

use super::rule::{mask128, Prefix, Rule};
use super::{Key4, Key6};

/// IPv4's dimensions.
pub(super) const D4: usize = 5;
/// IPv6's dimensions.
pub(super) const D6: usize = 11;
/// How many bits of each IPv4 dimension are used.
pub(super) const WIDTHS4: [u8; D4] = [32, 32, 16, 16, 8];
/// How many bits of each IPv6 dimension are used.
pub(super) const WIDTHS6: [u8; D6] = [32, 32, 32, 32, 32, 32, 32, 32, 16, 16, 8];

/// One rule as a box: `lo[d] <= k[d] <= lo[d] + span[d]` in every dimension, and the TCP
/// flags condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BoxRule<const D: usize> {
    pub lo: [u32; D],
    pub span: [u32; D],
    pub flags_mask: u8,
    pub flags_value: u8,
    /// The rule's position in the list.
    pub index: u32,
}

impl<const D: usize> BoxRule<D> {
    /// The high end of dimension `d`.
    pub fn hi(&self, d: usize) -> u32 {
        self.lo[d] + self.span[d]
    }

    /// Whether a key (its fields and TCP flags) is inside.
    #[inline(always)]
    pub fn contains(&self, k: &[u32; D], flags: u8) -> bool {
        let mut ok = flags & self.flags_mask == self.flags_value;
        for ((&k, &lo), &span) in k.iter().zip(&self.lo).zip(&self.span) {
            ok &= k.wrapping_sub(lo) <= span;
        }
        ok
    }
}

/// A key the tree can classify.
pub(super) trait FieldKey<const D: usize>: Copy {
    fn fields(&self) -> [u32; D];
    fn tcp_flags(&self) -> u8;
    fn fragment(&self) -> bool;
}

impl FieldKey<D4> for Key4 {
    #[inline(always)]
    fn fields(&self) -> [u32; D4] {
        [
            self.src,
            self.dst,
            u32::from(self.src_port),
            u32::from(self.dst_port),
            u32::from(self.proto),
        ]
    }
    fn tcp_flags(&self) -> u8 {
        self.tcp_flags
    }
    fn fragment(&self) -> bool {
        self.fragment
    }
}

impl FieldKey<D6> for Key6 {
    #[inline(always)]
    fn fields(&self) -> [u32; D6] {
        let w = |a: u128, i: u32| (a >> (96 - 32 * i)) as u32;
        [
            w(self.src, 0),
            w(self.src, 1),
            w(self.src, 2),
            w(self.src, 3),
            w(self.dst, 0),
            w(self.dst, 1),
            w(self.dst, 2),
            w(self.dst, 3),
            u32::from(self.src_port),
            u32::from(self.dst_port),
            u32::from(self.proto),
        ]
    }
    fn tcp_flags(&self) -> u8 {
        self.tcp_flags
    }
    fn fragment(&self) -> bool {
        self.fragment
    }
}

/// `(lo, span)` of each 32-bit word of a 128-bit prefix, `words` of them from the top.
fn prefix_words(bits: u128, len: u8, words: usize, out_lo: &mut [u32], out_span: &mut [u32]) {
    let m = mask128(len);
    for i in 0..words {
        let shift = 96 - 32 * i as u32;
        let lo = ((bits & m) >> shift) as u32;
        let keep = (m >> shift) as u32;
        out_lo[i] = lo;
        out_span[i] = !keep;
    }
}

fn ranges(rule: &Rule, l3_only: bool) -> [(u32, u32); 3] {
    let (sp, dp) = if l3_only {
        ((0, u16::MAX), (0, u16::MAX))
    } else {
        (rule.l4_src(), rule.l4_dst())
    };
    let proto = rule
        .spec()
        .proto
        .map_or((0, 255), |p| (u32::from(p), u32::from(p)));
    [
        (u32::from(sp.0), u32::from(sp.1)),
        (u32::from(dp.0), u32::from(dp.1)),
        proto,
    ]
}

fn flags(rule: &Rule, l3_only: bool) -> (u8, u8) {
    match rule.spec().tcp_flags {
        Some((v, m)) if !l3_only => (m, v),
        _ => (0, 0),
    }
}

/// `rule` (at `index`) as an IPv4 box; `l3_only` leaves out what a fragment is not compared on.
pub(super) fn box4(rule: &Rule, index: u32, l3_only: bool) -> BoxRule<D4> {
    let mut lo = [0u32; D4];
    let mut span = [0u32; D4];
    for (d, p) in [rule.spec().src, rule.spec().dst].into_iter().enumerate() {
        let (bits, len) = match p {
            Prefix::V4(a, len) => (u128::from(u32::from(a)) << 96, len),
            _ => (0, 0),
        };
        prefix_words(bits, len, 1, &mut lo[d..d + 1], &mut span[d..d + 1]);
    }
    for (i, (l, h)) in ranges(rule, l3_only).into_iter().enumerate() {
        lo[2 + i] = l;
        span[2 + i] = h - l;
    }
    let (flags_mask, flags_value) = flags(rule, l3_only);
    BoxRule {
        lo,
        span,
        flags_mask,
        flags_value,
        index,
    }
}

/// `rule` (at `index`) as an IPv6 box.
pub(super) fn box6(rule: &Rule, index: u32, l3_only: bool) -> BoxRule<D6> {
    let mut lo = [0u32; D6];
    let mut span = [0u32; D6];
    for (d, p) in [rule.spec().src, rule.spec().dst].into_iter().enumerate() {
        let (bits, len) = match p {
            Prefix::V6(a, len) => (u128::from(a), len),
            _ => (0, 0),
        };
        let at = 4 * d;
        prefix_words(bits, len, 4, &mut lo[at..at + 4], &mut span[at..at + 4]);
    }
    for (i, (l, h)) in ranges(rule, l3_only).into_iter().enumerate() {
        lo[8 + i] = l;
        span[8 + i] = h - l;
    }
    let (flags_mask, flags_value) = flags(rule, l3_only);
    BoxRule {
        lo,
        span,
        flags_mask,
        flags_value,
        index,
    }
}
