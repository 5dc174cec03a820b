//! Quiver's buffers as DPDK's mbufs: received and transmitted packets are the very buffers that
//! were sent (nothing copied; data offsets and chains cross over), and a pool gets a mempool only
//! with room for the mbuf, one at a time.

use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::BufferIndex;
use drivers::dpdk::{ring_port, DpdkMempool, DpdkPort, DpdkPortConfig, Ring, PREFIX_SIZE};
use drivers::Port;
use testkit::wait_for;

use crate::eal::{eal, eal_and_pool, every_buffer_back, pool};
use crate::graph::{frame, MAC_A, MAC_B};

#[test]
fn received_packets_are_the_very_buffers_that_were_sent() {
    let Some((eal, _serial, pool, mempool)) =
        eal_and_pool("received_packets_are_the_very_buffers_that_were_sent", 1024)
    else {
        return;
    };
    let mut z_in = Ring::create(eal, "zc_in", 256).unwrap();
    let mut z_out = Ring::create(eal, "zc_out", 256).unwrap();
    let name = ring_port(eal, "zc", &[&z_in], &[&z_out]).unwrap();
    let port = DpdkPort::open(&mempool, &DpdkPortConfig::new(&name, 1)).unwrap();
    assert!(port.queue_pair(1).is_err(), "one queue pair only");
    let mut qp = port.queue_pair(0).unwrap();
    assert!(
        port.queue_pair(0).is_err(),
        "a queue pair is handed out once"
    );

    let mut buffers = pool.worker_buffers();
    let small = frame(MAC_B, MAC_A, 1, 200);
    let big = frame(MAC_B, MAC_A, 2, 5000);
    let p1 = buffers.alloc_one().unwrap();
    buffers.write_packet(p1, &small).unwrap();
    let p2 = buffers.alloc_one().unwrap();
    buffers.write_packet(p2, &big).unwrap();
    let chain: Vec<BufferIndex> = buffers.chain(p2).collect();
    assert_eq!(chain.len(), 3);
    let in_use = pool.in_use_count();
    assert_eq!(in_use, 4);

    assert_eq!(z_in.enqueue(&mempool, &mut buffers, &[p1, p2]), 2);
    assert_eq!(pool.in_use_count(), in_use, "in the ring, still in use");
    let mut out = [BufferIndex::NONE; 32];
    let mut n = 0;
    wait_for("the two packets received", 10, || {
        n += qp.rx.receive(&mut buffers, &mut out[n..]);
        n == 2
    });
    assert_eq!(
        &out[..2],
        &[p1, p2],
        "received as the same buffers: nothing was copied"
    );
    assert_eq!(buffers.chain(p2).collect::<Vec<_>>(), chain);
    let (base, len) = pool.memory();
    let locator = pool.locator();
    for &bi in &chain {
        let d = buffers.data(bi).as_ptr();
        assert!(
            d >= base && d < base.wrapping_add(len),
            "data inside Quiver's region"
        );
        let (owner, off) = locator.index_of(d).unwrap();
        assert_eq!(owner, bi);
        assert_eq!(
            off,
            PREFIX_SIZE as usize + 64 + buffers.meta(bi).data_offset() as usize,
            "the mbuf's data offset is the buffer's"
        );
    }
    let mut v = Vec::new();
    buffers.copy_packet(p1, &mut v);
    assert_eq!(v, small);
    v.clear();
    buffers.copy_packet(p2, &mut v);
    assert_eq!(v, big);

    // Headers prepended in the graph travel with the packet: the data offset crosses over.
    buffers
        .prepend(p1, 4)
        .unwrap()
        .copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(qp.tx.transmit(&mut buffers, &[p1, p2]), 2);
    assert_eq!(
        pool.in_use_count(),
        in_use,
        "handed to the device, still in use"
    );
    let mut got = [BufferIndex::NONE; 8];
    assert_eq!(z_out.dequeue(&mempool, &mut buffers, &mut got), 2);
    assert_eq!(&got[..2], &[p1, p2], "transmitted as the same buffers");
    v.clear();
    buffers.copy_packet(p1, &mut v);
    assert_eq!(&v[..4], &[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(&v[4..], &small[..]);
    v.clear();
    buffers.copy_packet(p2, &mut v);
    assert_eq!(v, big);
    buffers.free(&[p1, p2]);
    assert_eq!(pool.in_use_count(), 0);

    drop(qp);
    drop(buffers);
    drop(port);
    every_buffer_back(&pool, mempool);
}

#[test]
fn a_pool_without_room_for_the_mbuf_is_refused() {
    let Some((eal, _serial)) = eal("a_pool_without_room_for_the_mbuf_is_refused") else {
        return;
    };
    let plain = BufferPool::new(&BufferPoolConfig {
        buffers: 64,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap();
    let err = DpdkMempool::new(eal, plain).err().expect("refused");
    assert!(err.to_string().contains("prefix"), "{err}");
    let pool = pool(64);
    let first = DpdkMempool::new(eal, pool.clone()).unwrap();
    assert!(
        DpdkMempool::new(eal, pool.clone()).is_err(),
        "one mempool per pool"
    );
    drop(first);
    DpdkMempool::new(eal, pool).expect("a pool may get a mempool again once the first is gone");
}
