//! VXLAN: encapsulated frames are byte-identical to frames scapy builds independently
//! (`tests/vectors/vxlan_scapy.py`, Debian's python3-scapy), and decapsulation round-trips.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::*;
use graph_nodes::names;

const VNI: u32 = 0x12_3456;

fn mac_str(m: &[u8]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Runs the scapy script for `test`; `None` (after saying why: [`testkit::unavailable`]) when
/// scapy is not installed and system tests are not required.
fn scapy(test: &str, jobs: &str) -> Option<Vec<Vec<u8>>> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/vxlan_scapy.py");
    let child = Command::new("/usr/bin/python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            testkit::unavailable(
                test,
                &format!("/usr/bin/python3 cannot run ({e}); install python3-scapy"),
            );
            return None;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(jobs.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("No module named"),
            "scapy script failed: {err}"
        );
        testkit::unavailable(
            test,
            &format!("scapy is not installed (apt-get install python3-scapy): {err}"),
        );
        return None;
    }
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        text.trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .map(|s| unhex(s.trim().trim_matches('"')))
            .collect(),
    )
}

fn job(eth_dst: &[u8], eth_src: &[u8], src: &str, dst: &str, sport: u16, inner: &[u8]) -> String {
    format!(
        r#"{{"eth_dst":"{}","eth_src":"{}","ip_src":"{src}","ip_dst":"{dst}","sport":{sport},"dport":4789,"vni":{VNI},"inner":"{}"}}"#,
        mac_str(eth_dst),
        mac_str(eth_src),
        hex(inner)
    )
}

/// eth0 (L2) ↔ tunnel 192.168.1.1 → 192.168.1.2 VNI 0x123456 over eth1 192.168.1.1/24.
fn rig() -> Rig {
    Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address(p[1], ip(192, 168, 1, 1), 24).unwrap();
        f.add_neighbor(p[1], ip(192, 168, 1, 2), HOST_B).unwrap();
        let t = f
            .add_vxlan_tunnel("vxlan0", ip(192, 168, 1, 1), ip(192, 168, 1, 2), VNI, 4789)
            .unwrap();
        f.cross_connect(p[0], t).unwrap();
    })
}

fn inner_frames() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = (0..6u16)
        .map(|i| {
            eth(
                HOST_A,
                [0x02, 0xcc, 0, 0, 0, 1],
                0x0800,
                &ipv4(
                    ip(172, 16, 0, 1),
                    ip(172, 16, 0, 2),
                    17,
                    64,
                    &udp(3000 + i, 53, &[i as u8; 40]),
                ),
            )
        })
        .collect();
    v.push(eth(
        [0xff; 6],
        [0x02, 0xcc, 0, 0, 0, 1],
        0x0806,
        &arp(
            1,
            [0x02, 0xcc, 0, 0, 0, 1],
            ip(172, 16, 0, 1),
            [0; 6],
            ip(172, 16, 0, 2),
        ),
    ));
    v.push(eth(HOST_A, [0x02, 0xcc, 0, 0, 0, 1], 0x88b5, &[7; 1400]));
    // IPv6 inside (a dual-stack connection over VXLAN): carried as any other frame.
    let mut ip6 = vec![0x60, 0, 0, 0, 0, 16, 17, 64];
    ip6.extend_from_slice(&[0xfd, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    ip6.extend_from_slice(&[0xfd, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    ip6.extend_from_slice(&udp(5000, 5001, &[6; 8]));
    v.push(eth(HOST_A, [0x02, 0xcc, 0, 0, 0, 1], 0x86dd, &ip6));
    v
}

#[test]
fn encapsulation_matches_scapy_byte_for_byte() {
    let mut r = rig();
    let inner = inner_frames();
    r.inject(0, &inner);
    let out = r.sent(1);
    assert_eq!(out.len(), inner.len(), "every frame encapsulated");
    let mut jobs = Vec::new();
    for (o, i) in out.iter().zip(&inner) {
        let sport = u16::from_be_bytes([o[34], o[35]]);
        assert!(
            sport >= 49152,
            "source port {sport} in the dynamic range (RFC 7348)"
        );
        jobs.push(job(&HOST_B, &MAC1, "192.168.1.1", "192.168.1.2", sport, i));
    }
    let Some(want) = scapy(
        "encapsulation_matches_scapy_byte_for_byte",
        &format!("[{}]", jobs.join(",")),
    ) else {
        return;
    };
    for (k, (got, want)) in out.iter().zip(&want).enumerate() {
        assert_eq!(hex(got), hex(want), "frame {k} differs from scapy's");
    }
    // The same inner flow always gets the same source port; different flows spread.
    r.inject(0, &inner[..1]);
    assert_eq!(r.sent(1)[0][34..36], out[0][34..36]);
    let ports: std::collections::HashSet<_> = out[..6].iter().map(|o| [o[34], o[35]]).collect();
    assert!(ports.len() > 1, "flows spread over source ports");
    r.assert_no_leaks();
}

#[test]
fn decapsulation_delivers_the_inner_frame_untouched() {
    let mut r = rig();
    let inner = inner_frames();
    let jobs: Vec<String> = inner
        .iter()
        .enumerate()
        .map(|(k, i)| {
            job(
                &MAC1,
                &HOST_B,
                "192.168.1.2",
                "192.168.1.1",
                50000 + k as u16,
                i,
            )
        })
        .collect();
    let Some(outer) = scapy(
        "decapsulation_delivers_the_inner_frame_untouched",
        &format!("[{}]", jobs.join(",")),
    ) else {
        return;
    };
    r.inject(1, &outer);
    assert_eq!(r.sent(0), inner, "decapsulated frames equal the originals");
    assert_eq!(
        r.graph
            .handle()
            .runtime()
            .node(names::VXLAN4_INPUT)
            .unwrap()
            .packets,
        inner.len() as u64
    );

    // Round trip through our own encapsulation too.
    r.inject(0, &inner);
    let mut ours = r.sent(1);
    for f in &mut ours {
        // Make our output look as if it came from the far end.
        f[..6].copy_from_slice(&MAC1);
        f[6..12].copy_from_slice(&HOST_B);
        let (s, d) = (f[26..30].to_vec(), f[30..34].to_vec());
        f[26..30].copy_from_slice(&d);
        f[30..34].copy_from_slice(&s);
    }
    r.inject(1, &ours);
    assert_eq!(r.sent(0), inner);
    r.assert_no_leaks();
}

#[test]
fn bad_vxlan_is_dropped_with_its_reason() {
    let mut r = rig();
    let inner = &inner_frames()[0];
    let mk = |flags: u8, vni: u32, src: u32| {
        let mut vx = vec![flags, 0, 0, 0];
        vx.extend_from_slice(&(vni << 8).to_be_bytes());
        vx.extend_from_slice(inner);
        eth(
            MAC1,
            HOST_B,
            0x0800,
            &ipv4(src, ip(192, 168, 1, 1), 17, 64, &udp(50000, 4789, &vx)),
        )
    };
    r.inject(1, &[mk(0x00, VNI, ip(192, 168, 1, 2))]);
    assert_eq!(r.error(names::VXLAN4_INPUT, "bad-flags"), 1);
    r.inject(1, &[mk(0x08, VNI + 1, ip(192, 168, 1, 2))]);
    assert_eq!(r.error(names::VXLAN4_INPUT, "no-tunnel"), 1);
    r.inject(1, &[mk(0x08, VNI, ip(192, 168, 1, 3))]);
    assert_eq!(r.error(names::VXLAN4_INPUT, "no-tunnel"), 2);
    let short = eth(
        MAC1,
        HOST_B,
        0x0800,
        &ipv4(
            ip(192, 168, 1, 2),
            ip(192, 168, 1, 1),
            17,
            64,
            &udp(50000, 4789, &[8, 0, 0, 0]),
        ),
    );
    r.inject(1, &[short]);
    assert_eq!(r.error(names::VXLAN4_INPUT, "too-short"), 1);
    assert!(r.sent(0).is_empty());
    r.assert_no_leaks();
}

// VXLAN over IPv6: 2001:db8:1::1 → 2001:db8:1::2 VNI 0x123456 over eth1 2001:db8:1::1/64.

const LOCAL6: &str = "2001:db8:1::1";
const REMOTE6: &str = "2001:db8:1::2";

fn v6(s: &str) -> u128 {
    u128::from(s.parse::<std::net::Ipv6Addr>().unwrap())
}

fn rig6() -> Rig {
    Rig::new(&[MAC0, MAC1], |f, p| {
        f.add_address6(p[1], v6(LOCAL6), 64).unwrap();
        f.add_neighbor6(p[1], v6(REMOTE6), HOST_B).unwrap();
        let t = f
            .add_vxlan6_tunnel("vxlan6", v6(LOCAL6), v6(REMOTE6), VNI, 4789)
            .unwrap();
        f.cross_connect(p[0], t).unwrap();
    })
}

/// A job for scapy's VXLAN over IPv6 (its UDP checksum computed by scapy).
fn job6(
    eth_dst: &[u8],
    eth_src: &[u8],
    src: &str,
    dst: &str,
    sport: u16,
    fl: u32,
    inner: &[u8],
) -> String {
    format!(
        r#"{{"ip6":true,"fl":{fl},"eth_dst":"{}","eth_src":"{}","ip_src":"{src}","ip_dst":"{dst}","sport":{sport},"dport":4789,"vni":{VNI},"inner":"{}"}}"#,
        mac_str(eth_dst),
        mac_str(eth_src),
        hex(inner)
    )
}

/// Where the outer UDP header starts in a frame over IPv6.
const UDP6: usize = 14 + 40;

#[test]
fn encapsulation_over_ipv6_matches_scapy_byte_for_byte_checksum_included() {
    let mut r = rig6();
    let inner = inner_frames();
    r.inject(0, &inner);
    let out = r.sent(1);
    assert_eq!(out.len(), inner.len(), "every frame encapsulated");
    let mut jobs = Vec::new();
    for (o, i) in out.iter().zip(&inner) {
        assert_eq!(u16::from_be_bytes([o[12], o[13]]), 0x86dd);
        let sport = u16::from_be_bytes([o[UDP6], o[UDP6 + 1]]);
        assert!(sport >= 49152, "source port {sport} in the dynamic range");
        let fl = u32::from_be_bytes([0, o[15] & 0x0f, o[16], o[17]]);
        jobs.push(job6(&HOST_B, &MAC1, LOCAL6, REMOTE6, sport, fl, i));
    }
    let Some(want) = scapy(
        "encapsulation_over_ipv6_matches_scapy_byte_for_byte_checksum_included",
        &format!("[{}]", jobs.join(",")),
    ) else {
        return;
    };
    for (k, (got, want)) in out.iter().zip(&want).enumerate() {
        assert_eq!(hex(got), hex(want), "frame {k} differs from scapy's");
    }
    // Flows spread over source ports and flow labels; one flow keeps both.
    let labels: std::collections::HashSet<_> =
        out[..6].iter().map(|o| o[15..18].to_vec()).collect();
    assert!(labels.len() > 1, "flows spread over flow labels");
    r.inject(0, &inner[..1]);
    assert_eq!(r.sent(1)[0][14..18], out[0][14..18]);
    r.assert_no_leaks();
}

#[test]
fn decapsulation_over_ipv6_checks_the_checksum_and_delivers_the_inner_frame() {
    let mut r = rig6();
    let inner = inner_frames();
    let jobs: Vec<String> = inner
        .iter()
        .enumerate()
        .map(|(k, i)| {
            job6(
                &MAC1,
                &HOST_B,
                REMOTE6,
                LOCAL6,
                50000 + k as u16,
                k as u32,
                i,
            )
        })
        .collect();
    let Some(outer) = scapy(
        "decapsulation_over_ipv6_checks_the_checksum_and_delivers_the_inner_frame",
        &format!("[{}]", jobs.join(",")),
    ) else {
        return;
    };
    r.inject(1, &outer);
    assert_eq!(r.sent(0), inner, "decapsulated frames equal the originals");
    let rt = r.graph.handle().runtime();
    assert_eq!(
        rt.node(names::VXLAN6_INPUT).unwrap().packets,
        inner.len() as u64
    );

    // Bad input, each by its reason; nothing comes out.
    let good = outer[0].clone();
    let mut zero = good.clone();
    zero[UDP6 + 6..UDP6 + 8].copy_from_slice(&[0, 0]);
    let mut wrong = good.clone();
    wrong[UDP6 + 6] ^= 0x55;
    let mut short_len = good.clone();
    let l = u16::from_be_bytes([short_len[UDP6 + 4], short_len[UDP6 + 5]]) - 1;
    short_len[UDP6 + 4..UDP6 + 6].copy_from_slice(&l.to_be_bytes());
    let mut other_vni = good.clone();
    // The VNI changes and the checksum with it (the words differ by 1 in the VNI's low word).
    other_vni[UDP6 + 8 + 6] ^= 0x01;
    let c = u16::from_be_bytes([other_vni[UDP6 + 6], other_vni[UDP6 + 7]]);
    let old = u16::from_be_bytes([good[UDP6 + 14], good[UDP6 + 15]]);
    let new = u16::from_be_bytes([other_vni[UDP6 + 14], other_vni[UDP6 + 15]]);
    let c = !fold_add(fold_add(!c, !old), new);
    other_vni[UDP6 + 6..UDP6 + 8].copy_from_slice(&c.to_be_bytes());
    r.inject(1, &[zero, wrong, short_len, other_vni]);
    assert_eq!(r.error(names::VXLAN6_INPUT, "zero-checksum"), 1);
    assert_eq!(r.error(names::VXLAN6_INPUT, "bad-checksum"), 1);
    assert_eq!(r.error(names::VXLAN6_INPUT, "bad-length"), 1);
    assert_eq!(r.error(names::VXLAN6_INPUT, "no-tunnel"), 1);
    assert!(r.sent(0).is_empty());

    // Round trip through our own encapsulation, turned around as if from the far end.
    r.inject(0, &inner);
    let mut ours = r.sent(1);
    for f in &mut ours {
        f[..6].copy_from_slice(&MAC1);
        f[6..12].copy_from_slice(&HOST_B);
        let (s, d) = (f[22..38].to_vec(), f[38..54].to_vec());
        f[22..38].copy_from_slice(&d);
        f[38..54].copy_from_slice(&s);
    }
    r.inject(1, &ours);
    assert_eq!(r.sent(0), inner);
    r.assert_no_leaks();
}

/// One's-complement addition of two 16-bit words.
fn fold_add(a: u16, b: u16) -> u16 {
    let s = u32::from(a) + u32::from(b);
    ((s & 0xffff) + (s >> 16)) as u16
}
