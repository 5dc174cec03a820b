//! The memif driver's own cut-through, driven by hand (no workers): `MemifPort::cut_through`
//! pairs one port's receive queue with another memif port's transmit queue, and the receive
//! queue, asked to bypass the graph (`receive_or_bypass`), sends its peer's frames straight
//! into the other peer's ring; asked to `receive` (what `port-input` does while traced or
//! capturing), after its flag is cleared, or once the other transmit queue is dropped, it
//! receives into Quiver buffers as usual. Refused for IP-mode ports and queues not taken.

use dataplane::BufferIndex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use dataplane::{BufferPool, BufferPoolConfig, HugepagePolicy, RxBurst, WorkerBuffers};
use drivers::memif_port::{MemifControl, MemifPort, MemifPortConfig};
use drivers::{LinkStatus, Port, QueuePair};
use memif::{InterfaceConfig, Mode, Role, Slave, SocketAddress};
use testkit::wait_for;

fn socket() -> SocketAddress {
    SocketAddress::Path(
        std::env::temp_dir().join(format!("quiver-memif-ct-{}.sock", std::process::id())),
    )
}

fn detail(port: &MemifPort, name: &str) -> u64 {
    port.stats()
        .detail
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

/// Frame `seq`: Ethernet, then bytes derived from `seq`, 60 to 1499 bytes long.
fn frame(seq: u32) -> Vec<u8> {
    let len = 60 + (seq as usize * 53) % 1440;
    let mut f: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(7).wrapping_add(seq) as u8)
        .collect();
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f
}

type Counted = Arc<Mutex<(u64, u64)>>;

/// A count callback adding to `c`.
fn count(c: &Counted) -> Box<dyn FnMut(u64, u64) + Send> {
    let c = c.clone();
    Box::new(move |packets, bytes| {
        let mut g = c.lock().unwrap();
        g.0 += packets;
        g.1 += bytes;
    })
}

/// Sends `frames` from `a` (its peer is the receive queue of `q`).
fn send(a: &mut Slave, frames: &[Vec<u8>]) {
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    assert_eq!(a.interface_mut().tx_burst(0, &refs), frames.len());
}

/// Polls `q` the way `port-input` does when it allows a bypass, until `n` frames were
/// bypassed or received; returns the total and the buffers received.
fn bypass(q: &mut QueuePair, wb: &mut WorkerBuffers, n: usize) -> (RxBurst, Vec<BufferIndex>) {
    let mut total = RxBurst::default();
    let mut got = Vec::new();
    wait_for("the frames at the receive queue", 10, || {
        let mut out = [BufferIndex::NONE; 256];
        let b = q.rx.receive_or_bypass(wb, &mut out);
        got.extend_from_slice(&out[..b.received]);
        total.received += b.received;
        total.bypassed += b.bypassed;
        total.received + total.bypassed >= n
    });
    (total, got)
}

/// What `b` received, once it has `n` frames.
fn at(b: &mut Slave, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    wait_for("the frames at the other peer", 10, || {
        b.interface_mut()
            .rx_burst(0, 256, &mut |f: &[u8]| got.push(f.to_vec()));
        got.len() >= n
    });
    got
}

#[test]
fn a_cut_through_sends_peer_to_peer_until_its_flag_clears_or_the_other_queue_goes() {
    let sock = socket();
    let control = MemifControl::start(1).unwrap();
    let port = |id: u32, mode| {
        let mut c = MemifPortConfig::new(&format!("memif{id}"), Role::Master, sock.clone(), id);
        c.mode = mode;
        control.add_port(c).unwrap()
    };
    let (pa, pb, pip) = (
        port(0, Mode::Ethernet),
        port(1, Mode::Ethernet),
        port(2, Mode::Ip),
    );
    assert!(control.port("memif1").is_some_and(|p| Arc::ptr_eq(&p, &pb)));
    assert!(control.port("memif9").is_none());
    let pool = BufferPool::new(&BufferPoolConfig {
        buffers: 1024,
        hugepages: HugepagePolicy::Never,
        ..BufferPoolConfig::default()
    })
    .unwrap();
    let mut wb = pool.worker_buffers();
    let counted: Counted = Arc::default();
    let on = Arc::new(AtomicBool::new(true));

    let mut qa = pa.queue_pair(0).unwrap();
    assert!(
        !pa.cut_through(0, &pb, count(&counted), on.clone()),
        "memif1's transmit queue is not taken yet"
    );
    let qb = pb.queue_pair(0).unwrap();
    let _qip = pip.queue_pair(0).unwrap();
    assert!(
        !pa.cut_through(0, &pip, count(&counted), on.clone()),
        "to IP mode"
    );
    assert!(
        !pip.cut_through(0, &pa, count(&counted), on.clone()),
        "from IP mode"
    );
    assert!(
        !pa.cut_through(1, &pb, count(&counted), on.clone()),
        "no worker 1"
    );
    assert!(pa.cut_through(0, &pb, count(&counted), on.clone()));

    let one_queue = |id| {
        let mut c = InterfaceConfig::new(id);
        c.queue_pairs = 1;
        Slave::new(sock.clone(), c).unwrap()
    };
    let (mut a, mut b) = (one_queue(0), one_queue(1));
    wait_for("links up", 20, || {
        a.poll().unwrap();
        b.poll().unwrap();
        a.interface().is_up()
            && b.interface().is_up()
            && pa.link() == LinkStatus::Up
            && pb.link() == LinkStatus::Up
    });

    // Peer to peer: no Quiver buffer, counted on both ports and by the callback.
    let sent: Vec<Vec<u8>> = (0..100).map(frame).collect();
    send(&mut a, &sent);
    let (burst, got) = bypass(&mut qa, &mut wb, 100);
    assert_eq!((burst.bypassed, burst.received), (100, 0));
    assert!(got.is_empty());
    assert!(
        at(&mut b, 100) == sent,
        "every frame once, in order, intact"
    );
    let bytes: u64 = sent.iter().map(|f| f.len() as u64).sum();
    assert_eq!(*counted.lock().unwrap(), (100, bytes));
    assert_eq!(detail(&pa, "rx-cut-through"), 100);
    assert_eq!(detail(&pb, "tx-peer-to-peer"), 100);
    assert_eq!((pa.stats().rx_packets, pb.stats().tx_packets), (100, 100));

    // Asked to receive (port-input traced or capturing): Quiver buffers, as usual.
    let sent: Vec<Vec<u8>> = (100..110).map(frame).collect();
    send(&mut a, &sent);
    let mut out = [BufferIndex::NONE; 256];
    let mut n = 0;
    wait_for("received into buffers", 10, || {
        n += qa.rx.receive(&mut wb, &mut out[n..]);
        n >= 10
    });
    assert_eq!(n, 10);
    assert_eq!(wb.data(out[3]), &sent[3][..]);
    wb.free(&out[..n]);
    assert_eq!(detail(&pa, "rx-cut-through"), 100);

    // Its flag cleared: the cut-through is over.
    on.store(false, Ordering::Release);
    send(&mut a, &sent);
    let (burst, got) = bypass(&mut qa, &mut wb, 10);
    assert_eq!((burst.bypassed, burst.received), (0, 10));
    wb.free(&got);

    // A new one, then the other transmit queue goes: the receive queue lets go of it.
    let on = Arc::new(AtomicBool::new(true));
    assert!(pa.cut_through(0, &pb, count(&counted), on.clone()));
    send(&mut a, &sent[..5]);
    assert_eq!(bypass(&mut qa, &mut wb, 5).0.bypassed, 5);
    assert_eq!(at(&mut b, 5), sent[..5]);
    drop(qb.tx);
    assert!(!pa.cut_through(0, &pb, count(&counted), on.clone()));
    send(&mut a, &sent[5..]);
    let (burst, got) = bypass(&mut qa, &mut wb, 5);
    assert_eq!((burst.bypassed, burst.received), (0, 5));
    wb.free(&got);
    assert_eq!(detail(&pa, "rx-cut-through"), 105);
    assert_eq!(counted.lock().unwrap().0, 105);

    drop(qa);
    drop(qb.rx);
    assert_eq!(wb.external_count(), 0);
    drop(wb);
    assert_eq!(pool.free_count(), 1024, "every buffer back");
}
