//! IPv4 longest-prefix match: a DIR-24-8 table updated in place, read by workers without locks.
//!
//! `tbl24` has one 16-bit entry per /24 (32 MiB, so that much of it stays in a server's L3
//! cache; hugepage-backed when possible). An entry holds a route's value directly, or points at
//! a 256-entry `tbl8` group for prefixes longer than /24. A lookup is one load, or two for
//! addresses under a long prefix.
//!
//! Entry encoding: `0` = no route; `1..=0x7fff` = value + 1; `0x8000 | g` = tbl8 group `g` of
//! the bank named by the address's top two bits (four banks of 32768 groups, so a 15-bit index
//! reaches 131072 groups; a /24 always lies in one bank). tbl8 entries hold values only. Every
//! bank can use all its groups (routes may crowd into one part of the address space); the
//! configured group count caps how many are in use in all.
//!
//! The depth of the rule that set each entry lives in writer-only shadow arrays, so adds and
//! deletes are incremental (an add overwrites only entries set by shorter rules; a delete
//! restores the entries it set to the longest remaining covering rule) without costing readers
//! any cache.
//!
//! Writers are single (the control side, `&mut self`); readers (workers) use [`LpmTable::lookup`]
//! through a shared [`Arc<LpmTable>`] at any time. Entries change by single atomic stores, so a
//! reader sees the old or the new result, never a mix. A new tbl8 group is filled before the
//! tbl24 entry pointing at it is stored (Release; readers load it with Acquire). A group that a
//! delete makes unnecessary is unlinked and parked in `retired`; it becomes reusable only through
//! [`Lpm::recycle_retired`], which the caller invokes after every reader has passed a quiescent
//! state (see `dataplane::Epochs::synchronize`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use dataplane::memory::{prefetch, HugepagePolicy, Region};

const GROUP: u16 = 0x8000;
const BANKS: usize = 4;
const GROUPS_PER_BANK: usize = 0x8000;

/// The largest value a route can carry (values are 15 bits).
pub const MAX_VALUE: u32 = 0x7ffe;

/// The bank of groups an address's /24 uses.
#[inline(always)]
fn bank_of(addr: u32) -> usize {
    (addr >> 30) as usize
}

/// Why a route could not be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LpmError {
    /// Prefix length over 32.
    #[error("prefix length {0} is over 32")]
    BadLength(u8),
    /// Value over 15 bits.
    #[error("route value {0} is over the largest, {MAX_VALUE}")]
    BadValue(u32),
    /// No free tbl8 group for a prefix longer than /24.
    #[error("no free tbl8 group for a prefix longer than /24 (limit {0} in use, or 32768 in this quarter of the address space)")]
    NoGroups(u32),
    /// The table's memory could not be mapped.
    #[error("cannot map the table: {0}")]
    Memory(String),
}

/// The lookup side: shared with every worker.
pub struct LpmTable {
    tbl24_mem: Region,
    tbl8_mem: Region,
}

impl LpmTable {
    #[inline(always)]
    fn tbl24(&self) -> &[AtomicU16] {
        self.tbl24_mem.as_atomic_u16()
    }

    #[inline(always)]
    fn tbl8(&self) -> &[AtomicU16] {
        self.tbl8_mem.as_atomic_u16()
    }

    /// Index of entry `low` of group `g` of `bank` in tbl8.
    #[inline(always)]
    fn tbl8_index(&self, bank: usize, g: u16, low: u32) -> usize {
        ((bank * GROUPS_PER_BANK + (g & !GROUP) as usize) << 8) | low as usize
    }

    #[inline(always)]
    fn decode(e: u16) -> u32 {
        if e == 0 {
            u32::MAX
        } else {
            e as u32 - 1
        }
    }

    /// The value of the longest prefix matching `addr`.
    #[inline(always)]
    pub fn lookup(&self, addr: u32) -> Option<u32> {
        let tbl24 = self.tbl24();
        let mut e = tbl24[(addr >> 8) as usize & 0xff_ffff].load(Ordering::Acquire);
        if e & GROUP != 0 {
            let i = self.tbl8_index(bank_of(addr), e, addr & 0xff);
            e = self.tbl8().get(i).map_or(0, |x| x.load(Ordering::Relaxed));
        }
        (e != 0).then(|| e as u32 - 1)
    }

    /// Looks up every address of `addrs` into `out` (`u32::MAX` for no route). The batch is
    /// done in stages so that many table misses are in flight at once: prefetch every tbl24
    /// entry; resolve the direct ones while prefetching the tbl8 entries the others need;
    /// resolve those.
    #[inline]
    pub fn lookup_batch(&self, addrs: &[u32], out: &mut [u32]) {
        let n = addrs.len().min(out.len());
        let (addrs, out) = (&addrs[..n], &mut out[..n]);
        let tbl24 = self.tbl24();
        let tbl8 = self.tbl8();
        for &a in addrs {
            prefetch(&tbl24[(a >> 8) as usize & 0xff_ffff] as *const AtomicU16);
        }
        let mut pending = false;
        for (&a, o) in addrs.iter().zip(out.iter_mut()) {
            let e = tbl24[(a >> 8) as usize & 0xff_ffff].load(Ordering::Acquire);
            if e & GROUP != 0 {
                let i = self.tbl8_index(bank_of(a), e, a & 0xff);
                if let Some(x) = tbl8.get(i) {
                    prefetch(x as *const AtomicU16);
                }
                // Park the tbl8 index; values never reach this range.
                *o = 0x8000_0000 | i as u32;
                pending = true;
            } else {
                *o = Self::decode(e);
            }
        }
        if pending {
            for o in out.iter_mut() {
                if *o != u32::MAX && *o & 0x8000_0000 != 0 {
                    let i = (*o & 0x7fff_ffff) as usize;
                    *o = Self::decode(tbl8.get(i).map_or(0, |x| x.load(Ordering::Relaxed)));
                }
            }
        }
    }

    /// Hints the CPU to fetch the tbl24 entry for `addr`.
    #[inline(always)]
    pub fn prefetch(&self, addr: u32) {
        prefetch(&self.tbl24()[(addr >> 8) as usize & 0xff_ffff] as *const AtomicU16);
    }

    /// Whether both tables live in hugepages.
    pub fn is_hugepage_backed(&self) -> bool {
        self.tbl24_mem.is_hugepage_backed() && self.tbl8_mem.is_hugepage_backed()
    }

    /// tbl8 groups this table has room for (all banks).
    pub fn group_capacity(&self) -> u32 {
        (GROUPS_PER_BANK * BANKS) as u32
    }
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

/// The writer side: the rules, the depths, the free groups, and the shared table.
pub struct Lpm {
    table: Arc<LpmTable>,
    /// Rules by depth: prefix (masked) → value.
    rules: Vec<HashMap<u32, u32>>,
    /// Depth of the rule that set each tbl24 entry (meaningful when it holds a value).
    depth24: Box<[u8]>,
    /// Depth of the rule that set each tbl8 entry.
    depth8: Box<[u8]>,
    free_groups: [Vec<u16>; BANKS],
    retired: [Vec<u16>; BANKS],
    group_limit: u32,
    groups_used: u32,
}

impl Lpm {
    /// An empty table that uses at most `groups` tbl8 groups (prefixes longer than /24 need
    /// one per distinct /24 they fall in; at most 131072, at most 32768 per quarter of the
    /// address space).
    pub fn new(groups: u32, hugepages: HugepagePolicy) -> Result<Lpm, LpmError> {
        let total = GROUPS_PER_BANK * BANKS;
        let tbl24 = Region::map(2 << 24, hugepages).map_err(|e| LpmError::Memory(e.to_string()))?;
        let tbl8 =
            Region::map(total * 256 * 2, hugepages).map_err(|e| LpmError::Memory(e.to_string()))?;
        Ok(Lpm {
            table: Arc::new(LpmTable {
                tbl24_mem: tbl24,
                tbl8_mem: tbl8,
            }),
            rules: vec![HashMap::new(); 33],
            depth24: vec![0; 1 << 24].into_boxed_slice(),
            depth8: vec![0; total * 256].into_boxed_slice(),
            free_groups: std::array::from_fn(|_| (0..GROUPS_PER_BANK as u16).rev().collect()),
            retired: std::array::from_fn(|_| Vec::new()),
            group_limit: groups.clamp(1, total as u32),
            groups_used: 0,
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
        self.retired.iter().map(Vec::len).sum()
    }

    /// Groups in use.
    pub fn groups_in_use(&self) -> u32 {
        let idle: usize =
            self.free_groups.iter().map(Vec::len).sum::<usize>() + self.retired_groups();
        self.table.group_capacity() - idle as u32
    }

    /// Makes groups unlinked by earlier deletes reusable. Call only once every reader has passed
    /// a quiescent state since those deletes.
    pub fn recycle_retired(&mut self) {
        for (free, retired) in self.free_groups.iter_mut().zip(&mut self.retired) {
            self.groups_used -= retired.len() as u32;
            free.append(retired);
        }
    }

    /// The tbl8 entries of the group that tbl24 entry `e` (for an address in `bank`) names.
    fn group_range(&self, bank: usize, e: u16) -> std::ops::Range<usize> {
        let first = self.table.tbl8_index(bank, e, 0);
        first..first + 256
    }

    /// Adds or replaces the route `prefix/len` with `value`.
    // One index walks the shared entries and the writer's depth shadow side by side.
    #[allow(clippy::needless_range_loop)]
    pub fn insert(&mut self, prefix: u32, len: u8, value: u32) -> Result<(), LpmError> {
        if len > 32 {
            return Err(LpmError::BadLength(len));
        }
        if value > MAX_VALUE {
            return Err(LpmError::BadValue(value));
        }
        let prefix = prefix & mask(len);
        let new = value as u16 + 1;
        let t = self.table.clone();
        let (tbl24, tbl8) = (t.tbl24(), t.tbl8());
        if len <= 24 {
            let first = (prefix >> 8) as usize;
            for i in first..first + (1usize << (24 - len)) {
                let cur = tbl24[i].load(Ordering::Relaxed);
                if cur & GROUP != 0 {
                    for j in self.group_range(bank_of((i as u32) << 8), cur) {
                        if self.depth8[j] <= len {
                            tbl8[j].store(new, Ordering::Relaxed);
                            self.depth8[j] = len;
                        }
                    }
                } else if self.depth24[i] <= len {
                    tbl24[i].store(new, Ordering::Release);
                    self.depth24[i] = len;
                }
            }
        } else {
            let i = (prefix >> 8) as usize;
            let bank = bank_of(prefix);
            let cur = tbl24[i].load(Ordering::Relaxed);
            let group = if cur & GROUP != 0 {
                cur
            } else {
                if self.groups_used >= self.group_limit {
                    return Err(LpmError::NoGroups(self.group_limit));
                }
                let g = self.free_groups[bank]
                    .pop()
                    .ok_or(LpmError::NoGroups(self.group_limit))?
                    | GROUP;
                self.groups_used += 1;
                // Fill the group with what the /24 holds now, then link it.
                let d = self.depth24[i];
                for j in self.group_range(bank, g) {
                    tbl8[j].store(cur, Ordering::Relaxed);
                    self.depth8[j] = d;
                }
                tbl24[i].store(g, Ordering::Release);
                g
            };
            let first = self.group_range(bank, group).start + (prefix & 0xff) as usize;
            for j in first..first + (1usize << (32 - len)) {
                if self.depth8[j] <= len {
                    tbl8[j].store(new, Ordering::Release);
                    self.depth8[j] = len;
                }
            }
        }
        self.rules[len as usize].insert(prefix, value);
        Ok(())
    }

    /// Removes the route `prefix/len`; returns its value, or `None` when there was none.
    #[allow(clippy::needless_range_loop)]
    pub fn remove(&mut self, prefix: u32, len: u8) -> Option<u32> {
        if len > 32 {
            return None;
        }
        let prefix = prefix & mask(len);
        let value = self.rules[len as usize].remove(&prefix)?;
        // What covers this prefix once it is gone: the longest shorter rule.
        let (rep, rep_depth) = (0..len)
            .rev()
            .find_map(|d| {
                self.rules[d as usize]
                    .get(&(prefix & mask(d)))
                    .map(|&v| (v as u16 + 1, d))
            })
            .unwrap_or((0, 0));
        let t = self.table.clone();
        let (tbl24, tbl8) = (t.tbl24(), t.tbl8());
        if len <= 24 {
            let first = (prefix >> 8) as usize;
            for i in first..first + (1usize << (24 - len)) {
                let cur = tbl24[i].load(Ordering::Relaxed);
                if cur & GROUP != 0 {
                    for j in self.group_range(bank_of((i as u32) << 8), cur) {
                        if tbl8[j].load(Ordering::Relaxed) != 0 && self.depth8[j] == len {
                            tbl8[j].store(rep, Ordering::Relaxed);
                            self.depth8[j] = rep_depth;
                        }
                    }
                } else if cur != 0 && self.depth24[i] == len {
                    tbl24[i].store(rep, Ordering::Release);
                    self.depth24[i] = rep_depth;
                }
            }
        } else {
            let i = (prefix >> 8) as usize;
            let bank = bank_of(prefix);
            let cur = tbl24[i].load(Ordering::Relaxed);
            if cur & GROUP != 0 {
                let range = self.group_range(bank, cur);
                let first = range.start + (prefix & 0xff) as usize;
                for j in first..first + (1usize << (32 - len)) {
                    if tbl8[j].load(Ordering::Relaxed) != 0 && self.depth8[j] == len {
                        tbl8[j].store(rep, Ordering::Relaxed);
                        self.depth8[j] = rep_depth;
                    }
                }
                // A group whose entries all come from one /24-or-shorter rule (or none) is no
                // longer needed.
                let (e0, d0) = (
                    tbl8[range.start].load(Ordering::Relaxed),
                    self.depth8[range.start],
                );
                let uniform = d0 <= 24
                    && range
                        .clone()
                        .all(|j| tbl8[j].load(Ordering::Relaxed) == e0 && self.depth8[j] == d0);
                if uniform {
                    tbl24[i].store(e0, Ordering::Release);
                    self.depth24[i] = d0;
                    self.retired[bank].push(cur & !GROUP);
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
        assert_eq!(
            l.insert(0, 8, MAX_VALUE + 1),
            Err(LpmError::BadValue(MAX_VALUE + 1))
        );
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
