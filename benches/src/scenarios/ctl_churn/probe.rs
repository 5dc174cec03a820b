//! `ctl-churn`'s probes: the pieces of a Request timed alone.

use std::time::{Duration, Instant};

use nsm_forwarder::testing::BlockingClient;
use quiver::config::{
    MemifMode, MemifRole as QuiverMemifRole, MemifSection, PortSection, TapSection,
};
use quiver::control::owner::{Change, Control};
use serde_json::json;

use super::mix::KernelEnds;
use super::nsm::request;
use super::timed::summary;

/// Where the time goes, probed while the traffic still flows: a gRPC round trip that touches
/// nothing, a worker command round trip, a grace period, memif master ports (and with KERNEL
/// pairs TAP ports in a namespace) added and removed straight on the forwarder.
pub(super) fn probe(
    client: &mut BlockingClient,
    fwd: &Control,
    netns: &str,
    pid: u32,
    ends: Option<&KernelEnds>,
    pairs: usize,
    kernel_pairs: usize,
) -> Result<serde_json::Value, String> {
    // Where the time goes, probed while the traffic still flows: a gRPC round trip that
    // touches nothing (a Request with an empty id is refused at once), a worker command round
    // trip (an empty command), and a grace period (`synchronize`).
    let probes = (pairs / 2).max(50);
    let (mut grpc, mut command, mut sync) = round_trips(client, fwd, netns, probes)?;
    // A memif master port added and removed straight on the forwarder (no gRPC, no NSM):
    // its socket in Quiver's own namespace, then made inside a namespace (`NetNs::run`).
    let (mut add_plain, mut add_netns, mut remove) = memif_ports(fwd, netns, pid, probes)?;
    // With KERNEL pairs: a TAP port (what the TAP backend makes for each side) added with its
    // device made inside the endpoint's namespace, and removed, straight on the forwarder.
    let tap_probes = if ends.is_some() {
        (kernel_pairs / 2).max(20)
    } else {
        0
    };
    let (mut add_tap, mut remove_tap) = tap_ports(fwd, ends, tap_probes)?;
    for v in [
        &mut grpc,
        &mut command,
        &mut sync,
        &mut add_plain,
        &mut add_netns,
        &mut remove,
        &mut add_tap,
        &mut remove_tap,
    ] {
        v.sort();
    }
    let mut probe = json!({
        "grpc_refused_request": summary(&grpc),
        "worker_command": summary(&command),
        "synchronize": summary(&sync),
        "add_memif_master_port": summary(&add_plain),
        "add_memif_master_port_in_netns": summary(&add_netns),
        "remove_memif_port": summary(&remove),
    });
    if tap_probes > 0 {
        probe["add_tap_port_in_netns"] = summary(&add_tap);
        probe["remove_tap_port"] = summary(&remove_tap);
    }
    Ok(probe)
}

/// Times of `probes` refused Requests, empty worker commands and grace periods.
fn round_trips(
    client: &mut BlockingClient,
    fwd: &Control,
    netns: &str,
    probes: usize,
) -> Result<ThreeTimes, String> {
    let mut grpc = Vec::with_capacity(probes);
    let mut command = Vec::with_capacity(probes);
    let mut sync = Vec::with_capacity(probes);
    for _ in 0..probes {
        let t0 = Instant::now();
        let refused = client.request(request("", "churn-nse", netns));
        grpc.push(t0.elapsed());
        if refused.is_ok() {
            return Err("a Request with an empty id was accepted".into());
        }
        // Timed on the owner's thread, where commits run.
        let (command_time, sync_time) = fwd
            .inspect(|f| {
                let t0 = Instant::now();
                let done = f.dataplane().command(|_| Box::new(|_| Ok(())));
                let command = t0.elapsed();
                let t0 = Instant::now();
                f.dataplane().synchronize();
                done.map(|()| (command, t0.elapsed()))
                    .map_err(|e| format!("empty worker command: {e:?}"))
            })
            .map_err(|e| e.to_string())??;
        command.push(command_time);
        sync.push(sync_time);
    }
    Ok((grpc, command, sync))
}

/// Times of `probes` memif master ports added (in Quiver's namespace, then in `netns`) and
/// removed.
fn memif_ports(fwd: &Control, netns: &str, pid: u32, probes: usize) -> Result<ThreeTimes, String> {
    let mut add_plain = Vec::with_capacity(probes);
    let mut add_netns = Vec::with_capacity(probes);
    let mut remove = Vec::with_capacity(probes);
    for i in 0..probes {
        for (ns, times) in [(None, &mut add_plain), (Some(&netns), &mut add_netns)] {
            let section = PortSection::Memif(MemifSection {
                name: format!("probe-{i}"),
                mac: None,
                mtu: 1500,
                role: QuiverMemifRole::Master,
                socket: format!("@quiver-bench-probe-{pid}-{i}"),
                id: 0,
                secret: None,
                mode: MemifMode::Ethernet,
                ring_size: 1024,
                buffer_size: 2048,
                queues: 1,
                netns: ns.map(|u| std::path::PathBuf::from(u.trim_start_matches("file://"))),
            });
            let t0 = Instant::now();
            fwd.apply(Change::AddPort {
                port: section,
                owner: Some("probe".into()),
            })
            .map_err(|e| format!("probe port: {e}"))?;
            times.push(t0.elapsed());
            let t0 = Instant::now();
            fwd.apply(Change::RemoveInterface {
                name: format!("probe-{i}"),
            })
            .map_err(|e| format!("probe port: {e}"))?;
            remove.push(t0.elapsed());
        }
    }
    Ok((add_plain, add_netns, remove))
}

/// Times of `tap_probes` TAP ports added with their device in the endpoint's namespace, and
/// removed.
fn tap_ports(
    fwd: &Control,
    ends: Option<&KernelEnds>,
    tap_probes: usize,
) -> Result<(Vec<Duration>, Vec<Duration>), String> {
    let mut add_tap = Vec::with_capacity(tap_probes);
    let mut remove_tap = Vec::with_capacity(tap_probes);
    for (i, e) in (0..tap_probes).filter_map(|i| Some((i, ends.as_ref()?))) {
        let section = PortSection::Tap(TapSection {
            name: format!("probe-tap-{i}"),
            mac: None,
            mtu: 1500,
            device: Some(format!("probe{i}")),
            netns: Some(e.nse.path().into()),
        });
        let t0 = Instant::now();
        fwd.apply(Change::AddPort {
            port: section,
            owner: Some("probe".into()),
        })
        .map_err(|e| format!("probe TAP port: {e}"))?;
        add_tap.push(t0.elapsed());
        let t0 = Instant::now();
        fwd.apply(Change::RemoveInterface {
            name: format!("probe-tap-{i}"),
        })
        .map_err(|e| format!("probe TAP port: {e}"))?;
        remove_tap.push(t0.elapsed());
    }
    Ok((add_tap, remove_tap))
}

/// Three series of times.
type ThreeTimes = (Vec<Duration>, Vec<Duration>, Vec<Duration>);
