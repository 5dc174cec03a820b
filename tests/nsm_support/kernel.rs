//! What Quiver builds for a KERNEL connection, looked for where each backend puts it, so that
//! the tests can run once per backend and see anything left behind or made twice:
//!
//! - in each pod's namespace, the connection's interface: a TAP device (the default backend) or
//!   a veth's far end, with NSM's alias (`client-<id>` in the client's, `server-<id>` in the
//!   endpoint's), and Quiver's policy rules (protocol [`RULE_PROTOCOL`]);
//! - in Quiver's own namespace (this process's), a veth's end per side (veth backend only),
//!   named from the connection (`host_name_for`) and tagged `quiver:<id>/<side>`; a TAP is never
//!   there;
//! - in the forwarder, a port per side (`nsm-<id>-client`, `nsm-<id>-endpoint`: TAP or
//!   AF_PACKET) and the objects the connection owns.
//!
//! [`per_backend!`] makes one test of a body per backend.

use drivers::kernel_interface::{host_name_for, RULE_PROTOCOL};
use quiver::config::PortSection;
use quiver::control::nsm::ForwarderDataplane;
use quiver::control::owner::Control;

pub use nsm_forwarder::config::KernelBackend;

use super::{Netns, IP};

/// Makes `mod NAME { fn tap(); fn veth(); }`: two tests, each calling the body `NAME` (a fn
/// taking a [`KernelBackend`]) with its backend; `tap` leaves the data path's default (which
/// must be TAP), `veth` sets it.
#[allow(unused_macros)] // in the test crates that share nsm_support without it
macro_rules! per_backend {
    ($name:ident) => {
        mod $name {
            #[test]
            fn tap() {
                super::$name($crate::nsm_support::kernel::KernelBackend::Tap)
            }

            #[test]
            fn veth() {
                super::$name($crate::nsm_support::kernel::KernelBackend::Veth)
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use per_backend;

/// `tap` or `veth`: what test names, namespace tags and connection ids carry, so that the two
/// runs of a test (in parallel, in one process) share nothing.
pub fn tag(backend: KernelBackend) -> &'static str {
    match backend {
        KernelBackend::Tap => "tap",
        KernelBackend::Veth => "veth",
    }
}

/// One interface as `ip -j -d link show` lists it.
#[derive(Debug, Clone)]
pub struct Link {
    /// Its name.
    pub name: String,
    /// Its kind (`tun` for a TAP, `veth`; empty for none, as `lo`).
    pub kind: String,
    /// Its alias, if any.
    pub alias: Option<String>,
}

/// `ip [-n NS] ARGS…` as JSON (`-j`); `None` when the namespace is gone. A dump the kernel
/// interrupted (the namespace's interfaces or rules changed under it: other tests make and
/// delete interfaces in this process's namespace all the time) is asked again.
fn ip_json(ns: Option<&Netns>, args: &[&str]) -> Option<Vec<serde_json::Value>> {
    let mut all = vec!["-j"];
    if let Some(ns) = ns {
        all.extend(["-n", &ns.0]);
    }
    all.extend_from_slice(args);
    let mut why = String::new();
    for _ in 0..10 {
        let out = std::process::Command::new(IP)
            .args(&all)
            .output()
            .unwrap_or_else(|e| panic!("cannot run ip {all:?}: {e}"));
        if out.status.success() {
            return Some(
                serde_json::from_slice(&out.stdout)
                    .unwrap_or_else(|e| panic!("ip {all:?} printed no JSON list: {e}")),
            );
        }
        if ns.is_some_and(|ns| !std::path::Path::new(&ns.path()).exists()) {
            return None;
        }
        why = String::from_utf8_lossy(&out.stderr).into_owned();
        if !why.contains("Dump was interrupted") && !why.contains("Dump terminated") {
            break;
        }
    }
    panic!("ip {all:?} failed: {why}");
}

/// Every interface of `ns` (`None`: this process's namespace, Quiver's); `None` when the
/// namespace is gone (it took its interfaces with it).
pub fn links(ns: Option<&Netns>) -> Option<Vec<Link>> {
    let all = ip_json(ns, &["-d", "link", "show"])?;
    Some(
        all.iter()
            .map(|l| Link {
                name: l["ifname"].as_str().unwrap_or_default().to_string(),
                kind: l["linkinfo"]["info_kind"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                alias: l["ifalias"].as_str().map(str::to_string),
            })
            .collect(),
    )
}

/// The names Quiver gives connection `id`'s veth ends in its own namespace (one per side).
fn host_names(id: &str) -> [String; 2] {
    ["client", "endpoint"].map(|side| host_name_for(&format!("{id}/{side}")))
}

/// Whether `link` is one of connection `id`'s: NSM's alias of either side, Quiver's tag of
/// either side, or the name of one of its veth ends.
fn is_of(link: &Link, id: &str) -> bool {
    let tags = [
        format!("client-{id}"),
        format!("server-{id}"),
        format!("quiver:{id}/client"),
        format!("quiver:{id}/endpoint"),
    ];
    link.alias.as_ref().is_some_and(|a| tags.contains(a)) || host_names(id).contains(&link.name)
}

/// Connection `id`'s interfaces in Quiver's own namespace (this process's).
pub fn in_quivers_namespace(id: &str) -> Vec<Link> {
    links(None)
        .expect("this process's namespace")
        .into_iter()
        .filter(|l| is_of(l, id))
        .collect()
}

/// Quiver's policy rules in `ns` (protocol [`RULE_PROTOCOL`], IPv4 and IPv6), as `ip -j rule`
/// prints them; none when the namespace is gone.
pub fn quiver_rules(ns: &Netns) -> Vec<String> {
    let mut rules = Vec::new();
    for family in ["-4", "-6"] {
        let Some(all) = ip_json(Some(ns), &[family, "rule", "show"]) else {
            return Vec::new();
        };
        rules.extend(
            all.into_iter()
                .filter(|r| r["protocol"].as_str() == Some(&RULE_PROTOCOL.to_string()))
                .map(|r| r.to_string()),
        );
    }
    rules
}

/// What is left of connection `id` (empty: nothing): any interface besides `lo` in the pods
/// (they are the test's: Quiver made whatever else is there), an interface of `id` in Quiver's
/// namespace, Quiver's policy rules in the pods, the forwarder's ports of `id` and the objects
/// it owns, and `id` among the data path's owners.
pub fn leftovers(id: &str, pods: &[&Netns], fwd: &Control, dp: &ForwarderDataplane) -> Vec<String> {
    let mut left = Vec::new();
    for ns in pods {
        for l in links(Some(ns)).unwrap_or_default() {
            if l.name != "lo" {
                left.push(format!("interface {} in {}: {l:?}", l.name, ns.0));
            }
        }
        for r in quiver_rules(ns) {
            left.push(format!("policy rule in {}: {r}", ns.0));
        }
    }
    for l in in_quivers_namespace(id) {
        left.push(format!("interface {} in Quiver's namespace: {l:?}", l.name));
    }
    let view = fwd.view();
    let prefix = format!("nsm-{id}-");
    for p in view.ports().iter().filter(|p| p.name.starts_with(&prefix)) {
        left.push(format!("port {}", p.name));
    }
    for o in view.owned_by(id) {
        left.push(format!("owned by {id}: {o:?}"));
    }
    if nsm_forwarder::NsmBackend::owners(dp)
        .expect("the data path's owners")
        .iter()
        .any(|o| o == id)
    {
        left.push(format!("{id} among the data path's owners"));
    }
    left
}

/// Asserts that nothing of connection `id` is left ([`leftovers`]).
pub fn assert_nothing_left(id: &str, pods: &[&Netns], fwd: &Control, dp: &ForwarderDataplane) {
    let left = leftovers(id, pods, fwd, dp);
    assert!(left.is_empty(), "left of {id}: {left:#?}");
}

/// Asserts that connection `id` between `nsc` and `nse` is built once, as `backend` builds
/// it: in each pod exactly one interface besides `lo`, with NSM's alias, a TAP or a veth; in
/// Quiver's namespace nothing of `id` (TAP) or exactly its two veth ends, tagged; in the
/// forwarder exactly the two ports of `id`, TAP or AF_PACKET.
pub fn assert_built_once(
    backend: KernelBackend,
    id: &str,
    nsc: &Netns,
    nse: &Netns,
    fwd: &Control,
) {
    let kind = match backend {
        KernelBackend::Tap => "tun",
        KernelBackend::Veth => "veth",
    };
    for (ns, alias) in [(nsc, format!("client-{id}")), (nse, format!("server-{id}"))] {
        let made: Vec<Link> = links(Some(ns))
            .expect("the pod's namespace")
            .into_iter()
            .filter(|l| l.name != "lo")
            .collect();
        assert_eq!(made.len(), 1, "one interface in {}: {made:#?}", ns.0);
        assert_eq!(made[0].kind, kind, "in {}: {made:#?}", ns.0);
        assert_eq!(made[0].alias.as_deref(), Some(alias.as_str()), "{}", ns.0);
    }
    let mut ends = in_quivers_namespace(id);
    ends.sort_by(|a, b| a.name.cmp(&b.name));
    match backend {
        KernelBackend::Tap => assert!(ends.is_empty(), "nothing in Quiver's namespace: {ends:#?}"),
        KernelBackend::Veth => {
            let mut want: Vec<(String, String)> = ["client", "endpoint"]
                .map(|side| {
                    let tag = format!("{id}/{side}");
                    (host_name_for(&tag), format!("quiver:{tag}"))
                })
                .to_vec();
            want.sort();
            let got: Vec<(String, String)> = ends
                .iter()
                .filter(|l| l.kind == "veth")
                .map(|l| (l.name.clone(), l.alias.clone().unwrap_or_default()))
                .collect();
            assert_eq!(got, want, "Quiver's two veth ends, tagged: {ends:#?}");
        }
    }
    let view = fwd.view();
    let prefix = format!("nsm-{id}-");
    let mut ports: Vec<(String, bool)> = view
        .ports()
        .iter()
        .filter(|p| p.name.starts_with(&prefix))
        .map(|p| {
            let right_type = matches!(
                (backend, view.port_section(&p.name)),
                (KernelBackend::Tap, Some(PortSection::Tap(_)))
                    | (KernelBackend::Veth, Some(PortSection::AfPacket(_)))
            );
            (p.name.clone(), right_type)
        })
        .collect();
    ports.sort();
    assert_eq!(
        ports,
        [
            (format!("{prefix}client"), true),
            (format!("{prefix}endpoint"), true)
        ],
        "the forwarder's two ports of {id}, of {backend:?}'s type"
    );
}
