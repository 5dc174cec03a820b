//! The writer's exact copy of the table: DIR-24-8 in private memory, never read by workers.
//!
//! `tbl24` has one 16-bit entry per /24: `0` = no route, `1..=0x7fff` = value + 1, or
//! `0x8000 | g` = group `g` (256 entries, one per address) of the bank named by the address's
//! top two bits (four banks of 32768 groups, so a 15-bit index reaches 131072 groups; a /24
//! always lies in one bank). Group entries hold values only. The depth of the rule that set each
//! entry is kept beside it, so an add overwrites only entries set by shorter rules and a delete
//! restores the entries it set to the longest remaining covering rule.
//!
//! Groups freed by deletes are parked as retired until [`Shadow::recycle_retired`], so that the
//! configured group count bounds the groups in use across a commit (see `Lpm::recycle_retired`).

use std::collections::HashMap;
use std::ops::Range;

use super::rule::{mask, LpmError, MAX_VALUE};

/// Marks a tbl24 entry that names a group.
pub(super) const GROUP: u16 = 0x8000;
const BANKS: usize = 4;
const GROUPS_PER_BANK: usize = 0x8000;

/// The bank of groups an address's /24 uses.
#[inline]
fn bank_of(addr: u32) -> usize {
    (addr >> 30) as usize
}

/// The writer's DIR-24-8.
pub(super) struct Shadow {
    /// Rules by depth: prefix (masked) → value.
    rules: Vec<HashMap<u32, u32>>,
    tbl24: Box<[u16]>,
    depth24: Box<[u8]>,
    tbl8: Box<[u16]>,
    depth8: Box<[u8]>,
    free_groups: [Vec<u16>; BANKS],
    retired: [Vec<u16>; BANKS],
    group_limit: u32,
    groups_used: u32,
}

impl Shadow {
    /// An empty table using at most `groups` groups. The group arrays are allocated zeroed and
    /// untouched, so memory is committed only for the groups used.
    pub fn new(groups: u32) -> Shadow {
        let total = GROUPS_PER_BANK * BANKS;
        Shadow {
            rules: vec![HashMap::new(); 33],
            tbl24: vec![0; 1 << 24].into_boxed_slice(),
            depth24: vec![0; 1 << 24].into_boxed_slice(),
            tbl8: vec![0; total * 256].into_boxed_slice(),
            depth8: vec![0; total * 256].into_boxed_slice(),
            free_groups: std::array::from_fn(|_| (0..GROUPS_PER_BANK as u16).rev().collect()),
            retired: std::array::from_fn(|_| Vec::new()),
            group_limit: groups.clamp(1, total as u32),
            groups_used: 0,
        }
    }

    /// Groups the table has room for (all banks).
    pub fn group_capacity(&self) -> u32 {
        (GROUPS_PER_BANK * BANKS) as u32
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.iter().map(HashMap::len).sum()
    }

    /// The value of the rule `prefix/len`.
    pub fn get(&self, prefix: u32, len: u8) -> Option<u32> {
        self.rules
            .get(len as usize)?
            .get(&(prefix & mask(len)))
            .copied()
    }

    /// Groups unlinked by deletes, waiting for [`Shadow::recycle_retired`].
    pub fn retired_groups(&self) -> usize {
        self.retired.iter().map(Vec::len).sum()
    }

    /// Groups in use.
    pub fn groups_in_use(&self) -> u32 {
        let idle: usize =
            self.free_groups.iter().map(Vec::len).sum::<usize>() + self.retired_groups();
        self.group_capacity() - idle as u32
    }

    /// Makes retired groups reusable.
    pub fn recycle_retired(&mut self) {
        for (free, retired) in self.free_groups.iter_mut().zip(&mut self.retired) {
            self.groups_used -= retired.len() as u32;
            free.append(retired);
        }
    }

    /// The tbl24 entries of the /24s `range` (numbered by address >> 8).
    pub fn entries(&self, range: Range<usize>) -> &[u16] {
        &self.tbl24[range]
    }

    /// The 256 entries of the group that tbl24 entry `e` of /24 number `i24` names.
    pub fn group(&self, i24: usize, e: u16) -> &[u16; 256] {
        let r = self.group_range((i24 as u32) << 8, e);
        self.tbl8[r].try_into().expect("a group is 256 entries")
    }

    /// The tbl8 entries of the group that tbl24 entry `e` names, for an address in its /24.
    fn group_range(&self, addr: u32, e: u16) -> Range<usize> {
        let first = (bank_of(addr) * GROUPS_PER_BANK + (e & !GROUP) as usize) << 8;
        first..first + 256
    }

    /// Adds or replaces the rule `prefix/len`; returns the /24s whose entries may have changed.
    // One index walks the entries and their depths side by side.
    #[allow(clippy::needless_range_loop)]
    pub fn insert(&mut self, prefix: u32, len: u8, value: u32) -> Result<Range<usize>, LpmError> {
        if len > 32 {
            return Err(LpmError::BadLength(len));
        }
        if value > MAX_VALUE {
            return Err(LpmError::BadValue(value));
        }
        let prefix = prefix & mask(len);
        let new = value as u16 + 1;
        let first = (prefix >> 8) as usize;
        let touched = first..first + (1usize << 24_u8.saturating_sub(len));
        if len <= 24 {
            for i in touched.clone() {
                let cur = self.tbl24[i];
                if cur & GROUP != 0 {
                    for j in self.group_range((i as u32) << 8, cur) {
                        if self.depth8[j] <= len {
                            self.tbl8[j] = new;
                            self.depth8[j] = len;
                        }
                    }
                } else if self.depth24[i] <= len {
                    self.tbl24[i] = new;
                    self.depth24[i] = len;
                }
            }
        } else {
            let i = first;
            let bank = bank_of(prefix);
            let cur = self.tbl24[i];
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
                // The group starts as what the /24 holds now.
                let d = self.depth24[i];
                for j in self.group_range(prefix, g) {
                    self.tbl8[j] = cur;
                    self.depth8[j] = d;
                }
                self.tbl24[i] = g;
                g
            };
            let first = self.group_range(prefix, group).start + (prefix & 0xff) as usize;
            for j in first..first + (1usize << (32 - len)) {
                if self.depth8[j] <= len {
                    self.tbl8[j] = new;
                    self.depth8[j] = len;
                }
            }
        }
        self.rules[len as usize].insert(prefix, value);
        Ok(touched)
    }

    /// Removes the rule `prefix/len`; returns its value and the /24s whose entries may have
    /// changed, or `None` when there was no such rule.
    #[allow(clippy::needless_range_loop)]
    pub fn remove(&mut self, prefix: u32, len: u8) -> Option<(u32, Range<usize>)> {
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
        let first = (prefix >> 8) as usize;
        let touched = first..first + (1usize << 24_u8.saturating_sub(len));
        if len <= 24 {
            for i in touched.clone() {
                let cur = self.tbl24[i];
                if cur & GROUP != 0 {
                    for j in self.group_range((i as u32) << 8, cur) {
                        if self.tbl8[j] != 0 && self.depth8[j] == len {
                            self.tbl8[j] = rep;
                            self.depth8[j] = rep_depth;
                        }
                    }
                } else if cur != 0 && self.depth24[i] == len {
                    self.tbl24[i] = rep;
                    self.depth24[i] = rep_depth;
                }
            }
        } else {
            let i = first;
            let cur = self.tbl24[i];
            if cur & GROUP != 0 {
                let range = self.group_range(prefix, cur);
                let first = range.start + (prefix & 0xff) as usize;
                for j in first..first + (1usize << (32 - len)) {
                    if self.tbl8[j] != 0 && self.depth8[j] == len {
                        self.tbl8[j] = rep;
                        self.depth8[j] = rep_depth;
                    }
                }
                // A group whose entries all come from one /24-or-shorter rule (or none) is no
                // longer needed.
                let (e0, d0) = (self.tbl8[range.start], self.depth8[range.start]);
                let uniform = d0 <= 24
                    && range
                        .clone()
                        .all(|j| self.tbl8[j] == e0 && self.depth8[j] == d0);
                if uniform {
                    self.tbl24[i] = e0;
                    self.depth24[i] = d0;
                    self.retired[bank_of(prefix)].push(cur & !GROUP);
                }
            }
        }
        Some((value, touched))
    }
}
