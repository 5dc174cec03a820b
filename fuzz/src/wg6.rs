//! The rig of the `wg6_input` target: WireGuard over an IPv6 underlay (`wg6-decrypt` and what
//! follows it) in a real forwarding graph driven by hand.
//!
//! - eth0 (the underlay) fd00:2::fe/64, neighbour fd00:2::1 = HOST_B, where the peer is
//!   ([`WG6_PEER`]);
//! - a WireGuard tunnel `wg6` listening on fd00:2::fe:51820 ([`WG6_LOCAL`]) with a session in
//!   place, its peer allowed 10.9.0.0/24 and fd00:9::/64;
//! - eth1 10.0.1.1/24 and fd00:1::fe/64, neighbours 10.0.1.2 and fd00:1::2 = HOST_A: where
//!   what the tunnel decrypts is routed to.

use std::net::{Ipv6Addr, SocketAddr};
use std::sync::Arc;

use dataplane::buffer::BufferPool;
use dataplane::{Graph, WorkerBuffers};
use graph_nodes::{Forwarding, ForwardingState, IfIndex, LocalState};

use crate::ip6::a6;
use crate::{
    ip, mac, port_graph, rig_parts, run_until_idle, take_sent, wg_sessions_of, Port, HOST_A, HOST_B,
};

/// The tunnel's local end (eth0's address) and port.
pub const WG6_LOCAL: (&str, u16) = ("fd00:2::fe", 51820);
/// The peer's endpoint (HOST_B).
pub const WG6_PEER: (&str, u16) = ("fd00:2::1", 51821);
/// Ports of the rig.
pub const WG6_PORTS: usize = 2;

fn w(s: &str) -> u128 {
    u128::from_be_bytes(a6(s))
}

fn sessions() -> (
    Vec<graph_nodes::wireguard::WgPeer>,
    graph_nodes::state::FastMap<u32, graph_nodes::wireguard::WgReceiver>,
) {
    let peer: Ipv6Addr = WG6_PEER.0.parse().expect("IPv6");
    wg_sessions_of(
        SocketAddr::from((peer, WG6_PEER.1)),
        vec![(ip(10, 9, 0, 0), 24)],
        vec![(w("fd00:9::"), 64)],
    )
}

/// The rig described above.
pub struct WgRig6 {
    /// The pool.
    pub pool: Arc<BufferPool>,
    buffers: WorkerBuffers,
    fwd: Forwarding,
    published: LocalState,
    graph: Graph<ForwardingState>,
    ports: Vec<Port>,
    tunnel: u32,
}

impl WgRig6 {
    /// Builds the rig.
    pub fn new() -> WgRig6 {
        let (pool, buffers, mut fwd) = rig_parts();
        let p: Vec<IfIndex> = (0..WG6_PORTS as u8)
            .map(|i| fwd.add_port(&format!("eth{i}"), mac(i), 1500).unwrap())
            .collect();
        fwd.add_address6(p[0], w(WG6_LOCAL.0), 64).unwrap();
        fwd.add_neighbor6(p[0], w(WG6_PEER.0), HOST_B).unwrap();
        fwd.add_address(p[1], ip(10, 0, 1, 1), 24).unwrap();
        fwd.add_neighbor(p[1], ip(10, 0, 1, 2), HOST_A).unwrap();
        fwd.add_address6(p[1], w("fd00:1::fe"), 64).unwrap();
        fwd.add_neighbor6(p[1], w("fd00:1::2"), HOST_A).unwrap();
        let (peers, receivers) = sessions();
        let local: Ipv6Addr = WG6_LOCAL.0.parse().expect("IPv6");
        let (_, tunnel) = fwd
            .add_wireguard_tunnel("wg6", local.into(), WG6_LOCAL.1, peers.clone(), 1500)
            .unwrap();
        fwd.set_wireguard_sessions(tunnel, peers, receivers)
            .unwrap();
        let published = LocalState::default();
        fwd.commit(&published).unwrap();
        let (graph, ports) = port_graph(&p);
        WgRig6 {
            pool,
            buffers,
            fwd,
            published,
            graph,
            ports,
            tunnel,
        }
    }

    /// Puts a fresh session in place (new keys' time, counter and replay window), so that
    /// every input sees the same state.
    pub fn reset(&mut self) {
        let (peers, receivers) = sessions();
        self.fwd
            .set_wireguard_sessions(self.tunnel, peers, receivers)
            .unwrap();
        self.fwd.commit(&self.published).unwrap();
    }

    /// Receives `frame` on eth0 and runs the graph until it is idle; returns what each port
    /// sent. Panics unless every buffer is back in the pool afterwards.
    pub fn inject(&mut self, frame: Vec<u8>) -> Vec<Vec<Vec<u8>>> {
        let state = self.published.current();
        run_until_idle(
            &mut self.graph,
            &mut self.buffers,
            &self.ports,
            &state,
            &[(0, frame)],
        );
        // Handshake messages are the control side's (punted, here forgotten).
        self.fwd.take_events();
        take_sent(&self.ports, &self.pool)
    }
}

impl Default for WgRig6 {
    fn default() -> Self {
        WgRig6::new()
    }
}
