//! The built-in demo graph: a source of sequence-numbered UDP frames → `mac-swap` → a sink,
//! on every worker. It shows the engine moving real packets when no ports are configured.

use dataplane::harness::{MacSwap, PacketSink, PacketSource, SinkReport, SourceConfig};
use dataplane::{Graph, GraphBuilder, WorkerInit};
use std::sync::Arc;

/// Where the demo's sequence number sits: the first UDP payload byte.
pub const SEQUENCE_OFFSET: usize = 42;

/// An Ethernet / IPv4 / UDP frame of `size` bytes from 10.0.0.1:1024 to 10.0.1.1:4321.
pub fn udp_frame(size: usize) -> Vec<u8> {
    let mut f = vec![0u8; size.max(60)];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (f.len() - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 1, 1]);
    let sum = ip4_checksum(ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let udp_len = ip_len - 20;
    f[34..36].copy_from_slice(&1024u16.to_be_bytes());
    f[36..38].copy_from_slice(&4321u16.to_be_bytes());
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    f
}

fn ip4_checksum(header: &[u8]) -> u16 {
    let sum: u32 = header
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
        .sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    !(((folded & 0xffff) + (folded >> 16)) as u16)
}

/// Builds one worker's demo graph; returns it and its sink's report.
pub fn build(init: &WorkerInit, rate_pps: u64, frame_size: usize) -> (Graph<()>, Arc<SinkReport>) {
    let mut src = SourceConfig::new("demo-source", "mac-swap", vec![udp_frame(frame_size)]);
    src.sequence_offset = Some(SEQUENCE_OFFSET);
    src.first_sequence = (init.index as u64) << 48;
    src.rate_pps = (rate_pps > 0).then_some(rate_pps);
    src.rx_interface = init.index as u32;
    let sink = PacketSink::new("demo-sink");
    let report = sink.report();
    let mut b = GraphBuilder::new();
    b.add(PacketSource::new(src))
        .add(MacSwap::new("mac-swap", "demo-sink"))
        .add(sink);
    (b.build().expect("the demo graph is well formed"), report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_frame_is_a_valid_ipv4_udp_packet() {
        let f = udp_frame(64);
        assert_eq!(f.len(), 64);
        assert_eq!(ip4_checksum(&f[14..34]), 0, "header checksum verifies");
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 50);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 30);
    }
}
