//! Packet trace: `trace add <input-node> N` marks the next N packets that input node produces;
//! every node they pass records a line. Records hold raw bytes and a formatting function, and are
//! turned into text only when someone reads them.

use crate::BufferIndex;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::buffer::BufferMeta;

/// Most records a graph keeps; later ones are counted but not stored.
pub const MAX_RECORDS: usize = 64 * 1024;

/// Bytes of packet data a node-visit record keeps.
pub const CAPTURE_BYTES: usize = 48;

/// A request to trace: which input node, and how many packets (shared by every worker, so `N`
/// is the total).
#[derive(Debug)]
pub struct TraceArm {
    node: String,
    budget: AtomicU32,
}

impl TraceArm {
    /// Trace the next `count` packets produced by the input node `node`.
    pub fn new(node: &str, count: u32) -> Arc<TraceArm> {
        Arc::new(TraceArm {
            node: node.to_string(),
            budget: AtomicU32::new(count),
        })
    }

    /// Takes up to `want` packets from the budget; returns how many may be traced.
    fn take(&self, want: u32) -> u32 {
        let mut cur = self.budget.load(Ordering::Relaxed);
        loop {
            let n = cur.min(want);
            if n == 0 {
                return 0;
            }
            match self.budget.compare_exchange_weak(
                cur,
                cur - n,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return n,
                Err(now) => cur = now,
            }
        }
    }
}

/// A node's own formatter for the bytes it recorded.
pub type TraceFormatter = fn(&[u8]) -> String;

#[derive(Clone)]
enum Payload {
    /// The packet as it entered a node.
    Visit {
        meta: BufferMeta,
        len: u8,
        head: [u8; CAPTURE_BYTES],
    },
    /// A node's decoded line.
    Custom {
        format: TraceFormatter,
        len: u8,
        data: [u8; 64],
    },
}

#[derive(Clone)]
struct Record {
    packet: u32,
    node: u32,
    tsc: u64,
    payload: Payload,
}

/// The trace state a graph shares with the control side.
#[derive(Default)]
pub(crate) struct TraceShared {
    generation: AtomicU64,
    arm: Mutex<Option<Arc<TraceArm>>>,
    records: Mutex<Vec<Record>>,
    dropped_records: AtomicU64,
}

/// The worker's view of the trace state, checked once per loop pass.
pub(crate) struct TraceLocal {
    seen_generation: u64,
    arm: Option<Arc<TraceArm>>,
    /// The input node being traced, if the arm names one of this graph's input nodes.
    pub armed_node: Option<u32>,
    /// Whether any packet has been marked since the arm: node visits are recorded only then.
    pub active: bool,
    next_packet: u32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl TraceShared {
    pub fn arm(&self, arm: Option<Arc<TraceArm>>) {
        *lock(&self.arm) = arm;
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub fn clear(&self) {
        lock(&self.records).clear();
        self.dropped_records.store(0, Ordering::Relaxed);
        self.arm(None);
    }

    fn push(&self, r: Record) {
        let mut recs = lock(&self.records);
        if recs.len() < MAX_RECORDS {
            recs.push(r);
        } else {
            self.dropped_records.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Formats every record, packet by packet in the order packets were first seen.
    pub fn format(
        &self,
        worker: Option<usize>,
        node_names: &[String],
        error_names: &[String],
    ) -> Vec<TracedPacket> {
        let recs = lock(&self.records).clone();
        let mut packets: Vec<TracedPacket> = Vec::new();
        for r in &recs {
            let idx = match packets.iter().position(|p| p.id == r.packet) {
                Some(i) => i,
                None => {
                    packets.push(TracedPacket {
                        id: r.packet,
                        worker,
                        first_tsc: r.tsc,
                        nodes: Vec::new(),
                        lines: Vec::new(),
                    });
                    packets.len() - 1
                }
            };
            let p = &mut packets[idx];
            let name = node_names
                .get(r.node as usize)
                .cloned()
                .unwrap_or_else(|| format!("node-{}", r.node));
            let text = match &r.payload {
                Payload::Visit { meta, len, head } => {
                    if p.nodes.last() != Some(&name) || p.lines.is_empty() {
                        p.nodes.push(name.clone());
                    }
                    format_visit(meta, &head[..*len as usize], error_names)
                }
                Payload::Custom { format, len, data } => format(&data[..*len as usize]),
            };
            let dt = crate::cycles::to_seconds(r.tsc.wrapping_sub(p.first_tsc)) * 1e6;
            p.lines.push(format!("{dt:>10.3}us {name}: {text}"));
        }
        packets
    }
}

fn format_visit(meta: &BufferMeta, head: &[u8], error_names: &[String]) -> String {
    let mut s = format!(
        "len {} (total {}) rx-if {} tx-if {}",
        meta.length(),
        meta.total_length(),
        if_name(meta.rx_interface),
        if_name(meta.tx_interface),
    );
    if meta.error != 0 {
        let e = error_names
            .get(meta.error as usize)
            .map_or("?", String::as_str);
        let _ = write!(s, " error {e}");
    }
    s.push_str("\n              ");
    for b in head {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn if_name(i: u32) -> String {
    if i == crate::buffer::INVALID_INDEX {
        "-".to_string()
    } else {
        i.to_string()
    }
}

/// One traced packet's records, formatted.
#[derive(Debug, Clone)]
pub struct TracedPacket {
    /// The packet's trace id (unique per worker).
    pub id: u32,
    /// The worker that traced it.
    pub worker: Option<usize>,
    first_tsc: u64,
    /// The nodes it visited, in order.
    pub nodes: Vec<String>,
    /// One formatted line per record, with the time since the first record.
    pub lines: Vec<String>,
}

impl std::fmt::Display for TracedPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.worker {
            Some(w) => writeln!(f, "Packet {} (worker {w})", self.id)?,
            None => writeln!(f, "Packet {}", self.id)?,
        }
        for l in &self.lines {
            writeln!(f, "{l}")?;
        }
        Ok(())
    }
}

impl TraceLocal {
    pub fn new() -> TraceLocal {
        TraceLocal {
            seen_generation: 0,
            arm: None,
            armed_node: None,
            active: false,
            next_packet: 1,
        }
    }

    /// Picks up a new arm (between frames). `find_input` resolves an input node's name.
    #[inline]
    pub fn poll(&mut self, shared: &TraceShared, find_input: impl Fn(&str) -> Option<u32>) {
        let g = shared.generation.load(Ordering::Acquire);
        if g == self.seen_generation {
            return;
        }
        self.seen_generation = g;
        self.arm = lock(&shared.arm).clone();
        self.armed_node = self.arm.as_ref().and_then(|a| find_input(&a.node));
        self.active = false;
    }

    /// Marks up to the remaining budget of `packets` as traced and records their first visit.
    pub fn mark(
        &mut self,
        shared: &TraceShared,
        node: u32,
        buffers: &mut crate::buffer::WorkerBuffers,
        packets: &[BufferIndex],
    ) {
        let Some(arm) = &self.arm else { return };
        let n = arm.take(packets.len() as u32) as usize;
        if n == 0 {
            return;
        }
        self.active = true;
        for &bi in &packets[..n] {
            let id = self.next_packet;
            self.next_packet = self.next_packet.wrapping_add(1);
            let meta = buffers.meta_mut(bi);
            meta.flags |= crate::buffer::flags::TRACED;
            meta.trace_index = id;
            self.visit(shared, node, buffers, bi);
        }
    }

    /// Records a traced packet entering `node`.
    pub fn visit(
        &self,
        shared: &TraceShared,
        node: u32,
        buffers: &crate::buffer::WorkerBuffers,
        bi: BufferIndex,
    ) {
        let meta = *buffers.meta(bi);
        let data = buffers.data(bi);
        let len = data.len().min(CAPTURE_BYTES);
        let mut head = [0u8; CAPTURE_BYTES];
        head[..len].copy_from_slice(&data[..len]);
        shared.push(Record {
            packet: meta.trace_index,
            node,
            tsc: crate::cycles::now(),
            payload: Payload::Visit {
                meta,
                len: len as u8,
                head,
            },
        });
    }

    /// Records a node's own line for a traced packet.
    pub fn custom(
        &self,
        shared: &TraceShared,
        node: u32,
        packet: u32,
        bytes: &[u8],
        format: TraceFormatter,
    ) {
        let len = bytes.len().min(64);
        let mut data = [0u8; 64];
        data[..len].copy_from_slice(&bytes[..len]);
        shared.push(Record {
            packet,
            node,
            tsc: crate::cycles::now(),
            payload: Payload::Custom {
                format,
                len: len as u8,
                data,
            },
        });
    }
}
