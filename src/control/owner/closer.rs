//! The owner's closer: closes what changes left to close that may wait in the kernel (see
//! `forwarder::closing`) on threads of its own, and only then answers the change that left it. The caller of a change that removed a kernel port
//! still finds it gone when answered; the owner meanwhile applies other clients' changes.

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::{Applied, ForwarderView, Reply};
use crate::forwarder::closing::Closing;
use crate::forwarder::ForwarderError;

/// A change's answer, sent once what it left is closed.
type Answer = (Reply, Result<Applied, ForwarderError>);

/// What one change (or housekeeping round) left: closed in this order, then answered.
struct Job {
    items: Vec<Closing>,
    /// The view the change replaced: it may hold the last handle on a port removed.
    replaced: Arc<ForwarderView>,
    answer: Option<Answer>,
}

impl Job {
    fn run(self) {
        drop(self.items);
        drop(self.replaced);
        answer(self.answer);
    }
}

fn answer(answer: Option<Answer>) {
    if let Some((reply, result)) = answer {
        let _ = reply.send(result);
    }
}

/// Closing threads: each close mostly waits in the kernel for RCU grace periods, which
/// overlap when several threads wait at once, so several changes' closes take about as long as
/// one.
const THREADS: usize = 4;

/// The closing threads, and the queue of what they have to close.
pub(super) struct Closer {
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl Closer {
    /// Starts the threads (without any, everything is closed on the owner's thread, as before
    /// there was a closer).
    pub(super) fn start() -> Closer {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let threads: Vec<JoinHandle<()>> = (0..THREADS)
            .filter_map(|i| {
                let queue = queue.clone();
                std::thread::Builder::new()
                    .name(format!("quiver-closing{i}"))
                    .spawn(move || {
                        // The lock is held only to take the next job (or to learn there is none).
                        let next = || queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        while let Ok(job) = next() {
                            job.run();
                        }
                    })
                    .inspect_err(|e| tracing::warn!(error = %e, "cannot start a closing thread"))
                    .ok()
            })
            .collect();
        Closer {
            jobs: (!threads.is_empty()).then_some(jobs),
            threads,
        }
    }

    /// Closes `items` and the `replaced` view, then sends `answer`: at once when there is
    /// nothing to close, else on a closing thread.
    pub(super) fn close(
        &self,
        items: Vec<Closing>,
        replaced: Arc<ForwarderView>,
        answer: Option<Answer>,
    ) {
        let job = Job {
            items,
            replaced,
            answer,
        };
        if job.items.is_empty() {
            return job.run();
        }
        match &self.jobs {
            Some(jobs) => {
                if let Err(mpsc::SendError(job)) = jobs.send(job) {
                    job.run();
                }
            }
            None => job.run(),
        }
    }

    /// Closes everything given so far, then stops the thread.
    pub(super) fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        drop(self.jobs.take());
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Closer {
    fn drop(&mut self) {
        self.stop();
    }
}
