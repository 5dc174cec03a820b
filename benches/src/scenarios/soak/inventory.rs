//! What exists, kind by kind, each object named: the soak's accounting. A snapshot is taken
//! as a baseline once the stable connections are up and the churn is parked; after every fault
//! and at the end the same is taken again (until it matches or a deadline passes) and what is
//! there beyond the baseline is leaked, named.
//!
//! Kinds of the Quiver process (compared with the baseline of the same incarnation): buffers
//! in use (the pool's capacity less its free count, from the metrics: 0 once idle, whatever
//! the baseline), open fds by what they are (`/proc/PID/fd`), threads by name
//! (`/proc/PID/task/*/comm`), owned objects (`quiver ctl show interfaces`, `cross-connects`,
//! `connections`), Prometheus series. Kinds of the host (compared with the first baseline:
//! they outlive a killed Quiver): links in every namespace of the soak (in Quiver's own,
//! veth ends tagged for a connection that is up are left out: they exist with the veth
//! backend only), IPv4 and IPv6 routes of every table, rules, permanent neighbours, named unix
//! sockets (memif control sockets are abstract names) in each namespace.

use std::collections::BTreeMap;

use super::super::procs::{run, IP};
use super::quiver::Quiver;

/// Object name → how many.
pub type Objects = BTreeMap<String, i64>;

/// Kind → its objects.
#[derive(Clone, Debug, Default)]
pub struct Snapshot(pub BTreeMap<&'static str, Objects>);

/// The kinds that belong to one Quiver process.
pub const PROCESS_KINDS: [&str; 5] = ["buffers", "fds", "threads", "owned", "series"];
/// The kinds that outlive a Quiver process.
pub const HOST_KINDS: [&str; 5] = ["links", "routes", "rules", "neighbours", "sockets"];

/// A namespace to account for: a label and its name (`None`: the host's own).
pub struct Ns {
    /// How the report names it.
    pub label: String,
    /// `ip netns` name; `None` for the runner's namespace (only links tagged by this run are
    /// counted there).
    pub name: Option<String>,
}

/// What to look at.
pub struct Scope<'a> {
    /// The namespaces.
    pub namespaces: &'a [Ns],
    /// Connection ids whose veths in Quiver's namespace are expected (the stable ones, up).
    pub live_ids: &'a [String],
    /// Connection ids of this run start with this: tagged links of the host carrying it count.
    pub id_prefix: &'a str,
    /// The label of Quiver's own namespace.
    pub quiver_ns: &'a str,
    /// The directory of Quiver's API sockets (and the endpoints').
    pub api_dir: &'a str,
}

impl Snapshot {
    /// Everything, now (`quiver`: the process kinds too).
    pub fn take(scope: &Scope, quiver: Option<&Quiver>) -> Result<Snapshot, String> {
        let mut s = Snapshot::default();
        if let Some(q) = quiver {
            s.0.insert("buffers", buffers(q)?);
            s.0.insert("fds", fds(q.pid));
            s.0.insert("threads", threads(q.pid));
            s.0.insert("owned", owned(q)?);
            s.0.insert("series", series(q)?);
        }
        for kind in HOST_KINDS {
            s.0.insert(kind, Objects::new());
        }
        for ns in scope.namespaces {
            host(&mut s, ns, scope)?;
        }
        Ok(s)
    }

    /// Objects of `kind` beyond `base` (count over the baseline's), and those missing.
    pub fn diff(&self, base: &Snapshot, kind: &str) -> (Objects, Objects) {
        let empty = Objects::new();
        let now = self.0.get(kind).unwrap_or(&empty);
        let was = base.0.get(kind).unwrap_or(&empty);
        let mut extra = Objects::new();
        let mut missing = Objects::new();
        if kind == "buffers" {
            // Once idle, every buffer is back: 0 in use whatever the baseline said.
            for (k, v) in now.iter().filter(|(_, v)| **v > 0) {
                extra.insert(k.clone(), *v);
            }
            return (extra, missing);
        }
        for (k, v) in now {
            let d = v - was.get(k).copied().unwrap_or(0);
            if d > 0 {
                extra.insert(k.clone(), d);
            }
        }
        for (k, v) in was {
            let d = v - now.get(k).copied().unwrap_or(0);
            if d > 0 {
                missing.insert(k.clone(), d);
            }
        }
        (extra, missing)
    }
}

fn add(o: &mut Objects, k: String) {
    *o.entry(k).or_default() += 1;
}

/// `quiver_buffer_pool_in_use` (and capacity, free beside it, not counted).
fn buffers(q: &Quiver) -> Result<Objects, String> {
    let text = q.metrics()?;
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as i64)
    };
    let in_use = value("quiver_buffer_pool_in_use").ok_or("no quiver_buffer_pool_in_use")?;
    let mut o = Objects::new();
    o.insert("buffers in use".into(), in_use);
    Ok(o)
}

/// Open fds by what they are: a socket, an anon inode of a kind, a memfd, a namespace, a path.
fn fds(pid: u32) -> Objects {
    let mut o = Objects::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return o;
    };
    for e in dir.flatten() {
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        let t = target.display().to_string();
        let kind = if t.starts_with("socket:") {
            "socket".to_string()
        } else if t.starts_with("net:") {
            "network namespace".to_string()
        } else if let Some(m) = t.strip_prefix("/memfd:") {
            format!("memfd:{}", m.trim_end_matches(" (deleted)"))
        } else {
            t
        };
        add(&mut o, kind);
    }
    o
}

/// Threads by name.
fn threads(pid: u32) -> Objects {
    let mut o = Objects::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return o;
    };
    for e in dir.flatten() {
        if let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) {
            add(&mut o, comm.trim().to_string());
        }
    }
    o
}

/// Interfaces, cross-connects and NSM connections as `quiver ctl` shows them.
fn owned(q: &Quiver) -> Result<Objects, String> {
    let mut o = Objects::new();
    let v = q.ctl_json(&["show", "interfaces"])?;
    for i in v.as_array().into_iter().flatten() {
        add(
            &mut o,
            format!("interface {}", i["name"].as_str().unwrap_or("?")),
        );
    }
    let v = q.ctl_json(&["show", "cross-connects"])?;
    for x in v.as_array().into_iter().flatten() {
        add(
            &mut o,
            format!(
                "cross-connect {} {}",
                x["a"].as_str().unwrap_or("?"),
                x["b"].as_str().unwrap_or("?")
            ),
        );
    }
    let v = q.ctl_json(&["show", "connections"])?;
    for c in v.as_array().into_iter().flatten() {
        add(
            &mut o,
            format!("connection {}", c["id"].as_str().unwrap_or("?")),
        );
    }
    Ok(o)
}

/// Every series of the metrics (name and labels).
fn series(q: &Quiver) -> Result<Objects, String> {
    let text = q.metrics()?;
    let mut o = Objects::new();
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let id = l.rsplit_once(' ').map_or(l, |(id, _)| id);
        add(&mut o, id.to_string());
    }
    Ok(o)
}

fn ip(ns: &Ns, args: &[&str]) -> Result<String, String> {
    let mut all = vec![IP];
    if let Some(n) = &ns.name {
        all.extend(["-n", n.as_str()]);
    }
    all.extend_from_slice(args);
    run(&all)
}

/// The host kinds of namespace `ns`.
fn host(s: &mut Snapshot, ns: &Ns, scope: &Scope) -> Result<(), String> {
    let label = &ns.label;
    let links = s.0.get_mut("links").expect("links");
    for l in ip(ns, &["-o", "link", "show"])?.lines() {
        let name = l
            .split(": ")
            .nth(1)
            .map(|n| n.split('@').next().unwrap_or(n))
            .unwrap_or(l);
        let alias = l
            .split("alias ")
            .nth(1)
            .map(|a| a.split_whitespace().next().unwrap_or(""));
        let tagged_by = alias.and_then(|a| a.strip_prefix("quiver:"));
        if ns.name.is_none() && !tagged_by.is_some_and(|t| t.starts_with(scope.id_prefix)) {
            continue;
        }
        let expected = tagged_by
            .map(|t| t.split('/').next().unwrap_or(t))
            .is_some_and(|id| scope.live_ids.iter().any(|l| l == id));
        if *label == scope.quiver_ns && expected {
            continue;
        }
        match alias {
            Some(a) => add(links, format!("{label}: {name} ({a})")),
            None => add(links, format!("{label}: {name}")),
        }
    }
    if ns.name.is_none() {
        return Ok(());
    }
    for fam in ["-4", "-6"] {
        for l in ip(ns, &[fam, "-o", "route", "show", "table", "all"])?.lines() {
            // The kernel's route to an interface's own link-local address appears only once
            // duplicate address detection is done, a second or two after the link: it is the
            // link's, which is counted.
            if l.starts_with("local fe80::") {
                continue;
            }
            let l = normalize(l);
            add(
                s.0.get_mut("routes").expect("routes"),
                format!("{label}: {l}"),
            );
        }
        for l in ip(ns, &[fam, "-o", "rule", "show"])?.lines() {
            let l = l.split_whitespace().collect::<Vec<_>>().join(" ");
            add(
                s.0.get_mut("rules").expect("rules"),
                format!("{label}: {l}"),
            );
        }
        for l in ip(ns, &[fam, "neigh", "show", "nud", "permanent"])?.lines() {
            add(
                s.0.get_mut("neighbours").expect("neighbours"),
                format!("{label}: {}", l.trim()),
            );
        }
    }
    let name = ns.name.as_deref().unwrap_or_default();
    let unix = run(&[IP, "netns", "exec", name, "cat", "/proc/net/unix"])?;
    for l in unix.lines().skip(1) {
        // Quiver's own API sockets (in the run's directory) count their clients' connections
        // too: those are the clients', not objects Quiver made.
        let path = l.split_whitespace().nth(7);
        if let Some(path) = path.filter(|p| !p.starts_with(scope.api_dir)) {
            add(
                s.0.get_mut("sockets").expect("sockets"),
                format!("{label}: {path}"),
            );
        }
    }
    Ok(())
}

/// A route as `ip -o` prints it, spaces squeezed and IPv6 link-local host addresses (made from
/// a MAC, new with each interface) replaced by `fe80::(link-local)`.
fn normalize(line: &str) -> String {
    line.split_whitespace()
        .map(|w| {
            if w.starts_with("fe80::") && !w.contains('/') {
                "fe80::(link-local)"
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every object found leaked at any accounting, by kind (the largest count seen of each).
#[derive(Default)]
pub struct Leaks(pub BTreeMap<&'static str, BTreeMap<String, i64>>);

impl Leaks {
    pub(super) fn note(&mut self, kind: &'static str, item: String, n: i64) {
        let e = self.0.entry(kind).or_default().entry(item).or_default();
        *e = (*e).max(n);
    }

    /// Objects leaked, all kinds.
    pub fn total(&self) -> i64 {
        self.0.values().flat_map(|m| m.values()).sum()
    }

    /// Objects leaked per kind (every kind listed, 0 included).
    pub fn per_kind(&self) -> BTreeMap<&'static str, i64> {
        PROCESS_KINDS
            .iter()
            .chain(HOST_KINDS.iter())
            .map(|k| (*k, self.0.get(k).map_or(0, |m| m.values().sum())))
            .collect()
    }
}
