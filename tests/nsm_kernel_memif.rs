//! NSM end to end, KERNEL on the client's side and MEMIF toward the endpoint, dual stack: the
//! NSC's namespace gets an IPv4 and an IPv6 address on its veth, the NSE is the memif crate's
//! `responder` CNF (memif master inside its own namespace, answering ARP, ICMP echo, neighbour
//! solicitation and ICMPv6 echo), and `ping` and `ping -6` cross Quiver's L2 cross-connect
//! between the AF_PACKET port and the memif port — any EtherType goes.

use nsm_forwarder::testing::BlockingClient;
use nsm_proto::connection::{Connection, State};
use nsm_proto::connectioncontext::{ConnectionContext, IpContext};
use nsm_proto::networkservice::NetworkServiceRequest;
use testkit::{require, wait_for, Needs};

mod nsm_support;

use nsm_support::{
    kernel_mech, link_up, memif_endpoint, memif_example, nsc_connection, Killed, Netns, TempDir,
    TestForwarder, IP, PING,
};

fn ping(ns: &Netns, family: &str, to: &str) -> bool {
    std::process::Command::new(IP)
        .args([
            "netns", "exec", &ns.0, PING, family, "-n", "-c", "1", "-W", "1", to,
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn ipv4_and_ipv6_cross_between_a_kernel_client_and_a_memif_cnf() {
    if !require(
        "ipv4_and_ipv6_cross_between_a_kernel_client_and_a_memif_cnf",
        &Needs {
            root: true,
            tools: &[IP, PING],
            ..Needs::default()
        },
    ) {
        return;
    }
    let responder = memif_example("responder");
    let nsc = Netns::new("kmnsc");
    let nse = Netns::new("kmnse");
    let dir = TempDir::new("nsm-kmemif");
    let quiver = TestForwarder::start("");
    let fwd = quiver.fwd.clone();

    // The NSE's CNF: the responder, memif master on an abstract socket of its namespace.
    let socket = format!("@quiver-test-responder-{}", std::process::id());
    let cnf = Killed(Some(nse.spawn(
        &responder,
        &[
            "--role",
            "master",
            "--socket",
            &socket,
            "--ip",
            "10.79.0.2/24",
            "--ip6",
            "fd00:79::2",
            "--json",
        ],
    )));
    let endpoint = memif_endpoint(&dir.join("nse.sock"), &nse, &socket);
    let (listen, dp, server) = quiver.serve_in(&dir);
    let mut client = BlockingClient::connect(&listen).unwrap();
    let id = format!("kmemif-{}", std::process::id());
    let answer = client
        .request(NetworkServiceRequest {
            connection: Some(Connection {
                context: Some(ConnectionContext {
                    ip_context: Some(IpContext {
                        src_ip_addrs: vec!["10.79.0.1/24".into(), "fd00:79::1/64".into()],
                        dst_ip_addrs: vec!["10.79.0.2/24".into(), "fd00:79::2/64".into()],
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..nsc_connection(&id, "responder")
            }),
            mechanism_preferences: kernel_mech(&nsc.url(), "nsm0"),
        })
        .unwrap();
    assert_eq!(answer.state, State::Up as i32);
    let endpoint_port = format!("nsm-{id}-endpoint");
    wait_for("Quiver's memif to the responder to come up", 60, || {
        link_up(&fwd, &endpoint_port)
    });

    wait_for("ping through Quiver to the memif CNF", 30, || {
        ping(&nsc, "-4", "10.79.0.2")
    });
    wait_for("ping -6 through Quiver to the memif CNF", 30, || {
        ping(&nsc, "-6", "fd00:79::2")
    });

    client.close(answer).unwrap();
    assert_eq!(endpoint.log().closes.len(), 1);
    assert!(fwd.view().ports().is_empty());
    drop(client);
    drop(server);
    drop(dp);
    drop(fwd);
    quiver.stop();
    // The CNF saw IPv6 and answered it (its summary comes at SIGTERM).
    let pid = cnf.0.as_ref().expect("running").id();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = cnf.wait();
    let report: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .expect("the responder's JSON summary");
    assert!(
        report["ipv6_replies"].as_u64().unwrap_or(0) >= 2,
        "a neighbour advertisement and an echo reply at least: {report}"
    );
    assert!(
        report["echo_replies"].as_u64().unwrap_or(0) >= 1,
        "{report}"
    );
}
