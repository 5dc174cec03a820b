//! Unit tests of the IPv6 table: matches, errors, memory, and a reader running beside the writer.

use dataplane::memory::HugepagePolicy;

use super::table::ROOT_ENTRIES;
use super::{mask, Lpm6, Lpm6Error, Lpm6Table, MAX_VALUE};

fn ip(s: &str) -> u128 {
    u128::from(s.parse::<std::net::Ipv6Addr>().expect("an IPv6 address"))
}

fn small() -> Lpm6 {
    Lpm6::new(1 << 20, HugepagePolicy::Never).unwrap()
}

const ROOT_BYTES: u64 = ROOT_ENTRIES as u64 * 8;

#[test]
fn longest_prefix_wins_and_deletes_restore_the_cover() {
    let mut l = small();
    let t = l.table().clone();
    assert_eq!(t.lookup(ip("2001:db8::1")), None);
    let routes = [
        ("::", 0, 1),
        ("2000::", 3, 2),
        ("2001::", 16, 3),
        ("2001:db8::", 32, 4),
        ("2001:db8:1::", 48, 5),
        ("2001:db8:1:2::", 64, 6),
        ("2001:db8:1:2::1", 128, 7),
        ("2001:db8:1:2::", 127, 8),
        ("2001:db8:1:2:8000::", 65, 9),
    ];
    for &(p, len, v) in &routes {
        l.insert(ip(p), len, v).unwrap();
    }
    assert_eq!(l.len(), routes.len());
    let cases = [
        ("2001:db8:1:2::1", Some(7)),
        ("2001:db8:1:2::", Some(8)),
        ("2001:db8:1:2::2", Some(6)),
        ("2001:db8:1:2:8000::5", Some(9)),
        ("2001:db8:1:3::", Some(5)),
        ("2001:db8:2::", Some(4)),
        ("2001:db9::", Some(3)),
        ("2002::", Some(2)),
        ("3fff:ffff::", Some(2)),
        ("4000::", Some(1)),
        ("::1", Some(1)),
    ];
    for (a, want) in cases {
        assert_eq!(t.lookup(ip(a)), want, "{a}");
    }
    // A shorter route added later does not override longer ones.
    l.insert(ip("2001:db8:1::"), 40, 10).unwrap();
    assert_eq!(t.lookup(ip("2001:db8:1:2::1")), Some(7));
    assert_eq!(t.lookup(ip("2001:db8:1:3::")), Some(5));
    assert_eq!(t.lookup(ip("2001:db8:2::")), Some(10));
    assert_eq!(t.lookup(ip("2001:db8:100::")), Some(4));
    // Deleting restores what covers each address.
    assert_eq!(l.remove(ip("2001:db8:1:2::1"), 128), Some(7));
    assert_eq!(t.lookup(ip("2001:db8:1:2::1")), Some(8));
    assert_eq!(l.remove(ip("2001:db8:1:2::"), 127), Some(8));
    assert_eq!(t.lookup(ip("2001:db8:1:2::1")), Some(6));
    assert_eq!(l.remove(ip("2001:db8:1::"), 48), Some(5));
    assert_eq!(t.lookup(ip("2001:db8:1:3::")), Some(10));
    assert_eq!(t.lookup(ip("2001:db8:1:2::1")), Some(6));
    assert_eq!(l.remove(ip("2000::"), 3), Some(2));
    assert_eq!(t.lookup(ip("2002::")), Some(1));
    assert_eq!(l.remove(ip("::"), 0), Some(1));
    assert_eq!(t.lookup(ip("2002::")), None);
    assert_eq!(t.lookup(ip("2001:db9::")), Some(3));
    assert_eq!(l.remove(ip("::"), 0), None);
    assert_eq!(l.get(ip("2001:db8::"), 32), Some(4));
    assert_eq!(l.get(ip("2001:db8::"), 33), None);
    assert_eq!(l.get(ip("2001:db8:1:2:8000::"), 65), Some(9));
    assert_eq!(l.get(ip("2001::"), 16), Some(3));
    assert_eq!(l.len(), routes.len() + 1 - 5);
}

#[test]
fn bad_routes_are_refused() {
    let mut l = small();
    assert_eq!(l.insert(0, 129, 1), Err(Lpm6Error::BadLength(129)));
    assert_eq!(
        l.insert(0, 8, MAX_VALUE + 1),
        Err(Lpm6Error::BadValue(MAX_VALUE + 1))
    );
    assert_eq!(l.remove(0, 129), None);
    assert_eq!(l.get(0, 129), None);
    l.insert(u128::MAX, 128, MAX_VALUE).unwrap();
    assert_eq!(l.table().lookup(u128::MAX), Some(MAX_VALUE));
    assert_eq!(l.table().lookup(u128::MAX - 1), None);
    assert_eq!(l.len(), 1);
}

#[test]
fn replacing_a_route_keeps_one_route() {
    let mut l = small();
    for len in [0, 7, 16, 17, 48, 128] {
        l.insert(ip("2001:db8::1"), len, 1).unwrap();
        l.insert(ip("2001:db8::1"), len, 2).unwrap();
        assert_eq!(l.get(ip("2001:db8::1"), len), Some(2));
    }
    assert_eq!(l.len(), 6);
    assert_eq!(l.table().lookup(ip("2001:db8::1")), Some(2));
}

#[test]
fn deferred_changes_wait_for_the_flush_and_memory_comes_back() {
    let mut l = small();
    let t = l.table().clone();
    assert_eq!(l.table_bytes(), ROOT_BYTES);
    l.defer_updates();
    for k in 0..300u128 {
        l.insert(ip("2001:db8::") | k << 80, 48, k as u32).unwrap();
    }
    l.insert(ip("2001:db8:5::"), 64, 999).unwrap();
    assert_eq!(
        t.lookup(ip("2001:db8:5::")),
        None,
        "not shown before the flush"
    );
    assert_eq!(l.table_bytes(), ROOT_BYTES, "nothing written yet");
    l.flush().unwrap();
    assert_eq!(t.lookup(ip("2001:db8:5::")), Some(999));
    assert_eq!(t.lookup(ip("2001:db8:5:1::")), Some(5));
    assert_eq!(t.lookup(ip("2001:db8:12b::")), Some(299));
    assert_eq!(t.lookup(ip("2001:db8:12c::")), None);
    let loaded = l.table_bytes();
    assert!(loaded > ROOT_BYTES);
    assert_eq!(l.retired_bytes(), 0, "a first load replaces nothing");
    // A change copies the nodes above it: the old copies are retired, not freed.
    l.insert(ip("2001:db8:5::"), 64, 1000).unwrap();
    assert_eq!(t.lookup(ip("2001:db8:5::")), Some(1000));
    assert_eq!(l.table_bytes(), loaded, "the same shape");
    let retired = l.retired_bytes();
    assert!(retired > 0);
    l.recycle_retired();
    assert_eq!(l.retired_bytes(), 0);
    // The same change again writes nothing.
    l.insert(ip("2001:db8:5::"), 64, 1000).unwrap();
    assert_eq!(l.retired_bytes(), 0);
    for k in 0..300u128 {
        assert_eq!(
            l.remove(ip("2001:db8::") | k << 80, 48),
            Some(k as u32),
            "{k}"
        );
    }
    l.remove(ip("2001:db8:5::"), 64).unwrap();
    assert_eq!(l.node_count(), 0);
    assert_eq!(l.table_bytes(), ROOT_BYTES, "every node unlinked");
    assert_eq!(t.lookup(ip("2001:db8:5::")), None);
    assert!(l.is_empty());
}

#[test]
fn running_out_of_node_memory_is_an_error_until_recycling() {
    // Room for the 14 one-line nodes of a /128 and a few more.
    let mut l = Lpm6::new(64 * 20, HugepagePolicy::Never).unwrap();
    let t = l.table().clone();
    l.insert(ip("2001:db8::1"), 128, 1).unwrap();
    let full = l.insert(ip("2001:db9::1"), 128, 2);
    assert!(matches!(full, Err(Lpm6Error::NoSpace(_))), "{full:?}");
    assert_eq!(t.lookup(ip("2001:db9::1")), None, "not shown");
    assert_eq!(t.lookup(ip("2001:db8::1")), Some(1), "the rest intact");
    // Taking the route back lets the rest be shown; nothing of it ever was.
    assert_eq!(l.remove(ip("2001:db9::1"), 128), Some(2));
    assert_eq!(l.remove(ip("2001:db8::1"), 128), Some(1));
    assert_eq!(t.lookup(ip("2001:db8::1")), None);
    assert_eq!(
        l.insert(ip("2001:db9::1"), 128, 2),
        Err(Lpm6Error::NoSpace(20 * 64)),
        "retired, not free"
    );
    // Once the memory those changes unlinked is reusable, the route fits.
    l.recycle_retired();
    l.flush().unwrap();
    assert_eq!(t.lookup(ip("2001:db9::1")), Some(2));
    assert_eq!(t.lookup(ip("2001:db8::1")), None);
    assert_eq!(l.len(), 1);
}

/// The longest matching route by scanning.
pub(super) fn naive(routes: &[(u128, u8, u32)], addr: u128) -> Option<u32> {
    routes
        .iter()
        .filter(|&&(p, l, _)| addr & mask(l) == p)
        .max_by_key(|&&(_, l, _)| l)
        .map(|&(_, _, v)| v)
}

fn lookups_agree(t: &Lpm6Table, routes: &[(u128, u8, u32)], addrs: &[u128]) {
    let mut batch = vec![0; addrs.len()];
    t.lookup_batch(addrs, &mut batch);
    let prefetcher = t.prefetcher();
    for (&a, &b) in addrs.iter().zip(&batch) {
        prefetcher.prefetch(a);
        let want = naive(routes, a);
        assert_eq!(t.lookup(a), want, "{a:#x}");
        assert_eq!(b, want.unwrap_or(u32::MAX), "batch {a:#x}");
    }
}

#[test]
fn batches_of_any_length_match_single_lookups() {
    let mut l = small();
    let mut routes = Vec::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for k in 0..400u32 {
        let len = [0, 12, 16, 20, 32, 40, 48, 56, 64, 96, 127, 128][k as usize % 12];
        let p = (0x2001_0db8u128 << 96 | (next() as u128) << 40 | next() as u128) & mask(len);
        if routes
            .iter()
            .all(|r: &(u128, u8, u32)| (r.0, r.1) != (p, len))
        {
            l.insert(p, len, k).unwrap();
            routes.push((p, len, k));
        }
    }
    let mut addrs: Vec<u128> = routes
        .iter()
        .flat_map(|&(p, len, _)| {
            [
                p,
                p | !mask(len),
                p.wrapping_sub(1),
                p | (next() as u128 & !mask(len)),
            ]
        })
        .collect();
    addrs.extend((0..300).map(|_| (next() as u128) << 64 | next() as u128));
    for n in [0, 1, 7, 255, 256, 257, addrs.len()] {
        lookups_agree(l.table(), &routes, &addrs[..n]);
    }
}

/// Two route sets over the same few /16s, shaped differently (a /16 route against longer ones,
/// dense /48s, chains to /128, routes of /0–/16 painting the root).
fn config(which: u32) -> Vec<(u128, u8, u32)> {
    let base = ip("2001:db8::");
    let mut v = vec![(base & mask(16), 16, 1 + which), (0, 1 + which as u8, 5)];
    for k in 0..40u128 {
        if !(k + which as u128).is_multiple_of(3) {
            v.push((base | (k * 3) << 80, 48, 100 + k as u32 + 1000 * which));
        }
    }
    for k in 0..6u128 {
        v.push((
            base | (k * 7) << 80 | (17 + which as u128 * 64),
            128,
            200 + k as u32 + 1000 * which,
        ));
        v.push((
            base | 0x8000 << 80 | k << 75,
            54 + which as u8,
            300 + k as u32 + 1000 * which,
        ));
        v.push((
            ip("2a00::") | k << 104,
            24 + 8 * which as u8,
            400 + k as u32 + 1000 * which,
        ));
    }
    for r in &mut v {
        r.0 &= mask(r.1);
    }
    v
}

/// A reader looking up addresses while the writer switches between two route sets (each switch
/// one flush, memory reused only after the reader has passed a quiescent state) sees, for every
/// address, its route in the old set or in the new one: never a mix, never nothing.
#[test]
fn a_concurrent_reader_sees_the_old_or_the_new_route() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    let sets = [config(0), config(1)];
    let mut probes: Vec<u128> = (0..4096u128)
        .map(|k| ip("2001:db8::") | (k % 128) << 80 | (k / 128) << 70 | ((k % 3) * 17))
        .collect();
    probes.extend((0..256u128).map(|k| ip("2a00::") | k << 98));
    probes.extend((0..64u128).map(|k| k << 122));
    let want: Vec<[Option<u32>; 2]> = probes
        .iter()
        .map(|&a| [naive(&sets[0], a), naive(&sets[1], a)])
        .collect();
    assert!(
        want.iter().filter(|w| w[0] != w[1]).count() > 1000,
        "the sets differ"
    );
    let mut lpm = small();
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

/// A reader beside a writer that shows every change at once (no deferring), recycling memory
/// after each of the reader's quiescent states, never sees a value that was not the address's
/// route in some state the writer went through.
#[test]
fn a_concurrent_reader_of_single_changes_sees_only_real_states() {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    let (a, b) = (config(0), config(1));
    // The changes: b's routes in, a's out, then back, one at a time.
    let mut ops: Vec<(bool, (u128, u8, u32))> = Vec::new();
    for round in 0..2 {
        let (from, to) = if round == 0 { (&a, &b) } else { (&b, &a) };
        ops.extend(to.iter().map(|&r| (true, r)));
        ops.extend(from.iter().map(|&r| (false, r)));
    }
    let probes: Vec<u128> = (0..2048u128)
        .map(|k| ip("2001:db8::") | (k % 128) << 80 | (k / 128) << 75 | ((k % 3) * 17))
        .chain((0..64u128).map(|k| ip("2a00::") | k << 98))
        .collect();
    // Every value each probe has in some state along the way.
    let mut state: Vec<(u128, u8, u32)> = a.clone();
    let mut valid: Vec<HashSet<u32>> = probes
        .iter()
        .map(|&p| HashSet::from([naive(&state, p).unwrap_or(u32::MAX)]))
        .collect();
    for &(add, (p, l, v)) in &ops {
        state.retain(|r| (r.0, r.1) != (p, l));
        if add {
            state.push((p, l, v));
        }
        for (set, &probe) in valid.iter_mut().zip(&probes) {
            set.insert(naive(&state, probe).unwrap_or(u32::MAX));
        }
    }
    let mut lpm = small();
    for &(p, l, v) in &a {
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
                for (i, &o) in out.iter().enumerate() {
                    if !valid[i].contains(&o) && bad.len() < 10 {
                        bad.push((probes[i], o));
                    }
                }
                passes.fetch_add(1, Ordering::Release);
            }
            bad
        })
    };
    for (k, &(add, (p, l, v))) in ops.iter().enumerate() {
        if add {
            lpm.insert(p, l, v).unwrap();
        } else {
            assert!(lpm.remove(p, l).is_some());
        }
        if k % 8 == 7 {
            let start = passes.load(Ordering::Acquire);
            while passes.load(Ordering::Acquire) < start + 2 {
                std::thread::yield_now();
            }
            lpm.recycle_retired();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let bad = reader.join().unwrap();
    assert!(bad.is_empty(), "(address, seen): {bad:x?}");
    // Routes of both sets with the same prefix went out with the second set: as in `state`.
    assert_eq!(lpm.len(), state.len());
    for &p in &probes {
        assert_eq!(lpm.table().lookup(p), naive(&state, p), "{p:#x}");
    }
    assert!(passes.load(Ordering::Relaxed) >= 2 * (ops.len() as u64 / 8));
}
