//! Receiving without copying: a detached receive queue's frames held in the peer's memory,
//! their slots given back to the peer only once released, in ring order, and the memory kept
//! mapped while any is held, even after the peer left.

mod common;

use std::sync::Arc;

use common::{frame, sock_addr, wait_for};
use memif::queue::{HeldFrames, Hold, HoldSink, Taken};
use memif::{InterfaceConfig, Master, MasterConfig, PeerFrame, RxQueue, Slave, SocketAddress};

const ID: u32 = 5;
/// log2 of the ring size: 16 slots, so indices wrap within the test.
const LOG2: u8 = 4;
const SLOTS: usize = 16;

fn connect_pair(addr: SocketAddress) -> (Master, Slave) {
    let mut cfg = InterfaceConfig::new(ID);
    cfg.log2_ring_size = LOG2;
    let mut m = Master::bind(addr.clone(), MasterConfig::default()).unwrap();
    m.add_interface(cfg.clone()).unwrap();
    let mut s = Slave::new(addr, cfg).unwrap();
    wait_for("link up", 10, || {
        m.poll().unwrap();
        s.poll().unwrap();
        m.interface(ID).unwrap().is_up() && s.interface().is_up()
    });
    (m, s)
}

/// Holds every frame offered a hold, recording (token, length); copies the others.
#[derive(Default)]
struct Holder {
    held: Vec<(u32, usize)>,
    copied: Vec<Vec<u8>>,
}

impl HoldSink for Holder {
    fn take(&mut self, frame: &PeerFrame<'_>, hold: Option<Hold>) -> Taken {
        match hold {
            Some(h) => {
                self.held.push((h.token(), frame.len()));
                Taken::Held
            }
            None => {
                let mut v = vec![0; frame.len()];
                assert!(frame.copy_to(0, &mut v));
                self.copied.push(v);
                Taken::Copied
            }
        }
    }
}

fn held_bytes(held: &HeldFrames, token: u32, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    assert!(
        held.copy_out(token, 0, &mut v),
        "token {token} not readable"
    );
    v
}

/// The receiving side's detached receive queue 0 and a way to send from the other side.
struct Pair {
    m: Master,
    s: Slave,
    /// Whether the master receives (the slave sends).
    master_receives: bool,
}

impl Pair {
    fn receiver_queue(&mut self) -> RxQueue {
        let q = if self.master_receives {
            self.m.interface_mut(ID).unwrap().detach_queues()
        } else {
            self.s.interface_mut().detach_queues()
        };
        q.unwrap().rx.into_iter().next().unwrap()
    }

    /// Sends `frames`; returns how many the ring took.
    fn send(&mut self, frames: &[Vec<u8>]) -> usize {
        let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
        if self.master_receives {
            self.s.interface_mut().tx_burst(0, &refs)
        } else {
            self.m.interface_mut(ID).unwrap().tx_burst(0, &refs)
        }
    }
}

fn held_slots_return_in_ring_order(master_receives: bool, test: &str) {
    let (m, s) = connect_pair(sock_addr(test));
    let mut p = Pair {
        m,
        s,
        master_receives,
    };
    let mut rx = p.receiver_queue();
    let held = rx.enable_holding();
    assert!(Arc::ptr_eq(&held, &rx.enable_holding()));
    let mut seq = 0u32;
    for round in 0..3 {
        // A full ring of one-descriptor frames, all held.
        let frames: Vec<Vec<u8>> = (0..SLOTS as u32)
            .map(|k| frame(seq + k, 60 + (k as usize * 97) % 1400))
            .collect();
        assert_eq!(p.send(&frames), SLOTS, "round {round}: the ring had room");
        let mut sink = Holder::default();
        wait_for("frames received", 10, || {
            rx.receive_holding(64, &mut sink);
            sink.held.len() == SLOTS
        });
        assert!(sink.copied.is_empty());
        assert_eq!(held.in_flight(), SLOTS as u64);
        for ((token, len), f) in sink.held.iter().zip(&frames) {
            assert_eq!(held.len(*token), *len);
            assert_eq!(&held_bytes(&held, *token, *len), f, "held frame intact");
        }
        // Nothing goes back while held: the sender has no room.
        rx.give_back();
        assert_eq!(p.send(&frames[..1]), 0, "a held slot went back to the peer");
        // The second frame released first: still nothing, slots go back in ring order only.
        held.release(sink.held[1].0);
        rx.give_back();
        assert_eq!(p.send(&frames[..1]), 0, "slot 1 went back before slot 0");
        held.release(sink.held[0].0);
        rx.give_back();
        // Exactly two slots are free now.
        let more: Vec<Vec<u8>> = (0..3).map(|k| frame(1000 + k, 100)).collect();
        assert_eq!(p.send(&more), 2, "slots 0 and 1 back, no others");
        let rest: Vec<u32> = sink.held[2..].iter().map(|&(t, _)| t).collect();
        if round == 1 {
            // One batch (as a transmit burst frees): the token named twice is counted as a
            // bad release and given back once.
            let mut batch = rest.clone();
            batch.push(rest[0]);
            held.release_many(&batch);
        } else {
            for &token in &rest {
                held.release(token);
            }
            // A token released twice is counted, not given back twice.
            held.release(rest[0]);
        }
        assert_eq!(held.bad_releases(), round + 1);
        assert_eq!(held.in_flight(), 0);
        // The two extra frames come through (copied: a sink may always copy).
        let mut copier = Holder::default();
        wait_for("the extra frames", 10, || {
            rx.receive(64, &mut |f: &PeerFrame<'_>| {
                let mut v = vec![0; f.len()];
                f.copy_to(0, &mut v);
                copier.copied.push(v);
                true
            });
            copier.copied.len() == 2
        });
        assert_eq!(copier.copied, more[..2]);
        seq += SLOTS as u32;
    }
    // Everything went back: a full ring fits again.
    let frames: Vec<Vec<u8>> = (0..SLOTS as u32).map(|k| frame(k, 64)).collect();
    assert_eq!(p.send(&frames), SLOTS);
    assert!(!held.is_retired(), "the queue still lives");
    drop(rx);
    assert!(held.is_retired(), "queue gone, nothing held");
    assert!(!held.keeps_memory(), "the connection's memory let go of");
}

#[test]
fn a_master_gives_held_slots_back_in_ring_order_once_released() {
    held_slots_return_in_ring_order(true, "hold_master");
}

#[test]
fn a_slave_posts_held_buffers_again_in_ring_order_once_released() {
    held_slots_return_in_ring_order(false, "hold_slave");
}

#[test]
fn chained_frames_are_offered_without_a_hold() {
    let (m, s) = connect_pair(sock_addr("hold_chain"));
    let mut p = Pair {
        m,
        s,
        master_receives: true,
    };
    let mut rx = p.receiver_queue();
    let held = rx.enable_holding();
    // 5000 bytes span three 2048-byte buffers.
    let frames = vec![frame(1, 5000), frame(2, 100)];
    assert_eq!(p.send(&frames), 2);
    let mut sink = Holder::default();
    wait_for("frames received", 10, || {
        rx.receive_holding(64, &mut sink);
        sink.copied.len() + sink.held.len() == 2
    });
    assert_eq!(sink.copied, frames[..1]);
    assert_eq!(sink.held.len(), 1);
    assert_eq!(held_bytes(&held, sink.held[0].0, 100), frames[1]);
    held.release(sink.held[0].0);
    rx.give_back();
    assert_eq!(p.s.interface().tx_unconsumed(0), 0, "every slot back");
}

#[test]
fn held_frames_stay_readable_after_their_sender_leaves_until_released() {
    let (m, s) = connect_pair(sock_addr("hold_leave"));
    let mut p = Pair {
        m,
        s,
        master_receives: true,
    };
    let mut rx = p.receiver_queue();
    let held = rx.enable_holding();
    let frames: Vec<Vec<u8>> = (0..8).map(|k| frame(k, 200 + k as usize)).collect();
    assert_eq!(p.send(&frames), 8);
    let mut sink = Holder::default();
    wait_for("frames received", 10, || {
        rx.receive_holding(64, &mut sink);
        sink.held.len() == 8
    });
    // The sender leaves and unmaps its memory; the receiver notices.
    p.s.disconnect("test: sender leaves");
    drop(p.s);
    wait_for("link down", 10, || {
        p.m.poll().unwrap();
        !rx.is_live()
    });
    // The held frames are still in the receiver's mapping, intact.
    for (&(token, len), f) in sink.held.iter().zip(&frames) {
        assert_eq!(&held_bytes(&held, token, len), f);
    }
    assert_eq!(
        rx.receive_holding(64, &mut sink),
        0,
        "a dead queue receives nothing"
    );
    rx.give_back();
    drop(rx);
    assert!(!held.is_retired(), "frames still held");
    assert!(held.keeps_memory(), "held frames keep the memory mapped");
    for &(token, _) in &sink.held[1..] {
        held.release(token);
    }
    assert!(held.keeps_memory(), "one frame still held");
    assert_eq!(
        &held_bytes(&held, sink.held[0].0, sink.held[0].1),
        &frames[0]
    );
    held.release(sink.held[0].0);
    assert!(held.is_retired());
    assert!(!held.keeps_memory(), "unmapped with the last release");
    assert_eq!(held.bad_releases(), 0);
    // Out-of-range tokens are refused, not a panic.
    held.release(u32::MAX);
    let mut b = [0u8; 4];
    assert!(
        !held.copy_out(0, 0, &mut b),
        "released frames are not readable"
    );
    assert_eq!(held.bad_releases(), 1);
}

/// `receive_held`, the fast path: it holds one-descriptor frames up to its length limit and
/// stops before any other frame, which `receive_holding` then takes; order is kept and every
/// slot goes back once released.
fn the_fast_path_stops_at_what_it_cannot_hold(master_receives: bool, test: &str) {
    let (m, s) = connect_pair(sock_addr(test));
    let mut p = Pair {
        m,
        s,
        master_receives,
    };
    let mut rx = p.receiver_queue();
    let mut out = [memif::HeldRx::default(); 64];
    assert_eq!(rx.receive_held(&mut out, 1024), 0, "nothing before holding");
    let held = rx.enable_holding();
    // Held; too long for the limit; chained (5000 bytes span three 2048-byte buffers); held.
    let frames = vec![frame(1, 100), frame(2, 1500), frame(3, 5000), frame(4, 60)];
    let slots_used = 1 + 1 + 3 + 1;
    assert_eq!(p.send(&frames), frames.len());
    wait_for("the first frame", 10, || {
        rx.receive_held(&mut out, 1024) > 0
    });
    assert_eq!(out[0].len, 100);
    assert_eq!(held_bytes(&held, out[0].token, 100), frames[0]);
    let mut tokens = vec![out[0].token];
    assert_eq!(
        rx.receive_held(&mut out, 1024),
        0,
        "stops before a frame longer than the limit"
    );
    let mut sink = Holder::default();
    assert_eq!(rx.receive_holding(1, &mut sink), 1);
    assert_eq!(sink.held.len(), 1, "the long frame, held the general way");
    assert_eq!(held_bytes(&held, sink.held[0].0, 1500), frames[1]);
    tokens.push(sink.held[0].0);
    assert_eq!(
        rx.receive_held(&mut out, 1024),
        0,
        "stops before a chained frame"
    );
    assert_eq!(rx.receive_holding(1, &mut sink), 1);
    assert_eq!(sink.copied, frames[2..3], "the chained frame, copied");
    assert_eq!(rx.receive_held(&mut out, 1024), 1);
    assert_eq!(held_bytes(&held, out[0].token, 60), frames[3]);
    tokens.push(out[0].token);
    assert_eq!(held.in_flight(), 3);
    assert_eq!(rx.receive_held(&mut out, 1024), 0, "the ring is empty");
    // The sender has SLOTS - slots_used free slots until the held frames go back.
    let fill: Vec<Vec<u8>> = (0..SLOTS as u32).map(|k| frame(100 + k, 64)).collect();
    held.release_many(&tokens);
    assert_eq!(held.in_flight(), 0);
    rx.give_back();
    assert_eq!(
        p.send(&fill),
        SLOTS,
        "every slot back ({slots_used} were used)"
    );
    assert_eq!(held.bad_releases(), 0);
}

#[test]
fn a_master_fast_path_holds_what_it_can_and_leaves_the_rest() {
    the_fast_path_stops_at_what_it_cannot_hold(true, "hold_fast_master");
}

#[test]
fn a_slave_fast_path_holds_what_it_can_and_leaves_the_rest() {
    the_fast_path_stops_at_what_it_cannot_hold(false, "hold_fast_slave");
}
