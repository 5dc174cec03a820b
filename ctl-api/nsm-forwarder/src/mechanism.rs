//! Mechanisms: which ones Quiver knows, the checks on their parameters, the choice among a
//! client's preferences, what Quiver offers an endpoint, and the reading of the endpoint's
//! answer.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use tonic::Status;

use super::validate;
use nsm_proto::connection::Mechanism;

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
/// Parameter: the requesting forwarder's tunnel address (VXLAN).
pub const SRC_IP: &str = "src_ip";
/// Parameter: the answering forwarder's tunnel address (VXLAN).
pub const DST_IP: &str = "dst_ip";
/// Parameter: the UDP port the requesting forwarder receives VXLAN on.
pub const SRC_PORT: &str = "src_port";
/// Parameter: the UDP port the answering forwarder receives VXLAN on.
pub const DST_PORT: &str = "dst_port";
/// VXLAN's UDP port when a mechanism names none.
pub const VXLAN_DEFAULT_PORT: u16 = 4789;

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

/// The types Quiver serves on the client side, in no particular order (VXLAN only with a
/// tunnel address and ETHERNET payload).
pub const SUPPORTED: &[&str] = &[MEMIF, KERNEL, VXLAN];

/// Quiver's end of VXLAN tunnels: its tunnel address and the UDP port it receives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelEnd {
    /// `NSM_TUNNEL_IP` (or the address of the default route's interface).
    pub ip: Ipv4Addr,
    /// `NSM_VXLAN_PORT`.
    pub port: u16,
    /// The MTU of the uplink holding `ip` (tunnels carry [`crate::mtu::VXLAN4_OVERHEAD`]
    /// less).
    pub mtu: u32,
}

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
    /// Quiver is the answering end of a VXLAN tunnel from another node's forwarder.
    Vxlan {
        /// The requesting forwarder's tunnel address (`src_ip`).
        remote: Ipv4Addr,
        /// The UDP port it receives on (`src_port`).
        remote_port: u16,
        /// The VNI Quiver chose before (on a refresh), to keep.
        vni: Option<u32>,
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
    /// Quiver is the requesting end of a VXLAN tunnel to another node's forwarder.
    Vxlan {
        /// The answering forwarder's tunnel address (`dst_ip`).
        remote: Ipv4Addr,
        /// The UDP port it receives on (`dst_port`).
        remote_port: u16,
        /// The VNI it chose.
        vni: u32,
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

/// Whether Quiver serves `m`: LOCAL MEMIF or KERNEL, or REMOTE VXLAN when `vxlan`.
fn supported(m: &Mechanism, vxlan: bool) -> bool {
    match m.r#type.as_str() {
        MEMIF | KERNEL => m.cls.is_empty() || m.cls == LOCAL,
        VXLAN => vxlan && (m.cls.is_empty() || m.cls == REMOTE),
        _ => false,
    }
}

/// Chooses the client-side mechanism: the connection's current one on a refresh (when Quiver
/// supports it), else the first of the client's preferences Quiver supports (REMOTE VXLAN
/// only when `vxlan`: Quiver has a tunnel address and the payload is ETHERNET). Checks every
/// mechanism's syntax first, then resolves the chosen one's namespace.
pub fn select(
    current: Option<&Mechanism>,
    preferences: &[Mechanism],
    vxlan: bool,
) -> Result<(Mechanism, ClientMechanism), Status> {
    if let Some(c) = current {
        check_syntax("connection.mechanism", c)?;
    }
    for (i, p) in preferences.iter().enumerate() {
        check_syntax(&format!("mechanism_preferences[{i}]"), p)?;
    }
    let chosen = current
        .filter(|c| supported(c, vxlan))
        .or_else(|| preferences.iter().find(|p| supported(p, vxlan)))
        .ok_or_else(|| {
            let offered: Vec<String> = current
                .into_iter()
                .chain(preferences)
                .map(describe)
                .collect();
            Status::invalid_argument(format!(
                "no acceptable mechanism: offered [{}], Quiver serves LOCAL/MEMIF, LOCAL/KERNEL{}",
                offered.join(", "),
                if vxlan {
                    " and REMOTE/VXLAN"
                } else {
                    " (and REMOTE/VXLAN with a tunnel IP and ETHERNET payload)"
                }
            ))
        })?;
    let parsed = client_side(chosen)?;
    Ok((chosen.clone(), parsed))
}

/// A VXLAN mechanism's address parameter `key`, which must be IPv4.
fn vxlan_ip(what: &str, m: &Mechanism, key: &str) -> Result<Ipv4Addr, Status> {
    match m.parameters.get(key).filter(|v| !v.is_empty()) {
        None => Err(Status::invalid_argument(format!(
            "{what}: {key} is missing"
        ))),
        Some(v) => match v.parse::<IpAddr>() {
            Ok(IpAddr::V4(ip)) if !ip.is_unspecified() && !ip.is_multicast() => Ok(ip),
            _ => Err(Status::invalid_argument(format!(
                "{what}: {key} {v:?} is not a unicast IPv4 address"
            ))),
        },
    }
}

/// A VXLAN mechanism's port parameter `key` (default 4789); syntax was checked.
fn vxlan_port(m: &Mechanism, key: &str) -> u16 {
    m.parameters
        .get(key)
        .and_then(|v| v.parse::<u16>().ok())
        .filter(|&p| p != 0)
        .unwrap_or(VXLAN_DEFAULT_PORT)
}

fn client_side(m: &Mechanism) -> Result<ClientMechanism, Status> {
    let p = &m.parameters;
    let what = format!("client mechanism {}", describe(m));
    if m.r#type == VXLAN {
        return Ok(ClientMechanism::Vxlan {
            remote: vxlan_ip(&what, m, SRC_IP)?,
            remote_port: vxlan_port(m, SRC_PORT),
            vni: p.get(VNI).and_then(|v| v.parse().ok()),
        });
    }
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
/// (with `ifname` as the suggested interface name), then REMOTE VXLAN from `tunnel` when there
/// is one (nsmgr keeps the LOCAL ones for an endpoint on this node, the REMOTE one for an
/// endpoint behind another nsmgr). With `remote_only` (the endpoint's URL is another node's),
/// only VXLAN.
pub fn offers(
    client_type: &str,
    ifname: &str,
    tunnel: Option<TunnelEnd>,
    remote_only: bool,
) -> Vec<Mechanism> {
    let vxlan = tunnel.map(|t| Mechanism {
        cls: REMOTE.into(),
        r#type: VXLAN.into(),
        parameters: HashMap::from([
            (SRC_IP.to_string(), t.ip.to_string()),
            (SRC_PORT.to_string(), t.port.to_string()),
        ]),
    });
    if remote_only {
        return vxlan.into_iter().collect();
    }
    let mut local = local_offers(client_type, ifname);
    local.extend(vxlan);
    local
}

fn local_offers(client_type: &str, ifname: &str) -> Vec<Mechanism> {
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

/// Whether `path` is a unix socket (following links: `/proc/self/fd/<n>` of a passed fd too).
fn is_socket(path: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// Reads the mechanism the endpoint answered with. Anything Quiver did not offer, or without
/// the parameters Quiver needs, is refused (`FailedPrecondition`: the endpoint's fault);
/// a namespace or memif socket file that does not exist is `NotFound`.
pub fn endpoint_side(
    m: Option<&Mechanism>,
    suggested_ifname: &str,
    vxlan_offered: bool,
) -> Result<EndpointMechanism, Status> {
    let m =
        m.ok_or_else(|| Status::failed_precondition("the endpoint answered without a mechanism"))?;
    let what = format!("endpoint mechanism {}", describe(m));
    check_syntax(&what, m).map_err(|s| Status::failed_precondition(s.message().to_string()))?;
    if !supported(m, vxlan_offered) {
        return Err(Status::failed_precondition(format!(
            "{what}: Quiver offered LOCAL/MEMIF and LOCAL/KERNEL{}",
            if vxlan_offered {
                " and REMOTE/VXLAN"
            } else {
                " only"
            }
        )));
    }
    let p = &m.parameters;
    if m.r#type == VXLAN {
        let precondition = |s: Status| Status::failed_precondition(s.message().to_string());
        let vni = p
            .get(VNI)
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or_else(|| Status::failed_precondition(format!("{what}: vni is missing")))?;
        return Ok(EndpointMechanism::Vxlan {
            remote: vxlan_ip(&what, m, DST_IP).map_err(precondition)?,
            remote_port: vxlan_port(m, DST_PORT),
            vni,
        });
    }
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
        MEMIF => match p.get(SOCKETFILE).filter(|s| !s.is_empty()) {
            Some(socket) => {
                // An abstract socket lives in a namespace: it must be named.
                let netns = netns(socket.starts_with('@'))?;
                EndpointMechanism::Memif {
                    netns,
                    socket: socket.clone(),
                    mtu,
                }
            }
            // NSM's filesystem form: `inodeURL` names the memif socket file itself (by path, or
            // by the fd passed with the answer), reached from Quiver's own namespace.
            None => {
                let named = netns(false).map_err(|e| match e.code() {
                    tonic::Code::NotFound => Status::not_found(format!(
                        "{what}: the memif socket {} does not exist",
                        p.get(INODE_URL).map_or("", String::as_str)
                    )),
                    _ => e,
                })?;
                let path = named.ok_or_else(|| {
                    Status::failed_precondition(format!(
                        "{what}: neither socketfile nor inodeURL is given"
                    ))
                })?;
                if !is_socket(&path) {
                    return Err(Status::failed_precondition(format!(
                        "{what}: socketfile is missing and inodeURL {} is not a socket",
                        path.display()
                    )));
                }
                EndpointMechanism::Memif {
                    netns: None,
                    socket: path.to_string_lossy().into_owned(),
                    mtu,
                }
            }
        },
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
        let (m, c) = select(None, &prefs, false).unwrap();
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
        let (m, c) = select(Some(&current), &prefs, false).unwrap();
        assert_eq!(m, current);
        assert!(matches!(c, ClientMechanism::Memif { .. }));
    }

    #[test]
    fn refusals() {
        let code = |cur: Option<Mechanism>, prefs: Vec<Mechanism>| {
            select(cur.as_ref(), &prefs, false).unwrap_err().code()
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
        let o = offers(KERNEL, "nse0", None, false);
        assert_eq!(o[0].r#type, KERNEL);
        assert_eq!(o[0].parameters[NAME], "nse0");
        assert_eq!(offers(MEMIF, "nse0", None, false)[0].r#type, MEMIF);
    }

    #[test]
    fn vxlan_is_served_only_with_a_tunnel_end() {
        let offer = mech(
            REMOTE,
            VXLAN,
            &[(SRC_IP, "192.168.7.1"), (SRC_PORT, "4790")],
        );
        let (_, c) = select(None, std::slice::from_ref(&offer), true).unwrap();
        assert_eq!(
            c,
            ClientMechanism::Vxlan {
                remote: Ipv4Addr::new(192, 168, 7, 1),
                remote_port: 4790,
                vni: None
            }
        );
        // Without a tunnel address (or with IP payload) it is not acceptable.
        assert_eq!(
            select(None, std::slice::from_ref(&offer), false)
                .unwrap_err()
                .code(),
            Code::InvalidArgument
        );
        // A refresh keeps the VNI chosen before; the port defaults to 4789.
        let current = mech(REMOTE, VXLAN, &[(SRC_IP, "192.168.7.1"), (VNI, "77")]);
        let (_, c) = select(Some(&current), &[], true).unwrap();
        assert!(matches!(
            c,
            ClientMechanism::Vxlan {
                vni: Some(77),
                remote_port: 4789,
                ..
            }
        ));
        // src_ip is required and must be unicast IPv4.
        for bad in [
            mech(REMOTE, VXLAN, &[]),
            mech(REMOTE, VXLAN, &[(SRC_IP, "224.0.0.1")]),
            mech(REMOTE, VXLAN, &[(SRC_IP, "fe80::1")]),
        ] {
            assert_eq!(
                select(None, &[bad], true).unwrap_err().code(),
                Code::InvalidArgument
            );
        }
    }

    #[test]
    fn offers_add_vxlan_last_or_alone() {
        let end = TunnelEnd {
            ip: Ipv4Addr::new(10, 9, 0, 1),
            port: 4789,
            mtu: 1500,
        };
        let o = offers(MEMIF, "nse0", Some(end), false);
        let types: Vec<_> = o.iter().map(|m| m.r#type.as_str()).collect();
        assert_eq!(types, [MEMIF, KERNEL, VXLAN]);
        assert_eq!(o[2].cls, REMOTE);
        assert_eq!(o[2].parameters[SRC_IP], "10.9.0.1");
        let remote = offers(MEMIF, "nse0", Some(end), true);
        assert_eq!(remote.len(), 1);
        assert_eq!(remote[0].r#type, VXLAN);
        assert!(offers(MEMIF, "nse0", None, true).is_empty());
    }

    #[test]
    fn vxlan_answers() {
        let m = mech(REMOTE, VXLAN, &[(DST_IP, "10.9.0.2"), (VNI, "5")]);
        assert_eq!(
            endpoint_side(Some(&m), "x", true).unwrap(),
            EndpointMechanism::Vxlan {
                remote: Ipv4Addr::new(10, 9, 0, 2),
                remote_port: 4789,
                vni: 5
            }
        );
        // Not offered, no VNI, no dst_ip: the endpoint's fault.
        for (bad, offered) in [
            (m.clone(), false),
            (mech(REMOTE, VXLAN, &[(DST_IP, "10.9.0.2")]), true),
            (mech(REMOTE, VXLAN, &[(VNI, "5")]), true),
        ] {
            assert_eq!(
                endpoint_side(Some(&bad), "x", offered).unwrap_err().code(),
                Code::FailedPrecondition,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn endpoint_answers() {
        let m = mech(LOCAL, MEMIF, &[NS, (SOCKETFILE, "@nse/sock")]);
        assert_eq!(
            endpoint_side(Some(&m), "x", false).unwrap(),
            EndpointMechanism::Memif {
                netns: Some("/proc/self/ns/net".into()),
                socket: "@nse/sock".into(),
                mtu: None
            }
        );
        let k = mech(LOCAL, KERNEL, &[NS]);
        assert!(matches!(
            endpoint_side(Some(&k), "sugg", false).unwrap(),
            EndpointMechanism::Kernel { ifname, .. } if ifname == "sugg"
        ));
        for bad in [
            mech(LOCAL, MEMIF, &[NS]),
            mech(LOCAL, MEMIF, &[(SOCKETFILE, "@abstract-needs-netns")]),
            mech(REMOTE, VXLAN, &[]),
            mech(LOCAL, KERNEL, &[]),
        ] {
            assert_eq!(
                endpoint_side(Some(&bad), "x", false).unwrap_err().code(),
                Code::FailedPrecondition,
                "{bad:?}"
            );
        }
        assert!(endpoint_side(None, "x", false).is_err());
    }

    /// NSM's filesystem form of MEMIF: `inodeURL` names the socket file, and no `socketfile`.
    #[test]
    fn an_endpoint_may_name_its_memif_socket_file_by_inode_url() {
        let dir = std::env::temp_dir().join(format!("quiver-mech-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("memif.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let url = format!("file://{}", sock.display());
        let m = mech(LOCAL, MEMIF, &[(INODE_URL, &url)]);
        assert_eq!(
            endpoint_side(Some(&m), "x", false).unwrap(),
            EndpointMechanism::Memif {
                netns: None,
                socket: sock.display().to_string(),
                mtu: None
            }
        );
        // A file that is not a socket (a namespace, say) is refused.
        let plain = dir.join("plain");
        std::fs::write(&plain, b"").unwrap();
        let url = format!("file://{}", plain.display());
        let bad = endpoint_side(Some(&mech(LOCAL, MEMIF, &[(INODE_URL, &url)])), "x", false);
        let status = bad.unwrap_err();
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert!(status.message().contains("is not a socket"), "{status:?}");
        // A socket file that is not there is NotFound, named as a socket.
        let url = format!("file://{}", dir.join("gone.sock").display());
        let gone = endpoint_side(Some(&mech(LOCAL, MEMIF, &[(INODE_URL, &url)])), "x", false);
        let status = gone.unwrap_err();
        assert_eq!(status.code(), Code::NotFound);
        assert!(status.message().contains("memif socket"), "{status:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
