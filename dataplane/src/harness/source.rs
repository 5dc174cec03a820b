//! A packet source: an input node that makes packets from templates, flat out or at a rate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::counters::bump;
use crate::cycles;
use crate::frame::{Frame, FRAME_SIZE};
use crate::graph::Context;
use crate::node::{Next, Node, NodeSpec};

/// What a [`PacketSource`] sends.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// The node's name.
    pub name: String,
    /// The node its packets go to.
    pub next: String,
    /// Frame templates; packet with sequence number `s` is `frames[s % frames.len()]`.
    pub frames: Vec<Vec<u8>>,
    /// Where to write the packet's sequence number (little-endian `u64`), if anywhere.
    pub sequence_offset: Option<usize>,
    /// The first sequence number.
    pub first_sequence: u64,
    /// Stop after this many packets.
    pub limit: Option<u64>,
    /// Packets per second, or flat out.
    pub rate_pps: Option<u64>,
    /// Packets per call, at most [`FRAME_SIZE`].
    pub burst: usize,
    /// The `rx_interface` to stamp.
    pub rx_interface: u32,
}

impl SourceConfig {
    /// A flat-out source of `frames` called `name`, sending to `next`, 256 per call.
    pub fn new(name: &str, next: &str, frames: Vec<Vec<u8>>) -> SourceConfig {
        SourceConfig {
            name: name.into(),
            next: next.into(),
            frames,
            sequence_offset: None,
            first_sequence: 0,
            limit: None,
            rate_pps: None,
            burst: FRAME_SIZE,
            rx_interface: 0,
        }
    }
}

/// What a source has sent, readable from any thread.
#[derive(Debug, Default)]
pub struct SourceReport {
    sent: AtomicU64,
}

impl SourceReport {
    /// Packets sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

/// An input node that produces packets from templates.
pub struct PacketSource {
    cfg: SourceConfig,
    sequence: u64,
    credit: f64,
    last_tsc: u64,
    report: Arc<SourceReport>,
}

const NO_BUFFERS: u16 = 0;
const NEXT: Next = Next::declared(0);

impl PacketSource {
    /// A source per `cfg`.
    pub fn new(cfg: SourceConfig) -> PacketSource {
        assert!(
            !cfg.frames.is_empty(),
            "a packet source needs at least one frame"
        );
        PacketSource {
            sequence: cfg.first_sequence,
            cfg,
            credit: 0.0,
            last_tsc: 0,
            report: Arc::new(SourceReport::default()),
        }
    }

    /// A handle on what the source has sent.
    pub fn report(&self) -> Arc<SourceReport> {
        self.report.clone()
    }

    /// How many packets this call may send.
    fn allowance(&mut self, now: u64) -> usize {
        let mut n = self.cfg.burst.min(FRAME_SIZE);
        if let Some(limit) = self.cfg.limit {
            let left = limit.saturating_sub(self.sequence - self.cfg.first_sequence);
            n = n.min(left as usize);
        }
        if let Some(pps) = self.cfg.rate_pps {
            if self.last_tsc == 0 {
                self.last_tsc = now;
            }
            let elapsed = now.saturating_sub(self.last_tsc);
            self.last_tsc = now;
            let cap = self.cfg.burst as f64;
            self.credit =
                (self.credit + elapsed as f64 * pps as f64 / cycles::tsc_hz() as f64).min(cap);
            n = n.min(self.credit as usize);
            self.credit -= n as f64;
        }
        n
    }
}

impl<S> Node<S> for PacketSource {
    fn spec(&self) -> NodeSpec {
        NodeSpec::input(&self.cfg.name)
            .nexts(&[&self.cfg.next])
            .errors(&[("no-buffers", "packets not made: the buffer pool was empty")])
    }

    fn process(&mut self, cx: &mut Context<'_, S>, frame: &mut Frame) -> usize {
        let want = self.allowance(cx.now());
        if want == 0 {
            return 0;
        }
        let got = cx.buffers.alloc_up_to(&mut frame.spare_mut()[..want]);
        if got < want {
            cx.count_error(NO_BUFFERS, (want - got) as u64);
            self.credit += (want - got) as f64;
        }
        let data_size = cx.buffers.data_size() as usize;
        let mut made = 0;
        for i in 0..got {
            let bi = frame.spare_mut()[i];
            let seq = self.sequence;
            let template = &self.cfg.frames[(seq % self.cfg.frames.len() as u64) as usize];
            if template.len() <= data_size {
                cx.buffers.set_length(bi, template.len() as u16);
                cx.buffers.data_mut(bi).copy_from_slice(template);
            } else if cx.buffers.write_packet(bi, template).is_err() {
                cx.buffers.free_one(bi);
                cx.count_error(NO_BUFFERS, 1);
                continue;
            }
            if let Some(off) = self.cfg.sequence_offset {
                let head = cx.buffers.data_mut(bi);
                if let Some(dst) = head.get_mut(off..off + 8) {
                    dst.copy_from_slice(&seq.to_le_bytes());
                }
            }
            cx.buffers.meta_mut(bi).rx_interface = self.cfg.rx_interface;
            frame.spare_mut()[made] = bi;
            made += 1;
            self.sequence += 1;
        }
        frame.set_len(made);
        cx.trace_input(frame.as_slice());
        cx.enqueue_frame(NEXT, frame);
        bump(&self.report.sent, made as u64);
        made
    }
}
