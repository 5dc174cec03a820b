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
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn matches_a_naive_reference(ops in proptest::collection::vec(op(), 1..120), probes in proptest::collection::vec(any::<u32>(), 64)) {
        let mut lpm = Lpm::new(256, HugepagePolicy::Never).unwrap();
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
                _ => {}
            }
            prop_assert_eq!(lpm.len(), rules.len());
        }
        let t = lpm.table().clone();
        // Probe every rule's first and last address, just outside them, and random addresses.
        let mut addrs = probes;
        for &(p, l, _) in &rules {
            let last = p | !mask(l);
            addrs.extend([p, last, p.wrapping_sub(1), last.wrapping_add(1), p | (!mask(l) & 0x5a5a_5a5a)]);
        }
        let mut batch = vec![0; addrs.len()];
        t.lookup_batch(&addrs, &mut batch);
        for (&a, &b) in addrs.iter().zip(&batch) {
            let want = naive(&rules, a);
            prop_assert_eq!(t.lookup(a), want, "address {:#010x}", a);
            prop_assert_eq!(b, want.unwrap_or(u32::MAX));
        }
        // Deleting everything leaves an empty table and no groups in use.
        for (p, l, _) in rules.drain(..) {
            lpm.remove(p, l);
        }
        lpm.recycle_retired();
        prop_assert_eq!(lpm.groups_in_use(), 0);
        for &a in &addrs {
            prop_assert_eq!(t.lookup(a), None);
        }
    }
}
