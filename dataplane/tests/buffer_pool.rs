//! Buffer pool: exact accounting under random alloc/free/chain sequences, exhaustion, chains,
//! headroom, double frees, and the hugepage fallback.

use dataplane::BufferIndex;
use std::collections::HashSet;

use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy, PoolExhausted};
use proptest::prelude::*;

fn pool(buffers: u32) -> std::sync::Arc<BufferPool> {
    BufferPool::new(&BufferPoolConfig {
        buffers,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .expect("pool")
}

#[derive(Debug, Clone)]
enum Op {
    Alloc(usize),
    AllocUpTo(usize),
    /// Free the packet at this position (modulo the live count).
    Free(usize),
    /// Chain the packet at the second position behind the one at the first.
    Chain(usize, usize),
    /// Write a packet of this many bytes into the packet at the position (may chain).
    Write(usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..40).prop_map(Op::Alloc),
        (0usize..300).prop_map(Op::AllocUpTo),
        any::<usize>().prop_map(Op::Free),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Op::Chain(a, b)),
        (any::<usize>(), 0usize..9000).prop_map(|(a, n)| Op::Write(a, n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every buffer is either free or in exactly one live packet, and the pool's counts say so,
    /// across two worker handles and any sequence of operations.
    #[test]
    fn counts_stay_exact(ops in proptest::collection::vec((op(), any::<bool>()), 1..200)) {
        let pool = pool(600);
        let mut workers = [pool.worker_buffers(), pool.worker_buffers()];
        let mut live: Vec<BufferIndex> = Vec::new();
        for (op, second) in ops {
            let w = &mut workers[second as usize];
            match op {
                Op::Alloc(n) => {
                    let mut out = vec![BufferIndex::NONE; n];
                    match w.alloc(&mut out) {
                        Ok(()) => live.extend(out),
                        Err(PoolExhausted { wanted, .. }) => prop_assert_eq!(wanted, n),
                    }
                }
                Op::AllocUpTo(n) => {
                    let mut out = vec![BufferIndex::NONE; n];
                    let got = w.alloc_up_to(&mut out);
                    live.extend(&out[..got]);
                }
                Op::Free(i) if !live.is_empty() => {
                    let bi = live.swap_remove(i % live.len());
                    w.free_one(bi);
                }
                Op::Chain(a, b) if live.len() >= 2 => {
                    let a = a % live.len();
                    let mut b = b % live.len();
                    if a == b { b = (b + 1) % live.len(); }
                    let (head, tail) = (live[a], live[b]);
                    let before = w.meta(head).total_length() + w.meta(tail).total_length();
                    w.chain_append(head, tail);
                    prop_assert_eq!(w.meta(head).total_length(), before);
                    live.swap_remove(b);
                }
                Op::Write(a, n) if !live.is_empty() => {
                    let bi = live[a % live.len()];
                    let bytes: Vec<u8> = (0..n).map(|i| (i * 7 + n) as u8).collect();
                    if w.write_packet(bi, &bytes).is_ok() {
                        let mut back = Vec::new();
                        w.copy_packet(bi, &mut back);
                        prop_assert_eq!(back, bytes);
                        prop_assert_eq!(w.meta(bi).total_length() as usize, n);
                    }
                }
                _ => {}
            }
            // Every buffer reachable from a live packet is distinct, and the rest are free.
            let mut owned = HashSet::new();
            for &p in &live {
                for b in workers[0].chain(p) {
                    prop_assert!(owned.insert(b), "buffer {} owned twice", b);
                }
            }
            prop_assert_eq!(pool.in_use_count(), owned.len());
            prop_assert_eq!(pool.free_count() + owned.len(), 600);
        }
        for p in live.drain(..) {
            workers[0].free_one(p);
        }
        prop_assert_eq!(pool.in_use_count(), 0);
        prop_assert_eq!(pool.double_free_count(), 0);
    }
}

#[test]
fn exhaustion_is_an_error_and_allocates_nothing() {
    let pool = pool(100);
    let mut w = pool.worker_buffers();
    let mut all = vec![BufferIndex::NONE; 100];
    w.alloc(&mut all).expect("the whole pool");
    assert_eq!(pool.free_count(), 0);
    let mut more = [BufferIndex::NONE; 1];
    assert_eq!(
        w.alloc(&mut more),
        Err(PoolExhausted {
            wanted: 1,
            available: 0
        })
    );
    assert_eq!(w.alloc_up_to(&mut more), 0);
    assert!(w.alloc_one().is_none());
    w.free(&all[..10]);
    let mut eleven = [BufferIndex::NONE; 11];
    assert!(w.alloc(&mut eleven).is_err(), "all-or-nothing");
    assert_eq!(pool.free_count(), 10, "a failed alloc takes nothing");
    assert_eq!(w.alloc_up_to(&mut eleven), 10);
    w.free(&all[10..]);
    w.free(&eleven[..10]);
    assert_eq!(pool.in_use_count(), 0);
}

#[test]
fn double_free_is_caught_and_ignored() {
    let pool = pool(8);
    let mut w = pool.worker_buffers();
    let bi = w.alloc_one().unwrap();
    w.free_one(bi);
    w.free_one(bi);
    assert_eq!(pool.double_free_count(), 1);
    assert_eq!(pool.free_count(), 8);
    let mut all = [BufferIndex::NONE; 8];
    w.alloc(&mut all).unwrap();
    let distinct: HashSet<_> = all.iter().collect();
    assert_eq!(
        distinct.len(),
        8,
        "the double free did not duplicate the index"
    );
}

#[test]
fn headroom_prepend_and_advance() {
    let pool = pool(4);
    let mut w = pool.worker_buffers();
    let bi = w.alloc_one().unwrap();
    assert!(w.headroom() >= 128);
    w.write_packet(bi, b"payload").unwrap();
    let hdr = w.prepend(bi, 8).expect("room in the headroom");
    hdr.copy_from_slice(b"HEADER__");
    assert_eq!(w.data(bi), b"HEADER__payload");
    assert!(w.advance(bi, 8));
    assert_eq!(w.data(bi), b"payload");
    assert!(
        w.prepend(bi, w.headroom() + 1).is_none(),
        "never past the buffer start"
    );
    assert_eq!(w.data(bi), b"payload", "a refused prepend changes nothing");
    assert!(!w.advance(bi, 8), "cannot advance past the data");
    assert!(!w.set_length(bi, w.data_size() + 1));
    w.free_one(bi);
    assert_eq!(pool.in_use_count(), 0);
}

#[test]
fn buffers_are_named_by_index_and_do_not_overlap() {
    let pool = pool(64);
    let mut w = pool.worker_buffers();
    let mut bis = [BufferIndex::NONE; 64];
    w.alloc(&mut bis).unwrap();
    for &bi in &bis {
        let size = w.data_size();
        assert!(w.set_length(bi, size));
        w.data_mut(bi).fill(bi.get() as u8);
    }
    for &bi in &bis {
        assert!(
            w.data(bi).iter().all(|&b| b == bi.get() as u8),
            "buffer {bi} was overwritten"
        );
        assert_eq!(w.meta(bi).flags & dataplane::buffer::flags::FREE, 0);
    }
    w.free(&bis);
}

#[test]
fn no_hugepages_means_ordinary_pages_not_failure() {
    // With `Auto`, a machine without free hugepages still gets a working pool.
    let p = BufferPool::new(&BufferPoolConfig {
        buffers: 1024,
        hugepages: HugepagePolicy::Auto,
        ..Default::default()
    })
    .expect("a pool whatever the hugepage supply");
    let mut w = p.worker_buffers();
    assert!(w.alloc_one().is_some());
    let hugepages_free = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("HugePages_Free:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    if hugepages_free == 0 {
        assert!(!p.is_hugepage_backed());
        let required = BufferPool::new(&BufferPoolConfig {
            buffers: 1024,
            hugepages: HugepagePolicy::Require,
            ..Default::default()
        });
        assert!(required.is_err(), "Require must fail without hugepages");
    }
}

#[test]
fn hugepage_backed_pool_when_hugepages_exist() {
    let free = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("HugePages_Free:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    if free < 64 {
        testkit::unavailable(
            "hugepage_backed_pool_when_hugepages_exist",
            &format!("{free} free 2 MiB hugepages, 64 needed"),
        );
        return;
    }
    let p = BufferPool::new(&BufferPoolConfig {
        buffers: 8192,
        hugepages: HugepagePolicy::Require,
        ..Default::default()
    })
    .expect("hugepage pool");
    assert!(p.is_hugepage_backed());
    let mut w = p.worker_buffers();
    let mut bis = vec![BufferIndex::NONE; 8192];
    w.alloc(&mut bis).unwrap();
    w.free(&bis);
    assert_eq!(p.in_use_count(), 0);
}

/// `truncate` cuts a chained packet anywhere (inside a buffer, on a buffer's end, to zero),
/// keeps its first bytes, frees exactly the buffers no longer needed, and refuses to grow one.
#[test]
fn truncate_cuts_a_chain_and_frees_the_rest() {
    let p = BufferPool::new(&BufferPoolConfig {
        buffers: 64,
        data_size: 100,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .expect("pool");
    let mut b = p.worker_buffers();
    let bytes: Vec<u8> = (0..450u32).map(|i| (i * 7) as u8).collect();
    for len in [450u32, 449, 301, 300, 299, 100, 99, 1, 0] {
        let bi = b.alloc_one().unwrap();
        b.write_packet(bi, &bytes).unwrap();
        assert_eq!(p.in_use_count(), 5);
        assert!(!b.truncate(bi, 451), "a packet is not grown");
        assert!(b.truncate(bi, len), "{len}");
        assert_eq!(b.meta(bi).total_length(), len);
        let mut out = Vec::new();
        b.copy_packet(bi, &mut out);
        assert_eq!(out, &bytes[..len as usize], "{len}");
        let want = (len as usize).div_ceil(100).max(1);
        assert_eq!(p.in_use_count(), want, "{len}: buffers still held");
        b.free(&[bi]);
        assert_eq!(p.in_use_count(), 0);
    }
    assert_eq!(p.double_free_count(), 0);
}
