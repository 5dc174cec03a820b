use dataplane::BufferIndex;
use std::sync::Arc;

use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::offload::{virtio, Gso, Offload};
use dataplane::WorkerBuffers;

use super::super::{next_run, Kind, Kinds, Run};
use super::*;
use net::wire::checksum::{fold, ones_sum};

fn pool() -> Arc<BufferPool> {
    BufferPool::new(&BufferPoolConfig {
        buffers: 256,
        data_size: 2048,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap()
}

/// What a test segment looks like.
#[derive(Clone)]
struct Seg {
    seq: u32,
    payload: Vec<u8>,
    flags: u8,
    /// TCP options (a multiple of 4 bytes).
    options: Vec<u8>,
    port: u16,
    id: u16,
}

impl Seg {
    fn new(seq: u32, len: usize) -> Seg {
        Seg {
            seq,
            payload: (0..len).map(|i| (seq as usize + i * 7) as u8).collect(),
            flags: ACK,
            options: vec![1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9],
            port: 5201,
            id: seq as u16,
        }
    }
}

/// An Ethernet/IPv4/TCP frame with correct IPv4 and TCP checksums.
fn frame(s: &Seg) -> Vec<u8> {
    let tcp_len = 20 + s.options.len() + s.payload.len();
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let mut ip = [
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip[2..4].copy_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&s.id.to_be_bytes());
    let c = !fold(ones_sum(&ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut tcp = Vec::new();
    tcp.extend_from_slice(&40000u16.to_be_bytes());
    tcp.extend_from_slice(&s.port.to_be_bytes());
    tcp.extend_from_slice(&s.seq.to_be_bytes());
    tcp.extend_from_slice(&77u32.to_be_bytes());
    tcp.push(((20 + s.options.len()) / 4) as u8 * 16);
    tcp.push(s.flags);
    tcp.extend_from_slice(&[0x01, 0xf5, 0, 0, 0, 0]);
    tcp.extend_from_slice(&s.options);
    tcp.extend_from_slice(&s.payload);
    let sum = ones_sum(&ip[12..20]) + 6 + tcp_len as u64 + ones_sum(&tcp);
    tcp[16..18].copy_from_slice(&(!fold(sum)).to_be_bytes());
    f.extend_from_slice(&tcp);
    f
}

fn load(buffers: &mut WorkerBuffers, segs: &[Seg]) -> Vec<BufferIndex> {
    let mut packets = vec![BufferIndex::NONE; segs.len()];
    buffers.alloc(&mut packets).unwrap();
    for (&bi, s) in packets.iter().zip(segs) {
        buffers.write_packet(bi, &frame(s)).unwrap();
    }
    packets
}

/// A run of `n` segments of `mss` bytes from `seq`, the last `last` bytes.
fn stream(seq: u32, n: usize, mss: usize, last: usize) -> Vec<Seg> {
    let mut at = seq;
    (0..n)
        .map(|i| {
            let len = if i + 1 == n { last } else { mss };
            let s = Seg::new(at, len);
            at = at.wrapping_add(len as u32);
            s
        })
        .collect()
}

/// The super-frame the kernel would see: headers, then every payload.
fn super_frame(buffers: &WorkerBuffers, packets: &[BufferIndex]) -> (SuperHeaders, Vec<u8>) {
    let h = super_headers(buffers, packets);
    let mut f = h.bytes[..h.len].to_vec();
    for &bi in packets {
        f.extend_from_slice(&buffers.data(bi)[h.len..]);
    }
    (h, f)
}

fn tcp_checksum_ok(f: &[u8]) -> bool {
    let sum = ones_sum(&f[26..34]) + 6 + (f.len() - TCP) as u64 + ones_sum(&f[TCP..]);
    fold(sum) == 0xffff
}

fn ip_checksum_ok(f: &[u8]) -> bool {
    fold(ones_sum(&f[ETHERNET..TCP])) == 0xffff
}

#[test]
fn one_connections_segments_in_sequence_make_one_super_frame() {
    let pool = pool();
    let mut buffers = pool.worker_buffers();
    let segs = stream(0xffff_f000, 10, 1388, 700); // the sequence wraps inside the run
    let packets = load(&mut buffers, &segs);
    assert_eq!(run_len(&buffers, &packets), 10);
    let (h, f) = super_frame(&buffers, &packets);
    assert_eq!(f.len(), 14 + 20 + 32 + 9 * 1388 + 700);
    assert_eq!(
        usize::from(u16::from_be_bytes([f[16], f[17]])),
        f.len() - 14
    );
    assert!(ip_checksum_ok(&f), "IPv4 checksum of the whole");
    assert!(tcp_checksum_ok(&f), "TCP checksum of the whole");
    assert_eq!(
        &f[38..42],
        &0xffff_f000u32.to_be_bytes(),
        "the first's sequence"
    );
    let o = Offload::from_virtio(&h.vnet, f.len()).unwrap().unwrap();
    assert_eq!((o.gso, o.gso_size), (Gso::Tcp4, 1388));
    assert!(
        !o.needs_csum(),
        "the checksum is complete: nothing left to the kernel"
    );
    assert_eq!(h.vnet[1], virtio::GSO_TCPV4);
    assert_eq!(u16::from_le_bytes([h.vnet[2], h.vnet[3]]), 66, "hdr_len");
    buffers.free(&packets);
}

#[test]
fn odd_sized_payloads_keep_the_checksum_right() {
    let pool = pool();
    let mut buffers = pool.worker_buffers();
    for (mss, last) in [(1387, 1), (1001, 999), (3, 3)] {
        let packets = load(&mut buffers, &stream(1000, 7, mss, last));
        assert_eq!(run_len(&buffers, &packets), 7, "mss {mss}");
        let (_, f) = super_frame(&buffers, &packets);
        assert!(tcp_checksum_ok(&f), "mss {mss} last {last}");
        buffers.free(&packets);
    }
}

#[test]
fn a_corrupted_segment_fails_the_whole_checksum() {
    let pool = pool();
    let mut buffers = pool.worker_buffers();
    let packets = load(&mut buffers, &stream(1, 5, 1000, 1000));
    let bi = packets[2];
    buffers.data_mut(bi)[200] ^= 0x40; // payload changed on the way, checksum not
    assert_eq!(run_len(&buffers, &packets), 5);
    let (_, f) = super_frame(&buffers, &packets);
    assert!(
        !tcp_checksum_ok(&f),
        "the receiver must still see the corruption"
    );
    buffers.free(&packets);
}

#[test]
fn runs_end_where_the_segments_stop_agreeing() {
    let pool = pool();
    let mut buffers = pool.worker_buffers();
    let base = stream(100, 6, 1000, 1000);
    type Change = fn(&mut Seg);
    let cases: [(&str, usize, Change); 8] = [
        ("a gap in the sequence", 3, |s| s.seq += 1),
        ("another connection", 3, |s| s.port = 5202),
        ("other options (timestamp)", 3, |s| s.options[11] = 10),
        ("a longer segment", 3, |s| s.payload.push(0)),
        ("a FIN", 3, |s| s.flags |= 0x01),
        ("a PSH (joins, then ends the run)", 4, |s| s.flags |= PSH),
        ("a shorter one (joins, then ends the run)", 4, |s| {
            s.payload.truncate(10)
        }),
        ("another IPv4 identification (joins)", 6, |s| s.id = 9),
    ];
    for (what, want, change) in cases {
        let mut segs = base.clone();
        change(&mut segs[3]);
        let packets = load(&mut buffers, &segs);
        assert_eq!(run_len(&buffers, &packets), want, "{what}");
        if want > 1 {
            let (_, f) = super_frame(&buffers, &packets[..want]);
            assert!(tcp_checksum_ok(&f), "{what}");
            assert_eq!(
                f[TCP + 13],
                segs[want - 1].flags,
                "{what}: the last's flags"
            );
        }
        buffers.free(&packets);
    }
}

#[test]
fn segments_that_cannot_start_a_run_are_sent_alone() {
    let pool = pool();
    let mut buffers = pool.worker_buffers();
    let mut segs = stream(100, 4, 1000, 1000);
    segs[0].payload.clear(); // a bare ACK
    segs[0].seq = 100;
    segs[1].flags |= PSH;
    let packets = load(&mut buffers, &segs);
    assert_eq!(run_len(&buffers, &packets), 0, "no payload");
    assert_eq!(run_len(&buffers, &packets[1..]), 1, "PSH on the first");
    let kinds = Kinds {
        udp: true,
        tcp: true,
    };
    // The third and fourth do follow each other.
    assert_eq!(
        next_run(&buffers, &packets, kinds, usize::MAX),
        Some(Run {
            start: 2,
            len: 2,
            kind: Kind::Tcp
        })
    );
    let off = Kinds {
        udp: true,
        tcp: false,
    };
    assert_eq!(next_run(&buffers, &packets, off, usize::MAX), None);
    // Frames longer than the device takes are not put in a run (they are refused, counted).
    assert_eq!(
        next_run(&buffers, &packets, kinds, 14 + 20 + 32 + 999),
        None
    );
    buffers.free(&packets);
}

#[test]
fn a_run_fits_one_ipv4_packet() {
    let pool = pool();
    let mut buffers = pool.worker_buffers();
    let packets = load(&mut buffers, &stream(7, 60, 1448, 1448));
    let n = run_len(&buffers, &packets);
    assert_eq!(n, (65535 - 52) / 1448);
    let (_, f) = super_frame(&buffers, &packets[..n]);
    assert!(f.len() - 14 <= 65535);
    assert!(tcp_checksum_ok(&f));
    buffers.free(&packets);
}
