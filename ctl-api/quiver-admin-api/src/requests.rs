//! Requests checked before the backend sees them: names, sizes, enumerations, and the specs
//! of ports, cross-connects and captures. A bad field is [`AdminError::InvalidArgument`]
//! naming it.

use std::net::IpAddr;

use crate::backend::{AdminError, AdminResult, AfPacketSpec, CaptureSpec, L3Peers, MemifSpec};
use crate::parse::{parse_ip, parse_mac};
use crate::proto as pb;

/// Snap length when the request gives none.
pub(crate) const DEFAULT_SNAPLEN: u32 = 2048;

/// The spec a `CaptureStart` request asks for, or why it is invalid.
pub(crate) fn capture_spec(r: &pb::CaptureStartRequest) -> AdminResult<CaptureSpec> {
    let interface = r.interface.trim();
    if interface.is_empty() {
        return Err(AdminError::InvalidArgument("interface is empty".into()));
    }
    let file = std::path::PathBuf::from(r.file.trim());
    if !file.is_absolute() {
        return Err(AdminError::InvalidArgument(format!(
            "capture file `{}` is not an absolute path (quiver run writes it)",
            r.file
        )));
    }
    let (rx, tx) = match r.direction.trim() {
        "" | "both" => (true, true),
        "rx" => (true, false),
        "tx" => (false, true),
        other => {
            return Err(AdminError::InvalidArgument(format!(
                "capture direction `{other}`: rx, tx or both"
            )))
        }
    };
    Ok(CaptureSpec {
        interface: interface.to_string(),
        file,
        rx,
        tx,
        max_packets: r.max_packets,
        max_bytes: r.max_bytes,
        snaplen: if r.snaplen == 0 {
            DEFAULT_SNAPLEN
        } else {
            r.snaplen
        },
    })
}

/// A name field, trimmed; empty is invalid.
pub(crate) fn name(what: &str, s: &str) -> AdminResult<String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(AdminError::InvalidArgument(format!("{what} is empty")));
    }
    Ok(s.to_string())
}

/// A 16-bit field; 0 means `default`.
pub(crate) fn u16_or(what: &str, v: u32, default: u16) -> AdminResult<u16> {
    match v {
        0 => Ok(default),
        v => u16::try_from(v)
            .map_err(|_| AdminError::InvalidArgument(format!("{what} {v} is too large"))),
    }
}

/// The memif port an `AddMemif` request asks for.
pub(crate) fn memif_spec(r: &pb::AddMemifRequest) -> AdminResult<MemifSpec> {
    let master = match r.role.trim() {
        "" | "master" => true,
        "slave" => false,
        other => {
            return Err(AdminError::InvalidArgument(format!(
                "memif role `{other}`: master or slave"
            )))
        }
    };
    let ip_mode = match r.mode.trim() {
        "" | "ethernet" => false,
        "ip" => true,
        other => {
            return Err(AdminError::InvalidArgument(format!(
                "memif mode `{other}`: ethernet or ip"
            )))
        }
    };
    Ok(MemifSpec {
        name: name("interface name", &r.name)?,
        master,
        socket: name("memif socket", &r.socket)?,
        id: r.id,
        ip_mode,
        ring_size: if r.ring_size == 0 { 1024 } else { r.ring_size },
        buffer_size: if r.buffer_size == 0 {
            2048
        } else {
            r.buffer_size
        },
        queues: match r.queues {
            0 => 1,
            q @ 1..=256 => q as u16,
            q => {
                return Err(AdminError::InvalidArgument(format!(
                    "memif queues {q}: 1 to 256"
                )))
            }
        },
        secret: (!r.secret.is_empty()).then(|| r.secret.clone()),
        mac: match r.mac.trim() {
            "" => None,
            m => Some(parse_mac(m)?),
        },
        mtu: u16_or("MTU", r.mtu, 1500)?,
    })
}

/// The AF_PACKET port an `AddAfPacket` request asks for.
pub(crate) fn af_packet_spec(r: &pb::AddAfPacketRequest) -> AdminResult<AfPacketSpec> {
    Ok(AfPacketSpec {
        name: name("interface name", &r.name)?,
        host_interface: name("host interface", &r.host_interface)?,
        promiscuous: r.promiscuous.unwrap_or(true),
        mtu: u16_or("MTU", r.mtu, 1500)?,
        ring_kb: r.ring_kb,
    })
}

/// An `AddCrossConnect` request's L3 peers: both or neither, each an address or an IPv4 and an
/// IPv6 one with a comma between (`10.0.0.2,fd00::2`).
pub(crate) fn l3_peers(r: &pb::AddCrossConnectRequest) -> AdminResult<Option<L3Peers>> {
    let hops = |what: &str, s: &str| -> AdminResult<Vec<IpAddr>> {
        let hops = s
            .split(',')
            .map(|a| parse_ip(what, a))
            .collect::<AdminResult<Vec<IpAddr>>>()?;
        match hops.as_slice() {
            [_] => Ok(hops),
            [x, y] if x.is_ipv4() != y.is_ipv4() => Ok(hops),
            _ => Err(AdminError::InvalidArgument(format!(
                "{what} `{s}`: one next hop, or an IPv4 and an IPv6 one (`10.0.0.2,fd00::2`)"
            ))),
        }
    };
    match (r.peer_a.trim(), r.peer_b.trim()) {
        ("", "") => Ok(None),
        (a, b) if !a.is_empty() && !b.is_empty() => Ok(Some(L3Peers {
            peer_a: hops("peer_a", a)?,
            peer_b: hops("peer_b", b)?,
        })),
        _ => Err(AdminError::InvalidArgument(
            "an L3 cross-connect needs both peers".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_paths_and_defaults_are_checked() {
        let r = |direction: &str, file: &str| pb::CaptureStartRequest {
            interface: "memif0".into(),
            file: file.into(),
            direction: direction.into(),
            ..Default::default()
        };
        let s = capture_spec(&r("", "/tmp/a.pcap")).unwrap();
        assert_eq!((s.rx, s.tx, s.snaplen), (true, true, DEFAULT_SNAPLEN));
        let s = capture_spec(&r("tx", "/tmp/a.pcap")).unwrap();
        assert_eq!((s.rx, s.tx), (false, true));
        assert!(matches!(
            capture_spec(&r("sideways", "/tmp/a.pcap")),
            Err(AdminError::InvalidArgument(_))
        ));
        assert!(matches!(
            capture_spec(&r("rx", "a.pcap")),
            Err(AdminError::InvalidArgument(_))
        ));
        let mut no_name = r("rx", "/tmp/a.pcap");
        no_name.interface = " ".into();
        assert!(capture_spec(&no_name).is_err());
    }

    #[test]
    fn l3_peers_are_one_next_hop_or_one_of_each_family() {
        let r = |a: &str, b: &str| pb::AddCrossConnectRequest {
            a: "x".into(),
            b: "y".into(),
            peer_a: a.into(),
            peer_b: b.into(),
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(l3_peers(&r("", "")).unwrap(), None);
        assert_eq!(
            l3_peers(&r("10.0.0.2", " fd00::2 ")).unwrap(),
            Some(L3Peers {
                peer_a: vec![ip("10.0.0.2")],
                peer_b: vec![ip("fd00::2")],
            })
        );
        assert_eq!(
            l3_peers(&r("fd00:1::2,10.0.1.2", "10.0.2.2, fd00:2::2")).unwrap(),
            Some(L3Peers {
                peer_a: vec![ip("fd00:1::2"), ip("10.0.1.2")],
                peer_b: vec![ip("10.0.2.2"), ip("fd00:2::2")],
            })
        );
        for (a, b, why) in [
            ("10.0.0.2", "", "both peers"),
            ("10.0.0.2,10.0.0.3", "fd00::2", "an IPv4 and an IPv6"),
            ("10.0.0.2", "fd00::2,fd00::3", "an IPv4 and an IPv6"),
            (
                "10.0.0.2,fd00::2,10.0.0.3",
                "fd00::2",
                "an IPv4 and an IPv6",
            ),
            ("10.0.0.2,", "fd00::2", "is not an IPv4 or IPv6 address"),
            ("host", "fd00::2", "is not an IPv4 or IPv6 address"),
        ] {
            match l3_peers(&r(a, b)) {
                Err(AdminError::InvalidArgument(m)) => assert!(m.contains(why), "{a} {b}: {m}"),
                other => panic!("{a} {b}: {other:?}"),
            }
        }
    }
}
