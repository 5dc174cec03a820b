use super::*;
use crate::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use crate::BufferIndex;
use proptest::prelude::*;
use std::sync::Arc;

fn pool(buffers: u32, data_size: u16) -> Arc<BufferPool> {
    BufferPool::new(&BufferPoolConfig {
        buffers,
        data_size,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap()
}

/// RFC 1071 the plain way, to check against: the folded sum of 16-bit words.
fn naive_sum(parts: &[&[u8]]) -> u16 {
    let bytes: Vec<u8> = parts.concat();
    let mut s: u32 = 0;
    for w in bytes.chunks(2) {
        s += u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]) as u32;
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

const MACS: [u8; 12] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];

/// Ethernet + IPv4 (id 7, DF) + TCP (1234 → 80, seq `seq`, `flags`) + `payload`, with the
/// IPv4 checksum filled in and the TCP one left as `tcp_check`.
fn tcp4(payload: &[u8], seq: u32, flags: u8, tcp_check: u16) -> Vec<u8> {
    let mut f = MACS.to_vec();
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 20 + payload.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0, 7, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    let c = !naive_sum(&[&ip]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x04, 0xd2, 0, 80]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff]);
    f.extend_from_slice(&tcp_check.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

fn csum_only() -> Offload {
    Offload {
        csum_start: 34,
        csum_offset: 16,
        gso_size: 0,
        gso: Gso::None,
        bits: Offload::NEEDS_CSUM,
    }
}

fn packet(buffers: &WorkerBuffers, bi: BufferIndex) -> Vec<u8> {
    let mut v = Vec::new();
    buffers.copy_packet(bi, &mut v);
    v
}

#[test]
fn a_partial_checksum_is_completed_byte_exact() {
    // Worked out by hand (and by Python's struct): IPv4 header checksum 0x26c4, the
    // pseudo-header's folded sum 0x1420 (what the kernel leaves in the field), the full TCP
    // checksum 0x0d3b.
    let frame = tcp4(b"hi!", 1, 0x18, 0x1420);
    assert_eq!(&frame[24..26], &[0x26, 0xc4]);
    let pool = pool(8, 2048);
    let mut b = pool.worker_buffers();
    let bi = b.alloc_one().unwrap();
    b.write_packet(bi, &frame).unwrap();
    b.meta_mut(bi).set_offload(csum_only());
    complete_checksum(&mut b, bi).unwrap();
    let out = packet(&b, bi);
    assert_eq!(&out[50..52], &[0x0d, 0x3b]);
    assert_eq!(out[..50], frame[..50]);
    assert!(b.meta(bi).offload().is_none(), "the work is done");
    b.free(&[bi]);
}

#[test]
fn a_checksum_across_a_chain_split_at_odd_offsets_is_the_same() {
    let payload: Vec<u8> = (0..1001u32).map(|i| (i * 13 + 5) as u8).collect();
    let frame = tcp4(&payload, 9, 0x10, 0);
    let pseudo = [10, 0, 0, 1, 10, 0, 0, 2, 0, 6, 0x04, 0x05]; // TCP length 1025
    let partial = naive_sum(&[&pseudo]);
    let mut frame = frame;
    frame[50..52].copy_from_slice(&partial.to_be_bytes());
    let mut want = frame.clone();
    let full = !naive_sum(&[&pseudo, &{
        let mut t = frame[34..].to_vec();
        t[16..18].fill(0);
        t
    }]);
    want[50..52].copy_from_slice(&full.to_be_bytes());
    // 127-byte buffers: every split lands somewhere odd.
    let pool = pool(32, 127);
    let mut b = pool.worker_buffers();
    let bi = b.alloc_one().unwrap();
    b.write_packet(bi, &frame).unwrap();
    assert!(b.chain(bi).count() > 8);
    b.meta_mut(bi).set_offload(csum_only());
    complete_checksum(&mut b, bi).unwrap();
    assert_eq!(packet(&b, bi), want);
    b.free(&[bi]);
    assert_eq!(pool.in_use_count(), 0);
}

fn vnet(flags: u8, gso: u8, hdr_len: u16, gso_size: u16, start: u16, off: u16) -> [u8; 10] {
    let mut h = [flags, gso, 0, 0, 0, 0, 0, 0, 0, 0];
    h[2..4].copy_from_slice(&hdr_len.to_le_bytes());
    h[4..6].copy_from_slice(&gso_size.to_le_bytes());
    h[6..8].copy_from_slice(&start.to_le_bytes());
    h[8..10].copy_from_slice(&off.to_le_bytes());
    h
}

#[test]
fn virtio_headers_are_read_and_bad_ones_named() {
    use virtio::*;
    assert_eq!(Offload::from_virtio(&[0; 10], 60), Ok(None));
    assert_eq!(
        Offload::from_virtio(&vnet(F_DATA_VALID, 0, 0, 0, 0, 0), 60),
        Ok(None),
        "a verified checksum leaves nothing to do"
    );
    let o = Offload::from_virtio(&vnet(F_NEEDS_CSUM, 0, 54, 0, 34, 16), 60)
        .unwrap()
        .unwrap();
    assert_eq!(o, csum_only());
    let g = Offload::from_virtio(
        &vnet(F_NEEDS_CSUM, GSO_TCPV4 | GSO_ECN, 66, 1448, 34, 16),
        9000,
    )
    .unwrap()
    .unwrap();
    assert_eq!((g.gso, g.gso_size, g.bits), (Gso::Tcp4, 1448, 3));
    let bad = |h: [u8; 10], len| Offload::from_virtio(&h, len).unwrap_err();
    assert_eq!(
        bad(vnet(F_NEEDS_CSUM, 0, 0, 0, 34, 16), 51),
        BadOffload::Checksum
    );
    assert_eq!(
        bad(vnet(F_NEEDS_CSUM, 0, 0, 0, 60000, 16), 100),
        BadOffload::Checksum
    );
    assert_eq!(
        bad(vnet(F_NEEDS_CSUM, 0, 0, 0, 2, 16), 100),
        BadOffload::Checksum
    );
    assert_eq!(
        bad(vnet(0, GSO_UDP, 0, 100, 0, 0), 100),
        BadOffload::UnknownGso
    );
    assert_eq!(bad(vnet(0, 9, 0, 100, 0, 0), 100), BadOffload::UnknownGso);
    assert_eq!(
        bad(vnet(F_NEEDS_CSUM, GSO_TCPV4, 66, 0, 34, 16), 3000),
        BadOffload::Segmentation
    );
    assert_eq!(
        bad(vnet(F_NEEDS_CSUM, GSO_TCPV4, 4000, 1000, 34, 16), 3000),
        BadOffload::Segmentation
    );
    assert_eq!(
        bad(vnet(F_NEEDS_CSUM, GSO_TCPV6, 66, 1000, 54, 6), 3000),
        BadOffload::Checksum
    );
    // Written back as read (hdr_len from the TCP header: 34 + 20).
    let frame = tcp4(&[0; 100], 1, 0x10, 0);
    assert_eq!(
        g.to_virtio(&frame),
        vnet(F_NEEDS_CSUM, GSO_TCPV4 | GSO_ECN, 54, 1448, 34, 16)
    );
    assert_eq!(
        csum_only().to_virtio(&frame),
        vnet(F_NEEDS_CSUM, 0, 52, 0, 34, 16)
    );
}

/// Checks one segment's IPv4 and TCP headers and checksums; returns its payload.
fn check_tcp4_segment(seg: &[u8], id: u16, seq: u32, flags: u8) -> Vec<u8> {
    let ip = &seg[14..34];
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, seg.len() - 14);
    assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), id);
    assert_eq!(naive_sum(&[ip]), 0xffff, "IPv4 header checksum");
    let tcp = &seg[34..];
    assert_eq!(u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]), seq);
    assert_eq!(tcp[13], flags);
    let mut pseudo = ip[12..20].to_vec();
    pseudo.extend_from_slice(&[0, 6]);
    pseudo.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
    assert_eq!(naive_sum(&[&pseudo, tcp]), 0xffff, "TCP checksum");
    tcp[20..].to_vec()
}

#[test]
fn a_tcp4_super_frame_is_cut_into_segments() {
    let payload: Vec<u8> = (0..3500u32).map(|i| (i * 7) as u8).collect();
    // FIN, PSH, ACK and CWR on the super-frame.
    let frame = tcp4(&payload, 0xffff_fc00, 0x99, 0);
    let pool = pool(64, 512);
    let mut b = pool.worker_buffers();
    let bi = b.alloc_one().unwrap();
    b.write_packet(bi, &frame).unwrap();
    b.meta_mut(bi).tx_interface = 5;
    b.meta_mut(bi).set_offload(Offload {
        gso_size: 1000,
        gso: Gso::Tcp4,
        ..csum_only()
    });
    let mut out = [BufferIndex::NONE; 8];
    assert_eq!(resolve(&mut b, bi, &mut out), Ok(Resolved::Segmented(4)));
    let mut got = Vec::new();
    for (i, &s) in out[..4].iter().enumerate() {
        assert!(b.meta(s).offload().is_none());
        assert_eq!(b.meta(s).tx_interface, 5);
        let seg = packet(&b, s);
        assert_eq!(seg.len(), 54 + if i < 3 { 1000 } else { 500 });
        assert_eq!(seg[..14], frame[..14]);
        let flags = match i {
            0 => 0x90,
            3 => 0x19,
            _ => 0x10,
        };
        let seq = 0xffff_fc00u32.wrapping_add(i as u32 * 1000);
        got.extend(check_tcp4_segment(&seg, 7 + i as u16, seq, flags));
    }
    assert_eq!(got, payload);
    b.free(&out[..4]);
    assert_eq!(
        pool.in_use_count(),
        0,
        "the super-frame was freed, nothing leaked"
    );
}

/// Ethernet + IPv6 + UDP (or TCP) + payload, L4 checksum field zero.
fn ip6(proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = MACS.to_vec();
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    let l4 = if proto == 17 { 8 } else { 20 };
    f.extend_from_slice(&((l4 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[proto, 64]);
    f.extend((0..32).map(|i| i as u8));
    if proto == 17 {
        f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35]);
        f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
    } else {
        f.extend_from_slice(&[
            0x30, 0x39, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 1, 0, 0, 0, 0, 0,
        ]);
    }
    f.extend_from_slice(payload);
    f
}

#[test]
fn udp6_and_tcp6_super_frames_are_cut_with_full_checksums() {
    let payload: Vec<u8> = (0..2500u32).map(|i| (i ^ (i >> 3)) as u8).collect();
    for (proto, gso, off) in [(17u8, Gso::Udp, 6u16), (6, Gso::Tcp6, 16)] {
        let frame = ip6(proto, &payload);
        let pool = pool(64, 2048);
        let mut b = pool.worker_buffers();
        let bi = b.alloc_one().unwrap();
        b.write_packet(bi, &frame).unwrap();
        b.meta_mut(bi).set_offload(Offload {
            csum_start: 54,
            csum_offset: off,
            gso_size: 1200,
            gso,
            bits: Offload::NEEDS_CSUM,
        });
        let mut out = [BufferIndex::NONE; 4];
        assert_eq!(resolve(&mut b, bi, &mut out), Ok(Resolved::Segmented(3)));
        let mut got = Vec::new();
        for &s in &out[..3] {
            let seg = packet(&b, s);
            let l4 = &seg[54..];
            assert_eq!(u16::from_be_bytes([seg[18], seg[19]]) as usize, l4.len());
            let mut pseudo = seg[22..54].to_vec();
            pseudo.extend_from_slice(&(l4.len() as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, proto]);
            assert_eq!(naive_sum(&[&pseudo, l4]), 0xffff, "L4 checksum");
            let hdr = if proto == 17 {
                assert_eq!(u16::from_be_bytes([l4[4], l4[5]]) as usize, l4.len());
                8
            } else {
                20
            };
            got.extend_from_slice(&l4[hdr..]);
        }
        assert_eq!(got, payload);
        b.free(&out[..3]);
        assert_eq!(pool.in_use_count(), 0);
    }
}

#[test]
fn super_frames_that_disagree_with_their_headers_are_refused_and_kept() {
    let frame = tcp4(&[1; 3000], 1, 0x10, 0);
    let pool = pool(64, 2048);
    let mut b = pool.worker_buffers();
    let gso = Offload {
        gso_size: 1000,
        gso: Gso::Tcp4,
        ..csum_only()
    };
    let cases: [(Offload, usize, BadOffload); 4] = [
        (
            Offload {
                gso: Gso::Tcp6,
                ..gso
            },
            8,
            BadOffload::Segmentation,
        ),
        (
            Offload {
                csum_start: 38,
                ..gso
            },
            8,
            BadOffload::Checksum,
        ),
        (gso, 2, BadOffload::TooManySegments),
        (
            Offload {
                gso: Gso::Udp,
                csum_offset: 6,
                ..gso
            },
            8,
            BadOffload::Segmentation,
        ),
    ];
    for (o, room, err) in cases {
        let bi = b.alloc_one().unwrap();
        b.write_packet(bi, &frame).unwrap();
        b.meta_mut(bi).set_offload(o);
        let mut out = vec![BufferIndex::NONE; room];
        assert_eq!(resolve(&mut b, bi, &mut out), Err(err));
        assert_eq!(packet(&b, bi), frame, "left as it was");
        b.free(&[bi]);
    }
    // An IPv4 length that is not the frame's.
    let mut short = frame.clone();
    short[17] ^= 1;
    let bi = b.alloc_one().unwrap();
    b.write_packet(bi, &short).unwrap();
    b.meta_mut(bi).set_offload(gso);
    assert_eq!(
        resolve(&mut b, bi, &mut [BufferIndex::NONE; 8]),
        Err(BadOffload::Segmentation)
    );
    b.free(&[bi]);
    assert_eq!(pool.in_use_count(), 0);
}

proptest! {
    #[test]
    fn no_header_or_frame_crashes_resolve(
        flags in 0u8..4,
        gso in prop::sample::select(vec![0u8, 1, 3, 4, 5, 0x81, 0x85, 200]),
        (hdr_len, gso_size) in (0u16..4000, prop_oneof![Just(0u16), 1u16..3000, any::<u16>()]),
        (start, off) in (prop_oneof![Just(34u16), Just(54), 0u16..300, any::<u16>()], prop_oneof![Just(16u16), Just(6), 0u16..64]),
        body in proptest::collection::vec(any::<u8>(), 0..3000),
        kind in 0u8..3,
        room in 0usize..64,
    ) {
        let pool = pool(128, 512);
        let mut b = pool.worker_buffers();
        // Mostly plausible IPv4/TCP or IPv6/UDP headers with random bytes after them.
        let frame = match kind {
            0 => tcp4(&body, 1, 0x10, 0),
            1 => ip6(17, &body),
            _ => body,
        };
        let bi = b.alloc_one().unwrap();
        b.write_packet(bi, &frame).unwrap();
        let hdr = vnet(flags, gso, hdr_len, gso_size, start, off);
        if let Ok(Some(o)) = Offload::from_virtio(&hdr, frame.len()) {
            b.meta_mut(bi).set_offload(o);
        }
        let mut out = vec![BufferIndex::NONE; room];
        match resolve(&mut b, bi, &mut out) {
            Ok(Resolved::Segmented(n)) => b.free(&out[..n]),
            _ => b.free(&[bi]),
        }
        prop_assert_eq!(pool.in_use_count(), 0);
    }
}

#[test]
fn a_partial_checksum_is_recognised_on_a_frame_without_a_header() {
    // The field holds the pseudo-header's sum (0x1420, see above): the work a virtio-net
    // header would have named.
    let partial = tcp4(b"hi!", 1, 0x18, 0x1420);
    assert_eq!(infer_partial_checksum(&partial), Some(csum_only()));
    // A complete checksum, or any other value: nothing to do.
    assert_eq!(infer_partial_checksum(&tcp4(b"hi!", 1, 0x18, 0x0d3b)), None);
    assert_eq!(infer_partial_checksum(&tcp4(b"hi!", 1, 0x18, 0x1421)), None);
    // Finishing the inferred work gives the full checksum.
    let pool = pool(8, 2048);
    let mut b = pool.worker_buffers();
    let bi = b.alloc_one().unwrap();
    b.write_packet(bi, &partial).unwrap();
    b.meta_mut(bi)
        .set_offload(infer_partial_checksum(&partial).unwrap());
    complete_checksum(&mut b, bi).unwrap();
    assert_eq!(&packet(&b, bi)[50..52], &[0x0d, 0x3b]);
    b.free(&[bi]);

    // Behind a VLAN tag the offsets move by the tag.
    let mut tagged = partial[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
    tagged.extend_from_slice(&partial[12..]);
    assert_eq!(
        infer_partial_checksum(&tagged).map(|o| (o.csum_start, o.csum_offset)),
        Some((38, 16))
    );

    // IPv6 UDP: the pseudo-header is both addresses, the length and the protocol.
    let mut udp = ip6(17, b"payload");
    let pseudo = naive_sum(&[&udp[22..54], &[0, 17], &15u16.to_be_bytes()]);
    udp[60..62].copy_from_slice(&pseudo.to_be_bytes());
    let o = infer_partial_checksum(&udp).expect("partial UDP over IPv6");
    assert_eq!((o.csum_start, o.csum_offset, o.gso), (54, 6, Gso::None));

    // A fragment's checksum spans fragments; a truncated frame is not guessed at.
    let mut fragment = partial.clone();
    fragment[20] |= 0x20;
    assert_eq!(infer_partial_checksum(&fragment), None);
    for n in 0..partial.len() {
        assert_eq!(infer_partial_checksum(&partial[..n]), None, "{n} bytes");
    }
}

proptest! {
    #[test]
    fn no_frame_crashes_the_partial_checksum_inference(
        body in proptest::collection::vec(any::<u8>(), 0..200),
        kind in 0u8..3,
        cut in 0usize..300,
    ) {
        let frame = match kind {
            0 => tcp4(&body, 1, 0x10, 0),
            1 => ip6(17, &body),
            _ => body,
        };
        let frame = &frame[..cut.min(frame.len())];
        if let Some(o) = infer_partial_checksum(frame) {
            prop_assert!(o.csum_start as usize + o.csum_offset as usize + 2 <= frame.len());
        }
    }
}

proptest! {
    /// The word-at-a-time sum is RFC 1071's, whatever the length, start and bytes (all ones,
    /// all zeroes and sums that wrap many times included), and so is a sum fed in pieces.
    #[test]
    fn the_fast_sum_is_the_plain_one(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..3000),
            (0usize..3000).prop_map(|n| vec![0xff; n]),
            (0usize..100).prop_map(|n| vec![0; n]),
        ],
        start in 0usize..8,
        cut in 0usize..3000,
    ) {
        let d = &bytes[start.min(bytes.len())..];
        prop_assert_eq!(checksum::fold(ones_sum(d)), naive_sum(&[d]));
        let (a, b) = d.split_at(cut.min(d.len()));
        let mut s = checksum::Summer::default();
        s.add(a);
        s.add(b);
        prop_assert_eq!(s.folded(), naive_sum(&[d]));
    }
}
