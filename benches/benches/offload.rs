#![allow(missing_docs)] // criterion_group! generates undocumented functions
//! Software offloads, per packet: the Internet checksum of a full-size TCP payload, and a 64 KiB
//! TCP super-frame (as a kernel interface hands one over) cut into 1,448-byte segments with
//! their checksums, what `offload-resolve` does before a frame leaves by memif or WireGuard.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::offload::{ones_sum, resolve, Gso, Offload, Resolved};
use dataplane::BufferIndex;

const MSS: usize = 1448;
const SEGMENTS: usize = 45;

/// Ethernet + IPv4 + TCP (20 bytes) + `payload`, the TCP checksum the pseudo-header's sum
/// (NEEDS_CSUM, as the kernel leaves it).
fn super_frame(payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let total = (40 + payload.len()) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 7, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&[
        0x04, 0xd2, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff,
    ]);
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(payload);
    f
}

fn offload(c: &mut Criterion) {
    let payload: Vec<u8> = (0..MSS * SEGMENTS).map(|i| (i * 7 + 3) as u8).collect();
    let mut g = c.benchmark_group("offload");
    g.throughput(Throughput::Bytes(MSS as u64));
    g.bench_function("ones_sum_1448", |b| {
        b.iter(|| ones_sum(black_box(&payload[1..1 + MSS])))
    });

    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 4096,
        data_size: 2048,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap();
    let mut buffers = pool.worker_buffers();
    let frame = super_frame(&payload);
    let gso = Offload {
        csum_start: 34,
        csum_offset: 16,
        gso_size: MSS as u16,
        gso: Gso::Tcp4,
        bits: Offload::NEEDS_CSUM,
    };
    let mut out = [BufferIndex::NONE; 64];
    g.throughput(Throughput::Elements(SEGMENTS as u64));
    // Only the cut is timed: writing the super-frame into buffers is set-up.
    g.bench_function("segment_64k_tcp4_per_segment", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let bi = buffers.alloc_one().unwrap();
                buffers.write_packet(bi, &frame).unwrap();
                buffers.meta_mut(bi).set_offload(gso);
                let start = Instant::now();
                let r = resolve(&mut buffers, bi, &mut out);
                spent += start.elapsed();
                let Ok(Resolved::Segmented(n)) = r else {
                    panic!("not segmented: {r:?}");
                };
                buffers.free(&out[..n]);
            }
            spent
        })
    });
    g.finish();
}

criterion_group!(benches, offload);
criterion_main!(benches);
