//! `ctl-churn`'s concurrent mix: [`CLIENTS`] clients Request at once, each on its own
//! connection to the server (NSM's "20 clients at once" case), then Close at once. KERNEL on
//! both sides when the run has the KERNEL pairs' namespaces (each client its own interface
//! name in the client namespace), MEMIF otherwise. Every call is timed; the test endpoint
//! answers at once, so a Request's time is Quiver's own share of it.

use std::sync::{Arc, Barrier};
use std::time::Instant;

use nsm_forwarder::testing::BlockingClient;

use super::mix::{Calls, KernelEnds};
use super::nsm::{kernel_request, request};

/// Clients at once.
pub(super) const CLIENTS: usize = 20;

/// The goal: each concurrent Request costs Quiver at most this, at p99 (issue 34).
pub(super) const GOAL_P99_MS: f64 = 20.0;

/// What the concurrent mix did.
pub(super) struct Concurrent {
    /// Its calls (one pair per client).
    pub(super) calls: Calls,
    /// Its connection ids (for the leak check).
    pub(super) ids: Vec<String>,
    /// "kernel" or "memif".
    pub(super) mechanism: &'static str,
    /// Why calls failed.
    pub(super) failures: Vec<String>,
}

/// Runs the mix against the server at `listen`.
pub(super) fn concurrent(
    listen: &str,
    ends: Option<&KernelEnds>,
    netns: &str,
    pid: u32,
) -> Concurrent {
    let ids: Vec<String> = (0..CLIENTS).map(|i| format!("conc-{pid}-{i}")).collect();
    let nsc_url = ends.map(|e| e.nsc.url());
    let start = Arc::new(Barrier::new(CLIENTS));
    let close = Arc::new(Barrier::new(CLIENTS));
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let (start, close) = (start.clone(), close.clone());
                let nsc_url = nsc_url.clone();
                s.spawn(move || {
                    let req = match &nsc_url {
                        Some(url) => kernel_request(id, "churn-nse", url, &format!("nsm-c{i}")),
                        None => request(id, "churn-nse", netns),
                    };
                    let mut client = match BlockingClient::connect(listen) {
                        Ok(c) => c,
                        Err(e) => {
                            start.wait();
                            close.wait();
                            return (None, None, vec![format!("connect {id}: {e}")]);
                        }
                    };
                    start.wait();
                    let t0 = Instant::now();
                    let answer = client.request(req);
                    let requested = t0.elapsed();
                    close.wait();
                    match answer {
                        Ok(conn) => {
                            let t1 = Instant::now();
                            let closed = client.close(conn);
                            let took = t1.elapsed();
                            let failure = closed.err().map(|e| format!("Close {id}: {e}"));
                            (Some(requested), Some(took), failure.into_iter().collect())
                        }
                        Err(e) => (Some(requested), None, vec![format!("Request {id}: {e}")]),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut calls = Calls::default();
    let mut failures = Vec::new();
    for r in results {
        calls.pairs += 1;
        match r {
            Ok((requested, closed, failed)) => {
                calls.requests.extend(requested);
                calls.closes.extend(closed);
                calls.failures += failed.len();
                failures.extend(failed);
            }
            Err(_) => {
                calls.failures += 1;
                failures.push("a client thread panicked".into());
            }
        }
    }
    calls.sort();
    Concurrent {
        calls,
        ids,
        mechanism: if ends.is_some() { "kernel" } else { "memif" },
        failures,
    }
}
