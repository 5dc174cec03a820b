//! NSM's WIREGUARD mechanism across two nodes (IP payload): two Quiver forwarders, each with its
//! uplink on one end of a veth underlay between two node namespaces and a WireGuard key of its
//! own; the NSC's kernel interface on A, the NSE's on B. The test plays the nsmgrs (a relay
//! that keeps only the REMOTE mechanisms) and the NSE's gRPC side. After Request, A offered
//! WIREGUARD with its address, the connection's port and its public key; B answered with its
//! own; each built one tunnel whose peer is the other's key; the MTU is 60 bytes under the
//! uplink's; `ping` crosses NSC → A → WireGuard → B → NSE and back, one hop per forwarder each
//! way, after a handshake on both, over IPv4 and IPv6 (a dual-stack connection: both travel in
//! the tunnel). A refresh keeps both tunnels as they are (ports, keys, no new handshake); Close
//! through A leaves neither forwarder anything but its uplink. The same over an IPv6 underlay
//! (the tunnel addresses IPv6, `wg6-encrypt`/`wg6-decrypt` on both forwarders, the MTU 80
//! bytes under the uplink's).

use nsm_forwarder::testing::{BlockingClient, TestEndpoint, TestNsmgr};
use nsm_proto::connection::{Connection, State};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext};
use nsm_proto::networkservice::NetworkServiceRequest;
use quiver::forwarder::WgTunnelStatus;
use testkit::{require, wait_for, Needs};
use wireguard::PrivateKey;

mod nsm_support;

use std::net::IpAddr;

use nsm_support::nodes::{underlay, Node, A_IP, A_IP6, A_MAC, B_IP, B_IP6, B_MAC};
use nsm_support::{kernel_mech, nsc_connection, Netns, TempDir, IP, PING};

const NSC_ADDR: &str = "10.75.0.1";
const NSE_ADDR: &str = "10.75.0.2";
const NSC_ADDR6: &str = "fd00:75::1";
const NSE_ADDR6: &str = "fd00:75::2";

fn request(id: &str, nsc: &Netns, refresh: Option<&Connection>) -> NetworkServiceRequest {
    let conn = refresh.cloned().unwrap_or_else(|| Connection {
        payload: "IP".into(),
        context: Some(ConnectionContext {
            ip_context: Some(IpContext {
                // Dual stack: NSM's client pings every address of the connection.
                src_ip_addrs: vec![format!("{NSC_ADDR}/24"), format!("{NSC_ADDR6}/64")],
                dst_ip_addrs: vec![format!("{NSE_ADDR}/24"), format!("{NSE_ADDR6}/64")],
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..nsc_connection(id, "ping")
    });
    NetworkServiceRequest {
        connection: Some(conn),
        mechanism_preferences: kernel_mech(&nsc.url(), "nsm0"),
    }
}

fn wireguard(node: &Node) -> Vec<WgTunnelStatus> {
    node.0.fwd.inspect(|f| f.wireguard_status()).unwrap()
}

/// Packets node `name` of `node`'s forwarder handled, over its workers.
fn node_packets(node: &Node, name: &str) -> u64 {
    let runtime = node.0.fwd.dataplane().runtime();
    runtime
        .workers
        .iter()
        .map(|w| w.node(name).map_or(0, |n| n.packets))
        .sum()
}

#[test]
fn ip_payload_crosses_two_forwarders_over_wireguard_and_close_cleans_both() {
    over_wireguard(false);
}

#[test]
fn ip_payload_crosses_two_forwarders_over_wireguard_over_ipv6_and_close_cleans_both() {
    over_wireguard(true);
}

/// The scenario over an IPv4 underlay, or (`v6`) an IPv6 one.
fn over_wireguard(v6: bool) {
    let t = if v6 { "6" } else { "" };
    if !require(
        &format!("ip_payload_crosses_two_forwarders_over_wireguard{t}"),
        &Needs {
            root: true,
            tools: &[IP, PING],
            ..Needs::default()
        },
    ) {
        return;
    }
    let (nsc, nse) = (
        Netns::new(&format!("wnsc{t}")),
        Netns::new(&format!("wnse{t}")),
    );
    let (node_a, node_b) = (
        Netns::new(&format!("wnodea{t}")),
        Netns::new(&format!("wnodeb{t}")),
    );
    let dir = TempDir::new(&format!("nsm-wg{t}"));
    let (ua, ub) = underlay(&format!("wg{t}"), &node_a, &node_b);
    let (a_ip, b_ip): (IpAddr, IpAddr) = if v6 {
        (A_IP6.into(), B_IP6.into())
    } else {
        (A_IP.into(), B_IP.into())
    };
    let a = Node::start(&node_a, &ua, a_ip, b_ip, B_MAC);
    let b = Node::start(&node_b, &ub, b_ip, a_ip, A_MAC);
    let (key_a, key_b) = (PrivateKey::random(), PrivateKey::random());
    let (pub_a, pub_b) = (
        key_a.public_key().to_base64(),
        key_b.public_key().to_base64(),
    );

    let nse_sock = dir.join("nse.sock");
    let endpoint = TestEndpoint::start(&nse_sock, "nse", kernel_mech(&nse.url(), "nse0")).unwrap();
    let serve = |node: &Node, name: &str, ip, next: String, key: &PrivateKey| {
        let listen = format!("unix://{}", dir.join(&format!("{name}.sock")).display());
        let dp = node.0.dataplane();
        dp.set_wireguard_key(key.to_base64());
        let public = key.public_key().0;
        let server = node.0.serve_with(dp, name, &listen, Some(ip), next, |c| {
            c.wireguard_public_key = Some(public)
        });
        (listen, server)
    };
    let (b_listen, server_b) = serve(
        &b,
        "forwarder-b",
        b_ip,
        format!("unix://{}", nse_sock.display()),
        &key_b,
    );
    let nsmgr_sock = dir.join("nsmgr.sock");
    let nsmgr = TestNsmgr::start(&nsmgr_sock, &b_listen).unwrap();
    let (a_listen, server_a) = serve(
        &a,
        "forwarder-a",
        a_ip,
        format!("unix://{}", nsmgr_sock.display()),
        &key_a,
    );
    let mut client = BlockingClient::connect(&a_listen).unwrap();

    let id = format!("wg-{}", std::process::id());
    let answer = client.request(request(&id, &nsc, None)).unwrap();
    assert_eq!(answer.state, State::Up as i32);

    // A offered WIREGUARD (the REMOTE mechanism for IP payload) with its address, the
    // connection's port and its key.
    let relayed = nsmgr.log().requests;
    assert_eq!(relayed.len(), 1);
    let offer = &relayed[0].mechanism_preferences;
    assert_eq!(offer.len(), 1, "{offer:?}");
    assert_eq!(
        (offer[0].r#type.as_str(), offer[0].cls.as_str()),
        ("WIREGUARD", "REMOTE")
    );
    let p = &offer[0].parameters;
    assert_eq!(p["src_ip"], a_ip.to_string());
    assert_eq!(p["src_port"], "51820");
    assert_eq!(p["src_public_key"], pub_a);
    // The MTU both ends got: 60 bytes of WireGuard under the uplink's 1500 (80 over IPv6).
    let mtu = if v6 { 1420 } else { 1440 };
    assert_eq!(answer.context.as_ref().unwrap().mtu, mtu);

    // Each built one tunnel whose peer is the other's key and address.
    let (wa, wb) = (wireguard(&a), wireguard(&b));
    assert_eq!((wa.len(), wb.len()), (1, 1), "{wa:?} {wb:?}");
    assert_eq!(
        (wa[0].public_key.as_str(), wb[0].public_key.as_str()),
        (pub_a.as_str(), pub_b.as_str())
    );
    assert_eq!(wa[0].peers[0].public_key, pub_b);
    assert_eq!(wb[0].peers[0].public_key, pub_a);
    assert_eq!(wa[0].peers[0].endpoint.unwrap().ip(), b_ip);
    assert_eq!(wb[0].peers[0].endpoint.unwrap().ip(), a_ip);
    assert_eq!(wa[0].listen, std::net::SocketAddr::new(a_ip, 51820));

    // Ping both ways: one hop per forwarder each way (64 - 2), after a handshake on both.
    let mut reply = None;
    wait_for("a ping from the NSC to the NSE over WireGuard", 30, || {
        reply = nsc.ping_reply(NSE_ADDR, 64);
        reply.is_some()
    });
    let reply = reply.expect("waited for");
    assert!(reply.contains("ttl=62"), "two forwarders each way: {reply}");
    assert!(nse.ping(NSC_ADDR), "the NSE reaches the NSC");
    // IPv6 in the same tunnel, its hop limit down by one per forwarder.
    let mut reply6 = None;
    wait_for("a ping over IPv6 from the NSC to the NSE", 10, || {
        reply6 = nsc.ping_reply(NSE_ADDR6, 64);
        reply6.is_some()
    });
    let reply6 = reply6.expect("waited for");
    assert!(
        reply6.contains("ttl=62"),
        "two forwarders each way: {reply6}"
    );
    assert!(nse.ping(NSC_ADDR6), "the NSE reaches the NSC over IPv6");
    let (wa, wb) = (wireguard(&a), wireguard(&b));
    for (n, w) in [("A", &wa), ("B", &wb)] {
        let peer = &w[0].peers[0];
        assert!(peer.handshakes >= 1, "{n}: {w:?}");
        assert!(peer.rx_packets >= 2 && peer.tx_packets >= 2, "{n}: {w:?}");
    }
    // Through the nodes of the underlay's family.
    for (n, node) in [("A", &a), ("B", &b)] {
        let (four, six) = (
            node_packets(node, "wg4-encrypt"),
            node_packets(node, "wg6-encrypt"),
        );
        let (used, unused) = if v6 { (six, four) } else { (four, six) };
        assert!(used >= 2 && unused == 0, "{n}: wg4 {four}, wg6 {six}");
    }

    // A refresh keeps both tunnels as they are: same ports and keys, no new handshake.
    let again = client.request(request(&id, &nsc, Some(&answer))).unwrap();
    assert_eq!(again.state, State::Up as i32);
    let (ra, rb) = (wireguard(&a), wireguard(&b));
    for (n, before, after) in [("A", &wa, &ra), ("B", &wb, &rb)] {
        assert_eq!(after.len(), 1, "{n}");
        assert_eq!(
            (after[0].listen, after[0].peers[0].handshakes),
            (before[0].listen, before[0].peers[0].handshakes),
            "{n}"
        );
    }
    assert!(nsc.ping_reply(NSE_ADDR, 64).is_some(), "after the refresh");
    assert!(nsc.ping(NSE_ADDR6), "IPv6 after the refresh");

    // Close through A: neither forwarder keeps anything but its uplink.
    client.close(again).unwrap();
    for (n, node, server) in [("A", &a, &server_a), ("B", &b, &server_b)] {
        wait_for(&format!("{n} to remove its tunnel"), 10, || {
            wireguard(node).is_empty()
        });
        assert_eq!(node.port_names(), vec!["uplink".to_string()], "{n}");
        assert_eq!(server.core().connection_count(), 0, "{n}");
        assert!(node.fwd().owned_by(&id).is_empty(), "{n}");
    }
    assert!(!nsc.has_link("nsm0") && !nse.has_link("nse0"));
    drop(client);
    drop((server_a, server_b, nsmgr, endpoint));
    a.0.stop();
    b.0.stop();
}
