//! Worker commands: receive queues attached to and detached from running workers' `port-input`
//! nodes, each command run on its worker's own thread and acknowledged before `command`
//! returns.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dataplane::buffer::{BufferPool, BufferPoolConfig, HugepagePolicy};
use dataplane::harness::{PacketSink, ScriptedRx};
use dataplane::{
    CommandError, Dataplane, GraphBuilder, IdlePolicy, PortsInput, WorkerCommand, WorkerConfig,
    WorkerError, PORT_INPUT,
};

type Script = Arc<Mutex<VecDeque<Vec<u8>>>>;

fn cores() -> Vec<usize> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    vec![0, 1 % n]
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// The interfaces worker `w`'s `port-input` polls.
fn polled(dp: &Dataplane<()>) -> Vec<Vec<u32>> {
    let seen = Arc::new(Mutex::new(vec![Vec::new(); dp.worker_count()]));
    let s = seen.clone();
    dp.command(move |_| {
        let s = s.clone();
        Box::new(move |w| {
            let input = w.graph.node_mut::<PortsInput>(PORT_INPUT).unwrap();
            s.lock().unwrap()[w.worker] = input.interfaces().collect();
            Ok(())
        })
    })
    .unwrap();
    let v = seen.lock().unwrap().clone();
    v
}

#[test]
fn queues_are_attached_and_detached_on_running_workers_which_acknowledge_each_command() {
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 4096,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap();
    let start_free = pool.free_count();
    let sinks = Arc::new(Mutex::new(Vec::new()));
    let s = sinks.clone();
    let config = WorkerConfig {
        cores: cores(),
        idle: IdlePolicy::ADAPTIVE,
    };
    let dp = Dataplane::start(&config, pool.clone(), (), move |_| {
        let mut b = GraphBuilder::new();
        b.add(PortsInput::new(PORT_INPUT, "sink"));
        let sink = PacketSink::new("sink");
        s.lock().unwrap().push(sink.report());
        b.add(sink);
        b.build().map_err(|e| e.to_string())
    })
    .unwrap();
    let received = || -> u64 { sinks.lock().unwrap().iter().map(|r| r.packets()).sum() };
    assert_eq!(polled(&dp), vec![Vec::<u32>::new(); 2]);

    // Attach a queue as interface 7 on every worker; each command runs on its worker's thread.
    let scripts: Arc<Mutex<Vec<Script>>> = Arc::default();
    let sc = scripts.clone();
    dp.command(move |_| -> WorkerCommand<()> {
        let (rx, script) = ScriptedRx::new();
        sc.lock().unwrap().push(script);
        Box::new(move |w| {
            let thread = std::thread::current().name().unwrap_or("").to_string();
            if thread != format!("quiver-wk{}", w.worker) {
                return Err(WorkerError::other(format!("ran on {thread}")));
            }
            let input = w.graph.node_mut::<PortsInput>(PORT_INPUT).unwrap();
            assert!(input.attach(7, Box::new(rx)));
            Ok(())
        })
    })
    .unwrap();
    assert_eq!(polled(&dp), vec![vec![7]; 2]);
    let scripts: Vec<Script> = std::mem::take(&mut *scripts.lock().unwrap());
    for s in &scripts {
        s.lock().unwrap().extend((0..500).map(|_| vec![0u8; 64]));
    }
    wait_until("every frame polled", || received() == 1000);

    // A command that fails on one worker says which.
    let failed = dp.command(|w| -> WorkerCommand<()> {
        Box::new(move |_| {
            if w == 1 {
                Err(WorkerError::other("refused"))
            } else {
                Ok(())
            }
        })
    });
    match failed {
        Err(CommandError::Failed { worker, source }) => {
            assert_eq!((worker, source.to_string()), (1, "refused".to_string()))
        }
        other => panic!("expected worker 1 to refuse: {other:?}"),
    }

    // Detach: when `command` returns, no worker holds the queue any more.
    dp.command(|_| -> WorkerCommand<()> {
        Box::new(|w| {
            let input = w.graph.node_mut::<PortsInput>(PORT_INPUT).unwrap();
            assert!(input.detach(7).is_some());
            assert!(input.detach(7).is_none());
            Ok(())
        })
    })
    .unwrap();
    assert_eq!(polled(&dp), vec![Vec::<u32>::new(); 2]);
    for s in &scripts {
        assert_eq!(Arc::strong_count(s), 1, "the worker dropped its queue");
    }
    dp.stop();
    assert_eq!(pool.free_count(), start_free);
}
