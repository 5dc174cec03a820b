//! The test bench: a master with a good interface and a real slave on it (which must keep
//! working whatever a hostile peer does), the raw control messages, and a raw slave that completed
//! the handshake and writes its own descriptors.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;

use memif::msg::{AddRegion, AddRing, FixedStr, Init, Msg, RING_FLAG_S2M, VERSION};
use memif::region::Region;
use memif::ring::{ring_stride, Desc, Ring};
use memif::socket::{ControlSocket, Received};
use memif::{InterfaceConfig, Master, MasterConfig, Slave, SocketAddress};
use nix::sys::eventfd::EventFd;

use crate::common::{frame, sock_addr, wait_for};

pub(crate) const LOG2: u8 = 4;
pub(crate) const N: u16 = 16;
pub(crate) const BUF_BASE: u64 = 64 * 1024;
pub(crate) const BSIZE: u64 = 2048;
pub(crate) const REGION_SIZE: usize = 1 << 20;

/// A master with a good interface (id 2, a real slave attached) plus `cfg`.
pub(crate) struct Setup {
    pub(crate) m: Master,
    pub(crate) good: Slave,
    pub(crate) addr: SocketAddress,
}

impl Setup {
    pub(crate) fn new(test: &str, cfg: InterfaceConfig) -> Setup {
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
    pub(crate) fn check_good(&mut self) {
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
    pub(crate) fn recv(&mut self, sock: &ControlSocket) -> Received {
        recv_polling(sock, "message from master", || self.m.poll().unwrap())
    }

    fn expect_ack(&mut self, sock: &ControlSocket) {
        match self.recv(sock) {
            Received::Msg(Msg::Ack, _) => {}
            r => panic!("expected ACK, got {r:?}"),
        }
    }

    /// The raw peer sends `msg` (with `fd`), which the master must acknowledge.
    pub(crate) fn send_acked(&mut self, sock: &ControlSocket, msg: &Msg, fd: Option<BorrowedFd>) {
        sock.send(msg, fd).unwrap();
        self.expect_ack(sock);
    }

    /// Expect a DISCONNECT whose reason contains `reason`, then the socket closing.
    pub(crate) fn expect_disconnect(&mut self, sock: &ControlSocket, reason: &str) {
        match self.recv(sock) {
            Received::Msg(Msg::Disconnect(d), _) => {
                let r = d.reason.to_string_lossy();
                assert!(r.contains(reason), "reason {r:?} lacks {reason:?}");
            }
            r => panic!("expected DISCONNECT, got {r:?}"),
        }
        assert!(matches!(self.recv(sock), Received::Closed));
    }

    pub(crate) fn connect_raw(&mut self) -> ControlSocket {
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
pub(crate) fn recv_polling(sock: &ControlSocket, what: &str, mut poll: impl FnMut()) -> Received {
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

pub(crate) fn init(id: u32, secret: &str) -> Msg {
    Msg::Init(Init {
        version: VERSION,
        id,
        mode: 0,
        secret: FixedStr::new(secret),
        name: FixedStr::new("raw"),
    })
}

pub(crate) fn add_ring(s2m: bool, index: u16, offset: u32, log2: u8) -> Msg {
    Msg::AddRing(AddRing {
        flags: if s2m { RING_FLAG_S2M } else { 0 },
        index,
        region: 0,
        offset,
        log2_ring_size: log2,
        private_hdr_size: 0,
    })
}

pub(crate) fn region_msg(index: u16, size: u64) -> Msg {
    Msg::AddRegion(AddRegion { index, size })
}

/// A raw slave that completed the handshake for interface `id`.
pub(crate) struct RawSlave {
    pub(crate) sock: ControlSocket,
    pub(crate) region: Region,
    pub(crate) s2m: Ring,
    _efds: Vec<EventFd>,
}

impl RawSlave {
    pub(crate) fn connect(st: &mut Setup, id: u32) -> RawSlave {
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
    pub(crate) fn publish(&self, descs: &[Desc], extra_head: u16) {
        let r = self.s2m.at(&self.region);
        let mut h = r.head().load(Ordering::Relaxed);
        for d in descs {
            r.write_desc(h, *d);
            h = h.wrapping_add(1);
        }
        r.head()
            .store(h.wrapping_add(extra_head), Ordering::Release);
    }

    pub(crate) fn good_desc(&self, slot: u64, payload: &[u8]) -> Desc {
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
