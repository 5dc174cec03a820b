//! A packet sink: counts packets, checks sequence numbers and contents, frees the buffers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::read_sequence;
use crate::counters::bump;
use crate::frame::Frame;
use crate::graph::Context;
use crate::node::{Node, NodeSpec};

/// A content check: given the sequence number and the packet's bytes, is it what was sent?
pub type ContentCheck = Box<dyn Fn(u64, &[u8]) -> bool + Send>;

/// What a sink has seen, readable from any thread (exact once traffic has stopped).
#[derive(Debug)]
pub struct SinkReport {
    packets: AtomicU64,
    bytes: AtomicU64,
    duplicates: AtomicU64,
    out_of_range: AtomicU64,
    reordered: AtomicU64,
    corrupt: AtomicU64,
    first_sequence: u64,
    seen: Box<[AtomicU64]>,
}

impl SinkReport {
    /// Packets received.
    pub fn packets(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }
    /// Bytes received (whole packets, chains included).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
    /// Packets whose sequence number had been seen before.
    pub fn duplicates(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }
    /// Packets with no sequence number or one outside the expected range.
    pub fn out_of_range(&self) -> u64 {
        self.out_of_range.load(Ordering::Relaxed)
    }
    /// Packets with a sequence number below the highest seen before them.
    pub fn reordered(&self) -> u64 {
        self.reordered.load(Ordering::Relaxed)
    }
    /// Packets that failed the content check.
    pub fn corrupt(&self) -> u64 {
        self.corrupt.load(Ordering::Relaxed)
    }
    /// Distinct sequence numbers seen.
    pub fn distinct(&self) -> u64 {
        self.seen
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as u64)
            .sum()
    }
    /// Sequence numbers in `[first, first + count)` never seen.
    pub fn missing(&self, count: u64) -> u64 {
        (0..count.min(self.seen.len() as u64 * 64))
            .filter(|&i| {
                self.seen[(i / 64) as usize].load(Ordering::Relaxed) & (1 << (i % 64)) == 0
            })
            .count() as u64
            + count.saturating_sub(self.seen.len() as u64 * 64)
    }
    /// The first sequence number tracked.
    pub fn first_sequence(&self) -> u64 {
        self.first_sequence
    }
}

/// A node that consumes packets.
pub struct PacketSink {
    name: String,
    sequence_offset: Option<usize>,
    highest: Option<u64>,
    check: Option<ContentCheck>,
    scratch: Vec<u8>,
    report: Arc<SinkReport>,
}

impl PacketSink {
    /// A sink that counts.
    pub fn new(name: &str) -> PacketSink {
        PacketSink {
            name: name.into(),
            sequence_offset: None,
            highest: None,
            check: None,
            scratch: Vec::new(),
            report: Arc::new(SinkReport {
                packets: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
                duplicates: AtomicU64::new(0),
                out_of_range: AtomicU64::new(0),
                reordered: AtomicU64::new(0),
                corrupt: AtomicU64::new(0),
                first_sequence: 0,
                seen: Box::new([]),
            }),
        }
    }

    /// Also tracks sequence numbers at `offset`, expecting `[first, first + count)`: duplicates,
    /// reordering and (after the fact) loss.
    pub fn with_sequence(mut self, offset: usize, first: u64, count: u64) -> PacketSink {
        self.sequence_offset = Some(offset);
        let report = Arc::get_mut(&mut self.report).expect("report not shared yet");
        report.first_sequence = first;
        report.seen = (0..count.div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
        self
    }

    /// Also checks every packet's bytes (needs [`PacketSink::with_sequence`]).
    pub fn with_check(mut self, check: ContentCheck) -> PacketSink {
        self.check = Some(check);
        self
    }

    /// A handle on what the sink has seen.
    pub fn report(&self) -> Arc<SinkReport> {
        self.report.clone()
    }

    fn track(&mut self, seq: Option<u64>, bytes: &[u8]) {
        let r = &*self.report;
        let Some(seq) = seq else {
            bump(&r.out_of_range, 1);
            return;
        };
        let i = seq.wrapping_sub(r.first_sequence);
        match r.seen.get((i / 64) as usize) {
            Some(word) => {
                let bit = 1u64 << (i % 64);
                let w = word.load(Ordering::Relaxed);
                if w & bit != 0 {
                    bump(&r.duplicates, 1);
                } else {
                    word.store(w | bit, Ordering::Relaxed);
                }
            }
            None => bump(&r.out_of_range, 1),
        }
        if self.highest.is_some_and(|h| seq < h) {
            bump(&r.reordered, 1);
        } else {
            self.highest = Some(seq);
        }
        if let Some(check) = &self.check {
            if !check(seq, bytes) {
                bump(&r.corrupt, 1);
            }
        }
    }
}

impl<S> Node<S> for PacketSink {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(&self.name)
    }

    fn process(&mut self, cx: &mut Context<'_, S>, frame: &mut Frame) -> usize {
        let mut bytes = 0u64;
        for &bi in frame.as_slice() {
            bytes += cx.buffers.meta(bi).total_length() as u64;
            if let Some(off) = self.sequence_offset {
                let mut scratch = std::mem::take(&mut self.scratch);
                scratch.clear();
                let seq = if cx.buffers.meta(bi).next().is_some() || self.check.is_some() {
                    cx.buffers.copy_packet(bi, &mut scratch);
                    read_sequence(&scratch, off)
                } else {
                    read_sequence(cx.buffers.data(bi), off)
                };
                self.track(seq, &scratch);
                self.scratch = scratch;
            }
        }
        bump(&self.report.packets, frame.len() as u64);
        bump(&self.report.bytes, bytes);
        cx.buffers.free(frame.as_slice());
        frame.len()
    }
}
