//! Two nodes for the cross-node NSM tests: network namespaces joined by a veth "underlay",
//! and on each one a forwarder whose uplink (AF_PACKET) is that node's end, with the node's
//! tunnel address (IPv4, or IPv6 for an IPv6 underlay) and the other node's MAC as a static
//! neighbour (no frame waits for ARP or neighbour discovery).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use nsm_forwarder::{NsmConfig, NsmHandle};
use quiver::control::owner::ForwarderView;

use super::{run, Netns, TestForwarder, IP};

/// Node A's tunnel address.
pub const A_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 1);
/// Node B's tunnel address.
pub const B_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 2);
/// Node A's tunnel address over an IPv6 underlay (2001:db8:77::1).
pub const A_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 1);
/// Node B's tunnel address over an IPv6 underlay (2001:db8:77::2).
pub const B_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 2);
/// Node A's underlay MAC.
pub const A_MAC: &str = "02:77:00:00:00:01";
/// Node B's underlay MAC.
pub const B_MAC: &str = "02:77:00:00:00:02";

/// One node: a forwarder whose uplink is `uplink` inside namespace `node`.
pub struct Node(pub TestForwarder);

impl Node {
    /// The forwarder of `node`, its uplink `uplink` with `ip` (a /24, or a /64 for IPv6),
    /// `peer` reached at `peer_mac`.
    pub fn start(
        node: &Netns,
        uplink: &str,
        ip: impl Into<IpAddr>,
        peer: impl Into<IpAddr>,
        peer_mac: &str,
    ) -> Node {
        let (ip, peer) = (ip.into(), peer.into());
        let len = if ip.is_ipv6() { 64 } else { 24 };
        Node(TestForwarder::start(&format!(
            r#"
[[port]]
name = "uplink"
type = "af_packet"
interface = "{uplink}"
netns = "{ns}"
[[address]]
port = "uplink"
ip = "{ip}/{len}"
[[neighbor]]
port = "uplink"
ip = "{peer}"
mac = "{peer_mac}"
"#,
            ns = node.path()
        )))
    }

    /// Serves NSM as `name` on `listen` with tunnel address `ip`, sending Requests to `next`.
    pub fn serve(
        &self,
        name: &str,
        listen: &str,
        ip: impl Into<IpAddr>,
        next: String,
    ) -> NsmHandle {
        self.serve_with(name, listen, ip, next, |_| {})
    }

    /// [`Node::serve`] over a data path `prepare`d first, the configuration changed by
    /// `configure`.
    pub fn serve_with(
        &self,
        name: &str,
        listen: &str,
        ip: impl Into<IpAddr>,
        next: String,
        configure: impl FnOnce(&mut NsmConfig),
    ) -> NsmHandle {
        let f = &self.0;
        f.serve_with(
            f.dataplane(),
            name,
            listen,
            Some(ip.into()),
            next,
            configure,
        )
    }

    /// The forwarder's configuration as published.
    pub fn fwd(&self) -> Arc<ForwarderView> {
        self.0.fwd.view()
    }

    /// Its VXLAN tunnels.
    pub fn tunnels(&self) -> Vec<quiver::TunnelEntry> {
        self.fwd().tunnels().to_vec()
    }

    /// Its ports' names.
    pub fn port_names(&self) -> Vec<String> {
        self.fwd().ports().iter().map(|e| e.name.clone()).collect()
    }

    /// Port `port`'s counters.
    pub fn stats(&self, port: &str) -> drivers::PortStats {
        let f = self.fwd();
        f.ports()
            .iter()
            .find(|e| e.name == port)
            .unwrap_or_else(|| panic!("no port {port}"))
            .port
            .stats()
    }

    /// `show interfaces`, for failure messages.
    pub fn table(&self) -> String {
        self.fwd().format_interfaces()
    }
}

/// The underlay: a veth pair named after the process, one end in each node's namespace, up.
/// Returns the two ends' names (A's, B's).
pub fn underlay(tag: &str, node_a: &Netns, node_b: &Netns) -> (String, String) {
    let pid = std::process::id() % 100_000;
    let (ua, ub) = (format!("q{tag}{pid}a"), format!("q{tag}{pid}b"));
    run(&[
        IP, "link", "add", &ua, "address", A_MAC, "type", "veth", "peer", "name", &ub, "address",
        B_MAC,
    ]);
    run(&[IP, "link", "set", &ua, "netns", &node_a.0]);
    run(&[IP, "link", "set", &ub, "netns", &node_b.0]);
    for (ns, dev) in [(node_a, &ua), (node_b, &ub)] {
        run(&[IP, "-n", &ns.0, "link", "set", dev, "up"]);
    }
    (ua, ub)
}
