//! IPv6 longest-prefix match: a compressed trie read by workers without locks, and its writer.
//!
//! The writer ([`Lpm6`], the control side, `&mut self`) keeps the rules in a private copy of the
//! trie's shape: routes of /0–/16 painted over the 65536 root words (with the length that set
//! each, as the IPv4 table's DIR-24-8 copy does), longer routes in the node whose 8 bits hold
//! their last bit, each node knowing its children. Workers read [`Lpm6Table`] (`table`). A
//! change marks the nodes it touches; publishing writes each marked node anew, deepest first,
//! which marks its parent (whose entry must name the new copy), up to the root word of its /16,
//! switched with one atomic store: a reader sees each /16 before or after a change, never a mix.
//! The copies replaced are parked until [`Lpm6::recycle_retired`], which the caller invokes once
//! every reader has passed a quiescent state (see `dataplane::Epochs::synchronize`).
//!
//! Changes are visible at once by default. Between [`Lpm6::defer_updates`] and [`Lpm6::flush`]
//! they are only recorded, and `flush` writes each touched node once: loading many routes
//! costs one copy per node instead of one per route and level.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dataplane::memory::{HugepagePolicy, Region};

use super::arena::Arena;
use super::encode;
pub use super::rule::{mask, Lpm6Error, MAX_VALUE};
use super::table::{root_index, CHILD, LEVELS, ROOT_BITS, ROOT_ENTRIES};
pub use super::table::{Lpm6Prefetcher, Lpm6Table};

/// No node (a free root word's child, a root child's parent).
const NONE: u32 = u32::MAX;
/// Lines the node memory may have (4 GiB: a batch keeps the 32-bit halves' index of an entry
/// in 32 bits).
const MAX_LINES: u64 = 1 << 26;

/// The writer's copy of one node.
#[derive(Default)]
struct Node {
    /// Its level: depth 16 + 8 × level.
    level: u8,
    /// Its parent, or [`NONE`] below the root.
    parent: u32,
    /// Its number in its parent (0..256), or its root word.
    slot: u32,
    /// Routes ending in this node's 8 bits: (relative length << 8 | their bits there, value),
    /// sorted, so shorter routes come first.
    rules: Vec<(u16, u32)>,
    /// Children by number, sorted.
    children: Vec<(u8, u32)>,
    /// Where readers find it: first line and lines (no lines: not written yet).
    block: (u32, u32),
    dirty: bool,
}

/// The writer side: the rules, the trie's shape, the node memory's bookkeeping, the shared table.
pub struct Lpm6 {
    table: Arc<Lpm6Table>,
    arena: Arena,
    capacity: u32,
    nodes: Vec<Node>,
    free_ids: Vec<u32>,
    /// Routes of /0–/16 by length: their top 16 bits → value.
    root_rules: Vec<HashMap<u16, u32>>,
    /// Each root word's route from /0–/16 (value + 1, 0 = none) and the length that set it.
    root_value: Box<[u16]>,
    root_depth: Box<[u8]>,
    root_child: Box<[u32]>,
    root_dirty: Box<[bool]>,
    root_dirty_list: Vec<u32>,
    /// Marked nodes, by level.
    dirty: [Vec<u32>; LEVELS],
    /// Blocks replaced by changes not yet shown; retired once they are.
    replaced: Vec<(u32, u32)>,
    routes: usize,
    deferred: bool,
    words: Vec<u64>,
}

/// The mask of a length of at most 16 on a root word's number.
fn mask16(len: u8) -> u16 {
    if len == 0 {
        0
    } else {
        u16::MAX << (16 - len as u32)
    }
}

/// The 8 bits of `prefix` below depth 16 + 8 × `level`.
fn slot_at(prefix: u128, level: u8) -> u8 {
    (prefix >> (104 - 8 * level as u32)) as u8
}

/// A route's key in the node at `level` it ends in, and the numbers of the node's entries it
/// covers.
fn key_of(level: u8, prefix: u128, len: u8) -> (u16, std::ops::Range<usize>) {
    let depth = ROOT_BITS + 8 * level as u32;
    let rel = len as u32 - depth;
    let bits = ((prefix << depth) >> (128 - rel)) as u16;
    let first = (bits as usize) << (8 - rel);
    ((rel as u16) << 8 | bits, first..first + (1 << (8 - rel)))
}

impl Lpm6 {
    /// An empty table whose nodes may take up to `node_bytes` bytes (mapped, and with
    /// hugepages reserved, at once). 1M routes shaped like a real IPv6 table take about 75 MiB
    /// of nodes; a change that replaces all of them needs room for both copies until the next
    /// [`Lpm6::recycle_retired`].
    pub fn new(node_bytes: u64, hugepages: HugepagePolicy) -> Result<Lpm6, Lpm6Error> {
        let capacity = (node_bytes / 64).clamp(2, MAX_LINES) as u32;
        let map =
            |bytes| Region::map(bytes, hugepages).map_err(|e| Lpm6Error::Memory(e.to_string()));
        let table = Lpm6Table::new(map(ROOT_ENTRIES * 8)?, map(capacity as usize * 64)?);
        Ok(Lpm6 {
            table: Arc::new(table),
            arena: Arena::new(capacity),
            capacity,
            nodes: Vec::new(),
            free_ids: Vec::new(),
            root_rules: vec![HashMap::new(); ROOT_BITS as usize + 1],
            root_value: vec![0; ROOT_ENTRIES].into_boxed_slice(),
            root_depth: vec![0; ROOT_ENTRIES].into_boxed_slice(),
            root_child: vec![NONE; ROOT_ENTRIES].into_boxed_slice(),
            root_dirty: vec![false; ROOT_ENTRIES].into_boxed_slice(),
            root_dirty_list: Vec::new(),
            dirty: std::array::from_fn(|_| Vec::new()),
            replaced: Vec::new(),
            routes: 0,
            deferred: false,
            words: Vec::new(),
        })
    }

    /// The shared lookup table.
    pub fn table(&self) -> &Arc<Lpm6Table> {
        &self.table
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.routes
    }

    /// Whether there are no routes.
    pub fn is_empty(&self) -> bool {
        self.routes == 0
    }

    /// Nodes of the trie (each a block of the node memory once shown).
    pub fn node_count(&self) -> usize {
        self.nodes.len() - self.free_ids.len()
    }

    /// Bytes the table takes: its root and the nodes in use (retired ones not counted).
    pub fn table_bytes(&self) -> u64 {
        (ROOT_ENTRIES as u64 * 8) + self.arena.lines_in_use() * 64
    }

    /// Bytes of node memory unlinked by changes and waiting for [`Lpm6::recycle_retired`].
    pub fn retired_bytes(&self) -> u64 {
        (self.arena.retired_lines() + self.replaced.iter().map(|b| b.1 as u64).sum::<u64>()) * 64
    }

    /// The most node memory in use at once so far, in bytes (the high-water mark).
    pub fn peak_node_bytes(&self) -> u64 {
        self.arena.lines_touched() * 64
    }

    /// Bytes of the writer's private copy (an estimate from its allocations).
    pub fn writer_bytes(&self) -> u64 {
        let per_node: usize = self
            .nodes
            .iter()
            .map(|n| n.rules.capacity() * 8 + n.children.capacity() * 8)
            .sum();
        let root = ROOT_ENTRIES * (2 + 1 + 4 + 1)
            + self
                .root_rules
                .iter()
                .map(|m| m.capacity() * 8)
                .sum::<usize>();
        (self.nodes.capacity() * std::mem::size_of::<Node>() + per_node + root) as u64
    }

    /// The value of the route `prefix/len`, if there is one.
    pub fn get(&self, prefix: u128, len: u8) -> Option<u32> {
        if len > 128 {
            return None;
        }
        let prefix = prefix & mask(len);
        if len as u32 <= ROOT_BITS {
            let key = root_index(prefix) as u16;
            return self.root_rules[len as usize].get(&key).copied();
        }
        let id = self.find(prefix, len)?;
        let node = &self.nodes[id as usize];
        let (key, _) = key_of(node.level, prefix, len);
        let i = node.rules.binary_search_by_key(&key, |r| r.0).ok()?;
        Some(node.rules[i].1)
    }

    /// Call once every reader has passed a quiescent state since the last changes were shown:
    /// makes reusable the node memory that those changes unlinked.
    pub fn recycle_retired(&mut self) {
        self.arena.recycle_retired();
    }

    /// Records changes from now on without showing them to readers, until [`Lpm6::flush`].
    pub fn defer_updates(&mut self) {
        self.deferred = true;
    }

    /// Shows readers every change recorded so far (each changed node written once) and makes
    /// later changes visible at once again.
    pub fn flush(&mut self) -> Result<(), Lpm6Error> {
        self.deferred = false;
        self.publish()
    }

    /// Adds or replaces the route `prefix/len` with `value` (bits of `prefix` past `len` are
    /// ignored).
    pub fn insert(&mut self, prefix: u128, len: u8, value: u32) -> Result<(), Lpm6Error> {
        if len > 128 {
            return Err(Lpm6Error::BadLength(len));
        }
        if value > MAX_VALUE {
            return Err(Lpm6Error::BadValue(value));
        }
        let prefix = prefix & mask(len);
        if len as u32 <= ROOT_BITS {
            self.insert_root(prefix, len, value);
        } else {
            let id = self.find_or_make(prefix, len);
            let node = &mut self.nodes[id as usize];
            let (key, range) = key_of(node.level, prefix, len);
            match node.rules.binary_search_by_key(&key, |r| r.0) {
                Ok(i) => node.rules[i].1 = value,
                Err(i) => {
                    node.rules.insert(i, (key, value));
                    self.routes += 1;
                }
            }
            self.touch(id, range);
        }
        self.publish_unless_deferred()
    }

    /// Removes the route `prefix/len`; returns its value, or `None` when there was none.
    ///
    /// When the node memory is full the removal is recorded but readers keep seeing the route
    /// until a later change or [`Lpm6::flush`] finds room.
    pub fn remove(&mut self, prefix: u128, len: u8) -> Option<u32> {
        if len > 128 {
            return None;
        }
        let prefix = prefix & mask(len);
        let value = if len as u32 <= ROOT_BITS {
            self.remove_root(prefix, len)?
        } else {
            let id = self.find(prefix, len)?;
            let node = &mut self.nodes[id as usize];
            let (key, range) = key_of(node.level, prefix, len);
            let i = node.rules.binary_search_by_key(&key, |r| r.0).ok()?;
            let (_, value) = node.rules.remove(i);
            self.routes -= 1;
            self.touch(id, range);
            value
        };
        let _ = self.publish_unless_deferred();
        Some(value)
    }

    fn publish_unless_deferred(&mut self) -> Result<(), Lpm6Error> {
        if self.deferred {
            Ok(())
        } else {
            self.publish()
        }
    }

    fn insert_root(&mut self, prefix: u128, len: u8, value: u32) {
        let key = root_index(prefix) as u16;
        if self.root_rules[len as usize].insert(key, value).is_none() {
            self.routes += 1;
        }
        let first = key as usize;
        for r in first..first + (1 << (ROOT_BITS - len as u32)) {
            if self.root_depth[r] <= len {
                self.root_value[r] = value as u16 + 1;
                self.root_depth[r] = len;
                self.mark_root(r);
            }
        }
    }

    fn remove_root(&mut self, prefix: u128, len: u8) -> Option<u32> {
        let key = root_index(prefix) as u16;
        let value = self.root_rules[len as usize].remove(&key)?;
        self.routes -= 1;
        // What covers this prefix once it is gone: the longest shorter route.
        let (cover, cover_len) = (0..len)
            .rev()
            .find_map(|d| {
                self.root_rules[d as usize]
                    .get(&(key & mask16(d)))
                    .map(|&v| (v as u16 + 1, d))
            })
            .unwrap_or((0, 0));
        let first = key as usize;
        for r in first..first + (1 << (ROOT_BITS - len as u32)) {
            if self.root_value[r] != 0 && self.root_depth[r] == len {
                self.root_value[r] = cover;
                self.root_depth[r] = cover_len;
                self.mark_root(r);
            }
        }
        Some(value)
    }

    /// The node a route of length `len` (over 16) ends in, if it exists.
    fn find(&self, prefix: u128, len: u8) -> Option<u32> {
        let target = (len - ROOT_BITS as u8 - 1) / 8;
        let mut id = self.root_child[root_index(prefix)];
        for level in 0..target {
            let node = self.nodes.get(id as usize)?;
            let slot = slot_at(prefix, level);
            let i = node.children.binary_search_by_key(&slot, |c| c.0).ok()?;
            id = node.children[i].1;
        }
        (id != NONE).then_some(id)
    }

    /// The node a route of length `len` (over 16) ends in, made (with the nodes above it) when
    /// missing.
    fn find_or_make(&mut self, prefix: u128, len: u8) -> u32 {
        let target = (len - ROOT_BITS as u8 - 1) / 8;
        let r = root_index(prefix);
        let mut id = self.root_child[r];
        if id == NONE {
            id = self.make(0, NONE, r as u32);
            self.root_child[r] = id;
            self.mark_root(r);
        }
        for level in 0..target {
            let slot = slot_at(prefix, level);
            let node = &self.nodes[id as usize];
            id = match node.children.binary_search_by_key(&slot, |c| c.0) {
                Ok(i) => node.children[i].1,
                Err(i) => {
                    let child = self.make(level + 1, id, slot as u32);
                    self.nodes[id as usize].children.insert(i, (slot, child));
                    self.mark(id);
                    child
                }
            };
        }
        id
    }

    /// A new empty node (marked) at `level`, number `slot` of `parent`.
    fn make(&mut self, level: u8, parent: u32, slot: u32) -> u32 {
        let node = Node {
            level,
            parent,
            slot,
            ..Node::default()
        };
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.mark(id);
        id
    }

    fn mark(&mut self, id: u32) {
        let node = &mut self.nodes[id as usize];
        if !std::mem::replace(&mut node.dirty, true) {
            self.dirty[node.level as usize].push(id);
        }
    }

    fn mark_root(&mut self, r: usize) {
        if !std::mem::replace(&mut self.root_dirty[r], true) {
            self.root_dirty_list.push(r as u32);
        }
    }

    /// Marks node `id`, whose routes over `range` changed, and its children there (their
    /// defaults may have changed).
    fn touch(&mut self, id: u32, range: std::ops::Range<usize>) {
        self.mark(id);
        let node = &self.nodes[id as usize];
        let from = node
            .children
            .partition_point(|c| (c.0 as usize) < range.start);
        let to = node
            .children
            .partition_point(|c| (c.0 as usize) < range.end);
        let children: Vec<u32> = node.children[from..to].iter().map(|c| c.1).collect();
        for c in children {
            self.mark(c);
        }
    }

    /// The value + 1 (0 = none) of the longest route of node `id` covering its entry `slot`.
    fn painted(&self, id: u32, slot: u8) -> u16 {
        let rules = &self.nodes[id as usize].rules;
        (1..=8u16)
            .rev()
            .find_map(|rel| {
                let key = rel << 8 | (slot as u16 >> (8 - rel));
                rules
                    .binary_search_by_key(&key, |r| r.0)
                    .ok()
                    .map(|i| rules[i].1 as u16 + 1)
            })
            .unwrap_or(0)
    }

    /// Writes every marked node anew (deepest first), then switches the root words above them.
    fn publish(&mut self) -> Result<(), Lpm6Error> {
        for level in (0..LEVELS).rev() {
            while let Some(&id) = self.dirty[level].last() {
                self.publish_node(id)?;
                self.dirty[level].pop();
            }
        }
        let root = self.table.root();
        for r in std::mem::take(&mut self.root_dirty_list) {
            let r = r as usize;
            self.root_dirty[r] = false;
            let value = self.root_value[r] as u64;
            let word = match self.root_child[r] {
                NONE => value,
                c => value << 32 | (CHILD | self.nodes[c as usize].block.0) as u64,
            };
            if root[r].load(Ordering::Relaxed) != word {
                // Every node below was written before this store; readers load it with Acquire.
                root[r].store(word, Ordering::Release);
            }
        }
        // Nothing readers can reach from now on uses what the changes replaced.
        for (first, lines) in std::mem::take(&mut self.replaced) {
            self.arena.retire(first, lines);
        }
        Ok(())
    }

    /// Writes node `id` anew if what readers would see changed, and marks what points at it; an
    /// empty node is unlinked instead.
    fn publish_node(&mut self, id: u32) -> Result<(), Lpm6Error> {
        let node = &self.nodes[id as usize];
        let (parent, slot, block) = (node.parent, node.slot, node.block);
        if node.rules.is_empty() && node.children.is_empty() {
            if block.1 > 0 {
                self.replaced.push(block);
            }
            if parent == NONE {
                self.root_child[slot as usize] = NONE;
                self.mark_root(slot as usize);
            } else {
                let p = &mut self.nodes[parent as usize];
                if let Ok(i) = p.children.binary_search_by_key(&(slot as u8), |c| c.0) {
                    p.children.remove(i);
                }
                self.mark(parent);
            }
            self.nodes[id as usize] = Node::default();
            self.free_ids.push(id);
            return Ok(());
        }
        let mut entries = [0u32; 256];
        for &(key, value) in &node.rules {
            let rel = (key >> 8) as u32;
            let first = ((key & 0xff) as usize) << (8 - rel);
            entries[first..first + (1 << (8 - rel))].fill(value + 1);
        }
        for &(s, c) in &node.children {
            entries[s as usize] = CHILD | self.nodes[c as usize].block.0;
        }
        let default = if parent == NONE {
            0
        } else {
            self.painted(parent, slot as u8)
        };
        let mut words = std::mem::take(&mut self.words);
        encode::node(default, &entries, &mut words);
        let result = self.write(id, &words);
        self.words = words;
        result
    }

    /// Puts `words` in a new block for node `id` unless its block holds them already.
    fn write(&mut self, id: u32, words: &[u64]) -> Result<(), Lpm6Error> {
        let (first, lines) = self.nodes[id as usize].block;
        let nodes = self.table.nodes();
        if lines > 0 {
            let at = first as usize * 8;
            let same = words.len().div_ceil(8) == lines as usize
                && nodes[at..at + words.len()]
                    .iter()
                    .zip(words)
                    .all(|(w, &v)| w.load(Ordering::Relaxed) == v);
            if same {
                self.nodes[id as usize].dirty = false;
                return Ok(());
            }
        }
        let need = words.len().div_ceil(8) as u32;
        let new = self
            .arena
            .alloc(need)
            .ok_or(Lpm6Error::NoSpace(self.capacity as u64 * 64))?;
        let at = new as usize * 8;
        for (w, &v) in nodes[at..at + words.len()].iter().zip(words) {
            w.store(v, Ordering::Relaxed);
        }
        // The rest of the last line is never read; zero it all the same.
        for w in &nodes[at + words.len()..at + need as usize * 8] {
            w.store(0, Ordering::Relaxed);
        }
        if lines > 0 {
            self.replaced.push((first, lines));
        }
        let node = &mut self.nodes[id as usize];
        node.block = (new, need);
        node.dirty = false;
        let (parent, slot) = (node.parent, node.slot);
        if parent == NONE {
            self.mark_root(slot as usize);
        } else {
            self.mark(parent);
        }
        Ok(())
    }
}
