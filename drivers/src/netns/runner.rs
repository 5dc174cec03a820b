//! The threads [`super::NetNs::run`] runs closures on: kept between calls, so that a call costs
//! a hand-off to a waiting thread (a few microseconds) rather than a thread spawn and join
//! (tens to hundreds of microseconds, more on a busy machine).
//!
//! - A call takes an idle thread, or spawns one when none is idle: concurrent calls, and calls
//!   made from inside a running closure, each get a thread of their own (none waits for
//!   another's closure, none can deadlock on one).
//! - A thread goes back to the idle ones when its closure returned; one idle for [`IDLE`]
//!   ends. Each closure enters the namespace it needs itself, so a thread can serve any
//!   namespace (it stays in the last one until its next call or its end).
//! - The caller waits until the closure has run, or was dropped unrun, before returning: that
//!   is what lets the closure borrow from the caller's stack.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// How long an idle thread waits for another call before it ends.
pub const IDLE: Duration = Duration::from_secs(2);

/// A closure handed to a thread, with where the caller waits for it.
struct Job {
    work: Option<Box<dyn FnOnce() + Send + 'static>>,
    /// Dropped (closed) when the job ran or was dropped: the caller may return then.
    done: Option<mpsc::SyncSender<()>>,
}

impl Job {
    fn run(mut self) {
        if let Some(work) = self.work.take() {
            work();
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // The work, and everything it borrows, goes first; only then is the caller released.
        drop(self.work.take());
        drop(self.done.take());
    }
}

/// An idle thread: where to send it a job, and its number (to find it again).
struct Idle {
    id: u64,
    jobs: mpsc::Sender<Job>,
}

struct Pool {
    idle: Vec<Idle>,
    next_id: u64,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    idle: Vec::new(),
    next_id: 0,
});

fn pool() -> MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Threads spawned so far (for tests and diagnostics).
static SPAWNED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Threads waiting for a call now.
pub fn idle_threads() -> usize {
    pool().idle.len()
}

/// Threads spawned since the process started.
pub fn threads_spawned() -> u64 {
    SPAWNED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Runs `f` on a pooled thread and returns its result (a panic in `f` is resumed here); an
/// error only when no thread could be had.
pub fn run<T, F>(f: F) -> std::io::Result<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let result: Mutex<Option<std::thread::Result<T>>> = Mutex::new(None);
    let slot = &result;
    let work = move || {
        let r = catch_unwind(AssertUnwindSafe(f));
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    };
    let work: Box<dyn FnOnce() + Send + '_> = Box::new(work);
    // SAFETY: only the lifetime is changed (same fat pointer). The closure borrows `result`
    // and whatever `f` borrows, all of which outlive this call: the job that owns the closure
    // closes `done` only after the closure ran or was dropped (`Job::drop` drops the work
    // first), and this function does not return before `done` is closed (`finished.recv()`
    // below, which returns on the send or when the sender is dropped) — on every path,
    // including a job dropped unrun because its thread could not start.
    let work: Box<dyn FnOnce() + Send + 'static> = unsafe {
        std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Box<dyn FnOnce() + Send + 'static>>(
            work,
        )
    };
    let (done, finished) = mpsc::sync_channel::<()>(1);
    let job = Job {
        work: Some(work),
        done: Some(done),
    };
    let handed = hand_off(job);
    // Whether handed off or dropped by a failed spawn: wait until the job is gone.
    let _ = finished.recv();
    handed?;
    let r = result
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .ok_or_else(|| std::io::Error::other("the namespace thread dropped the call unrun"))?;
    match r {
        Ok(v) => Ok(v),
        Err(panic) => resume_unwind(panic),
    }
}

/// Gives `job` to an idle thread, or to a new one.
fn hand_off(job: Job) -> std::io::Result<()> {
    let mut job = job;
    let id = {
        let mut p = pool();
        // Sent under the lock: a thread ending on its idle timeout checks, under the lock too,
        // whether it was taken (then a job is waiting for it).
        while let Some(idle) = p.idle.pop() {
            match idle.jobs.send(job) {
                Ok(()) => return Ok(()),
                // Cannot happen (a thread leaves the idle list before it ends); try another.
                Err(mpsc::SendError(j)) => job = j,
            }
        }
        p.next_id += 1;
        p.next_id
    };
    let (tx, rx) = mpsc::channel();
    SPAWNED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::thread::Builder::new()
        .name("quiver-netns".into())
        .spawn(move || serve(id, tx, rx, job))
        .map(drop)
}

/// A pooled thread: runs `first`, then whatever it is handed while it is idle.
fn serve(id: u64, me: mpsc::Sender<Job>, jobs: mpsc::Receiver<Job>, first: Job) {
    first.run();
    loop {
        pool().idle.push(Idle {
            id,
            jobs: me.clone(),
        });
        let job = match jobs.recv_timeout(IDLE) {
            Ok(job) => job,
            Err(_) => {
                let mut p = pool();
                match p.idle.iter().position(|i| i.id == id) {
                    Some(k) => {
                        p.idle.remove(k);
                        return;
                    }
                    // Taken after the timeout: the job was sent under the lock, it is there.
                    None => match jobs.try_recv() {
                        Ok(job) => job,
                        Err(_) => return,
                    },
                }
            }
        };
        job.run();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closures_borrow_return_and_panic_through_the_pool() {
        let text = String::from("borrowed");
        assert_eq!(run(|| text.len()).unwrap(), 8);
        let me = std::thread::current().id();
        assert_ne!(run(|| std::thread::current().id()).unwrap(), me);
        // The thread goes back to the idle ones once the closure returned; the next call
        // takes it instead of spawning one. The pool is the process's: a test running beside
        // this one may take the idle thread first, so a few tries are allowed.
        let reused = (0..20).any(|_| {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while idle_threads() == 0 {
                assert!(std::time::Instant::now() < deadline, "no thread was kept");
                std::thread::sleep(Duration::from_millis(1));
            }
            let spawned = threads_spawned();
            let name = run(|| std::thread::current().name().map(String::from)).unwrap();
            assert_eq!(name.as_deref(), Some("quiver-netns"));
            threads_spawned() == spawned
        });
        assert!(reused, "an idle thread was never reused");

        // A call from inside a call gets a thread of its own.
        let nested = run(|| run(|| 41).unwrap() + 1).unwrap();
        assert_eq!(nested, 42);

        // Concurrent calls all complete.
        let sum: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4usize)
                .map(|i| s.spawn(move || run(move || i * 10).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(sum, 60);

        let panicked = std::panic::catch_unwind(|| run(|| panic!("inside")));
        assert!(panicked.is_err(), "the panic reaches the caller");
        // The pool still works after a panic.
        assert_eq!(run(|| 7).unwrap(), 7);
    }
}
