//! Control-plane input tried the way an attacker would (issue 21, part 3): each case gets a
//! clear status, changes nothing (no port, cross-connect, connection, published connection,
//! held fd, owner in the data path, call to the endpoint or removal), and the server keeps
//! serving. The limits are `nsm_forwarder::limits`'.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use nsm_forwarder::limits::{
    MAX_ID_LEN, MAX_MECHANISM_PREFERENCES, MAX_MESSAGE_SIZE, MAX_PATH_SEGMENTS, MAX_POLICIES,
    MAX_ROUTES,
};
use nsm_forwarder::NsmBackend;
use nsm_proto::connection::monitor_connection_client::MonitorConnectionClient;
use nsm_proto::connection::{Connection, MonitorScopeSelector};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext, PolicyRoute, Route};
use nsm_proto::networkservice::NetworkServiceRequest;
use tonic::{Code, Status};

use crate::fake_endpoint::NS;
use crate::harness::*;

impl Harness {
    /// Nothing was made, asked or removed for any caller.
    fn assert_untouched(&self, what: &str) {
        self.assert_no_state(what);
        assert!(
            self.dp.created().is_empty(),
            "{what}: {:?}",
            self.dp.created()
        );
        assert!(
            self.dp.st().removed_owners.is_empty(),
            "{what}: remove_owned({:?})",
            self.dp.st().removed_owners
        );
        assert!(self.dp.owners().unwrap().is_empty(), "{what}: owners");
        assert_eq!(self.nse_requests(), 0, "{what}: the endpoint was asked");
        assert!(self.fds.is_empty(), "{what}: fds held {:?}", self.fds.ids());
    }

    /// The server still serves: a good Request builds its connection, and a Close removes it.
    async fn assert_still_serving(&self, what: &str) {
        let answer = self
            .request(memif_request("after"))
            .await
            .unwrap_or_else(|e| panic!("{what}: the server no longer serves: {e:?}"));
        assert_eq!(self.core.connection_count(), 1, "{what}");
        self.close(answer).await.unwrap();
        self.assert_no_state(what);
    }
}

fn refused(answer: Result<Connection, Status>, code: Code, what: &str) -> Status {
    let e = answer.expect_err(what);
    assert_eq!(e.code(), code, "{what}: {e:?}");
    assert!(!e.message().is_empty(), "{what}");
    e
}

/// A Request of `id` whose connection carries `size` bytes of labels.
fn padded(id: &str, size: usize) -> NetworkServiceRequest {
    let mut req = memif_request(id);
    let conn = req.connection.as_mut().unwrap();
    conn.labels = HashMap::from([("pad".to_string(), "x".repeat(size))]);
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_messages_are_resource_exhausted_and_the_server_keeps_serving() {
    let h = harness(DEFAULT).await;
    let over = MAX_MESSAGE_SIZE + 1024;
    let e = refused(
        h.request(padded("big", over)).await,
        Code::ResourceExhausted,
        "Request",
    );
    assert!(e.message().contains("too large"), "{e:?}");
    assert!(e.message().contains(&MAX_MESSAGE_SIZE.to_string()), "{e:?}");
    let e = h
        .close(padded("big", over).connection.unwrap())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "Close: {e:?}");
    let selector = MonitorScopeSelector {
        network_services: vec!["x".repeat(over)],
        ..Default::default()
    };
    let e = MonitorConnectionClient::new(h.channel.clone())
        .monitor_connections(selector)
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Code::ResourceExhausted,
        "MonitorConnections: {e:?}"
    );
    h.assert_untouched("oversized messages");
    // Just under the limit is served (nothing checks labels).
    let answer = h
        .request(padded("under", MAX_MESSAGE_SIZE - 4096))
        .await
        .unwrap();
    h.close(answer).await.unwrap();
    h.assert_no_state("a message just under the limit, closed");
    h.assert_still_serving("after oversized messages").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_mechanism_preferences_or_path_segments_are_refused() {
    let h = harness(DEFAULT).await;
    let mut req = memif_request("c1");
    req.mechanism_preferences = vec![mech("MEMIF", &[("inodeURL", NS)]); 10_000];
    let e = refused(h.request(req).await, Code::InvalidArgument, "preferences");
    assert!(e.message().contains("mechanism_preferences"), "{e:?}");
    assert!(
        e.message()
            .contains(&format!("at most {MAX_MECHANISM_PREFERENCES}")),
        "{e:?}"
    );

    let mut req = memif_request("c1");
    let path = req.connection.as_mut().unwrap().path.as_mut().unwrap();
    let first = path.path_segments[0].clone();
    path.path_segments = vec![first; 10_000];
    let e = refused(
        h.request(req.clone()).await,
        Code::InvalidArgument,
        "segments",
    );
    assert!(e.message().contains("path_segments"), "{e:?}");
    assert!(
        e.message()
            .contains(&format!("at most {MAX_PATH_SEGMENTS}")),
        "{e:?}"
    );
    // A Close with such a path is refused too (it would be walked to find the next hop).
    let e = h.close(req.connection.unwrap()).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "Close: {e:?}");
    h.assert_untouched("10,000 preferences or segments");
    h.assert_still_serving("after 10,000 preferences or segments")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_or_deeply_nested_ip_contexts_are_refused() {
    let h = harness(DEFAULT).await;
    let route = |i: usize| Route {
        prefix: format!("10.{}.{}.0/24", i / 256 % 256, i % 256),
        next_hop: String::new(),
    };
    let routes = |n: usize| (0..n).map(route).collect::<Vec<_>>();
    let cases: Vec<(&str, IpContext)> = vec![
        (
            "src_routes",
            IpContext {
                src_routes: routes(100_000),
                ..Default::default()
            },
        ),
        (
            "src_ip_addrs",
            IpContext {
                src_ip_addrs: (0..100_000)
                    .map(|i| format!("10.{}.{}.1/32", i / 256 % 256, i % 256))
                    .collect(),
                ..Default::default()
            },
        ),
        (
            "excluded_prefixes",
            IpContext {
                excluded_prefixes: routes(100_000).into_iter().map(|r| r.prefix).collect(),
                ..Default::default()
            },
        ),
        (
            "policies",
            IpContext {
                policies: vec![PolicyRoute::default(); 10_000],
                ..Default::default()
            },
        ),
        (
            // Nested: every policy within the limits, their routes together over it.
            "policies[*].routes",
            IpContext {
                policies: (0..MAX_POLICIES)
                    .map(|i| PolicyRoute {
                        from: format!("172.16.{i}.0/24"),
                        routes: routes(MAX_ROUTES / MAX_POLICIES + 1),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            },
        ),
    ];
    for (field, ip) in cases {
        let mut req = memif_request("c1");
        req.connection.as_mut().unwrap().context = Some(ConnectionContext {
            ip_context: Some(ip),
            ..Default::default()
        });
        let e = refused(h.request(req).await, Code::InvalidArgument, field);
        assert!(e.message().contains(field), "{field}: {e:?}");
        h.assert_untouched(field);
    }
    h.assert_still_serving("after huge IP contexts").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_unknown_fields_are_a_decoding_error() {
    // No NSM message nests without bound, but protobuf groups of an unknown field do: 200
    // of them inside the Request (prost stops at 100) cannot be decoded.
    let h = harness(DEFAULT).await;
    let mut bytes = Vec::new();
    let depth = 200;
    bytes.extend(std::iter::repeat_n(0x7b_u8, depth)); // field 15, start group
    bytes.extend(std::iter::repeat_n(0x7c_u8, depth)); // field 15, end group
    let e = raw::request(h.channel.clone(), bytes).await.unwrap_err();
    assert_eq!(e.code(), Code::Internal, "{e:?}");
    assert!(e.message().contains("recursion limit"), "{e:?}");
    h.assert_untouched("deeply nested groups");
    h.assert_still_serving("after deeply nested groups").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inode_url_naming_an_fd_never_passed_is_refused() {
    let h = harness(DEFAULT).await;
    // The identity of a real file (Quiver could open it), never passed on the socket.
    let ns = std::fs::File::open("/proc/self/ns/net").unwrap();
    let key = grpc_unix::InodeKey::of(&ns).unwrap();
    for url in [
        format!("{key}"),
        "inode://1/2".to_string(),
        "inode://3/999999999999".into(),
    ] {
        let req = request("c1", "ETHERNET", vec![mech("MEMIF", &[("inodeURL", &url)])]);
        let e = refused(h.request(req).await, Code::InvalidArgument, &url);
        assert!(
            e.message().contains("no file descriptor was passed"),
            "{url}: {e:?}"
        );
        h.assert_untouched(&url);
    }
    // An fd number of Quiver's own (this process's), named as a path instead.
    let fd = ns.as_raw_fd();
    let pid = std::process::id();
    for url in [
        format!("file:///proc/self/fd/{fd}"),
        format!("file:///proc/{pid}/fd/{fd}"),
        format!("file:///proc/thread-self/fd/{fd}"),
        format!("file:///proc/self/ns/../fd/{fd}"),
    ] {
        let req = request(
            "c1",
            "ETHERNET",
            vec![mech("KERNEL", &[("inodeURL", &url)])],
        );
        let e = refused(h.request(req).await, Code::PermissionDenied, &url);
        assert!(e.message().contains("inode://"), "{url}: {e:?}");
        h.assert_untouched(&url);
    }
    h.assert_still_serving("after forged fds").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_symlink_into_proc_self_is_refused() {
    let h = harness(DEFAULT).await;
    let dir = tempfile::tempdir().unwrap();
    let held = std::fs::File::open("/proc/self/ns/net").unwrap();
    let links = [
        ("ns", "/proc/self/ns/net".to_string()),
        ("pid", format!("/proc/{}/ns/net", std::process::id())),
        ("fd", format!("/proc/self/fd/{}", held.as_raw_fd())),
    ];
    for (name, target) in links {
        let link = dir.path().join(name);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let url = format!("file://{}", link.display());
        for ty in ["MEMIF", "KERNEL"] {
            let what = format!("{ty} {url} -> {target}");
            let req = request("c1", "ETHERNET", vec![mech(ty, &[("inodeURL", &url)])]);
            let e = refused(h.request(req).await, Code::PermissionDenied, &what);
            assert!(e.message().contains("own"), "{what}: {e:?}");
            h.assert_untouched(&what);
        }
    }
    h.assert_still_serving("after symlinks into /proc/self")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memif_socket_file_of_the_clients_is_refused() {
    let h = harness(DEFAULT).await;
    for socket in [
        "/run/quiver/admin.sock",
        "/var/lib/networkservicemesh/nsm.io.sock",
        "../../etc/passwd",
    ] {
        let req = request(
            "c1",
            "ETHERNET",
            vec![mech("MEMIF", &[("inodeURL", NS), ("socketfile", socket)])],
        );
        let e = refused(h.request(req).await, Code::InvalidArgument, socket);
        assert!(e.message().contains("socketfile"), "{socket}: {e:?}");
        h.assert_untouched(socket);
    }
    // Quiver's own abstract socket, as a refresh sends it back, is taken.
    let answer = h.request(memif_request("c1")).await.unwrap();
    let socket = &answer.mechanism.as_ref().unwrap().parameters["socketfile"];
    assert!(socket.starts_with('@'), "{socket}");
    h.request(refresh_of(&answer, &[])).await.unwrap();
    assert_eq!(h.dp.created().len(), 2, "the refresh rebuilt something");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_id_of_one_megabyte_is_refused() {
    let h = harness(DEFAULT).await;
    let id = "a".repeat(1 << 20);
    let req = memif_request(&id);
    let e = refused(
        h.request(req.clone()).await,
        Code::InvalidArgument,
        "Request",
    );
    assert!(
        e.message().contains(&format!("at most {MAX_ID_LEN}")),
        "{e:?}"
    );
    // The answer does not echo the megabyte.
    assert!(e.message().len() < 1024, "{} bytes", e.message().len());
    let e = h.close(req.connection.unwrap()).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "Close: {e:?}");
    h.assert_untouched("a 1 MB id");
    h.assert_still_serving("after a 1 MB id").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_requests_for_one_id_make_one_connection() {
    let h = Arc::new(harness(DEFAULT).await);
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let h = h.clone();
            tokio::spawn(async move { h.request(memif_request("flood")).await })
        })
        .collect();
    let mut own_ids = std::collections::BTreeSet::new();
    for t in tasks {
        let answer = t.await.unwrap().expect("every Request is answered");
        assert_eq!(answer.id, "flood");
        own_ids.insert(segments(&answer)[1].1.clone());
    }
    assert_eq!(
        own_ids.len(),
        1,
        "one Quiver segment for the id: {own_ids:?}"
    );
    assert_eq!(h.core.connection_count(), 1);
    assert_eq!(h.dp.st().ports.len(), 2);
    assert_eq!(h.dp.created().len(), 2, "a refresh rebuilt something");
    assert_eq!(h.dp.owners().unwrap(), ["flood"]);
    assert_eq!(h.nse_requests(), 200);
    // Closed, nothing is left.
    let answer = h.request(memif_request("flood")).await.unwrap();
    h.close(answer).await.unwrap();
    h.assert_no_state("after the flood, closed");
    assert!(h.dp.owners().unwrap().is_empty());
    assert!(h.fds.is_empty());
}

/// A unary call of raw bytes (whatever a hostile client might send).
mod raw {
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
    use tonic::transport::Channel;
    use tonic::Status;

    #[derive(Default)]
    struct Bytes;

    impl Encoder for Bytes {
        type Item = Vec<u8>;
        type Error = Status;
        fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
            use bytes::BufMut;
            dst.put_slice(&item);
            Ok(())
        }
    }

    impl Decoder for Bytes {
        type Item = Vec<u8>;
        type Error = Status;
        fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
            use bytes::Buf;
            let mut v = vec![0; src.remaining()];
            src.copy_to_slice(&mut v);
            Ok(Some(v))
        }
    }

    impl Codec for Bytes {
        type Encode = Vec<u8>;
        type Decode = Vec<u8>;
        type Encoder = Bytes;
        type Decoder = Bytes;
        fn encoder(&mut self) -> Bytes {
            Bytes
        }
        fn decoder(&mut self) -> Bytes {
            Bytes
        }
    }

    /// `networkservice.NetworkService/Request` with `body` as the message.
    pub(crate) async fn request(channel: Channel, body: Vec<u8>) -> Result<Vec<u8>, Status> {
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(
            "/networkservice.NetworkService/Request",
        );
        grpc.unary(tonic::Request::new(body), path, Bytes)
            .await
            .map(|r| r.into_inner())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_checks_the_sizes_for_callers_other_than_the_server() {
    let h = harness(DEFAULT).await;
    let mut req = memif_request("c1");
    req.mechanism_preferences = vec![mech("MEMIF", &[("inodeURL", NS)]); 10_000];
    let e = h.core.request(req).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("mechanism_preferences"), "{e:?}");
    let e = h
        .core
        .close(memif_request(&"a".repeat(1 << 20)).connection.unwrap())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    h.assert_untouched("calls of the core");
}
