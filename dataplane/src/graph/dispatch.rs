//! Running a graph: the scheduler of pending frames and the loop pass.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::context::Context;
use crate::buffer::WorkerBuffers;
use crate::counters::{
    bump, ErrorCount, GraphCells, LoopRuntime, NodeRuntime, RawCounts, WorkerRuntime,
};
use crate::cycles;
use crate::frame::Frame;
use crate::node::{ErrorSpec, Node, NodeKind, NodeSpec};
use crate::trace::{TraceArm, TraceLocal, TraceShared, TracedPacket};

/// Most frames dispatched in one loop pass; what is left waits for the next pass (a guard
/// against packets circling a graph cycle forever).
const MAX_DISPATCHES_PER_PASS: usize = 4096;

/// Frames waiting for each node, and the order nodes become ready in.
pub(crate) struct Scheduler {
    queues: Vec<VecDeque<Frame>>,
    ready: VecDeque<u32>,
    is_ready: Vec<bool>,
    spare: Vec<Frame>,
}

impl Scheduler {
    fn new(nodes: usize) -> Scheduler {
        Scheduler {
            queues: (0..nodes).map(|_| VecDeque::with_capacity(4)).collect(),
            ready: VecDeque::with_capacity(nodes * 2),
            is_ready: vec![false; nodes],
            spare: (0..nodes * 2).map(|_| Frame::new()).collect(),
        }
    }

    #[inline(always)]
    fn spare_frame(&mut self) -> Frame {
        self.spare.pop().unwrap_or_default()
    }

    #[inline(always)]
    fn mark_ready(&mut self, t: usize) {
        if !self.is_ready[t] {
            self.is_ready[t] = true;
            self.ready.push_back(t as u32);
        }
    }

    #[inline(always)]
    pub fn push(&mut self, t: usize, bi: u32) {
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
    pub fn push_slice(&mut self, t: usize, mut bis: &[u32]) {
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
    fn pending_packets(&self) -> usize {
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
    names: Vec<String>,
    kinds: Vec<NodeKind>,
    error_nodes: Vec<u32>,
    error_specs: Vec<ErrorSpec>,
    error_full_names: Vec<String>,
    pub cells: GraphCells,
    pub trace: TraceShared,
    baseline: Mutex<Option<RawCounts>>,
    placement: OnceLock<(usize, Option<usize>)>,
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

    fn baseline(&self) -> MutexGuard<'_, Option<RawCounts>> {
        self.baseline.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A cheap, thread-safe handle on a graph's counters and trace, for the control side.
#[derive(Clone)]
pub struct GraphHandle(Arc<GraphShared>);

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

/// One worker's graph instance: nodes, pending frames, counters.
pub struct Graph<S> {
    nodes: Vec<Box<dyn Node<S>>>,
    rt: Runtime,
    shared: Arc<GraphShared>,
}

impl<S> Graph<S> {
    pub(crate) fn from_parts(
        nodes: Vec<Box<dyn Node<S>>>,
        rt: Runtime,
        shared: GraphShared,
    ) -> Self {
        Graph {
            nodes,
            rt,
            shared: Arc::new(shared),
        }
    }

    /// A handle for reading counters and trace from other threads.
    pub fn handle(&self) -> GraphHandle {
        GraphHandle(self.shared.clone())
    }

    /// The index of the node called `name`.
    pub fn node_index(&self, name: &str) -> Option<u32> {
        self.shared
            .names
            .iter()
            .position(|n| n == name)
            .map(|i| i as u32)
    }

    /// The node called `name` as its concrete type `T`, if it is one and offers itself through
    /// [`Node::as_any_mut`] (for worker commands that change a node between loop passes).
    pub fn node_mut<T: 'static>(&mut self, name: &str) -> Option<&mut T> {
        let i = self.node_index(name)? as usize;
        self.nodes[i].as_any_mut()?.downcast_mut::<T>()
    }

    /// Packets sitting in pending frames (nonzero only between a capped pass and the next).
    pub fn pending_packets(&self) -> usize {
        self.rt.sched.pending_packets()
    }

    /// One loop pass: polls every input node once, then runs internal nodes breadth-first until
    /// no frame is pending. Returns the packets the input nodes produced.
    pub fn run_pass(&mut self, buffers: &mut WorkerBuffers, state: &S) -> usize {
        let shared = &*self.shared;
        let start = cycles::now();
        {
            let names = &shared.names;
            let kinds = &shared.kinds;
            self.rt.trace.poll(&shared.trace, |name| {
                names
                    .iter()
                    .zip(kinds)
                    .position(|(n, &k)| n == name && k == NodeKind::Input)
                    .map(|i| i as u32)
            });
        }
        let mut produced = 0;
        let mut t = start;
        for k in 0..self.rt.inputs.len() {
            let n = self.rt.inputs[k] as usize;
            let mut frame = self.rt.sched.spare_frame();
            let mut cx = Context::new(buffers, state, &mut self.rt, shared, n as u32, start);
            let made = self.nodes[n].process(&mut cx, &mut frame);
            frame.clear();
            self.rt.sched.spare.push(frame);
            let t2 = cycles::now();
            let c = &shared.cells.nodes[n];
            bump(&c.calls, 1);
            if made > 0 {
                bump(&c.vectors, 1);
                bump(&c.packets, made as u64);
                bump(&c.cycles, t2 - t);
            }
            produced += made;
            t = t2;
        }

        t = self.dispatch_pending(buffers, state, start, t);

        let l = &self.shared.cells.worker_loop;
        if produced > 0 {
            bump(&l.busy_passes, 1);
            bump(&l.busy_packets, produced as u64);
            bump(&l.busy_cycles, t - start);
        } else {
            bump(&l.idle_passes, 1);
            bump(&l.idle_cycles, t - start);
        }
        produced
    }

    /// Runs internal nodes breadth-first while frames are pending (up to the per-pass cap);
    /// returns the cycle counter after the last one.
    fn dispatch_pending(
        &mut self,
        buffers: &mut WorkerBuffers,
        state: &S,
        start: u64,
        mut t: u64,
    ) -> u64 {
        let shared = &*self.shared;
        let mut dispatches = 0;
        while dispatches < MAX_DISPATCHES_PER_PASS {
            let Some(n) = self.rt.sched.ready.pop_front() else {
                break;
            };
            let n = n as usize;
            self.rt.sched.is_ready[n] = false;
            let queued = self.rt.sched.queues[n].len();
            for _ in 0..queued {
                let Some(mut frame) = self.rt.sched.queues[n].pop_front() else {
                    break;
                };
                let packets = frame.len();
                if self.rt.trace.active {
                    for &bi in frame.as_slice() {
                        if buffers.meta(bi).is_traced() {
                            self.rt.trace.visit(&shared.trace, n as u32, buffers, bi);
                        }
                    }
                }
                let mut cx = Context::new(buffers, state, &mut self.rt, shared, n as u32, start);
                self.nodes[n].process(&mut cx, &mut frame);
                frame.clear();
                self.rt.sched.spare.push(frame);
                let t2 = cycles::now();
                let c = &shared.cells.nodes[n];
                bump(&c.calls, 1);
                bump(&c.vectors, 1);
                bump(&c.packets, packets as u64);
                bump(&c.cycles, t2 - t);
                t = t2;
                dispatches += 1;
            }
        }

        t
    }

    /// Runs internal nodes until nothing is pending (at most `max_rounds` capped rounds),
    /// without polling input nodes. Returns whether everything drained.
    pub fn drain(&mut self, buffers: &mut WorkerBuffers, state: &S, max_rounds: usize) -> bool {
        for _ in 0..max_rounds {
            if self.rt.sched.ready.is_empty() {
                return true;
            }
            let now = cycles::now();
            self.dispatch_pending(buffers, state, now, now);
        }
        self.rt.sched.ready.is_empty()
    }

    /// Stops the graph: drains what is pending, frees whatever is still queued, and asks every
    /// node to give back the buffers it holds. Afterwards the graph owns no buffer.
    pub fn shutdown(&mut self, buffers: &mut WorkerBuffers, state: &S) {
        self.drain(buffers, state, 64);
        let sched = &mut self.rt.sched;
        for q in &mut sched.queues {
            while let Some(mut f) = q.pop_front() {
                buffers.free(f.as_slice());
                f.clear();
                sched.spare.push(f);
            }
        }
        sched.ready.clear();
        sched.is_ready.iter_mut().for_each(|r| *r = false);
        for node in &mut self.nodes {
            node.release(buffers);
        }
    }
}

impl<S> Graph<S> {
    /// Names of the input nodes.
    pub fn input_node_names(&self) -> Vec<String> {
        self.rt
            .inputs
            .iter()
            .map(|&i| self.shared.names[i as usize].clone())
            .collect()
    }
}
