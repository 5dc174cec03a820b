//! The accounting after each fault and at the end: the churn parked (its connections closed),
//! the stable connections' traffic drained, then the inventory taken again and again until it
//! matches the baselines or a deadline passes; what is still there beyond them is a leak, each
//! object named on stderr and kept (once) for the report.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::host::wait_for;
use super::inventory::{Ns, Objects, Scope, Snapshot, HOST_KINDS, PROCESS_KINDS};
use super::world::{Namespaces, World};

/// How long the inventory may take to come back to the baseline.
const SETTLE: Duration = Duration::from_secs(30);

/// What a comparison found, per kind: (beyond the baseline, missing from it).
type Found = BTreeMap<&'static str, (Objects, Objects)>;

impl World {
    /// The inventory now (`process`: the Quiver process's kinds too).
    pub fn snapshot(&self, process: bool) -> Result<Snapshot, String> {
        let namespaces = namespaces(&self.ns);
        let live = if self.stable_up {
            self.stable.ids()
        } else {
            Vec::new()
        };
        let scope = Scope {
            namespaces: &namespaces,
            live_ids: &live,
            id_prefix: &self.id_prefix,
            quiver_ns: "quiver",
            api_dir: &self.api_dir,
        };
        Snapshot::take(&scope, process.then_some(&self.quiver))
    }

    /// A baseline: snapshots until two in a row agree (at most 20 s).
    pub fn baseline(&self) -> Result<Snapshot, String> {
        settled(|| self.snapshot(true))
    }

    fn compare(&self, now: &Snapshot, base_process: &Snapshot, base_host: &Snapshot) -> Found {
        let mut found = Found::new();
        for kind in PROCESS_KINDS {
            found.insert(kind, now.diff(base_process, kind));
        }
        for kind in HOST_KINDS {
            found.insert(kind, now.diff(base_host, kind));
        }
        found
    }

    /// Parks the churn (its connections closed) and drains the stable connections; the
    /// time it took and whether everything sent arrived.
    pub fn park(&mut self) -> Result<(Duration, bool), String> {
        let t0 = Instant::now();
        // The faults' client disconnects (the churn's clients do as they park).
        self.grpc = None;
        self.ctx.gate.set_shut(true);
        let n = self.clients.len();
        let parked = wait_for(Duration::from_secs(90), Duration::from_millis(10), || {
            self.ctx.parked.load(Ordering::SeqCst) >= n
        });
        if !parked {
            return Err("the churn clients did not park within 90 s".into());
        }
        let drained = !self.stable_up || self.stable.pause(Duration::from_secs(5));
        Ok((t0.elapsed(), drained))
    }

    /// Lets the churn and the stable traffic go on.
    pub fn unpark(&mut self) {
        if self.stable_up {
            self.stable.resume();
        }
        self.ctx.gate.set_shut(false);
    }

    /// Accounts against `base_process` (this Quiver's) and `base_host`, the churn parked and
    /// traffic drained; notes the leaks; returns the record.
    pub fn account(
        &mut self,
        label: &str,
        base_process: &Snapshot,
        base_host: &Snapshot,
    ) -> Result<Value, String> {
        let t0 = Instant::now();
        let mut found;
        loop {
            let now = self.snapshot(true)?;
            found = self.compare(&now, base_process, base_host);
            let clean = found.values().all(|(extra, _)| extra.is_empty());
            if clean || t0.elapsed() >= SETTLE {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let inc = self.quiver.incarnation;
        let mut leaked = BTreeMap::new();
        let mut named = Vec::new();
        let mut missing = BTreeMap::new();
        for (kind, (extra, miss)) in &found {
            let n: i64 = extra.values().sum();
            leaked.insert(*kind, n);
            for (item, c) in extra {
                let item = if PROCESS_KINDS.contains(kind) {
                    format!("quiver #{inc}: {item}")
                } else {
                    item.clone()
                };
                eprintln!("soak: LEAK after {label}: {kind}: {item} (×{c})");
                named.push(format!("{kind}: {item} ×{c}"));
                self.leaks.note(kind, item, *c);
            }
            if !miss.is_empty() {
                missing.insert(*kind, miss.keys().cloned().collect::<Vec<_>>());
            }
        }
        let total: i64 = leaked.values().sum();
        eprintln!(
            "soak: accounted after {label}: {} (settled in {:.1} s)",
            if total == 0 {
                "nothing left behind".to_string()
            } else {
                format!("{total} objects left behind")
            },
            t0.elapsed().as_secs_f64()
        );
        if !missing.is_empty() {
            eprintln!("soak:   missing from the baseline after {label}: {missing:?}");
        }
        Ok(json!({
            "after": label,
            "at_s": self.started.elapsed().as_secs(),
            "settle_s": (t0.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            "leaked_total": total,
            "leaked": leaked,
            "objects": named.iter().take(20).collect::<Vec<_>>(),
            "missing": missing
                .iter()
                .map(|(k, v)| (*k, v.iter().take(10).collect::<Vec<_>>()))
                .collect::<BTreeMap<_, _>>(),
        }))
    }

    /// The host kinds now beyond the host baseline (what a killed Quiver left): how many of
    /// each kind, the first few named.
    pub fn host_leftovers(&self) -> Result<Value, String> {
        let extra = self.host_extra(&self.base_host)?;
        let mut out = serde_json::Map::new();
        for (kind, items) in extra {
            out.insert(
                kind.into(),
                json!({"count": items.len(), "first": items.iter().take(5).collect::<Vec<_>>()}),
            );
        }
        Ok(Value::Object(out))
    }

    /// The host kinds' objects now beyond `base`, named.
    pub fn host_extra(
        &self,
        base: &Snapshot,
    ) -> Result<BTreeMap<&'static str, Vec<String>>, String> {
        let now = self.snapshot(false)?;
        let mut out = BTreeMap::new();
        for kind in HOST_KINDS {
            let (extra, _) = now.diff(base, kind);
            if !extra.is_empty() {
                out.insert(kind, extra.keys().cloned().collect());
            }
        }
        Ok(out)
    }
}

/// A baseline: snapshots by `take` every second for at least 12 s (longer than the runtimes'
/// idle blocking threads live) and until two in a row agree, at most 40 s; the last one, with
/// each thread name's and fd kind's largest count seen (a pool thread that comes and goes with
/// periodic work is not a leak when it comes back).
pub fn settled(take: impl Fn() -> Result<Snapshot, String>) -> Result<Snapshot, String> {
    let t0 = Instant::now();
    let mut last = take()?;
    let mut most = last.clone();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = take()?;
        for kind in ["threads", "fds"] {
            let m = most.0.entry(kind).or_default();
            for (k, v) in now.0.get(kind).into_iter().flatten() {
                let e = m.entry(k.clone()).or_default();
                *e = (*e).max(*v);
            }
        }
        let agree = now.0 == last.0;
        last = now;
        let waited = t0.elapsed();
        if (agree && waited >= Duration::from_secs(12)) || waited >= Duration::from_secs(40) {
            for kind in ["threads", "fds"] {
                if let Some(m) = most.0.remove(kind) {
                    last.0.insert(kind, m);
                }
            }
            return Ok(last);
        }
    }
}

/// The namespaces the inventory looks at: the runner's own (links tagged by this run only),
/// Quiver's, the endpoints', the clients'.
pub fn namespaces(ns: &Namespaces) -> Vec<Ns> {
    let mut v = vec![
        Ns {
            label: "host".into(),
            name: None,
        },
        Ns {
            label: "quiver".into(),
            name: Some(ns.fwd.name.clone()),
        },
        Ns {
            label: "nse".into(),
            name: Some(ns.nse.name.clone()),
        },
        Ns {
            label: "stable".into(),
            name: Some(ns.st.name.clone()),
        },
        Ns {
            label: "cnf".into(),
            name: Some(ns.cnf.name.clone()),
        },
    ];
    for (k, c) in ns.clients.iter().enumerate() {
        v.push(Ns {
            label: format!("c{k}"),
            name: Some(c.name.clone()),
        });
    }
    v
}
