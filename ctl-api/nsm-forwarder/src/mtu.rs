//! The MTU of a connection, as NSM defines it: the connection context's `MTU` when the Request
//! has one, else [`DEFAULT_MTU`] (cmd-forwarder-vpp's); a tunnel lowers it by its overhead
//! ([`VXLAN4_OVERHEAD`], [`VXLAN6_OVERHEAD`], [`WIREGUARD4_OVERHEAD`],
//! [`WIREGUARD6_OVERHEAD`]) below the uplink's
//! MTU; the endpoint may lower it further in its answer. Both ends of the connection get the result, and the answer carries it.

use nsm_proto::connection::Connection;
use nsm_proto::connectioncontext::ConnectionContext;
use tonic::Status;

use crate::mechanism::Remote;

/// What a connection gets when its Request names no MTU (cmd-forwarder-vpp's default).
pub const DEFAULT_MTU: u32 = 9000;

/// The smallest MTU accepted (IPv4's minimum reassembly size; IPv6 needs 1280 of it).
pub const MIN_MTU: u32 = 576;

/// The largest MTU accepted: the longest frame Quiver's ports carry (a jumbo frame).
pub const MAX_MTU: u32 = 9216;

/// What VXLAN over IPv4 adds to each frame: outer IPv4 (20), UDP (8), VXLAN (8) and the inner
/// Ethernet header (14).
pub const VXLAN4_OVERHEAD: u32 = 50;

/// What VXLAN over IPv6 adds: outer IPv6 (40), UDP (8), VXLAN (8) and the inner Ethernet
/// header (14).
pub const VXLAN6_OVERHEAD: u32 = 70;

/// What WireGuard over IPv4 adds to each IP packet: outer IPv4 (20), UDP (8), the transport
/// header (16) and the tag (16).
pub const WIREGUARD4_OVERHEAD: u32 = 60;

/// What WireGuard over IPv6 adds to each IP packet: outer IPv6 (40), UDP (8), the transport
/// header (16) and the tag (16).
pub const WIREGUARD6_OVERHEAD: u32 = 80;

/// The MTU a Request asks for: its context's, checked, or [`DEFAULT_MTU`] when it has none.
pub fn requested(conn: &Connection) -> Result<u32, Status> {
    match conn.context.as_ref().map_or(0, |c| c.mtu) {
        0 => Ok(DEFAULT_MTU),
        m if (MIN_MTU..=MAX_MTU).contains(&m) => Ok(m),
        m => Err(Status::invalid_argument(format!(
            "connection.context.MTU {m} is outside {MIN_MTU}..={MAX_MTU}"
        ))),
    }
}

/// `mtu` lowered to what a VXLAN tunnel over an uplink of `uplink_mtu` carries (`ipv6`: over
/// an IPv6 underlay).
pub fn through_vxlan(mtu: u32, uplink_mtu: u32, ipv6: bool) -> u32 {
    let overhead = if ipv6 {
        VXLAN6_OVERHEAD
    } else {
        VXLAN4_OVERHEAD
    };
    mtu.min(uplink_mtu.saturating_sub(overhead))
}

/// `mtu` lowered to what a tunnel of `kind` over an uplink of `uplink_mtu` carries (`ipv6`:
/// over an IPv6 underlay).
pub fn through(kind: Remote, mtu: u32, uplink_mtu: u32, ipv6: bool) -> u32 {
    match kind {
        Remote::Vxlan => through_vxlan(mtu, uplink_mtu, ipv6),
        Remote::Wireguard => {
            let overhead = if ipv6 {
                WIREGUARD6_OVERHEAD
            } else {
                WIREGUARD4_OVERHEAD
            };
            mtu.min(uplink_mtu.saturating_sub(overhead))
        }
    }
}

/// `mtu` lowered to the endpoint's, when its answer names a smaller one (a larger one, or
/// one below [`MIN_MTU`], is not taken).
pub fn answered(mtu: u32, answer: &Connection) -> u32 {
    match answer.context.as_ref().map_or(0, |c| c.mtu) {
        m if (MIN_MTU..mtu).contains(&m) => m,
        _ => mtu,
    }
}

/// Writes `mtu` into `conn`'s context (made if it has none).
pub fn set(conn: &mut Connection, mtu: u32) {
    conn.context
        .get_or_insert_with(ConnectionContext::default)
        .mtu = mtu;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(mtu: u32) -> Connection {
        let mut c = Connection::default();
        set(&mut c, mtu);
        c
    }

    #[test]
    fn a_request_without_an_mtu_gets_nsms_default() {
        assert_eq!(requested(&Connection::default()).unwrap(), 9000);
        assert_eq!(requested(&with(0)).unwrap(), 9000);
        assert_eq!(requested(&with(1500)).unwrap(), 1500);
        assert_eq!(requested(&with(576)).unwrap(), 576);
        for bad in [575, 68, 9217, 65535] {
            let e = requested(&with(bad)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(e.message().contains("MTU"), "{}", e.message());
        }
    }

    #[test]
    fn tunnels_and_endpoints_only_lower_it() {
        assert_eq!(through_vxlan(9000, 1500, false), 1450);
        assert_eq!(through_vxlan(1400, 1500, false), 1400);
        assert_eq!(through_vxlan(9000, 9000, false), 8950);
        assert_eq!(through_vxlan(9000, 1500, true), 1430);
        assert_eq!(through(Remote::Vxlan, 9000, 1500, false), 1450);
        assert_eq!(through(Remote::Wireguard, 9000, 1500, false), 1440);
        assert_eq!(through(Remote::Wireguard, 1400, 1500, false), 1400);
        assert_eq!(through(Remote::Vxlan, 9000, 1500, true), 1430);
        assert_eq!(through(Remote::Wireguard, 9000, 1500, true), 1420);
        assert_eq!(through(Remote::Wireguard, 1400, 1500, true), 1400);
        assert_eq!(through(Remote::Wireguard, 9000, 9000, true), 8920);
        assert_eq!(answered(9000, &with(1400)), 1400);
        assert_eq!(answered(1400, &with(9000)), 1400);
        assert_eq!(answered(1400, &with(0)), 1400);
        assert_eq!(answered(1400, &with(100)), 1400);
    }
}
