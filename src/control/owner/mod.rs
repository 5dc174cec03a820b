//! The one owner of the running configuration.
//!
//! [`ConfigOwner`] runs a thread (`quiver-config`) that owns the [`Forwarder`]: nothing else
//! holds it. Every source of change — the admin API, NSM, tests — sends a typed [`Change`]
//! through a [`Control`] handle and waits for its result; the owner applies changes one at a
//! time, in arrival order, each through the forwarder's one commit path (plan, commit, worker
//! commands), and between them runs housekeeping (ARP learned by the workers, reclaiming
//! retired snapshots) through the same path. After every change it publishes a new
//! [`ForwarderView`]; readers (`show …`, metrics, NSM's link watcher) take the current view and
//! never wait behind a change in progress. The config path reads one way:
//! client → [`Change`] → owner → commit → workers.
//!
//! Why a thread with a queue and not a lock: a lock shared by every client let a slow change
//! (a veth created in another namespace, a worker command) stall every `show` and every metric
//! scrape, and gave no single place where changes happen in order. The queue makes the order
//! explicit and the owner the only writer; readers share immutable views.

mod change;
mod closer;
mod view;

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dataplane::{BufferPool, DataplaneObserver};

use crate::forwarder::{Forwarder, ForwarderError};
use closer::Closer;

pub use change::{Applied, Change};
pub use view::ForwarderView;

/// Why the configuration's owner is no longer running.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    /// It stopped: its housekeeping failed (the log says why).
    #[error("the configuration owner stopped (see the log)")]
    Stopped,
    /// Its thread panicked.
    #[error("the configuration owner's thread panicked")]
    Panicked,
    /// Its housekeeping failed, which stopped it (the forwarder is then dropped: workers
    /// stopped).
    #[error(transparent)]
    Housekeeping(#[from] ForwarderError),
}

/// How often the owner runs housekeeping when no change keeps it busy.
pub const HOUSEKEEPING_PERIOD: Duration = Duration::from_millis(5);

/// A look at the forwarder itself, run by the owner in turn with changes.
type Inspection = Box<dyn FnOnce(&Forwarder) + Send>;

/// Where a change's result goes.
type Reply = SyncSender<Result<Applied, ForwarderError>>;

enum Message {
    Change(Change, Reply),
    Inspect(Inspection),
    /// For tests: keep `item` to close as a change that removed a kernel port would.
    #[cfg(test)]
    Dispose(crate::forwarder::closing::Closing, Reply),
    Stop,
}

/// The owner's thread and the handle its clients use; [`ConfigOwner::stop`] gives the
/// forwarder back.
pub struct ConfigOwner {
    control: Control,
    thread: Option<JoinHandle<(Forwarder, Result<(), ForwarderError>)>>,
}

/// A client's handle on the owner: send changes, read views. Cheap to clone.
#[derive(Clone)]
pub struct Control {
    tx: Sender<Message>,
    view: Arc<RwLock<Arc<ForwarderView>>>,
    dataplane: DataplaneObserver,
    pool: Arc<BufferPool>,
}

impl ConfigOwner {
    /// Starts the owner of `forwarder`, running housekeeping every `housekeeping` period.
    pub fn start(forwarder: Forwarder, housekeeping: Duration) -> ConfigOwner {
        let view = Arc::new(RwLock::new(Arc::new(ForwarderView::of(&forwarder, None))));
        let (tx, rx) = mpsc::channel();
        let control = Control {
            tx,
            view: view.clone(),
            dataplane: forwarder.dataplane().observer(),
            pool: forwarder.dataplane().pool().clone(),
        };
        let mut forwarder = forwarder;
        forwarder.defer_closing();
        let thread = std::thread::Builder::new()
            .name("quiver-config".into())
            .spawn(move || run(forwarder, rx, view, housekeeping))
            .expect("cannot start the configuration owner's thread");
        ConfigOwner {
            control,
            thread: Some(thread),
        }
    }

    /// A handle for a client.
    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// Whether the owner still runs: `Err` with the reason when housekeeping failed and ended
    /// it.
    pub fn check(&self) -> Result<(), OwnerError> {
        match &self.thread {
            Some(t) if !t.is_finished() => Ok(()),
            _ => Err(OwnerError::Stopped),
        }
    }

    /// Stops the owner once the changes already sent are applied, and gives the forwarder back
    /// (or the housekeeping error that stopped it early, the forwarder then dropped: workers
    /// stopped).
    pub fn stop(mut self) -> Result<Forwarder, OwnerError> {
        let _ = self.control.tx.send(Message::Stop);
        let thread = self.thread.take().expect("stopped once");
        let (forwarder, ended) = thread.join().map_err(|_| OwnerError::Panicked)?;
        Ok(ended.map(|()| forwarder)?)
    }
}

impl Drop for ConfigOwner {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = self.control.tx.send(Message::Stop);
            let _ = t.join();
        }
    }
}

/// The owner's loop: changes in order, housekeeping between them, a new view after each. What a
/// change leaves to close that may wait in the kernel is closed by the [`Closer`], which then
/// answers the change: its caller waits for it, the next change does not.
fn run(
    mut f: Forwarder,
    rx: Receiver<Message>,
    view: Arc<RwLock<Arc<ForwarderView>>>,
    period: Duration,
) -> (Forwarder, Result<(), ForwarderError>) {
    // Only this thread writes the view: it is built beside the current one, and the lock is
    // held just for the swap. The view it replaces may hold the last handle on a port removed.
    let publish = |f: &Forwarder| {
        let current = view.read().unwrap_or_else(|e| e.into_inner()).clone();
        let next = Arc::new(ForwarderView::of(f, Some(&current)));
        *view.write().unwrap_or_else(|e| e.into_inner()) = next;
        current
    };
    let closer = Closer::start();
    let mut next_housekeeping = Instant::now() + period;
    loop {
        let wait = next_housekeeping.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Message::Change(change, reply)) => {
                let result = change.apply(&mut f);
                let replaced = publish(&f);
                closer.close(f.take_closing(), replaced, Some((reply, result)));
            }
            #[cfg(test)]
            Ok(Message::Dispose(item, reply)) => {
                f.dispose(item);
                let replaced = publish(&f);
                closer.close(f.take_closing(), replaced, Some((reply, Ok(Applied::Done))));
            }
            Ok(Message::Inspect(look)) => look(&f),
            Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => {
                retire(&view);
                closer.finish();
                return (f, Ok(()));
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if Instant::now() >= next_housekeeping {
            if let Err(e) = housekeeping(&mut f, &view, &publish, &closer) {
                retire(&view);
                closer.finish();
                return (f, Err(e));
            }
            next_housekeeping = Instant::now() + period;
        }
    }
}

/// One round of the forwarder's housekeeping, published when it changed something.
fn housekeeping(
    f: &mut Forwarder,
    view: &RwLock<Arc<ForwarderView>>,
    publish: &impl Fn(&Forwarder) -> Arc<ForwarderView>,
    closer: &Closer,
) -> Result<(), ForwarderError> {
    // A large route list left behind by the last change catches up here.
    let lagging = view.read().unwrap_or_else(|e| e.into_inner()).routes_due(f);
    match f.housekeeping() {
        Ok(changed) if changed || lagging => {
            let replaced = publish(f);
            closer.close(f.take_closing(), replaced, None);
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::error!(error = %e, "housekeeping failed: the configuration owner stops");
            Err(e)
        }
    }
}

/// Leaves the last view published without its ports: handles kept after the owner stops must
/// not pin them (a DPDK port's receive ring holds a thousand of the pool's buffers).
fn retire(view: &RwLock<Arc<ForwarderView>>) {
    let last = view
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .without_ports();
    *view.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(last);
}

impl Control {
    /// Applies `change` and returns what it made, once the data path applies it. Changes from
    /// every client are applied one at a time, in the order they arrive.
    pub fn apply(&self, change: Change) -> Result<Applied, ForwarderError> {
        let (reply, result) = mpsc::sync_channel(1);
        self.tx
            .send(Message::Change(change, reply))
            .map_err(|_| stopped())?;
        result.recv().map_err(|_| stopped())?
    }

    /// The current view of the configuration; never waits for a change in progress.
    pub fn view(&self) -> Arc<ForwarderView> {
        self.view.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The workers' counters and trace.
    pub fn dataplane(&self) -> &DataplaneObserver {
        &self.dataplane
    }

    /// The buffer pool.
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }

    /// Runs `look` on the forwarder itself, on the owner's thread, after the changes sent
    /// before it: for what no view holds (tests' deeper checks, start-up questions). Readers of
    /// what `show` prints use [`Control::view`], which never waits.
    pub fn inspect<R: Send + 'static>(
        &self,
        look: impl FnOnce(&Forwarder) -> R + Send + 'static,
    ) -> Result<R, ForwarderError> {
        let (reply, result) = mpsc::sync_channel(1);
        let look: Inspection = Box::new(move |f| {
            let _ = reply.send(look(f));
        });
        self.tx
            .send(Message::Inspect(look))
            .map_err(|_| stopped())?;
        result.recv().map_err(|_| stopped())
    }
}

#[cfg(test)]
impl Control {
    /// Has the owner keep `item` to close as a change that removed a kernel port would; the
    /// answer comes on the returned channel once it is closed.
    fn dispose_for_test(
        &self,
        item: crate::forwarder::closing::Closing,
    ) -> mpsc::Receiver<Result<Applied, ForwarderError>> {
        let (reply, result) = mpsc::sync_channel(1);
        let _ = self.tx.send(Message::Dispose(item, reply));
        result
    }
}

fn stopped() -> ForwarderError {
    ForwarderError::Unavailable("the forwarder has stopped".into())
}

/// A forwarder with no ports and one worker on core 0, for unit tests.
#[cfg(test)]
pub(crate) fn test_forwarder() -> Forwarder {
    use crate::config::{Config, HugepageMode};
    let mut cfg = Config::default();
    cfg.buffers.count = 2048;
    cfg.buffers.hugepages = HugepageMode::Never;
    let pool = dataplane::BufferPool::new(&crate::forwarder::pool_config(&cfg)).unwrap();
    let workers = dataplane::WorkerConfig {
        cores: vec![0],
        idle: crate::config::IdleMode::Adaptive.into(),
    };
    Forwarder::start(&cfg, &workers, pool).unwrap()
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
