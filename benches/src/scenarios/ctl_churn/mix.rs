//! The churn's mix of mechanisms: which pairs are KERNEL on both sides, the two namespaces
//! their ends go in (made for the run, deleted at its end whatever happens), the links found
//! there, and each mechanism's figures.

use std::time::Duration;

use drivers::kernel_interface::host_name_for;
use serde_json::{json, Value};

use super::super::procs::{run, IP};
use super::options::Options;
use super::util::{quantile_ms, round3, wait_until};

/// The interface the churn's NSC asks for on every KERNEL Request, as NSM's clients name
/// theirs: each pair's is made again under the name the last one's Close freed.
pub(super) const CLIENT_IFNAME: &str = "nsm-1";

/// Whether pair `i` of the churn is a KERNEL one when `share` percent of them are: spread
/// evenly (with 25, every fourth pair).
pub(super) fn is_kernel(i: usize, share: u8) -> bool {
    let s = usize::from(share.min(100));
    (i + 1) * s / 100 > i * s / 100
}

/// A named network namespace made for the run (`/var/run/netns/<name>`, `lo` up), deleted on
/// drop.
pub(super) struct Netns {
    pub(super) name: String,
}

impl Netns {
    /// Makes `name` (a stale one of that name is deleted first).
    fn new(name: &str) -> Result<Netns, String> {
        if std::path::Path::new(&format!("/var/run/netns/{name}")).exists() {
            let _ = run(&[IP, "netns", "del", name]);
        }
        run(&[IP, "netns", "add", name])?;
        // Deleted from here on, whatever fails next.
        let ns = Netns { name: name.into() };
        run(&[IP, "-n", name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Its path.
    pub(super) fn path(&self) -> String {
        format!("/var/run/netns/{}", self.name)
    }

    /// NSM's `file://` URL of it.
    pub(super) fn url(&self) -> String {
        format!("file://{}", self.path())
    }

    /// The names of its links, sorted.
    pub(super) fn links(&self) -> Result<Vec<String>, String> {
        links(Some(&self.name))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = run(&[IP, "netns", "del", &self.name]) {
            eprintln!("ctl-churn: cannot delete namespace {}: {e}", self.name);
        }
    }
}

/// The names of the links in namespace `ns` (`None`: this process's own), sorted.
fn links(ns: Option<&str>) -> Result<Vec<String>, String> {
    let out = match ns {
        Some(n) => run(&[IP, "-n", n, "-o", "link", "show"])?,
        None => run(&[IP, "-o", "link", "show"])?,
    };
    // `7: nsm-1: <…` or `8: qvk0123456789ab@if9: <…`.
    let mut names: Vec<String> = out
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect();
    names.sort();
    Ok(names)
}

/// What is in `now` and not in `before` (sorted).
pub(super) fn added(before: &[String], now: &[String]) -> Vec<String> {
    now.iter()
        .filter(|n| before.binary_search(n).is_err())
        .cloned()
        .collect()
}

/// The KERNEL pairs' namespaces, the client's and the endpoint's, and the links each had
/// before the churn.
pub(super) struct KernelEnds {
    pub(super) nsc: Netns,
    pub(super) nse: Netns,
    pub(super) nsc_before: Vec<String>,
    pub(super) nse_before: Vec<String>,
}

impl KernelEnds {
    /// Makes `qcc<pid>-nsc` and `qcc<pid>-nse`, first deleting those of runs whose runner is
    /// gone (killed before it could delete them).
    pub(super) fn new(pid: u32) -> Result<KernelEnds, String> {
        let names = run(&[IP, "netns", "list"]).unwrap_or_default();
        for name in names.lines().filter_map(|l| l.split_whitespace().next()) {
            let owner = name
                .strip_prefix("qcc")
                .and_then(|r| r.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            if owner.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
                && run(&[IP, "netns", "del", name]).is_ok()
            {
                eprintln!("ctl-churn: deleted namespace {name}, left by a run that is gone");
            }
        }
        let nsc = Netns::new(&format!("qcc{pid}-nsc"))?;
        let nse = Netns::new(&format!("qcc{pid}-nse"))?;
        Ok(KernelEnds {
            nsc_before: nsc.links()?,
            nse_before: nse.links()?,
            nsc,
            nse,
        })
    }

    /// The links beyond those before the churn: (the client's namespace, the endpoint's).
    pub(super) fn extra(&self) -> Result<(Vec<String>, Vec<String>), String> {
        Ok((
            added(&self.nsc_before, &self.nsc.links()?),
            added(&self.nse_before, &self.nse.links()?),
        ))
    }
}

/// The veth ends the veth backend would give connections `ids` in Quiver's namespace (this
/// process's: named from the connection and side) that exist there now.
pub(super) fn host_ends_present(ids: &[&String]) -> Result<Vec<String>, String> {
    let here = links(None)?;
    Ok(ids
        .iter()
        .flat_map(|id| ["client", "endpoint"].map(|side| host_name_for(&format!("{id}/{side}"))))
        .filter(|n| here.binary_search(n).is_ok())
        .collect())
}

/// One mechanism's pairs: each call's time, and how many failed.
#[derive(Default)]
pub(super) struct Calls {
    /// Pairs tried.
    pub(super) pairs: usize,
    /// Requests, answered or not.
    pub(super) requests: Vec<Duration>,
    /// Closes of the connections Requested.
    pub(super) closes: Vec<Duration>,
    /// Requests and Closes refused.
    pub(super) failures: usize,
}

impl Calls {
    pub(super) fn sort(&mut self) {
        self.requests.sort();
        self.closes.sort();
    }

    /// Request time at quantile `q`, ms (`None` without Requests).
    pub(super) fn request_ms(&self, q: f64) -> Option<f64> {
        (!self.requests.is_empty()).then(|| quantile_ms(&self.requests, q))
    }

    /// Close time at quantile `q`, ms (`None` without Closes).
    pub(super) fn close_ms(&self, q: f64) -> Option<f64> {
        (!self.closes.is_empty()).then(|| quantile_ms(&self.closes, q))
    }

    /// Pairs that went through per second of their own calls (Request and Close), the time
    /// between pairs left out.
    pub(super) fn pairs_per_s(&self) -> Option<f64> {
        let busy: Duration = self.requests.iter().chain(&self.closes).sum();
        (self.pairs > 0 && !busy.is_zero())
            .then(|| self.pairs.saturating_sub(self.failures) as f64 / busy.as_secs_f64())
    }

    /// Whether its Request p99 is within `goal_ms` (`None` without Requests).
    pub(super) fn meets(&self, goal_ms: f64) -> Option<bool> {
        self.request_ms(0.99).map(|p| p <= goal_ms)
    }

    /// Its row of the printed table.
    pub(super) fn row(&self, name: &str, goal_ms: f64) -> String {
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.2}"));
        let three = |f: &dyn Fn(f64) -> Option<f64>| {
            format!("{:>7} {:>7} {:>7}", ms(f(0.5)), ms(f(0.99)), ms(f(1.0)))
        };
        format!(
            "  {name:<7} {:>6} {:>6}  {}  {}  {:>8}  p99 ≤ {goal_ms} ms: {}",
            self.pairs,
            self.failures,
            three(&|q| self.request_ms(q)),
            three(&|q| self.close_ms(q)),
            self.pairs_per_s()
                .map_or_else(|| "-".to_string(), |p| format!("{p:.0}")),
            match self.meets(goal_ms) {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "-",
            }
        )
    }

    /// Its figures as JSON, rounded; `null` where it has none.
    pub(super) fn json(&self) -> Value {
        let r = |v: Option<f64>| v.map(round3);
        json!({
            "pairs": self.pairs,
            "failures": self.failures,
            "request_p50_ms": r(self.request_ms(0.5)),
            "request_p99_ms": r(self.request_ms(0.99)),
            "request_max_ms": r(self.request_ms(1.0)),
            "close_p50_ms": r(self.close_ms(0.5)),
            "close_p99_ms": r(self.close_ms(0.99)),
            "close_max_ms": r(self.close_ms(1.0)),
            "pairs_per_s": r(self.pairs_per_s()),
        })
    }
}

/// The header of the table [`Calls::row`] prints.
pub(super) fn table_header() -> String {
    format!(
        "  {:<7} {:>6} {:>6}  {:>23}  {:>23}  {:>8}  goal",
        "", "pairs", "failed", "Request p50/p99/max ms", "Close p50/p99/max ms", "pairs/s"
    )
}

/// The KERNEL pairs' links left once the Closes are done: in the client's namespace, in the
/// endpoint's, and veth ends of churned connections in this process's namespace.
pub(super) fn links_left(
    ends: Option<&KernelEnds>,
    ids: &[String],
    opts: &Options,
) -> Result<LinksLeft, String> {
    // None beyond `lo` in either namespace once the Closes are done
    // (nor the probes' TAP devices), no veth end of a churned connection in this process's
    // namespace (the veth backend puts Quiver's ends there).
    let kernel_ids: Vec<&String> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| ends.is_some() && is_kernel(*i, opts.kernel_share))
        .map(|(_, id)| id)
        .collect();
    let (mut nsc_left, mut nse_left, mut host_ends_left) = (Vec::new(), Vec::new(), Vec::new());
    if let Some(e) = ends {
        wait_until(5, || {
            e.extra().is_ok_and(|(c, s)| c.is_empty() && s.is_empty())
                && host_ends_present(&kernel_ids).is_ok_and(|v| v.is_empty())
        });
        (nsc_left, nse_left) = e.extra()?;
        host_ends_left = host_ends_present(&kernel_ids)?;
    }
    Ok((nsc_left, nse_left, host_ends_left))
}

/// Names of links left: in the client's namespace, in the endpoint's, veth ends here.
pub(super) type LinksLeft = (Vec<String>, Vec<String>, Vec<String>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_spreads_kernel_pairs_evenly() {
        let picked = |share, n| (0..n).filter(|&i| is_kernel(i, share)).collect::<Vec<_>>();
        assert_eq!(picked(25, 12), [3, 7, 11]);
        assert_eq!(picked(0, 100).len(), 0);
        assert_eq!(picked(100, 100).len(), 100);
        assert_eq!(picked(25, 100).len(), 25);
        assert_eq!(picked(10, 1000).len(), 100);
    }
}
