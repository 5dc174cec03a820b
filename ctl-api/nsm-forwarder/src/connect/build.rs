//! Building or refreshing one connection for a checked Request ([`Build`]): the endpoint
//! (Quiver Requests it as a client: the candidates `route` found, in turn, until one
//! accepts), then the client-side port with the addresses and MTU its answer settled, the
//! endpoint-side port, the cross-connect, and the answer. What is already right (a refresh) is left alone; what differs is torn down and
//! rebuilt, the old cross-connects first (once).

use std::net::{IpAddr, Ipv4Addr};
use std::time::SystemTime;

use grpc_unix::ReceivedFds;
use nsm_proto::connection::{Connection, Mechanism, Path, State};
use nsm_proto::networkservice::NetworkServiceRequest;
use tonic::Status;

use super::answer::{all_refused, client_answer, endpoint_spec, is_remote, published};
use super::check::Checked;
use super::data_path::{create_port, DataPath};
use super::endpoint_client::EndpointClient;
use super::entry::{client_port, frame_mode, memif_socket, short, CrossConnect, Entry};
use super::vlan;
use crate::dataplane::{KernelSpec, MemifRole, MemifSpec, PortSpec, VxlanSpec, WireguardSpec};
use crate::endpoint::Candidate;
use crate::fds::{HeldFds, Resolved};
use crate::mechanism::{self, ClientMechanism, EndpointMechanism, Remote, TunnelEnd};
use crate::mtu;
use crate::path::Position;
use crate::validate::{self, Payload, SidesIp};
use crate::vni::VniTable;
use crate::wg_ports::{side_key, WgPorts};

/// What a build works with: the core's parts.
pub(super) struct Parts<'a> {
    pub(super) dp: &'a DataPath,
    pub(super) endpoints: EndpointClient<'a>,
    pub(super) vnis: &'a VniTable,
    pub(super) wg_ports: &'a WgPorts,
    pub(super) answer_fds: &'a HeldFds,
    /// Quiver's end of tunnels to other nodes, if it has a tunnel address.
    pub(super) tunnel_end: Option<TunnelEnd>,
}

/// A connection as built: everything of its [`Entry`] but the timers and watches the core
/// starts for it.
pub(super) struct Built {
    pub(super) own_id: String,
    pub(super) client: PortSpec,
    pub(super) endpoint: PortSpec,
    pub(super) cross_connect: CrossConnect,
    pub(super) endpoint_url: String,
    /// The endpoint's registered name (empty if it has none).
    pub(super) endpoint_name: String,
    /// The endpoint's answer, as it wrote it.
    pub(super) endpoint_conn: Connection,
    pub(super) published: Connection,
    pub(super) caller: (String, u32),
    /// When Quiver's path segment expires.
    pub(super) expires: SystemTime,
    /// The fds the endpoint passed that the connection now holds.
    pub(super) answer_fds: Resolved,
}

/// What to close toward the endpoint when a build fails: its URL and connection.
pub(super) type EndpointHold = Option<(String, Connection)>;

/// One build of connection `owner` (a new one, or a refresh of `old`).
pub(super) struct Build<'a> {
    owner: &'a str,
    old: Option<&'a Entry>,
    parts: Parts<'a>,
    /// The old connection's cross-connects are gone (or there were none).
    disconnected: bool,
    /// A port was made anew: the cross-connect is made again.
    rebuilt: bool,
    /// What to close toward the endpoint if this fails: the previous answer, until a new one.
    endpoint_hold: EndpointHold,
}

/// The client side's port, as its mechanism and the IP context make it.
/// What the endpoint answered, read ([`Build::endpoint`]).
struct Answered {
    /// The endpoint that answered.
    chosen: Candidate,
    /// Its answer.
    answer: Connection,
    /// The addresses on both sides.
    ip: SidesIp,
    /// Its mechanism.
    ep: EndpointMechanism,
    /// The fds its answer passed, resolved.
    answer_fds: Resolved,
    /// The WireGuard port claimed for the endpoint side (0: none).
    wg_port: u16,
}

struct ClientSide<'a> {
    owner: &'a str,
    mechanism: &'a ClientMechanism,
    payload: Payload,
    /// The short form of Quiver's segment id, for interface names.
    own_short: &'a str,
    tunnel: Option<TunnelEnd>,
    /// The VNI Quiver chose as the answering end of a VXLAN tunnel (0 otherwise).
    vni: u32,
    /// The UDP port Quiver chose as the answering end of a WireGuard tunnel (0 otherwise).
    wg_port: u16,
    /// The connection's MTU, for a mechanism that names none.
    mtu: u32,
}

impl ClientSide<'_> {
    /// The client-side port with `ip`'s addresses, routes and neighbours.
    fn spec(&self, ip: &SidesIp) -> PortSpec {
        let owner = self.owner;
        match self.mechanism {
            ClientMechanism::Memif { netns, mtu } => PortSpec::Memif(MemifSpec {
                name: client_port(owner),
                role: MemifRole::Master,
                socket: memif_socket(owner),
                netns: Some(netns.clone()),
                mode: frame_mode(self.payload),
                mtu: Some(mtu.unwrap_or(self.mtu)),
            }),
            ClientMechanism::Kernel { netns, ifname, mtu } => PortSpec::Kernel(KernelSpec {
                name: client_port(owner),
                netns: netns.clone(),
                ifname: ifname
                    .clone()
                    .unwrap_or_else(|| format!("nsm-{}", self.own_short)),
                mtu: Some(mtu.unwrap_or(self.mtu)),
                ip: ip.client.clone(),
            }),
            ClientMechanism::Vxlan {
                remote,
                remote_port,
                ..
            } => PortSpec::Vxlan(VxlanSpec {
                name: client_port(owner),
                local: self
                    .tunnel
                    .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |t| t.ip),
                remote: *remote,
                vni: self.vni,
                dst_port: *remote_port,
            }),
            ClientMechanism::Wireguard {
                remote,
                remote_port,
                remote_key,
                ..
            } => PortSpec::Wireguard(WireguardSpec {
                name: client_port(owner),
                local: self
                    .tunnel
                    .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |t| t.ip),
                port: self.wg_port,
                remote: *remote,
                remote_port: *remote_port,
                remote_key: *remote_key,
                underlay_mtu: self.tunnel.map_or(1500, |t| t.mtu),
            }),
        }
    }
}

impl<'a> Build<'a> {
    /// A build of `owner`, replacing `old` if there is one.
    pub(super) fn new(owner: &'a str, old: Option<&'a Entry>, parts: Parts<'a>) -> Build<'a> {
        Build {
            owner,
            old,
            parts,
            disconnected: old.is_none(),
            rebuilt: false,
            endpoint_hold: old.map(|o| (o.endpoint_url.clone(), o.endpoint_conn.clone())),
        }
    }

    /// Builds the connection `c` asks for, toward the first of `endpoints` that accepts it. On
    /// error, returns the endpoint connection to close (if the endpoint holds one).
    pub(super) async fn run(
        mut self,
        c: Checked,
        endpoints: Vec<Candidate>,
    ) -> Result<Built, (Status, EndpointHold)> {
        match self.steps(c, endpoints).await {
            Ok(built) => Ok(built),
            Err(e) => Err((e, self.endpoint_hold.take())),
        }
    }

    async fn steps(&mut self, c: Checked, endpoints: Vec<Candidate>) -> Result<Built, Status> {
        let Checked {
            mut conn,
            payload,
            mechanism: client_mech,
            client,
            path,
            position,
            mtu: requested_mtu,
        } = c;
        let own_short = short(&position.own_id);
        let remote = self.remote(payload);
        let tunnel = remote.map(|(t, _)| t);
        // The MTU: a tunnel on either side lowers it (toward the endpoint when every
        // candidate is on another node); the endpoint may lower it in its answer.
        let tunnelled = |through: bool| match remote {
            Some((t, k)) if through => mtu::through(k, requested_mtu, t.mtu, t.ip.is_ipv6()),
            _ => requested_mtu,
        };
        let all_remote = !endpoints.is_empty() && endpoints.iter().all(|e| is_remote(&e.url));
        let client_remote = matches!(
            client,
            ClientMechanism::Vxlan { .. } | ClientMechanism::Wireguard { .. }
        );
        let mtu = tunnelled(client_remote || all_remote);
        mtu::set(&mut conn, mtu);
        let mut side = self.client_side(&client, payload, &own_short, tunnel, mtu)?;

        // 1. The endpoint: Quiver Requests it as a client. The client side is made after its
        // answer, as sdk-vpp's chain makes it: the answer settles the addresses (the
        // endpoint's IPAM) and the MTU, so the client's interface is made once, never made,
        // removed and made again (a pod would see its interface flap).
        let answered = self
            .endpoint(
                &mut conn,
                path,
                &position,
                endpoints,
                &client_mech.r#type,
                remote,
            )
            .await?;
        let endpoint_remote = matches!(
            answered.ep,
            EndpointMechanism::Vxlan { .. } | EndpointMechanism::Wireguard { .. }
        );
        let mtu = mtu::answered(
            tunnelled(client_remote || endpoint_remote).min(mtu),
            &answered.answer,
        );
        let mtu = match &answered.ep {
            // Not the tunnel's: the host interface's (readied for the VLAN here).
            EndpointMechanism::Vlan { host, .. } => {
                let h = host.clone();
                let host_mtu = self.parts.dp.call(move |d| d.vlan_host(&h)).await?;
                mtu::answered(
                    vlan::mtu(tunnelled(client_remote), host_mtu),
                    &answered.answer,
                )
            }
            _ => mtu,
        };
        mtu::set(&mut conn, mtu);
        side.mtu = mtu;

        // 2. The client side, with the addresses and MTU the answer settled.
        let want_client = side.spec(&answered.ip);
        self.client_port(&want_client).await?;

        // 3. The endpoint side (made with the cross-connect, in one data-path call).
        let want_endpoint = endpoint_spec(
            self.owner,
            answered.ep,
            payload,
            tunnel,
            &answered.ip,
            mtu,
            answered.wg_port,
        );
        // 4. The cross-connect.
        let xc = self
            .endpoint_side_and_cross_connect(&want_client, &want_endpoint, payload, &answered.ip)
            .await?;

        // 5. The answer.
        let client_answer = client_answer(client_mech, &want_client, tunnel);
        let published = published(&answered.answer, &position, client_answer, &conn);
        Ok(Built {
            own_id: position.own_id.clone(),
            client: want_client,
            endpoint: want_endpoint,
            cross_connect: xc,
            endpoint_url: answered.chosen.url,
            endpoint_name: answered.chosen.name,
            endpoint_conn: answered.answer,
            published,
            caller: (position.prev_id, position.prev_index),
            expires: position.expires,
            answer_fds: answered.answer_fds,
        })
    }

    /// The tunnel to other nodes `payload` travels in (VXLAN for ETHERNET, WireGuard for IP),
    /// if Quiver has one.
    fn remote(&self, payload: Payload) -> Option<(TunnelEnd, Remote)> {
        self.parts
            .tunnel_end
            .and_then(|t| Some((t, t.remote_for(payload == Payload::Ip)?)))
    }

    /// The client side as first asked for, with the VNI or WireGuard port Quiver chooses as
    /// a tunnel's answering end.
    fn client_side<'c>(
        &self,
        client: &'c ClientMechanism,
        payload: Payload,
        own_short: &'c str,
        tunnel: Option<TunnelEnd>,
        mtu: u32,
    ) -> Result<ClientSide<'c>, Status>
    where
        'a: 'c,
    {
        Ok(ClientSide {
            owner: self.owner,
            mechanism: client,
            payload,
            own_short,
            tunnel,
            vni: self.claim_client_vni(client)?,
            wg_port: self.claim_client_wg_port(client)?,
            mtu,
        })
    }

    /// Step 1: Requests the endpoint as a client, offering what reaches it (with a WireGuard
    /// port claimed for a WireGuard tunnel, freed again if the endpoint answers otherwise), and
    /// reads its answer.
    async fn endpoint(
        &mut self,
        conn: &mut Connection,
        path: Path,
        position: &Position,
        endpoints: Vec<Candidate>,
        client_type: &str,
        remote: Option<(TunnelEnd, Remote)>,
    ) -> Result<Answered, Status> {
        let kind = remote.map(|(_, k)| k);
        let suggested = format!("nse-{}", short(&position.own_id));
        let endpoint_wg_port = self.claim_endpoint_wg_port(kind)?;
        let remote_offer = remote.map(|(t, k)| t.offer(k, endpoint_wg_port));
        // VLAN last, as sdk-vpp's chain appends it after the tunnels.
        let vlan_offer = vlan::offer(
            &self.parts.endpoints.cfg.device_selector,
            validate::payload(&conn.payload)?,
        );
        let offers = |url: &str| {
            let mut o = mechanism::offers(
                client_type,
                &suggested,
                remote_offer.clone(),
                is_remote(url),
            );
            o.extend(vlan_offer.clone());
            o
        };
        let (chosen, answer, passed) = self
            .request_endpoint(conn, path, position, endpoints, offers)
            .await?;
        if !chosen.name.is_empty() {
            // Answered and published: a refresh comes back to this endpoint.
            conn.network_service_endpoint_name = chosen.name.clone();
        }
        let vlan_offered = vlan_offer.is_some();
        let (ip, ep, answer_fds) =
            self.read_answer(&answer, &passed, &suggested, kind, vlan_offered)?;
        if endpoint_wg_port != 0 && !matches!(ep, EndpointMechanism::Wireguard { .. }) {
            // The port offered is not used: free it for other connections.
            self.parts.wg_ports.release_key(&side_key(self.owner, true));
        }
        Ok(Answered {
            chosen,
            answer,
            ip,
            ep,
            answer_fds,
            wg_port: endpoint_wg_port,
        })
    }

    /// Steps 3 and 4: the endpoint side's port (made with the cross-connect, in one data-path
    /// call) and the cross-connect, L2 or L3 by payload.
    async fn endpoint_side_and_cross_connect(
        &mut self,
        want_client: &PortSpec,
        want_endpoint: &PortSpec,
        payload: Payload,
        ip: &SidesIp,
    ) -> Result<CrossConnect, Status> {
        let create_endpoint = self.endpoint_port(want_endpoint).await?;
        let xc = match payload {
            Payload::Ethernet => CrossConnect::L2,
            Payload::Ip => CrossConnect::L3 {
                to_endpoint: ip.endpoint_hop(),
                to_client: ip.client_hop(),
            },
        };
        self.cross_connect(want_client, want_endpoint, &xc, create_endpoint)
            .await?;
        Ok(xc)
    }

    /// As the answering end of a VXLAN tunnel, Quiver chooses the VNI (kept on refresh).
    fn claim_client_vni(&self, client: &ClientMechanism) -> Result<u32, Status> {
        let ClientMechanism::Vxlan { remote, vni, .. } = client else {
            return Ok(0);
        };
        let kept = self.old.and_then(|o| match &o.client {
            PortSpec::Vxlan(v) if v.remote == *remote => Some(v.vni),
            _ => None,
        });
        self.parts
            .vnis
            .claim(*remote, self.owner, vni.or(kept))
            .ok_or_else(|| {
                Status::resource_exhausted(format!("every VNI toward {remote} is in use"))
            })
    }

    /// As the answering end of a WireGuard tunnel, Quiver chooses its UDP port (kept on
    /// refresh).
    fn claim_client_wg_port(&self, client: &ClientMechanism) -> Result<u16, Status> {
        let ClientMechanism::Wireguard { port, .. } = client else {
            return Ok(0);
        };
        let kept = self.old.and_then(|o| match &o.client {
            PortSpec::Wireguard(w) => Some(w.port),
            _ => None,
        });
        self.parts
            .wg_ports
            .claim(&side_key(self.owner, false), kept.or(*port))
            .ok_or_else(|| Status::resource_exhausted("every WireGuard port is in use"))
    }

    /// As the requesting end of a WireGuard tunnel (`kind`), Quiver offers its UDP port
    /// before the endpoint answers (kept on refresh); 0 without WireGuard.
    fn claim_endpoint_wg_port(&self, kind: Option<Remote>) -> Result<u16, Status> {
        if kind != Some(Remote::Wireguard) {
            return Ok(0);
        }
        let kept = self.old.and_then(|o| match &o.endpoint {
            PortSpec::Wireguard(w) => Some(w.port),
            _ => None,
        });
        self.parts
            .wg_ports
            .claim(&side_key(self.owner, true), kept)
            .ok_or_else(|| Status::resource_exhausted("every WireGuard port is in use"))
    }

    /// Removes the old connection's cross-connects, unless that was done already.
    async fn disconnect_old(&mut self) -> Result<(), Status> {
        if let Some(o) = self.old {
            if !std::mem::replace(&mut self.disconnected, true) {
                let ports = [o.client.name(), o.endpoint.name()];
                self.parts.dp.disconnect(self.owner, ports).await?;
            }
        }
        Ok(())
    }

    /// Step 2: the client-side port `want`, unless the old connection has it already.
    async fn client_port(&mut self, want: &PortSpec) -> Result<(), Status> {
        if self.old.map(|o| &o.client) == Some(want) {
            return Ok(());
        }
        if let Some(o) = self.old {
            self.disconnect_old().await?;
            let port = o.client.name().clone();
            self.parts.dp.remove_port(self.owner, port).await?;
        }
        self.parts.dp.create(self.owner, want.clone()).await?;
        self.rebuilt = true;
        Ok(())
    }

    /// Step 1: Requests the first of `endpoints` that accepts (the old connection's, or those
    /// `route` found, in turn) with Quiver's `offers` for its URL: that endpoint, the answer,
    /// and the fds passed with it. When every one refuses: the refusal of a lone endpoint as
    /// it is, of several one status that lists them (with the last one's code).
    async fn request_endpoint(
        &mut self,
        conn: &Connection,
        path: Path,
        position: &Position,
        endpoints: Vec<Candidate>,
        offers: impl Fn(&str) -> Vec<Mechanism>,
    ) -> Result<(Candidate, Connection, ReceivedFds), Status> {
        let several = endpoints.len() > 1;
        let mut refusals = Vec::new();
        for endpoint in endpoints {
            let outgoing = Connection {
                id: position.own_id.clone(),
                network_service: conn.network_service.clone(),
                // The mechanism the endpoint chose before, if it is the same endpoint.
                mechanism: self
                    .old
                    .filter(|o| o.endpoint_url == endpoint.url)
                    .and_then(|o| o.endpoint_conn.mechanism.clone()),
                context: conn.context.clone(),
                labels: conn.labels.clone(),
                path: Some(path.clone()),
                network_service_endpoint_name: match endpoint.name.as_str() {
                    "" => conn.network_service_endpoint_name.clone(),
                    name => name.to_string(),
                },
                payload: conn.payload.clone(),
                state: State::Up as i32,
            };
            let request = NetworkServiceRequest {
                connection: Some(outgoing),
                mechanism_preferences: offers(&endpoint.url),
            };
            match self.parts.endpoints.request(&endpoint.url, request).await {
                Ok((answer, passed)) => {
                    self.endpoint_hold = Some((endpoint.url.clone(), answer.clone()));
                    return Ok((endpoint, answer, passed));
                }
                Err(e) if several => {
                    tracing::warn!(
                        id = self.owner,
                        endpoint = endpoint.name,
                        error = %e,
                        "the endpoint refused the Request: trying the next one"
                    );
                    refusals.push((endpoint.name, e));
                }
                Err(e) => return Err(e),
            }
        }
        Err(all_refused(&conn.network_service, refusals))
    }

    /// Step 1, the answer: its IP context checked, its mechanism read with the fds the
    /// endpoint passed for its `inode://` URLs (held by the connection from now on; `answer`
    /// itself is kept as the endpoint wrote it).
    fn read_answer(
        &self,
        answer: &Connection,
        passed: &ReceivedFds,
        suggested: &str,
        remote: Option<Remote>,
        vlan_offered: bool,
    ) -> Result<(SidesIp, EndpointMechanism, Resolved), Status> {
        let ip = validate::context(answer.context.as_ref()).map_err(|e| {
            Status::failed_precondition(format!(
                "the endpoint answered with a bad context: {}",
                e.message()
            ))
        })?;
        let (answer_mech, answer_fds) =
            self.parts
                .answer_fds
                .resolve_answer(self.owner, passed, answer.mechanism.as_ref())?;
        let ep = match answer_mech.as_ref() {
            Some(m) if vlan_offered && mechanism::vlan::is(m) => {
                vlan::read(answer, m, &self.parts.endpoints.cfg.device_selector)?
            }
            m => mechanism::endpoint_side(m, suggested, remote)?,
        };
        Ok((ip, ep, answer_fds))
    }

    /// Step 3: the old endpoint-side port removed if it is not `want`; returns `want` when it
    /// is to be made (with the cross-connect).
    async fn endpoint_port(&mut self, want: &PortSpec) -> Result<Option<PortSpec>, Status> {
        if self.old.map(|o| &o.endpoint) == Some(want) {
            return Ok(None);
        }
        if let Some(o) = self.old {
            self.disconnect_old().await?;
            let port = o.endpoint.name().clone();
            self.parts.dp.remove_port(self.owner, port).await?;
        }
        self.rebuilt = true;
        Ok(Some(want.clone()))
    }

    /// Step 4: the cross-connect `xc` between the two ports (and the endpoint-side port, when
    /// it is new: one hand-off), unless the old connection has it as it is.
    async fn cross_connect(
        &mut self,
        client: &PortSpec,
        endpoint: &PortSpec,
        xc: &CrossConnect,
        create_endpoint: Option<PortSpec>,
    ) -> Result<(), Status> {
        let connect = self.rebuilt || self.old.map(|o| &o.cross_connect) != Some(xc);
        if !connect {
            return Ok(());
        }
        if let Some(o) = self.old.filter(|_| !self.disconnected) {
            let ports = [o.client.name(), o.endpoint.name()];
            self.parts.dp.disconnect(self.owner, ports).await?;
        }
        let (o, a, b, x) = (
            self.owner.to_string(),
            client.name().clone(),
            endpoint.name().clone(),
            xc.clone(),
        );
        self.parts
            .dp
            .call(move |d| {
                if let Some(spec) = &create_endpoint {
                    create_port(d, &o, spec)?;
                }
                match x {
                    CrossConnect::L2 => d.l2_cross_connect(&o, &a, &b),
                    CrossConnect::L3 {
                        to_endpoint,
                        to_client,
                    } => d.l3_cross_connect(&o, &a, &b, to_endpoint, to_client),
                }
            })
            .await
    }
}
