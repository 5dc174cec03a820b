//! Refusals and rollbacks, bad requests, health, startup reconciliation, many at once.

use std::sync::Arc;

use nsm_proto::connection::{ConnectionEventType, Mechanism, MonitorScopeSelector};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext, Route};
use nsm_proto::networkservice::NetworkServiceRequest;
use tonic::Code;

use crate::fake_endpoint::*;
use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_endpoint_is_unavailable_and_nothing_is_built() {
    let h = harness(Setup {
        endpoint_reachable: false,
        ..DEFAULT
    })
    .await;
    let err = h.request(memif_request("c1")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    // The client side is made only once the endpoint answered.
    assert!(h.dp.created().is_empty(), "{:?}", h.dp.created());
    assert!(h.dp.removed().is_empty(), "{:?}", h.dp.removed());
    h.assert_no_state("after an unreachable endpoint");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_side_that_cannot_be_made_closes_the_endpoints_connection() {
    let h = harness(DEFAULT).await;
    h.dp.st().fail_create = Some("nsm-c1-client".into());
    let err = h.request(memif_request("c1")).await.unwrap_err();
    assert!(err.message().contains("nsm-c1-client"), "{err:?}");
    // The endpoint had answered: its connection is closed again.
    let nse = h.nse.lock().unwrap();
    assert_eq!(nse.closes.len(), 1, "{:?}", nse.order);
    drop(nse);
    h.assert_no_state("after a client side that failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_refusal_is_passed_on_and_rolled_back() {
    let h = harness(Setup {
        refuse: Some(Code::PermissionDenied),
        ..DEFAULT
    })
    .await;
    let err = h.request(memif_request("c1")).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    h.assert_no_state("after a refusal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_refresh_removes_the_connection() {
    let h = harness(DEFAULT).await;
    let req = kernel_request("c1", "nsc0");
    let answer = h.request(req.clone()).await.unwrap();
    let own_id = segments(&answer)[1].1.clone();
    let mut events = h.monitor(MonitorScopeSelector::default()).await;
    next_event(&mut events).await;
    // The refresh changes the interface name, and the data path cannot build the new one.
    h.dp.st().fail_create = Some("nsm-c1-client".into());
    let mut changed = answer.clone();
    changed
        .mechanism
        .as_mut()
        .unwrap()
        .parameters
        .insert("name".into(), "nsc1".into());
    let err = h
        .request(refresh_of(&changed, &req.mechanism_preferences))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err:?}");
    h.assert_no_state("after a failed refresh");
    let ev = next_event(&mut events).await;
    assert_eq!(ev.r#type, ConnectionEventType::Delete as i32);
    assert!(ev.connections.contains_key(&own_id));
    assert_eq!(h.nse_order().last().unwrap(), &format!("close {own_id}"));
}

/// A Close whose removal fails (a worker that does not answer in time) is answered with the
/// error, and what the connection owned is removed in the background all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_whose_removal_failed_is_finished_in_the_background() {
    let h = harness(DEFAULT).await;
    let answer = h.request(memif_request("c1")).await.unwrap();
    h.dp.st().fail_remove_owned = 2;
    let err = h.close(answer).await.unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err:?}");
    assert!(!h.dp.is_empty(), "the failed removal left the ports");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !h.dp.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "not removed in 10 s: {:?}",
            h.dp.st()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        h.dp.st().removed_owners,
        ["c1", "c1", "c1"],
        "tried again twice"
    );
    h.assert_no_state("after the removal was tried again");
}

/// Changes one field of a Request.
type Edit = Box<dyn Fn(&mut NetworkServiceRequest)>;

/// Requests whose connection, path or id is wrong, and the status each gets.
fn bad_connections() -> Vec<(&'static str, Edit, Code)> {
    vec![
        (
            "no connection",
            Box::new(|r| r.connection = None),
            Code::InvalidArgument,
        ),
        (
            "no path",
            Box::new(|r| r.connection.as_mut().unwrap().path = None),
            Code::InvalidArgument,
        ),
        (
            "path index out of range",
            Box::new(|r| r.connection.as_mut().unwrap().path.as_mut().unwrap().index = 1),
            Code::InvalidArgument,
        ),
        (
            "segment id mismatch",
            Box::new(|r| {
                r.connection
                    .as_mut()
                    .unwrap()
                    .path
                    .as_mut()
                    .unwrap()
                    .path_segments[0]
                    .id = "other".into()
            }),
            Code::InvalidArgument,
        ),
        (
            "empty id",
            Box::new(|r| r.connection.as_mut().unwrap().id.clear()),
            Code::InvalidArgument,
        ),
    ]
}

/// Requests whose mechanisms or IP context are wrong, and the status each gets.
fn bad_mechanisms_and_contexts() -> Vec<(&'static str, Edit, Code)> {
    let ip_ctx = |ip: IpContext| {
        Box::new(move |r: &mut NetworkServiceRequest| {
            r.connection.as_mut().unwrap().context = Some(ConnectionContext {
                ip_context: Some(ip.clone()),
                ..Default::default()
            });
        }) as Edit
    };
    let prefs = |m: Vec<Mechanism>| {
        Box::new(move |r: &mut NetworkServiceRequest| r.mechanism_preferences = m.clone()) as Edit
    };
    vec![
        (
            "unknown mechanism type",
            prefs(vec![mech("TELEPATHY", &[])]),
            Code::InvalidArgument,
        ),
        (
            "no acceptable mechanism",
            prefs(vec![Mechanism {
                cls: "REMOTE".into(),
                ..mech("VXLAN", &[("vni", "7")])
            }]),
            Code::InvalidArgument,
        ),
        (
            "bad IP",
            ip_ctx(IpContext {
                src_ip_addrs: vec!["10.0.0.300/24".into()],
                ..Default::default()
            }),
            Code::InvalidArgument,
        ),
        (
            "bad prefix",
            ip_ctx(IpContext {
                src_routes: vec![Route {
                    prefix: "10.0.0.0/33".into(),
                    next_hop: String::new(),
                }],
                ..Default::default()
            }),
            Code::InvalidArgument,
        ),
        (
            "VNI out of range",
            prefs(vec![
                Mechanism {
                    cls: "REMOTE".into(),
                    ..mech("VXLAN", &[("vni", "16777216")])
                },
                mech("MEMIF", &[("inodeURL", NS)]),
            ]),
            Code::InvalidArgument,
        ),
        (
            "interface name longer than 15",
            prefs(vec![mech(
                "KERNEL",
                &[("inodeURL", NS), ("name", "nsm-0123456789ab")],
            )]),
            Code::InvalidArgument,
        ),
        (
            "namespace that does not exist",
            prefs(vec![mech(
                "KERNEL",
                &[("inodeURL", "file:///proc/0/ns/net")],
            )]),
            Code::NotFound,
        ),
        (
            "namespace URL that is not a file URL",
            prefs(vec![mech("MEMIF", &[("inodeURL", "/proc/self/ns/net")])]),
            Code::InvalidArgument,
        ),
    ]
}

/// Requests whose id is too long or payload unknown, and the status each gets.
fn bad_ids_and_payloads() -> Vec<(&'static str, Edit, Code)> {
    vec![
        (
            "id longer than 48 bytes",
            Box::new(|r| {
                let id = "x".repeat(49);
                let c = r.connection.as_mut().unwrap();
                c.id = id.clone();
                c.path.as_mut().unwrap().path_segments[0].id = id;
            }),
            Code::InvalidArgument,
        ),
        (
            "unknown payload",
            Box::new(|r| r.connection.as_mut().unwrap().payload = "MPLS".into()),
            Code::InvalidArgument,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_clear_status_and_leave_no_state() {
    let h = harness(DEFAULT).await;
    let cases = bad_connections()
        .into_iter()
        .chain(bad_mechanisms_and_contexts())
        .chain(bad_ids_and_payloads());
    for (what, edit, code) in cases {
        let mut req = memif_request("c1");
        edit(&mut req);
        let err = h.request(req).await.expect_err(what);
        assert_eq!(err.code(), code, "{what}: {err:?}");
        assert!(!err.message().is_empty(), "{what}");
        h.assert_no_state(what);
        assert_eq!(h.nse_requests(), 0, "{what}: the endpoint was asked");
    }
    // A bad refresh leaves the existing connection as it was.
    let answer = h.request(memif_request("c1")).await.unwrap();
    let created = h.dp.created();
    let mut bad = refresh_of(&answer, &[]);
    bad.connection.as_mut().unwrap().payload = "MPLS".into();
    assert_eq!(
        h.request(bad).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(h.dp.created(), created);
    assert_eq!(h.core.connection_count(), 1);
    assert!(h.dp.xc("nsm-c1-client").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_both_services_serving() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let h = harness(DEFAULT).await;
    let mut health = HealthClient::new(h.channel.clone());
    for service in [
        "networkservice.NetworkService",
        "connection.MonitorConnection",
    ] {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "{service}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "nope.Nope".into(),
        })
        .await;
    assert_eq!(unknown.unwrap_err().code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_removes_what_no_connection_owns() {
    let h = harness(Setup {
        stale_owner: Some("stale"),
        ..DEFAULT
    })
    .await;
    // The server reconciles before it serves: once a call is answered, it has.
    h.close(memif_request("x").connection.unwrap())
        .await
        .unwrap();
    assert!(h.dp.is_empty(), "{:?}", h.dp.st());
    assert_eq!(h.dp.removed(), ["nsm-stale-client"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_in_parallel_each_get_their_own_ports() {
    let h = Arc::new(harness(DEFAULT).await);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("p{i}");
            // Two Requests for one id at once: serialised, the second a refresh.
            let (a, b) = tokio::join!(h.request(memif_request(&id)), h.request(memif_request(&id)));
            let (a, b) = (a.unwrap(), b.unwrap());
            assert_eq!(
                segments(&a)[1],
                segments(&b)[1],
                "one Quiver segment per id"
            );
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(h.core.connection_count(), 16);
    assert_eq!(h.dp.st().ports.len(), 32);
    assert_eq!(h.dp.created().len(), 32, "a refresh rebuilt something");
}
