//! Quiver's XDP program (`drivers/bpf/xsk_redirect.c`, built by `build.rs`), loaded with aya and
//! attached to a port's interface through a BPF link: the link belongs to Quiver's process, so
//! the kernel detaches the program when the port closes or Quiver dies, even by `kill -9`.

use std::os::fd::RawFd;

use aya::maps::{Array, MapData, XskMap};
use aya::programs::{Xdp, XdpMode};
use aya::Ebpf;

use super::config::XdpAttach;
use crate::port::PortError;

/// The compiled program (an ELF object for the BPF target).
#[cfg(quiver_xdp_program)]
const OBJECT: Option<&[u8]> = Some(include_bytes!(concat!(env!("OUT_DIR"), "/xsk_redirect.o")));
#[cfg(not(quiver_xdp_program))]
const OBJECT: Option<&[u8]> = None;

/// The attached program and its socket map.
pub(super) struct XdpProgram {
    /// Owns the program and its link: dropping it detaches the program.
    _ebpf: Ebpf,
    xsks: XskMap<MapData>,
    /// Attached in the driver's own hook (`native`) rather than the generic one.
    pub(super) native: bool,
}

fn load_error(what: &str, e: impl std::fmt::Display) -> PortError {
    PortError::Device(format!("XDP program: {what}: {e}"))
}

impl XdpProgram {
    /// Loads the program and attaches it to `interface`. `tunnel_ports` empty: every frame goes
    /// to the queue's socket; otherwise only UDP to one of those ports, the rest to the kernel.
    pub(super) fn attach(
        interface: &str,
        ifindex: u32,
        how: XdpAttach,
        tunnel_ports: &[u16],
    ) -> Result<XdpProgram, PortError> {
        let object = OBJECT.ok_or_else(|| {
            PortError::Config(
                "this Quiver was built without its XDP program (clang was missing): AF_XDP ports \
                 cannot open"
                    .into(),
            )
        })?;
        let mut ebpf = Ebpf::load(object).map_err(|e| load_error("loading", e))?;
        let mut mode: Array<MapData, u32> = Array::try_from(
            ebpf.take_map("mode")
                .ok_or_else(|| load_error("map", "no `mode`"))?,
        )
        .map_err(|e| load_error("map `mode`", e))?;
        mode.set(0, u32::from(!tunnel_ports.is_empty()), 0)
            .map_err(|e| load_error("setting the mode", e))?;
        let mut ports: Array<MapData, u8> = Array::try_from(
            ebpf.take_map("tunnel_ports")
                .ok_or_else(|| load_error("map", "no `tunnel_ports`"))?,
        )
        .map_err(|e| load_error("map `tunnel_ports`", e))?;
        for port in tunnel_ports {
            ports
                .set(u32::from(port.to_be()), 1, 0)
                .map_err(|e| load_error("adding a tunnel port", e))?;
        }
        let xsks = XskMap::try_from(
            ebpf.take_map("xsks")
                .ok_or_else(|| load_error("map", "no `xsks`"))?,
        )
        .map_err(|e| load_error("map `xsks`", e))?;
        let program: &mut Xdp = ebpf
            .program_mut("quiver_xsk")
            .ok_or_else(|| load_error("program", "no `quiver_xsk`"))?
            .try_into()
            .map_err(|e| load_error("program", e))?;
        program.load().map_err(|e| load_error("verifying", e))?;
        let native = match how {
            XdpAttach::Native => {
                program
                    .attach_to_if_index(ifindex, XdpMode::Driver)
                    .map_err(|e| load_error(&format!("attaching to {interface} (native)"), e))?;
                true
            }
            XdpAttach::Generic => {
                program
                    .attach_to_if_index(ifindex, XdpMode::Skb)
                    .map_err(|e| load_error(&format!("attaching to {interface} (generic)"), e))?;
                false
            }
            XdpAttach::Auto => match program.attach_to_if_index(ifindex, XdpMode::Driver) {
                Ok(_) => true,
                Err(_) => {
                    program
                        .attach_to_if_index(ifindex, XdpMode::Skb)
                        .map_err(|e| load_error(&format!("attaching to {interface}"), e))?;
                    false
                }
            },
        };
        Ok(XdpProgram {
            _ebpf: ebpf,
            xsks,
            native,
        })
    }

    /// Sends queue `queue`'s frames to the socket `fd` (the kernel forgets the entry when the
    /// socket closes).
    pub(super) fn insert(&mut self, queue: u32, fd: RawFd) -> Result<(), PortError> {
        self.xsks
            .set(queue, fd, 0)
            .map_err(|e| load_error(&format!("registering the socket of queue {queue}"), e))
    }
}
