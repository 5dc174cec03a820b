//! The rule model: what one rule matches, its action, and the checks that refuse a bad rule.

use std::net::{Ipv4Addr, Ipv6Addr};

use thiserror::Error;

/// IP protocol numbers the checks need.
pub mod proto {
    /// ICMP (IPv4).
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// SCTP.
    pub const SCTP: u8 = 132;
}

/// What a matching rule (or the list's default) does with the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Let the packet through.
    Permit,
    /// Drop the packet (counted as `acl-deny` by the node).
    Deny,
    /// Let it through and create a session so that the return traffic passes.
    PermitReflect,
}

/// A source or destination prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prefix {
    /// Any address of either family: the rule applies to IPv4 and IPv6 alike (unless the other
    /// prefix names a family).
    Any,
    /// An IPv4 prefix (`len` ≤ 32, no bits set past it).
    V4(Ipv4Addr, u8),
    /// An IPv6 prefix (`len` ≤ 128, no bits set past it).
    V6(Ipv6Addr, u8),
}

/// The field of a rule an error names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// The source prefix.
    Src,
    /// The destination prefix.
    Dst,
    /// The source port range.
    SrcPorts,
    /// The destination port range.
    DstPorts,
    /// The ICMP/ICMPv6 type range.
    IcmpType,
    /// The ICMP/ICMPv6 code range.
    IcmpCode,
    /// The TCP flags value and mask.
    TcpFlags,
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Field::Src => "src",
            Field::Dst => "dst",
            Field::SrcPorts => "src_ports",
            Field::DstPorts => "dst_ports",
            Field::IcmpType => "icmp_type",
            Field::IcmpCode => "icmp_code",
            Field::TcpFlags => "tcp_flags",
        })
    }
}

/// Why a rule was refused; each names the field at fault.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RuleError {
    /// A prefix longer than its family's address.
    #[error("{field}: prefix length {len} is longer than {max}")]
    PrefixTooLong {
        /// `Src` or `Dst`.
        field: Field,
        /// The length given.
        len: u8,
        /// 32 or 128.
        max: u8,
    },
    /// Address bits set past the prefix length (`10.0.0.1/8`): refused rather than guessed.
    #[error("{field}: address has bits set past its prefix length")]
    HostBits {
        /// `Src` or `Dst`.
        field: Field,
    },
    /// An IPv4 source with an IPv6 destination or the other way round.
    #[error("dst: its family differs from src's")]
    MixedFamilies,
    /// A range whose low end is above its high end.
    #[error("{field}: range {lo}..={hi} is empty")]
    EmptyRange {
        /// The range's field.
        field: Field,
        /// Its low end.
        lo: u16,
        /// Its high end.
        hi: u16,
    },
    /// An L4 condition with a protocol that has no such field (ports without TCP/UDP/SCTP,
    /// ICMP type without ICMP, flags without TCP), or with any protocol.
    #[error("{field}: needs protocol {needs}, the rule has {has}")]
    WrongProtocol {
        /// The condition's field.
        field: Field,
        /// What it needs.
        needs: &'static str,
        /// What the rule says (`any` or a number).
        has: String,
    },
    /// More rules than a list may hold ([`RuleList::MAX_RULES`]).
    #[error("the list holds more than {max} rules")]
    TooManyRules {
        /// The limit.
        max: usize,
    },
    /// TCP flag bits in the value that the mask does not select: the rule could never match.
    #[error("tcp_flags: value {value:#04x} has bits outside mask {mask:#04x}")]
    FlagsOutsideMask {
        /// The value.
        value: u8,
        /// The mask.
        mask: u8,
    },
}

/// One rule as written, before its checks ([`Rule::new`]). `None` means any.
///
/// For ICMP and ICMPv6 the type and code are the conditions (`icmp_type`, `icmp_code`); keys
/// carry them in their port fields ([`super::Key4`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSpec {
    /// Source prefix.
    pub src: Prefix,
    /// Destination prefix.
    pub dst: Prefix,
    /// IP protocol (IPv6: the upper-layer header's), or any.
    pub proto: Option<u8>,
    /// Source ports `lo..=hi` (TCP, UDP, SCTP).
    pub src_ports: Option<(u16, u16)>,
    /// Destination ports `lo..=hi` (TCP, UDP, SCTP).
    pub dst_ports: Option<(u16, u16)>,
    /// ICMP/ICMPv6 type `lo..=hi` (exact: `lo == hi`).
    pub icmp_type: Option<(u8, u8)>,
    /// ICMP/ICMPv6 code `lo..=hi`.
    pub icmp_code: Option<(u8, u8)>,
    /// TCP flags `(value, mask)`: matches when `flags & mask == value`.
    pub tcp_flags: Option<(u8, u8)>,
    /// What a packet this rule matches first gets.
    pub action: Action,
}

impl RuleSpec {
    /// A rule matching every packet of both families, with `action`; set fields to narrow it.
    pub fn any(action: Action) -> RuleSpec {
        RuleSpec {
            src: Prefix::Any,
            dst: Prefix::Any,
            proto: None,
            src_ports: None,
            dst_ports: None,
            icmp_type: None,
            icmp_code: None,
            tcp_flags: None,
            action,
        }
    }
}

/// A checked rule: only [`Rule::new`] makes one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    spec: RuleSpec,
}

fn check_prefix(field: Field, p: Prefix) -> Result<(), RuleError> {
    let (bits, len, max) = match p {
        Prefix::Any => return Ok(()),
        Prefix::V4(a, len) => (u128::from(u32::from(a)) << 96, len, 32),
        Prefix::V6(a, len) => (u128::from(a), len, 128),
    };
    if len > max {
        return Err(RuleError::PrefixTooLong { field, len, max });
    }
    if bits & !mask128(len) != 0 {
        return Err(RuleError::HostBits { field });
    }
    Ok(())
}

/// The top `len` bits of a `u128` set.
pub(super) fn mask128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

fn check_range(field: Field, r: Option<(u16, u16)>) -> Result<(), RuleError> {
    match r {
        Some((lo, hi)) if lo > hi => Err(RuleError::EmptyRange { field, lo, hi }),
        _ => Ok(()),
    }
}

fn check_proto(
    field: Field,
    proto: Option<u8>,
    ok: &[u8],
    needs: &'static str,
) -> Result<(), RuleError> {
    match proto {
        Some(p) if ok.contains(&p) => Ok(()),
        _ => Err(RuleError::WrongProtocol {
            field,
            needs,
            has: proto.map_or("any".to_string(), |p| p.to_string()),
        }),
    }
}

impl Rule {
    /// Checks `spec`: prefix lengths and host bits, one family, non-empty ranges, each L4
    /// condition with a protocol that has it.
    pub fn new(spec: RuleSpec) -> Result<Rule, RuleError> {
        check_prefix(Field::Src, spec.src)?;
        check_prefix(Field::Dst, spec.dst)?;
        if matches!(
            (spec.src, spec.dst),
            (Prefix::V4(..), Prefix::V6(..)) | (Prefix::V6(..), Prefix::V4(..))
        ) {
            return Err(RuleError::MixedFamilies);
        }
        let wide = |r: Option<(u8, u8)>| r.map(|(l, h)| (u16::from(l), u16::from(h)));
        check_range(Field::SrcPorts, spec.src_ports)?;
        check_range(Field::DstPorts, spec.dst_ports)?;
        check_range(Field::IcmpType, wide(spec.icmp_type))?;
        check_range(Field::IcmpCode, wide(spec.icmp_code))?;
        let l4 = [proto::TCP, proto::UDP, proto::SCTP];
        if spec.src_ports.is_some() {
            check_proto(Field::SrcPorts, spec.proto, &l4, "tcp, udp or sctp")?;
        }
        if spec.dst_ports.is_some() {
            check_proto(Field::DstPorts, spec.proto, &l4, "tcp, udp or sctp")?;
        }
        let icmp = [proto::ICMP, proto::ICMPV6];
        if spec.icmp_type.is_some() {
            check_proto(Field::IcmpType, spec.proto, &icmp, "icmp or icmpv6")?;
        }
        if spec.icmp_code.is_some() {
            check_proto(Field::IcmpCode, spec.proto, &icmp, "icmp or icmpv6")?;
        }
        if let Some((value, mask)) = spec.tcp_flags {
            check_proto(Field::TcpFlags, spec.proto, &[proto::TCP], "tcp")?;
            if value & !mask != 0 {
                return Err(RuleError::FlagsOutsideMask { value, mask });
            }
        }
        Ok(Rule { spec })
    }

    /// What the rule says.
    pub fn spec(&self) -> &RuleSpec {
        &self.spec
    }

    /// Its action.
    pub fn action(&self) -> Action {
        self.spec.action
    }

    /// Whether it applies to IPv4 packets (neither prefix is IPv6).
    pub fn is_v4(&self) -> bool {
        !matches!(self.spec.src, Prefix::V6(..)) && !matches!(self.spec.dst, Prefix::V6(..))
    }

    /// Whether it applies to IPv6 packets (neither prefix is IPv4).
    pub fn is_v6(&self) -> bool {
        !matches!(self.spec.src, Prefix::V4(..)) && !matches!(self.spec.dst, Prefix::V4(..))
    }

    /// The source port range, or the ICMP type's, or all of them: what the key's `src_port`
    /// is compared with.
    pub(super) fn l4_src(&self) -> (u16, u16) {
        let s = &self.spec;
        s.src_ports
            .or(s.icmp_type.map(|(l, h)| (u16::from(l), u16::from(h))))
            .unwrap_or((0, u16::MAX))
    }

    /// The destination port range, or the ICMP code's, or all of them.
    pub(super) fn l4_dst(&self) -> (u16, u16) {
        let s = &self.spec;
        s.dst_ports
            .or(s.icmp_code.map(|(l, h)| (u16::from(l), u16::from(h))))
            .unwrap_or((0, u16::MAX))
    }
}

/// A rule that [`RuleList::new`] refused, by its position.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("rule {index}: {error}")]
pub struct ListError {
    /// The rule's position in the list (0 first).
    pub index: usize,
    /// Why.
    pub error: RuleError,
}

/// An ordered rule list: the first matching rule (lowest index) wins; a packet no rule matches
/// gets `default` (a parameter of the list: `Deny` for an ACL as VPP's and Kubernetes' are,
/// `Permit` for a list that only carves out denials).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleList {
    rules: Vec<Rule>,
    default: Action,
}

impl RuleList {
    /// The most rules a list may hold (rule indices are `u32` and leave room for "none").
    pub const MAX_RULES: usize = 1 << 24;

    /// Checks every rule; the first refused one is named by its index.
    pub fn new(specs: Vec<RuleSpec>, default: Action) -> Result<RuleList, ListError> {
        if specs.len() > Self::MAX_RULES {
            return Err(ListError {
                index: Self::MAX_RULES,
                error: RuleError::TooManyRules {
                    max: Self::MAX_RULES,
                },
            });
        }
        let mut rules = Vec::with_capacity(specs.len());
        for (index, spec) in specs.into_iter().enumerate() {
            rules.push(Rule::new(spec).map_err(|error| ListError { index, error })?);
        }
        Ok(RuleList { rules, default })
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The action of a packet no rule matches.
    pub fn default_action(&self) -> Action {
        self.default
    }
}
