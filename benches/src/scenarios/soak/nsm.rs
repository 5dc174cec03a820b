//! The soak's NSM side: the registry Quiver registers with and finds endpoints in, the test
//! endpoints (one per churn slot and mechanism, so that each answers with names of its own),
//! and the Requests the clients send.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use nsm_forwarder::path::timestamp;
use nsm_forwarder::testing::{EndpointBehaviour, TestEndpoint, TestRegistry};
use nsm_proto::connection::{Connection, Mechanism, Path as NsmPath, PathSegment};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext, IpNeighbor, PolicyRoute, Route};
use nsm_proto::networkservice::NetworkServiceRequest;

use super::super::ctl_churn::nsm::mech;

/// Live connections each churn client keeps at most.
pub const SLOTS: usize = 2;

/// A side's mechanism.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mech {
    /// LOCAL MEMIF.
    Memif,
    /// LOCAL KERNEL.
    Kernel,
}

impl Mech {
    /// Its NSM name.
    pub fn name(self) -> &'static str {
        match self {
            Mech::Memif => "MEMIF",
            Mech::Kernel => "KERNEL",
        }
    }
}

/// The name of the endpoint a churn client `k` Requests slot `s`'s connection from, with
/// `m` toward the endpoint.
pub fn churn_endpoint(k: usize, s: usize, m: Mech) -> String {
    match m {
        Mech::Memif => format!("c{k}s{s}m"),
        Mech::Kernel => format!("c{k}s{s}k"),
    }
}

/// The registry and every endpoint, served by this process on unix sockets in `dir`.
pub struct Endpoints {
    /// The registry (`NSM_CONNECT_TO`), served while this lives.
    _registry: TestRegistry,
    /// Endpoints by name.
    pub all: BTreeMap<String, TestEndpoint>,
    /// Requests and Closes they saw, read so far.
    seen: (u64, u64),
}

impl Endpoints {
    /// Starts the registry on `registry` and the endpoints for `clients` churn clients, the
    /// stable connections, the CNF and the doomed namespace, all building their side in the
    /// namespace `nse_url` names; `tag` makes memif socket names unique to this run.
    pub fn start(
        dir: &Path,
        registry: &Path,
        nse_url: &str,
        clients: usize,
        tag: &str,
    ) -> Result<Endpoints, String> {
        let registry =
            TestRegistry::start(registry).map_err(|e| format!("the test registry: {e}"))?;
        let memif = |sock: String| mech("MEMIF", &[("inodeURL", nse_url), ("socketfile", &sock)]);
        let kernel = |name: &str| mech("KERNEL", &[("inodeURL", nse_url), ("name", name)]);
        let mut specs: Vec<(String, Mechanism)> = Vec::new();
        for k in 0..clients {
            for s in 0..SLOTS {
                specs.push((
                    churn_endpoint(k, s, Mech::Memif),
                    memif(format!("@{tag}-c{k}s{s}")),
                ));
                specs.push((
                    churn_endpoint(k, s, Mech::Kernel),
                    kernel(&format!("e{k}s{s}")),
                ));
            }
        }
        specs.push(("stm".into(), memif(format!("@{tag}-stm"))));
        specs.push(("stk".into(), kernel("sk-e")));
        specs.push(("cnf".into(), memif(format!("@{tag}-cnf"))));
        specs.push(("doomm".into(), memif(format!("@{tag}-doom"))));
        specs.push(("doomk".into(), kernel("d-e")));
        let mut all = BTreeMap::new();
        for (name, answer) in specs {
            let sock = dir.join(format!("ep-{name}.sock"));
            let ep = TestEndpoint::start(&sock, &name, vec![answer])
                .map_err(|e| format!("endpoint {name}: {e}"))?;
            registry.add_endpoint(&name, &format!("unix://{}", sock.display()));
            all.insert(name, ep);
        }
        Ok(Endpoints {
            _registry: registry,
            all,
            seen: (0, 0),
        })
    }

    /// Sets how the churn's endpoints answer from now on.
    pub fn set_churn_behaviour(&self, b: EndpointBehaviour) {
        for (name, ep) in &self.all {
            if name.starts_with('c') && name != "cnf" {
                ep.set_behaviour(b);
            }
        }
    }

    /// Requests and Closes the endpoints saw so far (their logs emptied as they are read).
    pub fn seen(&mut self) -> (u64, u64) {
        for ep in self.all.values() {
            let log = ep.take_log();
            self.seen.0 += log.requests.len() as u64;
            self.seen.1 += log.closes.len() as u64;
        }
        self.seen
    }
}

/// One side of a client's Request: its namespace and mechanism (a KERNEL one names its
/// interface).
#[derive(Clone, Debug)]
pub struct ClientSide {
    /// NSM's `file://` URL of the client's namespace.
    pub ns_url: String,
    /// MEMIF or KERNEL.
    pub mech: Mech,
    /// The KERNEL interface's name.
    pub ifname: String,
}

impl ClientSide {
    /// The mechanism preference the client sends.
    pub fn preference(&self) -> Mechanism {
        match self.mech {
            Mech::Memif => mech("MEMIF", &[("inodeURL", &self.ns_url)]),
            Mech::Kernel => mech(
                "KERNEL",
                &[("inodeURL", &self.ns_url), ("name", &self.ifname)],
            ),
        }
    }
}

/// An IP context for a KERNEL client: addresses in 10.`a`.`b`.0/24 on both sides, a route
/// each way, a permanent neighbour and a policy route on the client's side.
pub fn ip_context(a: u8, b: u8) -> IpContext {
    let route = |prefix: String, next_hop: String| Route { prefix, next_hop };
    IpContext {
        src_ip_addrs: vec![format!("10.{a}.{b}.1/24")],
        dst_ip_addrs: vec![format!("10.{a}.{b}.2/24")],
        src_routes: vec![route(
            format!("10.{}.{b}.0/24", a.wrapping_add(50)),
            format!("10.{a}.{b}.2"),
        )],
        dst_routes: vec![route(
            format!("10.{}.{b}.0/24", a.wrapping_add(60)),
            format!("10.{a}.{b}.1"),
        )],
        ip_neighbors: vec![IpNeighbor {
            ip: format!("10.{a}.{b}.9"),
            hardware_address: format!("02:00:00:{a:02x}:{b:02x}:09"),
        }],
        policies: vec![PolicyRoute {
            from: format!("10.{a}.{b}.1/32"),
            proto: "udp".into(),
            dst_port: "7000-7010".into(),
            routes: vec![route(
                format!("10.{}.{b}.0/24", a.wrapping_add(70)),
                format!("10.{a}.{b}.2"),
            )],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// An NSC's first Request of connection `id` from `client` to endpoint `endpoint`: ETHERNET,
/// `ip` as its IP context, a path of the NSC's one segment valid for 10 minutes.
pub fn first_request(
    id: &str,
    endpoint: &str,
    client: &ClientSide,
    ip: Option<IpContext>,
) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(Connection {
            id: id.into(),
            network_service: "soak".into(),
            network_service_endpoint_name: endpoint.into(),
            payload: "ETHERNET".into(),
            context: ip.map(|ip| ConnectionContext {
                ip_context: Some(ip),
                ..Default::default()
            }),
            path: Some(NsmPath {
                index: 0,
                path_segments: vec![PathSegment {
                    name: "nsc".into(),
                    id: id.into(),
                    expires: Some(timestamp(SystemTime::now() + Duration::from_secs(600))),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        mechanism_preferences: vec![client.preference()],
    }
}

/// A refresh, as NSM's clients send one: the connection as answered (its path back at the
/// client's segment, which is valid for 10 more minutes), the same preferences.
pub fn refresh_of(answer: &Connection, client: &ClientSide) -> NetworkServiceRequest {
    let mut conn = answer.clone();
    if let Some(p) = conn.path.as_mut() {
        p.index = 0;
        if let Some(s) = p.path_segments.first_mut() {
            s.expires = Some(timestamp(SystemTime::now() + Duration::from_secs(600)));
        }
    }
    NetworkServiceRequest {
        connection: Some(conn),
        mechanism_preferences: vec![client.preference()],
    }
}

/// Quiver's own id of the connection answered as `answer` (the id of its path segment, named
/// `name`): what `quiver ctl show connections` lists.
pub fn quiver_id(answer: &Connection, name: &str) -> Option<String> {
    answer
        .path
        .as_ref()?
        .path_segments
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.id.clone())
}
