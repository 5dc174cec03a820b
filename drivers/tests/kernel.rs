//! AF_PACKET and TAP ports against the Linux kernel: namespaces and veths made with iproute2,
//! the kernel's own ping, ARP and VXLAN as peers, and real workers running the forwarding graph.
//!
//! Needs root (CAP_NET_ADMIN, CAP_NET_RAW), `ip` and `ping`. Without them each test prints why
//! and passes, unless `QUIVER_REQUIRE_SYSTEM_TESTS=1`, which makes a missing prerequisite a
//! failure.

mod common;

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use dataplane::{Context, Dataplane, Frame, GraphBuilder, Node, NodeSpec, PortInput, WorkerConfig};
use drivers::af_packet::{AfPacketConfig, AfPacketPort};
use drivers::tap::{TapConfig, TapPort};
use drivers::{LinkStatus, Port};
use graph_nodes::names;

fn ip(s: &str) -> u32 {
    u32::from(s.parse::<std::net::Ipv4Addr>().unwrap())
}

const PING_DEADLINE: Duration = Duration::from_secs(20);

/// The TTLs ping printed, one per reply.
fn reply_ttls(ping_output: &str) -> Vec<u32> {
    ping_output
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("ttl="))
        .map(|t| t.parse().unwrap())
        .collect()
}

#[test]
fn l2_cross_connect_carries_ping_between_two_namespaces() {
    if !system_ready("l2_cross_connect_carries_ping_between_two_namespaces") {
        return;
    }
    let (ns1, ns2) = (Netns::new(), Netns::new());
    let (v1, v2) = (
        Veth::new(&ns1, "10.0.0.1/24"),
        Veth::new(&ns2, "10.0.0.2/24"),
    );
    let mut fwd = forwarding();
    let a = af_packet_port(&mut fwd, &v1.root, 1);
    let b = af_packet_port(&mut fwd, &v2.root, 1);
    fwd.cross_connect(a.1, b.1).unwrap();
    assert_eq!(a.0.link(), LinkStatus::Up);
    let q = Quiver::start(fwd, &[a.clone(), b.clone()], &[0]);

    let out = ns1.ping("10.0.0.2", PING_DEADLINE);
    assert!(out.contains("3 received"), "every echo answered: {out}");
    assert_eq!(
        reply_ttls(&out),
        [64, 64, 64],
        "L2: nothing touches the TTL"
    );

    // What ns1 sent is what Quiver received on a, cross-connected, sent on b, and ns2 got.
    let (ns1_sent, ns1_received) = wait_counters_match(&ns1, &v1.inner, &*a.0);
    let (ns2_sent, ns2_received) = wait_counters_match(&ns2, &v2.inner, &*b.0);
    assert!(
        ns1_sent >= 4,
        "an ARP request and 3 echo requests, at least"
    );
    assert!(ns2_sent >= 4, "an ARP reply and 3 echo replies, at least");
    assert_eq!(ns2_received, ns1_sent);
    assert_eq!(ns1_received, ns2_sent);
    assert_eq!(q.xconnected(a.1).0, ns1_sent);
    assert_eq!(q.xconnected(b.1).0, ns2_sent);
    let (sa, sb) = (a.0.stats(), b.0.stats());
    assert_eq!(q.xconnected(a.1).1, sa.rx_bytes);
    assert_eq!(sb.tx_bytes, sa.rx_bytes, "frames cross untouched");
    assert_eq!(
        (sa.rx_dropped, sa.tx_dropped, sb.rx_dropped, sb.tx_dropped),
        (0, 0, 0, 0)
    );
}

#[test]
fn routed_ping_crosses_quiver_with_arp_and_a_decremented_ttl() {
    if !system_ready("routed_ping_crosses_quiver_with_arp_and_a_decremented_ttl") {
        return;
    }
    let (ns1, ns2) = (Netns::new(), Netns::new());
    let (v1, v2) = (
        Veth::new(&ns1, "10.0.1.2/24"),
        Veth::new(&ns2, "10.0.2.2/24"),
    );
    ns1.ip(&["route", "add", "default", "via", "10.0.1.1"]);
    ns2.ip(&["route", "add", "default", "via", "10.0.2.1"]);
    let mut fwd = forwarding();
    let a = af_packet_port(&mut fwd, &v1.root, 1);
    let b = af_packet_port(&mut fwd, &v2.root, 1);
    fwd.add_address(a.1, ip("10.0.1.1"), 24).unwrap();
    fwd.add_address(b.1, ip("10.0.2.1"), 24).unwrap();
    let q = Quiver::start(fwd, &[a.clone(), b.clone()], &[1]);

    let out = ns1.ping("10.0.2.2", PING_DEADLINE);
    let ttls = reply_ttls(&out);
    assert!(
        !ttls.is_empty() && ttls.iter().all(|&t| t == 63),
        "ns2's 64, less Quiver's hop: {out}"
    );
    let back = ns2.ping("10.0.1.2", PING_DEADLINE);
    assert!(reply_ttls(&back).iter().all(|&t| t == 63), "{back}");

    let local = ns1.ping("10.0.1.1", PING_DEADLINE);
    assert!(
        local.contains("3 received"),
        "Quiver answers for its own address: {local}"
    );
    assert_eq!(
        reply_ttls(&local),
        [64, 64, 64],
        "a reply Quiver made is not decremented"
    );

    assert!(q.error(names::IP4_LOCAL, "echo-replies") >= 3);
    // ns1 asks for its gateway; ns2 learns Quiver's MAC from Quiver's own request.
    assert!(
        q.error(names::ARP_INPUT, "requests-answered") >= 1,
        "ARP for 10.0.1.1"
    );
    assert!(
        q.error(names::IP4_ARP, "requests-sent") >= 1,
        "Quiver asked for a next hop"
    );
    assert!(
        q.node_packets(names::IP4_REWRITE) >= 6,
        "forwarded both ways"
    );
    let learned = q.fwd.lock().unwrap().neighbors();
    assert!(learned
        .iter()
        .any(|&(i, addr, _)| i == b.1 && addr == ip("10.0.2.2")));
    wait_counters_match(&ns1, &v1.inner, &*a.0);
    wait_counters_match(&ns2, &v2.inner, &*b.0);
}

#[test]
fn vxlan_to_the_kernel_carries_ping_both_ways() {
    if !system_ready("vxlan_to_the_kernel_carries_ping_both_ways") {
        return;
    }
    const VNI: u32 = 42;
    let (ns1, ns2) = (Netns::new(), Netns::new());
    let (v1, v2) = (
        Veth::new(&ns1, "10.0.5.1/24"),
        Veth::new(&ns2, "192.168.5.2/24"),
    );
    ns2.ip(&[
        "link",
        "add",
        "vx42",
        "type",
        "vxlan",
        "id",
        "42",
        "local",
        "192.168.5.2",
        "remote",
        "192.168.5.1",
        "dstport",
        "4789",
        "dev",
        "veth0",
    ]);
    ns2.ip(&["addr", "add", "10.0.5.2/24", "dev", "vx42"]);
    ns2.ip(&["link", "set", "vx42", "up"]);

    let mut fwd = forwarding();
    let overlay = af_packet_port(&mut fwd, &v1.root, 1);
    let underlay = af_packet_port(&mut fwd, &v2.root, 1);
    fwd.add_address(underlay.1, ip("192.168.5.1"), 24).unwrap();
    let tunnel = fwd
        .add_vxlan_tunnel("vxlan42", ip("192.168.5.1"), ip("192.168.5.2"), VNI, 4789)
        .unwrap();
    fwd.cross_connect(overlay.1, tunnel).unwrap();
    let q = Quiver::start(fwd, &[overlay.clone(), underlay.clone()], &[0]);

    let out = ns1.ping("10.0.5.2", PING_DEADLINE);
    assert!(
        reply_ttls(&out).iter().all(|&t| t == 64),
        "bridged, not routed: {out}"
    );
    ns2.ping("10.0.5.1", PING_DEADLINE);

    let encapsulated = q.node_packets(names::VXLAN4_ENCAP);
    let decapsulated = q.node_packets(names::VXLAN4_INPUT);
    assert!(
        encapsulated >= 6,
        "ARP and echoes from ns1 went into the tunnel ({encapsulated})"
    );
    assert!(
        decapsulated >= 6,
        "the kernel's VXLAN frames came out of it ({decapsulated})"
    );
    assert_eq!(q.xconnected(overlay.1).0, overlay.0.stats().rx_packets);
    assert!(q.xconnected(tunnel).0 >= 6);
    assert_eq!(q.xconnected(tunnel).0, overlay.0.stats().tx_packets);
    // The kernel took our frames for its own: its VXLAN device counts what it decapsulated.
    let vx_rx = ns2.counter("vx42", "rx_packets");
    assert!(vx_rx >= 6, "vx42 received {vx_rx}");
    wait_counters_match(&ns1, &v1.inner, &*overlay.0);
    wait_counters_match(&ns2, &v2.inner, &*underlay.0);
}

#[test]
fn vxlan_over_ipv6_to_the_kernel_carries_ping_both_ways_at_full_size() {
    if !system_ready("vxlan_over_ipv6_to_the_kernel_carries_ping_both_ways_at_full_size") {
        return;
    }
    const VNI: u32 = 43;
    let (ns1, ns2) = (Netns::new(), Netns::new());
    let (v1, v2) = (Veth::new(&ns1, "10.0.6.1/24"), Veth::new(&ns2, ""));
    // IPv6 comes up in ns2 only once Quiver runs, so that its ports see every frame the
    // kernel sends (its router solicitations and MLD reports included): the counters compared
    // at the end are the kernel's whole.
    let v6 = |s: &str| u128::from(s.parse::<std::net::Ipv6Addr>().unwrap());
    let mut fwd = forwarding();
    let overlay = af_packet_port(&mut fwd, &v1.root, 1);
    let underlay = af_packet_port(&mut fwd, &v2.root, 1);
    fwd.add_address6(underlay.1, v6("2001:db8:6::1"), 64)
        .unwrap();
    let tunnel = fwd
        .add_vxlan6_tunnel(
            "vxlan43",
            v6("2001:db8:6::1"),
            v6("2001:db8:6::2"),
            VNI,
            4789,
        )
        .unwrap();
    fwd.cross_connect(overlay.1, tunnel).unwrap();
    let q = Quiver::start(fwd, &[overlay.clone(), underlay.clone()], &[0]);
    // The underlay is IPv6 only; the kernel's VXLAN device sends UDP checksums over IPv6 and
    // refuses datagrams without one (udp6zerocsumtx/rx off, its defaults).
    ns2.sh("sysctl -qw net.ipv6.conf.veth0.disable_ipv6=0");
    ns2.ip(&[
        "-6",
        "addr",
        "add",
        "2001:db8:6::2/64",
        "dev",
        "veth0",
        "nodad",
    ]);
    ns2.ip(&[
        "link",
        "add",
        "vx43",
        "type",
        "vxlan",
        "id",
        "43",
        "local",
        "2001:db8:6::2",
        "remote",
        "2001:db8:6::1",
        "dstport",
        "4789",
        "dev",
        "veth0",
    ]);
    ns2.ip(&["addr", "add", "10.0.6.2/24", "dev", "vx43"]);
    ns2.ip(&["link", "set", "vx43", "up"]);

    let out = ns1.ping("10.0.6.2", PING_DEADLINE);
    assert!(reply_ttls(&out).iter().all(|&t| t == 64), "bridged: {out}");
    ns2.ping("10.0.6.1", PING_DEADLINE);
    // The largest frame vx43 carries (its MTU is 1500 - 70): every byte's checksum checked
    // by the kernel one way and by vxlan6-input the other.
    let mtu: u32 = String::from_utf8_lossy(&ns2.sh("cat /sys/class/net/vx43/mtu").stdout)
        .trim()
        .parse()
        .unwrap();
    assert_eq!(mtu, 1430, "the kernel's own VXLAN-over-IPv6 overhead");
    ns1.sh("ip link set veth0 mtu 1430");
    let full = (mtu - 28).to_string();
    let out = ns1.exec(&[
        "ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", "-M", "do", "-s", &full, "10.0.6.2",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("3 received"), "full-size pings: {text}");

    assert!(q.node_packets(names::VXLAN6_ENCAP) >= 9, "into the tunnel");
    assert!(q.node_packets(names::VXLAN6_INPUT) >= 9, "out of it");
    assert_eq!(q.error(names::VXLAN6_INPUT, "bad-checksum"), 0);
    // The kernel took our datagrams: none failed its UDP checksum, vx43 decapsulated them.
    let udp6_errors = ns2.sh("nstat -az Udp6InCsumErrors | awk '/Udp6InCsumErrors/ {print $2}'");
    assert_eq!(String::from_utf8_lossy(&udp6_errors.stdout).trim(), "0");
    assert!(ns2.counter("vx43", "rx_packets") >= 9);
    // Neighbour discovery on the underlay, both ways.
    assert!(q.error(names::IP6_ND, "solicitations-answered") >= 1);
    wait_counters_match(&ns1, &v1.inner, &*overlay.0);
    wait_counters_match(&ns2, &v2.inner, &*underlay.0);
}

#[test]
fn tap_port_answers_the_host_stack() {
    if !system_ready("tap_port_answers_the_host_stack") {
        return;
    }
    let ns = Netns::new();
    // Opened from inside the namespace: the device is made there.
    let tap = ns
        .run_in(|| TapPort::open(&TapConfig::new("", 1)))
        .expect("TAP device");
    let name = tap.name().to_string();
    assert_ne!(
        tap.mac(),
        tap.kernel_mac(),
        "Quiver is the far end of the link"
    );
    assert_eq!(
        tap.link(),
        LinkStatus::Up,
        "brought up, and attached while the port lives"
    );
    ns.ip(&["addr", "add", "10.0.3.2/24", "dev", &name]);
    let tap: Arc<dyn Port> = Arc::new(tap);
    let mut fwd = forwarding();
    let t = add_port(&mut fwd, tap.clone(), 1500);
    fwd.add_address(t.1, ip("10.0.3.1"), 24).unwrap();
    let q = Quiver::start(fwd, &[t], &[1]);

    let out = ns.ping("10.0.3.1", PING_DEADLINE);
    assert!(!reply_ttls(&out).is_empty(), "{out}");
    assert!(q.error(names::ARP_INPUT, "requests-answered") >= 1);
    assert!(q.error(names::IP4_LOCAL, "echo-replies") >= 1);
    let (host_sent, host_received) = wait_counters_match(&ns, &name, &*tap);
    assert!(
        host_sent >= 2 && host_received >= 2,
        "ARP and ICMP both ways"
    );
    assert_eq!(tap.stats().rx_dropped + tap.stats().tx_dropped, 0);
}

#[test]
fn tap_port_gives_one_queue_per_worker() {
    if !system_ready("tap_port_gives_one_queue_per_worker") {
        return;
    }
    let ns = Netns::new();
    let tap = ns
        .run_in(|| TapPort::open(&TapConfig::new("qtap0", 2)))
        .expect("multi-queue TAP device");
    assert_eq!(tap.name(), "qtap0");
    let q0 = tap.queue_pair(0).expect("queue 0");
    let _q1 = tap.queue_pair(1).expect("queue 1");
    assert!(tap.queue_pair(0).is_err(), "queue 0 is taken");
    assert!(tap.queue_pair(2).is_err(), "there are two queues");
    drop(q0);
    tap.queue_pair(0).expect("queue 0 again once given back");
    let flags = ns.sh("cat /sys/class/net/qtap0/tun_flags");
    let flags = u32::from_str_radix(
        String::from_utf8_lossy(&flags.stdout)
            .trim()
            .trim_start_matches("0x"),
        16,
    )
    .unwrap();
    assert_ne!(
        flags & libc::IFF_MULTI_QUEUE as u32,
        0,
        "tun_flags {flags:#x}"
    );
}

/// Counts the test's frames by sequence number over all workers, and frees them.
struct SeenOnce {
    seen: Arc<Vec<AtomicU64>>,
    duplicates: Arc<AtomicU64>,
    foreign: Arc<AtomicU64>,
}

/// Where the sender puts its marker and sequence number (after Ethernet, IPv4, UDP).
const SEQ_AT: usize = 14 + 20 + 8;
const MARKER: u32 = 0x5155_4956; // "QUIV"

impl Node<()> for SeenOnce {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal("seen-once")
    }

    fn process(&mut self, cx: &mut Context<'_, ()>, frame: &mut Frame) -> usize {
        for &bi in frame.as_slice() {
            let d = cx.buffers.data(bi);
            let seq = d
                .get(SEQ_AT..SEQ_AT + 12)
                .filter(|m| u32::from_be_bytes(m[..4].try_into().unwrap()) == MARKER)
                .map(|m| u64::from_be_bytes(m[4..].try_into().unwrap()) as usize)
                .filter(|&s| s / 64 < self.seen.len());
            match seq {
                Some(s) => {
                    let bit = 1u64 << (s % 64);
                    if self.seen[s / 64].fetch_or(bit, Ordering::Relaxed) & bit != 0 {
                        self.duplicates.fetch_add(1, Ordering::Relaxed);
                    }
                }
                None => {
                    self.foreign.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        cx.buffers.free(frame.as_slice());
        frame.len()
    }
}

/// A UDP/IPv4 frame of flow `seq % 509` carrying the marker and `seq`.
fn flow_frame(src_mac: [u8; 6], seq: u64) -> Vec<u8> {
    let flow = (seq % 509) as u16;
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(20u16 + 8 + 12).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 9, (flow >> 8) as u8, flow as u8]);
    ip[16..20].copy_from_slice(&[10, 8, 0, 1]);
    let sum = ip
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
        .sum::<u32>();
    let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&(1024 + flow).to_be_bytes());
    f.extend_from_slice(&9u16.to_be_bytes());
    f.extend_from_slice(&(8u16 + 12).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&MARKER.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f
}

/// A raw AF_PACKET socket that sends on one interface of the calling thread's namespace.
struct RawSender {
    fd: OwnedFd,
    addr: libc::sockaddr_ll,
}

impl RawSender {
    fn new(interface: &str) -> RawSender {
        use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
        let fd = socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("AF_PACKET socket");
        let index = nix::net::if_::if_nametoindex(interface).expect("interface");
        // SAFETY: sockaddr_ll is plain integers and bytes; all zero is valid.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = index as i32;
        addr.sll_halen = 6;
        RawSender { fd, addr }
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: `frame` and `addr` are live for the call and the lengths say how long they are.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&raw const self.addr).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        assert_eq!(
            r,
            frame.len() as isize,
            "sendto: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[test]
fn fanout_spreads_flows_over_two_workers_each_frame_exactly_once() {
    if !system_ready("fanout_spreads_flows_over_two_workers_each_frame_exactly_once") {
        return;
    }
    const FRAMES: u64 = 20_000;
    /// Frames the sender lets be in flight. Fewer than a queue's 128 receive blocks: even if a
    /// worker is descheduled while the kernel hands over a block per frame (one per timeout),
    /// its ring cannot fill, so any loss or duplicate is the port's doing.
    const WINDOW: u64 = 96;
    let ns = Netns::new();
    let v = Veth::new(&ns, "");
    let port =
        Arc::new(AfPacketPort::open(&AfPacketConfig::new(&v.root, 2)).expect("AF_PACKET port"));
    let seen: Arc<Vec<AtomicU64>> = Arc::new(
        (0..FRAMES.div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect(),
    );
    let (duplicates, foreign) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (p, s, d, f) = (
        port.clone(),
        seen.clone(),
        duplicates.clone(),
        foreign.clone(),
    );
    let dp = Dataplane::start(
        &WorkerConfig {
            cores: vec![0, 1],
            idle: TEST_IDLE,
        },
        pool(),
        (),
        move |init| {
            let q = p.queue_pair(init.index).map_err(|e| e.to_string())?;
            let mut b = GraphBuilder::new();
            b.add(PortInput::new("afp-rx", "seen-once", 0, q.rx));
            b.add(SeenOnce {
                seen: s.clone(),
                duplicates: d.clone(),
                foreign: f.clone(),
            });
            b.build().map_err(|e| e.to_string())
        },
    )
    .expect("two workers");
    let distinct = || -> u64 {
        seen.iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as u64)
            .sum()
    };

    let src_mac = {
        let out = ns.sh("cat /sys/class/net/veth0/address");
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let bytes: Vec<u8> = text
            .split(':')
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
        <[u8; 6]>::try_from(bytes).unwrap()
    };
    let seen_by_sender = seen.clone();
    ns.run_in(move || {
        let sender = RawSender::new("veth0");
        let received = || -> u64 {
            seen_by_sender
                .iter()
                .map(|w| w.load(Ordering::Relaxed).count_ones() as u64)
                .sum()
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        for seq in 0..FRAMES {
            while received() + WINDOW <= seq {
                assert!(
                    Instant::now() < deadline,
                    "sent {seq}, received {}",
                    received()
                );
                std::thread::yield_now();
            }
            sender.send(&flow_frame(src_mac, seq));
        }
    });
    wait_until("every frame to arrive", Duration::from_secs(20), || {
        let n = distinct();
        if n == FRAMES {
            Ok(())
        } else {
            Err(format!("{n} of {FRAMES}, {:?}", port.stats().detail))
        }
    });
    let stats = port.stats();
    let q0 = detail(&*port, "rx-packets-q0");
    let q1 = detail(&*port, "rx-packets-q1");
    let foreign = foreign.load(Ordering::Relaxed);
    assert_eq!(
        duplicates.load(Ordering::Relaxed),
        0,
        "a frame reached two workers"
    );
    assert_eq!(
        q0 + q1,
        FRAMES + foreign,
        "queue counters add up to what was sent"
    );
    assert_eq!(stats.rx_packets, FRAMES + foreign);
    assert_eq!(stats.rx_dropped, 0, "{:?}", stats.detail);
    assert!(
        q0 > FRAMES / 10 && q1 > FRAMES / 10,
        "509 flows spread over both queues: {q0} + {q1}"
    );
    dp.stop();
}
