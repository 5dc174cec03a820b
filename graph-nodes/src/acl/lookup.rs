//! The tree's lookup: a group of keys walks down together (each step of one key independent of
//! the others', so their loads overlap), then each scans its leaf in rule order.

use super::fields::FieldKey;
use super::tree::{Node, Tree, INTERNAL};

/// Keys walked down together.
const GROUP: usize = 8;

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

    #[inline(always)]
    fn scan(&self, leaf: Node, k: &[u32; D], flags: u8) -> Option<u32> {
        let start = leaf.base as usize;
        let rules = self
            .leaves
            .get(start..start + leaf.word as usize)
            .unwrap_or(&[]);
        rules.iter().find(|r| r.contains(k, flags)).map(|r| r.index)
    }

    /// The first matching rule of each key, into `out` (as many as both hold).
    pub fn classify<K: FieldKey<D>>(&self, keys: &[K], out: &mut [Option<u32>]) {
        for (kc, oc) in keys.chunks(GROUP).zip(out.chunks_mut(GROUP)) {
            let n = kc.len().min(oc.len());
            let mut fields = [[0u32; D]; GROUP];
            let mut cur = [Node::EMPTY; GROUP];
            for i in 0..n {
                fields[i] = kc[i].fields();
                cur[i] = if kc[i].fragment() {
                    self.l3_root
                } else {
                    self.root
                };
            }
            loop {
                let mut more = false;
                for i in 0..n {
                    if cur[i].word & INTERNAL != 0 {
                        cur[i] = self.step(cur[i], &fields[i]);
                        more = true;
                    }
                }
                if !more {
                    break;
                }
            }
            for i in 0..n {
                oc[i] = self.scan(cur[i], &fields[i], kc[i].tcp_flags());
            }
        }
    }

    /// Bytes the lookup reads from (nodes and leaf rules).
    pub fn bytes(&self) -> usize {
        self.children.len() * std::mem::size_of::<Node>()
            + self.leaves.len() * std::mem::size_of::<super::fields::BoxRule<D>>()
    }
}
