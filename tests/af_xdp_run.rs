//! AF_XDP ports in a running `quiver run` (`[[port]] type = "af_xdp"`, issue 24 part 3): TCP
//! between two namespaces whose veths keep their default offloads, checked for content;
//! `show interfaces` names the type and each queue's receive mode (an idle queue sleeps on its
//! socket and wakes for traffic); and Quiver killed with -9
//! leaves both interfaces without its XDP program (the BPF links die with the process), so the
//! next Quiver attaches and forwards again.

mod support;

use std::time::{Duration, Instant};

use support::side::{run, Side, IP};
use support::{Quiver, Scratch};
use testkit::{require, Needs};

const PYTHON: &str = "/usr/bin/python3";

/// Whether an XDP program is attached to `side`'s outer end.
fn has_xdp(side: &Side) -> bool {
    let out = run(&[IP, "link", "show", "dev", &side.root]);
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

fn config(a: &Side, b: &Side) -> String {
    format!(
        "[dataplane]\ncores = [1]\nidle = \"adaptive\"\n[buffers]\ncount = 8192\n\
         hugepages = \"never\"\n[stats]\ninterval_secs = 0\n\
         [[port]]\nname = \"a\"\ntype = \"af_xdp\"\ninterface = \"{}\"\n\
         [[port]]\nname = \"b\"\ntype = \"af_xdp\"\ninterface = \"{}\"\nframes = 512\n\
         [[xconnect]]\na = \"a\"\nb = \"b\"\n",
        a.root, b.root
    )
}

fn one<'a>(list: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    list.as_array()
        .and_then(|l| l.iter().find(|i| i["name"] == name))
        .unwrap_or_else(|| panic!("no interface {name} in {list}"))
}

#[test]
fn af_xdp_ports_carry_tcp_and_a_killed_quiver_leaves_no_program_behind() {
    if !require(
        "af_xdp_ports_carry_tcp_and_a_killed_quiver_leaves_no_program_behind",
        &Needs {
            root: true,
            tools: &[IP, PYTHON],
            ..Needs::default()
        },
    ) {
        return;
    }
    let a = Side::new("xd", "a", "10.73.0.1/24");
    let b = Side::new("xd", "b", "10.73.0.2/24");
    let dir = Scratch::new("af-xdp-run");
    let mut q = Quiver::start_at(&dir, "xdp", &config(&a, &b), &dir.path("admin.sock"));
    assert!(
        has_xdp(&a) && has_xdp(&b),
        "the program is attached to both"
    );

    let (received, sent) = testkit::tcp::transfer(&a.ns, &b.ns, "10.73.0.2", 5073, 4);
    assert_eq!(received, sent, "every byte arrived, in order");
    assert!(sent.starts_with("4194304 "), "{sent}");

    let ifs = q.json(&["show", "interfaces"]);
    for name in ["a", "b"] {
        let i = one(&ifs, name);
        assert_eq!(i["type"], "af_xdp", "{i}");
        assert_eq!(i["rx_modes"].as_array().map(Vec::len), Some(1), "{i}");
        assert!(i["rx_packets"].as_u64().unwrap() > 100, "{i}");
    }

    // Idle, each queue sleeps on its socket; traffic wakes it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while one(&q.json(&["show", "interfaces"]), "a")["rx_modes"] != serde_json::json!(["interrupt"])
    {
        assert!(Instant::now() < deadline, "a's idle queue never slept");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (received, sent) = testkit::tcp::transfer(&a.ns, &b.ns, "10.73.0.2", 5075, 1);
    assert_eq!(received, sent, "a sleeping queue wakes for traffic");

    // kill -9: no orderly stop, yet the kernel detaches the programs with the process.
    q.child.kill().unwrap();
    q.child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while has_xdp(&a) || has_xdp(&b) {
        assert!(Instant::now() < deadline, "a program outlived its Quiver");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The next Quiver attaches and forwards again.
    let mut q = Quiver::start_at(&dir, "xdp2", &config(&a, &b), &dir.path("admin2.sock"));
    let (received, sent) = testkit::tcp::transfer(&b.ns, &a.ns, "10.73.0.1", 5074, 1);
    assert_eq!(received, sent);
    q.stop();
    assert!(!has_xdp(&a) && !has_xdp(&b), "an orderly stop detaches too");
}
