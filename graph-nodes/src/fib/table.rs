//! The lookup side of the FIB, shared with every worker: one cache line per /17.
//!
//! **Lines.** The table is 131072 lines of 64 bytes (8 MiB), line `addr >> 15` for the /17
//! holding `addr`. A line stands for the 128 /24s of its /17, stored as runs: a 128-bit bitmap
//! (words 0 and 1) marks each /24 whose entry differs from the one before it, and the runs'
//! entries follow as 16-bit slots (words 2 to 7, four per word), so /24 number `j` has entry
//! `rank(j) − 1`, `rank(j)` being the bits set up to and including `j`. An entry is a route
//! (`0` = none, `1..=0x7fff` = value + 1) or, with the top bit set, a /24 holding longer
//! prefixes: the offset of that /24's node from the line's *base*, which slots 22 and 23 hold
//! (so a line with such /24s has room for 22 runs, one without for 24).
//!
//! **Redirected lines.** Bit 0 of word 0 is set in every line in place (/24 number 0 always
//! starts a run). A line whose word 0 has bit 0 clear is redirected: word 0 is twice the offset
//! of a block in the node memory holding the /17 in the same layout without the size limit
//! (bitmap, all run entries, then its /24 nodes, based at the block's start). /17s with more
//! runs than a line holds live there, and most changes go through one (below). A line in place
//! with /24 nodes keeps its block as their home: its base is the block's start.
//!
//! **/24 nodes.** 256 entries (one per address) as runs: `[counts]` (byte `k` = bits set in
//! bitmap words before word `k`), `[bitmap × 4]`, then the runs' routes, four per word.
//!
//! A lookup reads one line; about 1 in 6 with 1M routes of the benchmarks' mix (an address under
//! a prefix longer than /24, or in a /17 with more than 24 runs) reads one more place. That mix
//! takes 8 MiB of lines and about 6 MiB of blocks and nodes, against 32 MiB for a DIR-24-8 table
//! with 16-bit entries (64 MiB for `rte_lpm`'s 32-bit ones), so most of it stays in the
//! last-level cache; and a line is found without a load, so `ip4-input` prefetches it from the
//! destination address alone.
//!
//! **Changes.** Workers read with plain loads (relaxed atomics; word 0 with Acquire). A change
//! to a /17 writes a new block, then redirects the line to it with one store of word 0
//! (Release), so a reader sees the old or the new /17, never a mix. Only once every reader has
//! passed a quiescent state (nobody reads the old line any more) is the line rewritten in place
//! from the block: words 1 to 7, then word 0 (Release). Blocks no longer referenced are reused
//! only after one more quiescent state. The writer (`Lpm`) does both at `recycle_retired`. A
//! change that keeps a line's bitmap (new routes for the same ranges, on a line without /24
//! nodes) needs no block: the entry words are stored in place, and a reader, which reads the
//! bitmap and one entry word, sees the old or the new route of its range.

use std::sync::atomic::{AtomicU64, Ordering};

use dataplane::memory::{prefetch, Region};

/// /24s per line.
pub(super) const SLOTS: usize = 128;
/// Lines in the table.
pub(super) const LINES: usize = 1 << 17;
/// Words per line.
pub(super) const LINE_WORDS: usize = 8;
/// Run entries a line holds without /24 nodes, and with (the last two slots hold the base).
pub(super) const LINE_RUNS: usize = 24;
/// See [`LINE_RUNS`].
pub(super) const LINE_RUNS_WITH_NODES: usize = 22;
/// Entry flag: the rest is a /24 node's offset from the base.
pub(super) const CHILD: u16 = 0x8000;
/// Words of a /24 node before its routes: the counts and the bitmap.
pub(super) const NODE_HEADER: usize = 5;
/// Words of a block before its run entries: the bitmap.
pub(super) const BLOCK_HEADER: usize = 2;

/// How many lookups ahead a batch prefetches lines (measured: a distance of 16 to 32 keeps
/// misses overlapped; prefetching a whole batch up front loses most of them).
const PREFETCH_AHEAD: usize = 32;

/// Lookups still waiting for a read hold a tag in the top two bits of their result and the word
/// offset to read below it.
const PENDING_BLOCK: u32 = 2 << 30;
/// See [`PENDING_BLOCK`].
const PENDING_NODE: u32 = 1 << 30;
const OFFSET: u32 = (1 << 30) - 1;

/// The shared lookup table.
pub struct LpmTable {
    lines_mem: Region,
    nodes_mem: Region,
    popcnt: bool,
}

/// A route entry (`0` = none, else value + 1) as a lookup result (`u32::MAX` = none).
#[inline(always)]
fn decode(e: u16) -> u32 {
    (e as u32).wrapping_sub(1)
}

/// The run number (from 0) of /24 `j` in a 128-bit bitmap (words `w0`, `w1`).
#[inline(always)]
fn run_of(w0: u64, w1: u64, j: u32) -> usize {
    let bitmap = (w1 as u128) << 64 | w0 as u128;
    // Bit 0 is always set in a well-formed bitmap, so the count is at least 1.
    ((bitmap << (127 - (j & 127))).count_ones() as usize).wrapping_sub(1)
}

impl LpmTable {
    pub(super) fn new(lines_mem: Region, nodes_mem: Region) -> LpmTable {
        LpmTable {
            lines_mem,
            nodes_mem,
            #[cfg(target_arch = "x86_64")]
            popcnt: std::arch::is_x86_feature_detected!("popcnt"),
            #[cfg(not(target_arch = "x86_64"))]
            popcnt: false,
        }
    }

    /// The table's words: line `l` is `[l * 8, l * 8 + 8)`.
    #[inline(always)]
    pub(super) fn lines(&self) -> &[AtomicU64; LINES * LINE_WORDS] {
        self.lines_mem.as_atomic_u64()[..LINES * LINE_WORDS]
            .try_into()
            .expect("the lines region holds 8 MiB")
    }

    #[inline(always)]
    pub(super) fn nodes(&self) -> &[AtomicU64] {
        self.nodes_mem.as_atomic_u64()
    }

    /// Whether both regions live in hugepages.
    pub fn is_hugepage_backed(&self) -> bool {
        self.lines_mem.is_hugepage_backed() && self.nodes_mem.is_hugepage_backed()
    }

    /// The value of the longest prefix matching `addr`. One line read, which a caller that
    /// prefetched it ([`LpmTable::prefetch`]) finds in cache.
    #[inline]
    pub fn lookup(&self, addr: u32) -> Option<u32> {
        let at = (addr >> 15) as usize * LINE_WORDS;
        let line: &[AtomicU64; LINE_WORDS] = self.lines()[at..at + LINE_WORDS]
            .try_into()
            .expect("a line is 8 words");
        let w0 = line[0].load(Ordering::Acquire);
        let e = if w0 & 1 != 0 {
            match in_line(line, w0, addr) {
                (e, _) if e & CHILD == 0 => e,
                (e, base) => in_node(self.nodes(), base + (e & !CHILD) as usize, addr),
            }
        } else {
            self.in_redirected(w0, addr)
        };
        (e != 0).then(|| e as u32 - 1)
    }

    /// The route entry for `addr` in a redirected line (whose word 0 is `w0`).
    #[inline(never)]
    fn in_redirected(&self, w0: u64, addr: u32) -> u16 {
        let nodes = self.nodes();
        match in_block(nodes, (w0 >> 1) as usize, addr) {
            (e, _) if e & CHILD == 0 => e,
            (e, base) => in_node(nodes, base + (e & !CHILD) as usize, addr),
        }
    }

    /// Looks up every address of `addrs` into `out` (`u32::MAX` for no route), keeping many
    /// cache misses in flight: lines are prefetched a fixed distance ahead of their reads, and
    /// the blocks and /24 nodes that some lookups need are read after the pass over the lines.
    #[inline]
    pub fn lookup_batch(&self, addrs: &[u32], out: &mut [u32]) {
        self.lookup_batch_dispatch::<true>(addrs, out);
    }

    /// [`LpmTable::lookup_batch`] for a caller that has just prefetched every address's line
    /// ([`LpmTable::prefetch`]): the pass over the lines does not prefetch them again.
    #[inline]
    pub fn lookup_batch_prefetched(&self, addrs: &[u32], out: &mut [u32]) {
        self.lookup_batch_dispatch::<false>(addrs, out);
    }

    #[inline(always)]
    fn lookup_batch_dispatch<const PREFETCH: bool>(&self, addrs: &[u32], out: &mut [u32]) {
        #[cfg(target_arch = "x86_64")]
        if self.popcnt {
            // SAFETY: the CPU has `popcnt` (detected when the table was made), the only
            // requirement of `lookup_batch_popcnt`.
            unsafe { self.lookup_batch_popcnt::<PREFETCH>(addrs, out) };
            return;
        }
        self.lookup_batch_any::<PREFETCH>(addrs, out);
    }

    /// [`LpmTable::lookup_batch`] compiled with the `popcnt` instruction.
    ///
    /// # Safety
    /// The CPU must have `popcnt`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    unsafe fn lookup_batch_popcnt<const PREFETCH: bool>(&self, addrs: &[u32], out: &mut [u32]) {
        self.lookup_batch_any::<PREFETCH>(addrs, out);
    }

    #[inline(always)]
    fn lookup_batch_any<const PREFETCH: bool>(&self, addrs: &[u32], out: &mut [u32]) {
        // Batches of at most 256, so that the lookups needing a second read fit in `later`.
        for (addrs, out) in addrs.chunks(256).zip(out.chunks_mut(256)) {
            self.lookup_256::<PREFETCH>(addrs, out);
        }
    }

    #[inline(always)]
    fn lookup_256<const PREFETCH: bool>(&self, addrs: &[u32], out: &mut [u32]) {
        let n = addrs.len().min(out.len()).min(256);
        let (addrs, out) = (&addrs[..n], &mut out[..n]);
        let (lines, nodes) = (self.lines(), self.nodes());
        let line_of = |a: u32| (a >> 15) as usize * LINE_WORDS;
        // Lines are prefetched a fixed distance ahead: enough to cover a miss, few enough that
        // every prefetch is still in flight or in cache when its line is read.
        for &a in addrs.iter().take(if PREFETCH { PREFETCH_AHEAD } else { 0 }) {
            prefetch(&lines[line_of(a)]);
        }
        // Lookups needing a block or a /24 node (about one in six with 1M routes), read after
        // the pass over the lines: their index, and the block's or node's offset in `out` (with
        // a tag).
        let mut later = [0u8; 256];
        let mut pending = 0;
        for (i, (&a, o)) in addrs.iter().zip(out.iter_mut()).enumerate() {
            if let Some(&ahead) = addrs.get(i + PREFETCH_AHEAD).filter(|_| PREFETCH) {
                prefetch(&lines[line_of(ahead)]);
            }
            let at = line_of(a);
            let line: &[AtomicU64; LINE_WORDS] = lines[at..at + LINE_WORDS]
                .try_into()
                .expect("a line is 8 words");
            let w0 = line[0].load(Ordering::Acquire);
            let (tag, at) = if w0 & 1 != 0 {
                let (e, base) = in_line(line, w0, a);
                if e & CHILD == 0 {
                    *o = decode(e);
                    continue;
                }
                (PENDING_NODE, base + (e & !CHILD) as usize)
            } else {
                (PENDING_BLOCK, (w0 >> 1) as usize)
            };
            prefetch_node(nodes, at);
            *o = tag | at as u32 & OFFSET;
            if let Some(l) = later.get_mut(pending) {
                *l = i as u8;
                pending += 1;
            }
        }
        let later = &later[..pending];
        for &i in later {
            let i = i as usize;
            let (Some(&a), Some(o)) = (addrs.get(i), out.get_mut(i)) else {
                continue;
            };
            let at = (*o & OFFSET) as usize;
            let e = if *o & PENDING_BLOCK != 0 {
                let (e, base) = in_block(nodes, at, a);
                if e & CHILD != 0 {
                    // A /24 node in a redirected /17: one more read.
                    in_node(nodes, base + (e & !CHILD) as usize, a)
                } else {
                    e
                }
            } else {
                in_node(nodes, at, a)
            };
            *o = decode(e);
        }
    }

    /// A handle that prefetches lines for lookups a whole node later (see [`LinePrefetcher`]).
    #[inline(always)]
    pub fn prefetcher(&self) -> LinePrefetcher<'_> {
        LinePrefetcher {
            lines: self.lines_mem.base().as_ptr(),
            _table: std::marker::PhantomData,
        }
    }

    /// Hints the CPU to fetch the line a lookup of `addr` reads (no load: it never stalls).
    #[inline(always)]
    pub fn prefetch(&self, addr: u32) {
        // Only an address is computed (no bounds check needed: a prefetch never faults, and
        // every /17's line lies inside the region anyway).
        let line = (addr >> 15) as usize * LINE_WORDS * 8;
        prefetch(self.lines_mem.base().as_ptr().wrapping_add(line));
    }
}

/// Prefetches the lines of lookups to come, for a node that runs a whole node before the lookup
/// (`ip4-input`, `vxlan4-encap`): the table's address is held in a register, not reloaded per
/// packet, and the line is fetched into the second-level cache only (`prefetcht1`), so that the
/// memory latency of each miss does not hold one of the first level's few miss buffers, which
/// the nodes in between need for the packets themselves.
#[derive(Clone, Copy)]
pub struct LinePrefetcher<'a> {
    lines: *const u8,
    _table: std::marker::PhantomData<&'a LpmTable>,
}

impl LinePrefetcher<'_> {
    /// Hints the CPU to fetch the line a lookup of `addr` reads (no load: it never stalls).
    #[inline(always)]
    pub fn prefetch(self, addr: u32) {
        let p = self
            .lines
            .wrapping_add((addr >> 15) as usize * LINE_WORDS * 8);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint: it neither faults nor changes memory, for any address.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::x86_64::_mm_prefetch(p.cast::<i8>(), core::arch::x86_64::_MM_HINT_T1);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }
}

/// The entry for `addr` in a line in place (whose word 0 is `w0`), and the line's base.
#[inline(always)]
fn in_line(line: &[AtomicU64; LINE_WORDS], w0: u64, addr: u32) -> (u16, usize) {
    let load = |k: usize| line[k].load(Ordering::Relaxed);
    let i = run_of(w0, load(1), addr >> 8);
    // A well-formed line has at most 24 runs; anything else reads as "no route".
    let e = line
        .get(2 + i / 4)
        .map_or(0, |w| w.load(Ordering::Relaxed) >> (16 * (i % 4)));
    (e as u16, (load(LINE_WORDS - 1) >> 32) as usize)
}

/// Word `k` of the node memory (0 for an offset outside it, which a correct writer never
/// stores: it reads as "no route").
#[inline(always)]
fn word(nodes: &[AtomicU64], k: usize) -> u64 {
    nodes.get(k).map_or(0, |w| w.load(Ordering::Relaxed))
}

/// The entry for `addr` in the block at `block`, and the block's base (its start).
#[inline(always)]
fn in_block(nodes: &[AtomicU64], block: usize, addr: u32) -> (u16, usize) {
    let i = run_of(word(nodes, block), word(nodes, block + 1), addr >> 8);
    let at = block.wrapping_add(BLOCK_HEADER + i / 4);
    ((word(nodes, at) >> (16 * (i % 4))) as u16, block)
}

/// The route entry for `addr` in the /24 node at `node`.
#[inline(always)]
fn in_node(nodes: &[AtomicU64], node: usize, addr: u32) -> u16 {
    let j = addr & 0xff;
    let w = (j >> 6) as usize;
    // The bitmap word holding j, shifted so that only bits 0..=j remain (at the top).
    let upto = word(nodes, node + 1 + w) << (63 - (j & 63));
    let run = ((word(nodes, node) >> (8 * w)) & 0xff) as usize + upto.count_ones() as usize;
    // Bit 0 of a node's bitmap is always set, so `run` is at least 1.
    let i = run.wrapping_sub(1);
    (word(nodes, node.wrapping_add(NODE_HEADER + i / 4)) >> (16 * (i % 4))) as u16
}

/// Hints the CPU to fetch the two cache lines from a node's or block's start.
#[inline(always)]
fn prefetch_node(nodes: &[AtomicU64], at: usize) {
    let p = nodes.as_ptr().wrapping_add(at);
    prefetch(p);
    prefetch(p.wrapping_add(8));
}
