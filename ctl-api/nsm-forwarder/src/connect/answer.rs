//! What a [`Build`](super::build::Build) derives from what it has gathered, without state: the
//! endpoint-side port an endpoint's answer asks for, the answer to the caller, the connection
//! Quiver publishes, and the status when every endpoint refused.

use std::net::{IpAddr, Ipv4Addr};

use nsm_proto::connection::{Connection, Mechanism, State};
use tonic::Status;

use super::entry::{endpoint_port, frame_mode};
use crate::dataplane::{
    KernelSpec, MemifRole, MemifSpec, PortSpec, VlanSpec, VxlanSpec, WireguardSpec,
};
use crate::mechanism::{self, EndpointMechanism, TunnelEnd};
use crate::mtu;
use crate::path::Position;
use crate::validate::{Payload, SidesIp};

/// The status when every endpoint of `service` refused (`refusals`: each one's name and
/// refusal): the last refusal's code, every refusal in the message.
pub(super) fn all_refused(service: &str, refusals: Vec<(String, Status)>) -> Status {
    let code = refusals
        .last()
        .map_or(tonic::Code::NotFound, |(_, e)| e.code());
    let each: Vec<String> = refusals
        .iter()
        .map(|(name, e)| format!("{name}: {}", e.message()))
        .collect();
    Status::new(
        code,
        format!(
            "every endpoint of network service {service:?} refused the Request: {}",
            each.join("; ")
        ),
    )
}

/// Whether an endpoint URL is on another node (reached over TCP, so through a tunnel).
pub(super) fn is_remote(url: &str) -> bool {
    url.starts_with("tcp://")
}

/// The endpoint-side port the endpoint's answer `ep` asks for.
pub(super) fn endpoint_spec(
    owner: &str,
    ep: EndpointMechanism,
    payload: Payload,
    tunnel: Option<TunnelEnd>,
    ip: &SidesIp,
    conn_mtu: u32,
    wg_port: u16,
) -> PortSpec {
    match ep {
        EndpointMechanism::Memif { netns, socket, mtu } => PortSpec::Memif(MemifSpec {
            name: endpoint_port(owner),
            role: MemifRole::Slave,
            socket,
            netns,
            mode: frame_mode(payload),
            mtu: Some(mtu.unwrap_or(conn_mtu)),
        }),
        EndpointMechanism::Kernel { netns, ifname, mtu } => PortSpec::Kernel(KernelSpec {
            name: endpoint_port(owner),
            netns,
            ifname,
            mtu: Some(mtu.unwrap_or(conn_mtu)),
            ip: ip.endpoint.clone(),
        }),
        EndpointMechanism::Vxlan {
            remote,
            remote_port,
            vni,
        } => PortSpec::Vxlan(VxlanSpec {
            name: endpoint_port(owner),
            // Offered only with a tunnel end.
            local: tunnel.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |t| t.ip),
            remote,
            vni,
            dst_port: remote_port,
        }),
        EndpointMechanism::Wireguard {
            remote,
            remote_port,
            remote_key,
        } => PortSpec::Wireguard(WireguardSpec {
            name: endpoint_port(owner),
            // Offered only with a tunnel end.
            local: tunnel.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |t| t.ip),
            port: wg_port,
            remote,
            remote_port,
            remote_key,
            underlay_mtu: tunnel.map_or(1500, |t| t.mtu),
        }),
        EndpointMechanism::Vlan { vlan, host } => PortSpec::Vlan(VlanSpec {
            name: endpoint_port(owner),
            host,
            vlan,
        }),
    }
}

/// The caller's mechanism as Quiver answers it: with what the client needs to reach Quiver's
/// port (`socketfile`; the tunnel's `dst_ip`, `dst_port`, `vni` or `dst_public_key`).
pub(super) fn client_answer(
    mut client_mech: Mechanism,
    client: &PortSpec,
    tunnel: Option<TunnelEnd>,
) -> Mechanism {
    match client {
        PortSpec::Memif(m) => {
            client_mech
                .parameters
                .insert(mechanism::SOCKETFILE.into(), m.socket.clone());
        }
        PortSpec::Vxlan(v) => {
            let port = tunnel.map_or(mechanism::VXLAN_DEFAULT_PORT, |t| t.port);
            for (k, val) in [
                (mechanism::DST_IP, v.local.to_string()),
                (mechanism::DST_PORT, port.to_string()),
                (mechanism::VNI, v.vni.to_string()),
            ] {
                client_mech.parameters.insert(k.into(), val);
            }
        }
        PortSpec::Wireguard(w) => {
            let key = tunnel.and_then(|t| t.wg_public_key).unwrap_or_default();
            for (k, val) in [
                (mechanism::DST_IP, w.local.to_string()),
                (mechanism::DST_PORT, w.port.to_string()),
                (mechanism::DST_PUBLIC_KEY, mechanism::encode_key(&key)),
            ] {
                client_mech.parameters.insert(k.into(), val);
            }
        }
        PortSpec::Kernel(_) | PortSpec::Vlan(_) => {}
    }
    client_mech
}

/// What the monitor shows of the connection: the endpoint's answer with Quiver's segment id
/// and index, the client's mechanism as answered, UP, the caller's context if the endpoint
/// gave none, and the endpoint's name and the payload as Quiver chose them (when `conn` has
/// them).
pub(super) fn published(
    answer: &Connection,
    position: &Position,
    client_answer: Mechanism,
    conn: &Connection,
) -> Connection {
    let mut published = answer.clone();
    published.id = position.own_id.clone();
    if let Some(p) = published.path.as_mut() {
        p.index = position.own_index;
    }
    published.mechanism = Some(client_answer);
    published.state = State::Up as i32;
    if published.context.is_none() {
        published.context = conn.context.clone();
    }
    // The MTU both ends got.
    mtu::set(&mut published, conn.context.as_ref().map_or(0, |c| c.mtu));
    if !conn.network_service_endpoint_name.is_empty() {
        published.network_service_endpoint_name = conn.network_service_endpoint_name.clone();
    }
    if !conn.payload.is_empty() {
        published.payload = conn.payload.clone();
    }
    published
}
