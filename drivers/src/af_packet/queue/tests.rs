use super::super::ring::fake::FakeKernel;
use super::super::ring::RingLayout;
use super::*;
use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::BufferIndex;

fn pool(buffers: u32, data_size: u16) -> Arc<BufferPool> {
    BufferPool::new(&BufferPoolConfig {
        buffers,
        data_size,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap()
}

const RX: RingLayout = RingLayout {
    block_size: 8192,
    block_count: 4,
    frame_size: 2048,
};

fn packet(buffers: &WorkerBuffers, bi: BufferIndex) -> Vec<u8> {
    let mut v = Vec::new();
    buffers.copy_packet(bi, &mut v);
    v
}

#[test]
fn frames_are_copied_out_long_ones_chained_tags_put_back() {
    let pool = pool(64, 256);
    let mut buffers = pool.worker_buffers();
    let mut k = FakeKernel::new(RX);
    // SAFETY: `k` outlives the ring.
    let mut ring = unsafe { RxRing::new(k.base(), RX) };
    let counters = QueueCounters::default();
    let small: Vec<u8> = (0..60).collect();
    let long: Vec<u8> = (0..700u32).map(|i| i as u8).collect();
    let tagged: Vec<u8> = (100..164).collect();
    k.deliver(&[
        (&small, 60, 0, None),
        (&long, 700, 0, None),
        (&tagged, 64, 0, Some((0x8100, 0x0005))),
    ]);
    let mut out = [BufferIndex::NONE; 8];
    let n = receive_from(&mut ring, &mut buffers, &mut out, &counters, 1514);
    assert_eq!(n, 3);
    assert_eq!(packet(&buffers, out[0]), small);
    assert_eq!(packet(&buffers, out[1]), long);
    assert_eq!(
        buffers.chain(out[1]).count(),
        3,
        "700 bytes in 256-byte buffers"
    );
    let mut want = tagged[..12].to_vec();
    want.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
    want.extend_from_slice(&tagged[12..]);
    assert_eq!(packet(&buffers, out[2]), want);
    assert_eq!(counters.get(Counter::RxPackets), 3);
    assert_eq!(counters.get(Counter::RxBytes), 60 + 700 + 68);
    buffers.free(&out[..n]);
    assert_eq!(pool.in_use_count(), 0, "no buffer left behind");
}

#[test]
fn unusable_frames_are_counted_and_skipped_and_polls_resume_mid_block() {
    let pool = pool(64, 2048);
    let mut buffers = pool.worker_buffers();
    let mut k = FakeKernel::new(RX);
    // SAFETY: `k` outlives the ring.
    let mut ring = unsafe { RxRing::new(k.base(), RX) };
    let counters = QueueCounters::default();
    let frames: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 64]).collect();
    k.deliver(&[
        (&frames[0], 64, 0, None),
        (&frames[1], 9000, 0, None), // cut short by the kernel
        (&frames[2], 64, libc::TP_STATUS_CSUMNOTREADY, None),
        (&[7; 200], 200, 0, None), // over the 100-byte limit below
        (&frames[4], 64, 0, None),
        (&frames[5], 64, 0, None),
    ]);
    let mut out = [BufferIndex::NONE; 2];
    let n = receive_from(&mut ring, &mut buffers, &mut out, &counters, 100);
    assert_eq!(n, 2);
    assert_eq!(packet(&buffers, out[0]), frames[0]);
    assert_eq!(packet(&buffers, out[1]), frames[2]);
    buffers.free(&out[..n]);
    let n = receive_from(&mut ring, &mut buffers, &mut out, &counters, 100);
    assert_eq!(n, 2);
    assert_eq!(packet(&buffers, out[0]), frames[4]);
    assert_eq!(packet(&buffers, out[1]), frames[5]);
    buffers.free(&out[..n]);
    assert_eq!(counters.get(Counter::RxTruncated), 1);
    assert_eq!(counters.get(Counter::RxTooLong), 1);
    assert_eq!(counters.get(Counter::RxChecksumPartial), 1);
    assert_eq!(counters.get(Counter::RxPackets), 4);
    assert_eq!(k.block_status(0), libc::TP_STATUS_KERNEL);
    assert_eq!(pool.in_use_count(), 0);
}

#[test]
fn frames_wait_in_the_ring_while_no_buffer_is_free() {
    let pool = pool(2, 2048);
    let mut buffers = pool.worker_buffers();
    let mut k = FakeKernel::new(RX);
    // SAFETY: `k` outlives the ring.
    let mut ring = unsafe { RxRing::new(k.base(), RX) };
    let counters = QueueCounters::default();
    k.deliver(&[
        (&[1; 64], 64, 0, None),
        (&[2; 64], 64, 0, None),
        (&[3; 64], 64, 0, None),
    ]);
    let mut out = [BufferIndex::NONE; 8];
    let n = receive_from(&mut ring, &mut buffers, &mut out, &counters, 1514);
    assert_eq!(n, 2, "two buffers in the pool");
    assert_eq!(counters.get(Counter::RxBufferStalls), 1);
    let held = out;
    buffers.free(&held[..n]);
    let n = receive_from(&mut ring, &mut buffers, &mut out, &counters, 1514);
    assert_eq!(n, 1, "the third frame was kept, not lost");
    assert_eq!(packet(&buffers, out[0]), vec![3; 64]);
    buffers.free(&out[..1]);
    assert_eq!(counters.get(Counter::RxPackets), 3);
}

const TX: RingLayout = RingLayout {
    block_size: 4096,
    block_count: 1,
    frame_size: 1024,
};

fn make(buffers: &mut WorkerBuffers, bytes: &[u8]) -> BufferIndex {
    let bi = buffers.alloc_one().unwrap();
    buffers.write_packet(bi, bytes).unwrap();
    bi
}

#[test]
fn packets_are_gathered_into_slots_and_freed_and_a_full_ring_refuses_the_rest() {
    let pool = pool(64, 256);
    let mut buffers = pool.worker_buffers();
    let mut k = FakeKernel::new(TX);
    // SAFETY: `k` outlives the ring.
    let mut ring = unsafe { TxRing::new(k.base(), TX) };
    let counters = QueueCounters::default();
    let chained: Vec<u8> = (0..600u32).map(|i| (i * 7) as u8).collect();
    let mut tagged = vec![0u8; 12];
    tagged.extend_from_slice(&[0x81, 0x00, 0, 5]);
    tagged.resize(600 + 18, 1); // MTU + Ethernet + tag: fits only because it is tagged
    let packets = [
        make(&mut buffers, &[1; 60]),
        make(&mut buffers, &chained),
        make(&mut buffers, &[2; 700]), // over MTU 600 + 14
        make(&mut buffers, &tagged),
        make(&mut buffers, &[3; 60]),
        make(&mut buffers, &[4; 60]),
    ];
    let mtu = 600;
    let TxPass { taken, queued, .. } =
        transmit_into(&mut ring, &mut buffers, &packets, &counters, mtu, false);
    assert_eq!(
        (taken, queued),
        (5, 4),
        "4 slots; the long one taken and dropped"
    );
    let sent = k.take_sent();
    assert_eq!(sent, vec![vec![1; 60], chained, tagged, vec![3; 60]]);
    assert_eq!(counters.get(Counter::TxTooLong), 1);
    assert_eq!(counters.get(Counter::TxRingFull), 1);
    assert_eq!(counters.get(Counter::TxPackets), 4);
    assert_eq!(
        pool.in_use_count(),
        1,
        "only the refused packet is still the caller's"
    );
    k.complete();
    let TxPass { taken, .. } = transmit_into(
        &mut ring,
        &mut buffers,
        &packets[5..],
        &counters,
        mtu,
        false,
    );
    assert_eq!(taken, 1);
    assert_eq!(k.take_sent(), vec![vec![4; 60]]);
    assert_eq!(pool.in_use_count(), 0);
}

/// A virtio-net header (little-endian fields).
fn vnet(flags: u8, gso: u8, gso_size: u16, start: u16, offset: u16) -> [u8; VNET_HDR] {
    let mut h = [flags, gso, 0, 0, 0, 0, 0, 0, 0, 0];
    h[4..6].copy_from_slice(&gso_size.to_le_bytes());
    h[6..8].copy_from_slice(&start.to_le_bytes());
    h[8..10].copy_from_slice(&offset.to_le_bytes());
    h
}

#[test]
fn virtio_net_headers_become_offload_work_and_bad_ones_are_dropped() {
    let pool = pool(128, 2048);
    let mut buffers = pool.worker_buffers();
    const BIG: RingLayout = RingLayout {
        block_size: 16384,
        block_count: 2,
        frame_size: 2048,
    };
    let mut k = FakeKernel::new(BIG);
    // SAFETY: `k` outlives the ring.
    let mut ring = unsafe { RxRing::new(k.base(), BIG) }.with_vnet_hdr(true);
    let counters = QueueCounters::default();
    let frames: Vec<Vec<u8>> = [60, 60, 60, 5000, 60]
        .iter()
        .enumerate()
        .map(|(i, &n)| vec![i as u8; n])
        .collect();
    k.vnet = vec![
        vnet(1, 0, 0, 34, 16),    // a partial checksum
        [0; VNET_HDR],            // nothing to do
        vnet(1, 0, 0, 50, 16),    // the checksum field beyond the frame
        vnet(1, 1, 1448, 34, 16), // a super-frame, over max_len
        vnet(1, 1, 1448, 34, 16), // (tagged below: offsets move by 4)
    ];
    k.deliver(&[
        (&frames[0], 60, 0, None),
        (&frames[1], 60, 0, None),
        (&frames[2], 60, 0, None),
        (&frames[3], 5000, 0, None),
        (&frames[4], 60, 0, Some((0x8100, 7))),
    ]);
    let mut out = [BufferIndex::NONE; 8];
    let n = receive_from(&mut ring, &mut buffers, &mut out, &counters, 1514);
    assert_eq!(n, 4);
    let o = |bi: BufferIndex| buffers.meta(bi).offload().copied();
    let csum = Offload::from_virtio(&vnet(1, 0, 0, 34, 16), 60).unwrap();
    assert_eq!(o(out[0]), csum);
    assert_eq!(o(out[1]), None);
    let gso = o(out[2]).expect("work on the super-frame");
    assert_eq!(
        (gso.gso, gso.gso_size, gso.csum_start),
        (Gso::Tcp4, 1448, 34)
    );
    assert_eq!(packet(&buffers, out[2]), frames[3], "chained whole");
    assert_eq!(
        o(out[3]).map(|o| o.csum_start),
        Some(38),
        "moved past the tag"
    );
    assert_eq!(counters.get(Counter::RxBadVnetHdr), 1);
    assert_eq!(counters.get(Counter::RxGso), 2);
    buffers.free(&out[..n]);
    assert_eq!(pool.in_use_count(), 0);
}

#[test]
fn each_slot_gets_the_virtio_net_header_of_its_frame() {
    let pool = pool(64, 2048);
    let mut buffers = pool.worker_buffers();
    let mut k = FakeKernel::new(TX);
    // SAFETY: `k` outlives the ring.
    let mut ring = unsafe { TxRing::new(k.base(), TX) };
    let counters = QueueCounters::default();
    let mut frame = vec![0u8; 80];
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    let plain = make(&mut buffers, &frame);
    let partial = make(&mut buffers, &frame);
    let csum = Offload::from_virtio(&vnet(1, 0, 0, 34, 16), 80)
        .unwrap()
        .unwrap();
    buffers.meta_mut(partial).set_offload(csum);
    // A super-frame too long for a slot stops the pass, still the caller's.
    let big = make(&mut buffers, &[0; 3000]);
    let gso = Offload::from_virtio(&vnet(1, 1, 1000, 34, 16), 3000)
        .unwrap()
        .unwrap();
    buffers.meta_mut(big).set_offload(gso);
    let packets = [plain, partial, big];
    let pass = transmit_into(&mut ring, &mut buffers, &packets, &counters, 1500, true);
    assert_eq!(
        pass,
        TxPass {
            taken: 2,
            queued: 2,
            big: true
        }
    );
    let sent = k.take_sent();
    assert_eq!(sent[0][..VNET_HDR], [0; VNET_HDR]);
    assert_eq!(sent[0][VNET_HDR..], frame);
    assert_eq!(
        sent[1][..VNET_HDR],
        vnet(1, 0, 0, 34, 16)[..2]
            .iter()
            .chain(&52u16.to_le_bytes())
            .chain(&vnet(1, 0, 0, 34, 16)[4..])
            .copied()
            .collect::<Vec<u8>>()[..]
    );
    assert_eq!(sent[1][VNET_HDR..], frame);
    assert_eq!(pool.in_use_count(), 2, "the super-frame, two buffers");
    buffers.free(&[big]);
    assert_eq!(pool.in_use_count(), 0);
}
