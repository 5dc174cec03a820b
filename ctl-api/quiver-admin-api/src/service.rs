//! The gRPC service (`quiver.admin.Admin`) over an [`AdminBackend`]: each call's request is
//! checked (see `requests`), then the backend runs on tokio's blocking pool.

use std::net::IpAddr;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::backend::{AdminBackend, AdminError, AdminResult};
use crate::parse::{parse_ip, parse_mac, parse_prefix};
use crate::proto as pb;
use crate::proto::admin_server::Admin;
use crate::requests::{af_packet_spec, capture_spec, l3_peers, memif_spec, name};

/// The gRPC service over a backend.
pub(crate) struct Service {
    backend: Arc<dyn AdminBackend>,
}

impl Service {
    /// The service over `backend`.
    pub(crate) fn new(backend: Arc<dyn AdminBackend>) -> Service {
        Service { backend }
    }

    /// Runs `f` on the backend in tokio's blocking pool.
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn AdminBackend) -> AdminResult<T> + Send + 'static,
    ) -> Result<Response<T>, Status> {
        let backend = self.backend.clone();
        tokio::task::spawn_blocking(move || f(backend.as_ref()))
            .await
            .map_err(|e| Status::internal(format!("the admin call failed: {e}")))?
            .map(Response::new)
            .map_err(Status::from)
    }
}

#[tonic::async_trait]
impl Admin for Service {
    async fn show_interfaces(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowInterfacesReply>, Status> {
        self.call(|b| {
            b.interfaces()
                .map(|interfaces| pb::ShowInterfacesReply { interfaces })
        })
        .await
    }

    async fn show_runtime(
        &self,
        r: Request<pb::ShowRuntimeRequest>,
    ) -> Result<Response<pb::ShowRuntimeReply>, Status> {
        let per_worker = r.into_inner().per_worker;
        self.call(move |b| b.runtime(per_worker)).await
    }

    async fn show_errors(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowErrorsReply>, Status> {
        self.call(|b| b.errors().map(|errors| pb::ShowErrorsReply { errors }))
            .await
    }

    async fn show_fib(&self, _: Request<pb::Empty>) -> Result<Response<pb::ShowFibReply>, Status> {
        self.call(|b| b.fib().map(|routes| pb::ShowFibReply { routes }))
            .await
    }

    async fn show_neighbors(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowNeighborsReply>, Status> {
        self.call(|b| {
            b.neighbors()
                .map(|neighbors| pb::ShowNeighborsReply { neighbors })
        })
        .await
    }

    async fn show_cross_connects(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowCrossConnectsReply>, Status> {
        self.call(|b| {
            b.cross_connects()
                .map(|cross_connects| pb::ShowCrossConnectsReply { cross_connects })
        })
        .await
    }

    async fn show_memif(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowMemifReply>, Status> {
        self.call(|b| b.memifs().map(|memifs| pb::ShowMemifReply { memifs }))
            .await
    }

    async fn show_connections(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowConnectionsReply>, Status> {
        self.call(|b| {
            b.connections()
                .map(|connections| pb::ShowConnectionsReply { connections })
        })
        .await
    }

    async fn show_trace(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowTraceReply>, Status> {
        self.call(|b| b.trace_show().map(|packets| pb::ShowTraceReply { packets }))
            .await
    }

    async fn trace_add(
        &self,
        r: Request<pb::TraceAddRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let node = name("node", &r.node)?;
            if r.count == 0 {
                return Err(AdminError::InvalidArgument(
                    "trace count must be at least 1".into(),
                ));
            }
            b.trace_add(&node, r.count).map(|()| pb::Empty {})
        })
        .await
    }

    async fn trace_clear(&self, _: Request<pb::Empty>) -> Result<Response<pb::Empty>, Status> {
        self.call(|b| b.trace_clear().map(|()| pb::Empty {})).await
    }

    async fn add_route(
        &self,
        r: Request<pb::AddRouteRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let (prefix, len) = parse_prefix(&r.prefix)?;
            let via = r
                .via
                .iter()
                .map(|v| {
                    Ok((
                        parse_ip("next hop", &v.next_hop)?,
                        name("next hop interface", &v.interface)?,
                    ))
                })
                .collect::<AdminResult<Vec<(IpAddr, String)>>>()?;
            let table = table_name(&r.table);
            match table_name(&r.next_table) {
                None => b.add_route(table, prefix, len, &via),
                Some(_) if !via.is_empty() => Err(AdminError::InvalidArgument(
                    "a route has next hops or a next table, not both".into(),
                )),
                Some(next) => b.add_next_table_route(table, prefix, len, next),
            }
            .map(|()| pb::Empty {})
        })
        .await
    }

    async fn delete_route(
        &self,
        r: Request<pb::DeleteRouteRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let (prefix, len) = parse_prefix(&r.prefix)?;
            b.delete_route(table_name(&r.table), prefix, len)
                .map(|()| pb::Empty {})
        })
        .await
    }

    async fn show_tables(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowTablesReply>, Status> {
        self.call(|b| b.tables().map(|tables| pb::ShowTablesReply { tables }))
            .await
    }

    async fn add_table(&self, r: Request<pb::TableRequest>) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let table = name("table", &r.name)?;
            b.add_table(&table).map(|()| pb::Empty {})
        })
        .await
    }

    async fn delete_table(
        &self,
        r: Request<pb::TableRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let table = name("table", &r.name)?;
            b.delete_table(&table).map(|()| pb::Empty {})
        })
        .await
    }

    async fn set_interface_table(
        &self,
        r: Request<pb::SetInterfaceTableRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let interface = name("interface", &r.interface)?;
            let table = name("table", &r.table)?;
            b.set_interface_table(&interface, &table)
                .map(|()| pb::Empty {})
        })
        .await
    }

    async fn add_neighbor(
        &self,
        r: Request<pb::AddNeighborRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let interface = name("interface", &r.interface)?;
            let ip = parse_ip("neighbour", &r.ip)?;
            let mac = parse_mac(&r.mac)?;
            b.add_neighbor(&interface, ip, mac).map(|()| pb::Empty {})
        })
        .await
    }

    async fn delete_neighbor(
        &self,
        r: Request<pb::DeleteNeighborRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let interface = name("interface", &r.interface)?;
            let ip = parse_ip("neighbour", &r.ip)?;
            b.delete_neighbor(&interface, ip).map(|()| pb::Empty {})
        })
        .await
    }

    async fn add_address(
        &self,
        r: Request<pb::AddressRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let interface = name("interface", &r.interface)?;
            let (ip, len) = parse_prefix(&r.address)?;
            b.add_address(&interface, ip, len).map(|()| pb::Empty {})
        })
        .await
    }

    async fn delete_address(
        &self,
        r: Request<pb::AddressRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let interface = name("interface", &r.interface)?;
            let (ip, len) = parse_prefix(&r.address)?;
            b.delete_address(&interface, ip, len).map(|()| pb::Empty {})
        })
        .await
    }

    async fn add_cross_connect(
        &self,
        r: Request<pb::AddCrossConnectRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let (a, z) = (name("interface a", &r.a)?, name("interface b", &r.b)?);
            let peers = l3_peers(&r)?;
            b.add_cross_connect(&a, &z, peers).map(|()| pb::Empty {})
        })
        .await
    }

    async fn delete_cross_connect(
        &self,
        r: Request<pb::DeleteCrossConnectRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let interface = name("interface", &r.interface)?;
            b.delete_cross_connect(&interface).map(|()| pb::Empty {})
        })
        .await
    }

    async fn add_memif(
        &self,
        r: Request<pb::AddMemifRequest>,
    ) -> Result<Response<pb::AddInterfaceReply>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let spec = memif_spec(&r)?;
            b.add_memif(&spec)
                .map(|index| pb::AddInterfaceReply { index })
        })
        .await
    }

    async fn add_af_packet(
        &self,
        r: Request<pb::AddAfPacketRequest>,
    ) -> Result<Response<pb::AddInterfaceReply>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let spec = af_packet_spec(&r)?;
            b.add_af_packet(&spec)
                .map(|index| pb::AddInterfaceReply { index })
        })
        .await
    }

    async fn delete_interface(
        &self,
        r: Request<pb::DeleteInterfaceRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            let n = name("interface name", &r.name)?;
            b.delete_interface(&n).map(|()| pb::Empty {})
        })
        .await
    }

    async fn clear_counters(&self, _: Request<pb::Empty>) -> Result<Response<pb::Empty>, Status> {
        self.call(|b| b.clear_counters().map(|()| pb::Empty {}))
            .await
    }

    async fn capture_start(
        &self,
        r: Request<pb::CaptureStartRequest>,
    ) -> Result<Response<pb::Capture>, Status> {
        let r = r.into_inner();
        self.call(move |b| b.capture_start(&capture_spec(&r)?))
            .await
    }

    async fn capture_stop(
        &self,
        r: Request<pb::CaptureStopRequest>,
    ) -> Result<Response<pb::Capture>, Status> {
        let r = r.into_inner();
        self.call(move |b| b.capture_stop(&name("interface", &r.interface)?))
            .await
    }

    async fn show_captures(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowCapturesReply>, Status> {
        self.call(|b| {
            b.captures()
                .map(|captures| pb::ShowCapturesReply { captures })
        })
        .await
    }

    async fn add_wireguard(
        &self,
        r: Request<pb::AddWireguardRequest>,
    ) -> Result<Response<pb::AddInterfaceReply>, Status> {
        let r = r.into_inner();
        self.call(move |b| {
            name("name", &r.name)?;
            if r.listen_port == 0 || r.listen_port > u32::from(u16::MAX) {
                return Err(AdminError::InvalidArgument(format!(
                    "listen_port {}: 1 to 65535",
                    r.listen_port
                )));
            }
            b.add_wireguard(&r)
                .map(|index| pb::AddInterfaceReply { index })
        })
        .await
    }

    async fn show_wireguard(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::ShowWireguardReply>, Status> {
        self.call(|b| {
            b.wireguard()
                .map(|tunnels| pb::ShowWireguardReply { tunnels })
        })
        .await
    }
}

/// A request's table: `None` (the default table) when empty.
fn table_name(s: &str) -> Option<&str> {
    Some(s.trim()).filter(|t| !t.is_empty())
}
