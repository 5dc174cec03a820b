//! `ctl-churn`: NSM Request/Close pairs through the real forwarder while traffic flows through
//! another, long-lived NSM connection.
//!
//! In one process: `quiver::Forwarder` (one worker) with `quiver::control::nsm` served on a unix
//! socket in a temp dir, two test endpoints (NSEs) and the memif peers, all built on our `memif`
//! crate, the memif sides in this process's own network namespace
//! (`file:///proc/<pid>/ns/net`); the KERNEL pairs' sides in two namespaces made for the run
//! (`qcc<pid>-nsc`, `qcc<pid>-nse`, deleted at its end):
//!
//! - the *steady* connection: Requested once, MEMIF on both sides. Its NSC is a memif slave on
//!   the socket Quiver answers with; its NSE is a memif master on the socket the steady
//!   endpoint names. The NSC sends numbered 64-byte frames at a paced rate for the whole
//!   churn; the NSE checks every frame (loss, duplicates, order).
//! - the *churn*: N pairs (1,000; `--quick` 100), each a Request of a new connection id and
//!   then its Close, one after another from a blocking client, each call timed. Most have
//!   MEMIF on both sides (Quiver master toward the client, slave toward the churn endpoint's
//!   memif master, which accepts each one in turn); a share of them (`--kernel-share`, 25 % by
//!   default, every fourth pair; `--kernel`: all) KERNEL on both sides: the client asks for
//!   `nsm-1` in its namespace, the endpoint answers with its namespace and leaves the name to
//!   Quiver, and Quiver's KERNEL backend (`--kernel-backend`, TAP by default as in Quiver)
//!   makes both interfaces.
//!
//! Figures, per mechanism: Request and Close latency (p50/p99/max), pairs per second of their
//! calls; the steady connection's frames (sent, received, lost), and what the churn left
//! behind, each of which must be 0: file descriptors (`/proc/self/fd` before and after), memif
//! sockets (abstract names in `/proc/net/unix`), ports and owned objects (the forwarder's port
//! list and `owned_by` of every churned id), buffers (the pool's free count before the
//! forwarder forwarded anything and after it stopped), links in the KERNEL pairs' namespaces
//! beyond their `lo`, and veth ends of churned connections in this process's namespace. The
//! goals (MEMIF: p99 ≤ 5 ms per Request, ≥ 500 pairs/s; KERNEL: p99 ≤ 10 ms per Request; no
//! frame lost) are printed beside the figures, never asserted.
//!
//! Where the time goes: every data-path call the server makes is timed through a wrapper
//! (`breakdown`), and after the churn, with traffic still flowing, the pieces are timed alone
//! (`probe`): a gRPC round trip that builds nothing, an empty worker command, `synchronize`,
//! and a memif master port added and removed straight on the forwarder, with and without a
//! namespace (with KERNEL pairs, a TAP port made in a namespace too).

mod churn;
mod concurrent;
mod mix;
pub(crate) mod nsm;
mod options;
mod peers;
mod probe;
mod report;
mod setup;
mod timed;
pub(crate) mod util;

use std::sync::atomic::Ordering;

use churn::churn;
use concurrent::concurrent;
use mix::{is_kernel, KernelEnds};
pub use options::Options;
use peers::RATE;
use probe::probe;
use report::{report, Outcome};
use setup::{check_root, start_steady, Setup};
use util::{fd_count, sockets_named, wait_until, TempDir};

/// Runs the scenario; returns its JSON line.
pub fn run(quick: bool, opts: &Options) -> Result<String, String> {
    check_root()?;
    let pairs: usize = if quick { 100 } else { 1000 };
    let kernel_pairs = (0..pairs)
        .filter(|&i| is_kernel(i, opts.kernel_share))
        .count();
    let pid = std::process::id();
    let dir = TempDir(std::env::temp_dir().join(format!("quiver-ctl-churn-{pid}")));
    std::fs::create_dir_all(&dir.0).map_err(|e| e.to_string())?;
    let netns = format!("file:///proc/{pid}/ns/net");
    // The KERNEL pairs' namespaces, deleted when this returns (after everything declared
    // below is dropped: the forwarder's ports first).
    let ends = (kernel_pairs > 0)
        .then(|| KernelEnds::new(pid))
        .transpose()?;

    // The forwarder, the endpoints (NSEs) and the NSM server.
    let mut w = Setup::start(&dir.0, &netns, ends.as_ref(), opts, pid)?;

    // The steady connection and its traffic.
    let (steady, stats, peers) =
        start_steady(&mut w.client, &netns, pid, &w.steady_memif, &w.churn_memif)?;
    let ports_before = w.port_names();
    let fds_before = fd_count();
    let socket_prefix = format!("@quiver/churn-{pid}-");
    let sent_before = stats.sent.load(Ordering::Relaxed);
    eprintln!(
        "ctl-churn: steady connection up, {RATE} frames/s flowing; {pairs} Request/Close pairs, \
         {kernel_pairs} of them KERNEL on both sides ({} backend) (fds {fds_before}, ports {:?})",
        opts.backend_name(),
        ports_before
    );

    // The churn.
    let ids: Vec<String> = (0..pairs).map(|i| format!("churn-{pid}-{i}")).collect();
    let churned = churn(&mut w.client, &ids, ends.as_ref(), opts, &netns);
    // Then clients at once.
    let at_once = concurrent(&w.listen, ends.as_ref(), &netns, pid);
    let sent_during = stats.sent.load(Ordering::Relaxed) - sent_before;
    let ids: Vec<String> = ids.into_iter().chain(at_once.ids.iter().cloned()).collect();
    let breakdown = w.dp.report();

    // Where the time goes, probed while the traffic still flows.
    let probe = probe(
        &mut w.client,
        &w.fwd,
        &netns,
        pid,
        ends.as_ref(),
        pairs,
        kernel_pairs,
    )?;

    // Stop the traffic and let the last frames arrive.
    stats.drain();

    // What the churn left.
    let (owned_left, ports_left, fds_after, sockets_left) =
        left_behind(&w, &ids, ports_before.len(), fds_before, &socket_prefix);
    let churn_links = stats.churn_links.load(Ordering::Relaxed);
    let free_running = w.pool.free_count();
    // The KERNEL pairs' links.
    let (nsc_left, nse_left, host_ends_left) = mix::links_left(ends.as_ref(), &ids, opts)?;
    let links_left = nsc_left.len() + nse_left.len() + host_ends_left.len();

    // Tear everything down: the steady connection, the peers, the server, the forwarder.
    stats.stop.store(true, Ordering::Relaxed);
    let peers_result = peers
        .join()
        .map_err(|_| "the memif peers panicked".to_string())?;
    w.client
        .close(steady)
        .map_err(|e| format!("steady Close: {e}"))?;
    let ports_final = w.port_names().len();
    let start_free = w.start_free;
    let end_free = w.tear_down()?;
    peers_result?;

    Ok(report(
        Outcome {
            pairs,
            churned,
            at_once,
            sent_during,
            breakdown,
            probe,
            fds_before,
            fds_after,
            sockets_left,
            ports_left,
            owned_left,
            start_free,
            free_running,
            end_free,
            nsc_left,
            nse_left,
            host_ends_left,
            links_left,
            ports_final,
            churn_links,
        },
        &stats,
        opts,
    ))
}

/// What the churn left (owned objects, ports, fds, memif sockets): objects and ports now; fds
/// and sockets once closing settled.
fn left_behind(
    w: &Setup,
    ids: &[String],
    ports_before: usize,
    fds_before: usize,
    socket_prefix: &str,
) -> (usize, usize, usize, usize) {
    // What the churn left: objects and ports now; fds and sockets once closing settled (the
    // churn endpoint's master notices the last disconnect on its next poll, tonic closes the
    // endpoint channels asynchronously).
    let owned_left: usize = {
        let f = w.fwd.view();
        ids.iter().map(|id| f.owned_by(id).len()).sum()
    };
    let ports_after = w.port_names();
    let ports_left = ports_after.len().saturating_sub(ports_before);
    wait_until(5, || {
        fd_count() <= fds_before && sockets_named(socket_prefix) == 0
    });
    let fds_after = fd_count();
    let sockets_left = sockets_named(socket_prefix);
    (owned_left, ports_left, fds_after, sockets_left)
}
