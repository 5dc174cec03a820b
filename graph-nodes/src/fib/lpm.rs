//! IPv4 longest-prefix match: a DIR-24-8 table updated in place, read by workers without locks.
//!
//! `tbl24` has one 32-bit entry per /24 (64 MiB, hugepage-backed when possible); an entry either
//! holds a result directly or points at a 256-entry `tbl8` group for prefixes longer than /24. A
//! lookup is one load, or two for addresses under a long prefix. Every entry records the depth of
//! the rule that set it, so adds and deletes are incremental: an add overwrites only entries set
//! by shorter rules; a delete restores the entries it set to the longest remaining covering rule.
//!
//! Writers are single (the control side, `&mut self`); readers (workers) use [`LpmTable::lookup`]
//! through a shared [`Arc<LpmTable>`] at any time. Entries change by single atomic stores, so a
//! reader sees the old or the new result, never a mix. A new tbl8 group is filled before the
//! tbl24 entry pointing at it is stored (Release; readers load it with Acquire). A group that a
//! delete makes unnecessary is unlinked and parked in `retired`; it becomes reusable only through
//! [`Lpm::recycle_retired`], which the caller invokes after every reader has passed a quiescent
//! state (see `dataplane::Epochs::synchronize`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use dataplane::memory::{HugepagePolicy, Region};

const VALID: u32 = 1 << 31;
const GROUP: u32 = 1 << 30;
const DEPTH_SHIFT: u32 = 24;
const VALUE_MASK: u32 = (1 << 24) - 1;

/// The largest value a route can carry (values are 24 bits).
pub const MAX_VALUE: u32 = VALUE_MASK;

#[inline(always)]
fn depth_of(e: u32) -> u8 {
    ((e >> DEPTH_SHIFT) & 0x3f) as u8
}

#[inline(always)]
fn leaf(depth: u8, value: u32) -> u32 {
    VALID | (depth as u32) << DEPTH_SHIFT | value
}

/// Why a route could not be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LpmError {
    /// Prefix length over 32.
    #[error("prefix length {0} is over 32")]
    BadLength(u8),
    /// Value over 24 bits.
    #[error("route value {0} does not fit in 24 bits")]
    BadValue(u32),
    /// No free tbl8 group for a prefix longer than /24.
    #[error("no free tbl8 group for a prefix longer than /24 (all {0} in use)")]
    NoGroups(u32),
    /// The table's memory could not be mapped.
    #[error("cannot map the table: {0}")]
    Memory(String),
}

/// The lookup side: shared with every worker.
pub struct LpmTable {
    _tbl24_mem: Region,
    _tbl8_mem: Region,
    groups: u32,
}

impl LpmTable {
    #[inline(always)]
    fn tbl24(&self) -> &[AtomicU32] {
        // Cannot fail: the region was sized for exactly 2^24 words.
        self._tbl24_mem.as_atomic_u32()
    }

    #[inline(always)]
    fn tbl8(&self) -> &[AtomicU32] {
        self._tbl8_mem.as_atomic_u32()
    }

    /// The value of the longest prefix matching `addr`.
    #[inline(always)]
    pub fn lookup(&self, addr: u32) -> Option<u32> {
        let e = self.tbl24()[(addr >> 8) as usize].load(Ordering::Acquire);
        let e = if e & GROUP != 0 {
            let i = ((e & VALUE_MASK) as usize) << 8 | (addr & 0xff) as usize;
            match self.tbl8().get(i) {
                Some(x) => x.load(Ordering::Relaxed),
                None => 0,
            }
        } else {
            e
        };
        (e & VALID != 0).then_some(e & VALUE_MASK)
    }

    /// Hints the CPU to fetch the tbl24 entry for `addr` (batch lookups prefetch ahead).
    #[inline(always)]
    pub fn prefetch(&self, addr: u32) {
        let p = &self.tbl24()[(addr >> 8) as usize] as *const AtomicU32;
        prefetch(p.cast());
    }

    /// Looks up every address of `addrs` into `out` (`u32::MAX` for no route), prefetching
    /// ahead so that several table misses overlap.
    #[inline]
    pub fn lookup_batch(&self, addrs: &[u32], out: &mut [u32]) {
        const AHEAD: usize = 8;
        for &a in addrs.iter().take(AHEAD) {
            self.prefetch(a);
        }
        for (i, (&a, o)) in addrs.iter().zip(out.iter_mut()).enumerate() {
            if let Some(&next) = addrs.get(i + AHEAD) {
                self.prefetch(next);
            }
            *o = self.lookup(a).unwrap_or(u32::MAX);
        }
    }

    /// tbl8 groups this table has.
    pub fn group_capacity(&self) -> u32 {
        self.groups
    }
}

#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it never faults and never changes memory.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_mm_prefetch(p.cast::<i8>(), core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The writer side: the rules, the free groups, and the shared table.
pub struct Lpm {
    table: Arc<LpmTable>,
    /// Rules by depth: prefix (masked) → value.
    rules: Vec<HashMap<u32, u32>>,
    free_groups: Vec<u32>,
    retired: Vec<u32>,
}

/// The mask of a prefix length.
#[inline]
pub fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len as u32)
    }
}

impl Lpm {
    /// An empty table with room for `groups` tbl8 groups (prefixes longer than /24 need one per
    /// distinct /24 they fall in).
    pub fn new(groups: u32, hugepages: HugepagePolicy) -> Result<Lpm, LpmError> {
        let groups = groups.clamp(1, VALUE_MASK);
        let tbl24 = Region::map(4 << 24, hugepages).map_err(|e| LpmError::Memory(e.to_string()))?;
        let tbl8 = Region::map(groups as usize * 256 * 4, hugepages)
            .map_err(|e| LpmError::Memory(e.to_string()))?;
        Ok(Lpm {
            table: Arc::new(LpmTable {
                _tbl24_mem: tbl24,
                _tbl8_mem: tbl8,
                groups,
            }),
            rules: vec![HashMap::new(); 33],
            free_groups: (0..groups).rev().collect(),
            retired: Vec::new(),
        })
    }

    /// The shared lookup table.
    pub fn table(&self) -> &Arc<LpmTable> {
        &self.table
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.rules.iter().map(HashMap::len).sum()
    }

    /// Whether there are no routes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of the route `prefix/len`, if there is one.
    pub fn get(&self, prefix: u32, len: u8) -> Option<u32> {
        self.rules
            .get(len as usize)?
            .get(&(prefix & mask(len)))
            .copied()
    }

    /// Groups unlinked by deletes, waiting for [`Lpm::recycle_retired`].
    pub fn retired_groups(&self) -> usize {
        self.retired.len()
    }

    /// Groups in use.
    pub fn groups_in_use(&self) -> u32 {
        self.table.groups - self.free_groups.len() as u32 - self.retired.len() as u32
    }

    /// Makes groups unlinked by earlier deletes reusable. Call only once every reader has passed
    /// a quiescent state since those deletes.
    pub fn recycle_retired(&mut self) {
        self.free_groups.append(&mut self.retired);
    }

    /// Adds or replaces the route `prefix/len` with `value`.
    pub fn insert(&mut self, prefix: u32, len: u8, value: u32) -> Result<(), LpmError> {
        if len > 32 {
            return Err(LpmError::BadLength(len));
        }
        if value > VALUE_MASK {
            return Err(LpmError::BadValue(value));
        }
        let prefix = prefix & mask(len);
        let new = leaf(len, value);
        let t = self.table.clone();
        if len <= 24 {
            let first = (prefix >> 8) as usize;
            let count = 1usize << (24 - len);
            for e in &t.tbl24()[first..first + count] {
                let cur = e.load(Ordering::Relaxed);
                if cur & GROUP != 0 {
                    let g = (cur & VALUE_MASK) as usize;
                    for x in &t.tbl8()[g << 8..(g + 1) << 8] {
                        if depth_of(x.load(Ordering::Relaxed)) <= len {
                            x.store(new, Ordering::Relaxed);
                        }
                    }
                } else if cur & VALID == 0 || depth_of(cur) <= len {
                    e.store(new, Ordering::Release);
                }
            }
        } else {
            let slot = &t.tbl24()[(prefix >> 8) as usize];
            let cur = slot.load(Ordering::Relaxed);
            let g = if cur & GROUP != 0 {
                (cur & VALUE_MASK) as usize
            } else {
                let g = self.free_groups.pop().ok_or(LpmError::NoGroups(t.groups))? as usize;
                // Fill the group with what the /24 holds now, then link it.
                for x in &t.tbl8()[g << 8..(g + 1) << 8] {
                    x.store(cur, Ordering::Relaxed);
                }
                slot.store(GROUP | g as u32, Ordering::Release);
                g
            };
            let first = (g << 8) | (prefix & 0xff) as usize;
            let count = 1usize << (32 - len);
            for x in &t.tbl8()[first..first + count] {
                let c = x.load(Ordering::Relaxed);
                if c & VALID == 0 || depth_of(c) <= len {
                    x.store(new, Ordering::Release);
                }
            }
        }
        self.rules[len as usize].insert(prefix, value);
        Ok(())
    }

    /// Removes the route `prefix/len`; returns its value, or `None` when there was none.
    pub fn remove(&mut self, prefix: u32, len: u8) -> Option<u32> {
        if len > 32 {
            return None;
        }
        let prefix = prefix & mask(len);
        let value = self.rules[len as usize].remove(&prefix)?;
        // What covers this prefix once it is gone: the longest shorter rule.
        let replacement = (0..len)
            .rev()
            .find_map(|d| {
                self.rules[d as usize]
                    .get(&(prefix & mask(d)))
                    .map(|&v| leaf(d, v))
            })
            .unwrap_or(0);
        let t = self.table.clone();
        if len <= 24 {
            let first = (prefix >> 8) as usize;
            let count = 1usize << (24 - len);
            for e in &t.tbl24()[first..first + count] {
                let cur = e.load(Ordering::Relaxed);
                if cur & GROUP != 0 {
                    let g = (cur & VALUE_MASK) as usize;
                    for x in &t.tbl8()[g << 8..(g + 1) << 8] {
                        let c = x.load(Ordering::Relaxed);
                        if c & VALID != 0 && depth_of(c) == len {
                            x.store(replacement, Ordering::Relaxed);
                        }
                    }
                } else if cur & VALID != 0 && depth_of(cur) == len {
                    e.store(replacement, Ordering::Release);
                }
            }
        } else {
            let slot = &t.tbl24()[(prefix >> 8) as usize];
            let cur = slot.load(Ordering::Relaxed);
            if cur & GROUP != 0 {
                let g = (cur & VALUE_MASK) as usize;
                let group = &t.tbl8()[g << 8..(g + 1) << 8];
                let first = (prefix & 0xff) as usize;
                for x in &group[first..first + (1usize << (32 - len))] {
                    let c = x.load(Ordering::Relaxed);
                    if c & VALID != 0 && depth_of(c) == len {
                        x.store(replacement, Ordering::Relaxed);
                    }
                }
                // A group whose entries all come from /24-or-shorter rules is no longer needed.
                let e0 = group[0].load(Ordering::Relaxed);
                let uniform = (e0 & VALID == 0 || depth_of(e0) <= 24)
                    && group.iter().all(|x| x.load(Ordering::Relaxed) == e0);
                if uniform {
                    slot.store(e0, Ordering::Release);
                    self.retired.push(g as u32);
                }
            }
        }
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
        u32::from_be_bytes([a, b, c, d])
    }

    #[test]
    fn longest_prefix_wins_and_deletes_restore_the_cover() {
        let mut l = Lpm::new(16, HugepagePolicy::Never).unwrap();
        let t = l.table().clone();
        assert_eq!(t.lookup(ip(10, 1, 2, 3)), None);
        l.insert(0, 0, 1).unwrap();
        l.insert(ip(10, 0, 0, 0), 8, 2).unwrap();
        l.insert(ip(10, 1, 2, 0), 24, 3).unwrap();
        l.insert(ip(10, 1, 2, 128), 25, 4).unwrap();
        l.insert(ip(10, 1, 2, 3), 32, 5).unwrap();
        assert_eq!(t.lookup(ip(10, 1, 2, 3)), Some(5));
        assert_eq!(t.lookup(ip(10, 1, 2, 4)), Some(3));
        assert_eq!(t.lookup(ip(10, 1, 2, 200)), Some(4));
        assert_eq!(t.lookup(ip(10, 9, 9, 9)), Some(2));
        assert_eq!(t.lookup(ip(11, 0, 0, 0)), Some(1));
        // A shorter route added later does not override longer ones.
        l.insert(ip(10, 1, 0, 0), 16, 6).unwrap();
        assert_eq!(t.lookup(ip(10, 1, 2, 3)), Some(5));
        assert_eq!(t.lookup(ip(10, 1, 3, 3)), Some(6));
        assert_eq!(l.remove(ip(10, 1, 2, 3), 32), Some(5));
        assert_eq!(t.lookup(ip(10, 1, 2, 3)), Some(3));
        assert_eq!(l.remove(ip(10, 1, 2, 128), 25), Some(4));
        assert_eq!(t.lookup(ip(10, 1, 2, 200)), Some(3));
        assert_eq!(l.retired_groups(), 1, "the group is no longer needed");
        assert_eq!(l.remove(ip(10, 1, 2, 0), 24), Some(3));
        assert_eq!(t.lookup(ip(10, 1, 2, 200)), Some(6));
        assert_eq!(l.remove(ip(10, 1, 2, 0), 24), None);
        assert_eq!(l.insert(0, 33, 1), Err(LpmError::BadLength(33)));
        assert_eq!(l.insert(0, 8, 1 << 24), Err(LpmError::BadValue(1 << 24)));
    }

    #[test]
    fn running_out_of_groups_is_an_error() {
        let mut l = Lpm::new(1, HugepagePolicy::Never).unwrap();
        l.insert(ip(1, 1, 1, 1), 32, 1).unwrap();
        assert_eq!(l.insert(ip(2, 2, 2, 2), 32, 1), Err(LpmError::NoGroups(1)));
        l.remove(ip(1, 1, 1, 1), 32);
        assert_eq!(
            l.insert(ip(2, 2, 2, 2), 32, 1),
            Err(LpmError::NoGroups(1)),
            "retired, not free"
        );
        l.recycle_retired();
        l.insert(ip(2, 2, 2, 2), 32, 1).unwrap();
        assert_eq!(l.table().lookup(ip(2, 2, 2, 2)), Some(1));
    }
}
