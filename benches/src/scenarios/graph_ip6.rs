//! `graph-ip6`: the IPv6 routing graph, ethernet-input → ip6-input → ip6-lookup → ip6-rewrite
//! → interface-output, over 1M routes shaped like a real IPv6 table (`lpm6_routes`, the ones
//! `lpm6` measures against `rte_fib6`), 78-byte frames whose destinations are drawn from the
//! routes. The reference is measured in the same run on the same pinned core: `graph-ip4`'s
//! graph over 1M IPv4 routes, so the ratio says what IPv6 costs over IPv4 here, packet for
//! packet (IPv6's lookup walks more levels; its header has no checksum to update).

use std::sync::Arc;

use dataplane::cycles;
use dataplane::memory::HugepagePolicy;
use dataplane::TxQueue;
use graph_nodes::forwarding::Path6;
use graph_nodes::{names, FibConfig, Forwarding, IfIndex, LocalState};
use serde_json::json;

use super::common::*;
use super::graphs::{ip4_run, run_measured};
use super::lpm6_routes;

const MAC_IN: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_OUT: [u8; 6] = [2, 0, 0, 0, 0, 2];
const NEXT_HOP: [u8; 6] = [2, 0, 0, 0, 0, 0xfe];

/// fd00:0:0:N::1/64 on eth N (outside the generated routes' 2000::/3).
fn port_address(n: u16) -> u128 {
    (0xfd00u128 << 112) | (u128::from(n) << 64) | 1
}

/// `graph-ip6`, then the IPv4 graph as the reference, alternating `rounds` times.
pub fn ip6(quick: bool) -> Result<String, String> {
    let core = super::pin_to_last_core()?;
    let packets: u64 = if quick { 10_000_000 } else { 50_000_000 };
    let rounds = if quick { 1 } else { 3 };
    let routes = lpm6_routes::generate(1_000_000, 0x1b6_2024);
    let dsts = lpm6_routes::addresses(&routes, 4_000_000, 0x1b6_2025);
    let mut fwd = Forwarding::new(FibConfig {
        long_prefix_groups: 4096,
        // About 128 bytes per route of this mix, twice for the commit that replaces them.
        ipv6_node_bytes: 256 << 20,
        hugepages: HugepagePolicy::Auto,
    })
    .map_err(|e| e.to_string())?;
    let eth0 = fwd
        .add_port("eth0", MAC_IN, 1500)
        .map_err(|e| e.to_string())?;
    let eth1 = fwd
        .add_port("eth1", MAC_OUT, 1500)
        .map_err(|e| e.to_string())?;
    fwd.add_address6(eth0, port_address(0), 64)
        .map_err(|e| e.to_string())?;
    fwd.add_address6(eth1, port_address(1), 64)
        .map_err(|e| e.to_string())?;
    let hops: Vec<Path6> = (0..8u8)
        .map(|k| {
            let mut mac = NEXT_HOP;
            mac[4] = k;
            let nh = port_address(1) + 0x10 + u128::from(k);
            fwd.add_neighbor6(eth1, nh, mac).map(|_| Path6 {
                next_hop: nh,
                interface: eth1,
            })
        })
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let t0 = std::time::Instant::now();
    for &(p, l, v) in &routes {
        fwd.add_route6(p, l, &[hops[v as usize % hops.len()]])
            .map_err(|e| e.to_string())?;
    }
    let local = LocalState::default();
    fwd.commit(&local).map_err(|e| e.to_string())?;
    let load_s = t0.elapsed().as_secs_f64();
    eprintln!(
        "graph-ip6: {} routes loaded and committed in {load_s:.2} s; core {core}",
        routes.len()
    );
    let state = local.current();
    let dsts = Arc::new(dsts);
    let nodes = [
        names::ETHERNET_INPUT,
        names::IP6_INPUT,
        names::IP6_LOOKUP,
        names::IP6_REWRITE,
        names::INTERFACE_OUTPUT,
    ];
    let mut samples6 = Vec::new();
    let mut samples4 = Vec::new();
    let mut last = None;
    for round in 0..rounds {
        let source = BenchSource::new6(vec![(udp6_frame(MAC_IN, 0), eth0)], dsts.clone());
        let tx: Vec<(IfIndex, Box<dyn TxQueue>)> = vec![(eth1, Box::new(NullTx))];
        let (rt, secs) = run_measured(source, tx, &state, packets)?;
        let (per_node, sum) = node_clocks(&rt, &nodes)?;
        let four = ip4_run(packets)?;
        eprintln!(
            "  round {round}: IPv6 {sum:.1} clocks/packet, IPv4 {:.1} (same core, same run)",
            four.cycles_per_packet
        );
        samples6.push(sum);
        samples4.push(four.cycles_per_packet);
        last = Some((rt, secs, per_node, four));
    }
    let (rt, secs, per_node, four) = last.ok_or("no round ran")?;
    eprintln!("{}", rt.format_runtime(cycles::tsc_hz()));
    let (six, ref4) = (median(&samples6), median(&samples4));
    eprintln!(
        "  graph-ip6 {six:.1} clocks/packet, graph-ip4 {ref4:.1} (reference, same run): ratio {:.2}",
        six / ref4
    );
    Ok(json!({
        "scenario": "graph-ip6",
        "routes": routes.len(),
        "route_mix": lpm6_routes::histogram(&routes),
        "packets": rt.worker_loop.busy_packets,
        "mpps": rt.worker_loop.busy_packets as f64 / secs / 1e6,
        "cycles_per_packet": six,
        "samples": samples6,
        "per_node": per_node,
        "busy_cycles_per_packet_with_source": rt.worker_loop.busy_cycles_per_packet(),
        "route_load_seconds": load_s,
        "tsc_hz": cycles::tsc_hz(),
        "reference": {
            "name": "Quiver's IPv4 graph (graph-ip4: 1M routes of the IPv4 depth mix, 64-byte frames), measured in the same run on the same core",
            "cycles_per_packet": ref4,
            "samples": samples4,
            "per_node": four.per_node,
        },
        "ratio": six / ref4,
        "ratio_to_ip4": six / ref4,
    })
    .to_string())
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}
