//! The lookup side of the IPv6 FIB, shared with every worker: a root array indexed by the top
//! 16 bits of the address, then nodes of 8 bits each, compressed into runs.
//!
//! **Root.** 65536 words (512 KiB), word `addr >> 112` for the /16 holding `addr`. The low 32
//! bits are an *entry*, the high 32 bits the value a lookup falls back on below it (the longest
//! route of /0–/16 covering the /16, as value + 1; 0 = none).
//!
//! **Entries** (32 bits): `0` = no route, `1..=0x7fff` = value + 1, or [`CHILD`] | the line
//! (64-byte unit of the node memory) where the node for the next 8 bits starts.
//!
//! **Nodes.** A node at depth `d` (16, 24, …, 120) stands for the 256 prefixes of length `d + 8`
//! below its own, as runs (the IPv4 table's /24 node layout): word 0 holds the node's default
//! (value + 1 of the longest route of its parent's 8 bits covering it, 0 = none) in bits 0–15
//! and, in byte `k` from bit 24, the bits set in bitmap words before word `k`; words 1–4 are a
//! 256-bit bitmap marking each prefix whose entry differs from the one before it; the runs'
//! entries follow, two per word. Prefix number `j` has entry `rank(j) − 1`. A node of up to six
//! runs is one cache line; nodes start on a line.
//!
//! A lookup reads the root word, then one node per 8 bits while the entry is a child, keeping
//! the last non-zero default it passed: the result is the first entry holding a route, or that
//! default when the entry is `0`. With 1M routes shaped like a real IPv6 table a /48 is four
//! nodes below the root; the upper ones stay in cache.
//!
//! **Changes.** Nodes are never written while a reader can reach them. A change writes new
//! copies of the nodes it touches and of their ancestors (sharing everything else), then
//! switches the /16's root word with one store (Release; readers load it with Acquire): a reader
//! sees the /16 as before or as after, never a mix. The copies it replaced are reused only once
//! every reader has passed a quiescent state (`Lpm6::recycle_retired`).

use std::sync::atomic::{AtomicU64, Ordering};

use dataplane::memory::{prefetch, Region};

/// Bits the root indexes.
pub(super) const ROOT_BITS: u32 = 16;
/// Words of the root.
pub(super) const ROOT_ENTRIES: usize = 1 << ROOT_BITS;
/// Entry flag: the rest is a node's line.
pub(super) const CHILD: u32 = 1 << 31;
/// Words of a node before its entries: the header and the bitmap.
pub(super) const NODE_HEADER: usize = 5;
/// Node levels below the root (depths 16, 24, …, 120).
pub(super) const LEVELS: usize = (128 - ROOT_BITS as usize) / 8;

/// What of an entry names a line, by its top bit: nothing of a route (so that a lookup that
/// ends prefetches line 0, always cached), all of a child's.
const CHILD_MASK: [u32; 2] = [0, u32::MAX];

/// How many lookups ahead a batch prefetches root words.
const PREFETCH_AHEAD: usize = 16;
/// Lookups a batch keeps in flight at most (the rest of a longer batch waits for the next).
const BATCH: usize = 256;

/// The shared lookup table.
pub struct Lpm6Table {
    root_mem: Region,
    nodes_mem: Region,
    popcnt: bool,
}

/// A route entry (`0` = none, else value + 1) as a lookup result (`u32::MAX` = none).
#[inline(always)]
fn decode(e: u32) -> u32 {
    e.wrapping_sub(1)
}

/// The root word of `addr`.
#[inline(always)]
pub(super) fn root_index(addr: u128) -> usize {
    (addr >> (128 - ROOT_BITS)) as usize
}

/// The 8 bits of `addr` a node at level `level` (depth 16 + 8 × level) is indexed by.
#[inline(always)]
fn byte_at(addr: u128, level: usize) -> u32 {
    (addr >> (128 - ROOT_BITS as usize - 8 - 8 * level)) as u32 & 0xff
}

impl Lpm6Table {
    pub(super) fn new(root_mem: Region, nodes_mem: Region) -> Lpm6Table {
        Lpm6Table {
            root_mem,
            nodes_mem,
            #[cfg(target_arch = "x86_64")]
            popcnt: std::arch::is_x86_feature_detected!("popcnt"),
            #[cfg(not(target_arch = "x86_64"))]
            popcnt: false,
        }
    }

    /// The root's words.
    #[inline(always)]
    pub(super) fn root(&self) -> &[AtomicU64; ROOT_ENTRIES] {
        self.root_mem.as_atomic_u64()[..ROOT_ENTRIES]
            .try_into()
            .expect("the root region holds 512 KiB")
    }

    /// The node memory's words: line `l` is `[l * 8, l * 8 + 8)`.
    #[inline(always)]
    pub(super) fn nodes(&self) -> &[AtomicU64] {
        self.nodes_mem.as_atomic_u64()
    }

    /// Bytes mapped for the table (root and node memory, whatever is in use).
    pub fn mapped_bytes(&self) -> u64 {
        (self.root_mem.len() + self.nodes_mem.len()) as u64
    }

    /// Whether both regions live in hugepages.
    pub fn is_hugepage_backed(&self) -> bool {
        self.root_mem.is_hugepage_backed() && self.nodes_mem.is_hugepage_backed()
    }

    /// The value of the longest prefix matching `addr`.
    #[inline]
    pub fn lookup(&self, addr: u128) -> Option<u32> {
        let nodes = self.nodes();
        let re = self.root()[root_index(addr)].load(Ordering::Acquire);
        let (mut e, mut best) = (re as u32, (re >> 32) as u32);
        for level in 0..LEVELS {
            if e & CHILD == 0 {
                break;
            }
            let (entry, default) = locate(nodes, line_word(e), byte_at(addr, level));
            if default != 0 {
                best = default;
            }
            e = (word(nodes, entry / 2) >> (32 * (entry % 2))) as u32;
        }
        // An entry still naming a child here (never, from a correct writer) reads as the default.
        let v = if e != 0 && e & CHILD == 0 { e } else { best };
        (v != 0).then(|| v - 1)
    }

    /// Looks up every address of `addrs` into `out` (`u32::MAX` for no route), keeping many
    /// cache misses in flight: the batch goes down the trie one level at a time in two passes,
    /// one over the nodes' headers (finding each entry and prefetching it), one over the entries
    /// (prefetching each next node), so that every read was prefetched a pass before.
    #[inline]
    pub fn lookup_batch(&self, addrs: &[u128], out: &mut [u32]) {
        #[cfg(target_arch = "x86_64")]
        if self.popcnt {
            // SAFETY: the CPU has `popcnt` (detected when the table was made), the only
            // requirement of `lookup_batch_popcnt`.
            unsafe { self.lookup_batch_popcnt(addrs, out) };
            return;
        }
        self.lookup_batch_any(addrs, out);
    }

    /// [`Lpm6Table::lookup_batch`] compiled with the `popcnt` instruction.
    ///
    /// # Safety
    /// The CPU must have `popcnt`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    unsafe fn lookup_batch_popcnt(&self, addrs: &[u128], out: &mut [u32]) {
        self.lookup_batch_any(addrs, out);
    }

    #[inline(always)]
    fn lookup_batch_any(&self, addrs: &[u128], out: &mut [u32]) {
        for (addrs, out) in addrs.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            self.lookup_some(addrs, out);
        }
    }

    /// One batch of at most [`BATCH`] lookups.
    #[inline(always)]
    fn lookup_some(&self, addrs: &[u128], out: &mut [u32]) {
        let n = addrs.len().min(out.len()).min(BATCH);
        let (addrs, out) = (&addrs[..n], &mut out[..n]);
        let (root, nodes) = (self.root(), self.nodes());
        for &a in addrs.iter().take(PREFETCH_AHEAD) {
            prefetch(&root[root_index(a)]);
        }
        // Lookups still going down: their index, the word of their next node, their default.
        let mut pending = [0u8; BATCH];
        let mut at = [0u32; BATCH];
        let mut best = [0u32; BATCH];
        let mut count = 0;
        // No branch depends on the table's contents: every lookup writes its result (a child's
        // is overwritten later) and is kept in the pending list only if it goes on.
        for (i, (&a, o)) in addrs.iter().zip(out.iter_mut()).enumerate() {
            if let Some(&ahead) = addrs.get(i + PREFETCH_AHEAD) {
                prefetch(&root[root_index(ahead)]);
            }
            let re = root[root_index(a)].load(Ordering::Acquire);
            let e = re as u32;
            *o = decode(e);
            let w = line_word(e & CHILD_MASK[(e >> 31) as usize]);
            prefetch_node(nodes, w);
            if let (Some(p), Some(t), Some(b)) = (
                pending.get_mut(count),
                at.get_mut(count),
                best.get_mut(count),
            ) {
                (*p, *t, *b) = (i as u8, w as u32, (re >> 32) as u32);
            }
            count += (e >> 31) as usize;
        }
        for level in 0..LEVELS {
            if count == 0 {
                break;
            }
            let count_now = count.min(BATCH);
            // First pass: each node's header and bitmap (prefetched) give the entry's place,
            // which is prefetched in turn (a node of more than six runs spans lines).
            for k in 0..count_now {
                let (i, w) = (pending[k] as usize, at[k] as usize);
                let Some(&a) = addrs.get(i) else {
                    continue;
                };
                let (entry, default) = locate(nodes, w, byte_at(a, level));
                prefetch_node(nodes, entry / 2);
                at[k] = entry as u32;
                if default != 0 {
                    best[k] = default;
                }
            }
            // Second pass: the entries.
            let mut kept = 0;
            for k in 0..count_now {
                let (i, entry, b) = (pending[k] as usize, at[k] as usize, best[k]);
                let Some(o) = out.get_mut(i) else {
                    continue;
                };
                let e = (word(nodes, entry / 2) >> (32 * (entry % 2))) as u32;
                *o = decode(if e != 0 { e } else { b });
                let w = line_word(e & CHILD_MASK[(e >> 31) as usize]);
                prefetch_node(nodes, w);
                // `kept` ≤ `k`: the slot was read above.
                (pending[kept], at[kept], best[kept]) = (i as u8, w as u32, b);
                kept += (e >> 31) as usize;
            }
            count = kept;
        }
        // Lookups still pending here met a malformed chain (never, from a correct writer).
        for &i in &pending[..count.min(BATCH)] {
            if let Some(o) = out.get_mut(i as usize) {
                *o = u32::MAX;
            }
        }
    }

    /// A handle that prefetches the first node of lookups a whole node later (see
    /// [`Lpm6Prefetcher`]).
    #[inline(always)]
    pub fn prefetcher(&self) -> Lpm6Prefetcher<'_> {
        Lpm6Prefetcher {
            root: self.root(),
            nodes: self.nodes_mem.base().as_ptr(),
        }
    }
}

/// Prefetches for lookups to come, for a node that runs a whole node before the lookup
/// (`ip6-input`): it reads the address's root word (512 KiB in all, which stays in cache) and
/// hints the CPU to fetch the first node below it into the second-level cache (`prefetcht1`),
/// so that the node's miss does not hold one of the first level's few miss buffers while the
/// nodes in between work on the packets themselves.
#[derive(Clone, Copy)]
pub struct Lpm6Prefetcher<'a> {
    root: &'a [AtomicU64; ROOT_ENTRIES],
    nodes: *const u8,
}

impl Lpm6Prefetcher<'_> {
    /// Reads `addr`'s root word and hints the CPU to fetch the node it names, if any (a hint
    /// only: it never faults, whatever the word holds).
    #[inline(always)]
    pub fn prefetch(self, addr: u128) {
        let e = self.root[root_index(addr)].load(Ordering::Relaxed) as u32;
        if e & CHILD == 0 {
            return;
        }
        let p = self.nodes.wrapping_add(line_word(e) * 8);
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

/// The first word of the node a child entry names.
#[inline(always)]
fn line_word(e: u32) -> usize {
    (e & !CHILD) as usize * 8
}

/// Word `k` of the node memory (0 for an offset outside it, which a correct writer never
/// stores: it reads as "no route").
#[inline(always)]
fn word(nodes: &[AtomicU64], k: usize) -> u64 {
    nodes.get(k).map_or(0, |w| w.load(Ordering::Relaxed))
}

/// Where the entry for prefix number `j` of the node at word `at` is (an index of the node
/// memory's 32-bit halves), and the node's default.
#[inline(always)]
fn locate(nodes: &[AtomicU64], at: usize, j: u32) -> (usize, u32) {
    let h = word(nodes, at);
    let w = (j >> 6) as usize;
    // The bitmap word holding j, shifted so that only bits 0..=j remain (at the top).
    let upto = word(nodes, at.wrapping_add(1 + w)) << (63 - (j & 63));
    let run = ((h >> (24 + 8 * w)) & 0xff) as usize + upto.count_ones() as usize;
    // Bit 0 of a node's bitmap is always set, so `run` is at least 1.
    let i = run.wrapping_sub(1);
    (
        at.wrapping_add(NODE_HEADER).wrapping_mul(2).wrapping_add(i),
        (h & 0xffff) as u32,
    )
}

/// Hints the CPU to fetch the cache line holding word `at` of the node memory into the
/// second-level cache.
#[inline(always)]
fn prefetch_node(nodes: &[AtomicU64], at: usize) {
    let p = nodes.as_ptr().wrapping_add(at);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it neither faults nor changes memory, for any address.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_mm_prefetch(p.cast::<i8>(), core::arch::x86_64::_MM_HINT_T1);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
