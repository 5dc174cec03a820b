//! NSM's VLAN mechanism over the forwarder: the host interface `NSM_DEVICE_SELECTOR_FILE`
//! selects becomes an AF_PACKET port of Quiver's, `host-<interface>` (VPP's name for such a
//! port), promiscuous, its MTU the interface's, attached the first time a connection needs it
//! and kept while Quiver runs, as cmd-forwarder-vpp attaches each selected device at start;
//! each connection gets an 802.1Q sub-interface of it for the endpoint's VLAN, owned by the
//! connection and removed with it. The kernel keeps the interface: AF_PACKET only reads a copy
//! of what it receives.

use nsm_forwarder::dataplane::VlanSpec;
use nsm_forwarder::BackendError;

use super::ForwarderDataplane;
use crate::config::topology::DEFAULT_AF_PACKET_RING_KB;
use crate::config::{AfPacketSection, PortSection};
use crate::control::owner::Change;

/// Quiver's port on host interface `host`.
pub fn host_port(host: &str) -> String {
    format!("host-{host}")
}

/// The MTU of kernel interface `host` in Quiver's namespace.
fn kernel_mtu(host: &str) -> Result<u16, BackendError> {
    let path = format!("/sys/class/net/{host}/mtu");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        BackendError::NotFound(format!(
            "host interface {host} (NSM_DEVICE_SELECTOR_FILE) is not in Quiver's network \
             namespace: {e}"
        ))
    })?;
    let mtu: u32 = text
        .trim()
        .parse()
        .map_err(|_| BackendError::Failed(format!("{path}: {text:?} is not an MTU")))?;
    // Quiver's ports carry at most 9216 bytes: a larger MTU is clamped, not refused.
    Ok(mtu.min(9216) as u16)
}

impl ForwarderDataplane {
    /// Attaches Quiver's port to host interface `host` unless it has one; its MTU.
    pub(super) fn vlan_host_port(&self, host: &str) -> Result<u32, BackendError> {
        let name = host_port(host);
        let mtu = kernel_mtu(host)?;
        if self.control.view().port(&name).is_some() {
            return Ok(u32::from(mtu));
        }
        let section = PortSection::AfPacket(AfPacketSection {
            name: name.clone(),
            mac: None,
            mtu,
            interface: host.to_string(),
            promiscuous: true,
            netns: None,
            ring_kb: DEFAULT_AF_PACKET_RING_KB,
        });
        match self.apply(Change::AddPort {
            port: section,
            owner: None,
        }) {
            Ok(()) => {
                tracing::info!(host, port = name, mtu, "attached to a VLAN host interface");
                Ok(u32::from(mtu))
            }
            // Another connection's Request attached it meanwhile.
            Err(BackendError::AlreadyExists(_)) if self.control.view().port(&name).is_some() => {
                Ok(u32::from(mtu))
            }
            Err(e) => Err(e),
        }
    }

    /// The sub-interface `spec` of its host interface's port, for `owner`.
    pub(super) fn create_vlan_sub(&self, owner: &str, spec: &VlanSpec) -> Result<(), BackendError> {
        let parent = host_port(&spec.host);
        self.apply(Change::AddVlan {
            name: spec.name.0.clone(),
            parent: parent.clone(),
            vlan: spec.vlan,
            owner: Some(owner.into()),
        })
        .map_err(|e| match e {
            BackendError::AlreadyExists(why) if why.starts_with(&format!("port {parent} ")) => {
                BackendError::AlreadyExists(format!(
                    "VLAN {} on {} is another connection's: Quiver cross-connects one \
                     connection per VLAN and host interface ({why})",
                    spec.vlan, spec.host
                ))
            }
            other => other,
        })
    }
}
