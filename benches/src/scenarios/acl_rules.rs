//! ClassBench-like IPv4 5-tuple rule sets and traces for `acl`, deterministic from a seed, and
//! the files `dpdk-test-acl` reads (`--rulesf`, `--tracef`).
//!
//! The shape follows ClassBench's ACL seeds: addresses from a few dozen sites (source) and
//! more (destination), prefixes nested inside them; source prefixes often wildcards or short,
//! destinations mostly /24–/32; source ports mostly any, destination ports mostly an exact
//! well-known port, else `1024:65535`, `0:1023`, any, or a random range; TCP, UDP or any
//! protocol (any: ports any); never both addresses wild. Traces: 90 % built inside a rule chosen at random (random host
//! bits, ports inside its ranges), 10 % random headers.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use graph_nodes::acl::{proto, Action, Key4, Prefix, RuleSpec};

use super::common::Rng;

/// One generated rule.
#[derive(Clone, Copy, Debug)]
pub struct GenRule {
    /// Source prefix and length.
    pub src: (u32, u8),
    /// Destination prefix and length.
    pub dst: (u32, u8),
    /// Source ports.
    pub sport: (u16, u16),
    /// Destination ports.
    pub dport: (u16, u16),
    /// Protocol, `None` = any.
    pub proto: Option<u8>,
}

const WELL_KNOWN: [u16; 20] = [
    80, 443, 22, 25, 53, 110, 143, 3306, 5432, 8080, 8443, 21, 23, 123, 161, 389, 636, 993, 995,
    1433,
];

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

fn pick_len(rng: &mut Rng, mix: &[(u8, u32)]) -> u8 {
    let total: u32 = mix.iter().map(|m| m.1).sum();
    let mut p = (rng.next() % u64::from(total)) as u32;
    for &(len, w) in mix {
        if p < w {
            return if len == 255 {
                9 + (rng.next() % 22) as u8
            } else {
                len
            };
        }
        p -= w;
    }
    32
}

/// `n` rules from `seed`.
pub fn rules(n: usize, seed: u64) -> Vec<GenRule> {
    let mut rng = Rng(seed | 1);
    let src_sites: Vec<u32> = (0..32).map(|_| rng.next() as u32 & mask(12)).collect();
    let dst_sites: Vec<u32> = (0..96).map(|_| rng.next() as u32 & mask(14)).collect();
    // (length, weight); 255: any length from 9 to 30.
    let src_mix = [
        (0, 22),
        (8, 3),
        (16, 10),
        (24, 25),
        (28, 6),
        (32, 24),
        (255, 10),
    ];
    let dst_mix = [
        (0, 5),
        (16, 8),
        (24, 30),
        (28, 7),
        (30, 5),
        (32, 40),
        (255, 5),
    ];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let sl = pick_len(&mut rng, &src_mix);
        let mut dl = pick_len(&mut rng, &dst_mix);
        // No rule with both addresses wild: one such (with any protocol) would end the list
        // for every packet, and ClassBench's ACL seeds have them only as a last default.
        while sl == 0 && dl < 16 {
            dl = pick_len(&mut rng, &dst_mix);
        }
        let s = src_sites[(rng.next() % 32) as usize] | (rng.next() as u32 & !mask(12));
        let d = dst_sites[(rng.next() % 96) as usize] | (rng.next() as u32 & !mask(14));
        let p = rng.next() % 100;
        let proto = match p {
            0..=64 => Some(proto::TCP),
            65..=89 => Some(proto::UDP),
            _ => None,
        };
        let (sport, dport) = if proto.is_none() {
            ((0, u16::MAX), (0, u16::MAX))
        } else {
            let sport = match rng.next() % 100 {
                0..=84 => (0, u16::MAX),
                85..=94 => (1024, u16::MAX),
                _ => {
                    let p = 1024 + (rng.next() % 60000) as u16;
                    (p, p)
                }
            };
            let dport = match rng.next() % 100 {
                0..=19 => (0, u16::MAX),
                20..=69 => {
                    let p = WELL_KNOWN[(rng.next() % 20) as usize];
                    (p, p)
                }
                70..=84 => (1024, u16::MAX),
                85..=89 => (0, 1023),
                _ => {
                    let a = (rng.next() % 65536) as u16;
                    let b = (rng.next() % 65536) as u16;
                    (a.min(b), a.max(b))
                }
            };
            (sport, dport)
        };
        out.push(GenRule {
            src: (s & mask(sl), sl),
            dst: (d & mask(dl), dl),
            sport,
            dport,
            proto,
        });
    }
    out
}

/// `n` packet headers for `rules` from `seed`.
pub fn trace(rules: &[GenRule], n: usize, seed: u64) -> Vec<Key4> {
    let mut rng = Rng(seed | 1);
    let within =
        |rng: &mut Rng, (lo, hi): (u16, u16)| lo + (rng.next() % (u64::from(hi - lo) + 1)) as u16;
    (0..n)
        .map(|_| {
            if rng.next().is_multiple_of(10) || rules.is_empty() {
                return Key4 {
                    src: rng.next() as u32,
                    dst: rng.next() as u32,
                    proto: [proto::TCP, proto::UDP, proto::ICMP][(rng.next() % 3) as usize],
                    src_port: rng.next() as u16,
                    dst_port: rng.next() as u16,
                    ..Key4::default()
                };
            }
            let r = rules[(rng.next() % rules.len() as u64) as usize];
            let proto = r
                .proto
                .unwrap_or([proto::TCP, proto::UDP][(rng.next() % 2) as usize]);
            Key4 {
                src: r.src.0 | (rng.next() as u32 & !mask(r.src.1)),
                dst: r.dst.0 | (rng.next() as u32 & !mask(r.dst.1)),
                proto,
                src_port: within(&mut rng, r.sport),
                dst_port: within(&mut rng, r.dport),
                ..Key4::default()
            }
        })
        .collect()
}

/// The rule as Quiver's rule model has it.
pub fn spec(r: &GenRule) -> RuleSpec {
    let full = |p: (u16, u16)| (p != (0, u16::MAX)).then_some(p);
    RuleSpec {
        src: Prefix::V4(Ipv4Addr::from(r.src.0), r.src.1),
        dst: Prefix::V4(Ipv4Addr::from(r.dst.0), r.dst.1),
        proto: r.proto,
        src_ports: full(r.sport),
        dst_ports: full(r.dport),
        ..RuleSpec::any(Action::Permit)
    }
}

/// The rules in ClassBench's format as `dpdk-test-acl --rulesf` reads it (first line first:
/// it gives the first rule the highest priority).
pub fn rules_file(rules: &[GenRule]) -> String {
    let mut s = String::with_capacity(rules.len() * 64);
    for r in rules {
        let (p, m) = r.proto.map_or((0, 0), |p| (p, 0xff));
        let _ = writeln!(
            s,
            "@{}/{} {}/{} {} : {} {} : {} {p}/0x{m:02x}",
            Ipv4Addr::from(r.src.0),
            r.src.1,
            Ipv4Addr::from(r.dst.0),
            r.dst.1,
            r.sport.0,
            r.sport.1,
            r.dport.0,
            r.dport.1
        );
    }
    s
}

/// The trace as `dpdk-test-acl --tracef` reads it (addresses as host-order numbers).
pub fn trace_file(keys: &[Key4]) -> String {
    let mut s = String::with_capacity(keys.len() * 40);
    for k in keys {
        let _ = writeln!(
            s,
            "{} {} {} {} {}",
            k.src, k.dst, k.src_port, k.dst_port, k.proto
        );
    }
    s
}
