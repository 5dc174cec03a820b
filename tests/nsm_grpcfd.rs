//! NSM's grpcfd through the real forwarder: the NSC passes its network namespace as an fd
//! beside the Request on Quiver's unix socket (SCM_RIGHTS) and names it `inode://dev/ino`;
//! Quiver builds the KERNEL interface inside that namespace. An `inode://` URL no fd was passed
//! for is refused with nothing built, and the fd Quiver received is closed after Close.
//!
//! The other way: the NSE answers with its namespace as `inode://…`, passing the fd back on
//! Quiver's connection to it; Quiver builds the endpoint's interface there (ping crosses),
//! holds the fd until Close; an answer naming a namespace no fd came for is refused with
//! nothing left. The same for a MEMIF endpoint: Quiver's memif slave reaches the NSE's
//! abstract socket inside the namespace passed by fd, or (NSM's filesystem form) the socket
//! file passed by fd, and frames flow to the NSE's CNF.

use std::os::unix::fs::MetadataExt;
use std::path::Path as FsPath;

use grpc_unix::InodeKey;
use nsm_forwarder::testing::{BlockingClient, TestEndpoint};
use nsm_proto::connection::{Connection, State};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext};
use nsm_proto::networkservice::network_service_client::NetworkServiceClient;
use nsm_proto::networkservice::NetworkServiceRequest;
use testkit::wait_for;

mod nsm_support;

use nsm_support::kernel::{
    assert_built_once, assert_nothing_left, per_backend, tag, KernelBackend,
};
use nsm_support::{
    kernel_mech, link_up, mech, memif_sink, memif_source, nsc_connection, traffic_example,
    traffic_report, KernelTest, Netns, IP, PING,
};

/// How many of this process's fds (the NSM server's included: it runs here) refer to `key`.
fn open_fds_of(key: InodeKey) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
        .filter(|m| m.dev() == key.dev && m.ino() == key.ino)
        .count()
}

fn kernel_request(id: &str, inode_url: &str) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(nsc_connection(id, "fd")),
        mechanism_preferences: kernel_mech(inode_url, "nsm0"),
    }
}

/// The device and inode of namespace `ns`, as grpcfd names it.
fn inode_key(ns: &Netns) -> InodeKey {
    let m = std::fs::metadata(ns.path()).unwrap();
    InodeKey {
        dev: m.dev(),
        ino: m.ino(),
    }
}

/// The tests compare this process's whole fd table before and after, which a test running
/// beside them in another thread would change: they run one at a time.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

per_backend!(a_namespace_passed_by_fd_gets_the_kernel_interface_and_its_fd_is_closed_after_close);
fn a_namespace_passed_by_fd_gets_the_kernel_interface_and_its_fd_is_closed_after_close(
    backend: KernelBackend,
) {
    let _one = one_at_a_time();
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::with_backend(
        backend,
        "a_namespace_passed_by_fd_gets_the_kernel_interface",
        &[IP],
        ["fdc", "fde", "nsm-grpcfd"],
    )
    else {
        return;
    };
    let nsc_key = inode_key(&nsc);
    let fwd = quiver.fwd.clone();

    let endpoint = TestEndpoint::start(
        &dir.join("nse.sock"),
        "nse",
        kernel_mech(&nse.url(), "nse0"),
    )
    .unwrap();
    let (listen, dp, server) = quiver.serve_in(&dir);

    // The NSC: a plaintext channel on the unix socket that passes fds.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let channel = rt
        .block_on(spiffe_identity::connect(&listen, None))
        .unwrap();
    let mut client = NetworkServiceClient::new(channel.channel());
    let id = format!("grpcfd-{}-{}", tag(backend), std::process::id());
    assert_eq!(
        open_fds_of(nsc_key),
        0,
        "nobody holds the NSC's namespace yet"
    );

    // An inode:// URL without its fd: refused, nothing built.
    let unknown = InodeKey {
        dev: nsc_key.dev,
        ino: nsc_key.ino ^ 0x5a5a,
    };
    let err = rt
        .block_on(client.request(kernel_request(&id, &unknown.to_string())))
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(
        err.message()
            .contains(&format!("no file descriptor was passed for {unknown}")),
        "{err:?}"
    );
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);
    assert!(
        endpoint.log().requests.is_empty(),
        "the endpoint was not asked"
    );

    // The NSC's namespace by fd: file:// rewritten to inode://, the fd queued for the call.
    let key = channel.fds().send_file(FsPath::new(&nsc.path())).unwrap();
    assert_eq!(key, nsc_key);
    let url = key.to_string();
    let answer = rt
        .block_on(client.request(kernel_request(&id, &url)))
        .unwrap()
        .into_inner();
    assert_eq!(answer.state, State::Up as i32);
    assert_eq!(
        answer.mechanism.as_ref().unwrap().parameters["inodeURL"],
        url,
        "the answer names the namespace as the client did"
    );
    assert!(
        nsc.has_link("nsm0"),
        "the client's interface is in the namespace passed by fd"
    );
    assert!(nse.has_link("nse0"), "the endpoint's interface");
    assert_built_once(backend, &id, &nsc, &nse, &fwd);
    assert!(
        open_fds_of(nsc_key) >= 1,
        "Quiver holds the passed fd while the connection lives"
    );

    // A refresh names it again without passing it again: the same namespace.
    let refreshed = rt
        .block_on(client.request(NetworkServiceRequest {
            connection: Some(answer.clone()),
            mechanism_preferences: kernel_request(&id, &url).mechanism_preferences,
        }))
        .unwrap()
        .into_inner();
    assert_eq!(refreshed.state, State::Up as i32);
    assert_built_once(backend, &id, &nsc, &nse, &fwd);

    rt.block_on(client.close(refreshed)).unwrap();
    assert!(!nsc.has_link("nsm0"), "the client's interface is gone");
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);
    // The channel is still open: the fd closed with the NSM connection, not the transport.
    wait_for("the passed namespace fd to be closed", 10, || {
        open_fds_of(nsc_key) == 0
    });

    drop(client);
    drop(channel);
    drop(rt);
    drop(server);
    drop(endpoint);
    drop(dp);
    drop(fwd);
    quiver.stop();
}

/// How many fds this process has open, leaving out an async runtime's own epoll, eventfd and
/// timerfd descriptors (`anon_inode:`): the runtime of the test before this one may still be
/// shutting down when this one counts. The fds these tests follow are namespaces and sockets.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| !target.to_string_lossy().starts_with("anon_inode:"))
        .count()
}

/// How many fds this process has open once `client`'s connection to Quiver is up (a Close
/// of a connection nobody has: it changes nothing).
fn open_fds_when_connected(client: &mut BlockingClient) -> usize {
    client
        .close(nsc_connection("warm-up", "fd-answer"))
        .unwrap();
    open_fds()
}

per_backend!(the_endpoint_passes_its_namespace_by_fd_and_quiver_builds_its_interface_there);
fn the_endpoint_passes_its_namespace_by_fd_and_quiver_builds_its_interface_there(
    backend: KernelBackend,
) {
    let _one = one_at_a_time();
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::with_backend(
        backend,
        "the_endpoint_passes_its_namespace_by_fd",
        &[IP, PING],
        ["fdac", "fdae", "nsm-grpcfd-answer"],
    )
    else {
        return;
    };
    let nse_key = inode_key(&nse);
    let fwd = quiver.fwd.clone();
    // The NSE answers with its namespace as `inode://…`, the fd passed with the answer.
    let endpoint = TestEndpoint::start_passing_fds(
        &dir.join("nse.sock"),
        "nse",
        kernel_mech(&nse.url(), "nsefa0"),
    )
    .unwrap();
    let (listen, dp, server) = quiver.serve_in(&dir);
    let mut client = BlockingClient::connect(&listen).unwrap();
    let before = open_fds_when_connected(&mut client);
    assert_eq!(
        open_fds_of(nse_key),
        0,
        "nobody holds the NSE's namespace yet"
    );

    let id = format!("grpcfd-answer-{}-{}", tag(backend), std::process::id());
    let answer = client
        .request(NetworkServiceRequest {
            connection: Some(Connection {
                context: Some(ConnectionContext {
                    ip_context: Some(IpContext {
                        src_ip_addrs: vec!["10.73.0.1/24".into()],
                        dst_ip_addrs: vec!["10.73.0.2/24".into()],
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..nsc_connection(&id, "fd-answer")
            }),
            mechanism_preferences: kernel_mech(&nsc.url(), "nsmfa0"),
        })
        .unwrap();
    assert_eq!(answer.state, State::Up as i32);
    assert!(
        nse.has_link("nsefa0"),
        "the endpoint's interface is in the namespace it passed by fd"
    );
    assert!(nsc.has_link("nsmfa0"), "the client's interface");
    assert_built_once(backend, &id, &nsc, &nse, &fwd);
    assert!(
        open_fds_of(nse_key) >= 1,
        "Quiver holds the NSE's namespace while the connection lives"
    );
    wait_for("a ping from the NSC to the NSE through Quiver", 30, || {
        nsc.ping("10.73.0.2")
    });

    close_with_the_endpoints_answer(&mut client, answer, &endpoint, nse_key);
    assert!(!nse.has_link("nsefa0"), "the endpoint's interface is gone");
    assert!(!nsc.has_link("nsmfa0"), "the client's interface is gone");
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);
    assert_eq!(open_fds_of(nse_key), 0, "the NSE's namespace fd is closed");
    // Quiver's channel to the endpoint idles out: every fd is back.
    wait_for("the fds to be back to where they were", 10, || {
        open_fds() == before
    });

    drop(client);
    drop(server);
    drop(endpoint);
    drop(dp);
    drop(fwd);
    quiver.stop();
}

/// Closes `answer`; the endpoint sees one Close, with its own answer: the file it passed still
/// named `inode://…` (`key`), as it wrote it.
fn close_with_the_endpoints_answer(
    client: &mut BlockingClient,
    answer: Connection,
    endpoint: &TestEndpoint,
    key: InodeKey,
) {
    client.close(answer).unwrap();
    let closes = endpoint.log().closes;
    assert_eq!(closes.len(), 1, "closed toward the endpoint");
    assert_eq!(
        closes[0].mechanism.as_ref().unwrap().parameters["inodeURL"],
        key.to_string(),
        "with the endpoint's own answer"
    );
}

/// How a MEMIF endpoint names its socket in its answer.
#[derive(Clone, Copy)]
enum MemifAnswer {
    /// An abstract `socketfile` in the namespace named by `inodeURL`.
    AbstractInNamespace,
    /// NSM's filesystem form: `inodeURL` names the socket file itself.
    SocketFile,
}

#[test]
fn a_memif_endpoint_passes_its_namespace_by_fd_and_frames_reach_its_cnf() {
    memif_endpoint_by_fd(
        "a_memif_endpoint_passes_its_namespace_by_fd",
        ["fdmc", "fdme", "nsm-grpcfd-memif"],
        MemifAnswer::AbstractInNamespace,
    );
}

#[test]
fn a_memif_endpoint_passes_its_socket_file_by_fd_and_frames_reach_its_cnf() {
    memif_endpoint_by_fd(
        "a_memif_endpoint_passes_its_socket_file_by_fd",
        ["fdsc", "fdse", "nsm-grpcfd-memif-file"],
        MemifAnswer::SocketFile,
    );
}

/// The NSE's memif CNF counts frames from the NSC's; the NSE's gRPC side answers with its
/// socket as `form` says, the file named `inode://…` and its fd passed back. Quiver's memif
/// slave reaches the socket through that fd, frames arrive intact, and the fd is closed after
/// Close.
fn memif_endpoint_by_fd(test: &str, tags: [&str; 3], form: MemifAnswer) {
    const FRAMES: u64 = 5_000;
    let _one = one_at_a_time();
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::start(test, &[IP], tags)
    else {
        return;
    };
    let traffic = traffic_example();
    let fwd = quiver.fwd.clone();
    // The NSE's CNF: memif master, counting frames.
    let (sink, answer, passed) = match form {
        MemifAnswer::AbstractInNamespace => {
            let socket = format!("@quiver-test-fd-nse-{}", std::process::id());
            let sink = memif_sink(&traffic, &nse, &socket, FRAMES);
            let answer = [("inodeURL", nse.url()), ("socketfile", socket)];
            (sink, answer.to_vec(), inode_key(&nse))
        }
        MemifAnswer::SocketFile => {
            let path = dir.join("nse-memif.sock");
            let sink = memif_sink(&traffic, &nse, &path.display().to_string(), FRAMES);
            wait_for("the NSE's memif socket", 30, || path.exists());
            let m = std::fs::metadata(&path).unwrap();
            let key = InodeKey {
                dev: m.dev(),
                ino: m.ino(),
            };
            (
                sink,
                vec![("inodeURL", format!("file://{}", path.display()))],
                key,
            )
        }
    };
    let answer: Vec<(&str, &str)> = answer.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let endpoint =
        TestEndpoint::start_passing_fds(&dir.join("nse.sock"), "nse", vec![mech("MEMIF", &answer)])
            .unwrap();
    let (listen, dp, server) = quiver.serve_in(&dir);
    let mut client = BlockingClient::connect(&listen).unwrap();

    let id = format!("grpcfd-memif-{}", std::process::id());
    let answer = client
        .request(NetworkServiceRequest {
            connection: Some(nsc_connection(&id, "fd-memif")),
            mechanism_preferences: vec![mech("MEMIF", &[("inodeURL", &nsc.url())])],
        })
        .unwrap();
    assert_eq!(answer.state, State::Up as i32);
    assert!(
        open_fds_of(passed) >= 1,
        "Quiver holds the file the NSE passed while the connection lives"
    );
    let endpoint_port = format!("nsm-{id}-endpoint");
    wait_for("Quiver's memif to the NSE to come up", 60, || {
        link_up(&fwd, &endpoint_port)
    });
    let socket = answer.mechanism.as_ref().unwrap().parameters["socketfile"].clone();
    let sent = memif_source(&traffic, &nsc, &socket, FRAMES, "50k").wait();
    assert!(sent.status.success(), "the NSC's traffic failed: {sent:?}");
    let received = sink.wait();
    let (tx, rx) = (traffic_report(&sent), traffic_report(&received));
    let why = format!("NSC: {tx}\nNSE: {rx}");
    assert_eq!(tx["sent"], FRAMES, "{why}");
    assert!(rx["unique"].as_u64().unwrap() > FRAMES / 2, "{why}");
    for k in ["duplicated", "reordered", "corrupted", "foreign"] {
        assert_eq!(rx[k], 0, "{k}: {why}");
    }

    close_with_the_endpoints_answer(&mut client, answer, &endpoint, passed);
    assert!(fwd.view().ports().is_empty(), "no port left");
    assert_eq!(open_fds_of(passed), 0, "the fd the NSE passed is closed");

    drop(client);
    drop(server);
    drop(endpoint);
    drop(dp);
    drop(fwd);
    quiver.stop();
}

per_backend!(an_endpoint_naming_a_namespace_it_did_not_pass_is_refused_with_nothing_left);
fn an_endpoint_naming_a_namespace_it_did_not_pass_is_refused_with_nothing_left(
    backend: KernelBackend,
) {
    let _one = one_at_a_time();
    let Some(KernelTest {
        nsc,
        nse,
        dir,
        quiver,
    }) = KernelTest::with_backend(
        backend,
        "an_endpoint_naming_a_namespace_it_did_not_pass_is_refused",
        &[IP],
        ["fdnc", "fdne", "nsm-grpcfd-nofd"],
    )
    else {
        return;
    };
    let nse_key = inode_key(&nse);
    let fwd = quiver.fwd.clone();
    // It names its namespace `inode://…` and passes no fd.
    let endpoint = TestEndpoint::start(
        &dir.join("nse.sock"),
        "nse",
        kernel_mech(&nse_key.to_string(), "nsefn0"),
    )
    .unwrap();
    let (listen, dp, server) = quiver.serve_in(&dir);
    let mut client = BlockingClient::connect(&listen).unwrap();
    let before = open_fds_when_connected(&mut client);
    let id = format!("grpcfd-nofd-{}-{}", tag(backend), std::process::id());
    let err = client
        .request(NetworkServiceRequest {
            connection: Some(nsc_connection(&id, "fd-answer")),
            mechanism_preferences: kernel_mech(&nsc.url(), "nsmfn0"),
        })
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message().contains(&format!(
            "the endpoint answered inodeURL = {nse_key} but passed no file descriptor"
        )),
        "{err:?}"
    );
    assert!(!nsc.has_link("nsmfn0"), "the client's interface is gone");
    assert!(!nse.has_link("nsefn0"));
    assert_nothing_left(&id, &[&nsc, &nse], &fwd, &dp);
    assert_eq!(endpoint.log().closes.len(), 1, "closed toward the endpoint");
    wait_for("the fds to be back to where they were", 10, || {
        open_fds() == before
    });

    drop(client);
    drop(server);
    drop(endpoint);
    drop(dp);
    drop(fwd);
    quiver.stop();
}
