//! Mechanisms: which ones Quiver knows, the checks on their parameters, the choice among a
//! client's preferences, what Quiver offers an endpoint, and the reading of the endpoint's
//! answer.

use std::collections::HashMap;
use std::path::PathBuf;

use tonic::Status;

use super::validate;
use crate::proto::connection::Mechanism;

/// `cls` of mechanisms on this node.
pub const LOCAL: &str = "LOCAL";
/// `cls` of mechanisms between nodes.
pub const REMOTE: &str = "REMOTE";
/// Shared-memory packet interface.
pub const MEMIF: &str = "MEMIF";
/// A kernel interface (veth) in a namespace.
pub const KERNEL: &str = "KERNEL";
/// VXLAN between nodes.
pub const VXLAN: &str = "VXLAN";

/// Parameter: the namespace (`file://…` or `inode://dev/ino`).
pub const INODE_URL: &str = "inodeURL";
/// Parameter: the memif control socket.
pub const SOCKETFILE: &str = "socketfile";
/// Parameter: the kernel interface's name.
pub const NAME: &str = "name";
/// Parameter: the MTU.
pub const MTU: &str = "MTU";
/// Parameter: the VXLAN network identifier.
pub const VNI: &str = "vni";

/// Every mechanism type NSM defines; a type outside this list is a bad request, a type in it
/// that Quiver does not support is just skipped.
pub const KNOWN_TYPES: &[&str] = &[
    MEMIF,
    KERNEL,
    VXLAN,
    "WIREGUARD",
    "IPSEC",
    "VLAN",
    "VFIO",
    "SRV6",
];

/// The types Quiver serves on the client side, in no particular order.
pub const SUPPORTED: &[&str] = &[MEMIF, KERNEL];

/// The client-side mechanism, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMechanism {
    /// Quiver is memif master on a socket it creates in `netns`.
    Memif {
        /// The client's namespace.
        netns: PathBuf,
        /// `MTU`, if given.
        mtu: Option<u32>,
    },
    /// Quiver moves one end of a veth into `netns`, named `ifname` (`None`: Quiver names it).
    Kernel {
        /// The client's namespace.
        netns: PathBuf,
        /// `name`, if given.
        ifname: Option<String>,
        /// `MTU`, if given.
        mtu: Option<u32>,
    },
}

/// The endpoint-side mechanism the NSE answered with, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointMechanism {
    /// Quiver is memif slave on the endpoint's `socket` (in `netns`, if given).
    Memif {
        /// The endpoint's namespace.
        netns: Option<PathBuf>,
        /// `socketfile`.
        socket: String,
        /// `MTU`, if given.
        mtu: Option<u32>,
    },
    /// Quiver moves one end of a veth into the endpoint's `netns`, named `ifname`.
    Kernel {
        /// The endpoint's namespace.
        netns: PathBuf,
        /// `name` (or Quiver's suggestion when the endpoint left it out).
        ifname: String,
        /// `MTU`, if given.
        mtu: Option<u32>,
    },
}

fn describe(m: &Mechanism) -> String {
    format!(
        "{}/{}",
        if m.cls.is_empty() { "-" } else { &m.cls },
        m.r#type
    )
}

/// Checks the syntax of a mechanism's parameters: a known type, and for the types whose
/// parameters Quiver reads, well-formed values (interface name, MTU, VNI, addresses).
/// Namespaces are resolved only for the mechanism actually chosen.
pub fn check_syntax(what: &str, m: &Mechanism) -> Result<(), Status> {
    if !KNOWN_TYPES.contains(&m.r#type.as_str()) {
        return Err(Status::invalid_argument(format!(
            "{what}: unknown mechanism type {:?} (known: {})",
            m.r#type,
            KNOWN_TYPES.join(", ")
        )));
    }
    let p = &m.parameters;
    match m.r#type.as_str() {
        KERNEL => {
            if let Some(n) = p.get(NAME).filter(|n| !n.is_empty()) {
                validate::ifname(what, n)?;
            }
            validate::mtu(what, p.get(MTU))?;
        }
        MEMIF => {
            validate::mtu(what, p.get(MTU))?;
        }
        VXLAN => {
            if let Some(v) = p.get(VNI).filter(|v| !v.is_empty()) {
                validate::vni(what, v)?;
            }
            for key in ["src_ip", "dst_ip"] {
                if let Some(a) = p.get(key).filter(|a| !a.is_empty()) {
                    validate::ip(&format!("{what}.{key}"), a)?;
                }
            }
            for key in ["src_port", "dst_port"] {
                if let Some(v) = p.get(key).filter(|v| !v.is_empty()) {
                    v.parse::<u16>().map_err(|_| {
                        Status::invalid_argument(format!("{what}: {key} {v:?} is not a port"))
                    })?;
                }
            }
            validate::mtu(what, p.get(MTU))?;
        }
        _ => {}
    }
    Ok(())
}

fn supported(m: &Mechanism) -> bool {
    SUPPORTED.contains(&m.r#type.as_str()) && (m.cls.is_empty() || m.cls == LOCAL)
}

/// Chooses the client-side mechanism: the connection's current one on a refresh (when Quiver
/// supports it), else the first of the client's preferences Quiver supports. Checks every
/// mechanism's syntax first, then resolves the chosen one's namespace.
pub fn select(
    current: Option<&Mechanism>,
    preferences: &[Mechanism],
) -> Result<(Mechanism, ClientMechanism), Status> {
    if let Some(c) = current {
        check_syntax("connection.mechanism", c)?;
    }
    for (i, p) in preferences.iter().enumerate() {
        check_syntax(&format!("mechanism_preferences[{i}]"), p)?;
    }
    let chosen = current
        .filter(|c| supported(c))
        .or_else(|| preferences.iter().find(|p| supported(p)))
        .ok_or_else(|| {
            let offered: Vec<String> = current
                .into_iter()
                .chain(preferences)
                .map(describe)
                .collect();
            Status::invalid_argument(format!(
                "no acceptable mechanism: offered [{}], Quiver serves LOCAL/MEMIF and LOCAL/KERNEL",
                offered.join(", ")
            ))
        })?;
    let parsed = client_side(chosen)?;
    Ok((chosen.clone(), parsed))
}

fn client_side(m: &Mechanism) -> Result<ClientMechanism, Status> {
    let p = &m.parameters;
    let what = format!("client mechanism {}", describe(m));
    let netns = validate::netns_url(&what, p.get(INODE_URL).map_or("", |s| s))?;
    let mtu = validate::mtu(&what, p.get(MTU))?;
    Ok(match m.r#type.as_str() {
        MEMIF => ClientMechanism::Memif { netns, mtu },
        _ => ClientMechanism::Kernel {
            netns,
            ifname: p.get(NAME).filter(|n| !n.is_empty()).cloned(),
            mtu,
        },
    })
}

/// What Quiver offers the endpoint, the client's type first: LOCAL MEMIF and LOCAL KERNEL
/// (with `ifname` as the suggested interface name).
pub fn offers(client_type: &str, ifname: &str) -> Vec<Mechanism> {
    let memif = Mechanism {
        cls: LOCAL.into(),
        r#type: MEMIF.into(),
        parameters: HashMap::new(),
    };
    let kernel = Mechanism {
        cls: LOCAL.into(),
        r#type: KERNEL.into(),
        parameters: HashMap::from([(NAME.to_string(), ifname.to_string())]),
    };
    if client_type == KERNEL {
        vec![kernel, memif]
    } else {
        vec![memif, kernel]
    }
}

/// Reads the mechanism the endpoint answered with. Anything Quiver did not offer, or without
/// the parameters Quiver needs, is refused (`FailedPrecondition`: the endpoint's fault);
/// a namespace that does not exist is `NotFound`.
pub fn endpoint_side(
    m: Option<&Mechanism>,
    suggested_ifname: &str,
) -> Result<EndpointMechanism, Status> {
    let m =
        m.ok_or_else(|| Status::failed_precondition("the endpoint answered without a mechanism"))?;
    let what = format!("endpoint mechanism {}", describe(m));
    check_syntax(&what, m).map_err(|s| Status::failed_precondition(s.message().to_string()))?;
    if !supported(m) {
        return Err(Status::failed_precondition(format!(
            "{what}: Quiver offered LOCAL/MEMIF and LOCAL/KERNEL only"
        )));
    }
    let p = &m.parameters;
    let mtu = validate::mtu(&what, p.get(MTU))?;
    let netns = |required: bool| -> Result<Option<PathBuf>, Status> {
        match p.get(INODE_URL).filter(|u| !u.is_empty()) {
            Some(u) => validate::netns_url(&what, u).map(Some),
            None if required => Err(Status::failed_precondition(format!(
                "{what}: inodeURL is missing"
            ))),
            None => Ok(None),
        }
    };
    Ok(match m.r#type.as_str() {
        MEMIF => {
            let socket = p
                .get(SOCKETFILE)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| {
                    Status::failed_precondition(format!("{what}: socketfile is missing"))
                })?
                .clone();
            // An abstract socket lives in a namespace: it must be named.
            let netns = netns(socket.starts_with('@'))?;
            EndpointMechanism::Memif { netns, socket, mtu }
        }
        _ => EndpointMechanism::Kernel {
            netns: netns(true)?.unwrap_or_default(),
            ifname: p
                .get(NAME)
                .filter(|n| !n.is_empty())
                .cloned()
                .unwrap_or_else(|| suggested_ifname.to_string()),
            mtu,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn mech(cls: &str, ty: &str, params: &[(&str, &str)]) -> Mechanism {
        Mechanism {
            cls: cls.into(),
            r#type: ty.into(),
            parameters: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    const NS: (&str, &str) = (INODE_URL, "file:///proc/self/ns/net");

    #[test]
    fn first_supported_preference_wins() {
        let prefs = [
            mech(REMOTE, VXLAN, &[(VNI, "7")]),
            mech(LOCAL, "WIREGUARD", &[]),
            mech(LOCAL, KERNEL, &[NS, (NAME, "nsc0")]),
            mech(LOCAL, MEMIF, &[NS]),
        ];
        let (m, c) = select(None, &prefs).unwrap();
        assert_eq!(m.r#type, KERNEL);
        assert_eq!(
            c,
            ClientMechanism::Kernel {
                netns: "/proc/self/ns/net".into(),
                ifname: Some("nsc0".into()),
                mtu: None
            }
        );
    }

    #[test]
    fn current_mechanism_is_kept_on_refresh() {
        let current = mech(LOCAL, MEMIF, &[NS, (SOCKETFILE, "@x")]);
        let prefs = [mech(LOCAL, KERNEL, &[NS])];
        let (m, c) = select(Some(&current), &prefs).unwrap();
        assert_eq!(m, current);
        assert!(matches!(c, ClientMechanism::Memif { .. }));
    }

    #[test]
    fn refusals() {
        let code = |cur: Option<Mechanism>, prefs: Vec<Mechanism>| {
            select(cur.as_ref(), &prefs).unwrap_err().code()
        };
        // Unknown type, even after a good one.
        assert_eq!(
            code(
                None,
                vec![mech(LOCAL, MEMIF, &[NS]), mech(LOCAL, "FOO", &[])]
            ),
            Code::InvalidArgument
        );
        // Nothing acceptable: known but unsupported, or a REMOTE kernel.
        assert_eq!(
            code(
                None,
                vec![mech(REMOTE, VXLAN, &[]), mech(REMOTE, KERNEL, &[NS])]
            ),
            Code::InvalidArgument
        );
        assert_eq!(code(None, vec![]), Code::InvalidArgument);
        // Malformed parameters.
        assert_eq!(
            code(None, vec![mech(REMOTE, VXLAN, &[(VNI, "16777216")])]),
            Code::InvalidArgument
        );
        assert_eq!(
            code(
                None,
                vec![mech(LOCAL, KERNEL, &[NS, (NAME, "0123456789abcdef")])]
            ),
            Code::InvalidArgument
        );
        // The chosen one's namespace must exist; a missing one is NotFound.
        assert_eq!(
            code(
                None,
                vec![mech(LOCAL, MEMIF, &[(INODE_URL, "file:///no/such/ns")])]
            ),
            Code::NotFound
        );
        assert_eq!(
            code(None, vec![mech(LOCAL, MEMIF, &[])]),
            Code::InvalidArgument
        );
    }

    #[test]
    fn offers_put_the_clients_type_first() {
        let o = offers(KERNEL, "nse0");
        assert_eq!(o[0].r#type, KERNEL);
        assert_eq!(o[0].parameters[NAME], "nse0");
        assert_eq!(offers(MEMIF, "nse0")[0].r#type, MEMIF);
    }

    #[test]
    fn endpoint_answers() {
        let m = mech(LOCAL, MEMIF, &[NS, (SOCKETFILE, "@nse/sock")]);
        assert_eq!(
            endpoint_side(Some(&m), "x").unwrap(),
            EndpointMechanism::Memif {
                netns: Some("/proc/self/ns/net".into()),
                socket: "@nse/sock".into(),
                mtu: None
            }
        );
        let k = mech(LOCAL, KERNEL, &[NS]);
        assert!(matches!(
            endpoint_side(Some(&k), "sugg").unwrap(),
            EndpointMechanism::Kernel { ifname, .. } if ifname == "sugg"
        ));
        for bad in [
            mech(LOCAL, MEMIF, &[NS]),
            mech(LOCAL, MEMIF, &[(SOCKETFILE, "@abstract-needs-netns")]),
            mech(REMOTE, VXLAN, &[]),
            mech(LOCAL, KERNEL, &[]),
        ] {
            assert_eq!(
                endpoint_side(Some(&bad), "x").unwrap_err().code(),
                Code::FailedPrecondition,
                "{bad:?}"
            );
        }
        assert!(endpoint_side(None, "x").is_err());
    }
}
