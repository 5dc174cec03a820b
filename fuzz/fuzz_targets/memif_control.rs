//! (c) memif control messages and the master's handshake: every datagram the fuzzer sends goes
//! through `Msg::decode` (a decoded message encodes and decodes to itself), then to a live
//! `Master` (interfaces 0, ETHERNET, and 1, IP with a secret) over a real SOCK_SEQPACKET
//! connection, with memfd regions (sealed or not, of any declared size, ring cookies where the
//! fuzzer puts them) and eventfds beside the messages, the master polled after each one.
//! A prologue (the input's first choice) first takes the handshake some way correctly — INIT,
//! the region, the rings, CONNECT — so that what follows is fuzzed from every stage of it.
//! Once an interface is up, a burst is received from it. Invariants: no panic; an interface is
//! up only after the master said CONNECTED, and when the peer goes away every interface is
//! down again and free for the next peer.
#![no_main]

use std::cell::RefCell;
use std::os::fd::{AsFd, OwnedFd};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use memif::msg::{AddRegion, AddRing, FixedStr, Init, Msg, RING_FLAG_S2M, VERSION};
use memif::region::Region;
use memif::ring::COOKIE;
use memif::socket::{ControlSocket, Received};
use memif::{InterfaceConfig, Master, MasterConfig, Mode, SocketAddress};
use nix::sys::eventfd::EventFd;

#[derive(Arbitrary, Debug)]
enum Fd {
    None,
    /// A memfd of `pages` pages (sealed against shrinking or not) with the ring cookie written
    /// at each of `cookies` (offsets, cut to the region).
    Memfd {
        pages: u8,
        sealed: bool,
        cookies: Vec<u32>,
    },
    Eventfd,
}

#[derive(Arbitrary, Debug)]
enum Step {
    /// A datagram of the fuzzer's own (any size).
    Raw {
        bytes: Vec<u8>,
        fd: Fd,
    },
    Init {
        version: Option<u16>,
        id: u8,
        mode: u8,
        secret: Option<[u8; 6]>,
    },
    AddRegion {
        index: u16,
        size: u64,
        fd: Fd,
    },
    /// ADD_REGION declaring exactly the memfd's size.
    AddRegionExact {
        index: u16,
        pages: u8,
        sealed: bool,
        cookies: Vec<u32>,
    },
    AddRing {
        s2m: bool,
        index: u16,
        region: u16,
        offset: u32,
        log2: u8,
        private_hdr_size: u16,
        eventfd: bool,
    },
    Connect {
        name: [u8; 4],
    },
    Disconnect {
        code: u32,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// How far the handshake goes correctly before the steps: 0 (not at all) to 4 (connected).
    prologue: u8,
    steps: Vec<Step>,
}

/// The correct handshake's messages for interface 0, up to stage `upto`: INIT; a 64 KiB sealed
/// region with ring cookies at 0 and 1024; the S2M ring at 0 and the M2S ring at 1024 (16
/// slots); CONNECT.
fn prologue(upto: u8) -> Vec<(Vec<u8>, Option<OwnedFd>)> {
    let mut out = Vec::new();
    if upto >= 1 {
        let init = Msg::Init(Init {
            version: VERSION,
            id: 0,
            mode: 0,
            secret: FixedStr::new(""),
            name: FixedStr::new("fuzz"),
        });
        out.push((init.encode().to_vec(), None));
    }
    if upto >= 2 {
        let size = 16 * PAGE;
        let region = Msg::AddRegion(AddRegion {
            index: 0,
            size: size as u64,
        });
        out.push((region.encode().to_vec(), memfd(15, true, &[0, 1024])));
    }
    if upto >= 3 {
        for (s2m, offset) in [(true, 0), (false, 1024)] {
            let ring = Msg::AddRing(AddRing {
                flags: if s2m { RING_FLAG_S2M } else { 0 },
                index: 0,
                region: 0,
                offset,
                log2_ring_size: 4,
                private_hdr_size: 0,
            });
            out.push((
                ring.encode().to_vec(),
                EventFd::new().ok().map(OwnedFd::from),
            ));
        }
    }
    if upto >= 4 {
        out.push((Msg::Connect(FixedStr::new("fuzz")).encode().to_vec(), None));
    }
    out
}

struct Rig {
    master: Master,
    addr: SocketAddress,
}

thread_local! {
    static RIG: RefCell<Rig> = RefCell::new({
        let addr = SocketAddress::parse(&format!("@quiver-fuzz-memif-{}", std::process::id()));
        let mut master = Master::bind(addr.clone(), MasterConfig::default()).unwrap();
        master.add_interface(InterfaceConfig::new(0)).unwrap();
        let mut one = InterfaceConfig::new(1);
        one.mode = Mode::Ip;
        one.secret = Some("s3cret".into());
        master.add_interface(one).unwrap();
        Rig { master, addr }
    });
}

const PAGE: usize = 4096;

fn memfd(pages: u8, sealed: bool, cookies: &[u32]) -> Option<OwnedFd> {
    let size = (usize::from(pages % 32) + 1) * PAGE;
    let region = if sealed {
        Region::create("fuzz", size).ok()?
    } else {
        let fd =
            nix::sys::memfd::memfd_create(c"fuzz", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).ok()?;
        nix::unistd::ftruncate(&fd, size as i64).ok()?;
        Region::from_peer(fd, size as u64).ok()?
    };
    for &c in cookies.iter().take(8) {
        let at = u64::from(c) % size as u64 & !3;
        region.write_bytes(at, COOKIE.to_ne_bytes());
    }
    region.fd().try_clone_to_owned().ok()
}

fn make_fd(fd: &Fd) -> Option<OwnedFd> {
    match fd {
        Fd::None => None,
        Fd::Memfd {
            pages,
            sealed,
            cookies,
        } => memfd(*pages, *sealed, cookies),
        Fd::Eventfd => EventFd::new().ok().map(OwnedFd::from),
    }
}

/// What the master sent back since the last call; `false` once the connection closed.
fn drain(sock: &ControlSocket, connected: &mut bool) -> bool {
    loop {
        match sock.recv() {
            Ok(Received::WouldBlock) => return true,
            Ok(Received::Closed) | Err(_) => return false,
            Ok(Received::Msg(Msg::Connected(_), _)) => *connected = true,
            Ok(Received::Msg(Msg::Disconnect(_), _)) => {}
            Ok(_) => {}
        }
    }
}

fuzz_target!(|input: Input| {
    let steps = input.steps;
    if steps.len() > 24 {
        return;
    }
    RIG.with_borrow_mut(|rig| {
        let sock = ControlSocket::connect(&rig.addr).unwrap();
        rig.master.poll().unwrap();
        let mut connected = false;
        let mut open;
        let first = prologue(input.prologue % 5);
        let mut script: Vec<(Vec<u8>, Option<OwnedFd>)> = Vec::new();
        for step in &steps {
            script.push(match step {
                Step::Raw { bytes, fd } => (bytes.clone(), make_fd(fd)),
                Step::Init {
                    version,
                    id,
                    mode,
                    secret,
                } => {
                    let m = Msg::Init(Init {
                        version: version.unwrap_or(VERSION),
                        id: u32::from(id % 3),
                        mode: mode % 3,
                        secret: match secret {
                            None => FixedStr::new(""),
                            Some(s) if s[0] & 1 == 0 => FixedStr::new("s3cret"),
                            Some(s) => FixedStr::new(&String::from_utf8_lossy(s)),
                        },
                        name: FixedStr::new("fuzz"),
                    });
                    (m.encode().to_vec(), None)
                }
                Step::AddRegion { index, size, fd } => (
                    Msg::AddRegion(AddRegion {
                        index: *index,
                        size: *size,
                    })
                    .encode()
                    .to_vec(),
                    make_fd(fd),
                ),
                Step::AddRegionExact {
                    index,
                    pages,
                    sealed,
                    cookies,
                } => (
                    Msg::AddRegion(AddRegion {
                        index: *index % 4,
                        size: ((usize::from(pages % 32) + 1) * PAGE) as u64,
                    })
                    .encode()
                    .to_vec(),
                    memfd(*pages, *sealed, cookies),
                ),
                Step::AddRing {
                    s2m,
                    index,
                    region,
                    offset,
                    log2,
                    private_hdr_size,
                    eventfd,
                } => (
                    Msg::AddRing(AddRing {
                        flags: if *s2m { RING_FLAG_S2M } else { 0 },
                        index: *index,
                        region: *region,
                        offset: *offset,
                        log2_ring_size: *log2,
                        private_hdr_size: *private_hdr_size,
                    })
                    .encode()
                    .to_vec(),
                    if *eventfd {
                        EventFd::new().ok().map(OwnedFd::from)
                    } else {
                        None
                    },
                ),
                Step::Connect { name } => (
                    Msg::Connect(FixedStr::new(&String::from_utf8_lossy(name)))
                        .encode()
                        .to_vec(),
                    None,
                ),
                Step::Disconnect { code } => {
                    (Msg::disconnect(*code, "fuzz").encode().to_vec(), None)
                }
            });
        }
        for (bytes, fd) in first.into_iter().chain(script) {
            if let Ok(m) = Msg::decode(&bytes) {
                assert_eq!(Msg::decode(&m.encode()), Ok(m), "decode(encode(m)) != m");
            }
            if sock
                .send_raw(&bytes, fd.as_ref().map(|f| f.as_fd()))
                .is_err()
            {
                break;
            }
            rig.master.poll().unwrap();
            open = drain(&sock, &mut connected);
            let up: Vec<u32> = rig
                .master
                .interfaces()
                .iter()
                .filter(|i| i.is_up())
                .map(|i| i.id())
                .collect();
            assert!(
                up.is_empty() || connected,
                "an interface is up before CONNECTED"
            );
            for id in up {
                let i = rig.master.interface_mut(id).unwrap();
                i.rx_burst(0, 64, &mut |_: &[u8]| {});
            }
            if !open {
                break;
            }
        }
        drop(sock);
        rig.master.poll().unwrap();
        assert!(
            rig.master.interfaces().iter().all(|i| !i.is_up()),
            "an interface stayed up after its peer left"
        );
    });
});
