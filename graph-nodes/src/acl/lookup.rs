//! The tree's lookup: a group of keys walks down together (each step of one key independent of
//! the others', so their loads overlap), then each scans its leaf in rule order.

use super::fields::FieldKey;
use super::tree::{Node, Tree, INTERNAL};

/// Keys walked down together.
const GROUP: usize = 16;

impl<const D: usize> Tree<D> {
    #[inline(always)]
    fn step(&self, n: Node, k: &[u32; D]) -> Node {
        let dim = ((n.word >> 16) & 0xff) as usize;
        let shift = (n.word >> 8) & 0x1f;
        let bits = n.word & 0x1f;
        let v = k.get(dim).copied().unwrap_or(0);
        let idx = (v >> shift) & ((1u32 << bits) - 1);
        self.children
            .get((n.base + idx) as usize)
            .copied()
            .unwrap_or(Node::EMPTY)
    }

    /// The first of `leaf`'s rules containing the key.
    #[inline(always)]
    fn scan(&self, leaf: Node, k: &[u32; D], flags: u8) -> Option<u32> {
        let start = leaf.base as usize;
        let rules = self
            .leaves
            .get(start..start + leaf.word as usize)
            .unwrap_or(&[]);
        rules.iter().find(|r| r.contains(k, flags)).map(|r| r.index)
    }

    /// The first matching rule of each key, into `out` (as many as both hold): the lowest
    /// of each part's answer.
    pub fn classify<K: FieldKey<D>>(&self, keys: &[K], out: &mut [Option<u32>]) {
        for (kc, oc) in keys.chunks(GROUP).zip(out.chunks_mut(GROUP)) {
            let n = kc.len().min(oc.len());
            let mut fields = [[0u32; D]; GROUP];
            let mut best = [u32::MAX; GROUP];
            for i in 0..n {
                fields[i] = kc[i].fields();
            }
            for (p, &root) in self.roots.iter().enumerate() {
                let mut cur = [Node::EMPTY; GROUP];
                for i in 0..n {
                    cur[i] = if kc[i].fragment() {
                        self.l3_roots.get(p).copied().unwrap_or(Node::EMPTY)
                    } else {
                        root
                    };
                }
                self.descend(&mut cur[..n], &fields);
                for i in 0..n {
                    let r = self.scan(cur[i], &fields[i], kc[i].tcp_flags());
                    best[i] = best[i].min(r.unwrap_or(u32::MAX));
                }
            }
            for i in 0..n {
                oc[i] = (best[i] != u32::MAX).then_some(best[i]);
            }
        }
    }

    /// Walks every key of `cur` down to its leaf, all together: every key steps at every
    /// level (a leaf keeps itself), one branch per level; then their leaves are prefetched.
    #[inline(always)]
    fn descend(&self, cur: &mut [Node], fields: &[[u32; D]; GROUP]) {
        loop {
            let mut more = 0;
            for (c, f) in cur.iter_mut().zip(fields) {
                let next = self.step(*c, f);
                let internal = c.word & INTERNAL;
                *c = if internal != 0 { next } else { *c };
                more |= internal;
            }
            if more == 0 {
                break;
            }
        }
        for c in cur.iter() {
            if let Some(r) = self.leaves.get(c.base as usize) {
                dataplane::memory::prefetch(r);
            }
        }
    }

    /// Bytes the lookup reads from (nodes and leaf rules).
    pub fn bytes(&self) -> usize {
        self.children.len() * std::mem::size_of::<Node>()
            + self.leaves.len() * std::mem::size_of::<super::fields::BoxRule<D>>()
    }
}
