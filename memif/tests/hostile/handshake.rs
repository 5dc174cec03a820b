//! The master refusing a raw slave's handshake: wrong version, secret, id, mode or message size;
//! bad regions (out of order, short, unsealed, without a memfd) and rings (outside their region,
//! too large, out of order, with a private header, a bad cookie); messages before INIT. Each is
//! refused with its reason, and the good interface keeps working.

use std::os::fd::AsFd;

use memif::msg::{FixedStr, Msg};
use memif::region::Region;
use memif::socket::ControlSocket;
use memif::{InterfaceConfig, LinkState, Mode, Slave};
use nix::sys::eventfd::EventFd;

use crate::common::wait_for;
use crate::harness::{add_ring, init, region_msg, Setup};

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
    refusal_recorded(&st, reason);
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

/// The refusal is on the interface the peer named (none when it named none it has: an
/// unknown id, or no INIT yet), with its reason and the peer's pid (this process), counted
/// once, and on no other interface.
fn refusal_recorded(st: &Setup, reason: &str) {
    let named = match reason {
        "unknown interface id" | "invalid message" | "expected INIT" => None,
        "already connected" => Some(2),
        _ => Some(1),
    };
    for id in [1, 2] {
        let r = st.m.interface(id).unwrap().refusals();
        if named != Some(id) {
            assert_eq!(r.total(), 0, "interface {id}: {r:?}");
            continue;
        }
        let last = r.last().expect("the refusal is recorded on its interface");
        assert!(last.reason.contains(reason), "{last:?}");
        assert_eq!(last.peer_pid, Some(std::process::id() as i32));
        assert_eq!(r.total(), 1, "{r:?}");
        assert_eq!(r.count(last.kind), 1);
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
fn unsealed_region_memfd_is_refused() {
    refused_after_init("unsealed", "not sealed", |_, s| {
        let fd = nix::sys::memfd::memfd_create(c"raw", nix::sys::memfd::MFdFlags::empty()).unwrap();
        nix::unistd::ftruncate(&fd, 65536).unwrap();
        s.send(&region_msg(0, 65536), Some(fd.as_fd())).unwrap();
    });
}

#[test]
fn refusals_are_counted_by_kind() {
    use memif::RefusalKind;
    let cases: [(&str, &str, RefusalKind); 3] = [
        ("kind_secret", "sesamf", RefusalKind::IncorrectSecret),
        ("kind_nosecret", "", RefusalKind::SecretRequired),
        ("kind_secret2", "wrong", RefusalKind::IncorrectSecret),
    ];
    let mut cfg = InterfaceConfig::new(1);
    cfg.secret = Some("sesame".into());
    let mut st = Setup::new("kinds", cfg);
    for (_, secret, _) in &cases {
        let sock = st.connect_raw();
        sock.send(&init(1, secret), None).unwrap();
        st.expect_disconnect(&sock, "secret");
    }
    let r = st.m.interface(1).unwrap().refusals();
    assert_eq!(r.count(RefusalKind::IncorrectSecret), 2);
    assert_eq!(r.count(RefusalKind::SecretRequired), 1);
    assert_eq!(r.count(RefusalKind::ModeMismatch), 0);
    assert_eq!(r.last().map(|l| l.kind), Some(cases[2].2));
    assert_eq!(
        RefusalKind::IncorrectSecret.counter_name(),
        "refused-incorrect-secret"
    );
}

#[test]
fn a_slave_offering_more_rings_than_the_interface_has_queues_is_refused() {
    // Interface 1 takes one queue pair (libmemif's and VPP's default), while the socket's
    // other interface takes two: HELLO offers two, ADD_RING holds the slave to interface 1's.
    refused_after_region("queues", "out of range", |st, s| {
        let e = EventFd::new().unwrap();
        st.send_acked(s, &add_ring(true, 0, 0, 4), Some(e.as_fd()));
        let e = EventFd::new().unwrap();
        s.send(&add_ring(true, 1, 4096, 4), Some(e.as_fd()))
            .unwrap();
    });
}

#[test]
fn a_slave_asks_for_no_more_queues_than_hello_offers_and_both_sides_report_what_was_agreed() {
    use memif::{Master, MasterConfig, Negotiated};
    let addr = crate::common::sock_addr("agreed");
    let mut m = Master::bind(addr.clone(), MasterConfig::default()).unwrap();
    let mut mcfg = InterfaceConfig::new(1);
    mcfg.queue_pairs = 2;
    m.add_interface(mcfg).unwrap();
    let mut scfg = InterfaceConfig::new(1);
    scfg.queue_pairs = 4;
    scfg.log2_ring_size = 8;
    scfg.buffer_size = 1024;
    let mut s = Slave::new(addr, scfg).unwrap();
    wait_for("link up", 10, || {
        m.poll().unwrap();
        s.poll().unwrap();
        s.interface().is_up() && m.interface(1).unwrap().is_up()
    });
    let want = Negotiated {
        rx_queues: 2,
        tx_queues: 2,
        ring_size: 256,
        buffer_size: Some(1024),
    };
    assert_eq!(s.interface().negotiated(), Some(want));
    assert_eq!(m.interface(1).unwrap().negotiated(), Some(want));
}
