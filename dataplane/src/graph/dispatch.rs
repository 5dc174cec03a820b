//! Running a graph: the loop pass over its nodes (input nodes first, then pending frames
//! breadth-first), draining and shutdown. The scheduler and counters it uses are in `runtime`.

use std::sync::Arc;

use super::context::Context;
use super::runtime::{GraphHandle, GraphShared, Runtime};
use crate::buffer::WorkerBuffers;
use crate::counters::bump;
use crate::cycles;
use crate::node::{Node, NodeKind};

/// Most frames dispatched in one loop pass; what is left waits for the next pass (a guard
/// against packets circling a graph cycle forever).
const MAX_DISPATCHES_PER_PASS: usize = 4096;

/// One worker's graph instance: nodes, pending frames, counters.
pub struct Graph<S> {
    nodes: Vec<Box<dyn Node<S>>>,
    rt: Runtime,
    shared: Arc<GraphShared>,
}

impl<S: 'static> Graph<S> {
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

    /// The node called `name` as its concrete type `T`, if it is one (for worker commands that
    /// change a node between loop passes).
    pub fn node_mut<T: 'static>(&mut self, name: &str) -> Option<&mut T> {
        let i = self.node_index(name)? as usize;
        let node: &mut dyn std::any::Any = &mut *self.nodes[i];
        node.downcast_mut::<T>()
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

impl<S: 'static> Graph<S> {
    /// Names of the input nodes.
    pub fn input_node_names(&self) -> Vec<String> {
        self.rt
            .inputs
            .iter()
            .map(|&i| self.shared.names[i as usize].clone())
            .collect()
    }
}
