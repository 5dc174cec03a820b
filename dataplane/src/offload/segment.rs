//! GSO in software: a TCP or UDP super-frame cut into frames of `gso_size` payload bytes, each
//! with its own headers and full checksums.

use super::checksum::{ones_sum, Summer};
use super::{BadOffload, Gso, Offload};
use crate::buffer::{flags, BufferMeta, WorkerBuffers};
use crate::BufferIndex;

/// The longest headers (Ethernet with a tag, IP, L4) a super-frame may have.
const MAX_HEADERS: usize = 192;

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// Where a super-frame's headers are.
#[derive(Debug, Clone, Copy)]
struct Headers {
    l3: usize,
    l4: usize,
    /// Where the payload starts.
    end: usize,
    v4: bool,
    tcp: bool,
}

fn be16(d: &[u8], i: usize) -> Result<u16, BadOffload> {
    d.get(i..i + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
        .ok_or(BadOffload::Segmentation)
}

fn byte(d: &[u8], i: usize) -> Result<u8, BadOffload> {
    d.get(i).copied().ok_or(BadOffload::Segmentation)
}

/// Reads and checks the headers in the super-frame's first buffer `d`.
fn parse(d: &[u8], o: &Offload) -> Result<Headers, BadOffload> {
    let bad = BadOffload::Segmentation;
    let (mut l3, mut ethertype) = (14, be16(d, 12)?);
    if matches!(ethertype, 0x8100 | 0x88a8) {
        (l3, ethertype) = (18, be16(d, 16)?);
    }
    let (v4, l4, proto) = match ethertype {
        0x0800 => {
            let vihl = byte(d, l3)?;
            // Version 4, a whole header, not a fragment.
            if vihl >> 4 != 4 || vihl & 15 < 5 || be16(d, l3 + 6)? & 0x3fff != 0 {
                return Err(bad);
            }
            (true, l3 + (vihl & 15) as usize * 4, byte(d, l3 + 9)?)
        }
        0x86dd => {
            if byte(d, l3)? >> 4 != 6 {
                return Err(bad);
            }
            (false, l3 + 40, byte(d, l3 + 6)?)
        }
        _ => return Err(bad),
    };
    let tcp = match (o.gso, v4, proto) {
        (Gso::Tcp4, true, 6) | (Gso::Tcp6, false, 6) => true,
        (Gso::Udp, _, 17) => false,
        _ => return Err(bad),
    };
    if o.needs_csum() && o.csum_start as usize != l4 {
        return Err(BadOffload::Checksum);
    }
    let end = if tcp {
        let doff = (byte(d, l4 + 12)? >> 4) as usize * 4;
        if doff < 20 {
            return Err(bad);
        }
        l4 + doff
    } else {
        l4 + 8
    };
    if end > d.len() || end > MAX_HEADERS {
        return Err(bad);
    }
    Ok(Headers {
        l3,
        l4,
        end,
        v4,
        tcp,
    })
}

/// Where the next payload byte of a packet is, across its chain.
struct Cursor {
    buf: Option<BufferIndex>,
    off: usize,
}

impl Cursor {
    /// The buffer holding the next byte and the byte's offset in its data; `None` when the
    /// packet has ended.
    fn here(&mut self, buffers: &WorkerBuffers) -> Option<(BufferIndex, usize)> {
        loop {
            let b = self.buf?;
            if self.off < buffers.data(b).len() {
                return Some((b, self.off));
            }
            (self.buf, self.off) = (buffers.meta(b).next(), 0);
        }
    }
}

/// Writes a new packet of a known length, chaining buffers as it goes.
struct Writer {
    head: BufferIndex,
    cur: BufferIndex,
    cur_len: usize,
    filled: usize,
    /// Bytes not yet given a buffer.
    left: usize,
}

impl Writer {
    fn start(buffers: &mut WorkerBuffers, head: BufferIndex, total: usize) -> Writer {
        let len = total.min(buffers.data_size() as usize);
        buffers.set_length(head, len as u16);
        Writer {
            head,
            cur: head,
            cur_len: len,
            filled: 0,
            left: total - len,
        }
    }

    /// Makes sure the current buffer has room, chaining the next one when it is full.
    fn room(&mut self, buffers: &mut WorkerBuffers) -> Result<(), BadOffload> {
        if self.filled == self.cur_len {
            let len = self.left.min(buffers.data_size() as usize);
            if len == 0 {
                return Err(BadOffload::Segmentation);
            }
            let next = buffers.alloc_one().ok_or(BadOffload::NoBuffer)?;
            buffers.set_length(next, len as u16);
            buffers.chain_append(self.head, next);
            (self.cur, self.cur_len, self.filled, self.left) = (next, len, 0, self.left - len);
        }
        Ok(())
    }

    fn write(&mut self, buffers: &mut WorkerBuffers, mut bytes: &[u8]) -> Result<(), BadOffload> {
        while !bytes.is_empty() {
            self.room(buffers)?;
            let n = bytes.len().min(self.cur_len - self.filled);
            buffers.data_mut(self.cur)[self.filled..self.filled + n].copy_from_slice(&bytes[..n]);
            self.filled += n;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Copies the next `len` bytes of the packet `from` points into, buffer to buffer, adding
    /// them to `sum` as they land (still in the cache).
    fn copy(
        &mut self,
        buffers: &mut WorkerBuffers,
        from: &mut Cursor,
        mut len: usize,
        sum: &mut Summer,
    ) -> Result<(), BadOffload> {
        while len > 0 {
            self.room(buffers)?;
            let (src, off) = from.here(buffers).ok_or(BadOffload::Segmentation)?;
            let (s, d) = buffers
                .data_pair_mut(src, self.cur)
                .ok_or(BadOffload::Segmentation)?;
            let n = len.min(s.len() - off).min(self.cur_len - self.filled);
            let d = &mut d[self.filled..self.filled + n];
            d.copy_from_slice(&s[off..off + n]);
            sum.add(d);
            self.filled += n;
            from.off += n;
            len -= n;
        }
        Ok(())
    }
}

/// Metadata for a segment of `orig`, in a fresh buffer whose metadata is `fresh`.
fn segment_meta(orig: &BufferMeta, fresh: &BufferMeta) -> BufferMeta {
    let shift = fresh.data_offset as i32 - orig.data_offset as i32;
    let moved = |v: u16| (v as i32 + shift).clamp(0, u16::MAX as i32) as u16;
    BufferMeta {
        data_offset: fresh.data_offset,
        length: 0,
        flags: orig.flags & !(flags::OFFLOAD | flags::NEXT_PRESENT | flags::FREE),
        next: BufferIndex::NONE,
        chain_rest: 0,
        l2_offset: moved(orig.l2_offset),
        l3_offset: moved(orig.l3_offset),
        l4_offset: moved(orig.l4_offset),
        offload: Offload::default(),
        ..*orig
    }
}

/// Cuts super-frame `bi` into segments written to `out[..n]` (returning `n`), each with its
/// own IPv4 total length, id and header checksum (or IPv6 payload length), TCP sequence number
/// (FIN and PSH on the last segment only, CWR on the first only) or UDP length, and a full L4
/// checksum. `bi` is left as it was: the caller frees it (or, on error, drops it).
pub fn segment(
    buffers: &mut WorkerBuffers,
    bi: BufferIndex,
    out: &mut [BufferIndex],
) -> Result<usize, BadOffload> {
    let meta = *buffers.meta(bi);
    let o = *meta.offload().ok_or(BadOffload::Segmentation)?;
    if o.gso == Gso::None || o.gso_size == 0 {
        return Err(BadOffload::Segmentation);
    }
    let head = buffers.data(bi);
    let h = parse(head, &o)?;
    let total = meta.total_length() as usize;
    if total < h.end {
        return Err(BadOffload::Segmentation);
    }
    // The IP header's length must be the frame's.
    let ip_len = if h.v4 {
        be16(head, h.l3 + 2)? as usize
    } else {
        be16(head, h.l3 + 4)? as usize + 40
    };
    if ip_len != total - h.l3 {
        return Err(BadOffload::Segmentation);
    }
    let payload = total - h.end;
    let size = o.gso_size as usize;
    let n = payload.div_ceil(size).max(1);
    if n > out.len() {
        return Err(BadOffload::TooManySegments);
    }
    let mut hdr = [0u8; MAX_HEADERS];
    let hdr = &mut hdr[..h.end];
    hdr.copy_from_slice(&head[..h.end]);
    let out = &mut out[..n];
    buffers.alloc(out).map_err(|_| BadOffload::NoBuffer)?;
    let r = write_segments(buffers, bi, &meta, &o, &h, hdr, out);
    if r.is_err() {
        buffers.free(out);
    }
    r.map(|()| n)
}

fn write_segments(
    buffers: &mut WorkerBuffers,
    bi: BufferIndex,
    meta: &BufferMeta,
    o: &Offload,
    h: &Headers,
    hdr: &mut [u8],
    out: &[BufferIndex],
) -> Result<(), BadOffload> {
    let (l3, l4, end) = (h.l3, h.l4, h.end);
    let n = out.len();
    let size = o.gso_size as usize;
    let payload = meta.total_length() as usize - end;
    let id = u16::from_be_bytes([hdr[l3 + 4], hdr[l3 + 5]]);
    let (seq, tcp_flags) = if h.tcp {
        let s = u32::from_be_bytes([hdr[l4 + 4], hdr[l4 + 5], hdr[l4 + 6], hdr[l4 + 7]]);
        (s, hdr[l4 + 13])
    } else {
        (0, 0)
    };
    // The pseudo-header's addresses, summed once.
    let addrs = if h.v4 {
        ones_sum(&hdr[l3 + 12..l3 + 20])
    } else {
        ones_sum(&hdr[l3 + 8..l3 + 40])
    };
    let proto: u64 = if h.tcp { 6 } else { 17 };
    let mut cursor = Cursor {
        buf: Some(bi),
        off: end,
    };
    for (i, &seg) in out.iter().enumerate() {
        let chunk = size.min(payload - i * size);
        let l4_len = end - l4 + chunk;
        if h.v4 {
            let ip_len = (end - l3 + chunk) as u16;
            hdr[l3 + 2..l3 + 4].copy_from_slice(&ip_len.to_be_bytes());
            hdr[l3 + 4..l3 + 6].copy_from_slice(&id.wrapping_add(i as u16).to_be_bytes());
            hdr[l3 + 10..l3 + 12].fill(0);
            let c = !super::checksum::fold(ones_sum(&hdr[l3..l4]));
            hdr[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        } else {
            hdr[l3 + 4..l3 + 6].copy_from_slice(&((l4_len) as u16).to_be_bytes());
        }
        let check_at = if h.tcp {
            let s = seq.wrapping_add((i * size) as u32);
            hdr[l4 + 4..l4 + 8].copy_from_slice(&s.to_be_bytes());
            let mut f = tcp_flags;
            if i + 1 < n {
                f &= !(TCP_FIN | TCP_PSH);
            }
            if i > 0 {
                f &= !TCP_CWR;
            }
            hdr[l4 + 13] = f;
            l4 + 16
        } else {
            hdr[l4 + 4..l4 + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            l4 + 6
        };
        hdr[check_at..check_at + 2].fill(0);
        let mut sum = Summer::default();
        sum.add(&hdr[l4..end]);

        let fresh = *buffers.meta(seg);
        *buffers.meta_mut(seg) = segment_meta(meta, &fresh);
        let mut w = Writer::start(buffers, seg, end + chunk);
        w.write(buffers, hdr)?;
        w.copy(buffers, &mut cursor, chunk, &mut sum)?;
        let pseudo = addrs + proto + l4_len as u64;
        let c = !super::checksum::fold(sum.acc() + pseudo);
        let c = if c == 0 { 0xffff } else { c };
        buffers.data_mut(seg)[check_at..check_at + 2].copy_from_slice(&c.to_be_bytes());
    }
    Ok(())
}
