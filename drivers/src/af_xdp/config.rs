//! How an AF_XDP port is opened: [`AfXdpConfig`], with its copy and attach modes.

/// Whether the kernel may share the UMEM with the driver (zero-copy) or copies frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpCopyMode {
    /// Zero-copy where the driver supports it, copy mode otherwise (veths).
    #[default]
    Auto,
    /// Always copy mode.
    Copy,
    /// Zero-copy or fail.
    ZeroCopy,
}

/// Where the XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpAttach {
    /// In the driver (native) where it can, generic otherwise.
    #[default]
    Auto,
    /// In the driver's own receive path (veths, most NIC drivers), or fail.
    Native,
    /// After the kernel has built its packet (any interface; slower).
    Generic,
}

/// How an AF_XDP port is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfXdpConfig {
    /// The kernel interface's name.
    pub interface: String,
    /// Queue pairs: one per worker, worker `i` on the interface's receive queue `i`.
    pub queues: usize,
    /// UMEM frames per queue, half to receive and half to send (a power of two, at least 64):
    /// the ring memory is `frames` × 2 KiB (4 KiB above a 1,774-byte MTU).
    pub frames: u32,
    /// Copy or zero-copy.
    pub copy: XdpCopyMode,
    /// Native or generic XDP.
    pub attach: XdpAttach,
    /// Take only UDP to these destination ports and leave everything else to the kernel (a
    /// node uplink); empty takes every frame.
    pub tunnel_ports: Vec<u16>,
}

impl AfXdpConfig {
    /// `queues` queue pairs on `interface`, every frame, 1,024 frames each way per queue
    /// (4 MiB at 2 KiB frames).
    pub fn new(interface: &str, queues: usize) -> AfXdpConfig {
        AfXdpConfig {
            interface: interface.into(),
            queues,
            frames: 2048,
            copy: XdpCopyMode::Auto,
            attach: XdpAttach::Auto,
            tunnel_ports: Vec::new(),
        }
    }
}
