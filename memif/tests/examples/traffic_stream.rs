//! The traffic tool's frames and sequence tracking (`examples/common/stream.rs`) in-process:
//! frames checked byte for byte, and the sequence tracker against a model and over long runs.

use std::collections::HashSet;

use proptest::prelude::*;

use crate::frames::inet_checksum;
use crate::stream;

#[test]
fn stream_frames_are_checked_byte_for_byte() {
    let addrs = stream::Addresses {
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_mac: [2, 0, 0, 0, 0, 1],
    };
    for size in [60usize, 64, 1514, 9000] {
        let templates = stream::FrameRing::new(size, 5, &addrs);
        let mut sink = stream::Sink::default();
        let f = stream::build_frame(size, 5, 1000, &addrs);
        assert_eq!(f.len(), size);
        assert_eq!(inet_checksum(&f[14..34]), 0, "IPv4 header checksum");
        sink.check(&f, 5, Some(&templates));
        // MAC addresses swapped (macswap): still intact.
        let mut swapped = f.clone();
        swapped[0..6].copy_from_slice(&f[6..12]);
        swapped[6..12].copy_from_slice(&f[0..6]);
        sink.check(&swapped, 5, Some(&templates));
        assert_eq!((sink.received, sink.corrupted), (2, 0));
        // Any byte after the MACs, except the sequence number, is checked.
        for i in (12..size).filter(|i| !(stream::SEQ_OFF..stream::FILL_OFF).contains(i)) {
            let mut bad = f.clone();
            bad[i] ^= 0x40;
            let mut s = stream::Sink::default();
            s.check(&bad, 5, Some(&templates));
            assert_eq!(s.corrupted + s.foreign, 1, "byte {i} of {size}");
        }
        let mut short = f.clone();
        short.pop();
        sink.check(&short, 5, Some(&templates));
        assert_eq!(sink.corrupted, 1);
        sink.check(
            &stream::build_frame(size, 6, 1, &addrs),
            5,
            Some(&templates),
        );
        sink.check(&[0u8; 30], 5, Some(&templates));
        assert_eq!(sink.foreign, 2);
    }
}

proptest! {
    #[test]
    fn seq_tracker_matches_a_model(seqs in proptest::collection::vec(0u64..3000, 0..3000)) {
        let mut t = stream::SeqTracker::default();
        let mut seen = HashSet::new();
        let (mut unique, mut dup, mut late, mut high) = (0u64, 0u64, 0u64, None::<u64>);
        for &s in &seqs {
            t.record(s);
            if !seen.insert(s) {
                dup += 1;
            } else {
                unique += 1;
                if high.is_some_and(|h| s < h) {
                    late += 1;
                }
            }
            high = high.max(Some(s));
        }
        prop_assert_eq!((t.unique, t.duplicated, t.reordered), (unique, dup, late));
    }
}

#[test]
fn seq_tracker_window_slides_over_long_runs() {
    let mut t = stream::SeqTracker::default();
    for s in 0..1_000_000u64 {
        t.record(s);
    }
    assert_eq!(t.record(999_990), stream::Sighting::Duplicate);
    let far = 1_000_000 + 3 * stream::SeqTracker::WINDOW;
    assert_eq!(t.record(far), stream::Sighting::InOrder);
    assert_eq!(t.record(far - 5), stream::Sighting::Late);
    assert_eq!(t.record(far - 5), stream::Sighting::Duplicate);
    // Older than the window: late, and not counted as distinct (it cannot be told from a
    // duplicate), so the sender's total shows it as lost too.
    assert_eq!(t.record(1_000_001), stream::Sighting::Late);
    assert_eq!((t.unique, t.duplicated, t.reordered), (1_000_002, 2, 2));
}
