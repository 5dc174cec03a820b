//! Workers: pinning, clean start and stop, configuration swaps under traffic, trace arming.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::harness::{
    PacketSink, PacketSource, PassThrough, SinkReport, SourceConfig, SourceReport,
};
use dataplane::{
    Context, Dataplane, Frame, GraphBuilder, IdlePolicy, Next, Node, NodeSpec, StartError,
    WorkerConfig,
};
use nix::sched::sched_getaffinity;
use nix::unistd::Pid;

fn pool(buffers: u32) -> Arc<BufferPool> {
    BufferPool::new(&BufferPoolConfig {
        buffers,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap()
}

/// The first two CPUs this process may run on (the same one twice on a one-CPU machine).
fn two_cores() -> Vec<usize> {
    let set = sched_getaffinity(Pid::from_raw(0)).unwrap();
    let cores: Vec<usize> = (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect();
    vec![cores[0], *cores.get(1).unwrap_or(&cores[0])]
}

/// Waits (yielding, bounded) until `cond` holds.
fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

fn config(cores: Vec<usize>) -> WorkerConfig {
    WorkerConfig {
        cores,
        idle: IdlePolicy::Sleep {
            after: 1000,
            sleep: Duration::from_micros(100),
        },
    }
}

#[test]
fn workers_are_pinned_and_stop_leaves_nothing_running() {
    let cores = two_cores();
    let pool = pool(2048);
    let dp = Dataplane::start(&config(cores.clone()), pool.clone(), (), |init| {
        let mut src = SourceConfig::new("src", "sink", vec![vec![0; 64]]);
        src.rate_pps = Some(100_000);
        src.first_sequence = init.index as u64;
        let mut b = GraphBuilder::new();
        b.add(PacketSource::new(src)).add(PacketSink::new("sink"));
        b.build().map_err(|e| e.to_string())
    })
    .expect("start");
    let threads = dp.worker_threads();
    assert_eq!(threads.len(), 2);
    for (&(tid, core), &want) in threads.iter().zip(&cores) {
        assert_eq!(core, want);
        let set = sched_getaffinity(Pid::from_raw(tid)).expect("affinity of a worker thread");
        let allowed: Vec<usize> = (0..nix::sched::CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect();
        assert_eq!(
            allowed,
            vec![want],
            "worker thread {tid} pinned to exactly core {want}"
        );
        assert!(std::path::Path::new(&format!("/proc/self/task/{tid}")).exists());
    }
    wait_until("traffic on both workers", Duration::from_secs(30), || {
        dp.runtime()
            .workers
            .iter()
            .all(|w| w.node("sink").unwrap().packets > 0)
    });
    dp.stop();
    // The join returns once a thread has cleared its tid, a moment before the kernel reaps the
    // task and its /proc entry: wait for the entry to go (a thread left running never does).
    for (tid, _) in threads {
        wait_until(
            &format!("worker thread {tid} gone after stop"),
            Duration::from_secs(10),
            || !std::path::Path::new(&format!("/proc/self/task/{tid}")).exists(),
        );
    }
    assert_eq!(pool.in_use_count(), 0, "workers gave back every buffer");
}

#[test]
fn a_failed_graph_build_stops_the_workers_already_started() {
    let pool = pool(1024);
    let tids: Arc<std::sync::Mutex<Vec<i32>>> = Arc::default();
    let seen = tids.clone();
    let err = Dataplane::start(&config(two_cores()), pool.clone(), (), move |init| {
        seen.lock().unwrap().push(nix::unistd::gettid().as_raw());
        if init.index == 1 {
            return Err("no such port".to_string());
        }
        let mut b = GraphBuilder::new();
        b.add(PacketSource::new(SourceConfig::new(
            "src",
            "sink",
            vec![vec![0; 60]],
        )))
        .add(PacketSink::new("sink"));
        b.build().map_err(|e| e.to_string())
    })
    .err()
    .expect("start must fail");
    assert!(matches!(err, StartError::Build { worker: 1, .. }), "{err}");
    assert!(err.to_string().contains("no such port"));
    let tids = tids.lock().unwrap().clone();
    assert_eq!(tids.len(), 2, "both workers ran their builder");
    for tid in tids {
        assert!(
            !std::path::Path::new(&format!("/proc/self/task/{tid}")).exists(),
            "worker thread {tid} left running"
        );
    }
    assert_eq!(pool.in_use_count(), 0);

    let err = Dataplane::start(&config(vec![usize::MAX / 2]), pool, (), |_| {
        GraphBuilder::new().build()
    })
    .err()
    .expect("pinning to a core that does not exist fails");
    assert!(matches!(err, StartError::Pin { .. }), "{err}");
}

/// The configuration the swap test publishes: which path packets take, and a drop counter.
struct Routing {
    version: u64,
    via_b: bool,
    dropped: Arc<AtomicUsize>,
}
impl Drop for Routing {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// Sends the frame to `path-a` or `path-b` as the current snapshot says; counts version changes.
struct Select {
    last_version: u64,
    changes: Arc<AtomicU64>,
}
impl Node<Routing> for Select {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal("select").nexts(&["path-a", "path-b"])
    }
    fn process(&mut self, cx: &mut Context<'_, Routing>, frame: &mut Frame) -> usize {
        let state = cx.state();
        if state.version != self.last_version {
            self.last_version = state.version;
            self.changes.fetch_add(1, Ordering::Relaxed);
        }
        let next = if state.via_b {
            Next::declared(1)
        } else {
            Next::declared(0)
        };
        let n = frame.len();
        cx.enqueue_frame(next, frame);
        n
    }
}

/// One worker's source, sink and snapshot-change count.
type WorkerReports = (usize, Arc<SourceReport>, Arc<SinkReport>, Arc<AtomicU64>);

#[test]
fn ten_thousand_config_swaps_under_traffic_lose_and_duplicate_nothing() {
    const PER_WORKER: u64 = 4_000_000;
    // Odd: the last snapshot sends via path-b, so frames after the swaps take it.
    const SWAPS: u64 = 10_001;
    let pool = pool(8192);
    let dropped = Arc::new(AtomicUsize::new(0));
    let reports: Arc<std::sync::Mutex<Vec<WorkerReports>>> = Default::default();
    let collected = reports.clone();
    let initial = Routing {
        version: 0,
        via_b: false,
        dropped: dropped.clone(),
    };
    let workers = WorkerConfig {
        cores: two_cores(),
        idle: IdlePolicy::Poll,
    };
    let dp = Dataplane::start(&workers, pool.clone(), initial, move |init| {
        let first = init.index as u64 * PER_WORKER;
        let mut src = SourceConfig::new("src", "select", vec![vec![0xab; 64]]);
        src.sequence_offset = Some(16);
        src.first_sequence = first;
        src.limit = Some(PER_WORKER);
        let source = PacketSource::new(src);
        let sink = PacketSink::new("sink").with_sequence(16, first, PER_WORKER);
        let changes = Arc::new(AtomicU64::new(0));
        collected.lock().unwrap().push((
            init.index,
            source.report(),
            sink.report(),
            changes.clone(),
        ));
        let mut b = GraphBuilder::new();
        b.add(source)
            .add(Select {
                last_version: 0,
                changes,
            })
            .add(PassThrough::new("path-a", "sink"))
            .add(PassThrough::new("path-b", "sink"))
            .add(sink);
        b.build().map_err(|e| e.to_string())
    })
    .unwrap();
    let reports = reports.lock().unwrap().clone();
    let sent = || reports.iter().map(|r| r.1.sent()).sum::<u64>();
    // Traffic has gone through the first snapshot's path before anything is swapped (a worker
    // the OS starves must not see only later snapshots).
    wait_until("traffic through path-a", Duration::from_secs(30), || {
        dp.runtime()
            .summed()
            .node("path-a")
            .is_some_and(|n| n.packets > 0)
    });
    let sent_before = sent();
    for v in 1..=SWAPS {
        dp.publish(Routing {
            version: v,
            via_b: v % 2 == 1,
            dropped: dropped.clone(),
        });
    }
    let sent_during = sent() - sent_before;
    // What each worker had still to send once the last snapshot was published: a worker with
    // more than two vectors left sends some in a loop pass that reads a new snapshot.
    let left_after: Vec<u64> = reports.iter().map(|r| PER_WORKER - r.1.sent()).collect();
    let must_see = |left: u64| left > 2 * 256;
    assert!(
        left_after.iter().any(|&l| must_see(l)),
        "the traffic ended with the swaps ({left_after:?} left): raise PER_WORKER"
    );
    // Old snapshots are freed while the workers run, not only when they stop.
    dp.synchronize();
    dp.reclaim();
    assert_eq!(
        dp.pending_reclaim(),
        0,
        "every replaced snapshot freed once workers moved on"
    );
    eprintln!("sent before swaps {sent_before}, during {sent_during}; left after {left_after:?}");
    wait_until("all packets delivered", Duration::from_secs(120), || {
        reports.iter().all(|r| r.2.packets() >= PER_WORKER)
    });
    let rt = dp.runtime();
    dp.stop();

    assert!(
        sent_during > 0,
        "traffic flowed while snapshots were published"
    );
    for ((index, src, sink, changes), &left) in reports.iter().zip(&left_after) {
        assert_eq!(src.sent(), PER_WORKER);
        assert_eq!(
            sink.packets(),
            PER_WORKER,
            "worker {index}: packets lost or duplicated"
        );
        assert_eq!(sink.missing(PER_WORKER), 0, "worker {index}: lost packets");
        assert_eq!(sink.duplicates(), 0, "worker {index}: duplicated packets");
        assert_eq!(sink.out_of_range(), 0);
        eprintln!(
            "worker {index} saw {} snapshot changes",
            changes.load(Ordering::Relaxed)
        );
        if must_see(left) {
            assert!(
                changes.load(Ordering::Relaxed) >= 1,
                "worker {index} sent {left} packets after the swaps and saw no new snapshot"
            );
        }
    }
    let s = rt.summed();
    assert!(s.node("path-a").unwrap().packets > 0 && s.node("path-b").unwrap().packets > 0);
    assert_eq!(
        dropped.load(Ordering::SeqCst) as u64,
        SWAPS + 1,
        "every snapshot freed exactly once (the last when the data plane went away)"
    );
    assert_eq!(pool.in_use_count(), 0);
}

#[test]
fn trace_through_running_workers() {
    let pool = pool(2048);
    let dp = Dataplane::start(&config(two_cores()), pool.clone(), (), |_| {
        let mut src = SourceConfig::new("src", "p", vec![vec![1; 64]]);
        src.rate_pps = Some(50_000);
        let mut b = GraphBuilder::new();
        b.add(PacketSource::new(src))
            .add(PassThrough::new("p", "sink"))
            .add(PacketSink::new("sink"));
        b.build().map_err(|e| e.to_string())
    })
    .unwrap();
    assert!(
        dp.trace_add("sink", 5).is_err(),
        "only input nodes start a trace"
    );
    dp.trace_add("src", 5).unwrap();
    wait_until("5 traced packets", Duration::from_secs(30), || {
        dp.trace_show()
            .iter()
            .filter(|p| p.nodes.len() == 3)
            .count()
            == 5
    });
    let traced = dp.trace_show();
    assert_eq!(traced.len(), 5, "N is the total over all workers");
    for p in &traced {
        assert_eq!(p.nodes, ["src", "p", "sink"]);
    }
    dp.trace_clear();
    assert!(dp.trace_show().is_empty());
    dp.stop();
    assert_eq!(pool.in_use_count(), 0);
}

/// The CPUs the calling thread may run on.
fn my_cpus() -> Vec<usize> {
    let set = sched_getaffinity(Pid::from_raw(0)).unwrap();
    (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

#[test]
fn the_control_plane_keeps_off_the_worker_cores_and_its_threads_inherit_that() {
    let allowed = my_cpus();
    if allowed.len() < 2 {
        testkit::unavailable(
            "the_control_plane_keeps_off_the_worker_cores_and_its_threads_inherit_that",
            &format!("it needs two CPUs, this process may use {allowed:?}"),
        );
        return;
    }
    let worker_core = *allowed.last().unwrap();
    let control = dataplane::keep_off_worker_cores(&[worker_core])
        .unwrap()
        .expect("a CPU is left for the control plane");
    assert!(!control.contains(&worker_core));
    assert_eq!(control.len(), allowed.len() - 1);
    assert_eq!(my_cpus(), control);
    // A thread the control plane starts afterwards inherits it.
    assert_eq!(std::thread::spawn(my_cpus).join().unwrap(), control);
    // The worker, started from the control plane, still runs on its core, and only there.
    let dp = Dataplane::start(&config(vec![worker_core]), pool(1024), (), |_| {
        let mut b = GraphBuilder::new();
        b.add(PacketSink::new("sink"));
        b.build().map_err(|e| e.to_string())
    })
    .expect("start");
    let threads = dp.worker_threads();
    assert_eq!(threads.len(), 1);
    let set = sched_getaffinity(Pid::from_raw(threads[0].0)).unwrap();
    let worker_cpus: Vec<usize> = (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect();
    assert_eq!(worker_cpus, vec![worker_core]);
    dp.stop();
    // When the workers take every CPU the thread may use, nothing changes.
    assert_eq!(dataplane::keep_off_worker_cores(&control).unwrap(), None);
    assert_eq!(my_cpus(), control);
}
