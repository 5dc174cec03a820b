//! NSM's grpcfd through the real forwarder: the NSC passes its network namespace as an fd
//! beside the Request on Quiver's unix socket (SCM_RIGHTS) and names it `inode://dev/ino`;
//! Quiver builds the KERNEL interface inside that namespace. An `inode://` URL no fd was passed
//! for is refused with nothing built, and the fd Quiver received is closed after Close.

use std::os::unix::fs::MetadataExt;
use std::path::Path as FsPath;

use ctl_api::grpcfd::InodeKey;
use ctl_api::nsm::testing::TestEndpoint;
use ctl_api::proto::connection::State;
use ctl_api::proto::networkservice::network_service_client::NetworkServiceClient;
use ctl_api::proto::networkservice::NetworkServiceRequest;
use testkit::{require, wait_for, Needs};

mod nsm_support;

use nsm_support::{mech, nsc_connection, Netns, TempDir, TestForwarder, IP};

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
        mechanism_preferences: vec![mech("KERNEL", &[("inodeURL", inode_url), ("name", "nsm0")])],
    }
}

#[test]
fn a_namespace_passed_by_fd_gets_the_kernel_interface_and_its_fd_is_closed_after_close() {
    if !require(
        "a_namespace_passed_by_fd_gets_the_kernel_interface",
        &Needs {
            root: true,
            tools: &[IP],
            ..Needs::default()
        },
    ) {
        return;
    }
    let nsc = Netns::new("fdc");
    let nse = Netns::new("fde");
    let dir = TempDir::new("nsm-grpcfd");
    let nsc_key = {
        let m = std::fs::metadata(nsc.path()).unwrap();
        InodeKey {
            dev: m.dev(),
            ino: m.ino(),
        }
    };

    let quiver = TestForwarder::start("");
    let fwd = quiver.fwd.clone();

    let nse_sock = dir.path().join("nse.sock");
    let endpoint = TestEndpoint::start(
        &nse_sock,
        "nse",
        vec![mech(
            "KERNEL",
            &[("inodeURL", &nse.url()), ("name", "nse0")],
        )],
    )
    .unwrap();
    let listen = format!("unix://{}", dir.path().join("quiver.sock").display());
    let dp = quiver.dataplane();
    let server = quiver.serve(
        dp.clone(),
        "quiver",
        &listen,
        None,
        format!("unix://{}", nse_sock.display()),
    );

    // The NSC: a plaintext channel on the unix socket that passes fds.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let channel = rt
        .block_on(ctl_api::spiffe::connect(&listen, None))
        .unwrap();
    let mut client = NetworkServiceClient::new(channel.channel());
    let id = format!("grpcfd-{}", std::process::id());
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
    assert!(fwd.lock().unwrap().ports().is_empty(), "no port built");
    assert!(!nsc.has_link("nsm0"));
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
    assert_eq!(fwd.lock().unwrap().ports().len(), 2);
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
    assert!(nsc.has_link("nsm0"));

    rt.block_on(client.close(refreshed)).unwrap();
    assert!(!nsc.has_link("nsm0"), "the client's interface is gone");
    assert!(fwd.lock().unwrap().ports().is_empty(), "no port left");
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
