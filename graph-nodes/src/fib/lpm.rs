//! IPv4 longest-prefix match: a compressed table read by workers without locks, and its writer.
//!
//! The writer ([`Lpm`], the control side, `&mut self`) keeps an exact DIR-24-8 copy of the
//! rules in private memory (`shadow`), updated incrementally: an add overwrites only entries set
//! by shorter rules, a delete restores the entries it set to the longest remaining covering rule.
//! Workers read [`LpmTable`] (`table`): one cache line per /17, derived from the copy one /17 at
//! a time. A change re-encodes the /17s it touched into new blocks and redirects each /17's line
//! to its block with one atomic store, so a reader sees the /17 before or after the change,
//! never a mix. [`Lpm::recycle_retired`], which the caller invokes after every reader has passed
//! a quiescent state (see `dataplane::Epochs::synchronize`), rewrites those lines in place from
//! their blocks (nobody reads the old lines any more) and makes reusable what earlier changes
//! unlinked: blocks and tbl8 groups. A change that keeps a line's runs (new routes for the same
//! ranges) stores the new entries in place instead, with no block.
//!
//! Changes are visible at once by default. Between [`Lpm::defer_updates`] and [`Lpm::flush`]
//! they are only recorded, and `flush` re-encodes each touched /17 once: loading many routes
//! costs one block per /17 instead of one per route.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use dataplane::memory::{HugepagePolicy, Region};

use super::arena::Arena;
use super::chunk::{self, Encoded};
pub use super::rule::{mask, LpmError, MAX_VALUE};
use super::shadow::Shadow;
pub use super::table::{LinePrefetcher, LpmTable};
use super::table::{LINES, LINE_WORDS, SLOTS};

/// Node memory every table has, in 64-byte lines (32 MiB: the blocks of a commit that replaces
/// all of 1M routes of the benchmarks' mix take about 14 MiB, 5 MiB of which stay in use).
const BASE_LINES: u32 = 1 << 19;
/// Node memory added per configured group (a /24 node of a few runs and its share of a block).
const LINES_PER_GROUP: u32 = 2;

/// The writer side: the rules, the exact copy, the node memory's bookkeeping, the shared table.
pub struct Lpm {
    table: Arc<LpmTable>,
    shadow: Shadow,
    arena: Arena,
    capacity: u32,
    /// Each /17's block (first line, lines); 0 lines when it has none.
    blocks: Box<[(u32, u32)]>,
    /// Each /17's runs and whether it has /24 nodes, as last published.
    shapes: Box<[(u8, bool)]>,
    /// Whether each /17's line is redirected to its block.
    redirected: Box<[bool]>,
    /// Redirected /17s (all of them), to rewrite in place at the next [`Lpm::recycle_retired`].
    to_restore: Vec<u32>,
    dirty: Vec<u32>,
    is_dirty: Box<[bool]>,
    deferred: bool,
    spare: Vec<u64>,
}

impl Lpm {
    /// An empty table that uses at most `groups` tbl8 groups (prefixes longer than /24 need
    /// one per distinct /24 they fall in; at most 131072, at most 32768 per quarter of the
    /// address space).
    pub fn new(groups: u32, hugepages: HugepagePolicy) -> Result<Lpm, LpmError> {
        let shadow = Shadow::new(groups);
        let capacity = BASE_LINES + LINES_PER_GROUP * groups.min(shadow.group_capacity());
        let map =
            |bytes| Region::map(bytes, hugepages).map_err(|e| LpmError::Memory(e.to_string()));
        let table = LpmTable::new(map(LINES * 64)?, map(capacity as usize * 64)?);
        // Every line in place: one run, no route.
        for line in table.lines().chunks_exact(LINE_WORDS) {
            line[0].store(1, Ordering::Relaxed);
        }
        Ok(Lpm {
            table: Arc::new(table),
            shadow,
            arena: Arena::new(capacity),
            capacity,
            blocks: vec![(0, 0); LINES].into_boxed_slice(),
            shapes: vec![(1, false); LINES].into_boxed_slice(),
            redirected: vec![false; LINES].into_boxed_slice(),
            to_restore: Vec::new(),
            dirty: Vec::new(),
            is_dirty: vec![false; LINES].into_boxed_slice(),
            deferred: false,
            spare: Vec::new(),
        })
    }

    /// The shared lookup table.
    pub fn table(&self) -> &Arc<LpmTable> {
        &self.table
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.shadow.len()
    }

    /// Whether there are no routes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of the route `prefix/len`, if there is one.
    pub fn get(&self, prefix: u32, len: u8) -> Option<u32> {
        self.shadow.get(prefix, len)
    }

    /// Groups unlinked by deletes, waiting for [`Lpm::recycle_retired`].
    pub fn retired_groups(&self) -> usize {
        self.shadow.retired_groups()
    }

    /// Groups in use.
    pub fn groups_in_use(&self) -> u32 {
        self.shadow.groups_in_use()
    }

    /// Bytes the table takes: its lines and the blocks in use (retired ones not counted).
    pub fn table_bytes(&self) -> u64 {
        (LINES as u64 + self.arena.lines_in_use()) * 64
    }

    /// Call once every reader has passed a quiescent state since the last changes: rewrites the
    /// lines those changes redirected in place, and makes reusable the groups and blocks that
    /// changes before that quiescent state unlinked.
    pub fn recycle_retired(&mut self) {
        self.shadow.recycle_retired();
        self.arena.recycle_retired();
        for c in std::mem::take(&mut self.to_restore) {
            let i = c as usize;
            if !self.redirected[i] {
                continue;
            }
            // A /17 changed since and not yet shown (deferred) gets a new block at the flush and
            // goes in place at a later call; one with more runs than a line holds stays in its
            // block until a change makes it fit.
            if self.is_dirty[i] || !self.restore(i) {
                self.to_restore.push(c);
            }
        }
    }

    /// Rewrites the redirected line of /17 `c` in place from its block, when it fits; returns
    /// whether it did.
    fn restore(&mut self, c: usize) -> bool {
        let (first, lines) = self.blocks[c];
        let (runs, has_nodes) = self.shapes[c];
        let base = first as usize * 8;
        let nodes = self.table.nodes();
        let Some(words) = chunk::line_words(runs as usize, has_nodes) else {
            return false;
        };
        let mut line = [0u64; LINE_WORDS];
        for (w, slot) in line[..words].iter_mut().zip(&nodes[base..]) {
            *w = slot.load(Ordering::Relaxed);
        }
        if has_nodes {
            line[LINE_WORDS - 1] |= (base as u64) << 32;
        }
        let at = c * LINE_WORDS;
        let target = &self.table.lines()[at..at + LINE_WORDS];
        for (slot, &w) in target[1..].iter().zip(&line[1..]) {
            slot.store(w, Ordering::Relaxed);
        }
        // Readers that load the new word 0 see the words stored before it.
        target[0].store(line[0], Ordering::Release);
        self.redirected[c] = false;
        if !has_nodes {
            // Readers that followed the redirection may still be in the block.
            self.arena.retire(first, lines);
            self.blocks[c] = (0, 0);
        }
        true
    }

    /// Records changes from now on without showing them to readers, until [`Lpm::flush`].
    pub fn defer_updates(&mut self) {
        self.deferred = true;
    }

    /// Shows readers every change recorded so far (each changed /17 re-encoded once) and makes
    /// later changes visible at once again.
    pub fn flush(&mut self) -> Result<(), LpmError> {
        self.deferred = false;
        self.publish_dirty()
    }

    /// Adds or replaces the route `prefix/len` with `value`.
    pub fn insert(&mut self, prefix: u32, len: u8, value: u32) -> Result<(), LpmError> {
        let touched = self.shadow.insert(prefix, len, value)?;
        self.touch(touched)
    }

    /// Removes the route `prefix/len`; returns its value, or `None` when there was none.
    ///
    /// When the node memory is full the removal is recorded but readers keep seeing the route
    /// until a later change or [`Lpm::flush`] finds room.
    pub fn remove(&mut self, prefix: u32, len: u8) -> Option<u32> {
        let (value, touched) = self.shadow.remove(prefix, len)?;
        let _ = self.touch(touched);
        Some(value)
    }

    /// Marks the /17s holding the /24s `touched` as changed; re-encodes them unless deferred.
    fn touch(&mut self, touched: std::ops::Range<usize>) -> Result<(), LpmError> {
        for c in (touched.start / SLOTS)..=((touched.end - 1) / SLOTS) {
            if !std::mem::replace(&mut self.is_dirty[c], true) {
                self.dirty.push(c as u32);
            }
        }
        if self.deferred {
            Ok(())
        } else {
            self.publish_dirty()
        }
    }

    /// Re-encodes every changed /17 and redirects its line to the result.
    fn publish_dirty(&mut self) -> Result<(), LpmError> {
        while let Some(&c) = self.dirty.last() {
            self.publish(c as usize)?;
            self.dirty.pop();
            self.is_dirty[c as usize] = false;
        }
        Ok(())
    }

    fn publish(&mut self, c: usize) -> Result<(), LpmError> {
        let enc = chunk::encode(&self.shadow, c, std::mem::take(&mut self.spare));
        let result = if self.is_current(c, &enc) || self.update_in_place(c, &enc) {
            Ok(())
        } else {
            self.redirect(c, &enc)
        };
        self.spare = enc.block;
        result
    }

    /// Rewrites the run entries of /17 `c`'s line in place when that is all that changes: the
    /// line is in place, neither it nor `enc` has /24 nodes, and the bitmap is the same (new
    /// routes for the same ranges, the common change). A reader reads the bitmap and one word
    /// of entries, so it sees the old or the new route of its range, never a mix. Returns
    /// whether it did.
    fn update_in_place(&mut self, c: usize, enc: &Encoded) -> bool {
        if self.redirected[c] || self.blocks[c].1 > 0 || enc.has_nodes() {
            return false;
        }
        let Some(new) = enc.line(0) else {
            return false;
        };
        let at = c * LINE_WORDS;
        let line = &self.table.lines()[at..at + LINE_WORDS];
        if line[..2]
            .iter()
            .zip(&new[..2])
            .any(|(slot, &w)| slot.load(Ordering::Relaxed) != w)
        {
            return false;
        }
        for (slot, &w) in line[2..].iter().zip(&new[2..]) {
            if slot.load(Ordering::Relaxed) != w {
                slot.store(w, Ordering::Release);
            }
        }
        self.shapes[c] = (enc.runs() as u8, false);
        true
    }

    /// Writes `enc` as a new block and redirects /17 `c`'s line to it.
    fn redirect(&mut self, c: usize, enc: &Encoded) -> Result<(), LpmError> {
        let lines = enc.block.len().div_ceil(8) as u32;
        let first = self
            .arena
            .alloc(lines)
            .ok_or(LpmError::NoSpace(self.capacity))?;
        let at = first as usize * 8;
        let nodes = self.table.nodes();
        for (slot, &w) in nodes[at..at + enc.block.len()].iter().zip(&enc.block) {
            slot.store(w, Ordering::Relaxed);
        }
        // The block's words are written before the store that makes readers follow it.
        self.table.lines()[c * LINE_WORDS].store((at as u64) << 1, Ordering::Release);
        let (old, old_lines) = std::mem::replace(&mut self.blocks[c], (first, lines));
        if old_lines > 0 {
            self.arena.retire(old, old_lines);
        }
        self.shapes[c] = (enc.runs() as u8, enc.has_nodes());
        if !std::mem::replace(&mut self.redirected[c], true) {
            self.to_restore.push(c as u32);
        }
        Ok(())
    }

    /// Whether readers already see exactly `enc` for /17 `c`.
    fn is_current(&self, c: usize, enc: &Encoded) -> bool {
        let (first, lines) = self.blocks[c];
        let nodes = self.table.nodes();
        if lines > 0 {
            let at = first as usize * 8;
            let same = enc.block.len().div_ceil(8) == lines as usize
                && nodes[at..at + enc.block.len()]
                    .iter()
                    .zip(&enc.block)
                    .all(|(slot, &w)| slot.load(Ordering::Relaxed) == w);
            // A line in place reading /24 nodes from this block is as current as the block.
            return same;
        }
        let at = c * LINE_WORDS;
        enc.line(0).is_some_and(|line| {
            self.table.lines()[at..at + LINE_WORDS]
                .iter()
                .zip(&line)
                .all(|(slot, &w)| slot.load(Ordering::Relaxed) == w)
        })
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

    #[test]
    fn changes_redirect_lines_until_recycling_restores_them_in_place() {
        let mut l = Lpm::new(16, HugepagePolicy::Never).unwrap();
        let t = l.table().clone();
        let lines = LINES as u64 * 64;
        assert_eq!(l.table_bytes(), lines);
        l.insert(ip(10, 1, 2, 0), 24, 3).unwrap();
        assert_eq!(l.table_bytes(), lines + 64, "a block for the changed /17");
        assert_eq!(t.lookup(ip(10, 1, 2, 9)), Some(3));
        l.recycle_retired();
        assert_eq!(l.table_bytes(), lines, "the line is back in place");
        assert_eq!(l.arena.retired_lines(), 1, "the block waits one more time");
        assert_eq!(t.lookup(ip(10, 1, 2, 9)), Some(3));
        assert_eq!(t.lookup(ip(10, 1, 1, 9)), None);
        l.defer_updates();
        l.insert(ip(10, 1, 3, 0), 24, 4).unwrap();
        l.insert(ip(10, 1, 3, 7), 32, 5).unwrap();
        assert_eq!(
            t.lookup(ip(10, 1, 3, 7)),
            None,
            "not shown before the flush"
        );
        l.recycle_retired();
        assert_eq!(l.arena.retired_lines(), 0);
        l.flush().unwrap();
        let check = |t: &LpmTable| {
            assert_eq!(t.lookup(ip(10, 1, 3, 7)), Some(5));
            assert_eq!(t.lookup(ip(10, 1, 3, 8)), Some(4));
            assert_eq!(t.lookup(ip(10, 1, 2, 8)), Some(3));
        };
        check(&t);
        let with_node = l.table_bytes();
        l.insert(ip(10, 1, 3, 0), 24, 4).unwrap();
        assert_eq!(l.table_bytes(), with_node, "no change, no new block");
        l.recycle_retired();
        assert_eq!(
            l.table_bytes(),
            with_node,
            "in place, with its /24 node in the block"
        );
        check(&t);
        for (p, len) in [
            (ip(10, 1, 2, 0), 24),
            (ip(10, 1, 3, 0), 24),
            (ip(10, 1, 3, 7), 32),
        ] {
            l.remove(p, len).unwrap();
        }
        l.recycle_retired();
        l.recycle_retired();
        assert_eq!(l.table_bytes(), lines, "every line in place, no block");
        assert_eq!(l.arena.lines_in_use(), 0);
        assert_eq!(t.lookup(ip(10, 1, 3, 7)), None);
    }

    #[test]
    fn a_17_with_more_runs_than_a_line_holds_stays_in_its_block() {
        let mut l = Lpm::new(64, HugepagePolicy::Never).unwrap();
        let t = l.table().clone();
        l.insert(ip(10, 0, 0, 0), 8, 1).unwrap();
        // 40 separate /24s and a host route in each of 10 of them: 81 runs and /24 nodes.
        for k in 0..40u8 {
            l.insert(ip(10, 2, 3 * k, 0), 24, 100 + k as u32).unwrap();
        }
        for k in 0..10u8 {
            l.insert(ip(10, 2, 3 * k, 77), 32, 200 + k as u32).unwrap();
        }
        let want = |a: u32| {
            let [_, _, c, d] = a.to_be_bytes();
            match (c % 3, c / 3) {
                (0, k) if k < 10 && d == 77 => Some(200 + k as u32),
                (0, k) if k < 40 => Some(100 + k as u32),
                _ => Some(1),
            }
        };
        for round in 0..2 {
            let addrs: Vec<u32> = (0..=0xffffu32)
                .map(|x| ip(10, 2, 0, 0) | x & 0x7fff | (round << 15))
                .collect();
            let mut out = vec![0; addrs.len()];
            t.lookup_batch(&addrs, &mut out);
            for (&a, &o) in addrs.iter().zip(&out) {
                assert_eq!(t.lookup(a), want(a), "{a:#x}");
                assert_eq!(Some(o), want(a), "{a:#x}");
            }
            l.recycle_retired();
        }
        // Once it fits a line again, it goes back in place.
        for k in 0..10u8 {
            l.remove(ip(10, 2, 3 * k, 77), 32).unwrap();
        }
        for k in 0..40u8 {
            l.remove(ip(10, 2, 3 * k, 0), 24).unwrap();
        }
        l.insert(ip(10, 2, 9, 0), 24, 7).unwrap();
        l.recycle_retired();
        l.recycle_retired();
        assert_eq!(l.table_bytes(), LINES as u64 * 64, "every line in place");
        assert_eq!(t.lookup(ip(10, 2, 9, 9)), Some(7));
        assert_eq!(t.lookup(ip(10, 2, 10, 9)), Some(1));
    }
}
