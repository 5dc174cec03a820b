#![allow(missing_docs)] // criterion_group! generates undocumented functions
//! Criterion micro-benchmarks of the engine: burst alloc/free, and one loop pass of a small graph.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dataplane::buffer::{BufferPool, BufferPoolConfig};
use dataplane::harness::{MacSwap, PacketSink, PacketSource, PassThrough, SourceConfig};
use dataplane::BufferIndex;
use dataplane::GraphBuilder;

fn pool() -> std::sync::Arc<BufferPool> {
    BufferPool::new(&BufferPoolConfig {
        buffers: 8192,
        ..Default::default()
    })
    .expect("pool")
}

fn buffers(c: &mut Criterion) {
    let pool = pool();
    let mut w = pool.worker_buffers();
    let mut bis = [BufferIndex::NONE; 256];
    let mut g = c.benchmark_group("buffers");
    g.throughput(Throughput::Elements(256));
    g.bench_function("alloc+free burst of 256", |b| {
        b.iter(|| {
            w.alloc(&mut bis).expect("pool has room");
            w.free(&bis);
        })
    });
    g.finish();
}

fn graph_pass(c: &mut Criterion) {
    let pool = pool();
    let mut w = pool.worker_buffers();
    let mut g = c.benchmark_group("graph");
    g.throughput(Throughput::Elements(256));
    for (name, swap) in [
        ("source → 4 pass-through → sink", false),
        ("source → mac-swap → sink", true),
    ] {
        let mut b = GraphBuilder::<()>::new();
        b.add(PacketSource::new(SourceConfig::new(
            "src",
            "n0",
            vec![vec![0u8; 64]],
        )));
        if swap {
            b.add(MacSwap::new("n0", "sink"));
        } else {
            b.add(PassThrough::new("n0", "n1"))
                .add(PassThrough::new("n1", "n2"))
                .add(PassThrough::new("n2", "n3"))
                .add(PassThrough::new("n3", "sink"));
        }
        b.add(PacketSink::new("sink"));
        let mut graph = b.build().expect("graph");
        g.bench_function(name, |bch| bch.iter(|| graph.run_pass(&mut w, &())));
    }
    g.finish();
}

criterion_group!(engine, buffers, graph_pass);
criterion_main!(engine);
