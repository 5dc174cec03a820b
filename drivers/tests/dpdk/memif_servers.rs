//! `net_memif` servers in DPDK with Quiver's own memif crate as the clients, cross-connected
//! through the graph: frames of every size intact and in order both ways, counted exactly.

use std::sync::Arc;
use std::time::{Duration, Instant};

use drivers::dpdk::{DpdkPort, DpdkPortConfig};
use drivers::{LinkStatus, Port};
use memif::{InterfaceConfig, Slave, SocketAddress};
use testkit::wait_for;

use crate::eal::{eal_and_pool, every_buffer_back};
use crate::graph::{drops, forwarding, frames, sizes, start, MAC_A, MAC_B};

/// Sends `frames` from `from` and collects what `to` receives, polling both control channels,
/// with at most `window` frames in flight.
fn pump_memif(from: &mut Slave, to: &mut Slave, frames: &[Vec<u8>], window: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < frames.len() && Instant::now() < deadline {
        from.poll().unwrap();
        to.poll().unwrap();
        if sent < frames.len() && sent - got.len() < window {
            let end = (sent + 32).min(frames.len());
            let refs: Vec<&[u8]> = frames[sent..end].iter().map(|f| f.as_slice()).collect();
            sent += from.interface_mut().tx_burst(0, &refs);
        }
        to.interface_mut()
            .rx_burst(0, 256, &mut |p: &[u8]| got.push(p.to_vec()));
        std::thread::yield_now();
    }
    got
}

#[test]
fn memif_servers_in_dpdk_with_quiver_memif_clients() {
    let Some((eal, _serial, pool, mempool)) =
        eal_and_pool("memif_servers_in_dpdk_with_quiver_memif_clients", 8192)
    else {
        return;
    };
    let paths: Vec<std::path::PathBuf> = (0..2)
        .map(|i| {
            std::env::temp_dir().join(format!("quiver-dpdk-{}-memif{i}.sock", std::process::id()))
        })
        .collect();
    let mut ports = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let _ = std::fs::remove_file(p);
        let name = format!("net_memif_t{i}");
        eal.create_vdev(
            &name,
            &format!("role=server,id=0,socket={},socket-abstract=no", p.display()),
        )
        .unwrap();
        ports.push(Arc::new(
            DpdkPort::open(&mempool, &DpdkPortConfig::new(&name, 1)).unwrap(),
        ));
    }
    let mut fwd = forwarding();
    let i0 = fwd.add_port("memif0", ports[0].mac(), 9000).unwrap();
    let i1 = fwd.add_port("memif1", ports[1].mac(), 9000).unwrap();
    fwd.cross_connect(i0, i1).unwrap();
    let (dp, xc) = start(
        &pool,
        &mut fwd,
        vec![(ports[0].clone(), i0), (ports[1].clone(), i1)],
    );
    let mut clients: Vec<Slave> = paths
        .iter()
        .map(|p| {
            let mut s =
                Slave::new(SocketAddress::Path(p.clone()), InterfaceConfig::new(0)).unwrap();
            s.retry_interval = Duration::from_millis(10);
            s
        })
        .collect();
    wait_for("both memif links up", 30, || {
        clients.iter_mut().for_each(|c| c.poll().unwrap());
        clients.iter().all(|c| c.interface().is_up())
            && ports.iter().all(|p| p.link() == LinkStatus::Up)
    });
    let sz = sizes(3000);
    let fwd_frames = frames(MAC_B, MAC_A, 0, &sz);
    let back_frames = frames(MAC_A, MAC_B, 50_000, &sz);
    let (c0, c1) = clients.split_at_mut(1);
    let got = pump_memif(&mut c0[0], &mut c1[0], &fwd_frames, 256);
    assert_eq!(got.len(), fwd_frames.len(), "client 0 → client 1");
    assert!(
        got == fwd_frames,
        "frames altered or reordered on the way 0 → 1"
    );
    let got = pump_memif(&mut c1[0], &mut c0[0], &back_frames, 256);
    assert_eq!(got.len(), back_frames.len(), "client 1 → client 0");
    assert!(
        got == back_frames,
        "frames altered or reordered on the way 1 → 0"
    );

    let bytes: u64 = sz.iter().map(|&l| l as u64).sum();
    let rt = dp.runtime();
    let (s0, s1) = (ports[0].stats(), ports[1].stats());
    dp.stop();
    assert_eq!(drops(&rt).0, 0, "{}", drops(&rt).1);
    assert_eq!(xc.get(i0), (3000, bytes));
    assert_eq!(xc.get(i1), (3000, bytes));
    assert_eq!(
        (s0.rx_packets, s0.rx_bytes, s0.tx_packets),
        (3000, bytes, 3000)
    );
    assert_eq!(
        (s1.rx_packets, s1.tx_packets, s1.tx_bytes),
        (3000, 3000, bytes)
    );
    for c in &clients {
        assert_eq!(c.interface().bad_descriptors(), 0);
    }
    drop(clients);
    drop(ports);
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    every_buffer_back(&pool, mempool);
}
