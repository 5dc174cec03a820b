//! `quiver ctl` as a user runs it: the real `quiver` binary serves its admin socket, and every
//! check runs `quiver ctl … --json` as a subprocess and reads what it printed. Traffic comes
//! from memif CNFs built on our memif crate, connected to Quiver's memif ports (no root needed).

mod support;

// A plain `mod` in a test crate's root looks beside it, not in `admin_ctl/`.
#[path = "admin_ctl/af_packet.rs"]
mod af_packet;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::{cnfs, cnfs_of, entries, mac_bytes, memif_pair_config, one, udp, Quiver, Scratch};
use testkit::wait_for;

/// The configuration: two memif masters on `memif_socket` (ids 0 and 1), routed.
fn config(memif_socket: &Path) -> String {
    memif_pair_config(memif_socket, "[stats]\ninterval_secs = 0")
}

fn node_packets(runtime: &Value, node: &str) -> u64 {
    runtime["workers"][0]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node)
        .unwrap_or_else(|| panic!("no node {node} in {runtime:#}"))["packets"]
        .as_u64()
        .unwrap()
}

#[test]
fn quiver_ctl_shows_and_changes_a_running_quiver() {
    let dir = Scratch::new("main");
    let memif_socket = dir.path("memif.sock");
    let admin = dir.path("run/admin.sock");
    let mut q = Quiver::start_at(&dir, "main", &config(&memif_socket), &admin);

    // The socket: created with its directory, mode 0660.
    let meta = std::fs::metadata(&admin).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);

    let ifs = q.json(&["show", "interfaces"]);
    let memif0 = one(&ifs, "name", "memif0");
    assert_eq!(memif0["type"], "memif");
    assert_eq!(memif0["mode"], "l3");
    assert_eq!(memif0["addresses"], serde_json::json!(["10.0.0.1/24"]));
    let memif0_mac = mac_bytes(memif0["mac"].as_str().unwrap());
    one(&ifs, "name", "memif1");

    // A route: shown, unresolved until its next hop is a neighbour, then deleted.
    assert!(entries(&q.json(&["show", "fib"]), "prefix", "10.9.0.0/16").is_empty());
    q.json(&["route", "add", "10.9.0.0/16", "--via", "10.0.1.2@memif1"]);
    let fib = q.json(&["show", "fib"]);
    let route = one(&fib, "prefix", "10.9.0.0/16");
    assert_eq!(route["source"], "static");
    assert_eq!(
        route["paths"],
        serde_json::json!([{"kind": "arp", "next_hop": "10.0.1.2", "interface": "memif1"}])
    );
    q.json(&["neighbor", "add", "memif1", "10.0.1.2", "02:00:00:00:01:02"]);
    let n = q.json(&["show", "neighbors"]);
    assert_eq!(one(&n, "ip", "10.0.1.2")["mac"], "02:00:00:00:01:02");
    assert_eq!(one(&n, "ip", "10.0.1.2")["interface"], "memif1");
    let fib = q.json(&["show", "fib"]);
    assert_eq!(
        one(&fib, "prefix", "10.9.0.0/16")["paths"][0]["kind"],
        "rewrite"
    );
    q.json(&["route", "del", "10.9.0.0/16"]);
    assert!(entries(&q.json(&["show", "fib"]), "prefix", "10.9.0.0/16").is_empty());
    let err = q.refused_quietly(&["route", "del", "10.9.0.0/16"]);
    assert!(err.contains("not found: no route 10.9.0.0/16"), "{err}");

    // Bad requests: a clear message, a non-zero exit, nothing changed.
    let fib_before = q.json(&["show", "fib"]);
    let neighbors_before = q.json(&["show", "neighbors"]);
    let xc_before = q.json(&["show", "cross-connects"]);
    for (args, expected) in [
        (
            &["route", "add", "10.9.0.0/33", "--via", "10.0.1.2@memif1"][..],
            "invalid argument: prefix `10.9.0.0/33`",
        ),
        (
            &["route", "add", "10.9.0.0/16", "--via", "10.0.1.2@nosuch"],
            "not found: no port named `nosuch`",
        ),
        (
            &["route", "add", "10.9.0.0/16", "--via", "10.0.1.300@memif1"],
            "invalid argument: next hop `10.0.1.300`",
        ),
        (
            &["neighbor", "add", "nosuch", "10.0.1.3", "02:00:00:00:01:03"],
            "not found: no port named `nosuch`",
        ),
        (
            &["neighbor", "add", "memif1", "10.0.1.3", "02:00:00:00:01"],
            "invalid argument: \"02:00:00:00:01\" is not a MAC address",
        ),
        (&["xconnect", "add", "memif0", "nosuch"], "not found"),
        (&["xconnect", "add", "memif0", "memif0"], "invalid argument"),
        (&["xconnect", "del", "memif0"], "not found"),
        (&["interface", "del", "nosuch"], "not found"),
        (
            &["trace", "add", "nosuch-input", "5"],
            "not found: no input node named `nosuch-input`",
        ),
    ] {
        let err = q.refused_quietly(args);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    assert_eq!(q.json(&["show", "fib"]), fib_before);
    assert_eq!(q.json(&["show", "neighbors"]), neighbors_before);
    assert_eq!(q.json(&["show", "cross-connects"]), xc_before);

    // Traffic: CNF a on memif0 sends to 10.9.0.0/16, routed out of memif1 to CNF b.
    q.json(&["route", "add", "10.9.0.0/16", "--via", "10.0.1.2@memif1"]);
    let (mut a, mut b) = cnfs(&mut q, &memif_socket);
    q.json(&["clear", "counters"]);
    q.json(&["trace", "add", "port-input", "5"]);
    const N: usize = 100;
    let frames: Vec<Vec<u8>> = (0..N as u16)
        .map(|i| udp(memif0_mac, [10, 9, 0, 5], 100, i))
        .collect();
    let got = support::route(&mut a, &mut b, &frames, N);
    assert_eq!(got.len(), N);
    for f in &got {
        assert_eq!(f[0..6], [2, 0, 0, 0, 1, 2], "to the neighbour's MAC");
        assert_eq!(f[22], 63, "TTL decremented");
        assert_eq!(f[30..34], [10, 9, 0, 5]);
    }

    let rt = q.json(&["show", "runtime"]);
    for node in [
        "port-input",
        "ethernet-input",
        "ip4-input",
        "ip4-lookup",
        "ip4-rewrite",
    ] {
        assert_eq!(node_packets(&rt, node), N as u64, "{node}: {rt:#}");
    }
    let per_worker = q.json(&["show", "runtime", "--per-worker"]);
    assert_eq!(per_worker["workers"][0]["worker"], 0);
    assert_eq!(per_worker["workers"][0]["core"], 1);
    let ifs = q.json(&["show", "interfaces"]);
    assert_eq!(one(&ifs, "name", "memif0")["rx_packets"], N as u64);
    assert_eq!(one(&ifs, "name", "memif1")["tx_packets"], N as u64);
    let memifs = q.json(&["show", "memif"]);
    let m1 = one(&memifs, "name", "memif1");
    assert_eq!(m1["role"], "master");
    assert_eq!(m1["socket"], memif_socket.display().to_string());
    assert_eq!(m1["id"], 1);
    assert_eq!(m1["link"], "up");
    assert_eq!(m1["ring_size"], 1024);
    assert_eq!(m1["tx_packets"], N as u64);

    // The trace: the first 5 packets, each through the routing nodes, with its bytes.
    let trace = q.json(&["show", "trace"]);
    let packets = trace.as_array().unwrap();
    assert_eq!(packets.len(), 5, "{trace:#}");
    for p in packets {
        let nodes: Vec<&str> = p["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        assert_eq!(
            nodes[..5],
            [
                "port-input",
                "ethernet-input",
                "ip4-input",
                "ip4-lookup",
                "ip4-rewrite"
            ],
            "{p:#}"
        );
        let lines = p["lines"].to_string();
        assert!(lines.contains("0a090005"), "the destination's bytes: {p:#}");
    }
    q.json(&["clear", "trace"]);
    assert_eq!(q.json(&["show", "trace"]), serde_json::json!([]));

    // Errors count per node and reason: frames for an address with no route.
    let before = q.json(&["show", "errors"]);
    let no_route = |v: &Value| {
        entries(v, "reason", "no-route")
            .iter()
            .map(|e| e["count"].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!(no_route(&before), 0);
    a.send(&[udp(memif0_mac, [192, 0, 2, 1], 100, 7)]);
    wait_for("the no-route drop", 30, || {
        a.poll();
        no_route(&q.json(&["show", "errors"])) == 1
    });

    // Clearing zeroes runtime, error and interface counters.
    q.json(&["clear", "counters"]);
    let rt = q.json(&["show", "runtime"]);
    for node in ["ethernet-input", "ip4-lookup", "ip4-rewrite"] {
        assert_eq!(node_packets(&rt, node), 0, "{node}: {rt:#}");
    }
    assert_eq!(no_route(&q.json(&["show", "errors"])), 0);
    let ifs = q.json(&["show", "interfaces"]);
    assert_eq!(one(&ifs, "name", "memif0")["rx_packets"], 0);
    assert_eq!(one(&ifs, "name", "memif1")["tx_packets"], 0);

    // Interfaces and a cross-connect added at run time carry traffic; deleting them leaves
    // nothing.
    let memif_socket2 = dir.path("memif2.sock");
    let s2 = memif_socket2.to_str().unwrap();
    let add_memif = |name, id| {
        [
            "interface",
            "add",
            "memif",
            name,
            "--memif-socket",
            s2,
            "--id",
            id,
        ]
    };
    let added = q.json(&add_memif("memif2", "0"));
    assert!(added["index"].is_u64(), "{added}");
    q.json(&add_memif("memif3", "1"));
    let err = q.refused_quietly(&add_memif("memif3", "2"));
    assert!(err.contains("already exists"), "{err}");
    let err = q.refused_quietly(&add_memif("memif4", "1"));
    assert!(err.contains("already exists"), "{err}");
    let err = q.refused_quietly(&[&add_memif("memif4", "4")[..], &["--role", "boss"]].concat());
    assert!(err.contains("invalid argument: memif role `boss`"), "{err}");
    q.json(&["xconnect", "add", "memif2", "memif3"]);
    let xc = q.json(&["show", "cross-connects"]);
    assert_eq!(
        xc,
        serde_json::json!([{"a": "memif2", "b": "memif3", "kind": "l2", "path": "cut-through", "peer_a": "", "peer_b": ""}])
    );
    let ifs = q.json(&["show", "interfaces"]);
    assert_eq!(one(&ifs, "name", "memif2")["mode"], "l2");
    assert_eq!(one(&ifs, "name", "memif3")["type"], "memif");
    let m2 = one(&q.json(&["show", "memif"]), "name", "memif2").clone();
    assert_eq!(m2["socket"], s2);
    assert_eq!(m2["id"], 0);
    let (mut c, mut d) = cnfs_of(&mut q, &memif_socket2, ["memif2", "memif3"]);
    let frames: Vec<Vec<u8>> = (0..50u16)
        .map(|i| udp([2, 0, 0, 0, 0, 0xdd], [10, 7, 0, 1], 100, i))
        .collect();
    let got = support::route(&mut c, &mut d, &frames, frames.len());
    assert_eq!(got, frames, "untouched, in order");
    q.json(&["xconnect", "del", "memif3"]);
    assert_eq!(q.json(&["show", "cross-connects"]), serde_json::json!([]));
    // L3, a next hop per family: IPv6 only one way, dual stack the other.
    let l3 = |a: &'static str, b: &'static str| {
        [
            "xconnect", "add", "memif2", "memif3", "--peer-a", a, "--peer-b", b,
        ]
    };
    q.json(&l3("fd00:2::1", "10.8.0.2,fd00:3::1"));
    assert_eq!(
        q.json(&["show", "cross-connects"]),
        serde_json::json!([{"a": "memif2", "b": "memif3", "kind": "l3", "path": "graph", "peer_a": "fd00:2::1", "peer_b": "10.8.0.2,fd00:3::1"}])
    );
    q.json(&["xconnect", "del", "memif2"]);
    for (a, b, why) in [
        ("10.8.0.1,10.8.0.3", "fd00:3::1", "an IPv4 and an IPv6"),
        ("ff02::1", "fd00:3::1", "not a unicast IPv6 address"),
    ] {
        let err = q.refused_quietly(&l3(a, b));
        assert!(err.contains(why), "{a} {b}: {err}");
    }
    assert_eq!(q.json(&["show", "cross-connects"]), serde_json::json!([]));
    q.json(&["interface", "del", "memif2"]);
    q.json(&["interface", "del", "memif3"]);
    let ifs = q.json(&["show", "interfaces"]);
    assert!(entries(&ifs, "name", "memif2").is_empty());
    assert!(entries(&ifs, "name", "memif3").is_empty());
    assert_eq!(ifs.as_array().unwrap().len(), 2);

    // NSM connections: none here.
    assert_eq!(q.json(&["show", "connections"]), serde_json::json!([]));

    // The human tables name what the JSON does.
    let out = q.ctl(&["show", "interfaces"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("Name "), "{text}");
    assert!(text.lines().any(|l| l.starts_with("memif1 ")), "{text}");

    // Stopping (it must exit with success) removes the socket.
    q.stop();
    assert!(!admin.exists(), "the admin socket is removed on exit");
    drop(a);
    drop(b);
}

/// `quiver ctl health`, the container's and Kubernetes' probe: it answers for the admin API, and
/// with `--nsm-socket` for the NSM services (both SERVING); it fails when nothing serves.
#[test]
fn health_answers_for_the_admin_api_and_the_nsm_services() {
    let dir = Scratch::new("health");
    let admin = dir.path("admin.sock");
    let nsm = dir.path("nsm.sock");
    let nsm_arg = nsm.to_str().unwrap().to_string();
    let health = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_quiver"))
            .args(["ctl", "--socket"])
            .arg(&admin)
            .arg("health")
            .args(args)
            .output()
            .expect("run quiver ctl health")
    };
    // Nothing runs yet: both checks fail.
    assert!(!health(&[]).status.success());
    assert!(!health(&["--nsm-socket", &nsm_arg]).status.success());

    let mut q = Quiver::spawn_with(&dir, "q", &config(&dir.path("m.sock")), &admin, |c| {
        c.arg("--nsm")
            .env("NSM_LISTEN_ON", format!("unix://{}", nsm.display()))
            .env_remove("NSM_CONNECT_TO");
    });
    q.wait_log("admin API listening");
    let out = health(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("the NSM socket", 30, || nsm.exists());
    let out = health(&["--nsm-socket", &nsm_arg, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["serving"],
        serde_json::json!([
            "networkservice.NetworkService",
            "connection.MonitorConnection"
        ])
    );
    // The unix:// form works too.
    let url = format!("unix://{nsm_arg}");
    assert!(health(&["--nsm-socket", &url]).status.success());

    q.child.kill().unwrap();
    q.child.wait().unwrap();
    let out = health(&["--nsm-socket", &nsm_arg]);
    assert!(!out.status.success(), "healthy after the server died");
}

#[test]
fn a_live_admin_socket_is_refused_and_a_stale_one_replaced() {
    let dir = Scratch::new("socket");
    let admin = dir.path("admin.sock");
    let mut first = Quiver::start_at(&dir, "first", &config(&dir.path("m1.sock")), &admin);
    let m2 = config(&dir.path("m2.sock"));
    let mut second = Quiver::spawn_with(&dir, "second", &m2, &admin, |_| {});
    let status = second.child.wait().unwrap();
    assert!(
        !status.success(),
        "a second quiver on a live socket must fail"
    );
    wait_for("the second quiver's message", 10, || {
        second
            .stderr
            .lock()
            .unwrap()
            .contains("is in use by a running process")
    });
    // The first still serves.
    one(&first.json(&["show", "interfaces"]), "name", "memif0");

    // Killed without a chance to clean up, it leaves a stale socket behind …
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert!(std::fs::metadata(&admin).unwrap().file_type().is_socket());
    let err = first.refused_quietly(&["show", "interfaces"]);
    assert!(err.contains("cannot connect"), "{err}");
    // … which the next quiver replaces.
    let third = Quiver::start_at(&dir, "third", &config(&dir.path("m3.sock")), &admin);
    one(&third.json(&["show", "interfaces"]), "name", "memif1");
    let mode = std::fs::metadata(&admin).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
}

/// An operator's own tool on the admin socket: Python grpcio with its default settings, stubs
/// generated from `quiver_admin.proto` at test time. grpcio puts the percent-encoded socket path
/// in `:authority`; Quiver must answer anyway, successes and refusals alike.
const PYTHON_ADMIN_CLIENT: &str = r#"
import importlib.resources, os, sys
out, protodir, sock = sys.argv[1:4]
from grpc_tools import protoc
include = str(importlib.resources.files("grpc_tools") / "_proto")
rc = protoc.main(["protoc", "-I" + protodir, "-I" + include, "--python_out=" + out,
                  "--grpc_python_out=" + out, os.path.join(protodir, "quiver_admin.proto")])
assert rc == 0, "protoc failed"
sys.path.insert(0, out)
import grpc
import quiver_admin_pb2 as pb, quiver_admin_pb2_grpc as rpc

admin = rpc.AdminStub(grpc.insecure_channel("unix:" + sock))
names = sorted(i.name for i in admin.ShowInterfaces(pb.Empty(), timeout=30).interfaces)
print("interfaces:", ",".join(names))
try:
    admin.DeleteRoute(pb.DeleteRouteRequest(prefix="10.99.0.0/16"), timeout=30)
    sys.exit("deleting a missing route succeeded")
except grpc.RpcError as e:
    print("refused:", e.code().name, e.details())
"#;

#[test]
fn python_grpcio_with_default_settings_uses_the_admin_socket() {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("grpcio-venv");
    let python = match testkit::python_venv(&venv, &["grpcio", "grpcio-tools"]) {
        Ok(python) => python,
        Err(why) => {
            testkit::unavailable(
                "python_grpcio_with_default_settings_uses_the_admin_socket",
                &why,
            );
            return;
        }
    };
    let dir = Scratch::new("python-admin");
    let admin = dir.path("admin.sock");
    let _q = Quiver::start_at(&dir, "python", &config(&dir.path("m.sock")), &admin);
    let script = dir.path("client.py");
    std::fs::write(&script, PYTHON_ADMIN_CLIENT).unwrap();
    let stubs = dir.path("stubs");
    std::fs::create_dir_all(&stubs).unwrap();
    let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("ctl-api/proto");
    let out = Command::new(python)
        .arg(&script)
        .arg(&stubs)
        .arg(&proto)
        .arg(&admin)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Python client failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("interfaces: memif0,memif1"), "{stdout}");
    assert!(
        stdout.contains("refused: NOT_FOUND no route 10.99.0.0/16"),
        "{stdout}"
    );
}
