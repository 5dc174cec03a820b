//! Mechanisms: which ones Quiver knows, the checks on their parameters, the choice among a
//! client's preferences, what Quiver offers an endpoint, and the reading of the endpoint's
//! answer.

use std::collections::HashMap;
use std::path::PathBuf;

use tonic::Status;

use super::validate;
use nsm_proto::connection::Mechanism;

mod checked;
pub(crate) mod names;
pub use checked::{ClientMechanism, EndpointMechanism};
pub use names::{INODE_URL, KERNEL, LOCAL, MEMIF, MTU, NAME, REMOTE, SOCKETFILE};

mod remote;
pub mod vlan;
pub use remote::{
    encode_key, Remote, TunnelEnd, DST_IP, DST_PORT, DST_PUBLIC_KEY, SRC_IP, SRC_PORT,
    SRC_PUBLIC_KEY, VNI, VXLAN, VXLAN_DEFAULT_PORT, WIREGUARD, WIREGUARD_DEFAULT_PORT,
};
pub use vlan::{VLAN, VLAN_ID};

/// Every mechanism type NSM defines; a type outside this list is a bad request, a type in it
/// that Quiver does not support is just skipped.
pub const KNOWN_TYPES: &[&str] = &[
    MEMIF, KERNEL, VXLAN, WIREGUARD, "IPSEC", VLAN, "VFIO", "SRV6",
];

/// The types Quiver serves on the client side, in no particular order (VXLAN only with a
/// tunnel address and ETHERNET payload, WireGuard with one and IP payload).
pub const SUPPORTED: &[&str] = &[MEMIF, KERNEL, VXLAN, WIREGUARD];

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
        VXLAN | WIREGUARD => remote::check_syntax(what, m)?,
        VLAN => vlan::check_syntax(what, m)?,
        _ => {}
    }
    Ok(())
}

/// Whether Quiver serves `m`: LOCAL MEMIF or KERNEL, or the REMOTE mechanism `remote`.
fn supported(m: &Mechanism, remote: Option<Remote>) -> bool {
    match m.r#type.as_str() {
        MEMIF | KERNEL => m.cls.is_empty() || m.cls == LOCAL,
        _ => remote::is(m, remote),
    }
}

/// Chooses the client-side mechanism: the connection's current one on a refresh (when Quiver
/// supports it), else the first of the client's preferences Quiver supports (a REMOTE one
/// only when it is `remote`: Quiver has a tunnel address, VXLAN for ETHERNET payload, WireGuard
/// for IP). Checks every mechanism's syntax first, then resolves the chosen one's namespace.
pub fn select(
    current: Option<&Mechanism>,
    preferences: &[Mechanism],
    remote: Option<Remote>,
) -> Result<(Mechanism, ClientMechanism), Status> {
    if let Some(c) = current {
        check_syntax("connection.mechanism", c)?;
    }
    for (i, p) in preferences.iter().enumerate() {
        check_syntax(&format!("mechanism_preferences[{i}]"), p)?;
    }
    let chosen = current
        .filter(|c| supported(c, remote))
        .or_else(|| preferences.iter().find(|p| supported(p, remote)))
        .ok_or_else(|| {
            let offered: Vec<String> = current
                .into_iter()
                .chain(preferences)
                .map(describe)
                .collect();
            Status::invalid_argument(format!(
                "no acceptable mechanism: offered [{}], Quiver serves LOCAL/MEMIF, LOCAL/KERNEL{}",
                offered.join(", "),
                remote::served(remote)
            ))
        })?;
    let parsed = client_side(chosen)?;
    Ok((chosen.clone(), parsed))
}

fn client_side(m: &Mechanism) -> Result<ClientMechanism, Status> {
    let p = &m.parameters;
    let what = format!("client mechanism {}", describe(m));
    if m.r#type == VXLAN || m.r#type == WIREGUARD {
        return remote::client_side(&what, m);
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
/// (with `ifname` as the suggested interface name), then `remote` (VXLAN or WireGuard from
/// Quiver's tunnel end: [`TunnelEnd::offer`]) when there is one (nsmgr keeps the LOCAL ones for
/// an endpoint on this node, the REMOTE one for an endpoint behind another nsmgr). With
/// `remote_only` (the endpoint's URL is another node's), only the REMOTE one.
pub fn offers(
    client_type: &str,
    ifname: &str,
    remote: Option<Mechanism>,
    remote_only: bool,
) -> Vec<Mechanism> {
    if remote_only {
        return remote.into_iter().collect();
    }
    let mut local = local_offers(client_type, ifname);
    local.extend(remote);
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
    remote_offered: Option<Remote>,
) -> Result<EndpointMechanism, Status> {
    let m =
        m.ok_or_else(|| Status::failed_precondition("the endpoint answered without a mechanism"))?;
    let what = format!("endpoint mechanism {}", describe(m));
    check_syntax(&what, m).map_err(|s| Status::failed_precondition(s.message().to_string()))?;
    if !supported(m, remote_offered) {
        return Err(Status::failed_precondition(format!(
            "{what}: Quiver offered LOCAL/MEMIF and LOCAL/KERNEL{}",
            match remote_offered {
                Some(r) => format!(" and REMOTE/{}", r.type_name()),
                None => " only".into(),
            }
        )));
    }
    let p = &m.parameters;
    if m.r#type == VXLAN || m.r#type == WIREGUARD {
        return remote::endpoint_side(&what, m);
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
mod tests;
