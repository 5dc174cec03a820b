//! Each kind of match, the fragment rule, the default, and every refusal.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;

fn v4(a: [u8; 4], len: u8) -> Prefix {
    Prefix::V4(Ipv4Addr::from(a), len)
}

fn v6(s: &str, len: u8) -> Prefix {
    Prefix::V6(s.parse::<Ipv6Addr>().unwrap(), len)
}

fn key4(src: [u8; 4], dst: [u8; 4], proto: u8, sp: u16, dp: u16) -> Key4 {
    Key4 {
        src: u32::from(Ipv4Addr::from(src)),
        dst: u32::from(Ipv4Addr::from(dst)),
        proto,
        src_port: sp,
        dst_port: dp,
        tcp_flags: 0,
        fragment: false,
    }
}

fn key6(src: &str, dst: &str, proto: u8, sp: u16, dp: u16) -> Key6 {
    Key6 {
        src: u128::from(src.parse::<Ipv6Addr>().unwrap()),
        dst: u128::from(dst.parse::<Ipv6Addr>().unwrap()),
        proto,
        src_port: sp,
        dst_port: dp,
        tcp_flags: 0,
        fragment: false,
    }
}

/// The classifier's answer for one key, checked against the linear scan's.
fn one4(list: &RuleList, k: Key4) -> Option<u32> {
    let c = Classifier::compile(list);
    let mut out = [Some(u32::MAX)];
    c.classify4(&[k], &mut out);
    assert_eq!(
        out[0],
        list.first_match4(&k),
        "classifier and scan disagree on {k:?}"
    );
    out[0]
}

fn one6(list: &RuleList, k: Key6) -> Option<u32> {
    let c = Classifier::compile(list);
    let mut out = [Some(u32::MAX)];
    c.classify6(&[k], &mut out);
    assert_eq!(
        out[0],
        list.first_match6(&k),
        "classifier and scan disagree on {k:?}"
    );
    out[0]
}

fn list(specs: Vec<RuleSpec>) -> RuleList {
    RuleList::new(specs, Action::Deny).unwrap()
}

fn tcp(action: Action) -> RuleSpec {
    RuleSpec {
        proto: Some(proto::TCP),
        ..RuleSpec::any(action)
    }
}

#[test]
fn prefixes_match_by_their_length() {
    let l = list(vec![
        RuleSpec {
            src: v4([10, 1, 0, 0], 16),
            dst: v4([192, 168, 1, 7], 32),
            ..RuleSpec::any(Action::Permit)
        },
        RuleSpec {
            src: v4([10, 0, 0, 0], 8),
            ..RuleSpec::any(Action::Deny)
        },
    ]);
    assert_eq!(
        one4(&l, key4([10, 1, 9, 9], [192, 168, 1, 7], 6, 1, 2)),
        Some(0)
    );
    assert_eq!(
        one4(&l, key4([10, 1, 9, 9], [192, 168, 1, 8], 6, 1, 2)),
        Some(1)
    );
    assert_eq!(
        one4(&l, key4([10, 2, 0, 0], [192, 168, 1, 7], 17, 1, 2)),
        Some(1)
    );
    assert_eq!(
        one4(&l, key4([11, 0, 0, 0], [192, 168, 1, 7], 6, 1, 2)),
        None
    );
}

#[test]
fn the_first_match_wins_and_none_means_the_default() {
    let l = RuleList::new(
        vec![
            RuleSpec {
                dst: v4([10, 0, 0, 0], 8),
                ..RuleSpec::any(Action::PermitReflect)
            },
            RuleSpec::any(Action::Deny),
        ],
        Action::Permit,
    )
    .unwrap();
    let c = Classifier::compile(&l);
    let keys = [
        key4([1, 1, 1, 1], [10, 2, 3, 4], 17, 5, 6),
        key4([1, 1, 1, 1], [11, 2, 3, 4], 17, 5, 6),
    ];
    let mut out = [None; 2];
    c.classify4(&keys, &mut out);
    assert_eq!(out, [Some(0), Some(1)]);
    assert_eq!(c.action(out[0]), Action::PermitReflect);
    assert_eq!(c.action(out[1]), Action::Deny);
    assert_eq!(c.action(None), Action::Permit);
    assert_eq!(c.default_action(), Action::Permit);
    let empty = Classifier::compile(&RuleList::new(vec![], Action::Deny).unwrap());
    empty.classify4(&keys, &mut out);
    assert_eq!(out, [None, None]);
}

#[test]
fn port_ranges_include_both_ends() {
    let l = list(vec![RuleSpec {
        src_ports: Some((1024, 65535)),
        dst_ports: Some((80, 80)),
        ..tcp(Action::Permit)
    }]);
    assert_eq!(one4(&l, key4([1; 4], [2; 4], 6, 1024, 80)), Some(0));
    assert_eq!(one4(&l, key4([1; 4], [2; 4], 6, 65535, 80)), Some(0));
    assert_eq!(one4(&l, key4([1; 4], [2; 4], 6, 1023, 80)), None);
    assert_eq!(one4(&l, key4([1; 4], [2; 4], 6, 2000, 81)), None);
    assert_eq!(one4(&l, key4([1; 4], [2; 4], 6, 2000, 79)), None);
    assert_eq!(
        one4(&l, key4([1; 4], [2; 4], 17, 2000, 80)),
        None,
        "udp is not tcp"
    );
}

#[test]
fn protocol_any_or_exact() {
    let l = list(vec![
        RuleSpec {
            proto: Some(proto::UDP),
            ..RuleSpec::any(Action::Permit)
        },
        RuleSpec {
            dst: v4([9, 9, 9, 9], 32),
            ..RuleSpec::any(Action::Permit)
        },
    ]);
    assert_eq!(one4(&l, key4([1; 4], [2; 4], 17, 0, 0)), Some(0));
    assert_eq!(one4(&l, key4([1; 4], [2; 4], 6, 0, 0)), None);
    assert_eq!(one4(&l, key4([1; 4], [9; 4], 47, 0, 0)), Some(1));
}

#[test]
fn icmp_type_and_code() {
    let l = list(vec![
        RuleSpec {
            proto: Some(proto::ICMP),
            icmp_type: Some((8, 8)),
            icmp_code: Some((0, 0)),
            ..RuleSpec::any(Action::Permit)
        },
        RuleSpec {
            proto: Some(proto::ICMPV6),
            icmp_type: Some((128, 129)),
            ..RuleSpec::any(Action::Permit)
        },
    ]);
    assert_eq!(
        one4(&l, key4([1; 4], [2; 4], 1, 8, 0)),
        Some(0),
        "echo request"
    );
    assert_eq!(one4(&l, key4([1; 4], [2; 4], 1, 0, 0)), None, "echo reply");
    assert_eq!(one4(&l, key4([1; 4], [2; 4], 1, 8, 1)), None, "code 1");
    let a = "2001:db8::1";
    assert_eq!(one6(&l, key6(a, a, 58, 129, 0)), Some(1));
    assert_eq!(one6(&l, key6(a, a, 58, 130, 0)), None);
    assert_eq!(
        one6(&l, key6(a, a, 1, 8, 0)),
        Some(0),
        "proto 1 in IPv6 is still proto 1"
    );
}

#[test]
fn tcp_flags_by_value_and_mask() {
    // SYN without ACK.
    let l = list(vec![RuleSpec {
        tcp_flags: Some((0x02, 0x12)),
        ..tcp(Action::Deny)
    }]);
    let mut k = key4([1; 4], [2; 4], 6, 1, 2);
    for (flags, hit) in [
        (0x02, true),
        (0x12, false),
        (0x03, true),
        (0x10, false),
        (0, false),
    ] {
        k.tcp_flags = flags;
        assert_eq!(one4(&l, k).is_some(), hit, "flags {flags:#x}");
    }
}

#[test]
fn families_apply_to_their_own_packets() {
    let l = list(vec![
        RuleSpec {
            src: v6("2001:db8:1::", 48),
            dst: v6("2001:db8:2::5", 128),
            ..tcp(Action::Permit)
        },
        RuleSpec {
            src: v4([0, 0, 0, 0], 0),
            ..RuleSpec::any(Action::Deny)
        },
        RuleSpec {
            src: v6("::", 0),
            dst: v6("2001:db8:2::", 64),
            ..RuleSpec::any(Action::Permit)
        },
    ]);
    assert_eq!(
        one6(&l, key6("2001:db8:1:ffff::1", "2001:db8:2::5", 6, 1, 2)),
        Some(0)
    );
    assert_eq!(
        one6(&l, key6("2001:db8:1:ffff::1", "2001:db8:2::6", 6, 1, 2)),
        Some(2)
    );
    assert_eq!(
        one6(&l, key6("2001:db8:1::1", "2001:db8:3::", 6, 1, 2)),
        None
    );
    assert_eq!(one4(&l, key4([1; 4], [2; 4], 6, 1, 2)), Some(1));
}

#[test]
fn a_non_first_fragment_matches_on_l3_only() {
    let l = list(vec![
        RuleSpec {
            dst: v4([10, 0, 0, 1], 32),
            dst_ports: Some((80, 80)),
            tcp_flags: Some((0x02, 0x02)),
            ..tcp(Action::Permit)
        },
        RuleSpec {
            dst: v4([10, 0, 0, 2], 32),
            proto: Some(proto::UDP),
            ..RuleSpec::any(Action::Permit)
        },
    ]);
    let mut k = key4([1; 4], [10, 0, 0, 1], 6, 0, 0);
    assert_eq!(one4(&l, k), None, "a whole packet to port 0 does not match");
    k.fragment = true;
    assert_eq!(
        one4(&l, k),
        Some(0),
        "its fragment does: ports and flags are not compared"
    );
    k.proto = 17;
    assert_eq!(one4(&l, k), None, "the protocol still is");
    k.dst = u32::from(Ipv4Addr::new(10, 0, 0, 2));
    assert_eq!(one4(&l, k), Some(1));
    let l6 = list(vec![RuleSpec {
        dst: v6("2001:db8::1", 128),
        dst_ports: Some((443, 443)),
        ..tcp(Action::Permit)
    }]);
    let mut k6 = key6("2001:db8::2", "2001:db8::1", 6, 0, 0);
    assert_eq!(one6(&l6, k6), None);
    k6.fragment = true;
    assert_eq!(one6(&l6, k6), Some(0));
}

#[test]
fn a_batch_longer_than_out_fills_out_only() {
    let l = list(vec![RuleSpec::any(Action::Permit)]);
    let c = Classifier::compile(&l);
    let keys = [key4([1; 4], [2; 4], 6, 1, 2); 20];
    let mut out = [None; 13];
    c.classify4(&keys, &mut out);
    assert_eq!(out, [Some(0); 13]);
    let mut wide = [Some(7); 30];
    c.classify4(&keys, &mut wide);
    assert_eq!(&wide[..20], &[Some(0); 20]);
    assert_eq!(
        &wide[20..],
        &[Some(7); 10],
        "past the keys, out is untouched"
    );
}

#[test]
fn refusals_name_the_field() {
    let bad = |spec: RuleSpec| Rule::new(spec).unwrap_err();
    assert_eq!(
        bad(RuleSpec {
            src: v4([10, 0, 0, 0], 33),
            ..RuleSpec::any(Action::Permit)
        }),
        RuleError::PrefixTooLong {
            field: Field::Src,
            len: 33,
            max: 32
        }
    );
    assert_eq!(
        bad(RuleSpec {
            dst: v6("2001:db8::", 129),
            ..RuleSpec::any(Action::Permit)
        }),
        RuleError::PrefixTooLong {
            field: Field::Dst,
            len: 129,
            max: 128
        }
    );
    assert_eq!(
        bad(RuleSpec {
            dst: v4([10, 0, 0, 1], 8),
            ..RuleSpec::any(Action::Permit)
        }),
        RuleError::HostBits { field: Field::Dst }
    );
    assert_eq!(
        bad(RuleSpec {
            src: v4([10, 0, 0, 0], 8),
            dst: v6("2001:db8::", 32),
            ..RuleSpec::any(Action::Permit)
        }),
        RuleError::MixedFamilies
    );
    assert_eq!(
        bad(RuleSpec {
            dst_ports: Some((90, 80)),
            ..tcp(Action::Permit)
        }),
        RuleError::EmptyRange {
            field: Field::DstPorts,
            lo: 90,
            hi: 80
        }
    );
    assert_eq!(
        bad(RuleSpec {
            proto: Some(proto::ICMP),
            icmp_code: Some((3, 1)),
            ..RuleSpec::any(Action::Permit)
        }),
        RuleError::EmptyRange {
            field: Field::IcmpCode,
            lo: 3,
            hi: 1
        }
    );
    let e = bad(RuleSpec {
        src_ports: Some((1, 2)),
        ..RuleSpec::any(Action::Permit)
    });
    assert!(
        matches!(
            e,
            RuleError::WrongProtocol {
                field: Field::SrcPorts,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "src_ports: needs protocol tcp, udp or sctp, the rule has any"
    );
    let e = bad(RuleSpec {
        proto: Some(proto::UDP),
        tcp_flags: Some((2, 2)),
        ..RuleSpec::any(Action::Permit)
    });
    assert!(
        matches!(
            e,
            RuleError::WrongProtocol {
                field: Field::TcpFlags,
                ..
            }
        ),
        "{e}"
    );
    let e = bad(RuleSpec {
        proto: Some(proto::TCP),
        icmp_type: Some((8, 8)),
        ..RuleSpec::any(Action::Permit)
    });
    assert!(
        matches!(
            e,
            RuleError::WrongProtocol {
                field: Field::IcmpType,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        bad(RuleSpec {
            tcp_flags: Some((0x12, 0x02)),
            ..tcp(Action::Permit)
        }),
        RuleError::FlagsOutsideMask {
            value: 0x12,
            mask: 0x02
        }
    );
    let e = RuleList::new(
        vec![
            RuleSpec::any(Action::Permit),
            RuleSpec {
                src: v4([1, 2, 3, 4], 40),
                ..RuleSpec::any(Action::Permit)
            },
        ],
        Action::Deny,
    )
    .unwrap_err();
    assert_eq!(e.index, 1);
    assert_eq!(
        e.to_string(),
        "rule 1: src: prefix length 40 is longer than 32"
    );
}

#[test]
fn a_rule_with_flags_does_not_hide_the_rules_after_it() {
    // A rule for every other protocol, so that the tree cuts the protocol down to TCP alone,
    // where the SYN rule covers the whole region but only for keys with its flags.
    let mut specs: Vec<RuleSpec> = (0..=255u8)
        .filter(|&p| p != proto::TCP)
        .map(|p| RuleSpec {
            proto: Some(p),
            ..RuleSpec::any(Action::Deny)
        })
        .collect();
    specs.push(RuleSpec {
        tcp_flags: Some((0x02, 0x12)),
        ..tcp(Action::Deny)
    });
    specs.push(tcp(Action::Permit));
    let l = list(specs);
    let mut k = key4([1; 4], [2; 4], 6, 1, 2);
    k.tcp_flags = 0x02;
    assert_eq!(one4(&l, k), Some(255));
    k.tcp_flags = 0x12;
    assert_eq!(one4(&l, k), Some(256));
}
