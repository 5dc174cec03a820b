//! What drivers that hold buffers outside the workers use: index ↔ address conversion without a
//! division, and all-or-nothing takes from / gives to the free stack with exact accounting.

use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy, PoolExhausted};
use dataplane::BufferIndex;

fn pool(buffers: u32, prefix_size: u16, data_size: u16) -> std::sync::Arc<BufferPool> {
    BufferPool::new(&BufferPoolConfig {
        buffers,
        prefix_size,
        data_size,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .expect("pool")
}

#[test]
fn every_address_of_every_stride_maps_back_to_its_buffer() {
    // Strides of several sizes, powers of two and not, with and without a driver prefix.
    for (prefix, data) in [(0, 2048), (192, 2048), (128, 64), (64, 9000), (0, 1984)] {
        let p = pool(300, prefix, data);
        let loc = p.locator();
        assert_eq!(loc.stride(), p.stride());
        assert_eq!(p.prefix_size(), prefix);
        let (base, len) = p.memory();
        for bi in (0..p.capacity()).map(BufferIndex::new) {
            let start = loc.buffer_start(bi).unwrap();
            assert_eq!(start as usize, base as usize + bi.as_usize() * p.stride());
            for off in [
                0,
                1,
                63,
                64,
                prefix as usize,
                p.stride() / 2,
                p.stride() - 1,
            ] {
                // SAFETY: only an address is computed, inside the region.
                let addr = unsafe { start.add(off) };
                assert_eq!(
                    loc.index_of(addr),
                    Some((bi, off)),
                    "prefix {prefix} data {data}"
                );
            }
        }
        assert_eq!(loc.buffer_start(BufferIndex::new(p.capacity())), None);
        let end = base as usize + p.capacity() as usize * p.stride();
        assert!(end <= base as usize + len);
        assert_eq!(loc.index_of(end as *const u8), None);
        assert_eq!(loc.index_of((base as usize - 1) as *const u8), None);
        assert_eq!(loc.index_of(std::ptr::null()), None);
    }
}

#[test]
fn take_free_is_all_or_nothing_and_put_free_restores_the_counts() {
    let p = pool(100, 0, 2048);
    let mut a = [BufferIndex::NONE; 60];
    p.take_free(&mut a).unwrap();
    assert_eq!(p.free_count(), 40);
    assert_eq!(p.in_use_count(), 60);
    let mut b = [BufferIndex::NONE; 41];
    assert_eq!(
        p.take_free(&mut b),
        Err(PoolExhausted {
            wanted: 41,
            available: 40
        })
    );
    assert_eq!(p.free_count(), 40, "a refused take takes nothing");
    // Taken buffers are owned: a worker may free them (they are not flagged free) …
    let mut w = p.worker_buffers();
    w.free(&a[..10]);
    assert_eq!(p.double_free_count(), 0);
    // … and the rest go back through put_free.
    p.put_free(&a[10..]);
    assert_eq!(p.double_free_count(), 0);
    drop(w);
    assert_eq!(p.free_count(), 100);
    // Giving back a free buffer is a counted, ignored double free.
    p.put_free(&a[..3]);
    assert_eq!(p.double_free_count(), 3);
    assert_eq!(p.free_count(), 100);
    // A buffer given back through put_free can be allocated by a worker again.
    let mut w = p.worker_buffers();
    let mut all = [BufferIndex::NONE; 100];
    w.alloc(&mut all).unwrap();
    let mut sorted = all.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 100);
    w.free(&all);
    drop(w);
    assert_eq!(p.free_count(), 100);
}

#[test]
#[should_panic(expected = "beyond the pool")]
fn put_free_refuses_an_index_beyond_the_pool() {
    pool(10, 0, 2048).put_free(&[BufferIndex::new(10)]);
}
