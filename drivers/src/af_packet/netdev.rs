//! Kernel network devices by name: index, MAC address, MTU and flags through the classic
//! `SIOC*IF*` ioctls (no netlink). Shared by the AF_PACKET and TAP ports.
//!
//! A device name means something only within a network namespace: every request goes through a
//! control socket opened when the [`NetDevice`] was, so the device is found in the namespace of
//! the thread that opened it, whichever thread asks later.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

use crate::port::{LinkStatus, PortError};

/// `ARPHRD_ETHER`: the hardware type of Ethernet devices (`<linux/if_arp.h>`).
const ARPHRD_ETHER: u16 = 1;

/// A `struct ifreq` naming `name`, the rest zero; `None` when the name does not fit.
pub(crate) fn ifreq(name: &str) -> Option<libc::ifreq> {
    if name.len() >= libc::IFNAMSIZ
        || name
            .bytes()
            .any(|b| b == 0 || b == b'/' || b.is_ascii_whitespace())
    {
        return None;
    }
    // SAFETY: `ifreq` is a C struct of byte arrays and a union of integers, addresses and a
    // pointer; all zero bits is a valid value of each (the pointer is null and never read).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *dst = src as libc::c_char;
    }
    Some(req)
}

/// The name in a `struct ifreq` (as the kernel filled it in).
pub(crate) fn ifreq_name(req: &libc::ifreq) -> String {
    let bytes: Vec<u8> = req
        .ifr_name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A kernel network device, looked up by name in the namespace it was opened in.
#[derive(Debug)]
pub(crate) struct NetDevice {
    name: String,
    control: OwnedFd,
}

impl NetDevice {
    /// The device called `name`, which must exist.
    pub(crate) fn open(name: &str) -> Result<NetDevice, PortError> {
        if ifreq(name).is_none() {
            return Err(PortError::Config(format!(
                "`{name}` is not a valid interface name (1 to {} bytes, no '/', NUL or spaces)",
                libc::IFNAMSIZ - 1
            )));
        }
        let control = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(|source| PortError::Sys {
            what: "control socket for interface ioctls".into(),
            source,
        })?;
        let dev = NetDevice {
            name: name.into(),
            control,
        };
        dev.index()?;
        Ok(dev)
    }

    /// The device's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Runs one `SIOC*` request for this device.
    fn request(&self, request: libc::c_ulong, what: &str) -> Result<libc::ifreq, PortError> {
        self.request_with(request, what, |_| {})
    }

    fn request_with(
        &self,
        request: libc::c_ulong,
        what: &str,
        fill: impl FnOnce(&mut libc::ifreq),
    ) -> Result<libc::ifreq, PortError> {
        let mut req = ifreq(&self.name).expect("the name was checked when opened");
        fill(&mut req);
        // SAFETY: every request used here reads and writes at most one `struct ifreq`, which
        // `req` is, and the control socket is open for as long as `self` lives.
        let r = unsafe { libc::ioctl(self.control.as_raw_fd(), request as _, &mut req) };
        if r < 0 {
            let source = nix::Error::last();
            if source == nix::Error::ENODEV {
                return Err(PortError::Config(format!(
                    "no interface named `{}` in this network namespace",
                    self.name
                )));
            }
            return Err(PortError::Sys {
                what: format!("{what} of `{}`", self.name),
                source,
            });
        }
        Ok(req)
    }

    /// The device's index.
    pub(crate) fn index(&self) -> Result<i32, PortError> {
        let req = self.request(libc::SIOCGIFINDEX, "SIOCGIFINDEX")?;
        // SAFETY: SIOCGIFINDEX fills the union's `ifru_ifindex` member.
        Ok(unsafe { req.ifr_ifru.ifru_ifindex })
    }

    /// The device's Ethernet address; an error for devices that are not Ethernet.
    pub(crate) fn mac(&self) -> Result<[u8; 6], PortError> {
        let req = self.request(libc::SIOCGIFHWADDR, "SIOCGIFHWADDR")?;
        // SAFETY: SIOCGIFHWADDR fills the union's `ifru_hwaddr` member, a `sockaddr`.
        let hw = unsafe { req.ifr_ifru.ifru_hwaddr };
        if hw.sa_family != ARPHRD_ETHER {
            return Err(PortError::Config(format!(
                "`{}` is not an Ethernet interface (hardware type {})",
                self.name, hw.sa_family
            )));
        }
        Ok(std::array::from_fn(|i| hw.sa_data[i] as u8))
    }

    /// The device's MTU (the largest L3 packet, without the Ethernet header).
    pub(crate) fn mtu(&self) -> Result<u32, PortError> {
        let req = self.request(libc::SIOCGIFMTU, "SIOCGIFMTU")?;
        // SAFETY: SIOCGIFMTU fills the union's `ifru_mtu` member.
        let mtu = unsafe { req.ifr_ifru.ifru_mtu };
        Ok(mtu.max(0) as u32)
    }

    /// The device's `IFF_*` flags.
    pub(crate) fn flags(&self) -> Result<u32, PortError> {
        let req = self.request(libc::SIOCGIFFLAGS, "SIOCGIFFLAGS")?;
        // SAFETY: SIOCGIFFLAGS fills the union's `ifru_flags` member.
        Ok(unsafe { req.ifr_ifru.ifru_flags } as u16 as u32)
    }

    /// Sets `IFF_UP` (administratively up), keeping the other flags.
    pub(crate) fn set_up(&self) -> Result<(), PortError> {
        let flags = self.flags()?;
        if flags & libc::IFF_UP as u32 != 0 {
            return Ok(());
        }
        let up = (flags | libc::IFF_UP as u32) as u16 as libc::c_short;
        self.request_with(libc::SIOCSIFFLAGS, "SIOCSIFFLAGS", |r| {
            r.ifr_ifru.ifru_flags = up
        })?;
        Ok(())
    }

    /// Up when the device is administratively up and has a carrier (`IFF_UP` and
    /// `IFF_RUNNING`).
    pub(crate) fn link(&self) -> LinkStatus {
        match self.flags() {
            Err(e) => LinkStatus::Down(e.to_string()),
            Ok(f) if f & libc::IFF_UP as u32 == 0 => {
                LinkStatus::Down(format!("`{}` is administratively down", self.name))
            }
            Ok(f) if f & libc::IFF_RUNNING as u32 == 0 => {
                LinkStatus::Down(format!("`{}` has no carrier", self.name))
            }
            Ok(_) => LinkStatus::Up,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_before_any_ioctl() {
        assert!(ifreq("eth0").is_some());
        assert!(ifreq("").is_some(), "empty: the kernel picks a name (TAP)");
        assert!(ifreq("a-name-that-is-too-long").is_none());
        assert!(ifreq("a/b").is_none());
        let r = ifreq("veth-x1").unwrap();
        assert_eq!(ifreq_name(&r), "veth-x1");
        assert!(matches!(
            NetDevice::open("no/such"),
            Err(PortError::Config(_))
        ));
    }

    #[test]
    fn loopback_is_found_but_is_not_ethernet() {
        let lo = NetDevice::open("lo").expect("every namespace has lo");
        assert!(lo.index().unwrap() > 0);
        assert!(lo.mtu().unwrap() > 0);
        assert!(matches!(lo.mac(), Err(PortError::Config(_))));
        assert!(matches!(
            NetDevice::open("quiver-none0"),
            Err(PortError::Config(_))
        ));
    }
}
