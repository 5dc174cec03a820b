//! Mechanism choice, offers and answers.
use super::*;
use std::net::{IpAddr, Ipv4Addr};
use tonic::Code;

fn mech(cls: &str, ty: &str, params: &[(&str, &str)]) -> Mechanism {
    Mechanism {
        cls: cls.into(),
        r#type: ty.into(),
        parameters: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

const NS: (&str, &str) = (INODE_URL, "file:///proc/self/ns/net");

#[test]
fn first_supported_preference_wins() {
    let prefs = [
        mech(REMOTE, VXLAN, &[(VNI, "7")]),
        mech(LOCAL, "WIREGUARD", &[]),
        mech(LOCAL, KERNEL, &[NS, (NAME, "nsc0")]),
        mech(LOCAL, MEMIF, &[NS]),
    ];
    let (m, c) = select(None, &prefs, None).unwrap();
    assert_eq!(m.r#type, KERNEL);
    assert_eq!(
        c,
        ClientMechanism::Kernel {
            netns: "/proc/self/ns/net".into(),
            ifname: Some("nsc0".into()),
            mtu: None
        }
    );
}

#[test]
fn current_mechanism_is_kept_on_refresh() {
    let current = mech(LOCAL, MEMIF, &[NS, (SOCKETFILE, "@x")]);
    let prefs = [mech(LOCAL, KERNEL, &[NS])];
    let (m, c) = select(Some(&current), &prefs, None).unwrap();
    assert_eq!(m, current);
    assert!(matches!(c, ClientMechanism::Memif { .. }));
}

#[test]
fn refusals() {
    let code = |cur: Option<Mechanism>, prefs: Vec<Mechanism>| {
        select(cur.as_ref(), &prefs, None).unwrap_err().code()
    };
    // Unknown type, even after a good one.
    assert_eq!(
        code(
            None,
            vec![mech(LOCAL, MEMIF, &[NS]), mech(LOCAL, "FOO", &[])]
        ),
        Code::InvalidArgument
    );
    // Nothing acceptable: known but unsupported, or a REMOTE kernel.
    assert_eq!(
        code(
            None,
            vec![mech(REMOTE, VXLAN, &[]), mech(REMOTE, KERNEL, &[NS])]
        ),
        Code::InvalidArgument
    );
    assert_eq!(code(None, vec![]), Code::InvalidArgument);
    // Malformed parameters.
    assert_eq!(
        code(None, vec![mech(REMOTE, VXLAN, &[(VNI, "16777216")])]),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            None,
            vec![mech(LOCAL, KERNEL, &[NS, (NAME, "0123456789abcdef")])]
        ),
        Code::InvalidArgument
    );
    // The chosen one's namespace must exist; a missing one is NotFound.
    assert_eq!(
        code(
            None,
            vec![mech(LOCAL, MEMIF, &[(INODE_URL, "file:///no/such/ns")])]
        ),
        Code::NotFound
    );
    assert_eq!(
        code(None, vec![mech(LOCAL, MEMIF, &[])]),
        Code::InvalidArgument
    );
}

#[test]
fn offers_put_the_clients_type_first() {
    let o = offers(KERNEL, "nse0", None, false);
    assert_eq!(o[0].r#type, KERNEL);
    assert_eq!(o[0].parameters[NAME], "nse0");
    assert_eq!(offers(MEMIF, "nse0", None, false)[0].r#type, MEMIF);
}

#[test]
fn vxlan_is_served_only_with_a_tunnel_end() {
    let offer = mech(
        REMOTE,
        VXLAN,
        &[(SRC_IP, "192.168.7.1"), (SRC_PORT, "4790")],
    );
    let (_, c) = select(None, std::slice::from_ref(&offer), Some(Remote::Vxlan)).unwrap();
    assert_eq!(
        c,
        ClientMechanism::Vxlan {
            remote: Ipv4Addr::new(192, 168, 7, 1).into(),
            remote_port: 4790,
            vni: None
        }
    );
    // Without a tunnel address (or with IP payload) it is not acceptable.
    assert_eq!(
        select(None, std::slice::from_ref(&offer), None)
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    // A refresh keeps the VNI chosen before; the port defaults to 4789.
    let current = mech(REMOTE, VXLAN, &[(SRC_IP, "192.168.7.1"), (VNI, "77")]);
    let (_, c) = select(Some(&current), &[], Some(Remote::Vxlan)).unwrap();
    assert!(matches!(
        c,
        ClientMechanism::Vxlan {
            vni: Some(77),
            remote_port: 4789,
            ..
        }
    ));
    // src_ip is required and must be unicast beyond the link (either family).
    for bad in [
        mech(REMOTE, VXLAN, &[]),
        mech(REMOTE, VXLAN, &[(SRC_IP, "224.0.0.1")]),
        mech(REMOTE, VXLAN, &[(SRC_IP, "fe80::1")]),
    ] {
        assert_eq!(
            select(None, &[bad], Some(Remote::Vxlan))
                .unwrap_err()
                .code(),
            Code::InvalidArgument
        );
    }
}

#[test]
fn offers_add_vxlan_last_or_alone() {
    let end = TunnelEnd {
        ip: Ipv4Addr::new(10, 9, 0, 1).into(),
        port: 4789,
        mtu: 1500,
        wg_public_key: None,
    };
    let o = offers(MEMIF, "nse0", Some(end.offer(Remote::Vxlan, 0)), false);
    let types: Vec<_> = o.iter().map(|m| m.r#type.as_str()).collect();
    assert_eq!(types, [MEMIF, KERNEL, VXLAN]);
    assert_eq!(o[2].cls, REMOTE);
    assert_eq!(o[2].parameters[SRC_IP], "10.9.0.1");
    let remote = offers(MEMIF, "nse0", Some(end.offer(Remote::Vxlan, 0)), true);
    assert_eq!(remote.len(), 1);
    assert_eq!(remote[0].r#type, VXLAN);
    assert!(offers(MEMIF, "nse0", None, true).is_empty());
}

#[test]
fn an_ipv6_tunnel_end_offers_vxlan_and_wireguard_over_ipv6() {
    let end = TunnelEnd {
        ip: "2001:db8:9::1".parse().unwrap(),
        port: 4789,
        mtu: 1500,
        wg_public_key: Some([7; 32]),
    };
    assert_eq!(end.remote_for(false), Some(Remote::Vxlan));
    assert_eq!(end.remote_for(true), Some(Remote::Wireguard));
    let keyless = TunnelEnd {
        wg_public_key: None,
        ..end
    };
    assert_eq!(keyless.remote_for(true), None);
    let o = end.offer(Remote::Vxlan, 0);
    assert_eq!(o.parameters[SRC_IP], "2001:db8:9::1");
    let o = end.offer(Remote::Wireguard, 51821);
    assert_eq!(
        (
            o.parameters[SRC_IP].as_str(),
            o.parameters[SRC_PORT].as_str()
        ),
        ("2001:db8:9::1", "51821")
    );
    // WireGuard's far end over IPv6, both ways; a link-local or multicast one is refused.
    let (_, c) = select(None, std::slice::from_ref(&o), Some(Remote::Wireguard)).unwrap();
    assert!(
        matches!(c, ClientMechanism::Wireguard { remote, .. } if remote == "2001:db8:9::1".parse::<IpAddr>().unwrap()),
        "{c:?}"
    );
    let answer = |ip: &str| {
        endpoint_side(
            Some(&mech(
                REMOTE,
                WIREGUARD,
                &[(DST_IP, ip), (DST_PUBLIC_KEY, KEY_A)],
            )),
            "x",
            Some(Remote::Wireguard),
        )
    };
    assert!(matches!(
        answer("2001:db8:9::2").unwrap(),
        EndpointMechanism::Wireguard { remote, remote_port: 51820, .. }
            if remote == "2001:db8:9::2".parse::<IpAddr>().unwrap()
    ));
    for bad in ["fe80::2", "ff02::1"] {
        assert_eq!(
            answer(bad).unwrap_err().code(),
            Code::FailedPrecondition,
            "{bad}"
        );
    }
    let m = mech(REMOTE, VXLAN, &[(DST_IP, "2001:db8:9::2"), (VNI, "5")]);
    assert_eq!(
        endpoint_side(Some(&m), "x", Some(Remote::Vxlan)).unwrap(),
        EndpointMechanism::Vxlan {
            remote: "2001:db8:9::2".parse().unwrap(),
            remote_port: 4789,
            vni: 5
        }
    );
    let multicast = mech(REMOTE, VXLAN, &[(DST_IP, "ff02::1"), (VNI, "5")]);
    assert_eq!(
        endpoint_side(Some(&multicast), "x", Some(Remote::Vxlan))
            .unwrap_err()
            .code(),
        Code::FailedPrecondition
    );
}

#[test]
fn vxlan_answers() {
    let m = mech(REMOTE, VXLAN, &[(DST_IP, "10.9.0.2"), (VNI, "5")]);
    assert_eq!(
        endpoint_side(Some(&m), "x", Some(Remote::Vxlan)).unwrap(),
        EndpointMechanism::Vxlan {
            remote: Ipv4Addr::new(10, 9, 0, 2).into(),
            remote_port: 4789,
            vni: 5
        }
    );
    // Not offered, no VNI, no dst_ip: the endpoint's fault.
    for (bad, offered) in [
        (m.clone(), None),
        (
            mech(REMOTE, VXLAN, &[(DST_IP, "10.9.0.2")]),
            Some(Remote::Vxlan),
        ),
        (mech(REMOTE, VXLAN, &[(VNI, "5")]), Some(Remote::Vxlan)),
        (m.clone(), Some(Remote::Wireguard)),
    ] {
        assert_eq!(
            endpoint_side(Some(&bad), "x", offered).unwrap_err().code(),
            Code::FailedPrecondition,
            "{bad:?}"
        );
    }
}

#[test]
fn endpoint_answers() {
    let m = mech(LOCAL, MEMIF, &[NS, (SOCKETFILE, "@nse/sock")]);
    assert_eq!(
        endpoint_side(Some(&m), "x", None).unwrap(),
        EndpointMechanism::Memif {
            netns: Some("/proc/self/ns/net".into()),
            socket: "@nse/sock".into(),
            mtu: None
        }
    );
    let k = mech(LOCAL, KERNEL, &[NS]);
    assert!(matches!(
        endpoint_side(Some(&k), "sugg", None).unwrap(),
        EndpointMechanism::Kernel { ifname, .. } if ifname == "sugg"
    ));
    for bad in [
        mech(LOCAL, MEMIF, &[NS]),
        mech(LOCAL, MEMIF, &[(SOCKETFILE, "@abstract-needs-netns")]),
        mech(REMOTE, VXLAN, &[]),
        mech(LOCAL, KERNEL, &[]),
    ] {
        assert_eq!(
            endpoint_side(Some(&bad), "x", None).unwrap_err().code(),
            Code::FailedPrecondition,
            "{bad:?}"
        );
    }
    assert!(endpoint_side(None, "x", None).is_err());
}

/// NSM's filesystem form of MEMIF: `inodeURL` names the socket file, and no `socketfile`.
#[test]
fn an_endpoint_may_name_its_memif_socket_file_by_inode_url() {
    let dir = std::env::temp_dir().join(format!("quiver-mech-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("memif.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let url = format!("file://{}", sock.display());
    let m = mech(LOCAL, MEMIF, &[(INODE_URL, &url)]);
    assert_eq!(
        endpoint_side(Some(&m), "x", None).unwrap(),
        EndpointMechanism::Memif {
            netns: None,
            socket: sock.display().to_string(),
            mtu: None
        }
    );
    // A file that is not a socket (a namespace, say) is refused.
    let plain = dir.join("plain");
    std::fs::write(&plain, b"").unwrap();
    let url = format!("file://{}", plain.display());
    let bad = endpoint_side(Some(&mech(LOCAL, MEMIF, &[(INODE_URL, &url)])), "x", None);
    let status = bad.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(status.message().contains("is not a socket"), "{status:?}");
    // A socket file that is not there is NotFound, named as a socket.
    let url = format!("file://{}", dir.join("gone.sock").display());
    let gone = endpoint_side(Some(&mech(LOCAL, MEMIF, &[(INODE_URL, &url)])), "x", None);
    let status = gone.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert!(status.message().contains("memif socket"), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

const KEY_A: &str = "YC5kWEPQ5pjNh3fhzRRLqNAQMvBPxoPwJcaX5Z7dbkM=";

#[test]
fn wireguard_is_served_for_ip_payload_with_a_key() {
    let end = TunnelEnd {
        ip: Ipv4Addr::new(10, 9, 0, 1).into(),
        port: 4789,
        mtu: 1500,
        wg_public_key: Some([7; 32]),
    };
    assert_eq!(end.remote_for(true), Some(Remote::Wireguard));
    assert_eq!(end.remote_for(false), Some(Remote::Vxlan));
    let keyless = TunnelEnd {
        wg_public_key: None,
        ..end
    };
    assert_eq!(keyless.remote_for(true), None);
    // The offer names Quiver's address, the connection's port and Quiver's key.
    let offer = end.offer(Remote::Wireguard, 51821);
    assert_eq!(
        (offer.cls.as_str(), offer.r#type.as_str()),
        (REMOTE, WIREGUARD)
    );
    assert_eq!(offer.parameters[SRC_IP], "10.9.0.1");
    assert_eq!(offer.parameters[SRC_PORT], "51821");
    assert_eq!(offer.parameters[SRC_PUBLIC_KEY], encode_key(&[7; 32]));
    // As the answering end: the requester's address, port and key; dst_port kept on refresh.
    let (_, c) = select(None, std::slice::from_ref(&offer), Some(Remote::Wireguard)).unwrap();
    assert_eq!(
        c,
        ClientMechanism::Wireguard {
            remote: Ipv4Addr::new(10, 9, 0, 1).into(),
            remote_port: 51821,
            remote_key: [7; 32],
            port: None
        }
    );
    let mut current = offer.clone();
    current.parameters.insert(DST_PORT.into(), "51900".into());
    let (_, c) = select(Some(&current), &[], Some(Remote::Wireguard)).unwrap();
    assert!(matches!(
        c,
        ClientMechanism::Wireguard {
            port: Some(51900),
            ..
        }
    ));
    // Not for ETHERNET payload (VXLAN is), nor without a tunnel.
    for remote in [Some(Remote::Vxlan), None] {
        let refused = select(None, std::slice::from_ref(&offer), remote).unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument);
    }
}

#[test]
fn wireguard_parameters_are_checked() {
    let wg = |params: &[(&str, &str)]| {
        select(
            None,
            &[mech(REMOTE, WIREGUARD, params)],
            Some(Remote::Wireguard),
        )
    };
    assert!(wg(&[(SRC_IP, "10.0.0.1"), (SRC_PUBLIC_KEY, KEY_A)]).is_ok());
    // Over IPv6 too (the far end's tunnel address is IPv6).
    assert!(wg(&[(SRC_IP, "fd00::1"), (SRC_PUBLIC_KEY, KEY_A)]).is_ok());
    for bad in [
        vec![(SRC_IP, "10.0.0.1")],
        vec![(SRC_IP, "10.0.0.1"), (SRC_PUBLIC_KEY, "not base64!")],
        vec![(SRC_IP, "10.0.0.1"), (SRC_PUBLIC_KEY, "AAAA")],
        vec![(SRC_IP, "fe80::1"), (SRC_PUBLIC_KEY, KEY_A)],
        vec![(SRC_PUBLIC_KEY, KEY_A)],
        vec![
            (SRC_IP, "10.0.0.1"),
            (SRC_PUBLIC_KEY, KEY_A),
            (SRC_PORT, "70000"),
        ],
    ] {
        assert_eq!(
            wg(&bad).unwrap_err().code(),
            Code::InvalidArgument,
            "{bad:?}"
        );
    }
}

#[test]
fn wireguard_answers() {
    let m = mech(
        REMOTE,
        WIREGUARD,
        &[
            (DST_IP, "10.9.0.2"),
            (DST_PORT, "51830"),
            (DST_PUBLIC_KEY, KEY_A),
        ],
    );
    let ep = endpoint_side(Some(&m), "x", Some(Remote::Wireguard)).unwrap();
    let EndpointMechanism::Wireguard {
        remote,
        remote_port,
        remote_key,
    } = ep
    else {
        panic!("{ep:?}");
    };
    assert_eq!(
        (remote, remote_port),
        (Ipv4Addr::new(10, 9, 0, 2).into(), 51830)
    );
    assert_eq!(encode_key(&remote_key), KEY_A);
    // Not offered, or without the answering end's key or address: the endpoint's fault.
    for (bad, offered) in [
        (m.clone(), Some(Remote::Vxlan)),
        (m.clone(), None),
        (
            mech(REMOTE, WIREGUARD, &[(DST_IP, "10.9.0.2")]),
            Some(Remote::Wireguard),
        ),
        (
            mech(REMOTE, WIREGUARD, &[(DST_PUBLIC_KEY, KEY_A)]),
            Some(Remote::Wireguard),
        ),
    ] {
        assert_eq!(
            endpoint_side(Some(&bad), "x", offered).unwrap_err().code(),
            Code::FailedPrecondition,
            "{bad:?}"
        );
    }
}
