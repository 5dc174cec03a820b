//! Opening a port of any type from its configuration section.

use super::*;

/// Why a port could not be opened.
pub(super) enum OpenError {
    /// The configuration is wrong.
    Config(String),
    /// The driver refused.
    Port(PortError),
    /// The network namespace cannot be used.
    Netns(NetNsError),
}

impl From<PortError> for OpenError {
    fn from(e: PortError) -> Self {
        OpenError::Port(e)
    }
}

impl From<String> for OpenError {
    fn from(e: String) -> Self {
        OpenError::Config(e)
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Config(m) => f.write_str(m),
            OpenError::Port(e) => e.fmt(f),
            OpenError::Netns(e) => e.fmt(f),
        }
    }
}

pub(super) fn open_port(
    p: &PortSection,
    workers: usize,
    memif: &mut Option<MemifControl>,
    dpdk: Option<&dpdk_ports::Dpdk>,
) -> Result<Arc<dyn Port>, OpenError> {
    let common = p.common();
    let mac = common.mac.map(parse_mac).transpose()?;
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
                return Err(OpenError::Config(
                    "an af_packet port uses its kernel interface's MAC".into(),
                ));
            }
            let mut c = AfPacketConfig::new(&a.interface, workers);
            c.promiscuous = a.promiscuous;
            let netns = match &a.netns {
                Some(path) => Some(Arc::new(NetNs::open_path(path).map_err(OpenError::Netns)?)),
                None => None,
            };
            Arc::new(AfPacketPort::open_in(&c, netns)?)
        }
        PortSection::Dpdk(d) => {
            if mac.is_some() {
                return Err(OpenError::Config(
                    "a dpdk port uses its device's MAC".into(),
                ));
            }
            let dpdk = dpdk.ok_or_else(|| OpenError::Config("the EAL is not running".into()))?;
            dpdk.open(d, workers)
                .map_err(|e| OpenError::Port(PortError::Device(e)))?
        }
        PortSection::Tap(t) => {
            let mut c = TapConfig::new(t.device.as_deref().unwrap_or(common.name), workers);
            c.mac = mac;
            Arc::new(TapPort::open(&c)?)
        }
    })
}

pub(super) fn memif_config(name: &str, m: &MemifSection) -> Result<MemifPortConfig, String> {
    if !m.ring_size.is_power_of_two() || !(2..=1 << 14).contains(&m.ring_size) {
        return Err(format!(
            "ring_size {} must be a power of two from 2 to 16384",
            m.ring_size
        ));
    }
    if m.socket.is_empty() {
        return Err("socket is empty".into());
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
    Ok(c)
}
