use super::*;
use nsm_proto::connectioncontext::IpNeighbor;
use tonic::Code;

#[test]
fn interface_names() {
    assert!(ifname("x", "nsm-1").is_ok());
    assert!(ifname("x", "abcdefghijklmno").is_ok());
    for bad in ["", "abcdefghijklmnop", "a/b", "a b", ".", "a:1"] {
        assert_eq!(
            ifname("x", bad).unwrap_err().code(),
            Code::InvalidArgument,
            "{bad}"
        );
    }
}

#[test]
fn namespaces() {
    assert_eq!(
        netns_url("x", "file:///proc/self/ns/net").unwrap(),
        PathBuf::from("/proc/self/ns/net")
    );
    assert_eq!(
        netns_url("x", "file:///nonexistent/ns").unwrap_err().code(),
        Code::NotFound
    );
    for bad in [
        "",
        "/proc/self/ns/net",
        "file://relative",
        "inode://3/4",
        "http://x",
    ] {
        assert_eq!(
            netns_url("x", bad).unwrap_err().code(),
            Code::InvalidArgument,
            "{bad}"
        );
    }
}

#[test]
fn symlinks_into_quivers_own_proc_directory_are_refused() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = |p: &Path| format!("file://{}", p.display());
    let refused = |p: &Path| {
        let e = netns_url("x", &url(p)).unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{}: {e:?}", p.display());
    };
    std::fs::write(d.join("file"), b"").unwrap();
    // Straight to Quiver's namespace, by /proc/self and by its pid.
    symlink("/proc/self/ns/net", d.join("self")).unwrap();
    refused(&d.join("self"));
    symlink(
        format!("/proc/{}/ns/net", std::process::id()),
        d.join("pid"),
    )
    .unwrap();
    refused(&d.join("pid"));
    // To an fd Quiver holds (another connection's namespace, say).
    let held = std::fs::File::open("/proc/self/ns/net").unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&held);
    symlink(format!("/proc/self/fd/{fd}"), d.join("fd")).unwrap();
    refused(&d.join("fd"));
    // Through a chain, a relative link and a linked directory.
    symlink(d.join("self"), d.join("chain")).unwrap();
    refused(&d.join("chain"));
    std::fs::create_dir(d.join("sub")).unwrap();
    let up = "../".repeat(d.components().count());
    symlink(format!("{up}proc/self/ns/net"), d.join("sub/rel")).unwrap();
    refused(&d.join("sub/rel"));
    symlink("/proc", d.join("proc")).unwrap();
    refused(&d.join("proc/self/ns/net"));
    // Quiver's root re-entered from /proc: the symlink behind it is followed too.
    refused(
        &Path::new("/proc/self/root")
            .join(d.strip_prefix("/").unwrap())
            .join("self"),
    );
    // Another process's root is not a way in (`cat` waits on its stdin until dropped).
    let mut other = std::process::Command::new("cat")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let through = Path::new("/proc")
        .join(other.id().to_string())
        .join("root")
        .join(d.strip_prefix("/").unwrap())
        .join("file");
    let answer = netns_url("x", &url(&through));
    drop(other.stdin.take());
    other.wait().unwrap();
    assert_eq!(answer.unwrap_err().code(), Code::PermissionDenied);
    // A link to something that is not Quiver's is followed as before.
    symlink(d.join("file"), d.join("other")).unwrap();
    assert_eq!(
        netns_url("x", &url(&d.join("other"))).unwrap(),
        d.join("other")
    );
    // Quiver's namespace named plainly, and a passed fd, are as they say.
    assert!(netns_url("x", "file:///proc/thread-self/ns/net").is_ok());
    assert!(netns_url("x", &format!("file:///proc/self/fd/{fd}")).is_ok());
}

#[test]
fn callers_name_no_file_of_quivers_and_no_memif_socket_file() {
    use nsm_proto::connection::Mechanism;
    let with = |ty: &str, k: &str, v: &str| NetworkServiceRequest {
        mechanism_preferences: vec![Mechanism {
            r#type: ty.into(),
            parameters: [(k.to_string(), v.to_string())].into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let pid = std::process::id();
    for bad in [
        "file:///proc/self/fd/3".to_string(),
        "file:///proc/thread-self/fd/3".into(),
        format!("file:///proc/{pid}/fd/3"),
        "file:///proc/self/ns/../fd/3".into(),
        "file:///proc/self/root/etc/passwd".into(),
        "file:///proc/self/task/1/fd/3".into(),
    ] {
        let e = caller_mechanisms(&with("KERNEL", "inodeURL", &bad)).unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{bad}: {e:?}");
    }
    for good in [
        "file:///proc/self/ns/net",
        "file:///proc/1/fd/3",
        "file:///run/netns/nsc",
        "inode://4/4026532000",
    ] {
        assert!(
            caller_mechanisms(&with("KERNEL", "inodeURL", good)).is_ok(),
            "{good}"
        );
    }
    for bad in [
        "/run/quiver/admin.sock",
        "relative.sock",
        "file:///tmp/m.sock",
    ] {
        let e = caller_mechanisms(&with("MEMIF", "socketfile", bad)).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad}: {e:?}");
    }
    assert!(caller_mechanisms(&with("MEMIF", "socketfile", "@quiver/c1/memif.socket")).is_ok());
    // Only MEMIF's socketfile is a memif socket.
    assert!(caller_mechanisms(&with("KERNEL", "socketfile", "/x")).is_ok());
}

#[test]
fn vni_and_mtu() {
    assert_eq!(vni("x", "16777215").unwrap(), 16_777_215);
    for bad in ["16777216", "-1", "x", ""] {
        assert!(vni("x", bad).is_err(), "{bad}");
    }
    assert_eq!(mtu("x", Some(&"1500".to_string())).unwrap(), Some(1500));
    assert_eq!(mtu("x", None).unwrap(), None);
    assert!(mtu("x", Some(&"9".to_string())).is_err());
}

#[test]
fn context_splits_sides_and_refuses_bad_fields() {
    let good = IpContext {
        src_ip_addrs: vec!["172.16.0.2/31".into()],
        dst_ip_addrs: vec!["172.16.0.3/31".into()],
        src_routes: vec![Route {
            prefix: "10.0.0.0/8".into(),
            next_hop: "172.16.0.3".into(),
        }],
        ip_neighbors: vec![IpNeighbor {
            ip: "172.16.0.3".into(),
            hardware_address: "02:00:00:00:00:01".into(),
        }],
        ..Default::default()
    };
    let s = ip_context(&good).unwrap();
    let v4 = |a: &str| L3NextHops {
        v4: Some(a.parse().unwrap()),
        v6: None,
    };
    assert_eq!(s.client_hop(), v4("172.16.0.2"));
    assert_eq!(s.endpoint_hop(), v4("172.16.0.3"));
    assert_eq!(s.client.routes.len(), 1);
    assert_eq!(s.client.neighbors.len(), 1);
    assert!(s.endpoint.routes.is_empty());
    // Each side's peers are the other side's addresses, their prefix lengths kept.
    let prefix = |a: &str, len| IpPrefix {
        addr: a.parse::<IpAddr>().unwrap(),
        len,
    };
    assert_eq!(s.client.peers, vec![prefix("172.16.0.3", 31)]);
    assert_eq!(s.endpoint.peers, vec![prefix("172.16.0.2", 31)]);
    // The cross-connect's next hops: the first address of each family, whatever the order.
    let mut dual = good.clone();
    dual.dst_ip_addrs = vec![
        "fd00::3/64".into(),
        "172.16.0.3/31".into(),
        "fd00::4/64".into(),
    ];
    let s = ip_context(&dual).unwrap();
    let want = L3NextHops {
        v4: Some("172.16.0.3".parse().unwrap()),
        v6: Some("fd00::3".parse().unwrap()),
    };
    assert_eq!(s.endpoint_hop(), want);
    assert_eq!(s.client.peers.len(), 3);
    // IPv6 only: no IPv4 next hop; no address: none at all.
    let mut v6_only = good.clone();
    v6_only.src_ip_addrs = vec!["2001:db8::1/116".into()];
    v6_only.dst_ip_addrs = vec!["2001:db8::/116".into()];
    v6_only.src_routes.clear();
    v6_only.ip_neighbors.clear();
    let s = ip_context(&v6_only).unwrap();
    assert_eq!(
        s.endpoint_hop(),
        L3NextHops {
            v4: None,
            v6: Some("2001:db8::".parse().unwrap()),
        }
    );
    assert_eq!(s.client_hop().v6, Some("2001:db8::1".parse().unwrap()));
    let s = ip_context(&IpContext::default()).unwrap();
    assert_eq!(s.endpoint_hop(), L3NextHops::default());

    let mut bad = good.clone();
    bad.src_ip_addrs = vec!["172.16.0.2".into()];
    assert_eq!(ip_context(&bad).unwrap_err().code(), Code::InvalidArgument);
    let mut bad = good.clone();
    bad.dst_routes = vec![Route {
        prefix: "10.0.0.0/8".into(),
        next_hop: "nope".into(),
    }];
    assert_eq!(ip_context(&bad).unwrap_err().code(), Code::InvalidArgument);
    let mut bad = good;
    bad.ip_neighbors[0].hardware_address = "02:00".into();
    assert_eq!(ip_context(&bad).unwrap_err().code(), Code::InvalidArgument);
}

#[test]
fn payloads() {
    assert_eq!(payload("").unwrap(), Payload::Ethernet);
    assert_eq!(payload("IP").unwrap(), Payload::Ip);
    assert_eq!(payload("ip").unwrap_err().code(), Code::InvalidArgument);
}
