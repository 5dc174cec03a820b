//! The admin service end to end on a unix socket: the socket's setup, requests reaching a
//! backend typed, refusals coming back as gRPC statuses.

use std::net::IpAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;

use quiver_admin_api::proto as pb;
use quiver_admin_api::{
    bind_socket, AdminBackend, AdminClient, AdminError, AdminResult, AdminServer, AfPacketSpec,
    L3Peers, MemifSpec, SocketError, SOCKET_MODE,
};
use tonic::Status;

/// Held while a test forks (`connect_as`) and while one checks that a listener it dropped is
/// gone: a child forked meanwhile holds every descriptor of this process until it execs, the
/// dropped listener's included, and a connect then still finds it listening.
static FORKS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quiver-admin-api-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn the_socket_gets_its_directory_and_mode_and_only_a_stale_one_is_replaced() {
    let _no_fork = FORKS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("bind");
    let path = dir.join("run/admin.sock");
    let live = bind_socket(&path).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, SOCKET_MODE);
    assert!(matches!(bind_socket(&path), Err(SocketError::InUse(_))));
    drop(live);
    // The file outlives its listener: stale now, so it is replaced.
    assert!(path.exists());
    let again = bind_socket(&path).unwrap();
    drop(again);
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, b"not a socket").unwrap();
    assert!(matches!(
        bind_socket(&path),
        Err(SocketError::NotASocket(_))
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Records what it was asked; refuses what does not exist.
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<String>>);

impl Recorder {
    fn log(&self, s: String) -> AdminResult<()> {
        self.0.lock().unwrap().push(s);
        Ok(())
    }
}

impl AdminBackend for Recorder {
    fn interfaces(&self) -> AdminResult<Vec<pb::Interface>> {
        Ok(vec![pb::Interface {
            name: "memif0".into(),
            ..Default::default()
        }])
    }
    fn runtime(&self, per_worker: bool) -> AdminResult<pb::ShowRuntimeReply> {
        Ok(pb::ShowRuntimeReply {
            tsc_hz: u64::from(per_worker),
            workers: Vec::new(),
        })
    }
    fn errors(&self) -> AdminResult<Vec<pb::ErrorCounter>> {
        Ok(Vec::new())
    }
    fn fib(&self) -> AdminResult<Vec<pb::Route>> {
        Ok(Vec::new())
    }
    fn neighbors(&self) -> AdminResult<Vec<pb::Neighbor>> {
        Ok(Vec::new())
    }
    fn cross_connects(&self) -> AdminResult<Vec<pb::CrossConnect>> {
        Ok(Vec::new())
    }
    fn memifs(&self) -> AdminResult<Vec<pb::Memif>> {
        Ok(Vec::new())
    }
    fn trace_add(&self, node: &str, count: u32) -> AdminResult<()> {
        self.log(format!("trace {node} {count}"))
    }
    fn trace_show(&self) -> AdminResult<Vec<pb::TracedPacket>> {
        Ok(Vec::new())
    }
    fn trace_clear(&self) -> AdminResult<()> {
        self.log("trace clear".into())
    }
    fn add_route(
        &self,
        table: Option<&str>,
        prefix: IpAddr,
        len: u8,
        via: &[(IpAddr, String)],
    ) -> AdminResult<()> {
        match table {
            None => self.log(format!("route {prefix}/{len} {via:?}")),
            Some(t) => self.log(format!("route {t} {prefix}/{len} {via:?}")),
        }
    }
    fn add_next_table_route(
        &self,
        table: Option<&str>,
        prefix: IpAddr,
        len: u8,
        next_table: &str,
    ) -> AdminResult<()> {
        self.log(format!(
            "route {table:?} {prefix}/{len} next-table {next_table}"
        ))
    }
    fn delete_route(&self, _table: Option<&str>, prefix: IpAddr, len: u8) -> AdminResult<()> {
        Err(AdminError::NotFound(format!("no route {prefix}/{len}")))
    }
    fn tables(&self) -> AdminResult<Vec<pb::RoutingTable>> {
        Ok(Vec::new())
    }
    fn add_table(&self, name: &str) -> AdminResult<()> {
        self.log(format!("table {name}"))
    }
    fn delete_table(&self, name: &str) -> AdminResult<()> {
        self.log(format!("del table {name}"))
    }
    fn set_interface_table(&self, interface: &str, table: &str) -> AdminResult<()> {
        self.log(format!("{interface} in {table}"))
    }
    fn add_neighbor(&self, interface: &str, ip: IpAddr, mac: [u8; 6]) -> AdminResult<()> {
        self.log(format!("neighbor {interface} {ip} {mac:?}"))
    }
    fn delete_neighbor(&self, interface: &str, ip: IpAddr) -> AdminResult<()> {
        self.log(format!("del neighbor {interface} {ip}"))
    }
    fn add_address(&self, interface: &str, ip: IpAddr, len: u8) -> AdminResult<()> {
        self.log(format!("address {interface} {ip}/{len}"))
    }
    fn delete_address(&self, interface: &str, ip: IpAddr, len: u8) -> AdminResult<()> {
        self.log(format!("del address {interface} {ip}/{len}"))
    }
    fn add_cross_connect(&self, a: &str, b: &str, l3: Option<L3Peers>) -> AdminResult<()> {
        self.log(format!("xc {a} {b} {l3:?}"))
    }
    fn delete_cross_connect(&self, interface: &str) -> AdminResult<()> {
        self.log(format!("del xc {interface}"))
    }
    fn add_memif(&self, spec: &MemifSpec) -> AdminResult<u32> {
        self.log(format!("{spec:?}"))?;
        Ok(7)
    }
    fn add_af_packet(&self, spec: &AfPacketSpec) -> AdminResult<u32> {
        Err(AdminError::AlreadyExists(format!(
            "a port named `{}` exists",
            spec.name
        )))
    }
    fn delete_interface(&self, name: &str) -> AdminResult<()> {
        self.log(format!("del {name}"))
    }
    fn clear_counters(&self) -> AdminResult<()> {
        self.log("clear".into())
    }
}

/// A stub on the admin socket.
type Stub = pb::admin_client::AdminClient<tonic::transport::Channel>;

#[test]
fn requests_reach_the_backend_typed_and_refusals_come_back_as_statuses() {
    let dir = scratch("serve");
    let path = dir.join("admin.sock");
    let backend = Arc::new(Recorder::default());
    let server = AdminServer::start(backend.clone(), &path).unwrap();
    let client = AdminClient::connect(&path).unwrap();
    let mut s = client.stub();

    answers_come_back(&client, &mut s);
    changes_reach_the_backend(&client, &mut s);
    refusals_come_back_as_statuses(&client, &mut s);
    the_backend_saw_typed_requests(&backend);
    drop(client);
    server.stop();
    assert!(
        !path.exists(),
        "the socket is removed when the server stops"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Shows answer with what the backend returned (or the default).
fn answers_come_back(client: &AdminClient, s: &mut Stub) {
    let r = client.block_on(s.show_interfaces(pb::Empty {})).unwrap();
    assert_eq!(r.into_inner().interfaces[0].name, "memif0");
    let r = client
        .block_on(s.show_runtime(pb::ShowRuntimeRequest { per_worker: true }))
        .unwrap();
    assert_eq!(r.into_inner().tsc_hz, 1);
    // The default: no connections.
    let r = client.block_on(s.show_connections(pb::Empty {})).unwrap();
    assert!(r.into_inner().connections.is_empty());
}

/// Changes reach the backend (see [`the_backend_saw_typed_requests`]) and come back with its
/// answer.
fn changes_reach_the_backend(client: &AdminClient, s: &mut Stub) {
    client
        .block_on(s.add_route(pb::AddRouteRequest {
            prefix: "10.1.2.0/24".into(),
            via: vec![pb::NextHop {
                next_hop: "10.0.0.2".into(),
                interface: "memif0".into(),
            }],
            table: String::new(),
            next_table: String::new(),
        }))
        .unwrap();
    client
        .block_on(s.add_route(pb::AddRouteRequest {
            prefix: "2001:db8:2::/48".into(),
            via: vec![pb::NextHop {
                next_hop: "fe80::2".into(),
                interface: "memif0".into(),
            }],
            table: " red ".into(),
            next_table: String::new(),
        }))
        .unwrap();
    client
        .block_on(s.add_route(pb::AddRouteRequest {
            prefix: "0.0.0.0/0".into(),
            via: Vec::new(),
            table: "red".into(),
            next_table: " default ".into(),
        }))
        .unwrap();
    // Next hops and a next table: refused before the backend.
    let e = client
        .block_on(s.add_route(pb::AddRouteRequest {
            prefix: "0.0.0.0/0".into(),
            via: vec![pb::NextHop {
                next_hop: "10.0.0.2".into(),
                interface: "memif0".into(),
            }],
            table: "red".into(),
            next_table: "default".into(),
        }))
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("not both"), "{e:?}");
    client
        .block_on(s.add_table(pb::TableRequest {
            name: "blue".into(),
        }))
        .unwrap();
    client
        .block_on(s.add_address(pb::AddressRequest {
            interface: "memif0".into(),
            address: "2001:db8:1::1/64".into(),
        }))
        .unwrap();
    client
        .block_on(s.add_cross_connect(pb::AddCrossConnectRequest {
            a: "a".into(),
            b: "b".into(),
            peer_a: "10.0.0.2".into(),
            peer_b: "10.0.1.2".into(),
        }))
        .unwrap();
    let index = client
        .block_on(s.add_memif(pb::AddMemifRequest {
            name: "m".into(),
            socket: "@q".into(),
            role: "slave".into(),
            ..Default::default()
        }))
        .unwrap()
        .into_inner()
        .index;
    assert_eq!(index, 7);
}

/// The backend's refusals come back as their status; syntax errors never reach it.
fn refusals_come_back_as_statuses(client: &AdminClient, s: &mut Stub) {
    let refused = |r: Result<tonic::Response<pb::Empty>, Status>| r.unwrap_err();
    let e = refused(client.block_on(s.delete_route(pb::DeleteRouteRequest {
        prefix: "10.9.0.0/16".into(),
        table: String::new(),
    })));
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert_eq!(e.message(), "no route 10.9.0.0/16");
    let e = client
        .block_on(s.add_af_packet(pb::AddAfPacketRequest {
            name: "x".into(),
            host_interface: "eth0".into(),
            ..Default::default()
        }))
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists);
    // Syntax errors never reach the backend.
    let invalid = |e: Status| assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    invalid(refused(client.block_on(s.add_route(pb::AddRouteRequest {
        prefix: "10.1.2.0/40".into(),
        via: Vec::new(),
        table: String::new(),
        next_table: String::new(),
    }))));
    invalid(refused(client.block_on(s.add_route(pb::AddRouteRequest {
        prefix: "2001:db8::/129".into(),
        via: Vec::new(),
        table: String::new(),
        next_table: String::new(),
    }))));
    invalid(refused(client.block_on(s.add_address(
        pb::AddressRequest {
            interface: "memif0".into(),
            address: "2001:db8::zz/64".into(),
        },
    ))));
    invalid(refused(client.block_on(s.add_neighbor(
        pb::AddNeighborRequest {
            interface: "memif0".into(),
            ip: "10.0.0.2".into(),
            mac: "02:00".into(),
        },
    ))));
    invalid(refused(client.block_on(s.trace_add(pb::TraceAddRequest {
        node: "port-input".into(),
        count: 0,
    }))));
    invalid(refused(client.block_on(s.add_cross_connect(
        pb::AddCrossConnectRequest {
            a: "a".into(),
            b: "b".into(),
            peer_a: "10.0.0.2".into(),
            peer_b: String::new(),
        },
    ))));
    let e = client
        .block_on(s.add_memif(pb::AddMemifRequest {
            name: "m".into(),
            socket: "@q".into(),
            mode: "token-ring".into(),
            ..Default::default()
        }))
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(e.message(), "memif mode `token-ring`: ethernet or ip");
}

/// What the backend saw of [`changes_reach_the_backend`]: typed, defaults filled in.
fn the_backend_saw_typed_requests(backend: &Recorder) {
    let log = backend.0.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            "route 10.1.2.0/24 [(10.0.0.2, \"memif0\")]".to_string(),
            "route red 2001:db8:2::/48 [(fe80::2, \"memif0\")]".to_string(),
            "route Some(\"red\") 0.0.0.0/0 next-table default".to_string(),
            "table blue".to_string(),
            "address memif0 2001:db8:1::1/64".to_string(),
            "xc a b Some(L3Peers { peer_a: [10.0.0.2], peer_b: [10.0.1.2] })".to_string(),
            format!(
                "{:?}",
                MemifSpec {
                    name: "m".into(),
                    master: false,
                    socket: "@q".into(),
                    id: 0,
                    ip_mode: false,
                    ring_size: 1024,
                    buffer_size: 2048,
                    queues: 1,
                    secret: None,
                    mac: None,
                    mtu: 1500,
                }
            ),
        ]
    );
}

#[test]
fn a_request_over_the_limit_is_resource_exhausted_and_the_server_keeps_serving() {
    use quiver_admin_api::MAX_REQUEST_SIZE;
    let dir = scratch("limit");
    let path = dir.join("admin.sock");
    let backend = Arc::new(Recorder::default());
    let server = AdminServer::start(backend.clone(), &path).unwrap();
    let client = AdminClient::connect(&path).unwrap();
    let mut s = client.stub();
    let e = client
        .block_on(s.trace_add(pb::TraceAddRequest {
            node: "x".repeat(MAX_REQUEST_SIZE + 1),
            count: 1,
        }))
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("too large"), "{e:?}");
    assert!(
        backend.0.lock().unwrap().is_empty(),
        "the backend was called"
    );
    // The same connection still serves.
    let r = client.block_on(s.show_interfaces(pb::Empty {})).unwrap();
    assert_eq!(r.into_inner().interfaces.len(), 1);
    client.block_on(s.trace_clear(pb::Empty {})).unwrap();
    assert_eq!(*backend.0.lock().unwrap(), ["trace clear"]);
    drop(client);
    server.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A connection to the unix socket `path` made by a child process running as `uid`, `gid`
/// with supplementary `groups`: the kernel records those credentials for the peer
/// (`SO_PEERCRED`), and the child passes the connected socket back with `SCM_RIGHTS`. Needs
/// root. `Err` is the child's `connect` error.
fn connect_as(
    path: &std::path::Path,
    uid: u32,
    gid: u32,
    groups: &[u32],
) -> std::io::Result<std::os::unix::net::UnixStream> {
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;

    // SAFETY: a zeroed sockaddr_un is valid; the path fits (checked).
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    assert!(bytes.len() < addr.sun_path.len(), "socket path too long");
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let groups = groups.to_vec();
    let (parent, child) = std::os::unix::net::UnixStream::pair()?;
    let reply = child.as_raw_fd();
    let mut cmd = std::process::Command::new("/bin/true");
    // SAFETY: the closure runs in the forked child, and only makes system calls (no
    // allocation, no lock): drop to the credentials, connect, send the result back.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            let s = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            let connected = s >= 0
                && libc::connect(
                    s,
                    (&raw const addr).cast(),
                    std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
                ) == 0;
            let mut errno: i32 = if connected {
                0
            } else {
                *libc::__errno_location()
            };
            let mut iov = libc::iovec {
                iov_base: (&raw mut errno).cast(),
                iov_len: 4,
            };
            let mut cmsg = [0u64; 4];
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &raw mut iov;
            msg.msg_iovlen = 1;
            if connected {
                msg.msg_control = cmsg.as_mut_ptr().cast();
                msg.msg_controllen = libc::CMSG_SPACE(4) as _;
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(4) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), s);
            }
            if libc::sendmsg(reply, &msg, 0) != 4 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let status = {
        let _forking = FORKS.lock().unwrap_or_else(|e| e.into_inner());
        cmd.status()?
    };
    assert!(status.success(), "the child failed: {status}");
    drop(child);
    let mut errno: i32 = 0;
    let mut iov = libc::iovec {
        iov_base: (&raw mut errno).cast(),
        iov_len: 4,
    };
    let mut cmsg = [0u64; 4];
    // SAFETY: msghdr over the buffers above; the kernel fills at most their sizes.
    let fd = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cmsg) as _;
        let n = libc::recvmsg(parent.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
        assert_eq!(n, 4, "no answer from the child");
        let c = libc::CMSG_FIRSTHDR(&msg);
        (!c.is_null() && (*c).cmsg_type == libc::SCM_RIGHTS)
            .then(|| std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>()))
    };
    match fd {
        // SAFETY: the fd just received is ours alone.
        Some(fd) => Ok(unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) }),
        None => Err(std::io::Error::from_raw_os_error(errno)),
    }
}

/// A stub over `stream` (already connected), driven by `rt`.
fn stub_over(rt: &tokio::runtime::Runtime, stream: std::os::unix::net::UnixStream) -> Stub {
    use hyper_util::rt::TokioIo;
    stream.set_nonblocking(true).unwrap();
    let slot = Arc::new(std::sync::Mutex::new(Some(stream)));
    let channel = rt
        .block_on(
            tonic::transport::Endpoint::from_static("http://quiver.admin").connect_with_connector(
                tower::service_fn(move |_: tonic::transport::Uri| {
                    let s = slot.lock().unwrap().take();
                    async move {
                        let s = s.ok_or_else(|| std::io::Error::other("connected once"))?;
                        Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::from_std(s)?))
                    }
                }),
            ),
        )
        .unwrap();
    Stub::new(channel)
}

#[test]
fn the_admin_socket_stays_0660_and_refuses_a_peer_without_the_right_uid_or_gid() {
    use std::os::unix::fs::MetadataExt;
    let test = "the_admin_socket_stays_0660_and_refuses_a_peer_without_the_right_uid_or_gid";
    let needs = testkit::Needs {
        root: true,
        ..Default::default()
    };
    if !testkit::require(test, &needs) {
        return;
    }
    const NOBODY: u32 = 65534;
    let dir = scratch("peers");
    let path = dir.join("admin.sock");
    let backend = Arc::new(Recorder::default());
    let server = AdminServer::start(backend.clone(), &path).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mode = || std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    let group = std::fs::metadata(&path).unwrap().gid();
    assert_ne!(group, NOBODY);
    assert_eq!(mode(), SOCKET_MODE);

    // Root is served, and serving leaves the mode as it is.
    let mut root = stub_over(&rt, connect_as(&path, 0, 0, &[]).unwrap());
    rt.block_on(root.trace_clear(pb::Empty {})).unwrap();
    assert_eq!(mode(), SOCKET_MODE, "the mode changed while serving");
    // Another user, in no group of the socket's, cannot even connect: the mode refuses.
    let e = connect_as(&path, NOBODY, NOBODY, &[]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e:?}");

    // With the mode widened (an operator's chmod), the server still refuses that peer, every
    // call, before the backend sees it.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut nobody = stub_over(&rt, connect_as(&path, NOBODY, NOBODY, &[]).unwrap());
    let e = rt.block_on(nobody.trace_clear(pb::Empty {})).unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains(&format!("uid {NOBODY}")), "{e:?}");
    let e = rt
        .block_on(nobody.show_interfaces(pb::Empty {}))
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert_eq!(
        *backend.0.lock().unwrap(),
        ["trace clear"],
        "the backend was called"
    );
    // The socket's group is served, as primary or supplementary group.
    for (gid, groups) in [(group, vec![]), (NOBODY, vec![NOBODY, group])] {
        let mut member = stub_over(&rt, connect_as(&path, NOBODY, gid, &groups).unwrap());
        rt.block_on(member.trace_clear(pb::Empty {}))
            .unwrap_or_else(|e| panic!("gid {gid} groups {groups:?}: {e:?}"));
    }
    assert_eq!(backend.0.lock().unwrap().len(), 3);
    // A group given the socket after the start (an operator's chgrp) is served too.
    std::os::unix::fs::chown(&path, None, Some(NOBODY)).unwrap();
    let mut later = stub_over(&rt, connect_as(&path, 4242, 4242, &[NOBODY]).unwrap());
    rt.block_on(later.trace_clear(pb::Empty {})).unwrap();
    let mut other = stub_over(&rt, connect_as(&path, 4242, 4242, &[group]).unwrap());
    let e = rt.block_on(other.trace_clear(pb::Empty {})).unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert_eq!(backend.0.lock().unwrap().len(), 4);
    drop((later, other));
    // The clients' connections end with their runtime (the server waits for them).
    drop((root, nobody, rt));
    server.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}
