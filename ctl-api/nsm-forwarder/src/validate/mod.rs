//! Request validation: addresses, prefixes, MACs (see [`crate::addr`]), namespaces, interface
//! names, payloads and the connection context. Every check returns a `Status` that says which field is wrong, so a
//! bad request is refused before anything is built.

use std::ffi::{OsStr, OsString};
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use nsm_proto::connectioncontext::{ConnectionContext, IpContext, PolicyRoute, Route};
use nsm_proto::networkservice::NetworkServiceRequest;
use tonic::Status;

use crate::addr::{IpPrefix, MacError, PrefixError};
use crate::dataplane::{IpConfig, L3NextHops, NeighborSpec, PolicySpec, RouteSpec};
use crate::mechanism::names::{MEMIF, SOCKETFILE};

/// The longest Linux interface name (IFNAMSIZ - 1).
pub const MAX_IFNAME: usize = 15;

/// What the connection carries (`Connection.payload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// `ETHERNET` (also the default when empty): L2 cross-connect.
    Ethernet,
    /// `IP`: L3 cross-connect.
    Ip,
}

impl Payload {
    /// Its name in `Connection.payload` (and a network service's registration).
    pub fn as_str(self) -> &'static str {
        match self {
            Payload::Ethernet => "ETHERNET",
            Payload::Ip => "IP",
        }
    }
}

/// Parses `Connection.payload`.
pub fn payload(s: &str) -> Result<Payload, Status> {
    match s {
        "" | "ETHERNET" => Ok(Payload::Ethernet),
        "IP" => Ok(Payload::Ip),
        other => Err(Status::invalid_argument(format!(
            "connection.payload {other:?} is neither ETHERNET nor IP"
        ))),
    }
}

/// Resolves a mechanism's `inodeURL` to a namespace path. `file://` URLs must name an existing
/// file: a well-formed URL whose namespace does not exist is `NotFound`; a malformed or
/// unsupported URL is `InvalidArgument`.
pub fn netns_url(what: &str, url: &str) -> Result<PathBuf, Status> {
    if url.is_empty() {
        return Err(Status::invalid_argument(format!(
            "{what}: inodeURL is missing"
        )));
    }
    if url.starts_with("inode://") {
        return Err(Status::invalid_argument(format!(
            "{what}: inodeURL {url:?}: no file descriptor was passed for it (inode:// URLs \
             name fds passed beside the call on the NSM socket, grpcfd)"
        )));
    }
    let path = url.strip_prefix("file://").ok_or_else(|| {
        Status::invalid_argument(format!("{what}: inodeURL {url:?} is not a file:// URL"))
    })?;
    if !path.starts_with('/') {
        return Err(Status::invalid_argument(format!(
            "{what}: inodeURL {url:?} is not an absolute file:// URL"
        )));
    }
    let path = PathBuf::from(path);
    if !path.exists() {
        return Err(Status::not_found(format!(
            "{what}: network namespace {} does not exist",
            path.display()
        )));
    }
    not_quivers_own(what, &path)?;
    Ok(path)
}

/// How many symlinks a namespace path may go through (the kernel's own limit).
const MAX_SYMLINKS: usize = 40;

/// Whether `name` (a component right after `/proc/`) is Quiver's own process or one of its
/// threads: `self`, `thread-self`, its pid or a thread's id.
fn own_proc_entry(name: &OsStr) -> bool {
    match name.to_str() {
        Some("self" | "thread-self") => true,
        Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            n.parse() == Ok(std::process::id()) || Path::new("/proc/self/task").join(n).exists()
        }
        _ => false,
    }
}

/// Where `path` leads once the symlinks outside `/proc` are followed (those in `/proc` are
/// left to the kernel: `/proc/self` is whoever opens it), `..` taken as the kernel takes it;
/// and whether a symlink was followed. Quiver's own `/proc/<self>/root` and `cwd` are followed
/// (to `/` and Quiver's working directory), another process's are refused: the kernel would
/// follow the symlinks behind them, and a `/proc/self` there is Quiver again.
fn resolve_outside_proc(what: &str, path: &Path) -> Result<(PathBuf, bool), Status> {
    let refused = |why: String| {
        Err(Status::permission_denied(format!(
            "{what}: {}: {why}",
            path.display()
        )))
    };
    let mut pending: Vec<OsString> = path
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let mut out = PathBuf::from("/");
    let (mut followed, mut hops) = (false, 0);
    while let Some(c) = pending.pop() {
        if c == ".." {
            out.pop();
            continue;
        }
        let in_proc = out.starts_with("/proc");
        out.push(&c);
        if in_proc {
            // /proc/<p>/root and cwd (or a thread's): a process's filesystem, reached from
            // Quiver.
            let parts: Vec<&OsStr> = out.components().skip(2).map(|c| c.as_os_str()).collect();
            let dir = match parts.as_slice() {
                [p, last] => Some((*p, *last)),
                [p, task, _, last] if *task == "task" => Some((*p, *last)),
                _ => None,
            };
            if let Some((p, last)) = dir.filter(|(_, l)| *l == "root" || *l == "cwd") {
                if !own_proc_entry(p) {
                    return refused(format!(
                        "a namespace is not named through another process's {}",
                        last.to_string_lossy()
                    ));
                }
                out = if last == "root" {
                    PathBuf::from("/")
                } else {
                    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
                };
            }
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&out) else {
            continue;
        };
        if !meta.file_type().is_symlink() {
            continue;
        }
        hops += 1;
        if hops > MAX_SYMLINKS {
            return refused(format!("more than {MAX_SYMLINKS} symlinks"));
        }
        let target = std::fs::read_link(&out).map_err(|e| {
            Status::invalid_argument(format!(
                "{what}: cannot read the link {}: {e}",
                out.display()
            ))
        })?;
        followed = true;
        out.pop();
        if target.is_absolute() {
            out = PathBuf::from("/");
        }
        pending.extend(target.components().rev().filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        }));
    }
    Ok((out, followed))
}

/// `path` with `.` and `..` taken lexically (no symlink followed).
fn lexical(path: &str) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in Path::new(path).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// Checks what a caller may not name in its mechanisms (the connection's and its
/// preferences), before their `inode://` URLs are resolved: a `file://` URL into Quiver's own
/// `/proc` directory other than its namespace (`file:///proc/self/fd/7` is an fd Quiver holds,
/// another connection's namespace perhaps: a caller passes its files by fd, as `inode://`
/// URLs) is `PERMISSION_DENIED`; a MEMIF `socketfile` that is a path is `INVALID_ARGUMENT`
/// (Quiver makes the client's memif socket itself, an abstract one in the client's namespace,
/// and takes no socket file from the client).
pub fn caller_mechanisms(req: &NetworkServiceRequest) -> Result<(), Status> {
    let current = req
        .connection
        .iter()
        .filter_map(|c| c.mechanism.as_ref())
        .map(|m| ("connection.mechanism".to_string(), m));
    let offered = req
        .mechanism_preferences
        .iter()
        .enumerate()
        .map(|(i, m)| (format!("mechanism_preferences[{i}]"), m));
    for (what, m) in current.chain(offered) {
        for (k, v) in &m.parameters {
            let Some(p) = v.strip_prefix("file://") else {
                continue;
            };
            let p = lexical(p);
            if in_own_proc(&p) && !proc_netns_form(&p) {
                return Err(Status::permission_denied(format!(
                    "{what}.{k}: {v:?} names a file of Quiver's own (in its /proc directory): \
                     pass a file by fd, as an inode:// URL"
                )));
            }
        }
        let socket = m.parameters.get(SOCKETFILE);
        if let Some(s) = socket.filter(|s| m.r#type == MEMIF && !s.is_empty()) {
            if !s.starts_with('@') {
                return Err(Status::invalid_argument(format!(
                    "{what}.socketfile: {s:?} is a path: Quiver makes the client's memif \
                     socket itself (an abstract socket in the client's namespace) and takes \
                     no socket file from the client"
                )));
            }
        }
    }
    Ok(())
}

/// Whether `path` is in Quiver's own `/proc` directory (`/proc/self/…`, its pid's, a
/// thread's).
fn in_own_proc(path: &Path) -> bool {
    let mut c = path.components().skip(1);
    c.next() == Some(Component::Normal(OsStr::new("proc")))
        && c.next().is_some_and(|p| own_proc_entry(p.as_os_str()))
}

/// Whether `path` says plainly that it is a process's namespace: `/proc/<p>/ns/net`,
/// `/proc/<p>/task/<t>/ns/net`.
fn proc_netns_form(path: &Path) -> bool {
    let c: Vec<&str> = path
        .components()
        .skip(1)
        .map(|c| c.as_os_str().to_str().unwrap_or("\0"))
        .collect();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let pid = |s: &str| s == "self" || s == "thread-self" || digits(s);
    match c.as_slice() {
        ["proc", p, "ns", "net"] => pid(p),
        ["proc", p, "task", t, "ns", "net"] => pid(p) && digits(t),
        _ => false,
    }
}

/// Whether `path` is what Quiver writes for an `inode://` URL: `/proc/self/fd/<n>`.
fn passed_fd_form(path: &Path) -> bool {
    path.parent() == Some(Path::new("/proc/self/fd"))
        && path
            .file_name()
            .and_then(OsStr::to_str)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Refuses (`PERMISSION_DENIED`) a namespace path that leads to Quiver itself without saying
/// so: through a symlink outside `/proc` into Quiver's own `/proc` directory (`/tmp/x ->
/// /proc/self/ns/net`, or `-> /proc/self/fd/7`, another connection's namespace), through a
/// process's `root` or `cwd`, or by any path but a plain `/proc` one to Quiver's own network
/// namespace (a caller's namespace that is Quiver's would have Quiver configure its own
/// addresses and routes).
fn not_quivers_own(what: &str, path: &Path) -> Result<(), Status> {
    let (resolved, followed) = resolve_outside_proc(what, path)?;
    if followed && in_own_proc(&resolved) {
        return Err(Status::permission_denied(format!(
            "{what}: {} is a symlink into Quiver's own /proc directory ({}): Quiver does not \
             act on its own namespace or fds for a caller",
            path.display(),
            resolved.display()
        )));
    }
    if proc_netns_form(path) || passed_fd_form(path) {
        return Ok(());
    }
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let own = id(Path::new("/proc/self/ns/net"));
    if own.is_some() && id(path) == own {
        return Err(Status::permission_denied(format!(
            "{what}: {} is Quiver's own network namespace: Quiver does not act on its own \
             namespace for a caller",
            path.display()
        )));
    }
    Ok(())
}

/// Checks a Linux interface name: 1 to 15 bytes, no `/`, whitespace, `:` or NUL, not `.`/`..`.
pub fn ifname(what: &str, name: &str) -> Result<(), Status> {
    let bad = |why: &str| {
        Err(Status::invalid_argument(format!(
            "{what}: interface name {name:?} {why}"
        )))
    };
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > MAX_IFNAME {
        return bad("is longer than 15 bytes");
    }
    if name == "." || name == ".." {
        return bad("is not allowed");
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c == '\0' || c.is_whitespace())
    {
        return bad("contains '/', ':', NUL or whitespace");
    }
    Ok(())
}

/// Parses an optional decimal MTU parameter (68..=65535).
pub fn mtu(what: &str, value: Option<&String>) -> Result<Option<u32>, Status> {
    let Some(v) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    match v.parse::<u32>() {
        Ok(m) if (68..=65535).contains(&m) => Ok(Some(m)),
        _ => Err(Status::invalid_argument(format!(
            "{what}: MTU {v:?} is not a number in 68..=65535"
        ))),
    }
}

/// Parses a VXLAN VNI (decimal, 24 bits).
pub fn vni(what: &str, value: &str) -> Result<u32, Status> {
    match value.parse::<u32>() {
        Ok(v) if v < 1 << 24 => Ok(v),
        _ => Err(Status::invalid_argument(format!(
            "{what}: vni {value:?} is not a decimal number below 2^24"
        ))),
    }
}

/// Parses an IP address field.
pub fn ip(what: &str, value: &str) -> Result<IpAddr, Status> {
    value
        .parse()
        .map_err(|_| Status::invalid_argument(format!("{what}: {value:?} is not an IP address")))
}

fn prefix(what: &str, value: &str) -> Result<IpPrefix, Status> {
    value
        .parse()
        .map_err(|e: PrefixError| Status::invalid_argument(format!("{what}: {e}")))
}

fn routes(what: &str, routes: &[Route]) -> Result<Vec<RouteSpec>, Status> {
    routes
        .iter()
        .map(|r| {
            let prefix = prefix(&format!("{what}.prefix"), &r.prefix)?;
            Ok(RouteSpec {
                prefix,
                via: match r.next_hop.as_str() {
                    "" => None,
                    h => {
                        let via = ip(&format!("{what}.nextHop"), h)?;
                        if via.is_ipv4() != prefix.addr.is_ipv4() {
                            return Err(Status::invalid_argument(format!(
                                "{what}.nextHop: {h:?} is not of the family of {:?}",
                                r.prefix
                            )));
                        }
                        Some(via)
                    }
                },
            })
        })
        .collect()
}

/// An IP protocol of a policy: a name (`tcp`, `udp`, `icmp`, `icmpv6`, `sctp`) or a number.
fn ip_proto(what: &str, value: &str) -> Result<Option<u8>, Status> {
    Ok(Some(match value.to_ascii_lowercase().as_str() {
        "" => return Ok(None),
        "icmp" => 1,
        "tcp" => 6,
        "udp" => 17,
        "icmpv6" | "ipv6-icmp" => 58,
        "sctp" => 132,
        n => n.parse().map_err(|_| {
            Status::invalid_argument(format!(
                "{what}: {value:?} is not a protocol name (tcp, udp, icmp, icmpv6, sctp) or number"
            ))
        })?,
    }))
}

/// A policy's port: "N" or "N-M", 1 to 65535.
fn port_range(what: &str, value: &str) -> Result<Option<(u16, u16)>, Status> {
    if value.is_empty() {
        return Ok(None);
    }
    let bad = || {
        Status::invalid_argument(format!(
            "{what}: {value:?} is not a port (N) or range (N-M) of 1 to 65535"
        ))
    };
    let (a, b) = value.split_once('-').unwrap_or((value, value));
    let a: u16 = a.trim().parse().map_err(|_| bad())?;
    let b: u16 = b.trim().parse().map_err(|_| bad())?;
    if a == 0 || a > b {
        return Err(bad());
    }
    Ok(Some((a, b)))
}

/// Checks `IPContext.policies`: each one's source prefix, protocol, ports and routes, of one
/// address family, and no two selecting the same traffic (their rules would collide).
fn policies(policies: &[PolicyRoute]) -> Result<Vec<PolicySpec>, Status> {
    let mut out: Vec<PolicySpec> = Vec::with_capacity(policies.len());
    for (i, p) in policies.iter().enumerate() {
        let what = format!("ip_context.policies[{i}]");
        let from = match p.from.as_str() {
            "" => None,
            f => Some(prefix(&format!("{what}.from"), f)?),
        };
        let routes = routes(&format!("{what}.routes"), &p.routes)?;
        let spec = PolicySpec {
            from,
            proto: ip_proto(&format!("{what}.proto"), &p.proto)?,
            src_port: port_range(&format!("{what}.src_port"), &p.src_port)?,
            dst_port: port_range(&format!("{what}.dst_port"), &p.dst_port)?,
            routes,
        };
        let v6 = spec.is_ipv6();
        if let Some(r) = spec.routes.iter().find(|r| r.prefix.addr.is_ipv6() != v6) {
            return Err(Status::invalid_argument(format!(
                "{what}.routes: {} is not of the policy's address family",
                r.prefix
            )));
        }
        if out.iter().any(|o| o.selector() == spec.selector()) {
            return Err(Status::invalid_argument(format!(
                "{what}: selects the same traffic as an earlier policy (their rules and \
                 tables would collide)"
            )));
        }
        out.push(spec);
    }
    Ok(out)
}

/// The checked IP context of a connection, split by side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SidesIp {
    /// The client (NSC) side: `src_ip_addrs`, `src_routes`, `ip_neighbors`.
    pub client: IpConfig,
    /// The endpoint (NSE) side: `dst_ip_addrs`, `dst_routes`.
    pub endpoint: IpConfig,
}

impl SidesIp {
    /// The next hops toward the endpoint, for an L3 cross-connect: its first address of each
    /// family.
    pub fn endpoint_hop(&self) -> L3NextHops {
        hop(&self.endpoint.addresses)
    }

    /// The next hops toward the client: its first address of each family.
    pub fn client_hop(&self) -> L3NextHops {
        hop(&self.client.addresses)
    }
}

fn hop(addresses: &[IpPrefix]) -> L3NextHops {
    let v4 = addresses.iter().find_map(|p| match p.addr {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    });
    let v6 = addresses.iter().find_map(|p| match p.addr {
        IpAddr::V6(a) => Some(a),
        IpAddr::V4(_) => None,
    });
    L3NextHops { v4, v6 }
}

/// Checks every address, prefix, route and neighbour of `ctx` and splits them by side.
pub fn context(ctx: Option<&ConnectionContext>) -> Result<SidesIp, Status> {
    let Some(ipc) = ctx.and_then(|c| c.ip_context.as_ref()) else {
        return Ok(SidesIp::default());
    };
    ip_context(ipc)
}

fn ip_context(c: &IpContext) -> Result<SidesIp, Status> {
    crate::limits::ip_context(c)?;
    let addrs = |what: &str, v: &[String]| -> Result<Vec<IpPrefix>, Status> {
        v.iter().map(|a| prefix(what, a)).collect()
    };
    for p in &c.excluded_prefixes {
        prefix("ip_context.excluded_prefixes", p)?;
    }
    for p in &c.extra_prefixes {
        prefix("ip_context.extra_prefixes", p)?;
    }
    let policies = policies(&c.policies)?;
    let neighbors = c
        .ip_neighbors
        .iter()
        .map(|n| {
            Ok(NeighborSpec {
                ip: ip("ip_context.ip_neighbors.ip", &n.ip)?,
                mac: n.hardware_address.parse().map_err(|e: MacError| {
                    Status::invalid_argument(format!(
                        "ip_context.ip_neighbors.hardware_address: {e}"
                    ))
                })?,
            })
        })
        .collect::<Result<Vec<_>, Status>>()?;
    let (client_addresses, endpoint_addresses) = (
        addrs("ip_context.src_ip_addrs", &c.src_ip_addrs)?,
        addrs("ip_context.dst_ip_addrs", &c.dst_ip_addrs)?,
    );
    let (client_peers, endpoint_peers) = (endpoint_addresses.clone(), client_addresses.clone());
    Ok(SidesIp {
        client: IpConfig {
            peers: client_peers,
            addresses: client_addresses,
            routes: routes("ip_context.src_routes", &c.src_routes)?,
            neighbors,
            policies,
        },
        endpoint: IpConfig {
            peers: endpoint_peers,
            addresses: endpoint_addresses,
            routes: routes("ip_context.dst_routes", &c.dst_routes)?,
            neighbors: Vec::new(),
            policies: Vec::new(),
        },
    })
}

#[cfg(test)]
mod tests;
