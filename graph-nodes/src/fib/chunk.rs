//! Encoding one /17 of the writer's table as what workers read: a block, and the line it fits
//! in when it does (the formats are described in `table`).

use super::shadow::{Shadow, GROUP};
use super::table::{
    BLOCK_HEADER, CHILD, LINE_RUNS, LINE_RUNS_WITH_NODES, LINE_WORDS, NODE_HEADER, SLOTS,
};

/// Up to 256 entries as runs: the bitmap of run starts and each run's entry.
struct Runs {
    bitmap: [u64; 4],
    entries: [u16; 256],
    len: usize,
}

impl Runs {
    fn of(entries: &[u16]) -> Runs {
        let mut r = Runs {
            bitmap: [0; 4],
            entries: [0; 256],
            len: 0,
        };
        let mut prev = None;
        for (j, &e) in entries.iter().enumerate() {
            if prev != Some(e) {
                r.bitmap[j / 64] |= 1 << (j % 64);
                r.entries[r.len] = e;
                r.len += 1;
                prev = Some(e);
            }
        }
        r
    }

    /// The entries packed four per word.
    fn packed(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries[..self.len].chunks(4).map(|four| {
            four.iter()
                .enumerate()
                .fold(0u64, |w, (k, &v)| w | (v as u64) << (16 * k))
        })
    }

    /// A /24 node: counts, bitmap, routes.
    fn node_words(&self) -> usize {
        NODE_HEADER + self.len.div_ceil(4)
    }

    fn push_node(&self, out: &mut Vec<u64>) {
        let mut counts = 0u64;
        let mut before = 0u64;
        for (k, w) in self.bitmap.iter().enumerate() {
            counts |= before << (8 * k);
            before += w.count_ones() as u64;
        }
        out.push(counts);
        out.extend_from_slice(&self.bitmap);
        out.extend(self.packed());
    }
}

/// Words a /17 of `runs` runs takes in a line (the bitmap and the run entries), or `None` when
/// it does not fit one.
pub(super) fn line_words(runs: usize, has_nodes: bool) -> Option<usize> {
    let room = if has_nodes {
        LINE_RUNS_WITH_NODES
    } else {
        LINE_RUNS
    };
    (runs <= room).then(|| BLOCK_HEADER + runs.div_ceil(4))
}

/// A /17 encoded.
pub(super) struct Encoded {
    /// The block: bitmap, run entries, then the /24 nodes (offsets from the block's start).
    pub block: Vec<u64>,
    runs: usize,
    has_nodes: bool,
}

impl Encoded {
    /// The line that holds this /17 in place, reading its /24 nodes from the block at word
    /// `base`; `None` when it has more runs than a line holds.
    pub fn line(&self, base: usize) -> Option<[u64; LINE_WORDS]> {
        let words = line_words(self.runs, self.has_nodes)?;
        let mut line = [0u64; LINE_WORDS];
        line[..words].copy_from_slice(&self.block[..words]);
        if self.has_nodes {
            line[LINE_WORDS - 1] |= (base as u64) << 32;
        }
        Some(line)
    }

    /// Its runs.
    pub fn runs(&self) -> usize {
        self.runs
    }

    /// Whether it has /24 nodes (which a line in place reads from its block).
    pub fn has_nodes(&self) -> bool {
        self.has_nodes
    }
}

/// Encodes the /17 `chunk` into `block` (reusing its allocation).
pub(super) fn encode(shadow: &Shadow, chunk: usize, mut block: Vec<u64>) -> Encoded {
    // Each /24's route, or its group; a group whose entries are all one route is that route.
    let first = chunk * SLOTS;
    let mut entries = [0u16; SLOTS];
    entries.copy_from_slice(shadow.entries(first..first + SLOTS));
    let mut groups = Vec::new();
    for (j, e) in entries.iter_mut().enumerate() {
        if *e & GROUP != 0 {
            let g = shadow.group(first + j, *e);
            if g.iter().all(|&x| x == g[0]) {
                *e = g[0];
            } else {
                groups.push(Runs::of(g));
            }
        }
    }
    let mut top = Runs::of(&entries);
    // Group entries differ from their neighbours, so each is a run of its own: the runs with
    // the group flag are the groups, in order. Their nodes follow the run entries.
    let mut at = BLOCK_HEADER + top.len.div_ceil(4);
    let mut nodes = groups.iter();
    for e in top.entries[..top.len].iter_mut() {
        if *e & GROUP != 0 {
            let node = nodes.next().expect("one node per group");
            // At most 34 + 128 × 69 words: always below the 15 bits of a node offset.
            *e = CHILD | at as u16;
            at += node.node_words();
        }
    }
    block.clear();
    block.extend_from_slice(&top.bitmap[..2]);
    block.extend(top.packed());
    for g in &groups {
        g.push_node(&mut block);
    }
    debug_assert_eq!(block.len(), at);
    Encoded {
        block,
        runs: top.len,
        has_nodes: !groups.is_empty(),
    }
}
