//! (g) The virtio-net header: ten bytes read by `Offload::from_virtio` for the frame after them
//! (or, when they name no work, the partial checksum `infer_partial_checksum` finds on the bare
//! frame, as an AF_XDP port receives it); the work done in software by `resolve` (checksum completion or segmentation) on
//! the frame written into buffers of one of three sizes (so chains split it anywhere).
//! Invariants: no panic; a header read back from the work (`to_virtio`) reads as the same
//! work; segments each at most the headers plus `gso_size` bytes, never more than asked; every
//! buffer back in the pool whatever happened (exact accounting, no double free).
#![no_main]

use std::cell::RefCell;
use std::sync::Arc;

use dataplane::buffer::{BufferIndex, BufferPool, BufferPoolConfig, HugepagePolicy, WorkerBuffers};
use dataplane::offload::{
    infer_partial_checksum, resolve, Gso, Offload, Resolved, VIRTIO_NET_HDR_LEN,
};
use libfuzzer_sys::fuzz_target;

struct Pools(Vec<(Arc<BufferPool>, WorkerBuffers)>);

thread_local! {
    static POOLS: RefCell<Pools> = RefCell::new(Pools(
        [2048u16, 127, 64]
            .iter()
            .map(|&data_size| {
                let p = BufferPool::new(&BufferPoolConfig {
                    buffers: 4096,
                    data_size,
                    hugepages: HugepagePolicy::Never,
                    ..Default::default()
                })
                .unwrap();
                let b = p.worker_buffers();
                (p, b)
            })
            .collect(),
    ));
}

fuzz_target!(|data: &[u8]| {
    if data.len() < VIRTIO_NET_HDR_LEN + 1 {
        return;
    }
    let (sel, rest) = data.split_at(1);
    let (hdr, frame) = rest.split_at(VIRTIO_NET_HDR_LEN);
    let hdr: &[u8; VIRTIO_NET_HDR_LEN] = hdr.try_into().unwrap();
    let o = match Offload::from_virtio(hdr, frame.len()) {
        Ok(Some(o)) => o,
        Ok(None) => match infer_partial_checksum(frame) {
            Some(o) => {
                let end = usize::from(o.csum_start) + usize::from(o.csum_offset) + 2;
                assert!(
                    end <= frame.len(),
                    "an inferred checksum field outside the frame"
                );
                o
            }
            None => return,
        },
        Err(_) => return,
    };
    if let Ok(Some(back)) = Offload::from_virtio(&o.to_virtio(frame), frame.len()) {
        assert_eq!(back, o, "to_virtio does not read back as the same work");
    }
    POOLS.with_borrow_mut(|pools| {
        let (pool, b) = &mut pools.0[usize::from(sel[0]) % 3];
        let Some(bi) = b.alloc_one() else {
            panic!("pool empty: a leak");
        };
        if b.write_packet(bi, frame).is_err() {
            b.free(&[bi]);
            assert_eq!(pool.in_use_count(), 0);
            return;
        }
        b.meta_mut(bi).set_offload(o);
        let room = usize::from(sel[0] >> 2) % 64 + 1;
        let mut out = vec![BufferIndex::NONE; room];
        match resolve(b, bi, &mut out) {
            Ok(Resolved::Untouched) | Ok(Resolved::ChecksumCompleted) => {
                assert_eq!(out[0], bi);
                assert!(b.meta(bi).offload().is_none(), "work left after completion");
                b.free(&[bi]);
            }
            Ok(Resolved::Segmented(n)) => {
                assert!(n <= room && n >= 1);
                assert_ne!(o.gso, Gso::None);
                let mut total = 0;
                for &s in &out[..n] {
                    let len = b.meta(s).total_length() as usize;
                    assert!(len <= frame.len(), "a segment longer than the super-frame");
                    assert!(b.meta(s).offload().is_none());
                    total += len;
                }
                assert!(total >= frame.len() || n == 1);
                b.free(&out[..n]);
            }
            Err(_) => b.free(&[bi]),
        }
        assert_eq!(pool.in_use_count(), 0, "buffers leaked");
        assert_eq!(pool.double_free_count(), 0, "a buffer was freed twice");
    });
});
