//! Request, refresh, Close, expiry, the monitor, link changes, IP payload, reselect.

use std::time::{Duration, SystemTime};

use nsm_forwarder::dataplane::MemifRole;
use nsm_forwarder::path::timestamp;
use nsm_forwarder::{L3NextHops, LinkEvent, NsmBackend, PortName, PortSpec};
use nsm_proto::connection::{ConnectionEventType, MonitorScopeSelector, PathSegment, State};

use crate::fake_dataplane::*;
use crate::fake_endpoint::*;
use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memif_request_builds_both_sides_and_an_l2_cross_connect() {
    let h = harness(DEFAULT).await;
    let answer = h.request(memif_request("c1")).await.unwrap();

    // The caller's id and index come back, UP, with Quiver's and the endpoint's segments.
    assert_eq!(answer.id, "c1");
    assert_eq!(answer.state, State::Up as i32);
    let path = answer.path.as_ref().unwrap();
    assert_eq!(path.index, 0);
    let segs = segments(&answer);
    assert_eq!(segs.len(), 3);
    assert_eq!(segs[1].0, "quiver");
    let own_id = segs[1].1.clone();
    assert_eq!(segs[2], ("nse".to_string(), format!("nse-{own_id}")));
    // Quiver's segment carries the caller's token and its own expiry.
    assert_eq!(path.path_segments[1].token, "nsc-token");
    let expires = path.path_segments[1].expires.as_ref().unwrap();
    assert!(expires.seconds > timestamp(SystemTime::now()).seconds);
    // The client mechanism: MEMIF with the socket Quiver listens on.
    let m = answer.mechanism.as_ref().unwrap();
    assert_eq!(m.r#type, "MEMIF");
    assert_eq!(m.parameters["socketfile"], "@quiver/c1/memif.socket");

    // Toward the endpoint: Quiver's segment id and index, MEMIF offered first.
    {
        let log = h.nse.lock().unwrap();
        let sent = log.requests[0].connection.as_ref().unwrap();
        assert_eq!(sent.id, own_id);
        assert_eq!(sent.path.as_ref().unwrap().index, 1);
        let offered: Vec<&str> = log.requests[0]
            .mechanism_preferences
            .iter()
            .map(|m| m.r#type.as_str())
            .collect();
        assert_eq!(offered, ["MEMIF", "KERNEL"]);
    }

    // The data path: master toward the client, slave toward the endpoint, L2 both ways.
    let PortSpec::Memif(c) = h.dp.port("nsm-c1-client").unwrap() else {
        panic!()
    };
    assert_eq!(c.role, MemifRole::Master);
    assert_eq!(c.socket, "@quiver/c1/memif.socket");
    assert_eq!(
        c.netns.as_deref(),
        Some(std::path::Path::new("/proc/self/ns/net"))
    );
    let PortSpec::Memif(e) = h.dp.port("nsm-c1-endpoint").unwrap() else {
        panic!()
    };
    assert_eq!(e.role, MemifRole::Slave);
    assert_eq!(e.socket, format!("@nse/{own_id}"));
    assert_eq!(
        h.dp.xc("nsm-c1-client"),
        Some(Xc::L2("nsm-c1-endpoint".into()))
    );
    assert_eq!(
        h.dp.xc("nsm-c1-endpoint"),
        Some(Xc::L2("nsm-c1-client".into()))
    );
    assert_eq!(h.dp.owners().unwrap(), ["c1"]);

    // What `quiver ctl show connections` lists.
    let listed = h.core.summaries();
    assert_eq!(listed.len(), 1);
    let c = &listed[0];
    assert_eq!((c.id.as_str(), c.owner.as_str()), (own_id.as_str(), "c1"));
    assert!(c.up);
    assert_eq!(c.client, ("MEMIF".to_string(), "nsm-c1-client".to_string()));
    assert_eq!(
        c.endpoint,
        ("MEMIF".to_string(), "nsm-c1-endpoint".to_string())
    );
    assert!(c.expires.is_some_and(|t| t > SystemTime::now()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_with_the_same_request_changes_nothing() {
    let h = harness(DEFAULT).await;
    let req = memif_request("c1");
    let first = h.request(req.clone()).await.unwrap();
    let created = h.dp.created();
    assert_eq!(created.len(), 2);
    let second = h
        .request(refresh_of(&first, &req.mechanism_preferences))
        .await
        .unwrap();
    // Nothing built or removed again; the same segments; the endpoint was refreshed too.
    assert_eq!(h.dp.created(), created);
    assert!(h.dp.removed().is_empty());
    assert_eq!(segments(&second), segments(&first));
    assert_eq!(second.mechanism, first.mechanism);
    assert_eq!(h.nse_requests(), 2);
    let log = h.nse.lock().unwrap();
    // The refresh toward the endpoint keeps the mechanism it chose.
    assert_eq!(
        log.requests[1]
            .connection
            .as_ref()
            .unwrap()
            .mechanism
            .as_ref()
            .unwrap()
            .r#type,
        "MEMIF"
    );
    drop(log);
    assert_eq!(h.core.connection_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_with_a_changed_interface_name_rebuilds_the_client_side() {
    let h = harness(DEFAULT).await;
    let req = kernel_request("c1", "nsc0");
    let first = h.request(req.clone()).await.unwrap();
    let PortSpec::Kernel(k) = h.dp.port("nsm-c1-client").unwrap() else {
        panic!()
    };
    assert_eq!(k.ifname, "nsc0");
    // The endpoint was offered KERNEL first, and named the interface Quiver suggested.
    let PortSpec::Kernel(e) = h.dp.port("nsm-c1-endpoint").unwrap() else {
        panic!()
    };
    assert!(e.ifname.starts_with("nse-"), "{}", e.ifname);

    let mut changed = first.clone();
    changed
        .mechanism
        .as_mut()
        .unwrap()
        .parameters
        .insert("name".into(), "nsc1".into());
    h.request(refresh_of(&changed, &req.mechanism_preferences))
        .await
        .unwrap();
    let PortSpec::Kernel(k) = h.dp.port("nsm-c1-client").unwrap() else {
        panic!()
    };
    assert_eq!(k.ifname, "nsc1");
    // Only the client side was rebuilt, and the cross-connect restored.
    assert_eq!(h.dp.removed(), ["nsm-c1-client"]);
    assert_eq!(
        h.dp.created(),
        ["nsm-c1-client", "nsm-c1-endpoint", "nsm-c1-client"]
    );
    assert_eq!(
        h.dp.xc("nsm-c1-client"),
        Some(Xc::L2("nsm-c1-endpoint".into()))
    );
    assert_eq!(
        h.dp.xc("nsm-c1-endpoint"),
        Some(Xc::L2("nsm-c1-client".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_removes_everything_and_twice_is_fine() {
    let h = harness(DEFAULT).await;
    let answer = h.request(memif_request("c1")).await.unwrap();
    let own_id = segments(&answer)[1].1.clone();
    h.close(answer.clone()).await.unwrap();
    h.assert_no_state("after Close");
    assert!(h.core.summaries().is_empty(), "still listed after Close");
    assert_eq!(
        h.nse_order(),
        [format!("request {own_id}"), format!("close {own_id}")]
    );
    // Again: Quiver no longer knows it, succeeds, and still closes toward the endpoint.
    h.close(answer).await.unwrap();
    h.assert_no_state("after the second Close");
    assert_eq!(h.nse_order().len(), 3);
    assert_eq!(h.nse_order()[2], format!("close {own_id}"));
    // A Close of an id never seen, whose path does not reach Quiver: Ok, nothing sent on.
    let never = memif_request("never").connection.unwrap();
    h.close(never).await.unwrap();
    assert_eq!(h.nse_order().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_closes_the_connection() {
    let h = harness(DEFAULT).await;
    let mut events = h.monitor(MonitorScopeSelector::default()).await;
    assert_eq!(
        next_event(&mut events).await.r#type,
        ConnectionEventType::InitialStateTransfer as i32
    );
    let mut req = memif_request("c1");
    // The caller's segment expires very soon: Quiver must close the connection by itself.
    req.connection
        .as_mut()
        .unwrap()
        .path
        .as_mut()
        .unwrap()
        .path_segments[0]
        .expires = Some(timestamp(SystemTime::now() + Duration::from_millis(300)));
    let answer = h.request(req).await.unwrap();
    let own_id = segments(&answer)[1].1.clone();
    assert_eq!(
        next_event(&mut events).await.r#type,
        ConnectionEventType::Update as i32
    );
    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Delete as i32);
    assert!(ev.connections.contains_key(&own_id));
    h.assert_no_state("after expiry");
    assert_eq!(h.nse_order().last().unwrap(), &format!("close {own_id}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_sees_initial_state_update_delete_in_order() {
    let h = harness(DEFAULT).await;
    let a = h.request(memif_request("a")).await.unwrap();
    let a_own = segments(&a)[1].1.clone();
    // Only connections whose path runs through the segment of "a"'s client.
    let selector = MonitorScopeSelector {
        path_segments: vec![PathSegment {
            name: "nsc".into(),
            id: "a".into(),
            ..Default::default()
        }],
        network_services: vec![],
    };
    let mut only_a = h.monitor(selector).await;
    let mut all = h.monitor(MonitorScopeSelector::default()).await;
    let ev = next_event(&mut only_a).await;
    assert_eq!(ev.r#type, ConnectionEventType::InitialStateTransfer as i32);
    assert_eq!(ev.connections.keys().collect::<Vec<_>>(), [&a_own]);
    let published = &ev.connections[&a_own];
    assert_eq!(
        published.path.as_ref().unwrap().index,
        1,
        "Quiver's own index"
    );
    assert_eq!(next_event(&mut all).await.connections.len(), 1);

    let b = h.request(memif_request("b")).await.unwrap();
    let b_own = segments(&b)[1].1.clone();
    h.request(refresh_of(&a, &memif_request("a").mechanism_preferences))
        .await
        .unwrap();
    h.close(a).await.unwrap();

    let mut seen = Vec::new();
    for _ in 0..2 {
        let ev = next_event(&mut only_a).await;
        seen.push((ev.r#type, ev.connections.keys().next().unwrap().clone()));
    }
    assert_eq!(
        seen,
        [
            (ConnectionEventType::Update as i32, a_own.clone()),
            (ConnectionEventType::Delete as i32, a_own.clone()),
        ]
    );
    let mut seen_all = Vec::new();
    for _ in 0..3 {
        let ev = next_event(&mut all).await;
        seen_all.push((ev.r#type, ev.connections.keys().next().unwrap().clone()));
    }
    assert_eq!(
        seen_all,
        [
            (ConnectionEventType::Update as i32, b_own),
            (ConnectionEventType::Update as i32, a_own.clone()),
            (ConnectionEventType::Delete as i32, a_own),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_down_is_published_as_an_update_with_state_down() {
    let h = harness(DEFAULT).await;
    let answer = h.request(memif_request("c1")).await.unwrap();
    let own_id = segments(&answer)[1].1.clone();
    let mut events = h.monitor(MonitorScopeSelector::default()).await;
    next_event(&mut events).await;
    h.dp.link(LinkEvent {
        owner: "c1".into(),
        port: PortName("nsm-c1-endpoint".into()),
        up: false,
        reason: "peer disconnected".into(),
    });
    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Update as i32);
    assert_eq!(ev.connections[&own_id].state, State::Down as i32);
    h.dp.link(LinkEvent {
        owner: "c1".into(),
        port: PortName("nsm-c1-endpoint".into()),
        up: true,
        reason: "peer connected".into(),
    });
    let ev = next_event(&mut events).await;
    assert_eq!(ev.connections[&own_id].state, State::Up as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_payload_gets_an_l3_cross_connect_each_way() {
    let h = harness(DEFAULT).await;
    let answer = h
        .request(request(
            "c1",
            "IP",
            vec![mech("KERNEL", &[("inodeURL", NS), ("name", "nsc0")])],
        ))
        .await
        .unwrap();
    // The endpoint filled the addresses: the client's interface carries its own.
    let ip = answer
        .context
        .as_ref()
        .unwrap()
        .ip_context
        .as_ref()
        .unwrap();
    assert_eq!(ip.src_ip_addrs, ["172.16.0.2/31"]);
    let PortSpec::Kernel(k) = h.dp.port("nsm-c1-client").unwrap() else {
        panic!()
    };
    assert_eq!(k.ip.addresses[0].to_string(), "172.16.0.2/31");
    let PortSpec::Kernel(e) = h.dp.port("nsm-c1-endpoint").unwrap() else {
        panic!()
    };
    assert_eq!(e.ip.addresses[0].to_string(), "172.16.0.3/31");
    // Each interface made once, with the addresses the endpoint's IPAM chose: never made
    // without them, removed and made again (the pod would see its interface flap).
    assert_eq!(h.dp.created(), ["nsm-c1-client", "nsm-c1-endpoint"]);
    assert!(h.dp.removed().is_empty(), "{:?}", h.dp.removed());
    assert_eq!(
        h.dp.xc("nsm-c1-client"),
        Some(Xc::L3(
            "nsm-c1-endpoint".into(),
            L3NextHops {
                v4: Some("172.16.0.3".parse().unwrap()),
                v6: None
            }
        ))
    );
    assert_eq!(
        h.dp.xc("nsm-c1-endpoint"),
        Some(Xc::L3(
            "nsm-c1-client".into(),
            L3NextHops {
                v4: Some("172.16.0.2".parse().unwrap()),
                v6: None
            }
        ))
    );
    // A refresh with the answered context rebuilds nothing.
    let created = h.dp.created();
    h.request(refresh_of(&answer, &[])).await.unwrap();
    assert_eq!(h.dp.created(), created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reselect_closes_the_old_connection_first() {
    let h = harness(DEFAULT).await;
    let req = memif_request("c1");
    let answer = h.request(req.clone()).await.unwrap();
    let own_id = segments(&answer)[1].1.clone();
    let mut again = answer.clone();
    again.state = State::ReselectRequested as i32;
    h.request(refresh_of(&again, &req.mechanism_preferences))
        .await
        .unwrap();
    assert_eq!(
        h.nse_order(),
        [
            format!("request {own_id}"),
            format!("close {own_id}"),
            format!("request {own_id}")
        ]
    );
    // Everything was removed and built again.
    assert_eq!(h.dp.created().len(), 4);
    assert_eq!(
        h.dp.xc("nsm-c1-client"),
        Some(Xc::L2("nsm-c1-endpoint".into()))
    );
}
