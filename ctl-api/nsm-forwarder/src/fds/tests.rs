//! The fds of NSM connections: both sides' resolution, Quiver's offers, registry sockets.

use std::collections::HashMap;
use std::os::fd::OwnedFd;

use grpc_unix::{FdSender, InodeKey, ReceivedFds};
use nsm_proto::connection::{Connection, Mechanism};
use nsm_proto::networkservice::NetworkServiceRequest;

use super::held::HeldFds;
use super::offer::pass_offered_files;
use super::registry::passed_socket_url;

fn request(id: &str, url: &str) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(Connection {
            id: id.into(),
            ..Default::default()
        }),
        mechanism_preferences: vec![Mechanism {
            cls: "LOCAL".into(),
            r#type: "KERNEL".into(),
            parameters: HashMap::from([
                ("inodeURL".to_string(), url.to_string()),
                ("name".to_string(), "nsm0".to_string()),
            ]),
        }],
    }
}

fn passed() -> (ReceivedFds, InodeKey) {
    let fd: OwnedFd = std::fs::File::open("/proc/self/ns/net").unwrap().into();
    let key = InodeKey::of(&fd).unwrap();
    let r = ReceivedFds::default();
    r.insert(vec![fd]);
    (r, key)
}

#[test]
fn a_passed_fd_resolves_to_its_proc_path_and_back() {
    let (received, key) = passed();
    let held = HeldFds::default();
    let mut req = request("c1", &key.to_string());
    let resolved = held.resolve(Some(&received), &mut req).unwrap();
    let path = req.mechanism_preferences[0].parameters["inodeURL"].clone();
    assert!(path.starts_with("file:///proc/self/fd/"), "{path}");
    let on_disk = std::fs::File::open(path.strip_prefix("file://").unwrap()).unwrap();
    assert_eq!(InodeKey::of(&on_disk).unwrap(), key);
    assert!(received.is_empty(), "moved to the connection");
    assert_eq!(held.len(), 1);

    // A refresh without sending it again finds the same fd, the same path.
    let mut again = request("c1", &key.to_string());
    held.resolve(None, &mut again).unwrap();
    assert_eq!(again.mechanism_preferences[0].parameters["inodeURL"], path);

    let mut answer = Connection {
        mechanism: Some(req.mechanism_preferences[0].clone()),
        ..Default::default()
    };
    resolved.restore(&mut answer);
    assert_eq!(
        answer.mechanism.unwrap().parameters["inodeURL"],
        key.to_string()
    );
}

#[test]
fn unknown_or_malformed_inode_urls_are_invalid_and_change_nothing() {
    let (received, key) = passed();
    let held = HeldFds::default();
    let other = InodeKey {
        dev: key.dev,
        ino: key.ino + 1,
    };
    for url in [other.to_string(), "inode://x/1".to_string()] {
        let mut req = request("c1", &url);
        let before = req.clone();
        let e = held.resolve(Some(&received), &mut req).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{url}");
        assert_eq!(req, before);
    }
    // Another connection's fd is not this one's.
    let mut req = request("c1", &key.to_string());
    held.resolve(Some(&received), &mut req).unwrap();
    let mut req = request("c2", &key.to_string());
    let e = held.resolve(None, &mut req).unwrap_err();
    assert!(e
        .message()
        .contains("no file descriptor was passed for inode://"));
    assert_eq!(received.len(), 0);
    assert_eq!(held.len(), 1);
}

fn answer(params: &[(&str, &str)]) -> Mechanism {
    Mechanism {
        cls: "LOCAL".into(),
        r#type: "KERNEL".into(),
        parameters: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// How many of our fds refer to `key`.
fn open_fds_of(key: InodeKey) -> usize {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
        .filter(|m| m.dev() == key.dev && m.ino() == key.ino)
        .count()
}

/// A file of its own (other tests run beside: count only ours), passed on `r`.
fn passed_file(dir: &tempfile::TempDir, r: &ReceivedFds) -> InodeKey {
    let path = dir.path().join(format!("f{}", r.len()));
    std::fs::write(&path, b"").unwrap();
    let fd: OwnedFd = std::fs::File::open(&path).unwrap().into();
    let key = InodeKey::of(&fd).unwrap();
    r.insert(vec![fd]);
    key
}

#[test]
fn an_answer_is_read_with_the_fds_passed_with_it_and_kept_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let channel = ReceivedFds::default();
    let key = passed_file(&dir, &channel);
    let held = HeldFds::default();
    let written = answer(&[("inodeURL", &key.to_string()), ("name", "nse0")]);
    let (read, resolved) = held.resolve_answer("c1", &channel, Some(&written)).unwrap();
    let read = read.unwrap();
    let path = read.parameters["inodeURL"].clone();
    assert!(path.starts_with("file:///proc/self/fd/"), "{path}");
    assert_eq!(read.parameters["name"], "nse0");
    let on_disk = std::fs::File::open(path.strip_prefix("file://").unwrap()).unwrap();
    assert_eq!(InodeKey::of(&on_disk).unwrap(), key);
    drop(on_disk);
    assert_eq!(written.parameters["inodeURL"], key.to_string(), "untouched");
    assert!(channel.is_empty(), "moved to the connection");
    held.keep_only("c1", &resolved);
    assert_eq!(open_fds_of(key), 1);

    // A refresh: the same fd, the same path; a copy passed again is closed.
    passed_file_again(&channel, &path);
    let (again, resolved) = held.resolve_answer("c1", &channel, Some(&written)).unwrap();
    assert_eq!(again.unwrap().parameters["inodeURL"], path);
    assert!(channel.is_empty());
    held.keep_only("c1", &resolved);
    assert_eq!(open_fds_of(key), 1);

    // Another connection naming the same file, its copy gone with the first's answer:
    // a duplicate of the one held from the same channel; not from another channel.
    let other = ReceivedFds::default();
    let e = held
        .resolve_answer("c3", &other, Some(&written))
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    let (shared, _) = held.resolve_answer("c2", &channel, Some(&written)).unwrap();
    assert_ne!(shared.unwrap().parameters["inodeURL"], path);
    assert_eq!(open_fds_of(key), 2);

    held.release("c1");
    held.release("c2");
    assert!(held.is_empty());
    assert_eq!(open_fds_of(key), 0, "closed with the connections");
}

/// Passes the file behind `path` (a `file:///proc/self/fd/<n>`) on `r` again.
fn passed_file_again(r: &ReceivedFds, path: &str) {
    let fd: OwnedFd = std::fs::File::open(path.strip_prefix("file://").unwrap())
        .unwrap()
        .into();
    r.insert(vec![fd]);
    assert_eq!(r.len(), 1);
}

#[test]
fn an_answer_naming_a_file_not_passed_is_refused_and_holds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let channel = ReceivedFds::default();
    let key = passed_file(&dir, &channel);
    let held = HeldFds::default();
    let other = InodeKey {
        dev: key.dev,
        ino: key.ino ^ 0x5a5a,
    };
    let e = held
        .resolve_answer(
            "c1",
            &channel,
            Some(&answer(&[
                ("inodeURL", &key.to_string()),
                ("socketfile", &other.to_string()),
            ])),
        )
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert!(
        e.message().contains(&format!(
            "the endpoint answered socketfile = {other} but passed no file descriptor"
        )),
        "{e:?}"
    );
    let e = held
        .resolve_answer(
            "c1",
            &channel,
            Some(&answer(&[("inodeURL", "inode://1/x")])),
        )
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert!(e.message().contains("inodeURL"), "{e:?}");
    assert!(held.is_empty());
    assert_eq!(channel.keys(), vec![key], "nothing taken");
    // No inode:// URL: read as it is.
    let plain = answer(&[("inodeURL", "file:///proc/self/ns/net")]);
    let (read, _) = held.resolve_answer("c1", &channel, Some(&plain)).unwrap();
    assert_eq!(read.unwrap(), plain);
    assert!(held.is_empty());
}

#[test]
fn quivers_own_file_urls_go_by_fd_and_the_endpoints_are_left_alone() {
    let fds = FdSender::default();
    let mut req = request("c1", "file:///proc/self/ns/net");
    let endpoints = answer(&[("inodeURL", "file:///proc/self/ns/net")]);
    req.connection.as_mut().unwrap().mechanism = Some(endpoints.clone());
    pass_offered_files(&fds, &mut req).unwrap();
    let want = InodeKey::of(std::fs::File::open("/proc/self/ns/net").unwrap()).unwrap();
    assert_eq!(
        req.mechanism_preferences[0].parameters["inodeURL"],
        want.to_string()
    );
    assert_eq!(fds.pending(), 1);
    assert_eq!(req.connection.unwrap().mechanism.unwrap(), endpoints);
    let mut missing = request("c1", "file:///nonexistent/quiver-ns");
    let e = pass_offered_files(&fds, &mut missing).unwrap_err();
    assert_eq!(e.code(), tonic::Code::Internal);
}

#[test]
fn a_socket_the_registry_passes_is_dialed_by_its_fd_while_its_file_exists() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nse.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    // As nsmgr passes it: an O_PATH fd of the socket file.
    let fd = nix::fcntl::open(
        &sock,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .unwrap();
    let key = InodeKey::of(&fd).unwrap();
    let received = ReceivedFds::default();
    received.insert(vec![fd]);
    assert_eq!(
        passed_socket_url("unix:///x.sock", &received).unwrap(),
        "unix:///x.sock"
    );
    let url = passed_socket_url(&key.to_string(), &received).unwrap();
    let path = url.strip_prefix("unix://").unwrap();
    assert!(path.starts_with("/proc/self/fd/"), "{url}");
    std::os::unix::net::UnixStream::connect(path).expect("dials the passed socket");
    assert!(received.is_empty());
    assert_eq!(
        passed_socket_url(&key.to_string(), &received).unwrap(),
        url,
        "held: the same url again without a new fd"
    );
    let gone = InodeKey {
        dev: key.dev,
        ino: key.ino ^ 0x5a5a,
    };
    let e = passed_socket_url(&gone.to_string(), &received).unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert!(e.message().contains("passed no file descriptor"), "{e:?}");
    // Its file removed: closed at the next lookup.
    std::fs::remove_file(&sock).unwrap();
    assert_eq!(open_fds_of(key), 1);
    let _ = passed_socket_url(&gone.to_string(), &received);
    assert_eq!(open_fds_of(key), 0);
}

#[test]
fn file_urls_pass_through() {
    let held = HeldFds::default();
    let mut req = request("c1", "file:///proc/self/ns/net");
    let before = req.clone();
    held.resolve(None, &mut req).unwrap();
    assert_eq!(req, before);
    assert!(held.is_empty());
}
