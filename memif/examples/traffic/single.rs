//! Both sides (or the only one) in one loop on the calling thread.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::endpoint::{Endpoint, LinkWatch, Stop};
use crate::endpoints::{counters, wait_up, Plan, Use};
use crate::report::{join_errors, Outcome};
use crate::rx::RxSide;
use crate::shared::Shared;
use crate::tx::TxSide;
use crate::{pin, CONTROL_EVERY};

/// How long a sender that is done waits for the peer to take its last frames off the ring.
const TX_LINGER: Duration = Duration::from_secs(1);

/// Both sides (or the only one) driven from one loop on the calling thread.
struct SingleLoop<'a> {
    eps: &'a mut [Endpoint],
    tx: Option<(Use, &'a mut TxSide)>,
    rx: Option<(Use, &'a mut RxSide)>,
    shared: &'a Shared,
}

impl SingleLoop<'_> {
    /// Waits for the links, then passes until the run is over.
    fn run(mut self, stop: &mut Stop, deadline: Instant) -> Result<(), String> {
        self.connect(stop, deadline)?;
        if let Some((_, t)) = self.tx.as_mut() {
            t.start();
        }
        if let Some((_, r)) = self.rx.as_mut() {
            r.started = Some(Instant::now());
        }
        let mut passes = 0u32;
        while !self.pass() {
            passes = passes.wrapping_add(1);
            if passes.is_multiple_of(CONTROL_EVERY) {
                self.control(stop);
            }
        }
        Ok(())
    }

    /// Waits until the links of both sides (or the only one) are up.
    fn connect(&mut self, stop: &mut Stop, deadline: Instant) -> Result<(), String> {
        let mut want: Vec<(Use, &mut LinkWatch)> = Vec::new();
        if let Some((u, t)) = self.tx.as_mut() {
            want.push((*u, &mut t.link));
        }
        if let Some((u, r)) = self.rx.as_mut() {
            want.push((*u, &mut r.link));
        }
        wait_up(self.eps, &mut want, deadline, &mut || stop.requested())
    }

    /// One pass over both sides; returns whether the run is over.
    fn pass(&mut self) -> bool {
        let shared = self.shared;
        if let Some((u, t)) = self.tx.as_mut() {
            if !shared.tx_done.load(Ordering::Relaxed) {
                if t.finished() || t.error.is_some() || shared.stop.load(Ordering::Relaxed) {
                    t.end(shared);
                } else {
                    t.step(&mut self.eps[u.ep], shared);
                }
            }
        }
        let has_tx = self.tx.is_some();
        match self.rx.as_mut() {
            Some((u, r)) => {
                r.step(&mut self.eps[u.ep], shared);
                r.finished(shared, has_tx) || (!has_tx && shared.stop.load(Ordering::Relaxed))
            }
            None => {
                shared.tx_done.load(Ordering::Relaxed)
                    && self.tx.as_ref().is_none_or(|(u, t)| {
                        // A sender leaves once the peer took every frame off its ring (frames
                        // still there when the link goes are lost), or after TX_LINGER.
                        t.ended.is_some_and(|e| e.elapsed() >= TX_LINGER)
                            || self.eps[u.ep]
                                .interface(u.id)
                                .is_none_or(|i| i.tx_unconsumed(0) == 0)
                    })
            }
        }
    }

    /// Control work, link reports, stall and signal checks.
    fn control(&mut self, stop: &mut Stop) {
        self.eps.iter_mut().for_each(Endpoint::poll);
        if let Some((u, t)) = self.tx.as_mut() {
            t.link.update(self.eps[u.ep].interface(u.id));
            t.check_stall(self.shared);
        }
        if let Some((u, r)) = self.rx.as_mut() {
            r.link.update(self.eps[u.ep].interface(u.id));
        }
        if stop.requested() {
            self.shared.stop.store(true, Ordering::Release);
        }
    }
}

/// Sends and receives (or only one of them) in one loop on this thread.
pub fn run_single(
    args: &Args,
    mut plan: Plan,
    (mut tx, mut rx): (TxSide, RxSide),
    stop: &mut Stop,
    deadline: Instant,
) -> Result<Outcome, String> {
    pin(args.tx_cpu.or(args.rx_cpu))?;
    let shared = Shared::default();
    let single = SingleLoop {
        eps: &mut plan.eps,
        tx: plan.tx.map(|u| (u, &mut tx)),
        rx: plan.rx.map(|u| (u, &mut rx)),
        shared: &shared,
    };
    let r = single.run(stop, deadline);
    Ok(Outcome {
        error: join_errors(tx.error.clone(), r.err()),
        tx_counters: counters(&plan.eps, plan.tx),
        rx_counters: counters(&plan.eps, plan.rx),
        tx: plan.tx.map(|_| tx),
        rx: plan.rx.map(|_| rx),
        threads: false,
    })
}
