//! Quiver's WireGuard protocol against implementations no one here wrote: wireguard-go and
//! boringtun, each on a TUN device in its own network namespace, configured with `wg` through its
//! UAPI socket. Our side is `wireguard::Device` on a UDP socket in another namespace, joined by a
//! veth. Each way initiating: ICMP echo through the tunnel, and a rekey forced by our side while
//! traffic flows. Needs root, `ip`, `ping`, `wg` (wireguard-tools), Go and cargo (the peers are
//! built once into /var/cache/quiver-interop); a missing one skips with a printed reason, or fails
//! under QUIVER_REQUIRE_SYSTEM_TESTS=1.

mod common;

use std::process::{Child, Command, Stdio};

use common::icmp::{echo, parse_echo};
use common::peers::Peer;
use common::setup::{dotted, setup};
use common::{say, Ours, Topology, OUR_TUNNEL, PEER_TUNNEL};

/// Sends an echo request to the peer's tunnel address and waits for its reply.
fn echo_through(ours: &mut Ours, seq: u16) {
    let payload: Vec<u8> = (0..56u8).map(|i| i ^ seq as u8).collect();
    ours.send_ip(&echo(8, OUR_TUNNEL, PEER_TUNNEL, 0x5157, seq, &payload));
    ours.run_until(&format!("echo reply {seq}"), 10, |_, got| {
        got.and_then(|p| parse_echo(&p)).is_some_and(|e| {
            e.kind == 0
                && e.src == PEER_TUNNEL
                && e.dst == OUR_TUNNEL
                && e.seq == seq
                && e.payload == payload
        })
    });
}

fn we_initiate(test: &str, peer: Peer) {
    let Some(mut s) = setup(test, peer) else {
        return;
    };
    let ours = &mut s.ours;
    ours.initiate();
    ours.run_until("the handshake", 10, |o, _| o.session_index().is_some());
    let first = ours.session_index();
    echo_through(ours, 1);
    // A rekey forced from our side: the next echo travels on the new session.
    ours.initiate();
    ours.run_until("the rekey", 10, |o, _| o.session_index() != first);
    echo_through(ours, 2);
    echo_through(ours, 3);
    let p = ours.dev.peer(ours.peer);
    assert!(
        p.current().expect("session").received > 0,
        "the replies came on the new session"
    );
    assert_eq!((p.stats.handshakes, p.stats.rekeys), (2, 1));
    assert!(ours.refused.is_empty(), "refused: {:?}", ours.refused);
    say(&format!(
        "PASS {test}: we initiated, echo request/reply through {}, rekey, echo again ({} B in, {} B out)",
        peer.name(),
        p.stats.rx_bytes,
        p.stats.tx_bytes
    ));
    drop(s.topo);
}

/// `ping` in the peer's namespace to our tunnel address.
fn ping(topo: &Topology, args: &[&str]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", &topo.peer_ns, "ping", "-n"])
        .args(args)
        .arg(dotted(OUR_TUNNEL))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ping")
}

/// Answers echo requests through the tunnel until `child` exits; `on_answer` runs after each
/// answer with how many there were.
fn answer_until_exit(
    ours: &mut Ours,
    child: &mut Child,
    secs: u64,
    mut on_answer: impl FnMut(&mut Ours, u32),
) {
    let mut answered = 0;
    ours.run_until("ping to finish", secs, |o, got| {
        if let Some(e) = got.and_then(|p| parse_echo(&p)) {
            if e.kind == 8 && e.dst == OUR_TUNNEL {
                o.send_ip(&echo(0, OUR_TUNNEL, e.src, e.id, e.seq, &e.payload));
                answered += 1;
                on_answer(o, answered);
            }
        }
        matches!(child.try_wait(), Ok(Some(_)))
    });
}

fn finish(child: Child) -> String {
    let out = child.wait_with_output().expect("ping output");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "ping failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn peer_initiates(test: &str, peer: Peer) {
    let Some(mut s) = setup(test, peer) else {
        return;
    };
    // The first ping makes the peer initiate; -w keeps pinging until one reply (or 10 s).
    let mut warm = ping(&s.topo, &["-c", "1", "-w", "10"]);
    answer_until_exit(&mut s.ours, &mut warm, 15, |_, _| {});
    finish(warm);
    let ours = &mut s.ours;
    let first = ours.session_index();
    assert!(first.is_some(), "the peer's handshake made a session");
    assert!(
        !ours
            .dev
            .peer(ours.peer)
            .current()
            .expect("session")
            .keys
            .initiator
    );
    // Ten more, with a rekey forced from our side after the fourth: none may be lost.
    let mut main = ping(&s.topo, &["-c", "10", "-i", "0.2", "-W", "5"]);
    answer_until_exit(ours, &mut main, 20, |o, n| {
        if n == 4 {
            o.initiate();
        }
    });
    let text = finish(main);
    assert!(
        text.contains("10 packets transmitted, 10 received"),
        "{text}"
    );
    let p = ours.dev.peer(ours.peer);
    assert_ne!(ours.session_index(), first, "rekeyed");
    assert!(p.current().expect("session").keys.initiator);
    assert!(
        p.stats.rekeys >= 1 && p.stats.handshakes >= 2,
        "{:?}",
        p.stats
    );
    assert!(ours.refused.is_empty(), "refused: {:?}", ours.refused);
    let summary = text
        .lines()
        .find(|l| l.contains("transmitted"))
        .unwrap_or_default();
    say(&format!(
        "PASS {test}: {} initiated, ping through us answered ({summary}), rekey by us mid-flow",
        peer.name()
    ));
}

#[test]
fn wireguard_go_we_initiate() {
    we_initiate("wireguard_go_we_initiate", Peer::WireguardGo);
}

#[test]
fn wireguard_go_it_initiates() {
    peer_initiates("wireguard_go_it_initiates", Peer::WireguardGo);
}

#[test]
fn boringtun_we_initiate() {
    we_initiate("boringtun_we_initiate", Peer::Boringtun);
}

#[test]
fn boringtun_it_initiates() {
    peer_initiates("boringtun_it_initiates", Peer::Boringtun);
}
