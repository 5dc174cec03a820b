//! The NSM forwarder's data path over the running forwarder: [`ForwarderDataplane`] implements
//! `nsm_forwarder::NsmBackend` over a [`Control`] (each change a [`Change`] the configuration's
//! owner applies, link states read from its view), and [`start`] serves the NSM services for it.
//!
//! - memif: a port of the forwarder (`PortSection::Memif`, with the namespace its socket
//!   lives in), tagged with the connection id.
//! - kernel (`kernel.rs`): by default a TAP port of the forwarder whose device is made inside
//!   the client's or endpoint's namespace and addressed there (alias `client-<id>` /
//!   `server-<id>`); or, with the veth backend, a veth pair from `drivers::kernel_interface`
//!   (its far end in the namespace with that alias, Quiver's end tagged `quiver:<id>/<side>`)
//!   and an AF_PACKET port of the forwarder on Quiver's end.
//! - VLAN (`vlan.rs`): a sub-interface of Quiver's AF_PACKET port on the host interface the
//!   device selector names (attached once, kept), tagged with the connection id.
//! - cross-connects: the forwarder's, tagged; an L3 one toward a kernel interface also gets
//!   the far end's MAC as the peer's neighbour, so no ARP is needed. Inside the namespace
//!   nothing answers ARP either (Quiver has no address there), so the L3 cross-connect adds
//!   there permanent neighbours toward Quiver's end: the other side's address (the NSE's
//!   `dst_ip_addrs` in the client's namespace, the NSC's `src_ip_addrs` in the endpoint's) and
//!   the next hops of the interface's routes. They win over the IP context's own neighbours
//!   while the cross-connect lasts (the veth's only station is Quiver); its disconnect removes
//!   them and puts the context's back.
//! - link changes: a watcher thread compares each owned port's link with what it saw last and
//!   reports a port that went down after having been up (and its return).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use drivers::kernel_interface::{self, KernelInterface};
use drivers::LinkStatus;
use nsm_forwarder::dataplane::{
    FrameMode, KernelSpec, L3NextHops, MemifRole as NsmRole, MemifSpec, VlanSpec, VxlanSpec,
    WireguardSpec,
};
use nsm_forwarder::wg_ports;
use nsm_forwarder::{
    BackendError, LinkEvent, LinkEvents, NsmBackend, NsmConfig, NsmHandle, PortCounters, PortName,
    ServeError,
};

use super::uplink::{NextHops, NodeUplink, NodeUplinkError};
use crate::config::{MemifMode, MemifRole, MemifSection, PortSection};
use crate::control::owner::{Change, Control, ForwarderView};
use crate::forwarder::{ForwarderError, L3Peer};

mod kernel;
mod owned;
mod vlan;
mod wireguard;

use owned::{kernel_error, mtu16, tag_owner, InsideNeighbors, OwnedPort};

pub use kernel::KernelBackendAlreadySet;
pub use wireguard::KeyFileError;

pub use nsm_forwarder::config::KernelBackend;

/// How often the link watcher looks at the ports.
const LINK_POLL: Duration = Duration::from_millis(100);
/// How long a tunnel's creation waits for its next hop on the node uplink.
const NEXT_HOP_WAIT: Duration = Duration::from_millis(500);

/// `nsm_forwarder::NsmBackend` over the configuration's owner.
pub struct ForwarderDataplane {
    control: Control,
    ports: Mutex<HashMap<String, OwnedPort>>,
    me: Weak<ForwarderDataplane>,
    /// Quiver's WireGuard private key for NSM's tunnels (base64), once set.
    wg_key: OnceLock<String>,
    /// Which interfaces KERNEL mechanisms get: set once, before the first is made
    /// ([`ForwarderDataplane::set_kernel_backend`]).
    kernel_backend: OnceLock<KernelBackend>,
    /// The node uplink's next hops, when Quiver attached one.
    uplink: OnceLock<Arc<NextHops>>,
}

fn fwd_error(e: ForwarderError) -> BackendError {
    match e {
        ForwarderError::NotFound(m) => BackendError::NotFound(m),
        ForwarderError::AlreadyExists(m) => BackendError::AlreadyExists(m),
        ForwarderError::InvalidArgument(m) => BackendError::InvalidArgument(m),
        ForwarderError::Unavailable(m) | ForwarderError::Internal(m) => BackendError::Failed(m),
    }
}

/// The counters of port `name` in `view` as NSM's metrics report them: the driver's, never
/// rewound by `clear counters`; drops are both ways'. `None` for an interface without a port
/// (a VXLAN tunnel).
pub fn port_counters(view: &ForwarderView, name: &str) -> Option<PortCounters> {
    let s = view.port(name)?.port.stats();
    Some(PortCounters {
        rx_bytes: s.rx_bytes,
        tx_bytes: s.tx_bytes,
        rx_packets: s.rx_packets,
        tx_packets: s.tx_packets,
        drops: s.rx_dropped.saturating_add(s.tx_dropped),
    })
}

/// NSM's next hops for one side as the forwarder's.
fn l3_peer(hops: L3NextHops) -> L3Peer {
    L3Peer {
        v4: hops.v4,
        v6: hops.v6,
    }
}

impl ForwarderDataplane {
    /// A data path over `control`.
    pub fn new(control: Control) -> Arc<ForwarderDataplane> {
        Arc::new_cyclic(|me| ForwarderDataplane {
            control,
            ports: Mutex::new(HashMap::new()),
            me: me.clone(),
            wg_key: OnceLock::new(),
            kernel_backend: OnceLock::new(),
            uplink: OnceLock::new(),
        })
    }

    /// Gives the data path Quiver's WireGuard private key (base64): from then on it makes
    /// WIREGUARD tunnels. Set once; a second key is ignored.
    pub fn set_wireguard_key(&self, private_key: String) {
        let _ = self.wg_key.set(private_key);
    }

    fn ports(&self) -> std::sync::MutexGuard<'_, HashMap<String, OwnedPort>> {
        self.ports.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn apply(&self, change: Change) -> Result<(), BackendError> {
        self.control.apply(change).map(drop).map_err(fwd_error)
    }

    /// Sets the node uplink whose next hops tunnels from its address wait for (once).
    pub fn set_uplink(&self, next_hops: Arc<NextHops>) {
        let _ = self.uplink.set(next_hops);
    }

    /// Before a tunnel from `local` to `remote` is made: its next hop known on the node
    /// uplink, so its first packet is not dropped while the kernel resolves it.
    fn prepare_next_hop(&self, local: IpAddr, remote: IpAddr) {
        if let Some(hops) = self.uplink.get().filter(|h| h.ip() == local) {
            if !hops.prepare(remote, NEXT_HOP_WAIT) {
                tracing::debug!(%remote, "node uplink: the next hop is not resolved yet");
            }
        }
    }

    pub(super) fn add(&self, owner: &str, port: PortSection) -> Result<(), BackendError> {
        self.apply(Change::AddPort {
            port,
            owner: Some(owner.into()),
        })
    }

    /// Polls the link of every owned port until the data path is dropped.
    fn watch(me: Weak<ForwarderDataplane>, events: LinkEvents) {
        loop {
            std::thread::sleep(LINK_POLL);
            let Some(dp) = me.upgrade() else { return };
            let links: HashMap<String, LinkStatus> = dp
                .control
                .view()
                .ports
                .iter()
                .map(|e| (e.name.clone(), e.port.link()))
                .collect();
            let mut changes = Vec::new();
            for (name, p) in dp.ports().iter_mut() {
                let Some(link) = links.get(name) else {
                    continue;
                };
                let up = matches!(link, LinkStatus::Up);
                // Down before the first up is a port waiting for its peer, not a failure.
                let report = match p.seen_up {
                    None => false,
                    Some(was) => was != up,
                };
                if up || p.seen_up.is_some() {
                    p.seen_up = Some(up);
                }
                if report {
                    let reason = match link {
                        LinkStatus::Up => "link up".to_string(),
                        LinkStatus::Down(why) => why.clone(),
                    };
                    changes.push(LinkEvent {
                        owner: p.owner.clone(),
                        port: PortName(name.clone()),
                        up,
                        reason,
                    });
                }
            }
            drop(dp);
            for c in changes {
                if !events.send(c) {
                    return;
                }
            }
        }
    }
}

impl NsmBackend for ForwarderDataplane {
    fn create_memif(&self, owner: &str, spec: &MemifSpec) -> Result<(), BackendError> {
        let section = PortSection::Memif(MemifSection {
            name: spec.name.0.clone(),
            mac: None,
            mtu: mtu16(spec.mtu)?,
            role: match spec.role {
                NsmRole::Master => MemifRole::Master,
                NsmRole::Slave => MemifRole::Slave,
            },
            socket: spec.socket.clone(),
            id: 0,
            secret: None,
            mode: match spec.mode {
                FrameMode::Ethernet => MemifMode::Ethernet,
                FrameMode::Ip => MemifMode::Ip,
            },
            ring_size: 1024,
            buffer_size: 2048,
            // What NSM's memif peers (sdk-vpp, libmemif) ask for and offer by default.
            queues: 1,
            netns: spec.netns.clone(),
        });
        self.add(owner, section)?;
        self.ports().insert(
            spec.name.0.clone(),
            OwnedPort {
                owner: owner.into(),
                kernel: None,
                inside: InsideNeighbors::default(),
                seen_up: None,
            },
        );
        Ok(())
    }

    fn create_kernel(&self, owner: &str, spec: &KernelSpec) -> Result<(), BackendError> {
        self.create_kernel_port(owner, spec)
    }

    fn create_vxlan(&self, owner: &str, spec: &VxlanSpec) -> Result<(), BackendError> {
        self.prepare_next_hop(spec.local, spec.remote);
        self.apply(Change::AddVxlanTunnel {
            name: spec.name.0.clone(),
            local: spec.local,
            remote: spec.remote,
            vni: spec.vni,
            dst_port: spec.dst_port,
            owner: Some(owner.into()),
        })
    }

    fn create_wireguard(&self, owner: &str, spec: &WireguardSpec) -> Result<(), BackendError> {
        let key = self.wg_key.get().ok_or_else(|| {
            BackendError::InvalidArgument(format!("{}: Quiver has no WireGuard key", spec.name))
        })?;
        // Over either family, of one family at both ends.
        if spec.local.is_ipv4() != spec.remote.is_ipv4() {
            return Err(BackendError::InvalidArgument(format!(
                "{}: WireGuard to {} from {}: the ends are not of one family",
                spec.name, spec.remote, spec.local
            )));
        }
        self.prepare_next_hop(spec.local, spec.remote);
        self.apply(Change::AddWireguard {
            tunnel: wireguard::tunnel_section(spec, key),
            owner: Some(owner.into()),
        })
    }

    fn vlan_host(&self, host: &str) -> Result<u32, BackendError> {
        self.vlan_host_port(host)
    }

    fn create_vlan(&self, owner: &str, spec: &VlanSpec) -> Result<(), BackendError> {
        self.create_vlan_sub(owner, spec)
    }

    fn remove_port(&self, _owner: &str, port: &PortName) -> Result<(), BackendError> {
        let removed = self.apply(Change::RemoveInterface {
            name: port.0.clone(),
        });
        if let Some(p) = self.ports().remove(&port.0) {
            if let Some(veth) = p.kernel {
                veth.delete().map_err(kernel_error)?;
            }
        }
        removed
    }

    fn l2_cross_connect(
        &self,
        owner: &str,
        a: &PortName,
        b: &PortName,
    ) -> Result<(), BackendError> {
        self.apply(Change::CrossConnect {
            a: a.0.clone(),
            b: b.0.clone(),
            owner: Some(owner.into()),
        })
    }

    fn l3_cross_connect(
        &self,
        owner: &str,
        a: &PortName,
        b: &PortName,
        peer_b: L3NextHops,
        peer_a: L3NextHops,
    ) -> Result<(), BackendError> {
        let (pb, pa) = (peer_b, peer_a);
        // A kernel interface's far end has a known MAC: the neighbour entry of each of the
        // peer's next hops (IPv4's and IPv6's: no ARP or neighbour discovery needed).
        let macs: Vec<(String, IpAddr, [u8; 6])> = {
            let ports = self.ports();
            [(b, pb), (a, pa)]
                .into_iter()
                .filter_map(|(port, peer)| {
                    let veth = ports.get(&port.0)?.kernel.as_ref()?;
                    Some(peer.addrs().map(|ip| (port.0.clone(), ip, veth.mac())))
                })
                .flatten()
                .collect()
        };
        // The peers' neighbours and the cross-connect, with no other change in between.
        let mut changes: Vec<Change> = macs
            .into_iter()
            .map(|(port, ip, mac)| Change::AddNeighbor {
                port,
                ip,
                mac,
                owner: Some(owner.into()),
            })
            .collect();
        changes.push(Change::L3CrossConnect {
            a: a.0.clone(),
            b: b.0.clone(),
            peer_b: l3_peer(pb),
            peer_a: l3_peer(pa),
            owner: Some(owner.into()),
        });
        self.apply(Change::All(changes))?;
        // Inside a veth's namespace: what it sends to resolves to Quiver's end.
        for (port, other, toward) in [(a, b, pb), (b, a, pa)] {
            let (veth, ips) = {
                let mut ports = self.ports();
                let Some(p) = ports.get_mut(&port.0) else {
                    continue;
                };
                p.inside.with = Some(other.0.clone());
                let Some(veth) = p.kernel.clone() else {
                    continue;
                };
                let mut ips: Vec<IpAddr> = toward.addrs().collect();
                ips.extend(&p.inside.route_hops);
                ips.sort_unstable();
                ips.dedup();
                // Recorded first: whatever got added goes with the cross-connect.
                for ip in &ips {
                    if !p.inside.added.contains(ip) {
                        p.inside.added.push(*ip);
                    }
                }
                (veth, ips)
            };
            let entries: Vec<(IpAddr, [u8; 6])> =
                ips.iter().map(|&ip| (ip, veth.host_mac())).collect();
            veth.add_neighbors(&entries).map_err(kernel_error)?;
        }
        Ok(())
    }

    fn disconnect(&self, _owner: &str, port: &PortName) -> Result<(), BackendError> {
        let disconnected = self.apply(Change::Disconnect {
            port: port.0.clone(),
        });
        // The neighbours an L3 cross-connect added inside the namespaces go with it, on both
        // sides (the forwarder's disconnect took both directions at once).
        let undo: Vec<_> = {
            let mut ports = self.ports();
            let other = ports.get(&port.0).and_then(|p| p.inside.with.clone());
            [Some(port.0.clone()), other]
                .into_iter()
                .flatten()
                .filter_map(|name| {
                    let p = ports.get_mut(&name)?;
                    p.inside.with = None;
                    let veth = p.kernel.clone()?;
                    let added = std::mem::take(&mut p.inside.added);
                    let restore: Vec<(IpAddr, [u8; 6])> = p
                        .inside
                        .configured
                        .iter()
                        .filter(|(ip, _)| added.contains(ip))
                        .copied()
                        .collect();
                    Some((veth, added, restore))
                })
                .collect()
        };
        for (veth, added, restore) in undo {
            veth.remove_neighbors(&added).map_err(kernel_error)?;
            veth.add_neighbors(&restore).map_err(kernel_error)?;
        }
        disconnected
    }

    fn remove_owned(&self, owner: &str) -> Result<(), BackendError> {
        let removed = self.apply(Change::RemoveOwned {
            owner: owner.into(),
        });
        let veths: Vec<KernelInterface> = {
            let mut ports = self.ports();
            let mine: Vec<String> = ports
                .iter()
                .filter(|(_, p)| p.owner == owner)
                .map(|(n, _)| n.clone())
                .collect();
            mine.iter()
                .filter_map(|n| ports.remove(n).and_then(|p| p.kernel))
                .collect()
        };
        let mut failed = None;
        for v in veths {
            if let Err(e) = v.delete() {
                failed = Some(kernel_error(e));
            }
        }
        // Veths a previous run made for this connection (found by their tag).
        for side in ["client", "endpoint"] {
            if let Err(e) = kernel_interface::delete_for_connection(&format!("{owner}/{side}")) {
                failed = Some(kernel_error(e));
            }
        }
        removed?;
        failed.map_or(Ok(()), Err)
    }

    fn owners(&self) -> Result<Vec<String>, BackendError> {
        let mut owners: HashSet<String> = self.ports().values().map(|p| p.owner.clone()).collect();
        for o in kernel_interface::list_owned().map_err(kernel_error)? {
            owners.insert(tag_owner(&o.connection_id).to_string());
        }
        Ok(owners.into_iter().collect())
    }

    fn port_counters(&self, port: &PortName) -> Option<PortCounters> {
        port_counters(&self.control.view(), &port.0)
    }

    fn watch_links(&self, events: LinkEvents) {
        let me = self.me.clone();
        let spawned = std::thread::Builder::new()
            .name("quiver-nsm-links".into())
            .spawn(move || ForwarderDataplane::watch(me, events));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the link watcher: no DOWN events");
        }
    }
}

/// Why the NSM services did not start.
#[derive(Debug, thiserror::Error)]
pub enum NsmStartError {
    /// The forwarder refused `NSM_VXLAN_PORT`.
    #[error("NSM_VXLAN_PORT: {0}")]
    VxlanPort(#[source] ForwarderError),
    /// The node uplink (`NSM_UPLINK`) could not be attached.
    #[error("NSM_UPLINK: {0}")]
    Uplink(#[source] NodeUplinkError),
    /// The forwarder could not be asked for its default route (its owner stopped).
    #[error(transparent)]
    DefaultRoute(ForwarderError),
    /// `NSM_WIREGUARD_PRIVATE_KEY_FILE` gave no key.
    #[error(transparent)]
    WireguardKey(#[from] KeyFileError),
    /// The services (gRPC server, registration) did not start.
    #[error("NSM: {0}")]
    Serve(#[source] ServeError),
}

/// Starts the NSM services for `forwarder` (the SPIFFE identity from
/// `SPIFFE_ENDPOINT_SOCKET`, endpoints found through the registry at `NSM_CONNECT_TO`); they
/// run until the handle is dropped.
pub fn start(control: &Control, mut cfg: NsmConfig) -> Result<NsmService, NsmStartError> {
    control
        .apply(Change::SetVxlanPort(cfg.vxlan_port))
        .map_err(NsmStartError::VxlanPort)?;
    let uplink = match cfg.tunnel_ip {
        Some(ip) if cfg.node_uplink && !control.view().is_own_address(ip) => {
            let ports = std::iter::once(cfg.vxlan_port)
                .chain(wg_ports::FIRST..wg_ports::FIRST + wg_ports::COUNT)
                .collect();
            NodeUplink::attach(control, ip, ports).map_err(NsmStartError::Uplink)?
        }
        _ => None,
    };
    if cfg.tunnel_ip.is_none() {
        cfg.tunnel_ip = control
            .inspect(|f| f.default_route_address())
            .map_err(NsmStartError::DefaultRoute)?
            .map(IpAddr::V4);
    }
    if let Some(ip) = cfg.tunnel_ip {
        if let Some(mtu) = control.view().mtu_of_address(ip) {
            cfg.tunnel_mtu = u32::from(mtu);
        }
    }
    match cfg.tunnel_ip {
        Some(ip) if !control.view().is_own_address(ip) => tracing::warn!(
            %ip,
            "NSM_TUNNEL_IP is not an address of Quiver's: VXLAN to other nodes will fail until \
             an uplink port has it ([[address]] in quiver.toml)"
        ),
        Some(ip) => tracing::info!(
            %ip,
            port = cfg.vxlan_port,
            uplink_mtu = cfg.tunnel_mtu,
            "VXLAN tunnels to other nodes from"
        ),
        None => tracing::info!(
            "no NSM_TUNNEL_IP and no default route with an address: no VXLAN to other nodes"
        ),
    }
    let wg_key = wireguard::load_key(&mut cfg)?;
    if let (Some(ip), Some(public)) = (cfg.tunnel_ip, cfg.wireguard_public_key) {
        tracing::info!(
            %ip,
            public_key = nsm_forwarder::mechanism::encode_key(&public),
            "WireGuard tunnels (IP payload) to other nodes from"
        );
    }
    let dp = ForwarderDataplane::new(control.clone());
    dp.set_wireguard_key(wg_key);
    dp.set_kernel_backend(cfg.kernel_backend)
        .expect("a new data path has chosen no KERNEL backend yet");
    if let Some(u) = &uplink {
        dp.set_uplink(u.next_hops());
    }
    // As cmd-forwarder-vpp at start: each host interface of the device selector attached.
    for (via, host) in cfg.device_selector.entries() {
        match dp.vlan_host_port(host) {
            Ok(mtu) => tracing::info!(
                via,
                host,
                mtu,
                "VLAN mechanism: connections labelled via={via} leave by {host}"
            ),
            Err(e) => {
                tracing::warn!(via, host, error = %e, "VLAN mechanism: the host interface is not attached yet (tried again by each connection through it)")
            }
        }
    }
    let handle = NsmHandle::spawn_with_registry(cfg, dp, 2).map_err(NsmStartError::Serve)?;
    Ok(NsmService {
        handle,
        _uplink: uplink,
    })
}

/// The NSM services [`start`] runs, and the node uplink they attached (if any). It derefs to
/// the services' handle; dropping it stops the services, then the uplink's neighbour watch.
pub struct NsmService {
    handle: NsmHandle,
    _uplink: Option<NodeUplink>,
}

impl std::ops::Deref for NsmService {
    type Target = NsmHandle;

    fn deref(&self) -> &NsmHandle {
        &self.handle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_their_kind() {
        assert_eq!(
            fwd_error(ForwarderError::NotFound("x".into())),
            BackendError::NotFound("x".into())
        );
        assert!(matches!(
            fwd_error(ForwarderError::Unavailable("x".into())),
            BackendError::Failed(_)
        ));
        // IPv6 only (NSM_CIDR_PREFIX=2001:db8::/116): the forwarder's peer has no IPv4 next hop.
        let v6 = L3NextHops {
            v4: None,
            v6: Some("2001:db8::".parse().unwrap()),
        };
        assert_eq!(
            l3_peer(v6),
            L3Peer {
                v4: None,
                v6: v6.v6
            }
        );
        assert_eq!(mtu16(None).unwrap(), 1500);
    }
}
