//! The LPM against a naive reference: random routes of every depth, adds and deletes.

use dataplane::memory::HugepagePolicy;
use graph_nodes::fib::lpm::{mask, Lpm};
use proptest::prelude::*;

/// The longest matching rule by linear scan.
fn naive(rules: &[(u32, u8, u32)], addr: u32) -> Option<u32> {
    rules
        .iter()
        .filter(|(p, l, _)| addr & mask(*l) == *p)
        .max_by_key(|(_, l, _)| *l)
        .map(|(_, _, v)| *v)
}

#[derive(Debug, Clone)]
enum Op {
    Add(u32, u8, u32),
    /// Delete the rule at this position (modulo the count).
    Delete(usize),
    Recycle,
    /// Hold back what readers see until the next flush (or the end).
    Defer,
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    // Addresses from a few clusters so that rules overlap and share /24s.
    let addr = prop_oneof![
        any::<u32>(),
        (0u32..4, any::<u16>()).prop_map(|(c, x)| 0x0a00_0000 | c << 16 | x as u32),
        (0u32..4, any::<u16>()).prop_map(|(c, x)| 0xc000_0000 | c << 28 | x as u32),
        (0u32..1024).prop_map(|x| 0xc0a8_0000 | x),
    ];
    prop_oneof![
        4 => (addr, 0u8..=32, 0u32..1000).prop_map(|(a, l, v)| Op::Add(a, l, v)),
        2 => any::<usize>().prop_map(Op::Delete),
        1 => Just(Op::Recycle),
        1 => Just(Op::Defer),
        1 => Just(Op::Flush),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn matches_a_naive_reference(ops in proptest::collection::vec(op(), 1..120), probes in proptest::collection::vec(any::<u32>(), 64)) {
        let mut lpm = Lpm::new(256, HugepagePolicy::Never).unwrap();
        let empty_bytes = lpm.table_bytes();
        let mut rules: Vec<(u32, u8, u32)> = Vec::new();
        for op in ops {
            match op {
                Op::Add(a, l, v) => {
                    let p = a & mask(l);
                    lpm.insert(p, l, v).unwrap();
                    rules.retain(|r| !(r.0 == p && r.1 == l));
                    rules.push((p, l, v));
                }
                Op::Delete(i) if !rules.is_empty() => {
                    let (p, l, v) = rules.swap_remove(i % rules.len());
                    prop_assert_eq!(lpm.remove(p, l), Some(v));
                }
                Op::Recycle => lpm.recycle_retired(),
                Op::Defer => lpm.defer_updates(),
                Op::Flush => lpm.flush().unwrap(),
                _ => {}
            }
            prop_assert_eq!(lpm.len(), rules.len());
        }
        lpm.flush().unwrap();
        let t = lpm.table().clone();
        // Probe every rule's first and last address, just outside them, and random addresses.
        let mut addrs = probes;
        for &(p, l, _) in &rules {
            let last = p | !mask(l);
            addrs.extend([p, last, p.wrapping_sub(1), last.wrapping_add(1), p | (!mask(l) & 0x5a5a_5a5a)]);
        }
        let mut batch = vec![0; addrs.len()];
        t.lookup_batch(&addrs, &mut batch);
        let mut batch_prefetched = vec![0; addrs.len()];
        t.lookup_batch_prefetched(&addrs, &mut batch_prefetched);
        for ((&a, &b), &c) in addrs.iter().zip(&batch).zip(&batch_prefetched) {
            let want = naive(&rules, a);
            prop_assert_eq!(t.lookup(a), want, "address {:#010x}", a);
            prop_assert_eq!(b, want.unwrap_or(u32::MAX));
            prop_assert_eq!(c, b);
        }
        // Deleting everything leaves an empty table, no groups in use, and (once the
        // lines are back in place and their blocks reused) no blocks.
        for (p, l, _) in rules.drain(..) {
            lpm.remove(p, l);
        }
        lpm.recycle_retired();
        lpm.recycle_retired();
        prop_assert_eq!(lpm.groups_in_use(), 0);
        prop_assert_eq!(lpm.table_bytes(), empty_bytes);
        for &a in &addrs {
            prop_assert_eq!(t.lookup(a), None);
        }
    }
}

/// Two route sets over the same few /17s, shaped differently (runs, /24 nodes, a /17 with more
/// runs than a line holds).
fn config(which: u32) -> Vec<(u32, u8, u32)> {
    let base = 0x0a01_0000; // 10.1.0.0
    let mut v = vec![(base, 16, 1 + which)];
    for k in 0..40u32 {
        if !(k + which).is_multiple_of(3) {
            v.push((base | (k * 3) << 8, 24, 100 + k + 1000 * which));
        }
    }
    for k in 0..6u32 {
        v.push((
            base | (k * 7) << 8 | (17 + which * 64),
            32,
            200 + k + 1000 * which,
        ));
        v.push((
            base | 0x8000 | k << 10,
            22 + which as u8,
            300 + k + 1000 * which,
        ));
    }
    v
}

/// A reader looking up addresses while the writer switches between two route sets (each switch
/// one flush, blocks reused only after the reader has passed a quiescent state) sees, for every
/// address, its route in the old set or in the new one: never a mix, never nothing.
#[test]
fn a_concurrent_reader_sees_the_old_or_the_new_route() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    let sets = [config(0), config(1)];
    let probes: Vec<u32> = (0..4096u32)
        .map(|k| 0x0a01_0000 | (k * 16 + k % 16))
        .collect();
    let want: Vec<[Option<u32>; 2]> = probes
        .iter()
        .map(|&a| [naive(&sets[0], a), naive(&sets[1], a)])
        .collect();
    let mut lpm = Lpm::new(64, HugepagePolicy::Never).unwrap();
    for &(p, l, v) in &sets[0] {
        lpm.insert(p, l, v).unwrap();
    }
    let table = lpm.table().clone();
    let passes = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (passes, stop, probes) = (passes.clone(), stop.clone(), probes.clone());
        std::thread::spawn(move || {
            let mut out = vec![0; probes.len()];
            let mut bad = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                table.lookup_batch(&probes, &mut out);
                for (i, (&a, &o)) in probes.iter().zip(&out).enumerate() {
                    let single = table.lookup(a);
                    for got in [o, single.unwrap_or(u32::MAX)] {
                        if !want[i].iter().any(|w| w.unwrap_or(u32::MAX) == got) && bad.len() < 10 {
                            bad.push((a, got, want[i]));
                        }
                    }
                }
                // A quiescent state: nothing read before this point is used after it.
                passes.fetch_add(1, Ordering::Release);
            }
            bad
        })
    };
    let synchronize = || {
        let start = passes.load(Ordering::Acquire);
        while passes.load(Ordering::Acquire) < start + 2 {
            std::thread::yield_now();
        }
    };
    for round in 0..60 {
        let (from, to) = (&sets[round % 2], &sets[1 - round % 2]);
        lpm.defer_updates();
        for &(p, l, _) in from {
            lpm.remove(p, l);
        }
        for &(p, l, v) in to {
            lpm.insert(p, l, v).unwrap();
        }
        lpm.flush().unwrap();
        synchronize();
        lpm.recycle_retired();
    }
    stop.store(true, Ordering::Relaxed);
    let bad = reader.join().unwrap();
    assert!(bad.is_empty(), "(address, seen, [old, new]): {bad:x?}");
    assert!(
        passes.load(Ordering::Relaxed) >= 120,
        "the reader ran throughout"
    );
}
