//! (d) memif descriptors against a region: a raw slave, connected once to a live `Master`,
//! publishes descriptors the fuzzer writes (any offset, length, region, flags and chain, head
//! moved past them by any amount) on its S2M ring, with packet bytes of the fuzzer's in its
//! buffers, and the master receives a burst. A model written here, from the wire contract
//! (a descriptor is taken only when its region exists, its length is 1..=buffer size, the
//! frame stays under MAX_FRAME and offset + length lies inside the region; a chain that runs
//! into the head is dropped; at most a ring's worth per burst), says which frames must arrive,
//! with which bytes (read from a copy of the region taken before the burst), and where the
//! tail must end. Invariants: no panic, exactly the model's frames (so no byte from outside
//! the region), and every slot given back.
#![no_main]

use std::cell::RefCell;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use memif::msg::{AddRegion, AddRing, FixedStr, Init, Msg, RING_FLAG_S2M, VERSION};
use memif::region::Region;
use memif::ring::{ring_stride, Desc, Ring, DESC_FLAG_NEXT};
use memif::socket::{ControlSocket, Received};
use memif::{InterfaceConfig, Master, MasterConfig, SocketAddress, MAX_FRAME};
use nix::sys::eventfd::EventFd;

const LOG2: u8 = 5;
const N: u16 = 1 << LOG2;
const REGION_SIZE: usize = 128 * 1024;
const BUF_BASE: usize = 4096;
const BUFFER_SIZE: u32 = 2048;
const MAX_SEGMENTS: usize = 256;

struct Rig {
    master: Master,
    _sock: ControlSocket,
    region: Region,
    s2m: Ring,
    _efds: Vec<EventFd>,
}

fn recv(master: &mut Master, sock: &ControlSocket) -> Received {
    for _ in 0..10_000 {
        master.poll().unwrap();
        match sock.recv().unwrap() {
            Received::WouldBlock => std::thread::yield_now(),
            r => return r,
        }
    }
    panic!("the master does not answer");
}

fn send_acked(
    master: &mut Master,
    sock: &ControlSocket,
    m: &Msg,
    fd: Option<std::os::fd::BorrowedFd>,
) {
    sock.send(m, fd).unwrap();
    match recv(master, sock) {
        Received::Msg(Msg::Ack, _) => {}
        r => panic!("expected ACK, got {r:?}"),
    }
}

impl Rig {
    fn new() -> Rig {
        let addr = SocketAddress::parse(&format!("@quiver-fuzz-desc-{}", std::process::id()));
        let mut master = Master::bind(addr.clone(), MasterConfig::default()).unwrap();
        master.add_interface(InterfaceConfig::new(1)).unwrap();
        let sock = ControlSocket::connect(&addr).unwrap();
        assert!(matches!(
            recv(&mut master, &sock),
            Received::Msg(Msg::Hello(_), _)
        ));
        let region = Region::create("fuzz", REGION_SIZE).unwrap();
        let s2m = Ring::new(&region, 0, LOG2).unwrap();
        let m2s = Ring::new(&region, ring_stride(LOG2), LOG2).unwrap();
        s2m.at(&region).init();
        m2s.at(&region).init();
        let efds = vec![EventFd::new().unwrap(), EventFd::new().unwrap()];
        let init = Msg::Init(Init {
            version: VERSION,
            id: 1,
            mode: 0,
            secret: FixedStr::new(""),
            name: FixedStr::new("fuzz"),
        });
        send_acked(&mut master, &sock, &init, None);
        let ar = Msg::AddRegion(AddRegion {
            index: 0,
            size: REGION_SIZE as u64,
        });
        send_acked(&mut master, &sock, &ar, Some(region.fd()));
        for (s2m_flag, offset, efd) in [(true, 0, &efds[0]), (false, ring_stride(LOG2), &efds[1])] {
            let m = Msg::AddRing(AddRing {
                flags: if s2m_flag { RING_FLAG_S2M } else { 0 },
                index: 0,
                region: 0,
                offset: offset as u32,
                log2_ring_size: LOG2,
                private_hdr_size: 0,
            });
            send_acked(&mut master, &sock, &m, Some(efd.as_fd()));
        }
        sock.send(&Msg::Connect(FixedStr::new("fuzz")), None)
            .unwrap();
        assert!(matches!(
            recv(&mut master, &sock),
            Received::Msg(Msg::Connected(_), _)
        ));
        assert!(master.interface(1).unwrap().is_up());
        Rig {
            master,
            _sock: sock,
            region,
            s2m,
            _efds: efds,
        }
    }
}

thread_local! {
    static RIG: RefCell<Rig> = RefCell::new(Rig::new());
}

#[derive(Arbitrary, Debug)]
struct D {
    flags: u16,
    region: u16,
    length: u32,
    offset: u32,
}

#[derive(Arbitrary, Debug)]
struct Input {
    descs: Vec<D>,
    /// Head moved this much further than the descriptors written (ring index overrun).
    extra_head: u16,
    /// Bytes written into the buffer area, at `offset % its size`.
    fills: Vec<(u32, Vec<u8>)>,
    max: u8,
}

/// The model's check of one descriptor.
fn check(d: &Desc, so_far: usize) -> Option<(usize, usize)> {
    if d.region != 0 || d.length == 0 {
        return None;
    }
    if d.length > BUFFER_SIZE || so_far + d.length as usize > MAX_FRAME {
        return None;
    }
    let end = u64::from(d.offset) + u64::from(d.length);
    if end > REGION_SIZE as u64 {
        return None;
    }
    Some((d.offset as usize, d.length as usize))
}

/// The frames the master must deliver, and where its index ends.
fn model(descs: &[Desc], snap: &[u8], start: u16, head: u16, max: usize) -> (Vec<Vec<u8>>, u16) {
    let avail = head.wrapping_sub(start).min(N);
    let end = start.wrapping_add(avail);
    let desc = |i: u16| descs[usize::from(i & (N - 1))];
    let mut cur = start;
    let mut frames = Vec::new();
    while cur != end && frames.len() < max {
        let d = desc(cur);
        cur = cur.wrapping_add(1);
        if d.flags & DESC_FLAG_NEXT == 0 {
            if let Some((o, l)) = check(&d, 0) {
                frames.push(snap[o..o + l].to_vec());
            }
            continue;
        }
        let mut frame = Vec::new();
        let mut segments = 1;
        let mut bad = check(&d, 0)
            .map(|(o, l)| frame.extend_from_slice(&snap[o..o + l]))
            .is_none();
        let mut last = d;
        while last.flags & DESC_FLAG_NEXT != 0 {
            if cur == end {
                bad = true;
                break;
            }
            last = desc(cur);
            cur = cur.wrapping_add(1);
            if !bad {
                match check(&last, frame.len()) {
                    Some((o, l)) if segments < MAX_SEGMENTS => {
                        frame.extend_from_slice(&snap[o..o + l]);
                        segments += 1;
                    }
                    _ => bad = true,
                }
            }
        }
        if !bad {
            frames.push(frame);
        }
    }
    (frames, cur)
}

fuzz_target!(|input: Input| {
    if input.descs.len() > 96 || input.fills.len() > 16 {
        return;
    }
    RIG.with_borrow_mut(|rig| {
        let r = rig.s2m.at(&rig.region);
        let start = r.tail().load(Ordering::Acquire);
        let mut h = r.head().load(Ordering::Relaxed);
        assert_eq!(h, start, "every slot was given back");
        for d in &input.descs {
            r.write_desc(
                h,
                Desc {
                    flags: d.flags,
                    region: d.region,
                    length: d.length,
                    offset: d.offset,
                    metadata: 0,
                },
            );
            h = h.wrapping_add(1);
        }
        let head = h.wrapping_add(input.extra_head);
        r.head().store(head, Ordering::Release);
        for (at, bytes) in &input.fills {
            let room = REGION_SIZE - BUF_BASE;
            let bytes = &bytes[..bytes.len().min(room)];
            let at = BUF_BASE + (*at as usize % (room - bytes.len() + 1));
            assert!(rig.region.copy_in(at as u64, bytes));
        }
        let mut snap = vec![0u8; REGION_SIZE];
        assert!(rig.region.copy_out(0, &mut snap));
        let descs: Vec<Desc> = (0..N).map(|i| r.read_desc(i)).collect();
        let max = usize::from(input.max % 70) + 1;

        let mut got = Vec::new();
        let iface = rig.master.interface_mut(1).unwrap();
        iface.rx_burst(0, max, &mut |p: &[u8]| got.push(p.to_vec()));
        let (want, end) = model(&descs, &snap, start, head, max);
        assert_eq!(got.len(), want.len(), "frames delivered");
        assert!(got == want, "a frame's bytes differ from the region's");
        assert_eq!(r.tail().load(Ordering::Acquire), end, "tail");
        assert!(iface.is_up());
        // What is left unreceived is withdrawn, so that the next input starts clean.
        r.head().store(end, Ordering::Release);
    });
});
