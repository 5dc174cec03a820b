//! A thread per side: the sender on a second thread, the receiver on the main one.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::args::Args;
use crate::endpoint::{Endpoint, Stop};
use crate::endpoints::{wait_other, wait_up, Use};
use crate::report::{join_errors, Outcome};
use crate::rx::RxSide;
use crate::shared::Shared;
use crate::tx::TxSide;
use crate::{pin, CONTROL_EVERY};

/// The sending thread: connect, wait for the receiver, send, publish the total.
fn tx_thread(
    mut ep: Endpoint,
    mut tx: TxSide,
    u: Use,
    shared: &Shared,
    deadline: Instant,
    cpu: Option<usize>,
) -> (TxSide, Endpoint) {
    let mut abort = || shared.stop.load(Ordering::Relaxed);
    let ready = pin(cpu)
        .and_then(|()| {
            let want = &mut [(Use { ep: 0, id: u.id }, &mut tx.link)];
            wait_up(std::slice::from_mut(&mut ep), want, deadline, &mut abort)
        })
        .and_then(|()| {
            shared.tx_up.store(true, Ordering::Release);
            wait_other(&mut ep, &shared.rx_up, deadline, &mut abort)
        });
    match ready {
        Ok(()) => {
            tx.start();
            tx_loop(&mut ep, &mut tx, u.id, shared);
        }
        Err(e) => {
            tx.error = Some(e);
            shared.stop.store(true, Ordering::Release);
        }
    }
    tx.end(shared);
    (tx, ep)
}

/// Sends until done, stopped or stalled.
fn tx_loop(ep: &mut Endpoint, tx: &mut TxSide, id: u32, shared: &Shared) {
    let mut passes = 0u32;
    while !tx.finished() {
        tx.step(ep, shared);
        passes = passes.wrapping_add(1);
        if passes.is_multiple_of(CONTROL_EVERY) {
            ep.poll();
            tx.link.update(ep.interface(id));
            tx.check_stall(shared);
            if shared.stop.load(Ordering::Relaxed) || tx.error.is_some() {
                break;
            }
        }
    }
}

/// The receiving thread (the main one, which also watches for signals).
fn rx_thread(
    ep: &mut Endpoint,
    rx: &mut RxSide,
    u: Use,
    shared: &Shared,
    stop: &mut Stop,
    deadline: Instant,
    cpu: Option<usize>,
) -> Result<(), String> {
    let mut abort = || {
        if stop.requested() {
            shared.stop.store(true, Ordering::Release);
        }
        shared.stop.load(Ordering::Relaxed)
    };
    let want = &mut [(Use { ep: 0, id: u.id }, &mut rx.link)];
    let r = pin(cpu)
        .and_then(|()| wait_up(std::slice::from_mut(ep), want, deadline, &mut abort))
        .and_then(|()| {
            shared.rx_up.store(true, Ordering::Release);
            wait_other(ep, &shared.tx_up, deadline, &mut abort)
        });
    if let Err(e) = r {
        shared.stop.store(true, Ordering::Release);
        return Err(e);
    }
    rx.started = Some(Instant::now());
    let mut passes = 0u32;
    loop {
        rx.step(ep, shared);
        if rx.finished(shared, true) {
            return Ok(());
        }
        passes = passes.wrapping_add(1);
        if passes.is_multiple_of(CONTROL_EVERY) {
            ep.poll();
            rx.link.update(ep.interface(u.id));
            if stop.requested() {
                shared.stop.store(true, Ordering::Release);
            }
        }
    }
}

/// Sends on a second thread and receives on this one (two endpoints: 0 sends, 1 receives).
pub fn run_threads(
    args: &Args,
    mut eps: Vec<Endpoint>,
    (tu, ru): (Use, Use),
    (tx, mut rx): (TxSide, RxSide),
    stop: &mut Stop,
    deadline: Instant,
) -> Result<Outcome, String> {
    let mut rx_ep = eps.pop().ok_or("no rx endpoint")?;
    let tx_ep = eps.pop().ok_or("no tx endpoint")?;
    let shared = Shared::default();
    let (tx, tx_ep, rx_result) = std::thread::scope(|s| {
        let shared = &shared;
        let h = s.spawn(move || tx_thread(tx_ep, tx, tu, shared, deadline, args.tx_cpu));
        let r = rx_thread(&mut rx_ep, &mut rx, ru, shared, stop, deadline, args.rx_cpu);
        let (tx, tx_ep) = h.join().expect("tx thread panicked");
        (tx, tx_ep, r)
    });
    Ok(Outcome {
        error: join_errors(tx.error.clone(), rx_result.err()),
        tx_counters: tx_ep.interface(tu.id).map(|i| i.counters()),
        rx_counters: rx_ep.interface(ru.id).map(|i| i.counters()),
        tx: Some(tx),
        rx: Some(rx),
        threads: true,
    })
}
