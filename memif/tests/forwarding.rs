//! `RxQueue::forward_to`: frames from one connection straight into another, copied once, in
//! order, never more than the other ring can take (the sender waits instead of losing frames),
//! chained frames left for the general receive.

mod common;

use common::{frame, sock_addr, wait_for};
use memif::queue::HoldSink;
use memif::{
    Forwarded, InterfaceConfig, Master, MasterConfig, PeerFrame, RxQueue, Slave, SocketAddress,
    TxQueue,
};

/// log2 of the rings: 16 slots, so a test fills them and indices wrap.
const LOG2: u8 = 4;
const SLOTS: usize = 16;

fn config(id: u32) -> InterfaceConfig {
    let mut c = InterfaceConfig::new(id);
    c.log2_ring_size = LOG2;
    c
}

/// Two connections: `a` sends into the forwarder's receive queue, `b` receives what the
/// forwarder's transmit queue sends. The forwarder is master on A; on B it is master too, or
/// (`forwarder_slave_on_b`) the slave of `b`.
struct Loop {
    /// The forwarder's master (A, and B unless it is a slave there).
    fwd: Master,
    /// The forwarder's slave on B, if it is one (kept so B's connection lives).
    _fwd_b: Option<Slave>,
    /// The sender on A.
    a: Slave,
    /// The receiver on B: a slave of `fwd`, or a master `fwd_b` connects to.
    b: Peer,
    rx: RxQueue,
    tx: TxQueue,
}

enum Peer {
    Slave(Box<Slave>),
    Master(Master),
}

impl Peer {
    fn interface_mut(&mut self) -> &mut memif::Interface {
        match self {
            Peer::Slave(s) => s.interface_mut(),
            Peer::Master(m) => m.interface_mut(2).unwrap(),
        }
    }

    fn poll(&mut self) {
        match self {
            Peer::Slave(s) => s.poll().unwrap(),
            Peer::Master(m) => m.poll().unwrap(),
        }
    }
}

impl Loop {
    fn new(test: &str, forwarder_slave_on_b: bool) -> Loop {
        Loop::with_b_buffers(test, forwarder_slave_on_b, 2048)
    }

    /// [`Loop::new`], B's buffers (the slave's on B) `b_buffer` bytes long.
    fn with_b_buffers(test: &str, forwarder_slave_on_b: bool, b_buffer: u32) -> Loop {
        let b_config = || {
            let mut c = config(2);
            c.buffer_size = b_buffer;
            c
        };
        let fwd_addr = sock_addr(&format!("{test}-fwd"));
        let mut fwd = Master::bind(fwd_addr.clone(), MasterConfig::default()).unwrap();
        fwd.add_interface(config(1)).unwrap();
        let mut a = Slave::new(fwd_addr.clone(), config(1)).unwrap();
        let (mut b, mut fwd_b) = if forwarder_slave_on_b {
            let b_addr: SocketAddress = sock_addr(&format!("{test}-b"));
            let mut m = Master::bind(b_addr.clone(), MasterConfig::default()).unwrap();
            m.add_interface(b_config()).unwrap();
            (
                Peer::Master(m),
                Some(Slave::new(b_addr, b_config()).unwrap()),
            )
        } else {
            fwd.add_interface(config(2)).unwrap();
            (
                Peer::Slave(Box::new(Slave::new(fwd_addr, b_config()).unwrap())),
                None,
            )
        };
        wait_for("both links up", 10, || {
            fwd.poll().unwrap();
            a.poll().unwrap();
            b.poll();
            if let Some(s) = fwd_b.as_mut() {
                s.poll().unwrap();
            }
            let b_up = match fwd_b.as_ref() {
                Some(s) => s.interface().is_up(),
                None => fwd.interface(2).unwrap().is_up(),
            };
            fwd.interface(1).unwrap().is_up() && a.interface().is_up() && b_up
        });
        let qa = fwd.interface_mut(1).unwrap().detach_queues().unwrap();
        let qb = match fwd_b.as_mut() {
            Some(s) => s.interface_mut().detach_queues().unwrap(),
            None => fwd.interface_mut(2).unwrap().detach_queues().unwrap(),
        };
        let mut rx = qa.rx.into_iter().next().unwrap();
        rx.enable_holding();
        Loop {
            fwd,
            _fwd_b: fwd_b,
            a,
            b,
            rx,
            tx: qb.tx.into_iter().next().unwrap(),
        }
    }

    /// Sends `frames` from A; returns how many its ring took.
    fn send(&mut self, frames: &[Vec<u8>]) -> usize {
        let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
        self.a.interface_mut().tx_burst(0, &refs)
    }

    /// Frames B has received so far (up to `max`).
    fn received(&mut self, max: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        self.b
            .interface_mut()
            .rx_burst(0, max, &mut |f| got.push(f.to_vec()));
        got
    }
}

/// Copies every frame it is offered (the general receive path, for chained frames).
struct Copier(Vec<Vec<u8>>);

impl HoldSink for Copier {
    fn take(
        &mut self,
        frame: &PeerFrame<'_>,
        _hold: Option<memif::queue::Hold>,
    ) -> memif::queue::Taken {
        let mut v = vec![0; frame.len()];
        assert!(frame.copy_to(0, &mut v));
        self.0.push(v);
        memif::queue::Taken::Copied
    }
}

fn frames_arrive_once_in_order_and_wait_for_room(forwarder_slave_on_b: bool, test: &str) {
    let mut l = Loop::new(test, forwarder_slave_on_b);
    let mut sent = Vec::new();
    let mut got = Vec::new();
    let mut seq = 0u32;
    // Rounds of a full ring each, lengths from 60 to the buffer size.
    for _ in 0..4 {
        let frames: Vec<Vec<u8>> = (0..SLOTS as u32)
            .map(|k| frame(seq + k, 60 + ((seq + k) as usize * 131) % 1989))
            .collect();
        seq += SLOTS as u32;
        assert_eq!(l.send(&frames), SLOTS, "A's ring had room");
        sent.extend(frames);
        let mut forwarded = Forwarded::default();
        wait_for("a ring's worth forwarded", 10, || {
            let f = l.rx.forward_to(&mut l.tx, 256);
            forwarded.received += f.received;
            forwarded.sent += f.sent;
            forwarded.sent_bytes += f.sent_bytes;
            assert!(!f.more, "no chained frame was sent");
            forwarded.received == SLOTS
        });
        assert_eq!(forwarded.sent, SLOTS as u64);
        got.extend(l.received(256));
    }
    assert_eq!(got.len(), sent.len());
    assert!(got == sent, "every frame arrived once, in order, intact");

    // B stops reading: the forwarder fills B's ring, then takes nothing more from A, whose
    // frames wait in its ring (A's sender finds it full) instead of being dropped.
    let burst: Vec<Vec<u8>> = (0..SLOTS as u32).map(|k| frame(1000 + k, 64)).collect();
    assert_eq!(l.send(&burst), SLOTS);
    let mut into_b = 0;
    wait_for("B's ring full", 10, || {
        into_b += l.rx.forward_to(&mut l.tx, 256).received;
        l.tx.room() == 0
    });
    assert_eq!(
        l.rx.forward_to(&mut l.tx, 256),
        Forwarded::default(),
        "B has no room"
    );
    let more: Vec<Vec<u8>> = (0..SLOTS as u32).map(|k| frame(2000 + k, 64)).collect();
    let room_in_a = l.send(&more);
    assert_eq!(
        room_in_a, into_b,
        "A's ring still holds what B could not take"
    );
    // B reads again: everything comes through.
    let expected: Vec<Vec<u8>> = burst.iter().chain(&more[..room_in_a]).cloned().collect();
    let mut got = Vec::new();
    wait_for("the waiting frames", 10, || {
        l.rx.forward_to(&mut l.tx, 256);
        got.extend(l.received(256));
        got.len() >= expected.len()
    });
    assert!(
        got == expected,
        "nothing lost or reordered while B was full"
    );
    assert_eq!(l.fwd.interface(1).unwrap().bad_descriptors(), 0);
    assert_eq!(l.rx.forward_to(&mut l.tx, 256), Forwarded::default());
}

#[test]
fn a_master_forwards_to_a_master_once_in_order_waiting_for_room() {
    frames_arrive_once_in_order_and_wait_for_room(false, "fwd_mm");
}

#[test]
fn a_master_forwards_to_a_slave_once_in_order_waiting_for_room() {
    frames_arrive_once_in_order_and_wait_for_room(true, "fwd_ms");
}

#[test]
fn a_chained_frame_is_left_for_the_general_receive_in_its_place() {
    let mut l = Loop::new("fwd_chain", false);
    // 5000 bytes span three 2048-byte buffers.
    let frames = vec![frame(1, 100), frame(2, 5000), frame(3, 60)];
    assert_eq!(l.send(&frames), 3);
    let mut f = Forwarded::default();
    wait_for("the first frame", 10, || {
        f = l.rx.forward_to(&mut l.tx, 256);
        f.received > 0
    });
    assert_eq!((f.received, f.sent, f.more), (1, 1, true));
    assert_eq!(f.bytes, 100);
    // The caller takes the chained frame the general way and sends it itself.
    assert_eq!(
        l.rx.forward_to(&mut l.tx, 256).received,
        0,
        "still at the head"
    );
    let mut copier = Copier(Vec::new());
    assert_eq!(l.rx.receive_holding(1, &mut copier), 1);
    let chained: Vec<&[u8]> = copier.0.iter().map(|v| &v[..]).collect();
    assert_eq!(l.tx.transmit(chained.as_slice()), 1);
    let f = l.rx.forward_to(&mut l.tx, 256);
    assert_eq!((f.received, f.more), (1, false));
    let mut got = Vec::new();
    wait_for("all three at B", 10, || {
        got.extend(l.received(256));
        got.len() >= 3
    });
    assert!(got == frames, "in order and intact");
}

#[test]
fn nothing_is_taken_from_a_once_b_goes_down() {
    let mut l = Loop::new("fwd_down", false);
    assert_eq!(l.send(&[frame(1, 64)]), 1);
    wait_for("forwarded", 10, || {
        l.rx.forward_to(&mut l.tx, 256).sent == 1
    });
    // B's peer leaves: the forwarder's transmit queue is dead, nothing is taken from A.
    l.fwd.disconnect(2, "test");
    assert!(!l.tx.is_live());
    assert_eq!(l.tx.room(), 0);
    assert_eq!(l.send(&[frame(2, 64)]), 1);
    assert_eq!(l.rx.forward_to(&mut l.tx, 256), Forwarded::default());
    assert_eq!(l.rx.ready(), 1, "the frame waits in A's ring");
}

/// Frames longer than B's buffers are chained across several of them there.
fn frames_longer_than_the_other_sides_buffers_are_chained(forwarder_slave_on_b: bool, test: &str) {
    let mut l = Loop::with_b_buffers(test, forwarder_slave_on_b, 512);
    let frames = vec![
        frame(1, 100),
        frame(2, 1500),
        frame(3, 60),
        frame(4, 2048),
        frame(5, 512),
    ];
    assert_eq!(l.send(&frames), frames.len());
    let mut f = Forwarded::default();
    wait_for("all forwarded", 10, || {
        let g = l.rx.forward_to(&mut l.tx, 256);
        f.received += g.received;
        f.sent += g.sent;
        f.received == frames.len()
    });
    assert_eq!(f.sent, frames.len() as u64);
    let mut got = Vec::new();
    wait_for("all at B", 10, || {
        got.extend(l.received(256));
        got.len() >= frames.len()
    });
    assert!(got == frames, "in order and intact");
}

#[test]
fn frames_longer_than_a_slaves_posted_buffers_are_chained_into_them() {
    frames_longer_than_the_other_sides_buffers_are_chained(false, "fwd_long_m");
}

#[test]
fn frames_longer_than_the_forwarders_own_buffers_are_chained_into_them() {
    frames_longer_than_the_other_sides_buffers_are_chained(true, "fwd_long_s");
}

#[test]
fn long_frames_that_no_longer_fit_the_other_ring_are_counted_as_dropped() {
    // B's 16 slots of 512 bytes hold five 1500-byte frames (three slots each).
    let mut l = Loop::with_b_buffers("fwd_long_full", false, 512);
    let frames: Vec<Vec<u8>> = (0..SLOTS as u32).map(|k| frame(k, 1500)).collect();
    assert_eq!(l.send(&frames), SLOTS);
    let mut f = Forwarded::default();
    wait_for("A's frames taken", 10, || {
        let g = l.rx.forward_to(&mut l.tx, 256);
        f.received += g.received;
        f.taken += g.taken;
        f.sent += g.sent;
        f.received == SLOTS
    });
    assert_eq!((f.taken, f.sent), (5, 5));
    let b_side = l.fwd.interface(2).unwrap().counters();
    assert_eq!(
        (b_side.tx_packets, b_side.tx_dropped),
        (5, SLOTS as u64 - 5),
        "every frame sent or counted"
    );
    let mut got = Vec::new();
    wait_for("the five at B", 10, || {
        got.extend(l.received(256));
        got.len() >= 5
    });
    assert!(got == frames[..5], "the first five, intact");
}
