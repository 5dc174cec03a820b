//! [`AdminBackend`] over the owner: reads from its published view and the data path, changes
//! as [`Change`]s.

use std::net::IpAddr;

use quiver_admin_api::proto as pb;
use quiver_admin_api::{
    AdminBackend, AdminError, AdminResult, AfPacketSpec, CaptureSpec, L3Peers, MemifSpec,
};

use super::{admin_error, requests, show, ForwarderAdmin};
use crate::control::owner::Change;
use crate::forwarder::{l3_peer, DEFAULT_TABLE};

impl AdminBackend for ForwarderAdmin {
    fn interfaces(&self) -> AdminResult<Vec<pb::Interface>> {
        Ok(show::interfaces(&self.control.view(), |p| self.stats(p)))
    }

    fn runtime(&self, per_worker: bool) -> AdminResult<pb::ShowRuntimeReply> {
        let rt = self.control.dataplane().runtime();
        let workers = if per_worker {
            rt.workers.iter().map(show::worker_runtime).collect()
        } else {
            vec![show::worker_runtime(&rt.summed())]
        };
        Ok(pb::ShowRuntimeReply {
            tsc_hz: rt.tsc_hz,
            workers,
        })
    }

    fn errors(&self) -> AdminResult<Vec<pb::ErrorCounter>> {
        let sum = self.control.dataplane().runtime().summed();
        Ok(sum
            .errors
            .into_iter()
            .map(|e| pb::ErrorCounter {
                node: e.node,
                reason: e.name,
                description: e.description,
                count: e.count,
            })
            .collect())
    }

    fn fib(&self) -> AdminResult<Vec<pb::Route>> {
        Ok(show::fib(&self.control.view()))
    }

    fn neighbors(&self) -> AdminResult<Vec<pb::Neighbor>> {
        Ok(show::neighbors(&self.control.view()))
    }

    fn cross_connects(&self) -> AdminResult<Vec<pb::CrossConnect>> {
        Ok(show::cross_connects(&self.control.view()))
    }

    fn memifs(&self) -> AdminResult<Vec<pb::Memif>> {
        Ok(show::memifs(&self.control.view(), |p| self.stats(p)))
    }

    fn connections(&self) -> AdminResult<Vec<pb::Connection>> {
        Ok(self.connections.list())
    }

    fn trace_add(&self, node: &str, count: u32) -> AdminResult<()> {
        self.control
            .dataplane()
            .trace_add(node, count)
            .map_err(|e| AdminError::NotFound(e.to_string()))
    }

    fn trace_show(&self) -> AdminResult<Vec<pb::TracedPacket>> {
        Ok(self
            .control
            .dataplane()
            .trace_show()
            .into_iter()
            .map(|t| pb::TracedPacket {
                id: t.id,
                worker: t.worker.map(|w| w as u32),
                nodes: t.nodes,
                lines: t.lines,
            })
            .collect())
    }

    fn trace_clear(&self) -> AdminResult<()> {
        self.control.dataplane().trace_clear();
        Ok(())
    }

    fn add_route(
        &self,
        table: Option<&str>,
        prefix: IpAddr,
        len: u8,
        via: &[(IpAddr, String)],
    ) -> AdminResult<()> {
        let change = match table.filter(|t| *t != DEFAULT_TABLE) {
            None => Change::AddRoute {
                prefix,
                len,
                via: via.to_vec(),
                owner: None,
            },
            Some(table) => Change::AddRouteIn {
                table: table.into(),
                prefix,
                len,
                via: via.to_vec(),
            },
        };
        self.apply(change).map(drop)
    }

    fn add_next_table_route(
        &self,
        table: Option<&str>,
        prefix: IpAddr,
        len: u8,
        next_table: &str,
    ) -> AdminResult<()> {
        self.apply(Change::AddNextTableRoute {
            table: table.unwrap_or(DEFAULT_TABLE).into(),
            prefix,
            len,
            next_table: next_table.into(),
        })
        .map(drop)
    }

    fn delete_route(&self, table: Option<&str>, prefix: IpAddr, len: u8) -> AdminResult<()> {
        let change = match table.filter(|t| *t != DEFAULT_TABLE) {
            None => Change::RemoveRoute { prefix, len },
            Some(table) => Change::RemoveRouteIn {
                table: table.into(),
                prefix,
                len,
            },
        };
        self.apply(change).map(drop)
    }

    fn tables(&self) -> AdminResult<Vec<pb::RoutingTable>> {
        Ok(show::tables(&self.control.view()))
    }

    fn add_table(&self, name: &str) -> AdminResult<()> {
        self.apply(Change::AddTable { name: name.into() }).map(drop)
    }

    fn delete_table(&self, name: &str) -> AdminResult<()> {
        self.apply(Change::RemoveTable { name: name.into() })
            .map(drop)
    }

    fn set_interface_table(&self, interface: &str, table: &str) -> AdminResult<()> {
        self.apply(Change::SetInterfaceTable {
            interface: interface.into(),
            table: table.into(),
        })
        .map(drop)
    }

    fn add_neighbor(&self, interface: &str, ip: IpAddr, mac: [u8; 6]) -> AdminResult<()> {
        self.apply(Change::AddNeighbor {
            port: interface.into(),
            ip,
            mac,
            owner: None,
        })
        .map(drop)
    }

    fn delete_neighbor(&self, interface: &str, ip: IpAddr) -> AdminResult<()> {
        self.apply(Change::RemoveNeighbor {
            port: interface.into(),
            ip,
        })
        .map(drop)
    }

    fn add_address(&self, interface: &str, ip: IpAddr, len: u8) -> AdminResult<()> {
        self.apply(Change::AddAddress {
            port: interface.into(),
            ip,
            len,
            owner: None,
        })
        .map(drop)
    }

    fn delete_address(&self, interface: &str, ip: IpAddr, len: u8) -> AdminResult<()> {
        self.apply(Change::RemoveAddress {
            port: interface.into(),
            ip,
            len,
        })
        .map(drop)
    }

    fn add_cross_connect(&self, a: &str, b: &str, l3: Option<L3Peers>) -> AdminResult<()> {
        let (a, b) = (a.to_string(), b.to_string());
        let change = match l3 {
            None => Change::CrossConnect { a, b, owner: None },
            Some(p) => Change::L3CrossConnect {
                a,
                b,
                peer_b: l3_peer("peer_b", &p.peer_b).map_err(admin_error)?,
                peer_a: l3_peer("peer_a", &p.peer_a).map_err(admin_error)?,
                owner: None,
            },
        };
        self.apply(change).map(drop)
    }

    fn delete_cross_connect(&self, interface: &str) -> AdminResult<()> {
        self.apply(Change::Disconnect {
            port: interface.into(),
        })
        .map(drop)
    }

    fn add_memif(&self, spec: &MemifSpec) -> AdminResult<u32> {
        self.add_interface(Change::AddPort {
            port: requests::memif(spec),
            owner: None,
        })
    }

    fn add_af_packet(&self, spec: &AfPacketSpec) -> AdminResult<u32> {
        self.add_interface(Change::AddPort {
            port: requests::af_packet(spec)?,
            owner: None,
        })
    }

    fn add_wireguard(&self, r: &pb::AddWireguardRequest) -> AdminResult<u32> {
        self.add_interface(Change::AddWireguard {
            tunnel: requests::wireguard(r)?,
            owner: None,
        })
    }

    fn delete_interface(&self, name: &str) -> AdminResult<()> {
        self.apply(Change::RemoveInterface { name: name.into() })
            .map(drop)
    }

    fn clear_counters(&self) -> AdminResult<()> {
        let f = self.control.view();
        self.control.dataplane().clear_counters();
        self.reset_baselines(&f.ports);
        Ok(())
    }

    fn capture_start(&self, spec: &CaptureSpec) -> AdminResult<pb::Capture> {
        self.capture(Change::CaptureStart(spec.into()))
    }

    fn capture_stop(&self, interface: &str) -> AdminResult<pb::Capture> {
        self.capture(Change::CaptureStop {
            interface: interface.into(),
        })
    }

    fn captures(&self) -> AdminResult<Vec<pb::Capture>> {
        Ok(self
            .control
            .view()
            .captures
            .iter()
            .map(|c| c.info().to_proto())
            .collect())
    }

    fn wireguard(&self) -> AdminResult<Vec<pb::WireguardTunnel>> {
        // Asked of the owner in turn with changes: the handshakes' state lives there.
        let tunnels = self
            .control
            .inspect(|f| f.wireguard_status())
            .map_err(admin_error)?;
        Ok(tunnels.iter().map(show::wireguard_tunnel).collect())
    }
}
