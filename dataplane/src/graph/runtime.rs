//! What a graph keeps besides its nodes: the worker's private [`Runtime`] (the scheduler of
//! pending frames, trace state) and [`GraphShared`], what it shares with the control side
//! through a [`GraphHandle`] (names, counters, trace).

use crate::BufferIndex;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::counters::{ErrorCount, GraphCells, LoopRuntime, NodeRuntime, RawCounts, WorkerRuntime};
use crate::frame::Frame;
use crate::spec::{ErrorSpec, NodeKind, NodeSpec};
use crate::trace::{TraceArm, TraceLocal, TraceShared, TracedPacket};

/// Frames waiting for each node, and the order nodes become ready in.
pub(crate) struct Scheduler {
    pub(super) queues: Vec<VecDeque<Frame>>,
    pub(super) ready: VecDeque<u32>,
    pub(super) is_ready: Vec<bool>,
    pub(super) spare: Vec<Frame>,
}

impl Scheduler {
    pub(super) fn new(nodes: usize) -> Scheduler {
        Scheduler {
            queues: (0..nodes).map(|_| VecDeque::with_capacity(4)).collect(),
            ready: VecDeque::with_capacity(nodes * 2),
            is_ready: vec![false; nodes],
            spare: (0..nodes * 2).map(|_| Frame::new()).collect(),
        }
    }

    #[inline(always)]
    pub(super) fn spare_frame(&mut self) -> Frame {
        self.spare.pop().unwrap_or_default()
    }

    #[inline(always)]
    pub(super) fn mark_ready(&mut self, t: usize) {
        if !self.is_ready[t] {
            self.is_ready[t] = true;
            self.ready.push_back(t as u32);
        }
    }

    #[inline(always)]
    pub fn push(&mut self, t: usize, bi: BufferIndex) {
        let q = &mut self.queues[t];
        let pushed = q.back_mut().is_some_and(|f| f.push(bi));
        if !pushed {
            let mut f = self.spare.pop().unwrap_or_default();
            f.push(bi);
            self.queues[t].push_back(f);
        }
        self.mark_ready(t);
    }

    #[inline]
    pub fn push_slice(&mut self, t: usize, mut bis: &[BufferIndex]) {
        while !bis.is_empty() {
            let taken = match self.queues[t].back_mut() {
                Some(f) if !f.is_full() => f.extend_from_slice(bis),
                _ => {
                    let mut f = self.spare_frame();
                    let n = f.extend_from_slice(bis);
                    self.queues[t].push_back(f);
                    n
                }
            };
            bis = &bis[taken..];
        }
        self.mark_ready(t);
    }

    #[inline]
    pub fn push_frame(&mut self, t: usize, frame: &mut Frame) {
        if self.queues[t].is_empty() {
            let mut empty = self.spare_frame();
            std::mem::swap(&mut empty, frame);
            self.queues[t].push_back(empty);
            self.mark_ready(t);
        } else {
            self.push_slice(t, frame.as_slice());
            frame.clear();
        }
    }

    /// Packets waiting in every queue.
    pub(super) fn pending_packets(&self) -> usize {
        self.queues
            .iter()
            .flat_map(|q| q.iter())
            .map(Frame::len)
            .sum()
    }
}

/// A worker's private graph state other than the nodes themselves.
pub(crate) struct Runtime {
    pub sched: Scheduler,
    pub arcs: Vec<u32>,
    pub arc_range: Vec<(u32, u16)>,
    pub error_base: Vec<u16>,
    pub inputs: Vec<u32>,
    pub trace: TraceLocal,
}

impl Runtime {
    pub fn new(
        nodes: usize,
        arcs: Vec<u32>,
        arc_range: Vec<(u32, u16)>,
        error_base: Vec<u16>,
        inputs: Vec<u32>,
    ) -> Runtime {
        Runtime {
            sched: Scheduler::new(nodes),
            arcs,
            arc_range,
            error_base,
            inputs,
            trace: TraceLocal::new(),
        }
    }
}

/// What a graph shares with the control side: names, counters, trace.
pub(crate) struct GraphShared {
    pub(super) names: Vec<String>,
    pub(super) kinds: Vec<NodeKind>,
    pub(super) error_nodes: Vec<u32>,
    pub(super) error_specs: Vec<ErrorSpec>,
    pub(super) error_full_names: Vec<String>,
    pub cells: GraphCells,
    pub trace: TraceShared,
    pub(super) baseline: Mutex<Option<RawCounts>>,
    pub(super) placement: OnceLock<(usize, Option<usize>)>,
}

impl GraphShared {
    pub fn new(specs: &[NodeSpec], error_nodes: Vec<u32>, error_specs: Vec<ErrorSpec>) -> Self {
        let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        let error_full_names = error_nodes
            .iter()
            .zip(&error_specs)
            .map(|(&n, e)| format!("{}.{}", names[n as usize], e.name))
            .collect();
        GraphShared {
            kinds: specs.iter().map(|s| s.kind).collect(),
            cells: GraphCells::new(specs.len(), error_specs.len()),
            names,
            error_nodes,
            error_specs,
            error_full_names,
            trace: TraceShared::default(),
            baseline: Mutex::new(None),
            placement: OnceLock::new(),
        }
    }

    pub(super) fn baseline(&self) -> MutexGuard<'_, Option<RawCounts>> {
        self.baseline.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A cheap, thread-safe handle on a graph's counters and trace, for the control side.
#[derive(Clone)]
pub struct GraphHandle(pub(super) Arc<GraphShared>);

impl GraphHandle {
    /// The graph's counters since the last [`GraphHandle::clear_counters`].
    pub fn runtime(&self) -> WorkerRuntime {
        let g = &self.0;
        let mut raw = g.cells.read();
        if let Some(base) = g.baseline().as_ref() {
            raw = raw.minus(base);
        }
        let (worker, core) = match g.placement.get() {
            Some(&(w, c)) => (Some(w), c),
            None => (None, None),
        };
        WorkerRuntime {
            worker,
            core,
            nodes: g
                .names
                .iter()
                .zip(&g.kinds)
                .zip(&raw.nodes)
                .map(|((name, &kind), c)| NodeRuntime {
                    name: name.clone(),
                    kind,
                    calls: c[0],
                    vectors: c[1],
                    packets: c[2],
                    cycles: c[3],
                })
                .collect(),
            errors: g
                .error_nodes
                .iter()
                .zip(&g.error_specs)
                .zip(&raw.errors)
                .map(|((&n, e), &count)| ErrorCount {
                    node: g.names[n as usize].clone(),
                    name: e.name.clone(),
                    description: e.description.clone(),
                    count,
                })
                .collect(),
            worker_loop: LoopRuntime {
                busy_passes: raw.worker_loop[0],
                busy_packets: raw.worker_loop[1],
                busy_cycles: raw.worker_loop[2],
                idle_passes: raw.worker_loop[3],
                idle_cycles: raw.worker_loop[4],
            },
        }
    }

    /// Makes later [`GraphHandle::runtime`] readings start from zero.
    pub fn clear_counters(&self) {
        let now = self.0.cells.read();
        *self.0.baseline() = Some(now);
    }

    /// Arms (or with `None` disarms) tracing; see [`TraceArm`].
    pub fn trace_arm(&self, arm: Option<Arc<TraceArm>>) {
        self.0.trace.arm(arm);
    }

    /// The traced packets so far, formatted.
    pub fn trace_packets(&self) -> Vec<TracedPacket> {
        let worker = self.0.placement.get().map(|p| p.0);
        self.0
            .trace
            .format(worker, &self.0.names, &self.0.error_full_names)
    }

    /// Forgets every trace record and disarms.
    pub fn trace_clear(&self) {
        self.0.trace.clear();
    }

    /// Node names in graph order.
    pub fn node_names(&self) -> &[String] {
        &self.0.names
    }

    pub(crate) fn set_placement(&self, worker: usize, core: Option<usize>) {
        let _ = self.0.placement.set((worker, core));
    }
}
