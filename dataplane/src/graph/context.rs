//! What a node sees while it runs: buffers, the configuration snapshot, its arcs, its counters.

use super::runtime::{GraphShared, Runtime};
use crate::buffer::WorkerBuffers;
use crate::counters::bump;
use crate::frame::Frame;
use crate::spec::Next;
use crate::trace::TraceFormatter;
use crate::BufferIndex;

/// A node's view of its worker during one call.
pub struct Context<'a, S> {
    /// The worker's buffers.
    pub buffers: &'a mut WorkerBuffers,
    state: &'a S,
    pub(crate) rt: &'a mut Runtime,
    pub(crate) shared: &'a GraphShared,
    node: u32,
    arc_base: usize,
    arc_len: usize,
    error_base: u16,
    now: u64,
}

impl<'a, S> Context<'a, S> {
    pub(crate) fn new(
        buffers: &'a mut WorkerBuffers,
        state: &'a S,
        rt: &'a mut Runtime,
        shared: &'a GraphShared,
        node: u32,
        now: u64,
    ) -> Self {
        let (base, len) = rt.arc_range[node as usize];
        let error_base = rt.error_base[node as usize];
        Context {
            buffers,
            state,
            rt,
            shared,
            node,
            arc_base: base as usize,
            arc_len: len as usize,
            error_base,
            now,
        }
    }

    /// The configuration snapshot for this loop pass.
    #[inline(always)]
    pub fn state(&self) -> &'a S {
        self.state
    }

    /// The cycle counter at the start of this loop pass.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        self.now
    }

    #[inline(always)]
    fn target(&self, next: Next) -> usize {
        let i = next.0 as usize;
        debug_assert!(i < self.arc_len, "node used an undeclared next arc {i}");
        if i < self.arc_len {
            self.rt.arcs[self.arc_base + i] as usize
        } else {
            0
        }
    }

    /// Sends one packet along arc `next`.
    #[inline(always)]
    pub fn enqueue(&mut self, next: Next, bi: BufferIndex) {
        let t = self.target(next);
        self.rt.sched.push(t, bi);
    }

    /// Sends packets along arc `next`.
    #[inline]
    pub fn enqueue_slice(&mut self, next: Next, bis: &[BufferIndex]) {
        if bis.is_empty() {
            return;
        }
        let t = self.target(next);
        self.rt.sched.push_slice(t, bis);
    }

    /// Sends every packet of `frame` along arc `next` and empties it; when the next node has
    /// nothing pending the whole frame is handed over without copying.
    #[inline]
    pub fn enqueue_frame(&mut self, next: Next, frame: &mut Frame) {
        if frame.is_empty() {
            return;
        }
        let t = self.target(next);
        self.rt.sched.push_frame(t, frame);
    }

    /// Sends `bis[i]` along `nexts[i]`, runs of equal arcs in bulk.
    #[inline]
    pub fn enqueue_to_nexts(&mut self, nexts: &[Next], bis: &[BufferIndex]) {
        let n = nexts.len().min(bis.len());
        let (nexts, bis) = (&nexts[..n], &bis[..n]);
        let Some(&first) = nexts.first() else {
            return;
        };
        // The common case, every packet to one arc, checked without branches (vectorised).
        if nexts.iter().fold(0u16, |acc, x| acc | (x.0 ^ first.0)) == 0 {
            self.enqueue_slice(first, bis);
            return;
        }
        let mut i = 0;
        while i < n {
            let next = nexts[i];
            let mut j = i + 1;
            while j < n && nexts[j] == next {
                j += 1;
            }
            self.enqueue_slice(next, &bis[i..j]);
            i = j;
        }
    }

    /// The graph-wide id of this node's error `code`.
    #[inline(always)]
    pub fn error_id(&self, code: u16) -> u16 {
        self.error_base.wrapping_add(code)
    }

    /// Drops a packet for this node's error `code`: `error-drop` counts and frees it.
    #[inline(always)]
    pub fn drop_packet(&mut self, bi: BufferIndex, code: u16) {
        self.buffers.meta_mut(bi).error = self.error_id(code);
        self.enqueue(Next::DROP, bi);
    }

    /// Counts `n` occurrences of this node's error `code` without dropping anything.
    #[inline(always)]
    pub fn count_error(&mut self, code: u16, n: u64) {
        self.count_error_id_n(self.error_id(code), n);
    }

    #[inline(always)]
    pub(crate) fn count_error_id(&mut self, id: u16) {
        self.count_error_id_n(id, 1);
    }

    #[inline(always)]
    fn count_error_id_n(&mut self, id: u16, n: u64) {
        let errors = &self.shared.cells.errors;
        let cell = errors.get(id as usize).unwrap_or(&errors[0]);
        bump(cell, n);
    }

    /// For input nodes: marks the packets just produced for tracing when `trace add` asked for
    /// this node. Costs one comparison when nobody is tracing.
    #[inline(always)]
    pub fn trace_input(&mut self, packets: &[BufferIndex]) {
        if self.rt.trace.armed_node == Some(self.node) {
            self.rt
                .trace
                .mark(self.shared_trace(), self.node, self.buffers, packets);
        }
    }

    /// For input nodes: whether `trace add` asked for this node (so every packet it produces
    /// should go through the graph, to be traced).
    #[inline(always)]
    pub fn traces_input(&self) -> bool {
        self.rt.trace.armed_node == Some(self.node)
    }

    fn shared_trace(&self) -> &'a crate::trace::TraceShared {
        &self.shared.trace
    }

    /// Whether `bi` is traced (so that a node's own trace line is worth recording).
    #[inline(always)]
    pub fn is_traced(&self, bi: BufferIndex) -> bool {
        self.rt.trace.active && self.buffers.meta(bi).is_traced()
    }

    /// Adds this node's own line for a traced packet: `bytes` (up to 64) are kept raw and turned
    /// into text by `format` only when the trace is read.
    pub fn trace_add(&mut self, bi: BufferIndex, bytes: &[u8], format: TraceFormatter) {
        if self.is_traced(bi) {
            let packet = self.buffers.meta(bi).trace_index;
            self.rt
                .trace
                .custom(&self.shared.trace, self.node, packet, bytes, format);
        }
    }
}
