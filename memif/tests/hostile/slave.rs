//! Our slave against a raw master: a HELLO of the wrong version is refused with its reason, bad
//! descriptors the master writes are dropped and counted (a tail far beyond what was posted is
//! clamped); and a slave refused by a real master for its secret learns why.

use std::sync::atomic::Ordering;

use memif::msg::{FixedStr, Msg, RING_FLAG_S2M, VERSION};
use memif::region::Region;
use memif::ring::{Ring, DESC_FLAG_NEXT};
use memif::socket::{ControlSocket, Received};
use memif::{InterfaceConfig, LinkState, Master, MasterConfig, Slave, SocketAddress};

use crate::common::{self, sock_addr, wait_for};
use crate::harness::{recv_polling, LOG2, N};

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
