//! A hostile peer against Quiver's memif ports: while frames cross a cross-connect between two
//! memif ports, a raw peer (a seqpacket socket and a memfd, saying exactly what the test tells
//! it) attacks a third port on the same listening socket. Each malformed case is refused or
//! disconnected with its reason, or counted and dropped with the slot released; nothing panics;
//! and the cross-connect loses, duplicates or reorders no frame throughout.

mod common;

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{add_port, forwarding, Quiver};
use drivers::memif_port::{MemifControl, MemifPort, MemifPortConfig};
use drivers::{LinkStatus, Port};
use memif::msg::{AddRegion, AddRing, FixedStr, Init, Msg, RING_FLAG_S2M, VERSION};
use memif::region::Region;
use memif::ring::{ring_stride, Desc, Ring, DESC_FLAG_NEXT};
use memif::socket::{ControlSocket, Received};
use memif::{InterfaceConfig, Role, Slave, SocketAddress};
use nix::sys::eventfd::EventFd;

const VICTIM: u32 = 1;
const SECRET: &str = "sesame";
const LOG2: u8 = 4;
const BUF_BASE: u64 = 64 * 1024;
const REGION_SIZE: usize = 1 << 20;

fn wait_for(what: &str, mut step: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !step() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// The next message the master sends the raw peer.
fn recv(sock: &ControlSocket) -> Received {
    let mut out = None;
    wait_for("a message from Quiver", || match sock.recv().unwrap() {
        Received::WouldBlock => false,
        r => {
            out = Some(r);
            true
        }
    });
    out.unwrap()
}

fn expect_ack(sock: &ControlSocket) {
    match recv(sock) {
        Received::Msg(Msg::Ack, _) => {}
        r => panic!("expected ACK, got {r:?}"),
    }
}

/// A raw connection that got its HELLO.
fn connect_raw(addr: &SocketAddress) -> ControlSocket {
    let s = ControlSocket::connect(addr).unwrap();
    assert!(matches!(recv(&s), Received::Msg(Msg::Hello(_), None)));
    s
}

fn init(secret: &str) -> Msg {
    Msg::Init(Init {
        version: VERSION,
        id: VICTIM,
        mode: 0,
        secret: FixedStr::new(secret),
        name: FixedStr::new("hostile"),
    })
}

fn add_ring(s2m: bool, offset: u32, log2: u8) -> Msg {
    Msg::AddRing(AddRing {
        flags: if s2m { RING_FLAG_S2M } else { 0 },
        index: 0,
        region: 0,
        offset,
        log2_ring_size: log2,
        private_hdr_size: 0,
    })
}

/// Quiver refuses: DISCONNECT with `reason`, the socket closed, and the victim port down with
/// that reason.
fn expect_refusal(sock: &ControlSocket, port: &MemifPort, reason: &str) {
    match recv(sock) {
        Received::Msg(Msg::Disconnect(d), _) => {
            let r = d.reason.to_string_lossy();
            assert!(r.contains(reason), "reason {r:?} lacks {reason:?}");
        }
        r => panic!("expected DISCONNECT ({reason}), got {r:?}"),
    }
    assert!(matches!(recv(sock), Received::Closed));
    wait_for(
        "the victim's link reason",
        || matches!(port.link(), LinkStatus::Down(r) if r.contains(reason) || r.contains("not connected")),
    );
}

/// The cross-connect's traffic: frames from `a` to `b`, each checked, until told to stop.
struct Traffic {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

fn frame(seq: u64) -> Vec<u8> {
    let len = 60 + (seq as usize * 11) % 900;
    let mut f: Vec<u8> = (0..len).map(|i| (i as u64 ^ seq) as u8).collect();
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[14..22].copy_from_slice(&seq.to_be_bytes());
    f
}

impl Traffic {
    fn start(mut a: Slave, mut b: Slave) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut sent, mut next) = (0u64, 0u64);
            let mut stopping_since: Option<Instant> = None;
            loop {
                a.poll().unwrap();
                b.poll().unwrap();
                if flag.load(Ordering::Relaxed) {
                    let since = *stopping_since.get_or_insert_with(Instant::now);
                    if next == sent || since.elapsed() > Duration::from_secs(20) {
                        break;
                    }
                } else if sent - next < 128 {
                    let f = frame(sent);
                    sent += a.interface_mut().tx_burst(0, &[&f[..]]) as u64;
                }
                b.interface_mut().rx_burst(0, 64, &mut |got: &[u8]| {
                    let seq = u64::from_be_bytes(got[14..22].try_into().unwrap());
                    assert_eq!(
                        seq, next,
                        "cross-connect lost, duplicated or reordered a frame"
                    );
                    assert_eq!(got, &frame(seq)[..], "frame {seq} corrupted");
                    next += 1;
                });
            }
            assert_eq!(next, sent, "frames still missing after the attacks");
            assert!(a.interface().is_up() && b.interface().is_up());
            next
        });
        Traffic { stop, thread }
    }

    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the cross-connect's traffic")
    }
}

#[test]
fn a_hostile_peer_is_refused_or_counted_while_the_cross_connect_keeps_forwarding() {
    let addr = SocketAddress::Path(
        std::env::temp_dir().join(format!("quiver-drv-{}-hostile.sock", std::process::id())),
    );
    let control = MemifControl::start(1).unwrap();
    let mut victim_cfg = MemifPortConfig::new("victim", Role::Master, addr.clone(), VICTIM);
    victim_cfg.secret = Some(SECRET.into());
    let victim = control.add_port(victim_cfg).unwrap();
    let a = control
        .add_port(MemifPortConfig::new("a", Role::Master, addr.clone(), 2))
        .unwrap();
    let b = control
        .add_port(MemifPortConfig::new("b", Role::Master, addr.clone(), 3))
        .unwrap();
    let mut fwd = forwarding();
    let ports = [
        add_port(&mut fwd, victim.clone(), 1500),
        add_port(&mut fwd, a.clone(), 1500),
        add_port(&mut fwd, b.clone(), 1500),
    ];
    fwd.cross_connect(ports[1].1, ports[2].1).unwrap();
    fwd.cross_connect(ports[2].1, ports[1].1).unwrap();
    let quiver = Quiver::start(fwd, &ports, &[1 % common_cores()]);

    let mut sa = Slave::new(addr.clone(), InterfaceConfig::new(2)).unwrap();
    let mut sb = Slave::new(addr.clone(), InterfaceConfig::new(3)).unwrap();
    wait_for("the cross-connect's links", || {
        sa.poll().unwrap();
        sb.poll().unwrap();
        sa.interface().is_up()
            && sb.interface().is_up()
            && a.link() == LinkStatus::Up
            && b.link() == LinkStatus::Up
    });
    let traffic = Traffic::start(sa, sb);

    // Handshakes Quiver must refuse, each with its reason.
    let s = connect_raw(&addr);
    s.send(&init("open sesame"), None).unwrap();
    expect_refusal(&s, &victim, "incorrect secret");

    let s = connect_raw(&addr);
    s.send_raw(&init(SECRET).encode()[..100], None).unwrap();
    expect_refusal(&s, &victim, "invalid message");

    let s = connect_raw(&addr);
    s.send(&init(SECRET), None).unwrap();
    expect_ack(&s);
    let short = Region::create("short", 4096).unwrap();
    let declared = Msg::AddRegion(AddRegion {
        index: 0,
        size: 1 << 20,
    });
    s.send(&declared, Some(short.fd())).unwrap();
    expect_refusal(&s, &victim, "declared");

    let s = connect_raw(&addr);
    s.send(&init(SECRET), None).unwrap();
    expect_ack(&s);
    let region = Region::create("hostile", REGION_SIZE).unwrap();
    let whole = Msg::AddRegion(AddRegion {
        index: 0,
        size: REGION_SIZE as u64,
    });
    s.send(&whole, Some(region.fd())).unwrap();
    expect_ack(&s);
    let efd = EventFd::new().unwrap();
    s.send(&add_ring(true, 0, 15), Some(efd.as_fd())).unwrap();
    expect_refusal(&s, &victim, "too large");

    // A peer that completes the handshake, then publishes bad descriptors: each is counted and
    // dropped, its slot released; a good frame after them still arrives; the link stays up.
    let s = connect_raw(&addr);
    let region = Region::create("hostile", REGION_SIZE).unwrap();
    let s2m = Ring::new(&region, 0, LOG2).unwrap();
    let m2s = Ring::new(&region, ring_stride(LOG2), LOG2).unwrap();
    s2m.at(&region).init();
    m2s.at(&region).init();
    let efds = [EventFd::new().unwrap(), EventFd::new().unwrap()];
    s.send(&init(SECRET), None).unwrap();
    expect_ack(&s);
    s.send(&whole, Some(region.fd())).unwrap();
    expect_ack(&s);
    s.send(&add_ring(true, 0, LOG2), Some(efds[0].as_fd()))
        .unwrap();
    expect_ack(&s);
    let m2s_at = ring_stride(LOG2) as u32;
    s.send(&add_ring(false, m2s_at, LOG2), Some(efds[1].as_fd()))
        .unwrap();
    expect_ack(&s);
    s.send(&Msg::Connect(FixedStr::new("hostile")), None)
        .unwrap();
    assert!(matches!(recv(&s), Received::Msg(Msg::Connected(_), _)));
    wait_for("the victim's link", || victim.link() == LinkStatus::Up);

    let good = frame(1 << 40);
    assert!(region.copy_in(BUF_BASE, &good));
    let desc = |region_index: u16, offset: u32, length: u32, flags: u16| Desc {
        flags,
        region: region_index,
        length,
        offset,
        metadata: 0,
    };
    let ring = s2m.at(&region);
    let published = [
        desc(7, BUF_BASE as u32, 64, 0),                // no such region
        desc(0, u32::MAX - 8, 64, 0),                   // offset + length overflows u32
        desc(0, BUF_BASE as u32, 0, 0),                 // zero length
        desc(0, BUF_BASE as u32, 4096, 0),              // longer than a buffer
        desc(0, (REGION_SIZE - 32) as u32, 64, 0),      // runs past the region's end
        desc(0, BUF_BASE as u32, good.len() as u32, 0), // good
        desc(0, BUF_BASE as u32, 64, DESC_FLAG_NEXT),   // NEXT past the last published slot
    ];
    for (i, d) in published.iter().enumerate() {
        ring.write_desc(i as u16, *d);
    }
    ring.head().store(published.len() as u16, Ordering::Release);
    wait_for("the victim to consume every slot", || {
        ring.tail().load(Ordering::Acquire) == published.len() as u16
    });
    wait_for("bad descriptors counted", || {
        let c = victim.memif_counters();
        (
            c.bad_desc_region,
            c.bad_desc_offset,
            c.bad_desc_zero_length,
            c.bad_desc_too_long,
            c.bad_desc_chain,
        ) == (1, 2, 1, 1, 1)
    });
    let st = victim.stats();
    assert_eq!((st.rx_packets, st.rx_bytes), (1, good.len() as u64));
    assert_eq!(victim.link(), LinkStatus::Up);

    // The peer vanishing without a word takes the link down with a reason, too.
    drop(s);
    wait_for("the victim down", || {
        matches!(victim.link(), LinkStatus::Down(_))
    });

    // The cross-connect never lost its links, saw no bad descriptor, and every frame sent
    // arrived once, in order, intact.
    for p in [&a, &b] {
        let c = p.memif_counters();
        assert_eq!(c.bad_desc_region + c.bad_desc_offset + c.bad_desc_chain, 0);
        assert_eq!(
            (c.connects, c.disconnects),
            (1, 0),
            "{} lost its link",
            p.name()
        );
    }
    let crossed = traffic.finish();
    assert!(crossed > 0);
    drop(quiver);
}

fn common_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
