//! The classifier against the linear scan: random rule lists (prefixes from a few clusters so
//! that they nest and overlap, every kind of condition) and keys, many of them built on the
//! edges of the rules (each field at a rule's low and high end and one past them).

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::rule::mask128;
use super::*;

/// An address's top bits from one of a few clusters (or anywhere), as 128 bits.
fn bits128() -> impl Strategy<Value = u128> {
    prop_oneof![
        any::<u128>(),
        (0u128..4, any::<u128>()).prop_map(|(c, x)| (0x0a00 + c) << 112 | x >> 20),
        (0u128..3, any::<u16>()).prop_map(|(c, x)| (0xc0a8 + c) << 112 | (x as u128) << 96),
    ]
}

fn range16() -> impl Strategy<Value = Option<(u16, u16)>> {
    prop_oneof![
        Just(None),
        any::<u16>().prop_map(|p| Some((p, p))),
        Just(Some((1024, 65535))),
        Just(Some((0, 1023))),
        (0u16..200, 0u16..200).prop_map(|(a, b)| Some((a.min(b), a.max(b)))),
        (any::<u16>(), any::<u16>()).prop_map(|(a, b)| Some((a.min(b), a.max(b)))),
    ]
}

fn range8() -> impl Strategy<Value = Option<(u8, u8)>> {
    prop_oneof![
        Just(None),
        (0u8..20).prop_map(|t| Some((t, t))),
        (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Some((a.min(b), a.max(b)))),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Fam {
    Any,
    V4,
    V6,
}

fn prefix(fam: Fam, bits: u128, len: u8) -> Prefix {
    match fam {
        Fam::Any => Prefix::Any,
        Fam::V4 => {
            let l = len % 33;
            Prefix::V4(Ipv4Addr::from(((bits & mask128(l)) >> 96) as u32), l)
        }
        Fam::V6 => Prefix::V6(Ipv6Addr::from(bits & mask128(len)), len),
    }
}

fn spec() -> impl Strategy<Value = RuleSpec> {
    let fam = prop_oneof![Just(Fam::Any), Just(Fam::V4), Just(Fam::V4), Just(Fam::V6)];
    let len = prop_oneof![Just(0u8), Just(32), Just(128), 0u8..=128, 8u8..=24];
    let l4 = prop_oneof![
        Just(None),
        Just(Some(proto::TCP)),
        Just(Some(proto::UDP)),
        Just(Some(proto::ICMP)),
        Just(Some(proto::ICMPV6)),
        Just(Some(47)),
    ];
    let action = prop_oneof![
        Just(Action::Permit),
        Just(Action::Deny),
        Just(Action::PermitReflect)
    ];
    (
        (fam, any::<bool>(), any::<bool>()),
        (bits128(), len.clone(), bits128(), len),
        l4,
        (range16(), range16(), range8(), range8()),
        prop_oneof![
            Just(None),
            (any::<u8>(), any::<u8>()).prop_map(|(v, m)| Some((v & m, m)))
        ],
        action,
    )
        .prop_map(
            |(
                (fam, src_any, dst_any),
                (sb, sl, db, dl),
                proto,
                (sp, dp, it, ic),
                flags,
                action,
            )| {
                let (src, dst) = (
                    if src_any {
                        Prefix::Any
                    } else {
                        prefix(fam, sb, sl)
                    },
                    if dst_any {
                        Prefix::Any
                    } else {
                        prefix(fam, db, dl)
                    },
                );
                let (mut s, is) = (RuleSpec::any(action), |p| proto == Some(p));
                s.src = src;
                s.dst = dst;
                s.proto = proto;
                if is(proto::TCP) || is(proto::UDP) {
                    s.src_ports = sp;
                    s.dst_ports = dp;
                }
                if is(proto::ICMP) || is(proto::ICMPV6) {
                    s.icmp_type = it;
                    s.icmp_code = ic;
                }
                if is(proto::TCP) {
                    s.tcp_flags = flags;
                }
                s
            },
        )
}

/// Rules from a small vocabulary (a few prefixes nested in one another, ranges that straddle
/// each other and the tree's power-of-two cuts, three protocols), so that many rules overlap
/// the same keys and the tree goes deep, cuts ports, shares subtrees and prunes.
fn dense_spec() -> impl Strategy<Value = RuleSpec> {
    let pfx = prop_oneof![
        Just(Prefix::Any),
        Just(Prefix::V4(Ipv4Addr::new(10, 0, 0, 0), 8)),
        Just(Prefix::V4(Ipv4Addr::new(10, 1, 0, 0), 16)),
        Just(Prefix::V4(Ipv4Addr::new(10, 1, 2, 0), 24)),
        Just(Prefix::V4(Ipv4Addr::new(10, 1, 2, 3), 32)),
        Just(Prefix::V4(Ipv4Addr::new(10, 128, 0, 0), 9)),
        Just(Prefix::V4(Ipv4Addr::new(0, 0, 0, 0), 1)),
    ];
    let ports = prop_oneof![
        Just(None),
        Just(Some((80, 80))),
        Just(Some((1000, 3000))),
        Just(Some((2000, 5000))),
        Just(Some((1024, 65535))),
        Just(Some((0, 2047))),
        Just(Some((2048, 2048))),
    ];
    let proto = prop_oneof![Just(None), Just(Some(proto::TCP)), Just(Some(proto::UDP))];
    let flags = prop_oneof![
        Just(None),
        Just(Some((0x02, 0x12))),
        Just(Some((0x10, 0x10)))
    ];
    (
        pfx.clone(),
        pfx,
        proto,
        ports.clone(),
        ports,
        flags,
        any::<bool>(),
    )
        .prop_map(|(src, dst, proto, sp, dp, fl, deny)| {
            let mut s = RuleSpec::any(if deny { Action::Deny } else { Action::Permit });
            s.src = src;
            s.dst = dst;
            s.proto = proto;
            if proto.is_some() {
                s.src_ports = sp;
                s.dst_ports = dp;
            }
            if proto == Some(proto::TCP) {
                s.tcp_flags = fl;
            }
            s
        })
}

/// Keys: random ones, and for a rule, each field at its edges.
fn keys4(list: &RuleList, seeds: &[(u128, u128, u16, u16, u8, u8, u8)]) -> Vec<Key4> {
    let rules = list.rules();
    let mut out = Vec::new();
    for (n, &(a, b, sp, dp, pr, fl, pick)) in seeds.iter().enumerate() {
        let mut k = Key4 {
            src: (a >> 96) as u32,
            dst: (b >> 96) as u32,
            proto: [6, 17, 1, pr][pick as usize % 4],
            src_port: sp,
            dst_port: dp,
            tcp_flags: fl,
            fragment: n % 13 == 0,
        };
        if let Some(r) = (!rules.is_empty()).then(|| &rules[(a as usize) % rules.len()]) {
            let s = r.spec();
            let edge = |p: Prefix, dflt: u32, which: u8| match p {
                Prefix::V4(x, len) => {
                    let lo = u32::from(x);
                    let hi = lo | (!(mask128(len) >> 96) as u32);
                    [lo, hi, lo.wrapping_sub(1), hi.wrapping_add(1), dflt][which as usize % 5]
                }
                _ => dflt,
            };
            k.src = edge(s.src, k.src, pick);
            k.dst = edge(s.dst, k.dst, pick / 5);
            if let Some(p) = s.proto.filter(|_| pick % 7 != 0) {
                k.proto = p;
            }
            let (sl, sh) = r.l4_src();
            let (dl, dh) = r.l4_dst();
            let e16 = |lo: u16, hi: u16, v: u16, w: u8| {
                [lo, hi, lo.wrapping_sub(1), hi.wrapping_add(1), v][w as usize % 5]
            };
            k.src_port = e16(sl, sh, k.src_port, pick / 3);
            k.dst_port = e16(dl, dh, k.dst_port, pick / 11);
        }
        out.push(k);
    }
    out
}

fn keys6(list: &RuleList, seeds: &[(u128, u128, u16, u16, u8, u8, u8)]) -> Vec<Key6> {
    let rules = list.rules();
    let mut out = Vec::new();
    for (n, &(a, b, sp, dp, pr, fl, pick)) in seeds.iter().enumerate() {
        let mut k = Key6 {
            src: a,
            dst: b,
            proto: [6, 17, 58, pr][pick as usize % 4],
            src_port: sp,
            dst_port: dp,
            tcp_flags: fl,
            fragment: n % 13 == 0,
        };
        if let Some(r) = (!rules.is_empty()).then(|| &rules[(a as usize) % rules.len()]) {
            let s = r.spec();
            let edge = |p: Prefix, dflt: u128, which: u8| match p {
                Prefix::V6(x, len) => {
                    let lo = u128::from(x);
                    let hi = lo | !mask128(len);
                    [lo, hi, lo.wrapping_sub(1), hi.wrapping_add(1), dflt][which as usize % 5]
                }
                _ => dflt,
            };
            k.src = edge(s.src, k.src, pick);
            k.dst = edge(s.dst, k.dst, pick / 5);
            if let Some(p) = s.proto.filter(|_| pick % 7 != 0) {
                k.proto = p;
            }
            let (sl, sh) = r.l4_src();
            k.src_port =
                [sl, sh, sl.wrapping_sub(1), sh.wrapping_add(1), sp][pick as usize / 3 % 5];
            let (dl, dh) = r.l4_dst();
            k.dst_port =
                [dl, dh, dl.wrapping_sub(1), dh.wrapping_add(1), dp][pick as usize / 11 % 5];
        }
        out.push(k);
    }
    out
}

type Seed = (u128, u128, u16, u16, u8, u8, u8);

fn seeds() -> impl Strategy<Value = Vec<Seed>> {
    prop::collection::vec(
        (
            bits128(),
            bits128(),
            any::<u16>(),
            any::<u16>(),
            any::<u8>(),
            any::<u8>(),
            any::<u8>(),
        ),
        1..400,
    )
}

/// Both ways a list compiles: one tree, and split into parts (as big lists are).
fn check(list: &RuleList, seeds: &[Seed]) -> Result<(), TestCaseError> {
    check_compiled(
        list,
        seeds,
        &Classifier::compile_split_above(list, usize::MAX),
    )?;
    check_compiled(list, seeds, &Classifier::compile_split_above(list, 0))
}

fn check_compiled(list: &RuleList, seeds: &[Seed], c: &Classifier) -> Result<(), TestCaseError> {
    let k4 = keys4(list, seeds);
    let mut out = vec![Some(u32::MAX); k4.len()];
    c.classify4(&k4, &mut out);
    for (k, got) in k4.iter().zip(&out) {
        prop_assert_eq!(*got, list.first_match4(k), "IPv4 key {:?}", k);
    }
    let k6 = keys6(list, seeds);
    let mut out = vec![Some(u32::MAX); k6.len()];
    c.classify6(&k6, &mut out);
    for (k, got) in k6.iter().zip(&out) {
        prop_assert_eq!(*got, list.first_match6(k), "IPv6 key {:?}", k);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn the_classifier_agrees_with_the_scan(
        specs in prop::collection::vec(spec(), 0..300),
        seeds in seeds(),
    ) {
        let list = RuleList::new(specs, Action::Deny).unwrap();
        check(&list, &seeds)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn dense_overlapping_lists_agree_with_the_scan(
        specs in prop::collection::vec(dense_spec(), 0..200),
        seeds in seeds(),
    ) {
        let list = RuleList::new(specs, Action::Deny).unwrap();
        check(&list, &seeds)?;
    }
}

fn port_spec() -> impl Strategy<Value = RuleSpec> {
    let r = (0u16..64, 0u16..64).prop_map(|(a, b)| {
        let (a, b) = (a.min(b), a.max(b));
        Some((a * 1000 + 7, b * 1000 + 500))
    });
    (prop_oneof![Just(None), r.clone()], r, any::<bool>()).prop_map(|(sp, dp, deny)| RuleSpec {
        proto: Some(proto::TCP),
        src_ports: sp,
        dst_ports: dp,
        ..RuleSpec::any(if deny { Action::Deny } else { Action::Permit })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    /// Ranges that straddle the cuts: siblings with the same rules are not always the same.
    #[test]
    fn straddling_port_ranges_agree_with_the_scan(
        specs in prop::collection::vec(port_spec(), 0..300),
        seeds in seeds(),
    ) {
        let list = RuleList::new(specs, Action::Deny).unwrap();
        check(&list, &seeds)?;
    }
}

/// A bigger list than proptest's (deep trees, shared subtrees), from a fixed seed.
#[test]
fn a_list_of_3000_rules_agrees_with_the_scan() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    let specs = prop::collection::vec(spec(), 3000)
        .new_tree(&mut runner)
        .unwrap()
        .current();
    let list = RuleList::new(specs, Action::Deny).unwrap();
    for _ in 0..10 {
        let s = seeds().new_tree(&mut runner).unwrap().current();
        check(&list, &s).unwrap();
    }
}
