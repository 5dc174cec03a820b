//! What the run-time port tests share: a forwarder with two workers, memif sections and
//! slaves of our memif crate, and numbered frames checked for loss, order and content.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dataplane::{BufferPool, BufferPoolConfig, HugepagePolicy, IdlePolicy, WorkerConfig};
use drivers::LinkStatus;
use memif::{InterfaceConfig, Mode, Slave, SocketAddress};
use quiver::config::PortSection;
use quiver::{Config, Forwarder};
use testkit::wait_for;

pub(crate) const WORKERS: usize = 2;

pub(crate) fn socket(test: &str, n: u32) -> PathBuf {
    std::env::temp_dir().join(format!("quiver-rt-{}-{test}-{n}.sock", std::process::id()))
}

/// A `[[port]]` section from its TOML keys.
pub(crate) fn port(keys: &str) -> PortSection {
    Config::parse(&format!("[[port]]\n{keys}"))
        .unwrap()
        .port
        .remove(0)
}

/// A memif master section with a queue pair per worker.
pub(crate) fn memif_master(name: &str, sock: &std::path::Path, id: u32) -> PortSection {
    port(&format!(
        "name = \"{name}\"\ntype = \"memif\"\nrole = \"master\"\nsocket = \"{}\"\nid = {id}\nqueues = {WORKERS}\n",
        sock.display()
    ))
}

/// A forwarder with `WORKERS` workers over the ports and cross-connects of `toml`.
pub(crate) fn start(toml: &str) -> (Forwarder, Arc<BufferPool>) {
    let cfg = Config::parse(&format!("[buffers]\nhugepages = \"never\"\n{toml}")).unwrap();
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 16 * 1024,
        hugepages: HugepagePolicy::Never,
        ..BufferPoolConfig::default()
    })
    .unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = WorkerConfig {
        cores: (0..WORKERS).map(|w| w % cores).collect(),
        idle: IdlePolicy::ADAPTIVE,
    };
    let f = Forwarder::start(&cfg, &workers, pool.clone()).unwrap();
    (f, pool)
}

pub(crate) fn slave(sock: &std::path::Path, id: u32) -> Slave {
    slave_in(sock, id, Mode::Ethernet)
}

pub(crate) fn slave_in(sock: &std::path::Path, id: u32, mode: Mode) -> Slave {
    let mut c = InterfaceConfig::new(id);
    c.queue_pairs = WORKERS as u16;
    c.mode = mode;
    Slave::new(SocketAddress::Path(sock.to_path_buf()), c).unwrap()
}

/// Waits for the `slaves` and for the ports `names`, whose links `link` tells, to be up.
pub(crate) fn links_up(
    link: impl Fn(&str) -> Option<LinkStatus>,
    names: &[&str],
    slaves: &mut [&mut Slave],
) {
    wait_for("memif links up", 20, || {
        for s in slaves.iter_mut() {
            s.poll().unwrap();
        }
        slaves.iter().all(|s| s.interface().is_up())
            && names.iter().all(|n| link(n) == Some(LinkStatus::Up))
    });
}

/// A port's link, read from a forwarder the test shares through a mutex.
pub(crate) fn link_of(f: &Mutex<Forwarder>) -> impl Fn(&str) -> Option<LinkStatus> + '_ {
    move |n| f.lock().unwrap().port(n).map(|e| e.port.link())
}

/// A frame of flow `flow` on queue `q` with sequence `seq`, every byte derived from them.
pub(crate) fn frame(flow: u8, q: u8, seq: u32) -> Vec<u8> {
    let len = 60 + (seq as usize * 7) % 200;
    let mut f: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seq) as u8 ^ q ^ flow)
        .collect();
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xbb]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xaa]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[14] = flow;
    f[15] = q;
    f[16..20].copy_from_slice(&seq.to_be_bytes());
    f
}

/// What one direction of a flow has done so far.
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct Flow {
    pub(crate) sent: [u32; WORKERS],
    pub(crate) received: [u32; WORKERS],
}

impl Flow {
    pub(crate) fn total_sent(&self) -> u64 {
        self.sent.iter().map(|&n| n as u64).sum()
    }
    pub(crate) fn total_received(&self) -> u64 {
        self.received.iter().map(|&n| n as u64).sum()
    }
}

/// One step of flow `id` from `from` to `to`: sends a few frames on every queue (at most 128
/// in flight, so no ring overflows) and receives, checking every frame arrives once, intact and
/// in order. With `send == false` only receives.
pub(crate) fn step(id: u8, from: &mut Slave, to: &mut Slave, flow: &mut Flow, send: bool) {
    for q in 0..WORKERS {
        if send && flow.sent[q] - flow.received[q] < 128 {
            let batch: Vec<Vec<u8>> = (flow.sent[q]..flow.sent[q] + 32)
                .map(|s| frame(id, q as u8, s))
                .collect();
            let refs: Vec<&[u8]> = batch.iter().map(|f| &f[..]).collect();
            flow.sent[q] += from.interface_mut().tx_burst(q, &refs) as u32;
        }
        let next = &mut flow.received[q];
        to.interface_mut().rx_burst(q, 256, &mut |got: &[u8]| {
            let (fid, fq) = (got[14], got[15]);
            let seq = u32::from_be_bytes(got[16..20].try_into().unwrap());
            assert_eq!((fid, usize::from(fq)), (id, q), "frame of another flow");
            assert_eq!(
                seq, *next,
                "flow {id} queue {q}: lost, duplicated or reordered"
            );
            assert_eq!(
                got,
                &frame(fid, fq, seq)[..],
                "flow {id} queue {q}: corrupted"
            );
            *next += 1;
        });
    }
}
