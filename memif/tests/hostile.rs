//! Hostile peers built from a raw seqpacket socket and a memfd: every bad input is refused with a
//! reason or counted and dropped, nothing panics, and another interface on the same master socket
//! keeps passing traffic.

mod common;

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;

use common::{frame, sock_addr, wait_for};
use memif::msg::{AddRegion, AddRing, FixedStr, Init, Msg, RING_FLAG_S2M, VERSION};
use memif::queue::{Hold, HoldSink, Taken};
use memif::region::Region;
use memif::ring::{ring_stride, Desc, Ring, DESC_FLAG_NEXT};
use memif::socket::{ControlSocket, Received};
use memif::{
    HeldRx, InterfaceConfig, LinkState, Master, MasterConfig, Mode, PeerFrame, Slave,
    SocketAddress, TxSource,
};
use nix::sys::eventfd::EventFd;

const LOG2: u8 = 4;
const N: u16 = 16;
const BUF_BASE: u64 = 64 * 1024;
const BSIZE: u64 = 2048;
const REGION_SIZE: usize = 1 << 20;

/// A master with a good interface (id 2, a real slave attached) plus `cfg`.
struct Setup {
    m: Master,
    good: Slave,
    addr: SocketAddress,
}

impl Setup {
    fn new(test: &str, cfg: InterfaceConfig) -> Setup {
        let addr = sock_addr(test);
        let mut m = Master::bind(addr.clone(), MasterConfig::default()).unwrap();
        m.add_interface(cfg).unwrap();
        m.add_interface(InterfaceConfig::new(2)).unwrap();
        let mut good = Slave::new(addr.clone(), InterfaceConfig::new(2)).unwrap();
        wait_for("good link up", 10, || {
            m.poll().unwrap();
            good.poll().unwrap();
            good.interface().is_up() && m.interface(2).unwrap().is_up()
        });
        Setup { m, good, addr }
    }

    /// The good interface still passes frames both ways.
    fn check_good(&mut self) {
        let f = frame(77, 300);
        let mut n = 0;
        wait_for("good traffic", 10, || {
            self.m.poll().unwrap();
            self.good.poll().unwrap();
            if n == 0 {
                n += self.good.interface_mut().tx_burst(0, &[&f]);
                n += self.m.interface_mut(2).unwrap().tx_burst(0, &[&f]);
            }
            let mut got = 0;
            self.m
                .interface_mut(2)
                .unwrap()
                .rx_burst(0, 8, &mut |p: &[u8]| got += usize::from(p == &f[..]));
            self.good
                .interface_mut()
                .rx_burst(0, 8, &mut |p: &[u8]| got += usize::from(p == &f[..]));
            n -= got.min(n);
            n == 0 && self.good.interface().is_up()
        });
        assert!(self.m.interface(2).unwrap().is_up());
        assert_eq!(self.m.interface(2).unwrap().bad_descriptors(), 0);
    }

    /// Poll the master until the raw peer receives a message; return it.
    fn recv(&mut self, sock: &ControlSocket) -> Received {
        recv_polling(sock, "message from master", || self.m.poll().unwrap())
    }

    fn expect_ack(&mut self, sock: &ControlSocket) {
        match self.recv(sock) {
            Received::Msg(Msg::Ack, _) => {}
            r => panic!("expected ACK, got {r:?}"),
        }
    }

    /// The raw peer sends `msg` (with `fd`), which the master must acknowledge.
    fn send_acked(&mut self, sock: &ControlSocket, msg: &Msg, fd: Option<BorrowedFd>) {
        sock.send(msg, fd).unwrap();
        self.expect_ack(sock);
    }

    /// Expect a DISCONNECT whose reason contains `reason`, then the socket closing.
    fn expect_disconnect(&mut self, sock: &ControlSocket, reason: &str) {
        match self.recv(sock) {
            Received::Msg(Msg::Disconnect(d), _) => {
                let r = d.reason.to_string_lossy();
                assert!(r.contains(reason), "reason {r:?} lacks {reason:?}");
            }
            r => panic!("expected DISCONNECT, got {r:?}"),
        }
        assert!(matches!(self.recv(sock), Received::Closed));
    }

    fn connect_raw(&mut self) -> ControlSocket {
        let s = ControlSocket::connect(&self.addr).unwrap();
        match self.recv(&s) {
            Received::Msg(Msg::Hello(h), None) => {
                assert_eq!((h.min_version, h.max_version), (VERSION, VERSION));
                assert_eq!(h.max_log2_ring_size, 14);
            }
            r => panic!("expected HELLO, got {r:?}"),
        }
        s
    }
}

/// Calls `poll` until `sock` receives something (`what`, with a deadline); returns it.
fn recv_polling(sock: &ControlSocket, what: &str, mut poll: impl FnMut()) -> Received {
    let mut out = None;
    wait_for(what, 10, || {
        poll();
        match sock.recv().unwrap() {
            Received::WouldBlock => false,
            r => {
                out = Some(r);
                true
            }
        }
    });
    out.unwrap()
}

fn init(id: u32, secret: &str) -> Msg {
    Msg::Init(Init {
        version: VERSION,
        id,
        mode: 0,
        secret: FixedStr::new(secret),
        name: FixedStr::new("raw"),
    })
}

fn add_ring(s2m: bool, index: u16, offset: u32, log2: u8) -> Msg {
    Msg::AddRing(AddRing {
        flags: if s2m { RING_FLAG_S2M } else { 0 },
        index,
        region: 0,
        offset,
        log2_ring_size: log2,
        private_hdr_size: 0,
    })
}

fn region_msg(index: u16, size: u64) -> Msg {
    Msg::AddRegion(AddRegion { index, size })
}

/// A raw slave that completed the handshake for interface `id`.
struct RawSlave {
    sock: ControlSocket,
    region: Region,
    s2m: Ring,
    _efds: Vec<EventFd>,
}

impl RawSlave {
    fn connect(st: &mut Setup, id: u32) -> RawSlave {
        let sock = st.connect_raw();
        let region = Region::create("raw", REGION_SIZE).unwrap();
        let s2m = Ring::new(&region, 0, LOG2).unwrap();
        let m2s = Ring::new(&region, ring_stride(LOG2), LOG2).unwrap();
        s2m.at(&region).init();
        m2s.at(&region).init();
        let efds = vec![EventFd::new().unwrap(), EventFd::new().unwrap()];
        st.send_acked(&sock, &init(id, ""), None);
        let ar = region_msg(0, REGION_SIZE as u64);
        st.send_acked(&sock, &ar, Some(region.fd()));
        let s2m_ring = add_ring(true, 0, 0, LOG2);
        st.send_acked(&sock, &s2m_ring, Some(efds[0].as_fd()));
        let m2s_ring = add_ring(false, 0, ring_stride(LOG2) as u32, LOG2);
        st.send_acked(&sock, &m2s_ring, Some(efds[1].as_fd()));
        sock.send(&Msg::Connect(FixedStr::new("raw")), None)
            .unwrap();
        match st.recv(&sock) {
            Received::Msg(Msg::Connected(_), _) => {}
            r => panic!("expected CONNECTED, got {r:?}"),
        }
        assert!(st.m.interface(id).unwrap().is_up());
        RawSlave {
            sock,
            region,
            s2m,
            _efds: efds,
        }
    }

    /// Publish descriptors on S2M ring 0 (head advanced by `descs.len()` + `extra_head`).
    fn publish(&self, descs: &[Desc], extra_head: u16) {
        let r = self.s2m.at(&self.region);
        let mut h = r.head().load(Ordering::Relaxed);
        for d in descs {
            r.write_desc(h, *d);
            h = h.wrapping_add(1);
        }
        r.head()
            .store(h.wrapping_add(extra_head), Ordering::Release);
    }

    fn good_desc(&self, slot: u64, payload: &[u8]) -> Desc {
        let off = BUF_BASE + slot * BSIZE;
        assert!(self.region.copy_in(off, payload));
        Desc {
            flags: 0,
            region: 0,
            length: payload.len() as u32,
            offset: off as u32,
            metadata: 0,
        }
    }
}

fn bad_descriptor_case(
    test: &str,
    make: impl Fn(&RawSlave) -> Vec<Desc>,
    check: impl Fn(&memif::Counters),
) {
    let mut st = Setup::new(test, InterfaceConfig::new(1));
    let raw = RawSlave::connect(&mut st, 1);
    let descs = make(&raw);
    raw.publish(&descs, 0);
    let mut got = Vec::new();
    let mi = st.m.interface_mut(1).unwrap();
    mi.rx_burst(0, 64, &mut |p: &[u8]| got.push(p.to_vec()));
    check(&mi.counters());
    assert!(got.is_empty(), "bad frames delivered: {}", got.len());
    // Every slot was released to the slave.
    let r = raw.s2m.at(&raw.region);
    assert_eq!(
        r.tail().load(Ordering::Acquire),
        r.head().load(Ordering::Acquire)
    );
    // The bad interface stays up; a good frame after the bad ones still passes.
    let f = frame(1, 200);
    let d = raw.good_desc(0, &f);
    raw.publish(&[d], 0);
    let mi = st.m.interface_mut(1).unwrap();
    mi.rx_burst(0, 64, &mut |p: &[u8]| got.push(p.to_vec()));
    assert_eq!(got, vec![f]);
    assert!(st.m.interface(1).unwrap().is_up());
    st.check_good();
    drop(raw.sock);
}

/// [`bad_descriptor_case`] for one descriptor, a good 64-byte frame's changed by `edit`: the
/// master's counter `counter` must count it once.
fn one_bad_descriptor(
    test: &str,
    edit: impl Fn(&mut Desc),
    counter: impl Fn(&memif::Counters) -> u64,
) {
    bad_descriptor_case(
        test,
        |raw| {
            let mut d = raw.good_desc(1, &[1; 64]);
            edit(&mut d);
            vec![d]
        },
        |c| assert_eq!(counter(c), 1),
    );
}

#[test]
fn bad_region_index_is_counted_and_dropped() {
    one_bad_descriptor("bad_region", |d| d.region = 1, |c| c.bad_desc_region);
}

#[test]
fn u32_overflowing_offset_plus_length_is_dropped() {
    bad_descriptor_case(
        "overflow",
        |_| {
            let d = Desc {
                flags: 0,
                region: 0,
                length: 0x200,
                offset: 0xFFFF_FF00,
                metadata: 0,
            };
            let d2 = Desc {
                offset: (REGION_SIZE - 100) as u32,
                length: 200,
                ..d
            };
            vec![d, d2]
        },
        |c| assert_eq!(c.bad_desc_offset, 2),
    );
}

#[test]
fn zero_length_is_dropped() {
    one_bad_descriptor("zero_len", |d| d.length = 0, |c| c.bad_desc_zero_length);
}

#[test]
fn length_above_buffer_size_is_dropped() {
    one_bad_descriptor("too_long", |d| d.length = 4000, |c| c.bad_desc_too_long);
}

#[test]
fn next_on_the_last_slot_is_dropped() {
    bad_descriptor_case(
        "next_last",
        |raw| {
            let a = raw.good_desc(1, &[1; 64]);
            let mut b = raw.good_desc(2, &[2; 64]);
            b.flags = DESC_FLAG_NEXT;
            let mut c = raw.good_desc(3, &[3; 64]);
            c.flags = DESC_FLAG_NEXT;
            vec![
                Desc {
                    flags: DESC_FLAG_NEXT,
                    ..a
                },
                b,
                c,
            ]
        },
        |c| assert_eq!(c.bad_desc_chain, 1),
    );
}

#[test]
fn head_advanced_beyond_ring_size_is_clamped() {
    let mut st = Setup::new("head_overrun", InterfaceConfig::new(1));
    let raw = RawSlave::connect(&mut st, 1);
    let f = frame(3, 100);
    let descs: Vec<Desc> = (0..N).map(|s| raw.good_desc(u64::from(s), &f)).collect();
    // Claims 16 + 1000 descriptors on a 16-slot ring.
    raw.publish(&descs, 1000);
    let mut got = 0;
    let mi = st.m.interface_mut(1).unwrap();
    mi.rx_burst(0, 1000, &mut |p: &[u8]| got += usize::from(p == &f[..]));
    assert_eq!(got, 16, "only one ring's worth is consumed");
    assert_eq!(mi.counters().ring_index_overrun, 1);
    assert_eq!(raw.s2m.at(&raw.region).tail().load(Ordering::Acquire), N);
    st.check_good();
}

/// Run a raw handshake script; the master must refuse with `reason`, mark interface 1 down (if it
/// got past INIT), and keep the good interface working.
fn refused(
    test: &str,
    cfg: InterfaceConfig,
    reason: &str,
    script: impl FnOnce(&mut Setup, &ControlSocket),
) {
    let mut st = Setup::new(test, cfg);
    let sock = st.connect_raw();
    script(&mut st, &sock);
    st.expect_disconnect(&sock, reason);
    if let LinkState::Down(r) = st.m.interface(1).unwrap().link() {
        assert!(r == "not connected" || r.contains(reason), "{r}");
    } else {
        panic!("interface 1 is up");
    }
    st.check_good();
    // The refused interface can still connect properly afterwards.
    if reason != "already connected" {
        let cfg = st.m.interface(1).unwrap().config().clone();
        let mut s = Slave::new(st.addr.clone(), cfg).unwrap();
        wait_for("interface 1 up after refusal", 10, || {
            st.m.poll().unwrap();
            s.poll().unwrap();
            s.interface().is_up()
        });
    }
}

/// [`refused`] for interface 1 as configured by default, after the raw peer sends `msg`.
fn refused_msg(test: &str, reason: &str, msg: Msg) {
    refused(test, InterfaceConfig::new(1), reason, move |_, s| {
        s.send(&msg, None).unwrap();
    });
}

/// [`refused`] for interface 1 as configured by default, once its INIT was acknowledged.
fn refused_after_init(test: &str, reason: &str, then: impl FnOnce(&mut Setup, &ControlSocket)) {
    refused(test, InterfaceConfig::new(1), reason, |st, s| {
        st.send_acked(s, &init(1, ""), None);
        then(st, s);
    });
}

/// [`refused_after_init`], once a 64 KiB region was acknowledged too.
fn refused_after_region(test: &str, reason: &str, then: impl FnOnce(&mut Setup, &ControlSocket)) {
    refused_after_init(test, reason, |st, s| {
        let r = Region::create("raw", 64 * 1024).unwrap();
        st.send_acked(s, &region_msg(0, 64 * 1024), Some(r.fd()));
        then(st, s);
    });
}

#[test]
fn wrong_version_is_refused() {
    let mut m = init(1, "");
    if let Msg::Init(i) = &mut m {
        i.version = 0x0100;
    }
    refused_msg("bad_version", "incompatible version", m);
}

#[test]
fn wrong_and_missing_secret_are_refused() {
    let mut cfg = InterfaceConfig::new(1);
    cfg.secret = Some("sesame".into());
    refused("bad_secret", cfg.clone(), "incorrect secret", |_, s| {
        s.send(&init(1, "sesamf"), None).unwrap();
    });
    refused("no_secret", cfg, "secret required", |_, s| {
        s.send(&init(1, ""), None).unwrap();
    });
}

#[test]
fn unknown_id_and_mode_mismatch_are_refused() {
    refused_msg("unknown_id", "unknown interface id", init(99, ""));
    let mut cfg = InterfaceConfig::new(1);
    cfg.mode = Mode::Ip;
    refused("mode", cfg, "mode mismatch", |_, s| {
        s.send(&init(1, ""), None).unwrap();
    });
}

#[test]
fn already_connected_is_refused() {
    refused_msg("already", "already connected", init(2, ""));
}

#[test]
fn wrong_message_size_is_refused() {
    refused(
        "msg_size",
        InterfaceConfig::new(1),
        "invalid message",
        |_, s| {
            let b = init(1, "").encode();
            s.send_raw(&b[..100], None).unwrap();
        },
    );
    refused(
        "msg_size_big",
        InterfaceConfig::new(1),
        "invalid message",
        |_, s| {
            let mut b = init(1, "").encode().to_vec();
            b.resize(129, 0);
            s.send_raw(&b, None).unwrap();
        },
    );
}

#[test]
fn non_sequential_region_index_is_refused() {
    refused_after_init("region_seq", "non-sequential region index", |_, s| {
        let r = Region::create("raw", 4096).unwrap();
        s.send(&region_msg(1, 4096), Some(r.fd())).unwrap();
    });
}

#[test]
fn memfd_shorter_than_declared_is_refused() {
    refused_after_init("region_short", "declared", |_, s| {
        let r = Region::create("raw", 4096).unwrap();
        s.send(&region_msg(0, 1 << 20), Some(r.fd())).unwrap();
    });
}

#[test]
fn missing_region_fd_is_refused() {
    refused_after_init("region_nofd", "missing region fd", |_, s| {
        s.send(&region_msg(0, 4096), None).unwrap();
    });
}

fn ring_case(test: &str, reason: &str, ring: Msg) {
    refused_after_region(test, reason, move |_, s| {
        let e = EventFd::new().unwrap();
        s.send(&ring, Some(e.as_fd())).unwrap();
    });
}

#[test]
fn ring_outside_region_is_refused() {
    ring_case(
        "ring_out",
        "ring outside its region",
        add_ring(true, 0, 64 * 1024 - 256, 4),
    );
    ring_case(
        "ring_out_big",
        "ring outside its region",
        add_ring(true, 0, 0, 13),
    );
    ring_case(
        "ring_out_wrap",
        "ring outside its region",
        add_ring(true, 0, u32::MAX - 15, 4),
    );
}

#[test]
fn log2_above_14_is_refused() {
    ring_case("log2", "too large", add_ring(true, 0, 0, 15));
}

#[test]
fn non_sequential_ring_index_and_private_header_are_refused() {
    ring_case(
        "ring_seq",
        "non-sequential ring index",
        add_ring(true, 1, 0, 4),
    );
    let mut m = add_ring(false, 0, 0, 4);
    if let Msg::AddRing(r) = &mut m {
        r.private_hdr_size = 64;
    }
    ring_case("ring_priv", "private header", m);
}

#[test]
fn bad_cookie_is_refused_at_connect() {
    refused_after_region("cookie", "bad ring cookie", |st, s| {
        let e = EventFd::new().unwrap();
        st.send_acked(s, &add_ring(true, 0, 0, 4), Some(e.as_fd()));
        st.send_acked(s, &add_ring(false, 0, 1024, 4), Some(e.as_fd()));
        s.send(&Msg::Connect(FixedStr::new("raw")), None).unwrap();
    });
}

#[test]
fn messages_before_init_are_refused() {
    let connect = Msg::Connect(FixedStr::new("x"));
    refused_msg("before_init", "expected INIT", connect);
}

#[test]
fn slave_refuses_a_hello_with_the_wrong_version() {
    let addr = sock_addr("slave_hello");
    let SocketAddress::Path(p) = &addr else {
        unreachable!()
    };
    let _ = std::fs::remove_file(p);
    let l = ControlSocket::listen(&addr).unwrap();
    let mut s = Slave::new(addr.clone(), InterfaceConfig::new(0)).unwrap();
    s.poll().unwrap();
    assert!(l.wait_readable(5000).unwrap());
    let c = l.accept().unwrap().unwrap();
    let h = memif::msg::Hello {
        min_version: 0x0100,
        max_version: 0x0100,
        ..Default::default()
    };
    c.send(&Msg::Hello(h), None).unwrap();
    wait_for("slave refuses", 10, || {
        s.poll().unwrap();
        matches!(s.interface().link(), LinkState::Down(r) if r.contains("incompatible version"))
    });
    assert!(c.wait_readable(5000).unwrap());
    match c.recv().unwrap() {
        Received::Msg(Msg::Disconnect(d), _) => {
            assert!(d.reason.to_string_lossy().contains("incompatible version"))
        }
        r => panic!("{r:?}"),
    }
    let _ = std::fs::remove_file(p);
}

#[test]
fn unsealed_region_memfd_is_refused() {
    refused_after_init("unsealed", "not sealed", |_, s| {
        let fd = nix::sys::memfd::memfd_create(c"raw", nix::sys::memfd::MFdFlags::empty()).unwrap();
        nix::unistd::ftruncate(&fd, 65536).unwrap();
        s.send(&region_msg(0, 65536), Some(fd.as_fd())).unwrap();
    });
}

/// A raw master that completed the handshake with our slave; returns the mapped region and the
/// M2S ring.
struct RawMaster {
    _listener: ControlSocket,
    path: std::path::PathBuf,
    _sock: ControlSocket,
    region: Region,
    m2s: Ring,
}

fn raw_master(test: &str, slave_cfg: InterfaceConfig) -> (RawMaster, Slave) {
    let addr = sock_addr(test);
    let listener = ControlSocket::listen(&addr).unwrap();
    let mut s = Slave::new(addr, slave_cfg).unwrap();
    s.poll().unwrap();
    assert!(listener.wait_readable(5000).unwrap());
    let sock = listener.accept().unwrap().unwrap();
    let hello = memif::msg::Hello {
        name: FixedStr::new("raw-master"),
        min_version: VERSION,
        max_version: VERSION,
        max_region: 0,
        max_m2s_ring: 0,
        max_s2m_ring: 0,
        max_log2_ring_size: LOG2,
    };
    sock.send(&Msg::Hello(hello), None).unwrap();
    let mut region = None;
    let mut m2s = None;
    loop {
        match recv_polling(&sock, "slave message", || s.poll().unwrap()) {
            Received::Msg(Msg::Init(i), _) => assert_eq!(i.version, VERSION),
            Received::Msg(Msg::AddRegion(ar), Some(fd)) => {
                region = Some(Region::from_peer_sealed(fd, ar.size).unwrap());
            }
            Received::Msg(Msg::AddRing(ar), Some(_fd)) => {
                assert_eq!(ar.log2_ring_size, LOG2);
                if ar.flags & RING_FLAG_S2M == 0 {
                    let r = region.as_ref().unwrap();
                    m2s = Some(Ring::new(r, u64::from(ar.offset), ar.log2_ring_size).unwrap());
                }
            }
            Received::Msg(Msg::Connect(_), _) => {
                sock.send(&Msg::Connected(FixedStr::new("raw")), None)
                    .unwrap();
                break;
            }
            r => panic!("unexpected {r:?}"),
        }
        sock.send(&Msg::Ack, None).unwrap();
    }
    wait_for("slave up", 10, || {
        s.poll().unwrap();
        s.interface().is_up()
    });
    (
        RawMaster {
            _listener: listener,
            path: common::sock_path(test),
            _sock: sock,
            region: region.unwrap(),
            m2s: m2s.unwrap(),
        },
        s,
    )
}

impl Drop for RawMaster {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn slave_drops_bad_descriptors_from_a_hostile_master() {
    let (rm, mut s) = raw_master("hostile_master", InterfaceConfig::new(0));
    let r = rm.m2s.at(&rm.region);
    // The slave posted all 16 buffers.
    assert_eq!(r.head().load(Ordering::Acquire), N);
    let set = |idx: u16, flags: u16, len: u32| {
        let mut d = r.read_desc(idx);
        d.flags = flags;
        d.length = len;
        // A hostile master may also rewrite region/offset: the slave must not follow them.
        d.region = 7;
        d.offset = u32::MAX - 10;
        r.write_desc(idx, d);
    };
    set(0, 0, 0); // zero length
    set(1, 0, 4000); // longer than the 2048-byte buffer
    set(2, 0, 100); // good
    set(3, DESC_FLAG_NEXT, 100); // NEXT on the last published slot
    r.tail().store(4, Ordering::Release);
    let mut got = Vec::new();
    s.interface_mut()
        .rx_burst(0, 64, &mut |p: &[u8]| got.push(p.len()));
    assert_eq!(got, vec![100]);
    let c = s.interface().counters();
    assert_eq!(
        (
            c.bad_desc_zero_length,
            c.bad_desc_too_long,
            c.bad_desc_chain
        ),
        (1, 1, 1)
    );
    // All four slots were reposted.
    assert_eq!(r.head().load(Ordering::Acquire), 4 + N);
    // Tail far beyond what was posted: clamped to the posted buffers and counted.
    for i in 4..(4 + N) {
        set(i, 0, 64);
    }
    r.tail().store(4 + 1000, Ordering::Release);
    let mut n = 0;
    s.interface_mut().rx_burst(0, 1000, &mut |_p: &[u8]| n += 1);
    assert_eq!(n, usize::from(N));
    assert_eq!(s.interface().counters().ring_index_overrun, 1);
    assert!(s.interface().is_up());
    drop(rm);
    wait_for("slave notices the master left", 10, || {
        s.poll().unwrap();
        !s.interface().is_up()
    });
}

#[test]
fn slave_with_wrong_secret_learns_the_reason() {
    let addr = sock_addr("slave_secret");
    let mut m = Master::bind(addr.clone(), MasterConfig::default()).unwrap();
    let mut cfg = InterfaceConfig::new(3);
    cfg.secret = Some("right".into());
    m.add_interface(cfg.clone()).unwrap();
    cfg.secret = Some("wrong".into());
    let mut s = Slave::new(addr, cfg).unwrap();
    wait_for("slave refused", 10, || {
        m.poll().unwrap();
        s.poll().unwrap();
        matches!(s.interface().link(), LinkState::Down(r) if r.contains("incorrect secret"))
    });
    assert!(!m.interface(3).unwrap().is_up());
}

/// Frames held in the peer's memory, sent from there (as a memif cross-connect sends them).
struct HeldSource<'a> {
    held: &'a memif::queue::HeldFrames,
    frames: &'a [(u32, usize)],
}

impl TxSource for HeldSource<'_> {
    fn frames(&self) -> usize {
        self.frames.len()
    }
    fn frame_len(&self, i: usize) -> usize {
        self.frames[i].1
    }
    fn bytes_at(&self, _i: usize, _offset: usize) -> &[u8] {
        panic!("a held frame must be copied from where it is held")
    }
    fn held(&self, i: usize) -> Option<(&memif::queue::HeldFrames, u32, usize)> {
        Some((self.held, self.frames[i].0, 0))
    }
}

/// Holds the one frame it is offered a hold for.
struct HoldOne(Option<(u32, usize)>);

impl HoldSink for HoldOne {
    fn take(&mut self, frame: &PeerFrame<'_>, hold: Option<Hold>) -> Taken {
        match (hold, self.0) {
            (Some(h), None) => {
                self.0 = Some((h.token(), frame.len()));
                Taken::Held
            }
            _ => Taken::NoRoom,
        }
    }
}

#[test]
fn descriptors_rewritten_after_they_were_received_are_not_followed() {
    let mut st = Setup::new("rewritten", InterfaceConfig::new(1));
    let raw = RawSlave::connect(&mut st, 1);
    let queues = st.m.interface_mut(1).unwrap().detach_queues().unwrap();
    let (mut rx, mut tx) = (
        queues.rx.into_iter().next().unwrap(),
        queues.tx.into_iter().next().unwrap(),
    );
    let held = rx.enable_holding();
    let (a, b) = (frame(1, 64), frame(2, 200));
    raw.publish(&[raw.good_desc(1, &a), raw.good_desc(2, &b)], 0);
    // Frame a taken by the fast path, frame b by the general one: both kept as checked.
    let mut fast = [HeldRx::default(); 1];
    assert_eq!(rx.receive_held(&mut fast, BSIZE as u32), 1);
    let mut general = HoldOne(None);
    assert_eq!(rx.receive_holding(8, &mut general), 1);
    let kept = [(fast[0].token, fast[0].len as usize), general.0.unwrap()];
    // The peer rewrites both descriptors: another region, an offset past the region's end,
    // the largest length, a chain.
    let s2m = raw.s2m.at(&raw.region);
    for slot in 0..2 {
        s2m.write_desc(
            slot,
            Desc {
                flags: DESC_FLAG_NEXT,
                region: 9,
                length: u32::MAX,
                offset: 0xFFFF_FF00,
                metadata: 0,
            },
        );
    }
    assert_eq!(kept.map(|(t, _)| held.len(t)), [64, 200]);
    let mut copy = vec![0; 200];
    assert!(held.copy_out(kept[1].0, 0, &mut copy));
    assert_eq!(copy, b);
    // Sent on as a cross-connect sends them: copied from the ranges checked at receive.
    let m2s = Ring::new(&raw.region, ring_stride(LOG2), LOG2).unwrap();
    let posted = m2s.at(&raw.region);
    for slot in 0..2u16 {
        posted.write_desc(
            slot,
            Desc {
                flags: 0,
                region: 0,
                length: BSIZE as u32,
                offset: (BUF_BASE + (8 + u64::from(slot)) * BSIZE) as u32,
                metadata: 0,
            },
        );
    }
    posted.head().store(2, Ordering::Release);
    let report = tx.transmit_report(&HeldSource {
        held: &held,
        frames: &kept,
    });
    assert_eq!((report.taken, report.sent, report.held_copies), (2, 2, 2));
    assert_eq!(posted.tail().load(Ordering::Acquire), 2);
    for (slot, f) in [(0u16, &a), (1, &b)] {
        let d = posted.read_desc(slot);
        assert_eq!(d.length as usize, f.len());
        let mut got = vec![0; f.len()];
        assert!(raw.region.copy_out(u64::from(d.offset), &mut got));
        assert_eq!(&got, f, "slot {slot}: the frame as it was received");
    }
    // Released: both slots go back to the peer; nothing was counted bad.
    held.release_many(&kept.map(|(t, _)| t));
    rx.give_back();
    assert_eq!(s2m.tail().load(Ordering::Acquire), 2);
    let c = st.m.interface(1).unwrap().counters();
    assert_eq!((c.rx_packets, c.tx_packets), (2, 2));
    assert_eq!(st.m.interface(1).unwrap().bad_descriptors(), 0);
    assert_eq!(held.in_flight(), 0);
    st.check_good();
    drop(raw.sock);
}

/// The good interface's (id 2) queues, detached from the master, the receive one holding.
fn good_queues(st: &mut Setup) -> (memif::RxQueue, memif::TxQueue) {
    let q = st.m.interface_mut(2).unwrap().detach_queues().unwrap();
    let mut rx = q.rx.into_iter().next().unwrap();
    rx.enable_holding();
    (rx, q.tx.into_iter().next().unwrap())
}

#[test]
fn forwarding_from_a_hostile_peer_skips_its_bad_descriptors_and_passes_the_rest() {
    let mut st = Setup::new("fwd_from_raw", InterfaceConfig::new(1));
    let raw = RawSlave::connect(&mut st, 1);
    let q = st.m.interface_mut(1).unwrap().detach_queues().unwrap();
    let mut from_raw = q.rx.into_iter().next().unwrap();
    from_raw.enable_holding();
    let (_, mut to_good) = good_queues(&mut st);
    let good = [frame(1, 64), frame(2, 700), frame(3, 1500)];
    let mut bad_region = raw.good_desc(1, &[1; 64]);
    bad_region.region = 9;
    let mut past_the_end = raw.good_desc(3, &[1; 64]);
    past_the_end.offset = (REGION_SIZE - 10) as u32;
    raw.publish(
        &[
            raw.good_desc(0, &good[0]),
            bad_region,
            raw.good_desc(2, &good[1]),
            past_the_end,
            raw.good_desc(4, &good[2]),
        ],
        0,
    );
    let f = from_raw.forward_to(&mut to_good, 256);
    assert_eq!((f.received, f.sent, f.more), (3, 3, false));
    let mut got = Vec::new();
    wait_for("the good frames at the good peer", 10, || {
        st.good
            .interface_mut()
            .rx_burst(0, 16, &mut |p: &[u8]| got.push(p.to_vec()));
        got.len() >= 3
    });
    assert_eq!(got, good, "the good frames, in order, intact");
    let c = st.m.interface(1).unwrap().counters();
    assert_eq!((c.bad_desc_region, c.bad_desc_offset), (1, 1));
    // Every slot back with the raw peer, the bad ones too.
    let s2m = raw.s2m.at(&raw.region);
    assert_eq!(s2m.tail().load(Ordering::Acquire), 5);
    assert!(st.m.interface(1).unwrap().is_up());
}

#[test]
fn forwarding_into_bad_buffers_a_hostile_peer_posted_loses_only_those_frames() {
    let mut st = Setup::new("fwd_to_raw", InterfaceConfig::new(1));
    let raw = RawSlave::connect(&mut st, 1);
    let q = st.m.interface_mut(1).unwrap().detach_queues().unwrap();
    let mut to_raw = q.tx.into_iter().next().unwrap();
    let (mut from_good, _) = good_queues(&mut st);
    // The raw peer posts four buffers: good, past its region's end, good, in a region that
    // does not exist.
    let m2s = Ring::new(&raw.region, ring_stride(LOG2), LOG2).unwrap();
    let posted = m2s.at(&raw.region);
    let buffer = |slot: u64| Desc {
        flags: 0,
        region: 0,
        length: BSIZE as u32,
        offset: (BUF_BASE + (8 + slot) * BSIZE) as u32,
        metadata: 0,
    };
    let mut past_the_end = buffer(1);
    past_the_end.offset = (REGION_SIZE - 100) as u32;
    let mut no_region = buffer(3);
    no_region.region = 7;
    for (slot, d) in [buffer(0), past_the_end, buffer(2), no_region]
        .into_iter()
        .enumerate()
    {
        posted.write_desc(slot as u16, d);
    }
    posted.head().store(4, Ordering::Release);
    let frames = [frame(1, 64), frame(2, 300), frame(3, 64), frame(4, 90)];
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    assert_eq!(st.good.interface_mut().tx_burst(0, &refs), 4);
    let mut f = memif::Forwarded::default();
    wait_for("the frames forwarded", 10, || {
        let g = from_good.forward_to(&mut to_raw, 256);
        f.received += g.received;
        f.taken += g.taken;
        f.sent += g.sent;
        f.received == 4
    });
    assert_eq!((f.taken, f.sent), (4, 2), "two lost to the bad buffers");
    assert_eq!(
        posted.tail().load(Ordering::Acquire),
        4,
        "every buffer handed back"
    );
    for (slot, sent) in [
        (0u16, Some(&frames[0])),
        (1, None),
        (2, Some(&frames[2])),
        (3, None),
    ] {
        let d = posted.read_desc(slot);
        match sent {
            Some(f) => {
                assert_eq!(d.length as usize, f.len());
                let mut v = vec![0; f.len()];
                assert!(raw.region.copy_out(u64::from(d.offset), &mut v));
                assert_eq!(&v, f, "slot {slot}");
            }
            None => assert_eq!(d.length, 0, "a bad buffer goes back empty"),
        }
    }
    let c = st.m.interface(1).unwrap().counters();
    assert_eq!(
        (c.bad_desc_offset, c.bad_desc_region, c.tx_dropped),
        (1, 1, 2)
    );
    assert!(st.m.interface(1).unwrap().is_up());
}
