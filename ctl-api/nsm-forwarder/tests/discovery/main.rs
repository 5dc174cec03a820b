//! Quiver selects the endpoint, as NSM v1.18 forwarders do: nsmgr sends Requests that name no
//! endpoint, and Quiver finds the network service and its endpoints in the registry, keeps
//! those the service's matches select, takes the service's payload, tries them round robin,
//! and names the one that accepted in what it sends on and answers.

mod fakes;

use std::time::SystemTime;

use nsm_forwarder::endpoint::{Candidate, EndpointDiscovery};
use nsm_forwarder::PortSpec;
use nsm_proto::connection::Connection;
use nsm_proto::registry::{
    Destination, Match, NetworkService, NetworkServiceEndpoint, NetworkServiceEndpointResponse,
};
use tonic::{Code, Status};

use fakes::*;

/// A network service with `payload` whose one match sends every client to the endpoints
/// labelled `color=blue`.
fn blue_only(name: &str, payload: &str) -> NetworkService {
    NetworkService {
        name: name.into(),
        payload: payload.into(),
        matches: vec![Match {
            routes: vec![Destination {
                destination_selector: [("color".to_string(), "blue".to_string())].into(),
                weight: 0,
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A network service without matches.
fn any(name: &str, payload: &str) -> NetworkService {
    NetworkService {
        name: name.into(),
        payload: payload.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiver_selects_the_endpoint_the_service_matches_takes_its_payload_and_keeps_it() {
    let mut w = World::start().await;
    let red = w.endpoint("nse-red", false);
    let blue = w.endpoint("nse-blue", false);
    {
        let mut st = w.registry.state();
        st.services.push(blue_only("icmp", "IP"));
        // The excluded endpoint first: without the match it would be tried first.
        st.endpoints
            .push(nse("nse-red", "icmp", &red, &[("color", "red")]));
        st.endpoints
            .push(nse("nse-blue", "icmp", &blue, &[("color", "blue")]));
    }

    let req = request("c1", "icmp", &[]);
    let answer = w.request(req.clone()).await.unwrap();
    assert_eq!(answer.network_service_endpoint_name, "nse-blue");
    assert_eq!(answer.payload, "IP");
    assert_eq!(w.seen("nse-red"), Vec::<String>::new());
    let own_id = answer.path.as_ref().unwrap().path_segments[1].id.clone();
    assert_eq!(
        w.seen("nse-blue"),
        [format!("request {own_id} name=nse-blue payload=IP")]
    );
    assert_eq!(
        w.registry.finds(),
        ["ns icmp", "nse name= services=icmp"],
        "the service, then its endpoints"
    );
    // IP payload: both memifs in IP mode, an L3 cross-connect.
    {
        let ports = w.dp.ports.lock().unwrap();
        assert_eq!(ports.len(), 2, "{ports:?}");
        for (_, spec) in ports.values() {
            let PortSpec::Memif(m) = spec else {
                panic!("not a memif: {spec:?}")
            };
            assert_eq!(m.mode, nsm_forwarder::dataplane::FrameMode::Ip, "{m:?}");
        }
        let xcs = w.dp.xcs.lock().unwrap();
        assert!(xcs.values().all(|(_, kind)| *kind == "l3"), "{xcs:?}");
    }

    // nsmgr's refresh names the endpoint: it goes there again, without a new lookup.
    let again = w.request(refresh_of(&answer, &req)).await.unwrap();
    assert_eq!(again.network_service_endpoint_name, "nse-blue");
    assert_eq!(again.payload, "IP");
    assert_eq!(w.seen("nse-blue").len(), 2);
    assert_eq!(w.seen("nse-red"), Vec::<String>::new());
    assert_eq!(w.registry.finds().len(), 2, "a refresh needs no lookup");

    // A refresh that lost the name and the payload still stays with the endpoint, as IP.
    let mut bare = answer.clone();
    bare.network_service_endpoint_name.clear();
    bare.payload.clear();
    let third = w.request(refresh_of(&bare, &req)).await.unwrap();
    assert_eq!(third.network_service_endpoint_name, "nse-blue");
    assert_eq!(third.payload, "IP");
    assert_eq!(
        w.seen("nse-blue")[2],
        format!("request {own_id} name=nse-blue payload=IP")
    );

    w.close(again).await.unwrap();
    assert_eq!(
        w.seen("nse-blue").last().unwrap(),
        &format!("close {own_id}")
    );
    w.assert_no_state("after Close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_naming_another_endpoint_moves_there_and_closes_the_old_one() {
    let mut w = World::start().await;
    let one = w.endpoint("nse-1", false);
    let two = w.endpoint("nse-2", false);
    {
        let mut st = w.registry.state();
        st.services.push(any("icmp", "ETHERNET"));
        st.endpoints.push(nse("nse-1", "icmp", &one, &[]));
        st.endpoints.push(nse("nse-2", "icmp", &two, &[]));
    }
    let req = request("c1", "icmp", &[]);
    let answer = w.request(req.clone()).await.unwrap();
    assert_eq!(answer.network_service_endpoint_name, "nse-1");
    let own_id = answer.path.as_ref().unwrap().path_segments[1].id.clone();

    let mut moved = answer.clone();
    moved.network_service_endpoint_name = "nse-2".into();
    let answer = w.request(refresh_of(&moved, &req)).await.unwrap();
    assert_eq!(answer.network_service_endpoint_name, "nse-2");
    assert_eq!(
        w.registry.finds().last().unwrap(),
        "nse name=nse-2 services=",
        "the endpoint found by its name"
    );
    assert_eq!(
        w.seen("nse-1"),
        [
            format!("request {own_id} name=nse-1 payload=ETHERNET"),
            format!("close {own_id}")
        ]
    );
    assert_eq!(
        w.seen("nse-2"),
        [format!("request {own_id} name=nse-2 payload=ETHERNET")]
    );
    w.close(answer).await.unwrap();
    assert_eq!(w.seen("nse-2").last().unwrap(), &format!("close {own_id}"));
    w.assert_no_state("after Close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_endpoint_makes_quiver_try_the_next_and_requests_take_turns() {
    let mut w = World::start().await;
    let full = w.endpoint("nse-full", true);
    let ok = w.endpoint("nse-ok", false);
    {
        let mut st = w.registry.state();
        st.services.push(any("icmp", "ETHERNET"));
        st.endpoints.push(nse("nse-full", "icmp", &full, &[]));
        st.endpoints.push(nse("nse-ok", "icmp", &ok, &[]));
    }

    let answer = w.request(request("c1", "icmp", &[])).await.unwrap();
    assert_eq!(answer.network_service_endpoint_name, "nse-ok");
    assert_eq!(answer.payload, "ETHERNET");
    let tried = |name: &str| {
        w.seen(name)
            .iter()
            .filter(|l| l.starts_with("request"))
            .count()
    };
    assert_eq!((tried("nse-full"), tried("nse-ok")), (1, 1));
    assert!(
        w.seen("nse-full")[0].contains("name=nse-full"),
        "each endpoint is Requested under its own name: {:?}",
        w.seen("nse-full")
    );
    // L2 for ETHERNET.
    assert!(w
        .dp
        .xcs
        .lock()
        .unwrap()
        .values()
        .all(|(_, kind)| *kind == "l2"));

    // The next connection of the service starts one further along: at nse-ok.
    let second = w.request(request("c2", "icmp", &[])).await.unwrap();
    assert_eq!(second.network_service_endpoint_name, "nse-ok");
    assert_eq!((tried("nse-full"), tried("nse-ok")), (1, 2));
    assert_eq!(w.core.connection_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_endpoint_refuses_the_refusals_are_listed_and_nothing_is_left() {
    let mut w = World::start().await;
    let a = w.endpoint("nse-a", true);
    let b = w.endpoint("nse-b", true);
    {
        let mut st = w.registry.state();
        st.services.push(any("icmp", ""));
        st.endpoints.push(nse("nse-a", "icmp", &a, &[]));
        st.endpoints.push(nse("nse-b", "icmp", &b, &[]));
    }
    let e = w.request(request("c1", "icmp", &[])).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    for name in ["nse-a is full", "nse-b is full", "\"icmp\""] {
        assert!(e.message().contains(name), "{name}: {}", e.message());
    }
    w.assert_no_state("after every endpoint refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_endpoint_for_the_service_is_not_found_and_leaves_nothing() {
    let mut w = World::start().await;
    let red = w.endpoint("nse-red", false);
    let stale = w.endpoint("nse-stale", false);
    {
        let mut st = w.registry.state();
        st.services.push(blue_only("icmp", "IP"));
        st.endpoints
            .push(nse("nse-red", "icmp", &red, &[("color", "red")]));
        // Blue, but its registration ran out.
        let mut gone = nse("nse-stale", "icmp", &stale, &[("color", "blue")]);
        gone.expiration_time = Some(nsm_forwarder::path::timestamp(
            SystemTime::now() - std::time::Duration::from_secs(1),
        ));
        st.endpoints.push(gone);
    }
    let e = w.request(request("c1", "icmp", &[])).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(
        e.message()
            .contains("no endpoint of network service \"icmp\""),
        "{}",
        e.message()
    );
    assert_eq!(w.seen("nse-red"), Vec::<String>::new());
    assert_eq!(w.seen("nse-stale"), Vec::<String>::new());
    w.assert_no_state("after NotFound");

    // A service the registry does not have.
    let e = w.request(request("c2", "ftp", &[])).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(
        e.message()
            .contains("network service \"ftp\" is not in the registry"),
        "{}",
        e.message()
    );
    // A payload the service does not carry: the registry does not match it.
    let mut eth = request("c3", "icmp", &[]);
    eth.connection.as_mut().unwrap().payload = "ETHERNET".into();
    let e = w.request(eth).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(
        e.message().contains("with payload ETHERNET"),
        "{}",
        e.message()
    );
    w.assert_no_state("after the other refusals");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_selector_sends_labelled_clients_elsewhere() {
    let mut w = World::start().await;
    let red = w.endpoint("nse-red", false);
    let blue = w.endpoint("nse-blue", false);
    let mut svc = blue_only("icmp", "");
    svc.matches.insert(
        0,
        Match {
            source_selector: [("team".to_string(), "red".to_string())].into(),
            routes: vec![Destination {
                destination_selector: [("color".to_string(), "{{.team}}".to_string())].into(),
                weight: 0,
            }],
            ..Default::default()
        },
    );
    {
        let mut st = w.registry.state();
        st.services.push(svc);
        st.endpoints
            .push(nse("nse-blue", "icmp", &blue, &[("color", "blue")]));
        st.endpoints
            .push(nse("nse-red", "icmp", &red, &[("color", "red")]));
    }
    let a = w
        .request(request("c1", "icmp", &[("team", "red")]))
        .await
        .unwrap();
    assert_eq!(a.network_service_endpoint_name, "nse-red");
    let b = w.request(request("c2", "icmp", &[])).await.unwrap();
    assert_eq!(b.network_service_endpoint_name, "nse-blue");
}

/// A registry gone wrong is an error that says what is wrong, never a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_registry_answer_is_a_clear_error() {
    let w = World::start().await;
    let conn = Connection {
        network_service: "icmp".into(),
        ..Default::default()
    };
    let find = || async { w.discovery.find(&conn).await };

    // A payload Quiver does not carry.
    w.registry.state().services.push(any("icmp", "MPLS"));
    let e = find().await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("\"MPLS\""), "{}", e.message());

    // Endpoints with a nonsense expiry, of another service, without a name: none usable.
    w.registry.state().services[0].payload = "IP".into();
    let mut hostile = nse("nse-x", "icmp", "unix:///x", &[]);
    hostile.expiration_time = Some(prost_types::Timestamp {
        seconds: i64::MAX,
        nanos: -1,
    });
    let mut nameless = nse("", "icmp", "unix:///y", &[]);
    nameless.network_service_names = vec!["icmp".into()];
    let answers = [hostile, nameless, nse("nse-z", "other", "unix:///z", &[])];
    w.registry.state().extra_endpoint_answers = answers
        .into_iter()
        .map(|e| {
            Ok(NetworkServiceEndpointResponse {
                network_service_endpoint: Some(e),
                deleted: false,
            })
        })
        .collect();
    let e = find().await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(
        e.message().contains("3 registered, 0 usable"),
        "{}",
        e.message()
    );

    // An endpoint passed by fd that no fd came with.
    w.registry
        .state()
        .endpoints
        .push(nse("nse-fd", "icmp", "inode://1/2", &[]));
    let e = find().await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("nse-fd"), "{}", e.message());

    // A stream that fails half-way.
    w.registry.state().endpoints.clear();
    w.registry.state().extra_endpoint_answers = vec![Err(Status::data_loss("disk on fire"))];
    let e = find().await.unwrap_err();
    assert_eq!(e.code(), Code::DataLoss, "{e:?}");
    assert!(e.message().contains("disk on fire"), "{}", e.message());

    // More entries than Quiver reads.
    let many = NetworkServiceEndpointResponse {
        network_service_endpoint: Some(NetworkServiceEndpoint::default()),
        deleted: false,
    };
    w.registry.state().extra_endpoint_answers =
        vec![Ok(many); nsm_forwarder::endpoint::MAX_FIND_ANSWERS + 1];
    let e = find().await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");

    // And a good one still works.
    w.registry.state().extra_endpoint_answers.clear();
    w.registry
        .state()
        .endpoints
        .push(nse("nse-ok", "icmp", "unix:///ok", &[]));
    let found = find().await.unwrap();
    assert_eq!(
        found.endpoints,
        [Candidate {
            name: "nse-ok".into(),
            url: "unix:///ok".into()
        }]
    );
    assert_eq!(found.payload, Some(nsm_forwarder::validate::Payload::Ip));
}
