//! The traffic tool's frames and its receive-side checks.
//!
//! A frame is Ethernet / IPv4 / UDP (198.18.0.1:1024 → 198.18.0.2:1234, the RFC 2544 benchmark
//! range, no UDP checksum) whose payload starts with a 16-byte stream header — magic, stream id,
//! 64-bit sequence number, all big-endian — followed by fill bytes derived from the sequence
//! number's low byte. So every byte after the MAC addresses is known to the receiver: it keeps
//! 256 templates (one per low byte) and compares. The MAC addresses are not compared, so a peer
//! that swaps them (testpmd macswap) still delivers intact frames.

use crate::wire::{be32, be64, checksum, ETHERTYPE_IPV4, ETH_HLEN};

/// Payload magic: "QTRF".
pub const MAGIC: u32 = 0x5154_5246;
/// Offset of the magic (after Ethernet 14 + IPv4 20 + UDP 8).
pub const MAGIC_OFF: usize = 42;
/// Offset of the stream id.
pub const STREAM_OFF: usize = 46;
/// Offset of the sequence number.
pub const SEQ_OFF: usize = 50;
/// Offset of the first fill byte.
pub const FILL_OFF: usize = 58;
/// Smallest frame the tool sends (the Ethernet minimum without FCS).
pub const MIN_SIZE: usize = 60;
/// Largest frame the tool sends (carried as chained descriptors beyond one buffer).
pub const MAX_SIZE: usize = 16384;
/// Templates kept: one per value of the sequence number's low byte.
pub const TEMPLATES: usize = 256;

/// Addresses the frames carry.
#[derive(Debug, Clone, Copy)]
pub struct Addresses {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
}

/// The fill byte at payload position `i` of a frame whose sequence number ends in `low`.
fn fill(low: u8, i: usize) -> u8 {
    low.wrapping_mul(31)
        .wrapping_add(i as u8)
        .wrapping_add((i >> 8) as u8)
}

/// Builds the frame of `size` bytes for stream `stream` and sequence number `seq`.
pub fn build_frame(size: usize, stream: u32, seq: u64, addrs: &Addresses) -> Vec<u8> {
    let mut f = vec![0u8; size.max(MIN_SIZE)];
    f[0..6].copy_from_slice(&addrs.dst_mac);
    f[6..12].copy_from_slice(&addrs.src_mac);
    f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let ip_len = (f.len() - ETH_HLEN).min(usize::from(u16::MAX)) as u16;
    let ip = &mut f[ETH_HLEN..ETH_HLEN + 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[198, 18, 0, 1]);
    ip[16..20].copy_from_slice(&[198, 18, 0, 2]);
    let c = checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let udp_len = ip_len - 20;
    f[34..36].copy_from_slice(&1024u16.to_be_bytes());
    f[36..38].copy_from_slice(&1234u16.to_be_bytes());
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    f[MAGIC_OFF..STREAM_OFF].copy_from_slice(&MAGIC.to_be_bytes());
    f[STREAM_OFF..SEQ_OFF].copy_from_slice(&stream.to_be_bytes());
    f[SEQ_OFF..FILL_OFF].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[FILL_OFF..].iter_mut().enumerate() {
        *b = fill(seq as u8, i);
    }
    f
}

/// Sequence number and stream id of a frame that carries our magic.
pub fn header(frame: &[u8]) -> Option<(u32, u64)> {
    if be32(frame, MAGIC_OFF)? != MAGIC {
        return None;
    }
    Some((be32(frame, STREAM_OFF)?, be64(frame, SEQ_OFF)?))
}

/// 256 frames back to back, frame `k` being the one for sequence numbers ending in `k`; only the
/// sequence number field changes between frames of the same slot.
pub struct FrameRing {
    size: usize,
    bytes: Vec<u8>,
}

impl FrameRing {
    /// Frames of `size` bytes for `stream`.
    pub fn new(size: usize, stream: u32, addrs: &Addresses) -> FrameRing {
        let size = size.max(MIN_SIZE);
        let mut bytes = Vec::with_capacity(size * TEMPLATES);
        for k in 0..TEMPLATES as u64 {
            bytes.extend_from_slice(&build_frame(size, stream, k, addrs));
        }
        FrameRing { size, bytes }
    }

    /// The frame for sequence numbers ending in `low` (its sequence field holds whichever such
    /// number was written last).
    pub fn template(&self, low: u8) -> &[u8] {
        let k = usize::from(low);
        &self.bytes[k * self.size..(k + 1) * self.size]
    }

    /// Writes `seq` into its slot.
    fn write_seq(&mut self, seq: u64) {
        let k = usize::from(seq as u8);
        let f = &mut self.bytes[k * self.size..(k + 1) * self.size];
        f[SEQ_OFF..FILL_OFF].copy_from_slice(&seq.to_be_bytes());
    }

    /// Writes sequence numbers `first..first + refs.len()` (at most 256) into their slots and
    /// fills `refs` with those frames, in order.
    pub fn burst<'a>(&'a mut self, first: u64, refs: &mut [&'a [u8]]) {
        for i in 0..refs.len() as u64 {
            self.write_seq(first + i);
        }
        let this: &'a FrameRing = self;
        for (i, r) in refs.iter_mut().enumerate() {
            *r = this.template((first + i as u64) as u8);
        }
    }
}

/// First sightings, duplicates and late arrivals of sequence numbers, over a sliding window of
/// the last [`SeqTracker::WINDOW`] numbers below the highest seen.
#[derive(Debug, Clone)]
pub struct SeqTracker {
    /// One past the highest sequence number seen.
    next: u64,
    /// Bit `s % WINDOW`: whether `s` was seen, for `next - WINDOW <= s < next`.
    seen: Vec<u64>,
    /// Distinct sequence numbers seen.
    pub unique: u64,
    /// Frames whose sequence number was already seen.
    pub duplicated: u64,
    /// Frames seen for the first time after a higher number (also frames older than the window,
    /// which cannot be told from duplicates).
    pub reordered: u64,
}

/// What one sighting was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sighting {
    /// First time, in order (possibly after a gap).
    InOrder,
    /// First time, after a higher number.
    Late,
    /// Seen before.
    Duplicate,
}

impl Default for SeqTracker {
    fn default() -> Self {
        SeqTracker {
            next: 0,
            seen: vec![0; (Self::WINDOW / 64) as usize],
            unique: 0,
            duplicated: 0,
            reordered: 0,
        }
    }
}

impl SeqTracker {
    /// How far back duplicates are recognised.
    pub const WINDOW: u64 = 1 << 16;

    fn bit(&self, s: u64) -> bool {
        let i = s % Self::WINDOW;
        self.seen[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, s: u64, on: bool) {
        let i = s % Self::WINDOW;
        let w = &mut self.seen[(i / 64) as usize];
        if on {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }

    /// One past the highest sequence number seen (0 before any).
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Records one frame's sequence number.
    pub fn record(&mut self, s: u64) -> Sighting {
        if s >= self.next {
            // Numbers next..=s enter the window, reusing the slots of numbers that leave it.
            if s - self.next >= Self::WINDOW {
                self.seen.iter_mut().for_each(|w| *w = 0);
            } else {
                for x in self.next..s {
                    self.set(x, false);
                }
            }
            self.set(s, true);
            self.next = s + 1;
            self.unique += 1;
            return Sighting::InOrder;
        }
        if self.next - s > Self::WINDOW {
            self.reordered += 1;
            return Sighting::Late;
        }
        if self.bit(s) {
            self.duplicated += 1;
            return Sighting::Duplicate;
        }
        self.set(s, true);
        self.unique += 1;
        self.reordered += 1;
        Sighting::Late
    }
}

/// Receive-side counts of one stream.
#[derive(Debug, Default, Clone)]
pub struct Sink {
    /// Frames of our stream (duplicates and corrupted ones included).
    pub received: u64,
    /// Frames of our stream that differ from what was sent (length or any byte after the MACs).
    pub corrupted: u64,
    /// Frames that are not ours (no magic, or another stream).
    pub foreign: u64,
    /// Sequence bookkeeping.
    pub seq: SeqTracker,
}

impl Sink {
    /// Checks one received frame against `templates` (when given) and records its number.
    pub fn check(&mut self, frame: &[u8], stream: u32, templates: Option<&FrameRing>) {
        let Some((id, s)) = header(frame) else {
            self.foreign += 1;
            return;
        };
        if id != stream {
            self.foreign += 1;
            return;
        }
        self.received += 1;
        if let Some(t) = templates {
            if !intact(frame, t.template(s as u8)) {
                self.corrupted += 1;
            }
        }
        self.seq.record(s);
    }
}

/// Whether `frame` equals `template` after the MAC addresses, except the sequence number field.
fn intact(frame: &[u8], template: &[u8]) -> bool {
    frame.len() == template.len()
        && frame[12..SEQ_OFF] == template[12..SEQ_OFF]
        && frame[FILL_OFF..] == template[FILL_OFF..]
}
