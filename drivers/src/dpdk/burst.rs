//! The per-packet work at the DPDK edge: received mbufs become Quiver packets and Quiver packets
//! become mbufs to transmit, by rewriting headers only (the mbuf and the buffer are one piece of
//! memory; see the mempool module).

use dataplane::BufferIndex;
use std::ptr;

use dataplane::buffer::BufferMeta;
use dataplane::memory::prefetch;
use dataplane::WorkerBuffers;
use dpdk_sys as sys;

use super::mempool::{MbufMap, MBUF_SIZE};

/// The most mbufs one burst call handles.
pub(crate) const BURST: usize = 256;

/// How far ahead the loops prefetch.
const AHEAD: usize = 4;

/// What happened to received mbufs that did not simply become packets.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RxTally {
    /// Multi-segment packets turned into Quiver chains.
    pub chained: u64,
    /// Mbufs of another mempool (freed to it).
    pub foreign: u64,
    /// Mbufs whose data window lay outside the buffer (freed).
    pub bad_length: u64,
}

/// Turns `mbufs`, just received from a driver, into Quiver packets written to `out` (which must
/// be at least as long), and returns how many. Buffers of ours come back as themselves (same
/// index, same bytes); anything else is freed and counted in `tally`.
///
/// # Safety
/// Every pointer in `mbufs` must be a valid mbuf the caller now owns, and `buffers` must draw
/// from the pool `map` describes.
#[inline]
pub(crate) unsafe fn receive(
    map: &MbufMap,
    buffers: &mut WorkerBuffers,
    mbufs: &[*mut sys::rte_mbuf],
    out: &mut [BufferIndex],
    tally: &mut RxTally,
) -> usize {
    let area = buffers.headroom() as u32 + buffers.data_size() as u32;
    let mut k = 0;
    for (i, &m) in mbufs.iter().enumerate() {
        if let Some(&ahead) = mbufs.get(i + AHEAD) {
            prefetch(ahead);
            prefetch(ahead.cast::<u8>().wrapping_add(MBUF_SIZE));
        }
        let Some(bi) = map.index(m) else {
            tally.foreign += 1;
            // SAFETY: a valid mbuf we own, of another mempool: DPDK returns it there.
            unsafe { sys::rte_pktmbuf_free(m) };
            continue;
        };
        // SAFETY: `m` is a valid mbuf we own (the contract); reading its header races with no one.
        let (data_off, data_len, nb_segs, ol_flags, rss) = unsafe {
            let r = &*m;
            (
                r.data_off,
                r.data_len,
                r.nb_segs,
                r.ol_flags,
                r.__bindgen_anon_2.hash.rss,
            )
        };
        if data_off as u32 + data_len as u32 > area {
            tally.bad_length += 1;
            // SAFETY: as above; DPDK frees the whole chain, each segment to its own pool.
            unsafe { sys::rte_pktmbuf_free(m) };
            continue;
        }
        if nb_segs > 1 {
            // SAFETY: as above.
            match unsafe { receive_chain(map, buffers, m, bi, area) } {
                Ok(()) => tally.chained += 1,
                Err(ChainError::Foreign) => {
                    tally.foreign += 1;
                    continue;
                }
                Err(ChainError::BadLength) => {
                    tally.bad_length += 1;
                    continue;
                }
            }
        } else {
            let meta = buffers.meta_mut(bi);
            *meta = BufferMeta::new(data_off);
            buffers.set_length(bi, data_len);
        }
        if ol_flags & sys::RTE_MBUF_F_RX_RSS_HASH as u64 != 0 {
            let meta = buffers.meta_mut(bi);
            meta.flow_hash = rss;
            meta.flags |= dataplane::buffer::flags::FLOW_HASH_VALID;
        }
        out[k] = bi;
        k += 1;
    }
    k
}

enum ChainError {
    Foreign,
    BadLength,
}

/// A multi-segment mbuf `head` (buffer `head_bi`, already checked) into a Quiver chain; every
/// segment's mbuf is unlinked (`next` NULL, `nb_segs` 1), as a buffer Quiver holds must be. On
/// error the whole packet is freed through DPDK.
///
/// # Safety
/// As for [`receive`].
#[cold]
unsafe fn receive_chain(
    map: &MbufMap,
    buffers: &mut WorkerBuffers,
    head: *mut sys::rte_mbuf,
    head_bi: BufferIndex,
    area: u32,
) -> Result<(), ChainError> {
    // Check every segment first, so that a bad one leaves DPDK's chain intact to free.
    let mut seg = head;
    while !seg.is_null() {
        // SAFETY: a segment of a valid chain we own.
        let s = unsafe { &*seg };
        let problem = if map.index(seg).is_none() {
            Some(ChainError::Foreign)
        } else if s.data_off as u32 + s.data_len as u32 > area {
            Some(ChainError::BadLength)
        } else {
            None
        };
        if let Some(p) = problem {
            // SAFETY: the chain is intact and ours: DPDK frees each segment to its pool.
            unsafe { sys::rte_pktmbuf_free(head) };
            return Err(p);
        }
        seg = s.next;
    }
    let mut seg = head;
    while !seg.is_null() {
        // SAFETY: as above; after this the segment is a lone mbuf again.
        let (off, len, next) = unsafe {
            let s = &mut *seg;
            let v = (s.data_off, s.data_len, s.next);
            s.next = ptr::null_mut();
            s.nb_segs = 1;
            v
        };
        let bi = map.index(seg).expect("checked above");
        *buffers.meta_mut(bi) = BufferMeta::new(off);
        buffers.set_length(bi, len);
        if bi != head_bi {
            buffers.chain_append(head_bi, bi);
        }
        seg = next;
    }
    Ok(())
}

/// Writes into each packet's mbuf(s) what a driver reads to send it (data offset and lengths,
/// segment links, no offload flags) and puts the head mbufs into `mbufs[..packets.len()]`.
///
/// # Safety
/// The caller must own `packets` (drawn from the pool `map` describes) and `mbufs` must be at
/// least as long.
#[inline]
pub(crate) unsafe fn prepare_transmit(
    map: &MbufMap,
    buffers: &WorkerBuffers,
    packets: &[BufferIndex],
    mbufs: &mut [*mut sys::rte_mbuf],
) {
    for (i, &bi) in packets.iter().enumerate() {
        if let Some(&ahead) = packets.get(i + AHEAD) {
            prefetch(map.mbuf(ahead));
        }
        let meta = buffers.meta(bi);
        let m = map.mbuf(bi);
        // SAFETY: the mbuf header of a buffer we own; nothing else touches it.
        unsafe {
            let r = &mut *m;
            r.data_off = meta.data_offset();
            r.data_len = meta.length();
            r.pkt_len = meta.total_length();
            r.ol_flags = 0;
        }
        if meta.next().is_some() {
            // SAFETY: as above, for every buffer of the chain.
            unsafe { link_chain(map, buffers, bi, m) };
        }
        mbufs[i] = m;
    }
}

/// Links the mbufs of a Quiver chain.
///
/// # Safety
/// As for [`prepare_transmit`].
#[cold]
unsafe fn link_chain(
    map: &MbufMap,
    buffers: &WorkerBuffers,
    head_bi: BufferIndex,
    head: *mut sys::rte_mbuf,
) {
    let mut prev = head;
    let mut segs: u16 = 1;
    let mut cur = buffers.meta(head_bi).next();
    while let Some(s) = cur {
        let meta = buffers.meta(s);
        let m = map.mbuf(s);
        // SAFETY: mbuf headers of buffers we own.
        unsafe {
            let r = &mut *m;
            r.data_off = meta.data_offset();
            r.data_len = meta.length();
            r.pkt_len = meta.length() as u32;
            r.ol_flags = 0;
            (*prev).next = m;
        }
        prev = m;
        segs = segs.saturating_add(1);
        cur = meta.next();
    }
    // SAFETY: as above.
    unsafe {
        (*prev).next = ptr::null_mut();
        (*head).nb_segs = segs;
    }
}

/// Restores the free-mbuf shape (`next` NULL, `nb_segs` 1) of packets a driver did not take:
/// they stay Quiver's, and may be freed to the pool.
///
/// # Safety
/// As for [`prepare_transmit`].
#[inline]
pub(crate) unsafe fn unlink_refused(
    map: &MbufMap,
    buffers: &WorkerBuffers,
    packets: &[BufferIndex],
) {
    for &bi in packets {
        if buffers.meta(bi).next().is_none() {
            continue;
        }
        for s in buffers.chain(bi) {
            let m = map.mbuf(s);
            // SAFETY: mbuf headers of buffers we own.
            unsafe {
                (*m).next = ptr::null_mut();
                (*m).nb_segs = 1;
            }
        }
    }
}
