//! NSM's VLAN mechanism against an 802.1Q peer Quiver did not write, on a veth "external
//! network": one end a host NIC in Quiver's namespace (as `ext_net1` in NSM's remotevlan
//! example, MTU 1450), the other end in a namespace holding the VLAN's station at 10.60.0.254:
//! the Linux kernel's own VLAN device (`ip link add link X name v100 type vlan id 100`, the
//! parent itself holding the untagged 10.60.0.253 of the same subnet) where the kernel has
//! 802.1Q (`CONFIG_VLAN_8021Q`), else scapy's `Dot1Q` (`nsm_support/vlan_station.py`,
//! answering ARP and ping tagged with VLAN 100 only, and reporting any frame that is not). The
//! device selector (`NSM_DEVICE_SELECTOR_FILE`'s form) maps `via: gw1` to the host NIC; the
//! endpoint answers VLAN 100 and the `via` label, as cmd-nse-remote-vlan does. The NSC's
//! KERNEL interface then reaches the station both ways (ping; with the kernel's device, TCP
//! both ways checked for content) and nothing untagged or of another VLAN; it gets the host
//! NIC's MTU; a second connection on the same VLAN, and one whose `via` the selector does not
//! know, are refused with nothing built; after Close the sub-interface is gone and the VLAN no
//! longer reaches the client.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use nsm_forwarder::device_selector::DeviceSelector;
use nsm_forwarder::testing::{BlockingClient, TestEndpoint};
use nsm_proto::connection::{Connection, Mechanism, State};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext};
use nsm_proto::networkservice::NetworkServiceRequest;
use testkit::wait_for;

mod nsm_support;

use nsm_support::{kernel_mech, nsc_connection, run, KernelTest, Killed, Netns, IP, PING};

const PYTHON: &str = testkit::SYSTEM_PYTHON;
/// scapy's 802.1Q station.
const STATION_PY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/nsm_support/vlan_station.py"
);
/// The host NIC's MTU, as NSM's remotevlan example sets `ext_net1`'s.
const HOST_MTU: u32 = 1450;

/// The external network's host end, in Quiver's (this process's) namespace: deleted on drop
/// (its peer with it).
struct HostNic(String);

impl Drop for HostNic {
    fn drop(&mut self) {
        let _ = std::process::Command::new(IP)
            .args(["link", "del", &self.0])
            .output();
    }
}

/// The VLAN's station on the external network.
enum Station {
    /// The kernel's VLAN device `v100` (and the parent's untagged address).
    Kernel,
    /// scapy's, on the far end `iface` with `mac`: its output lines as they come.
    Scapy {
        iface: String,
        _serve: Killed,
        lines: Receiver<String>,
    },
}

/// The station's address on VLAN 100, and the untagged one of the parent (kernel only).
const STATION: &str = "10.60.0.254";
const UNTAGGED: &str = "10.60.0.253";
/// The MAC scapy's station answers with.
const SCAPY_MAC: &str = "02:60:00:00:00:fe";

/// The external network: veth `qvl<pid>h` here (the host NIC, MTU [`HOST_MTU`]) and its peer
/// in `ext` with the VLAN 100 station at [`STATION`].
fn external_network(ext: &Netns) -> (HostNic, Station) {
    let pid = std::process::id() % 100_000;
    let (host, far) = (format!("qvl{pid}h"), format!("qvl{pid}x"));
    run(&[
        IP, "link", "add", &host, "type", "veth", "peer", "name", &far,
    ]);
    let nic = HostNic(host.clone());
    run(&[IP, "link", "set", &far, "netns", &ext.0]);
    let mtu = HOST_MTU.to_string();
    run(&[IP, "link", "set", &host, "mtu", &mtu, "up"]);
    let ns = |args: &[&str]| {
        let mut all = vec![IP, "-n", &ext.0];
        all.extend_from_slice(args);
        run(&all);
    };
    ns(&["link", "set", &far, "mtu", &mtu, "up"]);
    let kernel_vlan = Command::new(IP)
        .args(["-n", &ext.0, "link", "add", "link", &far, "name", "v100"])
        .args(["type", "vlan", "id", "100"])
        .output()
        .unwrap();
    if kernel_vlan.status.success() {
        ns(&["addr", "add", &format!("{UNTAGGED}/24"), "dev", &far]);
        ns(&["addr", "add", &format!("{STATION}/24"), "dev", "v100"]);
        ns(&["link", "set", "v100", "up"]);
        println!("station: the kernel's VLAN device");
        return (nic, Station::Kernel);
    }
    println!(
        "station: scapy's Dot1Q (this kernel has no VLAN devices: {})",
        String::from_utf8_lossy(&kernel_vlan.stderr).trim()
    );
    let mut serve = Killed(Some(
        Command::new(IP)
            .args(["netns", "exec", &ext.0, PYTHON, STATION_PY, "serve", &far])
            .args([STATION, SCAPY_MAC, "100"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    ));
    let out = serve.0.as_mut().and_then(|c| c.stdout.take()).unwrap();
    let (tx, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let ready = lines.recv_timeout(Duration::from_secs(30));
    assert_eq!(ready.as_deref(), Ok("ready"), "scapy's station listens");
    (
        nic,
        Station::Scapy {
            iface: far,
            _serve: serve,
            lines,
        },
    )
}

impl Station {
    /// Whether an echo request from the station on VLAN `vlan` to `to` is answered.
    fn ping(&self, ext: &Netns, vlan: u16, to: &str) -> bool {
        match self {
            Station::Kernel if vlan == 100 => ext.ping(to),
            Station::Kernel => panic!("the kernel station is on VLAN 100 only"),
            Station::Scapy { iface, .. } => {
                let out = run(&[
                    IP,
                    "netns",
                    "exec",
                    &ext.0,
                    PYTHON,
                    STATION_PY,
                    "ping",
                    iface,
                    STATION,
                    SCAPY_MAC,
                    &vlan.to_string(),
                    to,
                ]);
                String::from_utf8_lossy(&out.stdout).trim() == "reply"
            }
        }
    }

    /// What scapy's station saw that was not tagged with VLAN 100 (nothing for the kernel's).
    fn strays(&self) -> Vec<String> {
        match self {
            Station::Kernel => Vec::new(),
            Station::Scapy { lines, .. } => lines.try_iter().collect(),
        }
    }
}

/// cmd-forwarder-vpp's device selector file, for `host`.
fn selector(host: &str) -> DeviceSelector {
    DeviceSelector::parse(&format!(
        "---\ninterfaces:\n  - name: {host}\n    matches:\n      - labelSelector:\n          - via: gw1\n"
    ))
    .unwrap()
}

/// The NSC's Request: connection `id` labelled `via`, its interface `ifname` in `nsc` with
/// `ip`/24 (the address the remote-vlan endpoint's IPAM would give it).
fn request(id: &str, nsc: &Netns, ifname: &str, via: &str, ip: &str) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(Connection {
            labels: HashMap::from([("via".to_string(), via.to_string())]),
            context: Some(ConnectionContext {
                ip_context: Some(IpContext {
                    src_ip_addrs: vec![format!("{ip}/24")],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..nsc_connection(id, "kernel2rvlan-internal")
        }),
        mechanism_preferences: kernel_mech(&nsc.url(), ifname),
    }
}

/// `ip -d link show` of `dev` in `ns`.
fn link_details(ns: &Netns, dev: &str) -> String {
    String::from_utf8_lossy(&run(&[IP, "-n", &ns.0, "-d", "link", "show", dev]).stdout).into_owned()
}

#[test]
fn a_kernel_client_reaches_an_8021q_station_on_the_external_network() {
    let Some(KernelTest {
        nsc,
        nse: ext,
        dir,
        quiver,
    }) = KernelTest::start(
        "a_kernel_client_reaches_an_8021q_station_on_the_external_network",
        &[IP, PING, PYTHON],
        ["vnsc", "vext", "nsm-vlan"],
    )
    else {
        return;
    };
    let (nic, station) = external_network(&ext);
    let fwd = quiver.fwd.clone();
    // The endpoint answers as cmd-nse-remote-vlan: VLAN 100, the NSC's labels kept (via=gw1).
    let endpoint = TestEndpoint::start(
        &dir.join("nse.sock"),
        "nse",
        vec![Mechanism {
            cls: "REMOTE".into(),
            r#type: "VLAN".into(),
            parameters: HashMap::from([("vlan-id".to_string(), "100".to_string())]),
        }],
    )
    .unwrap();
    let listen = format!("unix://{}", dir.join("quiver.sock").display());
    let dp = quiver.dataplane();
    let server = quiver.serve_with(
        dp.clone(),
        "quiver",
        &listen,
        None,
        format!("unix://{}", dir.join("nse.sock").display()),
        |c| c.device_selector = selector(&nic.0),
    );
    let mut client = BlockingClient::connect(&listen).unwrap();

    let id = format!("vlan-{}", std::process::id());
    let answer = client
        .request(request(&id, &nsc, "nsm0", "gw1", "10.60.0.1"))
        .unwrap();
    assert_eq!(answer.state, State::Up as i32);
    // Quiver offered VLAN (after the local mechanisms) and the endpoint took it.
    let offered = &endpoint.log().requests[0].mechanism_preferences;
    assert!(
        offered
            .iter()
            .any(|m| m.r#type == "VLAN" && m.cls == "REMOTE" && m.parameters.is_empty()),
        "{offered:?}"
    );
    // The MTU is the host NIC's, in the answer and on the NSC's interface.
    assert_eq!(answer.context.as_ref().map(|c| c.mtu), Some(HOST_MTU));
    let d = link_details(&nsc, "nsm0");
    assert!(d.contains(&format!("mtu {HOST_MTU}")), "{d}");
    // Quiver's port on the host NIC, and the connection's sub-interface of it.
    let view = fwd.view();
    let host_port = format!("host-{}", nic.0);
    assert!(
        view.port(&host_port).is_some(),
        "{}",
        view.format_interfaces()
    );
    let sub = format!("nsm-{id}-endpoint");
    let has_sub =
        |v: &quiver::control::owner::ForwarderView| v.interfaces.iter().any(|i| i.name == sub);
    assert!(has_sub(&view), "{:?}", view.interfaces);
    drop(view);

    wait_for("a ping from the NSC to the VLAN 100 station", 30, || {
        nsc.ping(STATION)
    });
    let mut back = false;
    wait_for("the station's ping back to the NSC", 30, || {
        back = station.ping(&ext, 100, "10.60.0.1");
        back
    });
    match &station {
        Station::Kernel => {
            // Tagged, so never the parent's untagged address of the same subnet.
            assert!(!nsc.ping(UNTAGGED), "the untagged address is not reached");
            for (from, to, addr, port) in
                [(&nsc, &ext, STATION, 5071), (&ext, &nsc, "10.60.0.1", 5072)]
            {
                let (received, sent) = testkit::tcp::transfer(&from.0, &to.0, addr, port, 4);
                assert_eq!(received, sent, "every byte arrived, in order (to {addr})");
                assert!(sent.starts_with("4194304 "), "{sent}");
            }
        }
        Station::Scapy { .. } => {
            // Another VLAN does not reach the NSC; the NSC's frames all came tagged 100.
            assert!(
                !station.ping(&ext, 200, "10.60.0.1"),
                "VLAN 200 is not the NSC's"
            );
        }
    }
    let strays = station.strays();
    assert!(
        strays.is_empty(),
        "frames not tagged with VLAN 100 from Quiver: {strays:?}"
    );
    let untagged = fwd.view().port(&host_port).map(|p| p.port.stats());
    assert!(untagged.is_some_and(|s| s.tx_packets > 0 && s.rx_packets > 0));

    // The same VLAN of the same host NIC for a second connection: refused, nothing of it
    // left, the first one untouched.
    let nsc2 = Netns::new("vnsc2");
    let id2 = format!("vlan2-{}", std::process::id());
    let e = client
        .request(request(&id2, &nsc2, "nsm0", "gw1", "10.60.0.2"))
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists, "{e:?}");
    assert!(e.message().contains("VLAN 100"), "{}", e.message());
    assert!(!nsc2.has_link("nsm0"), "nothing built for it");
    assert!(fwd.view().port(&format!("nsm-{id2}-client")).is_none());
    assert!(nsc.ping(STATION), "the first connection still carries");
    // A `via` the selector does not know: refused before anything is built.
    let id3 = format!("vlan3-{}", std::process::id());
    let e = client
        .request(request(&id3, &nsc2, "nsm0", "gw9", "10.60.0.3"))
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("gw9"), "{}", e.message());
    assert!(!nsc2.has_link("nsm0"));
    let closed: Vec<String> = endpoint.log().closes.iter().map(|c| c.id.clone()).collect();
    assert_eq!(
        closed.len(),
        2,
        "both refused connections closed at the endpoint: {closed:?}"
    );

    // A refresh keeps what is built.
    let again = client
        .request(NetworkServiceRequest {
            connection: Some(answer.clone()),
            ..request(&id, &nsc, "nsm0", "gw1", "10.60.0.1")
        })
        .unwrap();
    assert_eq!(again.state, State::Up as i32);
    assert!(nsc.ping(STATION), "a refresh keeps the VLAN carrying");

    client.close(again).unwrap();
    assert!(!nsc.has_link("nsm0"), "gone at Close");
    let view = fwd.view();
    assert!(
        !has_sub(&view),
        "the sub-interface went with the connection: {:?}",
        view.interfaces
    );
    assert!(view.port(&host_port).is_some(), "the host NIC's port stays");
    drop(view);
    assert!(
        !station.ping(&ext, 100, "10.60.0.1"),
        "the VLAN no longer reaches the client"
    );

    drop(client);
    drop(server);
    drop(dp);
    drop(fwd);
    drop(endpoint);
    quiver.stop();
    drop(station);
    drop(nic);
}
