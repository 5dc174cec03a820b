//! memif peers built here with the crate's API (a master serving one interface, a slave), for
//! the examples to talk to: link up, frames sent and received with deadlines.

use std::path::Path;
use std::time::Duration;

use memif::{Interface, InterfaceConfig, Master, MasterConfig, Slave, SocketAddress};

use crate::common::wait_for;

pub(crate) fn master_with_interface(path: &Path, id: u32) -> Master {
    let mut m = Master::bind(
        SocketAddress::Path(path.to_path_buf()),
        MasterConfig::default(),
    )
    .expect("bind the test master");
    m.add_interface(InterfaceConfig::new(id)).unwrap();
    m
}

/// A memif peer built here with the crate's API.
pub(crate) trait TestPeer: Send {
    /// Control work.
    fn pump(&mut self);
    /// The data-path interface.
    fn iface(&mut self) -> &mut Interface;
}

/// A master serving one interface id.
pub(crate) struct MasterPeer(pub(crate) Master, pub(crate) u32);

impl TestPeer for MasterPeer {
    fn pump(&mut self) {
        self.0.poll().unwrap();
    }
    fn iface(&mut self) -> &mut Interface {
        self.0.interface_mut(self.1).unwrap()
    }
}

impl TestPeer for Slave {
    fn pump(&mut self) {
        self.poll().unwrap();
    }
    fn iface(&mut self) -> &mut Interface {
        self.interface_mut()
    }
}

pub(crate) fn slave_peer(socket: &Path, id: u32) -> Slave {
    let mut s = Slave::new(
        SocketAddress::Path(socket.to_path_buf()),
        InterfaceConfig::new(id),
    )
    .unwrap();
    s.retry_interval = Duration::from_millis(10);
    s
}

pub(crate) fn wait_up(p: &mut dyn TestPeer, secs: u64) {
    wait_for("test peer link up", secs, || {
        p.pump();
        p.iface().is_up()
    });
}

/// Sends `frames` on queue 0, retrying until the ring took them all.
pub(crate) fn send_frames(p: &mut dyn TestPeer, frames: &[Vec<u8>]) {
    let mut sent = 0;
    wait_for("frames taken by the ring", 20, || {
        p.pump();
        let refs: Vec<&[u8]> = frames[sent..].iter().map(Vec::as_slice).collect();
        sent += p.iface().tx_burst(0, &refs);
        sent == frames.len()
    });
}

/// Receives until `n` frames arrived.
pub(crate) fn recv_frames(p: &mut dyn TestPeer, n: usize, secs: u64) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    wait_for("frames back", secs, || {
        p.pump();
        p.iface()
            .rx_burst(0, 64, &mut |f: &[u8]| got.push(f.to_vec()));
        got.len() >= n
    });
    got
}

/// Sends `request`; exactly `reply` must come back.
pub(crate) fn exchange(p: &mut dyn TestPeer, request: Vec<u8>, reply: Vec<u8>) {
    send_frames(p, &[request]);
    assert_eq!(recv_frames(p, 1, 20), vec![reply]);
}
