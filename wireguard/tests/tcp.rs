//! TCP through the tunnel, checked for content, with rekeys while it flows: our side carries the
//! kernel's own traffic between a TUN device in our namespace and `wireguard::Device` (as a
//! WireGuard implementation on TUN would), the peer is wireguard-go or boringtun. Each way: our
//! namespace's TCP client to the peer's (we initiate the handshake, on the first SYN), and the
//! peer's client to ours (it initiates). We force two rekeys mid-transfer; the transfer must end
//! with every byte as sent. Needs what tests/interop.rs needs, and python3.

mod common;

use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::peers::Peer;
use common::setup::{dotted, setup};
use common::tun::Tun;
use common::{say, Ours, Step, OUR_TUNNEL, PEER_TUNNEL};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{setsockopt, sockopt};
use wireguard::DeviceError;

const BYTES: usize = 12 << 20;
const PORT: &str = "5201";
/// Our tunnel interface's MTU, as the peers' default (1420).
const MTU: &str = "1420";
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/tcp_check.py");

/// Which namespace runs the TCP client.
#[derive(Clone, Copy, PartialEq)]
enum Client {
    Ours,
    Peer,
}

fn in_ns(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(args);
    c
}

fn listening(ns: &str) -> bool {
    in_ns(ns, &["ss", "-ltnH", &format!("sport = :{PORT}")])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty())
}

/// Moves packets between `tun` and the tunnel until `client` exits and no handshake is pending; forces a rekey after 1 MiB
/// and after 4 MiB have passed (either way). A forced rekey waits until no handshake is pending
/// and the last initiation is 25 ms old: a responder drops initiations that come faster than one
/// per 20 ms (wireguard-go's flood limit), and a second initiation while the first is in flight
/// would replace it, so its answer would be discarded.
/// Returns whether our side initiated the first session.
fn forward(ours: &mut Ours, tun: &mut Tun, client: &mut Child, secs: u64) -> bool {
    let mut first_initiator = None;
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut pending: Vec<Vec<u8>> = Vec::new();
    let mut moved = 0usize;
    let mut rekeys_at = vec![4 << 20, 1 << 20];
    let mut last_initiation = Instant::now();
    let mut buf = [0u8; 2048];
    // Until the client is done, and every rekey its bytes made due is done too.
    while !matches!(client.try_wait(), Ok(Some(_)))
        || ours.dev.peer(ours.peer).timers.handshake_pending()
        || rekeys_at.last().is_some_and(|at| moved >= *at)
    {
        assert!(Instant::now() < deadline, "timed out moving the transfer");
        let mut fds = [
            PollFd::new(tun.fd(), PollFlags::POLLIN),
            PollFd::new(ours.sock.as_fd(), PollFlags::POLLIN),
        ];
        poll(&mut fds, PollTimeout::from(10u8)).expect("poll");
        // Into the tunnel.
        while let Some(n) = tun.read(&mut buf) {
            let packet = buf[..n].to_vec();
            // Cryptokey routing: only what the peer's allowed IPs hold goes to it (not the
            // kernel's IPv6 chatter on a new interface).
            if ours.dev.peer_for_packet(&packet) != Some(ours.peer) {
                continue;
            }
            match ours.try_send_ip(&packet) {
                Ok(()) => moved += n,
                Err(DeviceError::NoSession | DeviceError::SessionExpired) => {
                    pending.push(packet);
                    if !ours.dev.peer(ours.peer).timers.handshake_pending() {
                        ours.initiate();
                        last_initiation = Instant::now();
                    }
                }
                Err(e) => panic!("send: {e}"),
            }
        }
        // Out of it.
        for _ in 0..512 {
            match ours.step_full() {
                Step::Idle => break,
                Step::Handled => {}
                Step::Data(p) => {
                    moved += p.len();
                    tun.write(&p);
                }
            }
        }
        let handshake_pending = ours.dev.peer(ours.peer).timers.handshake_pending();
        if rekeys_at.last().is_some_and(|at| moved >= *at)
            && !handshake_pending
            && last_initiation.elapsed() >= Duration::from_millis(25)
        {
            rekeys_at.pop();
            say(&format!("forcing a rekey after {moved} bytes"));
            ours.initiate();
            last_initiation = Instant::now();
        } else if handshake_pending && last_initiation.elapsed() >= Duration::from_millis(200) {
            // The initiation or its response was lost (the flood fills the UDP socket's buffer);
            // the device would retry after REKEY_TIMEOUT, longer than the whole transfer.
            say(&format!(
                "no handshake response in 200 ms; initiating again after {moved} bytes"
            ));
            ours.initiate();
            last_initiation = Instant::now();
        }
        if let Some(session) = ours.dev.peer(ours.peer).current() {
            first_initiator.get_or_insert(session.keys.initiator);
        }
        if ours.session_index().is_some() {
            for p in pending.drain(..) {
                ours.try_send_ip(&p).expect("send after the handshake");
            }
        }
    }
    assert!(
        rekeys_at.is_empty(),
        "only {moved} bytes passed; handshake pending: {}; {:?}",
        ours.dev.peer(ours.peer).timers.handshake_pending(),
        ours.dev.peer(ours.peer).stats
    );
    first_initiator.expect("a session")
}

/// TCP segments retransmitted in namespace `ns` so far.
fn retransmitted(ns: &str) -> u64 {
    let snmp = common::run(&mut in_ns(ns, &["cat", "/proc/net/snmp"]));
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap_or(""), tcp.next().unwrap_or(""));
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "RetransSegs")
        .and_then(|(_, v)| v.parse().ok())
        .expect("RetransSegs in /proc/net/snmp")
}

fn transfer(test: &str, peer: Peer, client: Client) {
    if !testkit::require(
        test,
        &testkit::Needs {
            tools: &["/usr/bin/python3", "/usr/bin/ss"],
            ..common::setup::NEEDS
        },
    ) {
        return;
    }
    let Some(mut s) = setup(test, peer) else {
        return;
    };
    let our_if = format!("wgt{}", &s.topo.ifname[3..]);
    let mut tun = Tun::create_in(&s.topo.our_ns, &our_if);
    let ours_ns = s.topo.our_ns.clone();
    let peer_ns = s.topo.peer_ns.clone();
    let addr = format!("{}/24", dotted(OUR_TUNNEL));
    common::run(&mut in_ns(
        &ours_ns,
        &["ip", "addr", "add", &addr, "dev", &our_if],
    ));
    common::run(&mut in_ns(
        &ours_ns,
        &["ip", "link", "set", &our_if, "mtu", MTU, "up"],
    ));
    s.ours.sock.set_nonblocking(true).expect("non-blocking");
    // Room for the flood, so a handshake message is seldom dropped behind it.
    setsockopt(&s.ours.sock, sockopt::RcvBufForce, &(8 << 20)).expect("rcvbuf");

    let (server_ns, server_addr, client_ns) = match client {
        Client::Ours => (&peer_ns, PEER_TUNNEL, &ours_ns),
        Client::Peer => (&ours_ns, OUR_TUNNEL, &peer_ns),
    };
    let server_ip = Ipv4Addr::from(server_addr).to_string();
    let log = format!("/tmp/wg-interop-{}.tcp-server", s.topo.ifname);
    let mut server = in_ns(
        server_ns,
        &["/usr/bin/python3", SCRIPT, "server", &server_ip, PORT],
    )
    .stdout(std::fs::File::create(&log).expect("log"))
    .stderr(Stdio::inherit())
    .spawn()
    .expect("server");
    testkit::wait_for("the TCP server to listen", 10, || listening(server_ns));
    let mut tcp_client = in_ns(
        client_ns,
        &[
            "/usr/bin/python3",
            SCRIPT,
            "client",
            &server_ip,
            PORT,
            &BYTES.to_string(),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("client");
    let retrans_before = retransmitted(client_ns);
    let we_initiated = forward(&mut s.ours, &mut tun, &mut tcp_client, 60);
    let retrans = retransmitted(client_ns) - retrans_before;
    assert_eq!(we_initiated, client == Client::Ours, "who initiated");
    let out = tcp_client.wait_with_output().expect("client output");
    let _ = testkit::interrupt(&mut server, Duration::from_secs(2));
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "TCP transfer failed: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats = s.ours.dev.peer(s.ours.peer).stats;
    assert!(stats.rekeys >= 2, "{stats:?}");
    assert!(s.ours.refused.is_empty(), "refused: {:?}", s.ours.refused);
    let who = match client {
        Client::Ours => "our client to its server",
        Client::Peer => "its client to our server",
    };
    say(&format!(
        "PASS {test}: TCP {who} through {}: {text}; {} handshakes, {} rekeys, {retrans} TCP retransmissions",
        peer.name(),
        stats.handshakes,
        stats.rekeys
    ));
}

#[test]
fn wireguard_go_tcp_we_initiate() {
    transfer(
        "wireguard_go_tcp_we_initiate",
        Peer::WireguardGo,
        Client::Ours,
    );
}

#[test]
fn wireguard_go_tcp_it_initiates() {
    transfer(
        "wireguard_go_tcp_it_initiates",
        Peer::WireguardGo,
        Client::Peer,
    );
}

#[test]
fn boringtun_tcp_we_initiate() {
    transfer("boringtun_tcp_we_initiate", Peer::Boringtun, Client::Ours);
}

#[test]
fn boringtun_tcp_it_initiates() {
    transfer("boringtun_tcp_it_initiates", Peer::Boringtun, Client::Peer);
}
