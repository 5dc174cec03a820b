//! The interfaces: opening them on their sockets and waiting for their links.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use memif::Counters;
use nix::poll::{PollFd, PollFlags};

use crate::args::{interface_config, Args};
use crate::endpoint::{self, Endpoint, LinkWatch, RoleArg};

/// Which endpoint (index) and interface id a side uses.
#[derive(Debug, Clone, Copy)]
pub struct Use {
    pub ep: usize,
    pub id: u32,
}

/// The endpoints and which of them each side uses.
pub struct Plan {
    pub eps: Vec<Endpoint>,
    pub tx: Option<Use>,
    pub rx: Option<Use>,
}

/// Opens the endpoints: one per socket, except that a master socket used by both sides serves
/// both ids. Prints `listening tx|rx SOCKET` for every master side once all are ready.
pub fn open(args: &Args) -> Result<Plan, String> {
    if args.tx.is_none() && args.rx.is_none() {
        return Err("nothing to do: give --tx and/or --rx".into());
    }
    if args.expect_lossless && args.rx.is_none() && !args.same {
        return Err("--expect-lossless needs a receiving side (--rx or --loop)".into());
    }
    let mut eps = Vec::new();
    let tx = match &args.tx {
        Some(addr) => {
            let cfg = interface_config(args, args.tx_id, "traffic-tx");
            eps.push(Endpoint::open(args.tx_role, addr, cfg)?);
            Some(Use {
                ep: 0,
                id: args.tx_id,
            })
        }
        None => None,
    };
    let rx = match (&args.rx, args.same) {
        (_, true) => tx,
        (Some(addr), false) => {
            let cfg = interface_config(args, args.rx_id, "traffic-rx");
            let shared = args.rx_role == RoleArg::Master
                && eps.first().is_some_and(|e| e.is_master_on(addr));
            if shared {
                eps[0].add_master_interface(cfg)?;
            } else {
                eps.push(Endpoint::open(args.rx_role, addr, cfg)?);
            }
            Some(Use {
                ep: eps.len() - 1,
                id: args.rx_id,
            })
        }
        (None, false) => None,
    };
    for (side, role, addr) in [
        ("tx", args.tx_role, &args.tx),
        ("rx", args.rx_role, &args.rx),
    ] {
        if let (RoleArg::Master, Some(a)) = (role, addr) {
            println!("listening {side} {a}");
        }
    }
    Ok(Plan { eps, tx, rx })
}

/// Blocks until a control fd of any endpoint is readable or `timeout` passes.
fn wait_control(eps: &[Endpoint], timeout: Duration) {
    let mut fds: Vec<PollFd<'_>> = eps
        .iter()
        .flat_map(|e| e.control_fds())
        .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
        .collect();
    endpoint::block(&mut fds, timeout);
}

/// Waits until every interface in `want` is up, doing the control work; `abort` ends the wait
/// early.
pub fn wait_up(
    eps: &mut [Endpoint],
    want: &mut [(Use, &mut LinkWatch)],
    deadline: Instant,
    abort: &mut dyn FnMut() -> bool,
) -> Result<(), String> {
    loop {
        eps.iter_mut().for_each(Endpoint::poll);
        let mut all = true;
        for (u, watch) in want.iter_mut() {
            all &= watch.update(eps[u.ep].interface(u.id));
        }
        if all {
            return Ok(());
        }
        if abort() {
            return Err("stopped before the links came up".into());
        }
        if Instant::now() >= deadline {
            let why: Vec<String> = want
                .iter()
                .filter_map(|(u, _)| eps[u.ep].interface(u.id))
                .map(|i| format!("interface {}: {:?}", i.id(), i.link()))
                .collect();
            return Err(format!("links not up in time ({})", why.join("; ")));
        }
        wait_control(eps, Duration::from_millis(10));
    }
}

/// Waits (doing control work) until `flag` is set by the other thread.
pub fn wait_other(
    ep: &mut Endpoint,
    flag: &AtomicBool,
    deadline: Instant,
    abort: &mut dyn FnMut() -> bool,
) -> Result<(), String> {
    while !flag.load(Ordering::Acquire) {
        if abort() {
            return Err("stopped before the links came up".into());
        }
        if Instant::now() >= deadline {
            return Err("the other link did not come up in time".into());
        }
        ep.wait_and_poll(Duration::from_millis(2));
    }
    Ok(())
}

/// The counters of the interface a side used.
pub fn counters(eps: &[Endpoint], u: Option<Use>) -> Option<Counters> {
    u.and_then(|u| eps[u.ep].interface(u.id))
        .map(|i| i.counters())
}
