//! Opening a port of any type from its configuration section.

use std::sync::Arc;

use drivers::af_packet::{AfPacketConfig, AfPacketPort};
use drivers::memif_port::{MemifControl, MemifPortConfig};
use drivers::netns::{NetNs, NetNsError};
use drivers::tap::{TapConfig, TapPort};
use drivers::{Port, PortError};
use memif::{Mode, Role, SocketAddress};

use super::dpdk_ports;
use crate::config::{MemifMode, MemifRole, MemifSection, PortSection};

use crate::config::values::{self, ValueError};
use crate::config::{AfXdpSection, XdpAttachKey, XdpCopyKey};
use drivers::af_xdp::{AfXdpConfig, AfXdpPort, XdpAttach, XdpCopyMode};

/// Why a port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// `mac` is not a MAC address.
    #[error(transparent)]
    Mac(ValueError),
    /// A MAC for an AF_PACKET port.
    #[error("an af_packet port uses its kernel interface's MAC")]
    AfPacketMac,
    /// A MAC for an AF_XDP port.
    #[error("an af_xdp port uses its kernel interface's MAC")]
    AfXdpMac,
    /// A MAC for a DPDK port.
    #[error("a dpdk port uses its device's MAC")]
    DpdkMac,
    /// A DPDK port without DPDK.
    #[error("the EAL is not running")]
    NoEal,
    /// A memif ring size that is not a power of two from 2 to 16384.
    #[error("ring_size {0} must be a power of two from 2 to 16384")]
    RingSize(u32),
    /// A memif port without a socket.
    #[error("socket is empty")]
    EmptySocket,
    /// The driver refused.
    #[error(transparent)]
    Port(#[from] PortError),
    /// The network namespace cannot be used.
    #[error(transparent)]
    Netns(NetNsError),
}

/// Opens the port `p` describes for `workers` workers, starting memif's control thread with
/// the first memif port.
pub(super) fn open_port(
    p: &PortSection,
    workers: usize,
    memif: &mut Option<MemifControl>,
    dpdk: Option<&dpdk_ports::Dpdk>,
) -> Result<Arc<dyn Port>, OpenError> {
    let common = p.common();
    let mac = common
        .mac
        .map(values::mac)
        .transpose()
        .map_err(OpenError::Mac)?;
    Ok(match p {
        PortSection::Memif(m) => {
            if memif.is_none() {
                *memif = Some(MemifControl::start(workers)?);
            }
            let control = memif.as_ref().expect("started above");
            let mut c = memif_config(common.name, m)?;
            if let Some(path) = &m.netns {
                c.netns = Some(NetNs::open_path(path).map_err(OpenError::Netns)?);
            }
            if let Some(mac) = mac {
                c.mac = mac;
            }
            control.add_port(c)?
        }
        PortSection::AfPacket(a) => {
            if mac.is_some() {
                return Err(OpenError::AfPacketMac);
            }
            let mut c = AfPacketConfig::new(&a.interface, workers);
            c.promiscuous = a.promiscuous;
            c.ring_bytes = a.ring_kb as usize * 1024;
            let netns = match &a.netns {
                Some(path) => Some(Arc::new(NetNs::open_path(path).map_err(OpenError::Netns)?)),
                None => None,
            };
            Arc::new(AfPacketPort::open_in(&c, netns)?)
        }
        PortSection::AfXdp(x) => {
            if mac.is_some() {
                return Err(OpenError::AfXdpMac);
            }
            let netns = match &x.netns {
                Some(path) => Some(Arc::new(NetNs::open_path(path).map_err(OpenError::Netns)?)),
                None => None,
            };
            Arc::new(AfXdpPort::open_in(&af_xdp_config(x, workers), netns)?)
        }
        PortSection::Dpdk(d) => {
            if mac.is_some() {
                return Err(OpenError::DpdkMac);
            }
            let dpdk = dpdk.ok_or(OpenError::NoEal)?;
            dpdk.open(d, workers)
                .map_err(|e| OpenError::Port(PortError::Device(e.to_string())))?
        }
        PortSection::Tap(t) => {
            let mut c = TapConfig::new(t.device.as_deref().unwrap_or(common.name), workers);
            c.mac = mac;
            if let Some(path) = &t.netns {
                c.netns = Some(Arc::new(NetNs::open_path(path).map_err(OpenError::Netns)?));
            }
            Arc::new(TapPort::open(&c)?)
        }
    })
}

/// The AF_XDP driver's configuration of a `type = "af_xdp"` section.
fn af_xdp_config(x: &AfXdpSection, workers: usize) -> AfXdpConfig {
    AfXdpConfig {
        frames: x.frames,
        copy: match x.copy {
            XdpCopyKey::Auto => XdpCopyMode::Auto,
            XdpCopyKey::Copy => XdpCopyMode::Copy,
            XdpCopyKey::ZeroCopy => XdpCopyMode::ZeroCopy,
        },
        attach: match x.attach {
            XdpAttachKey::Auto => XdpAttach::Auto,
            XdpAttachKey::Native => XdpAttach::Native,
            XdpAttachKey::Generic => XdpAttach::Generic,
        },
        tunnel_ports: x.tunnel_ports.clone(),
        ..AfXdpConfig::new(&x.interface, workers)
    }
}

/// The memif driver's configuration of port `name`.
pub(super) fn memif_config(name: &str, m: &MemifSection) -> Result<MemifPortConfig, OpenError> {
    if !m.ring_size.is_power_of_two() || !(2..=1 << 14).contains(&m.ring_size) {
        return Err(OpenError::RingSize(m.ring_size));
    }
    if m.socket.is_empty() {
        return Err(OpenError::EmptySocket);
    }
    let role = match m.role {
        MemifRole::Master => Role::Master,
        MemifRole::Slave => Role::Slave,
    };
    let mut c = MemifPortConfig::new(name, role, SocketAddress::parse(&m.socket), m.id);
    c.secret = m.secret.clone();
    c.mode = match m.mode {
        MemifMode::Ethernet => Mode::Ethernet,
        MemifMode::Ip => Mode::Ip,
    };
    c.log2_ring_size = m.ring_size.trailing_zeros() as u8;
    c.buffer_size = m.buffer_size;
    c.queues = m.queues;
    Ok(c)
}
