//! Encoding one node's 256 entries as what workers read: the header word, the bitmap of run
//! starts, and the runs' entries (the layout is described in `table`).

use super::table::NODE_HEADER;

/// Encodes a node with `default` (value + 1, 0 = none) and `entries` into `out` (cleared
/// first).
pub(super) fn node(default: u16, entries: &[u32; 256], out: &mut Vec<u64>) {
    out.clear();
    out.resize(NODE_HEADER, 0);
    let mut runs = 0usize;
    let mut prev = None;
    let mut pair = 0u64;
    for (j, &e) in entries.iter().enumerate() {
        if prev == Some(e) {
            continue;
        }
        prev = Some(e);
        out[1 + j / 64] |= 1 << (j % 64);
        pair |= (e as u64) << (32 * (runs % 2));
        runs += 1;
        if runs.is_multiple_of(2) {
            out.push(std::mem::take(&mut pair));
        }
    }
    if runs % 2 == 1 {
        out.push(pair);
    }
    let mut header = default as u64;
    let mut before = 0u64;
    for k in 0..4 {
        header |= before << (24 + 8 * k);
        before += out[1 + k].count_ones() as u64;
    }
    out[0] = header;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_counts_and_default_are_where_the_reader_looks() {
        let mut entries = [0u32; 256];
        entries[64..].fill(7);
        entries[200] = 9;
        let mut out = Vec::new();
        node(5, &entries, &mut out);
        // Runs: 0 at 0, 7 at 64, 9 at 200, 7 at 201.
        assert_eq!(out.len(), NODE_HEADER + 2);
        assert_eq!(out[1], 1);
        assert_eq!(out[2], 1);
        assert_eq!(out[3], 0);
        assert_eq!(out[4], 1 << 8 | 1 << 9);
        assert_eq!(out[0] & 0xffff, 5);
        assert_eq!((out[0] >> 24) & 0xff, 0);
        assert_eq!((out[0] >> 32) & 0xff, 1, "bits before word 1");
        assert_eq!((out[0] >> 40) & 0xff, 2, "bits before word 2");
        assert_eq!((out[0] >> 48) & 0xff, 2, "bits before word 3");
        assert_eq!(out[5], 7 << 32);
        assert_eq!(out[6], 9 | 7 << 32);
    }
}
