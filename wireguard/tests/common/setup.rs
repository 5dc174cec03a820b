//! Starting a peer implementation in its namespace and configuring it with `wg`.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use wireguard::PrivateKey;

use super::peers::Peer;
use super::{say, Ours, Topology, OUR_TUNNEL, OUR_UNDERLAY, PEER_PORT, PEER_TUNNEL};

/// What the interop tests need.
pub const NEEDS: testkit::Needs = testkit::Needs {
    root: true,
    hugepages: 0,
    tools: &[
        "/usr/sbin/ip",
        "/usr/bin/ping",
        "/usr/bin/wg",
        "/usr/bin/timeout",
    ],
};

/// A peer running and configured, and our side ready.
pub struct Setup {
    // Dropped last: the namespaces outlive our socket.
    /// Our side.
    pub ours: Ours,
    /// The namespaces and the peer's processes.
    pub topo: Topology,
}

/// Starts `peer` in a new topology and configures it with `wg` (our key as its peer, our
/// tunnel address as allowed IPs, our socket as endpoint); `None` if the test is skipped.
pub fn setup(test: &str, peer: Peer) -> Option<Setup> {
    if !testkit::require(test, &NEEDS) {
        return None;
    }
    let bin = match peer.binary() {
        Ok(b) => b,
        Err(why) => {
            testkit::unavailable(test, &format!("cannot build {}: {why}", peer.name()));
            return None;
        }
    };
    let mut topo = Topology::new();
    let ifname = topo.ifname.clone();
    let log = format!("/tmp/wg-interop-{ifname}.log");
    let args = peer.command(&bin, &ifname, &log);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    say(&format!(
        "{test}: {} on {ifname} in {}, log {log}",
        peer.name(),
        topo.peer_ns
    ));
    topo.spawn_in_peer(&args, &format!("{log}.out"));
    let uapi = format!("/var/run/wireguard/{ifname}.sock");
    testkit::wait_for(&format!("{} to open {uapi}", peer.name()), 10, || {
        Path::new(&uapi).exists()
    });

    let peer_key = PrivateKey::generate(&mut rand_core::OsRng);
    let our_key = PrivateKey::generate(&mut rand_core::OsRng);
    let key_file = format!("/tmp/wg-interop-{ifname}.key");
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&key_file)
            .expect("key file");
        writeln!(f, "{}", peer_key.to_base64()).expect("write key");
    }
    let sock = topo.our_socket();
    let port = sock.local_addr().expect("local address").port();
    let allowed = format!("{}/32", dotted(OUR_TUNNEL));
    let endpoint = format!("{OUR_UNDERLAY}:{port}");
    topo.run_in_peer(&[
        "wg",
        "set",
        &ifname,
        "private-key",
        &key_file,
        "listen-port",
        &PEER_PORT.to_string(),
        "peer",
        &our_key.public_key().to_base64(),
        "allowed-ips",
        &allowed,
        "endpoint",
        &endpoint,
    ]);
    let _ = std::fs::remove_file(&key_file);
    // wg derives the same public key from the private key we wrote in base64 (boringtun does
    // not report its private key over UAPI, so wg shows "(none)" there; its handshake proves it).
    let shown = topo.run_in_peer(&["wg", "show", &ifname, "public-key"]);
    if !matches!(shown.trim(), "" | "(none)") {
        assert_eq!(shown.trim(), peer_key.public_key().to_base64());
    }
    let tunnel = format!("{}/24", dotted(PEER_TUNNEL));
    topo.run_in_peer(&["ip", "addr", "add", &tunnel, "dev", &ifname]);
    topo.run_in_peer(&["ip", "link", "set", &ifname, "up"]);
    let ours = Ours::new(sock, our_key, peer_key.public_key());
    Some(Setup { ours, topo })
}

/// `a.b.c.d`.
pub fn dotted(a: [u8; 4]) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}
