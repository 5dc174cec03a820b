//! IP-mode memif ports: point-to-point links with no link layer, L3 cross-connected and
//! routed.

use std::net::Ipv4Addr;
use std::sync::Mutex;

use memif::{Mode, Slave};
use quiver::config::{MemifMode, PortSection};
use testkit::wait_for;

use crate::support::{link_of, links_up, memif_master, slave_in, socket, start};

/// An IPv4 packet (UDP, no options) from `src` to `dst` with `ttl` and a valid checksum.
fn ip4(src: [u8; 4], dst: [u8; 4], ttl: u8, seq: u8) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 48, 0, seq, 0, 0, ttl, 17, 0, 0];
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend((0..28).map(|i| i ^ seq));
    let sum = ip4_checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p
}

fn ip4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .enumerate()
        .filter(|&(i, _)| i != 5)
        .map(|(_, w)| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Sends 100 IPv4 packets from `from`, one at a time, and checks `to` receives each with its
/// TTL decremented and a checksum a full computation agrees with.
fn across(from: &mut Slave, to: &mut Slave, src: [u8; 4], dst: [u8; 4]) {
    for seq in 0..100u8 {
        let sent = ip4(src, dst, 64, seq);
        while from.interface_mut().tx_burst(0, &[&sent[..]]) == 0 {
            std::thread::yield_now();
        }
        let mut got = Vec::new();
        wait_for("an IP packet across the L3 cross-connect", 10, || {
            to.interface_mut()
                .rx_burst(0, 4, &mut |p: &[u8]| got.push(p.to_vec()));
            !got.is_empty()
        });
        assert_eq!(got, vec![ip4(src, dst, 63, seq)], "packet {seq}");
        assert_eq!(got[0][10..12], ip4_checksum(&got[0][..20]).to_be_bytes());
    }
}

#[test]
fn ip_mode_memif_ports_l3_cross_connected_carry_ip_packets_with_the_ttl_decremented() {
    let sock = socket("l3ip", 0);
    let (f, pool) = start("");
    let start_free = pool.free_count();
    let f = Mutex::new(f);
    let owner = Some("nsm-ip");
    for (name, id) in [("ip0", 0), ("ip1", 1)] {
        let mut section = memif_master(name, &sock, id);
        if let PortSection::Memif(m) = &mut section {
            m.mode = MemifMode::Ip;
        }
        f.lock().unwrap().add_port(&section, owner).unwrap();
    }
    // Point to point: no address, no ARP; the peers' addresses only name the next hops.
    f.lock()
        .unwrap()
        .l3_cross_connect(
            "ip0",
            "ip1",
            Ipv4Addr::new(172, 16, 2, 1).into(),
            Ipv4Addr::new(172, 16, 1, 1).into(),
            owner,
        )
        .unwrap();
    let mut a = slave_in(&sock, 0, Mode::Ip);
    let mut b = slave_in(&sock, 1, Mode::Ip);
    links_up(link_of(&f), &["ip0", "ip1"], &mut [&mut a, &mut b]);

    // Any destination goes across (no route covers it), TTL decremented, checksum updated.
    across(&mut a, &mut b, [172, 16, 1, 1], [10, 200, 0, 7]);
    across(&mut b, &mut a, [10, 200, 0, 7], [172, 16, 1, 1]);
    // A packet whose TTL runs out is dropped, not sent.
    let expiring = ip4([172, 16, 1, 1], [10, 200, 0, 7], 1, 0);
    while a.interface_mut().tx_burst(0, &[&expiring[..]]) == 0 {}
    wait_for("the expired packet counted", 10, || {
        let f = f.lock().unwrap();
        f.dataplane()
            .runtime()
            .workers
            .iter()
            .map(|w| w.error("ip4-rewrite", "ttl-expired"))
            .sum::<u64>()
            == 1
    });

    let mut f = f.into_inner().unwrap();
    assert_eq!(f.remove_owned("nsm-ip").unwrap(), 3);
    assert!(
        f.forwarding().neighbors().is_empty(),
        "the peers' entries went with it"
    );
    assert_eq!(f.forwarding().object_counts(), (0, 0));
    assert!(!sock.exists());
    f.stop();
    assert_eq!(pool.free_count(), start_free);
}

#[test]
fn ip_mode_memif_ports_routed_need_no_arp_and_carry_packets_both_ways() {
    let sock = socket("l3route", 0);
    let toml = format!(
        r#"
[[port]]
name = "ipa"
type = "memif"
role = "master"
socket = "{s}"
id = 0
mode = "ip"

[[port]]
name = "ipb"
type = "memif"
role = "master"
socket = "{s}"
id = 1
mode = "ip"

[[address]]
port = "ipa"
ip = "172.16.1.254/24"

[[address]]
port = "ipb"
ip = "172.16.2.254/24"

[[route]]
prefix = "10.9.0.0/16"
via = ["172.16.2.1@ipb"]
"#,
        s = sock.display()
    );
    let (f, pool) = start(&toml);
    let start_free = pool.free_count();
    let f = Mutex::new(f);
    let mut a = slave_in(&sock, 0, Mode::Ip);
    let mut b = slave_in(&sock, 1, Mode::Ip);
    links_up(link_of(&f), &["ipa", "ipb"], &mut [&mut a, &mut b]);

    // To a host of b's connected subnet (no neighbour known, none needed), to a prefix
    // routed via b's peer, and back to a's subnet.
    across(&mut a, &mut b, [172, 16, 1, 1], [172, 16, 2, 1]);
    across(&mut a, &mut b, [172, 16, 1, 1], [10, 9, 3, 4]);
    across(&mut b, &mut a, [10, 9, 3, 4], [172, 16, 1, 1]);

    let f = f.into_inner().unwrap();
    let rt = f.dataplane().runtime();
    let errors =
        |node: &str, code: &str| rt.workers.iter().map(|w| w.error(node, code)).sum::<u64>();
    assert_eq!(
        errors("ip4-arp", "resolving"),
        0,
        "no ARP into a link without a link layer"
    );
    assert!(
        f.forwarding().neighbors().is_empty(),
        "nothing to resolve on a point-to-point link"
    );
    f.stop();
    assert_eq!(pool.free_count(), start_free);
}
