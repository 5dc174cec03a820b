//! Test frames (numbered, patterned, of every size) and a dataplane whose workers poll DPDK
//! ports through the graph's forwarding nodes, with what its runtime counted.

use std::sync::{Arc, Mutex};

use dataplane::buffer::{BufferPool, HugepagePolicy};
use dataplane::{Dataplane, GraphBuilder, IdlePolicy, PortInput, RuntimeSnapshot, WorkerConfig};
use drivers::Port;
use graph_nodes::nodes::XconnectStats;
use graph_nodes::{add_forwarding_nodes, names, FibConfig, Forwarding, ForwardingState, IfIndex};

pub(crate) const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
pub(crate) const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

/// The CPU the worker runs on: the last one this process may use.
fn worker_core() -> usize {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    (0..nix::sched::CpuSet::count())
        .rev()
        .find(|&c| set.is_set(c).unwrap_or(false))
        .unwrap()
}

/// [`frame`]s from `src` to `dst` of the lengths `sizes`, numbered from `first`.
pub(crate) fn frames(dst: [u8; 6], src: [u8; 6], first: u32, sizes: &[usize]) -> Vec<Vec<u8>> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &l)| frame(dst, src, first + i as u32, l))
        .collect()
}

/// A frame from `src` to `dst` (EtherType 0x88b5, local experimental) carrying `seq` and a
/// pattern derived from it.
pub(crate) fn frame(dst: [u8; 6], src: [u8; 6], seq: u32, len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seq * 7) as u8)
        .collect();
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f
}

/// Starts one worker whose graph polls every port and forwards with `fwd`'s configuration;
/// returns it with the worker's cross-connect counters (readable after the worker stops).
pub(crate) fn start(
    pool: &Arc<BufferPool>,
    fwd: &mut Forwarding,
    ports: Vec<(Arc<dyn Port>, IfIndex)>,
) -> (Dataplane<ForwardingState>, Arc<XconnectStats>) {
    let (dp, mut xc) = start_on(vec![worker_core()], pool, fwd, ports);
    (dp, xc.remove(0))
}

/// As [`start`], with one worker per entry of `cores`, each polling its own queue of every port;
/// the cross-connect counters are in worker order.
pub(crate) fn start_on(
    cores: Vec<usize>,
    pool: &Arc<BufferPool>,
    fwd: &mut Forwarding,
    ports: Vec<(Arc<dyn Port>, IfIndex)>,
) -> (Dataplane<ForwardingState>, Vec<Arc<XconnectStats>>) {
    let workers = WorkerConfig {
        cores,
        idle: IdlePolicy::ADAPTIVE,
    };
    // Each worker's cross-connect counters, by worker index.
    type Slot = Mutex<Vec<(usize, Arc<XconnectStats>)>>;
    let slot: Arc<Slot> = Arc::default();
    let xc = slot.clone();
    let dp = Dataplane::start(&workers, pool.clone(), fwd.snapshot(), move |init| {
        let mut b = GraphBuilder::new();
        let mut tx = Vec::new();
        for (port, index) in &ports {
            let qp = port.queue_pair(init.index).map_err(|e| e.to_string())?;
            b.add(PortInput::new(
                &format!("{}-input", port.name()),
                names::ETHERNET_INPUT,
                index.get(),
                qp.rx,
            ));
            tx.push((*index, qp.tx));
        }
        let handles = add_forwarding_nodes(&mut b, tx);
        xc.lock().unwrap().push((init.index, handles.xconnect));
        b.build().map_err(|e| e.to_string())
    })
    .unwrap();
    fwd.commit(&dp).unwrap();
    let mut xc = std::mem::take(&mut *slot.lock().unwrap());
    xc.sort_by_key(|x| x.0);
    (dp, xc.into_iter().map(|x| x.1).collect())
}

pub(crate) fn forwarding() -> Forwarding {
    Forwarding::new(FibConfig {
        long_prefix_groups: 64,
        hugepages: HugepagePolicy::Never,
        ..FibConfig::default()
    })
    .unwrap()
}

pub(crate) fn drops(rt: &RuntimeSnapshot) -> (u64, String) {
    let s = rt.summed();
    (s.errors.iter().map(|e| e.count).sum(), s.format_errors())
}

pub(crate) fn packets_of(rt: &RuntimeSnapshot, node: &str) -> u64 {
    rt.summed().node(node).map_or(0, |n| n.packets)
}

/// Frames of every size, some longer than one buffer (chained).
pub(crate) fn sizes(n: usize) -> Vec<usize> {
    (0..n)
        .map(|i| match i % 50 {
            7 => 3000,
            23 => 4500,
            _ => 60 + (i * 37) % 1455,
        })
        .collect()
}
