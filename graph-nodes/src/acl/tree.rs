//! The decision tree's compiler: cuts the field space into equal power-of-two parts, one
//! dimension at a node, until few enough rules are left to scan (HiCuts' scheme, with EffiCuts'
//! observation that redundant rules can be dropped where an earlier one covers a whole region).

use std::collections::HashMap;

use super::fields::BoxRule;

/// A node: internal (`INTERNAL` set: dimension, shift and bit count of its cut, its children at
/// `base` in [`Tree::children`]) or a leaf (`word` rules to scan at `base` in [`Tree::leaves`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Node {
    pub word: u32,
    pub base: u32,
}

pub(super) const INTERNAL: u32 = 1 << 31;

impl Node {
    /// The leaf with no rules.
    pub const EMPTY: Node = Node { word: 0, base: 0 };

    fn internal(dim: usize, shift: u8, bits: u8, base: u32) -> Node {
        Node {
            word: INTERNAL | (dim as u32) << 16 | u32::from(shift) << 8 | u32::from(bits),
            base,
        }
    }
}

/// A compiled tree: a root per part of the rules, for full keys and for fragments (L3 fields
/// only), in one arena.
#[derive(Clone, Debug)]
pub(super) struct Tree<const D: usize> {
    /// One root per non-empty part of the rules.
    pub roots: Vec<Node>,
    /// The same for fragments.
    pub l3_roots: Vec<Node>,
    pub children: Vec<Node>,
    pub leaves: Vec<BoxRule<D>>,
}

/// Rules left in a node that stop the cutting (a leaf scans at most this many, unless no cut
/// separates them).
const LEAF_RULES: usize = 8;
/// The widest cut: 2^8 children.
const MAX_BITS: u8 = 8;
/// A cut may place at most this many times its node's rules in its children (replication).
const SPACE_FACTOR: usize = 4;
/// Depth at which a node becomes a leaf whatever it holds.
const MAX_DEPTH: u32 = 24;

/// The region a node covers: a prefix of `len[d]` bits (of `widths[d]`) in each dimension.
#[derive(Clone, Copy)]
struct Region<const D: usize> {
    lo: [u32; D],
    len: [u8; D],
}

struct Builder<'a, const D: usize> {
    rules: &'a [BoxRule<D>],
    widths: [u8; D],
    children: Vec<Node>,
    leaves: Vec<BoxRule<D>>,
    leaf_cache: HashMap<Vec<u32>, Node>,
    /// Bytes of nodes and leaves past which the build gives up (the caller splits instead).
    budget: usize,
}

/// The cut chosen for a node.
struct Cut {
    dim: usize,
    bits: u8,
    shift: u8,
}

impl<const D: usize> Region<D> {
    fn hi(&self, d: usize, width: u8) -> u32 {
        let free = u32::from(width - self.len[d]);
        let size = if free >= 32 {
            u32::MAX
        } else {
            (1u32 << free) - 1
        };
        self.lo[d] + size
    }
}

impl<const D: usize> Builder<'_, D> {
    fn covers(&self, r: &BoxRule<D>, region: &Region<D>) -> bool {
        (0..D).all(|d| r.lo[d] <= region.lo[d] && r.hi(d) >= region.hi(d, self.widths[d]))
    }

    /// The children `rule` falls in under a cut of `dim` (first, last).
    fn child_span(&self, r: &BoxRule<D>, region: &Region<D>, dim: usize, shift: u8) -> (u32, u32) {
        let rlo = region.lo[dim];
        let rhi = region.hi(dim, self.widths[dim]);
        let lo = r.lo[dim].max(rlo) - rlo;
        let hi = r.hi(dim).min(rhi) - rlo;
        (lo >> shift, hi >> shift)
    }

    fn choose_cut(&self, region: &Region<D>, ids: &[u32]) -> Option<Cut> {
        let n = ids.len();
        let mut best: Option<(usize, usize, Cut)> = None;
        let mut counts = Vec::new();
        for dim in 0..D {
            let room = self.widths[dim] - region.len[dim];
            for bits in 1..=room.min(MAX_BITS) {
                let shift = room - bits;
                let parts = 1usize << bits;
                counts.clear();
                counts.resize(parts + 1, 0i64);
                let mut total = 0usize;
                for &i in ids {
                    let (a, b) = self.child_span(&self.rules[i as usize], region, dim, shift);
                    counts[a as usize] += 1;
                    counts[b as usize + 1] -= 1;
                    total += (b - a + 1) as usize;
                }
                if total + parts > SPACE_FACTOR * n + 2 {
                    break;
                }
                let mut run = 0i64;
                let mut most = 0usize;
                for c in &counts[..parts] {
                    run += c;
                    most = most.max(run as usize);
                }
                if most >= n {
                    continue;
                }
                let better = best
                    .as_ref()
                    .is_none_or(|&(m, t, _)| (most, total + parts) < (m, t));
                if better {
                    best = Some((most, total + parts, Cut { dim, bits, shift }));
                }
            }
        }
        best.map(|(_, _, c)| c)
    }

    fn leaf(&mut self, ids: Vec<u32>) -> Node {
        if ids.is_empty() {
            return Node::EMPTY;
        }
        if let Some(&n) = self.leaf_cache.get(&ids) {
            return n;
        }
        let node = Node {
            word: ids.len() as u32,
            base: self.leaves.len() as u32,
        };
        self.leaves
            .extend(ids.iter().map(|&i| self.rules[i as usize]));
        self.leaf_cache.insert(ids, node);
        node
    }

    fn over_budget(&self) -> bool {
        self.children.len() * std::mem::size_of::<Node>()
            + self.leaves.len() * std::mem::size_of::<BoxRule<D>>()
            > self.budget
    }

    fn build(&mut self, region: Region<D>, ids: Vec<u32>, depth: u32) -> Node {
        if self.over_budget() {
            return Node::EMPTY;
        }
        // A rule covering the whole region (and with no flags to check) ends the list: no key
        // here gets past it.
        let mut kept = Vec::with_capacity(ids.len());
        for i in ids {
            kept.push(i);
            let r = &self.rules[i as usize];
            if r.flags_mask == 0 && self.covers(r, &region) {
                break;
            }
        }
        if kept.len() <= LEAF_RULES || depth >= MAX_DEPTH {
            return self.leaf(kept);
        }
        let Some(cut) = self.choose_cut(&region, &kept) else {
            return self.leaf(kept);
        };
        let parts = 1usize << cut.bits;
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); parts];
        for &i in &kept {
            let (a, b) = self.child_span(&self.rules[i as usize], &region, cut.dim, cut.shift);
            for list in &mut lists[a as usize..=b as usize] {
                list.push(i);
            }
        }
        let base = self.children.len();
        self.children.resize(base + parts, Node::EMPTY);
        // Siblings with the same rules, each covering the cut dimension's part whole, are
        // the same subtree (nothing below depends on which part it is).
        let mut shared: HashMap<Vec<u32>, Node> = HashMap::new();
        for (c, ids) in lists.into_iter().enumerate() {
            let mut child = region;
            child.lo[cut.dim] += (c as u32) << cut.shift;
            child.len[cut.dim] += cut.bits;
            let whole = ids.iter().all(|&i| {
                let r = &self.rules[i as usize];
                r.lo[cut.dim] <= child.lo[cut.dim]
                    && r.hi(cut.dim) >= child.hi(cut.dim, self.widths[cut.dim])
            });
            let node = match shared.get(&ids) {
                Some(&n) if whole => n,
                _ if whole => {
                    let n = self.build(child, ids.clone(), depth + 1);
                    shared.insert(ids, n);
                    n
                }
                _ => self.build(child, ids, depth + 1),
            };
            self.children[base + c] = node;
        }
        Node::internal(cut.dim, cut.shift, cut.bits, base as u32)
    }
}

/// The parts a big rule list is split into, by whether a rule's source and destination are
/// wide (shorter than /8): each part's tree cuts the addresses its rules name without copying
/// the wildcards of the others into every child (EffiCuts' separation; rte_acl builds several
/// tries for the same reason). Each part costs a walk and a scan per key, so a list is split
/// only when its single tree would outgrow a core's L2 cache.
pub(super) const PARTS: usize = 4;

/// A span wider than this (a prefix shorter than /8) is a wide address.
const WIDE: u32 = (1 << 24) - 1;

/// The size of a single tree above which a list is split into parts.
pub(super) const SPLIT_ABOVE_BYTES: usize = 1 << 20;

impl<const D: usize> Tree<D> {
    /// Compiles `full` (every condition) and `l3` (what fragments are compared on), rules in
    /// list order; `addr_dims` are the dimensions whose width splits the list into parts
    /// when its single tree would take more than `split_above` bytes.
    pub fn build(
        full: &[BoxRule<D>],
        l3: &[BoxRule<D>],
        widths: [u8; D],
        addr_dims: [usize; 2],
        split_above: usize,
    ) -> Tree<D> {
        // The single tree is abandoned as soon as it passes `split_above`.
        let (one, within) = Self::build_parts(full, l3, widths, split_above, |_| 0);
        if within {
            return one;
        }
        drop(one);
        Self::build_parts(full, l3, widths, usize::MAX, |r| {
            usize::from(r.span[addr_dims[0]] > WIDE) | usize::from(r.span[addr_dims[1]] > WIDE) << 1
        })
        .0
    }

    /// The tree of `part_of`'s parts, and whether it stayed within `budget` bytes (when not,
    /// it is incomplete and must not be used).
    fn build_parts(
        full: &[BoxRule<D>],
        l3: &[BoxRule<D>],
        widths: [u8; D],
        budget: usize,
        part_of: impl Fn(&BoxRule<D>) -> usize,
    ) -> (Tree<D>, bool) {
        let top = Region {
            lo: [0; D],
            len: [0; D],
        };
        let mut b = Builder {
            rules: full,
            widths,
            children: Vec::new(),
            leaves: Vec::new(),
            leaf_cache: HashMap::new(),
            budget,
        };
        let mut roots = Vec::new();
        let mut l3_roots = Vec::new();
        for (rules, out) in [(full, &mut roots), (l3, &mut l3_roots)] {
            b.rules = rules;
            b.leaf_cache.clear();
            for part in 0..PARTS {
                let ids: Vec<u32> = (0..rules.len() as u32)
                    .filter(|&i| part_of(&rules[i as usize]) == part)
                    .collect();
                // An empty list still gets its root (the empty leaf): the views' parts stay
                // aligned.
                out.push(b.build(top, ids, 0));
            }
        }
        // Parts that are empty in both views cost nothing at lookup.
        let keep: Vec<bool> = roots
            .iter()
            .zip(&l3_roots)
            .map(|(a, b)| *a != Node::EMPTY || *b != Node::EMPTY)
            .collect();
        let mut k = keep.iter();
        roots.retain(|_| *k.next().unwrap_or(&true));
        let mut k = keep.iter();
        l3_roots.retain(|_| *k.next().unwrap_or(&true));
        let within = !b.over_budget();
        let tree = Tree {
            roots,
            l3_roots,
            children: b.children,
            leaves: b.leaves,
        };
        (tree, within)
    }
}
