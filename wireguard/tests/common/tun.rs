//! A TUN device in a namespace, for our side to carry the kernel's own traffic (TCP) through
//! `wireguard::Device`.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

/// `TUNSETIFF`: `_IOW('T', 202, int)` (linux/if_tun.h).
const TUNSETIFF: u64 = 0x4004_54ca;
const IFF_TUN: i16 = 0x0001;
const IFF_NO_PI: i16 = 0x1000;

/// `struct ifreq` as TUNSETIFF reads it: the name and the flags, padded to its 40 bytes.
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: i16,
    _pad: [u8; 22],
}

/// An open TUN device (no packet information header: each read or write is one IP packet).
pub struct Tun {
    file: File,
}

impl Tun {
    /// Creates TUN `name` in network namespace `ns` and opens it, non-blocking.
    pub fn create_in(ns: &str, name: &str) -> Tun {
        assert!(name.len() < 16, "interface name too long: {name}");
        let path = format!("/run/netns/{ns}");
        let name = name.to_string();
        std::thread::spawn(move || {
            let netns = File::open(&path).expect("namespace file");
            nix::sched::setns(netns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/net/tun")
                .expect("/dev/net/tun");
            let mut req = IfReq {
                name: [0; 16],
                flags: IFF_TUN | IFF_NO_PI,
                _pad: [0; 22],
            };
            req.name[..name.len()].copy_from_slice(name.as_bytes());
            // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `req` is laid out as
            // (repr(C), 40 bytes) and outlives the call; the descriptor is open.
            let r = unsafe {
                nix::libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq)
            };
            assert_eq!(
                r,
                0,
                "TUNSETIFF {name}: {}",
                std::io::Error::last_os_error()
            );
            let flags = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_GETFL).expect("F_GETFL");
            let flags =
                nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
            nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFL(flags)).expect("F_SETFL");
            Tun { file }
        })
        .join()
        .expect("tun thread")
    }

    /// Reads one packet, or `None` if none is waiting.
    pub fn read(&mut self, buf: &mut [u8]) -> Option<usize> {
        match self.file.read(buf) {
            Ok(n) => Some(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
            Err(e) => panic!("tun read: {e}"),
        }
    }

    /// Writes one packet (the kernel takes it or drops it).
    pub fn write(&mut self, packet: &[u8]) {
        if let Err(e) = self.file.write(packet) {
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "tun write: {e}");
        }
    }

    /// Its descriptor, for poll(2).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}
