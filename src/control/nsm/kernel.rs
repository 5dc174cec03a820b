//! NSM's KERNEL mechanism on Quiver's side: the connection's interface inside a pod's
//! namespace, with Quiver's end as a port, over one of two backends:
//! - **TAP** (the default; `NSM_KERNEL_BACKEND=tap`): Quiver opens a TAP device as its port
//!   (multi-queue, virtio-net headers: checksum and TCP segmentation offloads both ways),
//!   created from inside the namespace under the requested name. Nothing of it is in Quiver's
//!   namespace, and nothing outlives Quiver (the device goes with its descriptors).
//! - **veth** (`NSM_KERNEL_BACKEND=veth`): a veth pair, its far end in the namespace, Quiver's
//!   end an AF_PACKET port (with virtio-net headers too), tagged so that a restarted Quiver
//!   reaps it.
//!
//! Either way the IP context is applied inside the namespace as sdk-kernel does: the side's
//! addresses, a route to each of the other side's addresses its own prefixes do not hold, the
//! context's routes with their gateways on-link, the neighbours and, on the client's side, the
//! policies (an `ip rule` and a table each; a default route for a policy without routes).

use drivers::kernel_interface::{KernelInterface, KernelInterfaceConfig, NeighborConfig};
use drivers::netns::NetNs;
use nsm_forwarder::config::KernelBackend;
use nsm_forwarder::dataplane::KernelSpec;
use nsm_forwarder::BackendError;

use super::owned::{
    allow_ping_sockets, kernel_error, kernel_tag, mtu16, nsm_alias, policy_config, route_config,
    InsideNeighbors, OwnedPort,
};
use super::ForwarderDataplane;
use crate::config::topology::DEFAULT_AF_PACKET_RING_KB;
use crate::config::{AfPacketSection, PortSection, TapSection};
use crate::control::owner::Change;

/// [`ForwarderDataplane::set_kernel_backend`] called when the backend was already chosen: by
/// an earlier call, or by the first KERNEL interface made (with the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the KERNEL backend is {chosen:?} already (set before, or used by a KERNEL interface): \
     cannot make it {asked:?}"
)]
pub struct KernelBackendAlreadySet {
    /// The backend in use.
    pub chosen: KernelBackend,
    /// The backend asked for.
    pub asked: KernelBackend,
}

impl ForwarderDataplane {
    /// Sets which interfaces KERNEL mechanisms get: once, before the first is made (the
    /// default, when never set, is TAP: [`KernelBackend::default`]). A second call, or one after
    /// a KERNEL interface was made, fails and changes nothing.
    pub fn set_kernel_backend(
        &self,
        backend: KernelBackend,
    ) -> Result<(), KernelBackendAlreadySet> {
        self.kernel_backend
            .set(backend)
            .map_err(|asked| KernelBackendAlreadySet {
                chosen: self.kernel_backend(),
                asked,
            })
    }

    /// Which interfaces KERNEL mechanisms get; from the first call on, fixed (the default if
    /// none was set).
    pub fn kernel_backend(&self) -> KernelBackend {
        *self.kernel_backend.get_or_init(KernelBackend::default)
    }

    /// Creates `spec`'s interface for `owner` with this data path's backend and records it.
    pub(super) fn create_kernel_port(
        &self,
        owner: &str,
        spec: &KernelSpec,
    ) -> Result<(), BackendError> {
        let netns = NetNs::open_path(&spec.netns).map_err(|e| {
            let m = e.to_string();
            if e.is_not_found() {
                BackendError::NotFound(m)
            } else {
                BackendError::Failed(m)
            }
        })?;
        let config = KernelInterfaceConfig {
            connection_id: kernel_tag(owner, &spec.name),
            name: spec.ifname.clone(),
            mtu: spec.mtu.unwrap_or(0),
            addresses: spec.ip.addresses.iter().map(|a| a.to_string()).collect(),
            routes: spec.ip.routes.iter().map(route_config).collect(),
            peer_addresses: spec.ip.peers.iter().map(|p| p.to_string()).collect(),
            neighbors: spec
                .ip
                .neighbors
                .iter()
                .map(|n| NeighborConfig {
                    ip: n.ip.to_string(),
                    mac: n.mac.to_string(),
                })
                .collect(),
            policies: spec.ip.policies.iter().map(policy_config).collect(),
            alias: nsm_alias(owner, &spec.name),
        };
        let iface = match self.kernel_backend() {
            KernelBackend::Veth => veth(self, owner, spec, &netns, &config)?,
            KernelBackend::Tap => tap(self, owner, spec, &netns, &config)?,
        };
        allow_ping_sockets(&netns);
        let inside = InsideNeighbors {
            route_hops: spec
                .ip
                .routes
                .iter()
                .filter_map(|r| r.via)
                .chain(spec.ip.peers.iter().map(|p| p.addr))
                .collect(),
            configured: spec.ip.neighbors.iter().map(|n| (n.ip, n.mac.0)).collect(),
            added: Vec::new(),
            with: None,
        };
        self.ports().insert(
            spec.name.0.clone(),
            OwnedPort {
                owner: owner.into(),
                kernel: Some(iface),
                inside,
                seen_up: None,
            },
        );
        Ok(())
    }
}

/// The veth pair, then the AF_PACKET port on Quiver's end.
fn veth(
    dp: &ForwarderDataplane,
    owner: &str,
    spec: &KernelSpec,
    netns: &NetNs,
    config: &KernelInterfaceConfig,
) -> Result<KernelInterface, BackendError> {
    let veth = KernelInterface::create(netns, config).map_err(kernel_error)?;
    let section = PortSection::AfPacket(AfPacketSection {
        name: spec.name.0.clone(),
        mac: None,
        mtu: mtu16(spec.mtu)?,
        interface: veth.host_name().to_string(),
        promiscuous: true,
        netns: None,
        ring_kb: DEFAULT_AF_PACKET_RING_KB,
    });
    if let Err(e) = dp.add(owner, section) {
        if let Err(d) = veth.delete() {
            tracing::error!(error = %d, "cannot delete a veth after a failed port");
        }
        return Err(e);
    }
    Ok(veth)
}

/// The TAP port, its device created straight inside the namespace under the requested name
/// (never in Quiver's namespace, never moved), then configured there.
fn tap(
    dp: &ForwarderDataplane,
    owner: &str,
    spec: &KernelSpec,
    netns: &NetNs,
    config: &KernelInterfaceConfig,
) -> Result<KernelInterface, BackendError> {
    KernelInterface::ensure_name_free(netns, &config.name).map_err(kernel_error)?;
    let section = PortSection::Tap(TapSection {
        name: spec.name.0.clone(),
        mac: None,
        mtu: mtu16(spec.mtu)?,
        device: Some(config.name.clone()),
        netns: Some(netns.path().to_path_buf()),
    });
    dp.add(owner, section)?;
    let mac = dp
        .control
        .view()
        .port(&spec.name.0)
        .map(|p| p.port.mac())
        .ok_or_else(|| BackendError::Failed(format!("{}: the TAP port vanished", spec.name)))?;
    KernelInterface::adopt_tap(netns, config, mac).map_err(|e| {
        let removed = dp.apply(Change::RemoveInterface {
            name: spec.name.0.clone(),
        });
        if let Err(r) = removed {
            tracing::error!(error = %r, "cannot remove a TAP port after a failed configuration");
        }
        kernel_error(e)
    })
}
