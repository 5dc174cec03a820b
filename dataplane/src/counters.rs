//! Runtime counters per worker per node, and their snapshots and `show runtime` tables.
//!
//! Each worker owns its counters and is their only writer, so an update is a plain load and
//! store (no locked instruction); any thread may read them. "Clear" never writes a worker's
//! counters: it records a baseline that later snapshots subtract.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::spec::NodeKind;

/// Adds to a counter that only the calling thread writes.
#[inline(always)]
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// One node's counters on one worker.
#[derive(Default)]
#[repr(align(64))]
pub(crate) struct NodeCells {
    pub calls: AtomicU64,
    pub vectors: AtomicU64,
    pub packets: AtomicU64,
    pub cycles: AtomicU64,
}

/// The worker loop's own counters.
#[derive(Default)]
#[repr(align(64))]
pub(crate) struct LoopCells {
    pub busy_passes: AtomicU64,
    pub busy_packets: AtomicU64,
    pub busy_cycles: AtomicU64,
    pub idle_passes: AtomicU64,
    pub idle_cycles: AtomicU64,
}

/// All counters of one graph instance (one worker).
pub(crate) struct GraphCells {
    pub nodes: Box<[NodeCells]>,
    pub errors: Box<[AtomicU64]>,
    pub worker_loop: LoopCells,
}

impl GraphCells {
    pub fn new(nodes: usize, errors: usize) -> GraphCells {
        GraphCells {
            nodes: (0..nodes).map(|_| NodeCells::default()).collect(),
            errors: (0..errors).map(|_| AtomicU64::new(0)).collect(),
            worker_loop: LoopCells::default(),
        }
    }

    pub fn read(&self) -> RawCounts {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RawCounts {
            nodes: self
                .nodes
                .iter()
                .map(|n| [r(&n.calls), r(&n.vectors), r(&n.packets), r(&n.cycles)])
                .collect(),
            errors: self.errors.iter().map(r).collect(),
            worker_loop: [
                r(&self.worker_loop.busy_passes),
                r(&self.worker_loop.busy_packets),
                r(&self.worker_loop.busy_cycles),
                r(&self.worker_loop.idle_passes),
                r(&self.worker_loop.idle_cycles),
            ],
        }
    }
}

/// A plain copy of a graph's counters (used as a baseline for "clear").
#[derive(Clone, Default)]
pub(crate) struct RawCounts {
    pub nodes: Vec<[u64; 4]>,
    pub errors: Vec<u64>,
    pub worker_loop: [u64; 5],
}

impl RawCounts {
    pub fn minus(mut self, base: &RawCounts) -> RawCounts {
        for (n, b) in self.nodes.iter_mut().zip(&base.nodes) {
            for (x, y) in n.iter_mut().zip(b) {
                *x = x.wrapping_sub(*y);
            }
        }
        for (x, y) in self.errors.iter_mut().zip(&base.errors) {
            *x = x.wrapping_sub(*y);
        }
        for (x, y) in self.worker_loop.iter_mut().zip(&base.worker_loop) {
            *x = x.wrapping_sub(*y);
        }
        self
    }
}

/// One node's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRuntime {
    /// The node's name.
    pub name: String,
    /// Input or internal.
    pub kind: NodeKind,
    /// Times the node was called (input nodes: every poll).
    pub calls: u64,
    /// Calls that carried at least one packet.
    pub vectors: u64,
    /// Packets processed (input nodes: produced).
    pub packets: u64,
    /// Cycles spent in calls that carried packets.
    pub cycles: u64,
}

impl NodeRuntime {
    /// Cycles per packet (0 when no packets).
    pub fn clocks_per_packet(&self) -> f64 {
        ratio(self.cycles, self.packets)
    }

    /// Packets per call, as VPP's "Vectors/Call".
    pub fn packets_per_call(&self) -> f64 {
        ratio(self.packets, self.calls)
    }
}

/// One error counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorCount {
    /// The node that counts it.
    pub node: String,
    /// The error's name.
    pub name: String,
    /// What it means.
    pub description: String,
    /// How many times it happened.
    pub count: u64,
}

/// The worker loop's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopRuntime {
    /// Loop passes whose input nodes produced at least one packet.
    pub busy_passes: u64,
    /// Packets those passes moved.
    pub busy_packets: u64,
    /// Cycles those passes took.
    pub busy_cycles: u64,
    /// Loop passes that found nothing to do.
    pub idle_passes: u64,
    /// Cycles the empty passes took.
    pub idle_cycles: u64,
}

impl LoopRuntime {
    /// Busy cycles per packet moved: the whole graph's cost, the figure benchmarks quote.
    pub fn busy_cycles_per_packet(&self) -> f64 {
        ratio(self.busy_cycles, self.busy_packets)
    }

    /// Cycles per empty poll of every input node.
    pub fn cycles_per_idle_pass(&self) -> f64 {
        ratio(self.idle_cycles, self.idle_passes)
    }
}

/// Counters of one worker (or of all workers summed).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRuntime {
    /// The worker's index, or `None` for a sum over workers.
    pub worker: Option<usize>,
    /// The core it is pinned to, when pinned.
    pub core: Option<usize>,
    /// Per node, in graph order.
    pub nodes: Vec<NodeRuntime>,
    /// Per error, in graph order.
    pub errors: Vec<ErrorCount>,
    /// The loop's counters.
    pub worker_loop: LoopRuntime,
}

impl WorkerRuntime {
    /// The counters of the node called `name`.
    pub fn node(&self, name: &str) -> Option<&NodeRuntime> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The count of error `name` of node `node` (0 when there is no such error).
    pub fn error(&self, node: &str, name: &str) -> u64 {
        self.errors
            .iter()
            .find(|e| e.node == node && e.name == name)
            .map_or(0, |e| e.count)
    }

    /// The sum of every error counted by `node`.
    pub fn errors_of(&self, node: &str) -> u64 {
        self.errors
            .iter()
            .filter(|e| e.node == node)
            .map(|e| e.count)
            .sum()
    }

    /// A table like VPP's `show runtime`.
    pub fn format_runtime(&self, tsc_hz: u64) -> String {
        let mut out = String::new();
        let title = match (self.worker, self.core) {
            (Some(w), Some(c)) => format!("Thread {w} (core {c})"),
            (Some(w), None) => format!("Thread {w}"),
            (None, _) => "All threads".to_string(),
        };
        let l = &self.worker_loop;
        let _ = writeln!(
            out,
            "{title}: {} busy passes, {:.1} clocks/pkt busy, {:.0} clocks per empty poll, TSC {:.3} GHz",
            l.busy_passes,
            l.busy_cycles_per_packet(),
            l.cycles_per_idle_pass(),
            tsc_hz as f64 / 1e9
        );
        let _ = writeln!(
            out,
            "{:<24} {:>8} {:>14} {:>14} {:>16} {:>11} {:>12}",
            "Name", "State", "Calls", "Vectors", "Packets", "Clocks/pkt", "Vectors/Call"
        );
        for n in &self.nodes {
            let state = match n.kind {
                NodeKind::Input => "polling",
                NodeKind::Internal => "active",
            };
            if n.calls == 0 {
                continue;
            }
            let _ = writeln!(
                out,
                "{:<24} {:>8} {:>14} {:>14} {:>16} {:>11.2} {:>12.2}",
                n.name,
                state,
                n.calls,
                n.vectors,
                n.packets,
                n.clocks_per_packet(),
                n.packets_per_call()
            );
        }
        out
    }

    /// A table like VPP's `show errors`: non-zero counters only.
    pub fn format_errors(&self) -> String {
        let mut out = format!("{:>14}  {:<24} {:<24} {}\n", "Count", "Node", "Reason", "");
        for e in self.errors.iter().filter(|e| e.count > 0) {
            let _ = writeln!(
                out,
                "{:>14}  {:<24} {:<24} {}",
                e.count, e.node, e.name, e.description
            );
        }
        out
    }
}

/// Counters of every worker at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeSnapshot {
    /// The cycle counter's frequency.
    pub tsc_hz: u64,
    /// Per worker.
    pub workers: Vec<WorkerRuntime>,
}

impl RuntimeSnapshot {
    /// Every worker's counters added up, node by node and error by error (by name).
    pub fn summed(&self) -> WorkerRuntime {
        let mut sum = WorkerRuntime {
            worker: None,
            core: None,
            nodes: Vec::new(),
            errors: Vec::new(),
            worker_loop: LoopRuntime::default(),
        };
        for w in &self.workers {
            for n in &w.nodes {
                match sum.nodes.iter_mut().find(|s| s.name == n.name) {
                    Some(s) => {
                        s.calls += n.calls;
                        s.vectors += n.vectors;
                        s.packets += n.packets;
                        s.cycles += n.cycles;
                    }
                    None => sum.nodes.push(n.clone()),
                }
            }
            for e in &w.errors {
                match sum
                    .errors
                    .iter_mut()
                    .find(|s| s.node == e.node && s.name == e.name)
                {
                    Some(s) => s.count += e.count,
                    None => sum.errors.push(e.clone()),
                }
            }
            let (a, b) = (&mut sum.worker_loop, &w.worker_loop);
            a.busy_passes += b.busy_passes;
            a.busy_packets += b.busy_packets;
            a.busy_cycles += b.busy_cycles;
            a.idle_passes += b.idle_passes;
            a.idle_cycles += b.idle_cycles;
        }
        sum
    }

    /// `show runtime`: per worker, or summed.
    pub fn format_runtime(&self, per_worker: bool) -> String {
        if per_worker {
            self.workers
                .iter()
                .map(|w| w.format_runtime(self.tsc_hz))
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            self.summed().format_runtime(self.tsc_hz)
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}
