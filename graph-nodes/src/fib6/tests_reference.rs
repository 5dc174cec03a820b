//! The IPv6 table against a naive reference: random routes of every length (/0 and /128
//! often), overlapping, added and removed, with deferred batches and recycling in between.

use std::collections::BTreeMap;

use dataplane::memory::HugepagePolicy;
use proptest::prelude::*;

use super::{mask, Lpm6};

/// The longest matching route by scanning every route.
fn naive(routes: &BTreeMap<(u128, u8), u32>, addr: u128) -> Option<u32> {
    routes
        .iter()
        .filter(|&(&(p, l), _)| addr & mask(l) == p)
        .max_by_key(|&(&(_, l), _)| l)
        .map(|(_, &v)| v)
}

#[derive(Debug, Clone)]
enum Op {
    Add(u128, u8, u32),
    /// Delete the route at this position (modulo the count).
    Delete(usize),
    Recycle,
    /// Hold back what readers see until the next flush (or the end).
    Defer,
    Flush,
}

fn addr() -> impl Strategy<Value = u128> {
    // Addresses from a few clusters so that routes overlap and share nodes at every level.
    let doc = 0x2001_0db8u128 << 96;
    prop_oneof![
        any::<u128>(),
        (0u128..4, any::<u16>(), any::<u64>())
            .prop_map(move |(c, x, y)| doc | c << 84 | (x as u128) << 64 | y as u128),
        (0u128..4, any::<u32>()).prop_map(move |(c, x)| doc | 0xab << 64 | c << 32 | x as u128),
        (0u128..8, any::<u128>()).prop_map(|(c, x)| (0x2a00 + c) << 112 | x >> 16),
        (0u128..256).prop_map(move |x| doc | 1 << 80 | x),
    ]
}

fn len() -> impl Strategy<Value = u8> {
    prop_oneof![
        2 => 0u8..=128,
        1 => Just(0u8),
        1 => Just(128u8),
        2 => 16u8..=64,
        1 => 120u8..=128,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (addr(), len(), 0u32..1000).prop_map(|(a, l, v)| Op::Add(a, l, v)),
        2 => any::<usize>().prop_map(Op::Delete),
        1 => Just(Op::Recycle),
        1 => Just(Op::Defer),
        1 => Just(Op::Flush),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        // Beside this file, which is what this module may touch.
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::SourceParallel("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn matches_a_naive_reference(
        ops in proptest::collection::vec(op(), 1..150),
        probes in proptest::collection::vec(addr(), 64),
    ) {
        let mut lpm = Lpm6::new(4 << 20, HugepagePolicy::Never).unwrap();
        let empty_bytes = lpm.table_bytes();
        let mut routes = BTreeMap::new();
        let mut deferred = false;
        for op in ops {
            match op {
                Op::Add(a, l, v) => {
                    let p = a & mask(l);
                    lpm.insert(p, l, v).unwrap();
                    routes.insert((p, l), v);
                }
                Op::Delete(i) if !routes.is_empty() => {
                    let key = *routes.keys().nth(i % routes.len()).unwrap();
                    let v = routes.remove(&key).unwrap();
                    prop_assert_eq!(lpm.remove(key.0, key.1), Some(v));
                    prop_assert_eq!(lpm.remove(key.0, key.1), None);
                }
                Op::Recycle => lpm.recycle_retired(),
                Op::Defer => {
                    lpm.defer_updates();
                    deferred = true;
                }
                Op::Flush => {
                    lpm.flush().unwrap();
                    deferred = false;
                }
                _ => {}
            }
            prop_assert_eq!(lpm.len(), routes.len());
            if !deferred {
                // What readers see now, at the first address of every route and the probes.
                let t = lpm.table();
                for a in routes.keys().map(|k| k.0).chain(probes.iter().copied()) {
                    prop_assert_eq!(t.lookup(a), naive(&routes, a), "address {:#x}", a);
                }
            }
        }
        lpm.flush().unwrap();
        let t = lpm.table().clone();
        // Probe every route's first and last address, just outside them, inside, and others.
        let mut addrs = probes;
        for &(p, l) in routes.keys() {
            let last = p | !mask(l);
            addrs.extend([p, last, p.wrapping_sub(1), last.wrapping_add(1), p | (!mask(l) & 0x5a5a_5a5a_5a5a_5a5a_5a5a_5a5a_5a5a_5a5a)]);
        }
        let mut batch = vec![0; addrs.len()];
        t.lookup_batch(&addrs, &mut batch);
        for (&a, &b) in addrs.iter().zip(&batch) {
            let want = naive(&routes, a);
            prop_assert_eq!(t.lookup(a), want, "address {:#x}", a);
            prop_assert_eq!(b, want.unwrap_or(u32::MAX), "batch, address {:#x}", a);
        }
        for (&(p, l), &v) in &routes {
            prop_assert_eq!(lpm.get(p, l), Some(v));
        }
        // Deleting everything leaves an empty table: no node, only the root.
        for (p, l) in std::mem::take(&mut routes).into_keys() {
            prop_assert!(lpm.remove(p, l).is_some());
        }
        lpm.recycle_retired();
        prop_assert_eq!(lpm.node_count(), 0);
        prop_assert_eq!(lpm.table_bytes(), empty_bytes);
        prop_assert_eq!(lpm.retired_bytes(), 0);
        for &a in &addrs {
            prop_assert_eq!(t.lookup(a), None);
        }
    }
}
