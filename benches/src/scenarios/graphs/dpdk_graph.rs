//! `graph-ip4`'s reference: DPDK 22.11's own graph library routing the same packets over the same
//! routes, in the same process, on the same pinned core.
//!
//! The graph is `dpdk-l3fwd-graph`'s (`ethdev_rx → pkt_cls → ip4_lookup → ip4_rewrite →
//! ethdev_tx`) with `ethdev_rx` replaced by a source node of ours (`csrc/graph_bench.c` in
//! dpdk-sys) that writes the template and the next destination into each packet as Quiver's
//! bench source does, and sets the packet type a NIC's parser would (all `pkt_cls` reads).
//! `ethdev_tx` sends to a `net_null` vdev, which frees what it is given. Cycles are the
//! per-node totals `rte_graph_walk` keeps (`RTE_LIBRTE_GRAPH_STATS`, on in Debian's build).
//!
//! One thing differs from `dpdk-l3fwd-graph`: librte_node makes its LPM table with 1024 rules
//! and 256 tbl8 groups, far too few for a million routes, and `rte_lpm_add` scans all the rules
//! of a depth on every add (minutes for a million). So the routes go into an `rte_lpm` of our
//! own, 65,536 groups, filled directly with the entries `rte_lpm_add` would write
//! ([`sys::quiver_gb_lpm_fill`], checked here against a longest-prefix reference on sampled
//! destinations), and `ip4_lookup`'s context is pointed at it. The lookups themselves are
//! librte_node's, unchanged.

use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::ptr::NonNull;
use std::sync::Arc;

use dataplane::cycles;
use dpdk_sys as sys;
use drivers::dpdk::{Eal, EalConfig, EalMemory};
use serde_json::json;

const GRAPH: &str = "quiver_ip4";
const VDEV: &str = "net_null0";
const MBUFS: u32 = 16383;
const TBL8_GROUPS: u32 = 65536;
/// Free 2 MiB hugepages below which the EAL runs on ordinary pages (two LPM tables of 64 MiB
/// tbl24 each, 64 MiB of tbl8 groups, the mbufs: ~250 MiB).
const HUGEPAGES_WANTED: u64 = 160;
/// Destinations looked up in the table before any packet, against the reference.
const CHECKED: usize = 200_000;

/// DPDK's graph, built and loaded, ready for measured rounds.
pub(super) struct DpdkGraph {
    graph: NonNull<sys::rte_graph>,
    name: CString,
    pool: NonNull<sys::rte_mempool>,
    tx_node: String,
    /// Kept alive: the source node reads it while the graph walks.
    _dsts: Arc<Vec<u32>>,
    /// Seconds to fill the LPM table.
    pub(super) load_seconds: f64,
    /// tbl8 groups the routes took.
    pub(super) tbl8_groups: u32,
    /// DPDK's version string, and how its EAL got its memory.
    pub(super) eal: String,
}

/// One measured round of [`DpdkGraph`].
pub(super) struct Round {
    /// Clocks per packet of each node (JSON object), the source's included.
    pub per_node: serde_json::Value,
    /// The sum over the nodes doing Quiver's five nodes' work (the source excluded).
    pub cycles_per_packet: f64,
    /// TSC cycles of the whole walk loop (source, nodes and the walk itself) per packet.
    pub walk_cycles_per_packet: f64,
    /// Packets the source made.
    pub packets: u64,
    /// Packets per second of wall time, millions.
    pub mpps: f64,
}

fn free_hugepages() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn cstring(s: &str) -> CString {
    CString::new(s).expect("no NUL in our names")
}

fn rte_errno_text() -> String {
    // SAFETY: reads the calling thread's rte_errno; no preconditions.
    let errno = unsafe { sys::quiver_rte_errno() };
    errno_text(errno)
}

fn errno_text(errno: i32) -> String {
    // SAFETY: rte_strerror returns a static or per-lcore string for any value.
    let s = unsafe { CStr::from_ptr(sys::rte_strerror(errno.abs())) };
    format!("{} (errno {})", s.to_string_lossy(), errno.abs())
}

/// Starts DPDK's EAL on `core` (the calling thread, already pinned there, becomes its main
/// lcore): `--no-pci`, in memory, on ordinary pages when hugepages are short.
fn start_eal(core: usize) -> Result<String, String> {
    if !nix::unistd::geteuid().is_root() {
        return Err(
            "graph-ip4 needs root: its reference is DPDK's graph library measured in \
                    the same run, and DPDK's EAL maps hugepages (run it as root, as CI does)"
                .into(),
        );
    }
    let no_huge = free_hugepages() < HUGEPAGES_WANTED;
    let mut config = EalConfig::vdevs_only();
    config.main_lcore = Some(core);
    config.file_prefix = format!("quiver-bench-graph-ip4-{}", std::process::id());
    config.log_level = "error".into();
    if no_huge {
        config.memory = EalMemory::NoHuge { megabytes: 768 };
    }
    let eal = Eal::init(&config)
        .map_err(|e| format!("graph-ip4's reference, DPDK's graph library, cannot start: {e}"))?;
    Ok(format!(
        "{}{}",
        eal.version(),
        if no_huge {
            ", --no-huge (hugepages short)"
        } else {
            ", hugepages"
        }
    ))
}

/// The next hop the longest matching route of `dst` gives, route `i` going to hop `i % hops`.
fn reference_hop(by_route: &HashMap<(u32, u8), usize>, dst: u32, hops: usize) -> Option<u32> {
    (1..=32u8).rev().find_map(|d| {
        let p = dst & (u32::MAX << (32 - d));
        by_route.get(&(p, d)).map(|&i| (i % hops) as u32)
    })
}

impl DpdkGraph {
    /// Starts DPDK on `core` and builds the graph: `routes` (route `i` to next hop `i % hops`,
    /// whose MAC is `hop_mac(i % hops)`, out of a port with `src_mac`), the source writing
    /// `frame` with each of `dsts` in turn.
    pub(super) fn start(
        core: usize,
        routes: &[(u32, u8)],
        hops: u8,
        hop_mac: impl Fn(u8) -> [u8; 6],
        src_mac: [u8; 6],
        frame: &[u8],
        dsts: Arc<Vec<u32>>,
    ) -> Result<DpdkGraph, String> {
        if frame.len() != sys::QUIVER_GB_FRAME_LEN as usize || dsts.is_empty() || hops == 0 {
            return Err("the DPDK graph's source needs a 64-byte frame and destinations".into());
        }
        let eal = start_eal(core)?;
        // SAFETY: plain query of the calling lcore's socket, EAL running.
        let socket = unsafe { sys::rte_socket_id() } as i32;

        let pool_name = cstring("quiver_gb_pool");
        // SAFETY: a valid C string; the EAL is running. Private area 64 B (librte_node keeps
        // its per-packet data in a dynamic field, l3fwd-graph gives it a cache line); data room
        // 2048 B plus the headroom, as Quiver's buffers.
        let pool = unsafe {
            sys::rte_pktmbuf_pool_create(
                pool_name.as_ptr(),
                MBUFS,
                256,
                64,
                (2048 + sys::RTE_PKTMBUF_HEADROOM) as u16,
                socket,
            )
        };
        let pool = NonNull::new(pool)
            .ok_or_else(|| format!("rte_pktmbuf_pool_create: {}", rte_errno_text()))?;

        let port = start_port(pool)?;
        configure_nodes(port, hops, &hop_mac, src_mac)?;
        let tx_node = format!("ethdev_tx-{port}");

        let name = cstring(GRAPH);
        let patterns: Vec<CString> = [
            CStr::from_bytes_with_nul(sys::QUIVER_GB_SOURCE_NODE)
                .expect("a C string")
                .to_str()
                .expect("ASCII"),
            "pkt_cls",
            "ip4_lookup",
            "ip4_rewrite",
            tx_node.as_str(),
            "pkt_drop",
        ]
        .iter()
        .map(|s| cstring(s))
        .collect();
        let mut pointers: Vec<*const c_char> = patterns.iter().map(|p| p.as_ptr()).collect();
        let mut prm = sys::rte_graph_param {
            socket_id: socket,
            nb_node_patterns: pointers.len() as u16,
            node_patterns: pointers.as_mut_ptr(),
        };
        // SAFETY: a valid name and a parameter block whose patterns outlive the call.
        let id = unsafe { sys::rte_graph_create(name.as_ptr(), &mut prm) };
        if u32::from(id) == sys::RTE_GRAPH_ID_INVALID {
            return Err(format!("rte_graph_create: {}", rte_errno_text()));
        }
        // SAFETY: a valid C string naming the graph just made.
        let graph = NonNull::new(unsafe { sys::rte_graph_lookup(name.as_ptr()) })
            .ok_or("rte_graph_lookup found no graph just created")?;

        let (load_seconds, tbl8_groups) = load_routes(&name, socket, routes, hops, &dsts)?;
        // SAFETY: pool is a live mempool, frame 64 bytes; dsts is kept in the returned value
        // (and the source stopped in Drop) so the source never reads it after it is gone.
        let rc = unsafe {
            sys::quiver_gb_source_config(
                pool.as_ptr(),
                frame.as_ptr(),
                dsts.as_ptr(),
                dsts.len() as u32,
            )
        };
        if rc != 0 {
            return Err(format!("quiver_gb_source_config: {}", errno_text(rc)));
        }
        Ok(DpdkGraph {
            graph,
            name,
            pool,
            tx_node,
            _dsts: dsts,
            load_seconds,
            tbl8_groups,
            eal,
        })
    }

    fn totals(&self, node: &str) -> Result<[u64; 3], String> {
        let n = cstring(node);
        let mut t = [0u64; 3];
        let [calls, objs, cyc] = &mut t;
        // SAFETY: two valid C strings and three writable u64s.
        let rc =
            unsafe { sys::quiver_gb_node_totals(self.name.as_ptr(), n.as_ptr(), calls, objs, cyc) };
        if rc != 0 {
            return Err(format!("no node {node} in DPDK's graph {GRAPH}"));
        }
        Ok(t)
    }

    fn walk(&mut self, times: u64) {
        for _ in 0..times {
            // SAFETY: the graph exists for the life of the process and is walked by this
            // thread only (the lcore its source's mempool cache belongs to).
            unsafe { sys::rte_graph_walk(self.graph.as_ptr()) };
        }
    }

    /// Warms up (2000 walks, as Quiver's 2000 passes), then walks until at least `packets`
    /// were made; per-node figures of the measured walks. An error if a packet was dropped or
    /// not sent, or an mbuf not returned.
    pub(super) fn measure(&mut self, packets: u64) -> Result<Round, String> {
        let source = CStr::from_bytes_with_nul(sys::QUIVER_GB_SOURCE_NODE)
            .expect("a C string")
            .to_str()
            .expect("ASCII")
            .to_string();
        let tx_node = self.tx_node.clone();
        let work = ["pkt_cls", "ip4_lookup", "ip4_rewrite", tx_node.as_str()];
        let all: Vec<&str> = std::iter::once(source.as_str())
            .chain(work)
            .chain(["pkt_drop"])
            .collect();
        self.walk(2000);
        let before = all
            .iter()
            .map(|n| self.totals(n))
            .collect::<Result<Vec<_>, _>>()?;
        let walks = packets.div_ceil(u64::from(sys::RTE_GRAPH_BURST_SIZE));
        let t = std::time::Instant::now();
        let c0 = cycles::now();
        self.walk(walks);
        let c1 = cycles::now();
        let secs = t.elapsed().as_secs_f64();
        let after = all
            .iter()
            .map(|n| self.totals(n))
            .collect::<Result<Vec<_>, _>>()?;
        let delta: Vec<[u64; 3]> = before
            .iter()
            .zip(&after)
            .map(|(b, a)| [a[0] - b[0], a[1] - b[1], a[2] - b[2]])
            .collect();
        let made = delta[0][1];
        let sent = delta[work.len()][1];
        let dropped = delta[all.len() - 1][1];
        if made == 0 || sent != made || dropped != 0 {
            return Err(format!(
                "DPDK's graph made {made} packets, sent {sent}, dropped {dropped}"
            ));
        }
        // SAFETY: a live mempool; counts its ring and every lcore cache.
        let avail = unsafe { sys::rte_mempool_avail_count(self.pool.as_ptr()) };
        if avail != MBUFS {
            return Err(format!(
                "DPDK's graph: {} mbufs not returned",
                MBUFS - avail
            ));
        }
        let mut per_node = serde_json::Map::new();
        let mut sum = 0.0;
        for (k, n) in all.iter().enumerate().take(all.len() - 1) {
            let cpp = delta[k][2] as f64 / delta[k][1].max(1) as f64;
            if k > 0 {
                sum += cpp;
            }
            per_node.insert(n.to_string(), json!(cpp));
        }
        Ok(Round {
            per_node: serde_json::Value::Object(per_node),
            cycles_per_packet: sum,
            walk_cycles_per_packet: (c1 - c0) as f64 / made as f64,
            packets: made,
            mpps: made as f64 / secs / 1e6,
        })
    }
}

impl Drop for DpdkGraph {
    fn drop(&mut self) {
        // SAFETY: no walk runs (this thread is here); the source forgets the destinations
        // before they are freed. The graph, port and pool stay until the process ends.
        unsafe { sys::quiver_gb_source_stop() };
    }
}

/// A `net_null` vdev (it frees what it transmits), one rx and one tx queue, started.
fn start_port(pool: NonNull<sys::rte_mempool>) -> Result<u16, String> {
    let eal = Eal::get().ok_or("the EAL is not running")?;
    eal.create_vdev(VDEV, "").map_err(|e| e.to_string())?;
    let vdev = cstring(VDEV);
    let mut port = 0u16;
    // SAFETY: a valid C string and a writable u16.
    let rc = unsafe { sys::rte_eth_dev_get_port_by_name(vdev.as_ptr(), &mut port) };
    if rc != 0 {
        return Err(format!("no ethdev port {VDEV}: {}", errno_text(rc)));
    }
    // SAFETY: a valid port id and a live mempool for its rx queue.
    let rc = unsafe { sys::quiver_gb_port_start(port, pool.as_ptr()) };
    if rc != 0 {
        return Err(format!("starting {VDEV}: {}", errno_text(rc)));
    }
    Ok(port)
}

/// librte_node's ethdev nodes for `port` (ip4_rewrite gets an edge to `ethdev_tx-<port>`) and
/// the rewrite of each next hop: its MAC, `src_mac`, EtherType IPv4.
fn configure_nodes(
    port: u16,
    hops: u8,
    hop_mac: &impl Fn(u8) -> [u8; 6],
    src_mac: [u8; 6],
) -> Result<(), String> {
    let mut conf = sys::rte_node_ethdev_config {
        port_id: port,
        num_rx_queues: 0,
        num_tx_queues: 1,
        mp: std::ptr::null_mut(),
        mp_count: 0,
    };
    // SAFETY: one valid configuration (no rx queues, so no mempool array), before any graph.
    let rc = unsafe { sys::rte_node_eth_config(&mut conf, 1, 1) };
    if rc != 0 {
        return Err(format!("rte_node_eth_config: {}", errno_text(rc)));
    }
    for k in 0..hops {
        let mut data = [0u8; 14];
        data[..6].copy_from_slice(&hop_mac(k));
        data[6..12].copy_from_slice(&src_mac);
        data[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        // SAFETY: 14 readable bytes (the node copies them); a configured port.
        let rc =
            unsafe { sys::rte_node_ip4_rewrite_add(u16::from(k), data.as_mut_ptr(), 14, port) };
        if rc != 0 {
            return Err(format!("rte_node_ip4_rewrite_add({k}): {}", errno_text(rc)));
        }
    }
    Ok(())
}

/// Fills an `rte_lpm` of our own with `routes` (sorted by depth, as the loader needs), points
/// graph `graph`'s ip4_lookup at it, and checks [`CHECKED`] destinations against a
/// longest-prefix reference. Seconds the fill took, and the tbl8 groups used.
fn load_routes(
    graph: &CStr,
    socket: i32,
    routes: &[(u32, u8)],
    hops: u8,
    dsts: &[u32],
) -> Result<(f64, u32), String> {
    let t = std::time::Instant::now();
    let mut order: Vec<usize> = (0..routes.len()).collect();
    order.sort_by_key(|&i| routes[i].1);
    let ips: Vec<u32> = order.iter().map(|&i| routes[i].0).collect();
    let depths: Vec<u8> = order.iter().map(|&i| routes[i].1).collect();
    // What rte_node_ip4_route_add stores: the next node (ip4_rewrite) above the next hop.
    let rewrite = sys::RTE_NODE_IP4_LOOKUP_NEXT_REWRITE << 16;
    let values: Vec<u32> = order
        .iter()
        .map(|&i| rewrite | (i % usize::from(hops)) as u32)
        .collect();
    let name = cstring("quiver_gb_routes");
    let config = sys::rte_lpm_config {
        max_rules: routes.len() as u32,
        number_tbl8s: TBL8_GROUPS,
        flags: 0,
    };
    // SAFETY: a valid name and configuration; the EAL is running.
    let lpm = NonNull::new(unsafe { sys::rte_lpm_create(name.as_ptr(), socket, &config) })
        .ok_or_else(|| format!("rte_lpm_create(1M rules): {}", rte_errno_text()))?;
    // SAFETY: an empty table made with TBL8_GROUPS groups; three arrays of routes.len().
    let groups = unsafe {
        sys::quiver_gb_lpm_fill(
            lpm.as_ptr(),
            TBL8_GROUPS,
            ips.as_ptr(),
            depths.as_ptr(),
            values.as_ptr(),
            routes.len() as u32,
        )
    };
    if groups < 0 {
        return Err(format!("filling the LPM table: {}", errno_text(groups)));
    }
    let load_seconds = t.elapsed().as_secs_f64();
    // SAFETY: a valid graph name; lpm outlives the graph (never freed).
    let rc = unsafe { sys::quiver_gb_lookup_use_lpm(graph.as_ptr(), socket, lpm.as_ptr()) };
    if rc != 0 {
        return Err(format!(
            "pointing ip4_lookup at the 1M-route table: {} (librte_node's ip4_lookup context \
             is not what lib/node/ip4_lookup.c of 22.11 has)",
            errno_text(rc)
        ));
    }
    let by_route: HashMap<(u32, u8), usize> =
        routes.iter().enumerate().map(|(i, &r)| (r, i)).collect();
    for &dst in dsts.iter().take(CHECKED) {
        let mut got = 0u32;
        // SAFETY: a live table and a writable u32.
        let rc = unsafe { sys::rte_lpm_lookup(lpm.as_ptr(), dst, &mut got) };
        let want = reference_hop(&by_route, dst, usize::from(hops)).map(|h| h | rewrite);
        if (rc == 0).then_some(got) != want {
            return Err(format!(
                "the DPDK LPM table gives {dst:#010x} {:?}, the longest matching route {want:?}",
                (rc == 0).then_some(got)
            ));
        }
    }
    Ok((load_seconds, groups as u32))
}
