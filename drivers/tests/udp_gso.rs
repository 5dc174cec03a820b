//! UDP segmentation offload on an AF_PACKET port's transmit (`queue::udp_gso`): a burst of one
//! flow's datagrams leaves as one UDP GSO super-frame, and the kernel delivers each datagram
//! whole. Checked at a real UDP socket in a namespace, with the veth's offloads on (the
//! super-frame crosses the veth whole) and off (the kernel segments it and fills in every
//! checksum in software before the veth, so the receiving socket verifies our partial one).
//!
//! Needs root, `ip`, `ethtool` and `/usr/bin/python3`; without them each test prints why and
//! passes, unless `QUIVER_REQUIRE_SYSTEM_TESTS=1`.

mod common;

use common::*;
use dataplane::buffer::flags;
use dataplane::BufferIndex;
use drivers::af_packet::{AfPacketConfig, AfPacketPort};
use drivers::Port;

const PYTHON: &str = "/usr/bin/python3";

/// Receives datagrams on 10.0.31.2:7100 until 1 s passes without one; prints `listening`, then
/// `<count> <bad>` where bad counts datagrams whose bytes are not what their first 4 bytes (an
/// index) say, then the UDP checksum errors the namespace counted.
const SERVER: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind(("10.0.31.2", 7100))
print("listening", flush=True)
s.settimeout(5)
count = bad = 0
while True:
    try:
        d = s.recv(65536)
    except socket.timeout:
        break
    s.settimeout(1)
    count += 1
    i = int.from_bytes(d[:4], "big")
    if d[4:] != bytes([i % 251]) * (len(d) - 4):
        bad += 1
errors = 0
with open("/proc/net/snmp") as f:
    rows = [l.split() for l in f if l.startswith("Udp:")]
    errors = int(rows[1][rows[0].index("InCsumErrors")])
print(count, bad, errors, flush=True)
"#;

/// An Ethernet/IPv4/UDP frame from 10.0.31.1:7000 to 10.0.31.2:`port` with `len` payload bytes:
/// the index, then `index % 251` repeated. The IPv4 checksum is right; the UDP one is 0 (none).
fn datagram(dst_mac: [u8; 6], index: u32, len: usize, port: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(42 + len);
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0x31, 1, 0x08, 0x00]);
    let ip_len = (28 + len) as u16;
    let mut ip = [
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 31, 1, 10, 0, 31, 2,
    ];
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[4..6].copy_from_slice(&(index as u16).to_be_bytes());
    let sum = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&7000u16.to_be_bytes());
    f.extend_from_slice(&port.to_be_bytes());
    f.extend_from_slice(&((8 + len) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&index.to_be_bytes());
    f.extend(std::iter::repeat_n((index % 251) as u8, len - 4));
    f
}

fn mac_of(ns: &Netns, dev: &str) -> [u8; 6] {
    let out = ns.sh(&format!("cat /sys/class/net/{dev}/address"));
    let text = String::from_utf8_lossy(&out.stdout);
    let bytes: Vec<u8> = text
        .trim()
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).expect("a MAC"))
        .collect();
    bytes.try_into().expect("six bytes")
}

#[test]
fn a_burst_of_one_flows_datagrams_leaves_as_one_super_frame_and_arrives_whole() {
    if !system_ready_with(
        "a_burst_of_one_flows_datagrams_leaves_as_one_super_frame",
        &[PYTHON, "/usr/sbin/ethtool"],
    ) {
        return;
    }
    for kernel_offloads in [true, false] {
        let ns = Netns::new();
        let veth = Veth::new(&ns, "10.0.31.2/24");
        if !kernel_offloads {
            // The kernel segments and checksums before the veth: the socket checks our sums.
            run(&[
                "ethtool",
                "-K",
                &veth.root,
                "tx",
                "off",
                "tx-udp-segmentation",
                "off",
            ]);
        }
        let port = AfPacketPort::open(&AfPacketConfig::new(&veth.root, 1)).expect("AF_PACKET");
        let mut qp = port.queue_pair(0).expect("a queue pair");
        let pool = pool();
        let mut buffers = pool.worker_buffers();
        let dst = mac_of(&ns, &veth.inner);

        let (mut server, mut lines) = python_server(&ns, SERVER, &[]);
        // Burst 1: 40 datagrams of 1,000 bytes, the last of 500: one run. Burst 2: 30 of 1,200
        // bytes with every 7th one of another size or to another port: several runs, and
        // datagrams between them sent one by one (those to port 7101 find no socket). Burst 3:
        // 10 of 1,000 bytes not marked as a tunnel's: sent one by one (a pod's frame reader
        // must never see a super-frame Quiver made).
        let burst1: Vec<Vec<u8>> = (0..40)
            .map(|i| datagram(dst, i, if i == 39 { 500 } else { 1000 }, 7100))
            .collect();
        let burst2: Vec<Vec<u8>> = (40..70)
            .map(|i| match i % 7 {
                0 => datagram(dst, i, 300, 7100),
                3 => datagram(dst, i, 1200, 7101),
                _ => datagram(dst, i, 1200, 7100),
            })
            .collect();
        let burst3: Vec<Vec<u8>> = (70..80).map(|i| datagram(dst, i, 1000, 7100)).collect();
        for (burst, tunnel) in [(&burst1, true), (&burst2, true), (&burst3, false)] {
            let mut packets = vec![BufferIndex::NONE; burst.len()];
            buffers.alloc(&mut packets).expect("buffers");
            for (bi, f) in packets.iter().zip(burst.iter()) {
                buffers.write_packet(*bi, f).expect("fits");
                if tunnel {
                    buffers.meta_mut(*bi).flags |= flags::UDP_GSO_OK;
                }
            }
            assert_eq!(qp.tx.transmit(&mut buffers, &packets), burst.len());
        }
        let got = lines.next().and_then(Result::ok).unwrap_or_default();
        let _ = server.wait();
        let to_7101 = (40..70).filter(|i| i % 7 == 3).count();
        assert_eq!(
            got,
            format!("{} 0 0", 80 - to_7101),
            "offloads {kernel_offloads}: every datagram to 7100 whole, no checksum error"
        );
        let stats = port.stats();
        let counter = |name: &str| {
            stats
                .detail
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, v)| *v)
        };
        assert!(
            counter("tx-udp-gso-frames") >= 3,
            "runs left as super-frames: {:?}",
            stats.detail
        );
        let coalesced = counter("tx-udp-gso-datagrams");
        assert!(
            (40 + 20..=70).contains(&coalesced),
            "burst 3 left one by one: {coalesced}"
        );
        assert_eq!(stats.tx_packets, 80, "every datagram counted once");
        assert_eq!(stats.tx_dropped, 0);
        drop(buffers);
        assert_eq!(
            pool.free_count(),
            pool.capacity() as usize,
            "every buffer back"
        );
    }
}
