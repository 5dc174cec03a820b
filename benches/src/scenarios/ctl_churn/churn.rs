//! `ctl-churn`'s churn: Request/Close pairs, each call timed.

use std::time::Instant;

use nsm_forwarder::testing::BlockingClient;

use super::mix::{is_kernel, Calls, KernelEnds, CLIENT_IFNAME};
use super::nsm::{kernel_request, request};
use super::options::Options;

/// What the churn did, by mechanism.
pub(super) struct Churned {
    pub(super) memif: Calls,
    pub(super) kernel: Calls,
    pub(super) failures: Vec<String>,
    /// KERNEL pairs whose two interfaces were both there when the Request was answered.
    pub(super) kernel_links_seen: usize,
    /// How long it took.
    pub(super) secs: f64,
}

/// The churn: for each id a Request (KERNEL on both sides for the share `opts` asks, MEMIF
/// otherwise) and its Close, one after another, each call timed.
pub(super) fn churn(
    client: &mut BlockingClient,
    ids: &[String],
    ends: Option<&KernelEnds>,
    opts: &Options,
    netns: &str,
) -> Churned {
    let pairs = ids.len();
    let mut memif = Calls::default();
    let mut kernel = Calls::default();
    let mut failures = Vec::new();
    // KERNEL pairs whose two interfaces were both there when the Request was answered.
    let mut kernel_links_seen = 0usize;
    let churn_start = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let kernel_ends = ends.filter(|_| is_kernel(i, opts.kernel_share));
        let (calls, req) = match kernel_ends {
            Some(e) => (
                &mut kernel,
                kernel_request(id, "churn-nse", &e.nsc.url(), CLIENT_IFNAME),
            ),
            None => (&mut memif, request(id, "churn-nse", netns)),
        };
        calls.pairs += 1;
        let t0 = Instant::now();
        let answer = client.request(req);
        let t1 = Instant::now();
        calls.requests.push(t1 - t0);
        match answer {
            Ok(conn) => {
                if let Some(e) = kernel_ends {
                    // Not timed: both interfaces, one in each namespace.
                    if e.extra().is_ok_and(|(c, s)| c.len() == 1 && s.len() == 1) {
                        kernel_links_seen += 1;
                    }
                }
                let t2 = Instant::now();
                if let Err(e) = client.close(conn) {
                    calls.failures += 1;
                    failures.push(format!("Close {id}: {e}"));
                }
                calls.closes.push(t2.elapsed());
            }
            Err(e) => {
                calls.failures += 1;
                failures.push(format!("Request {id}: {e}"));
            }
        }
        if (i + 1) % (pairs / 10).max(1) == 0 {
            eprintln!(
                "ctl-churn: {} pairs, {:.0} pairs/s",
                i + 1,
                (i + 1) as f64 / churn_start.elapsed().as_secs_f64()
            );
        }
    }
    let churn_secs = churn_start.elapsed().as_secs_f64();
    Churned {
        memif,
        kernel,
        failures,
        kernel_links_seen,
        secs: churn_secs,
    }
}
