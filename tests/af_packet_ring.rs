//! An AF_PACKET port's ring memory, as the kernel maps it into a running `quiver run`: the
//! default is 4 MiB each way per queue (32 receive blocks: at low rates each is handed over after 1 ms, so 32 ms of traffic), `ring_kb`
//! in `[[port]]` sets it, and ports with either still forward. Two network namespaces, each with
//! a veth whose outer end is an AF_PACKET port, joined by an L2 cross-connect; `ping` crosses.

mod support;

use std::time::{Duration, Instant};

use support::side::{Side, IP, PING};
use support::{socket_mappings, Quiver, Scratch};
use testkit::{require, Needs};

#[test]
fn af_packet_rings_are_small_by_default_sized_by_ring_kb_and_forward() {
    if !require(
        "af_packet_rings_are_small_by_default_sized_by_ring_kb_and_forward",
        &Needs {
            root: true,
            tools: &[IP, PING],
            ..Needs::default()
        },
    ) {
        return;
    }
    let a = Side::new("rg", "a", "10.72.0.1/24");
    let b = Side::new("rg", "b", "10.72.0.2/24");
    let dir = Scratch::new("af-packet-ring");
    let config = format!(
        "[dataplane]\ncores = [1]\nidle = \"adaptive\"\n[buffers]\ncount = 4096\n\
         hugepages = \"never\"\n[stats]\ninterval_secs = 0\n\
         [[port]]\nname = \"a\"\ntype = \"af_packet\"\ninterface = \"{}\"\n\
         [[port]]\nname = \"b\"\ntype = \"af_packet\"\ninterface = \"{}\"\nring_kb = 256\n\
         [[xconnect]]\na = \"a\"\nb = \"b\"\n",
        a.root, b.root
    );
    let mut q = Quiver::start_at(&dir, "ring", &config, &dir.path("admin.sock"));

    // Frames cross both ports.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !a.ping("10.72.0.2") {
        q.check_running();
        assert!(
            Instant::now() < deadline,
            "no ping crossed the cross-connect"
        );
    }
    assert!(b.ping("10.72.0.1"), "and back the other way");

    // One worker, so one queue per port: each queue's receive and transmit rings, one mapping.
    let sizes = socket_mappings(q.child.id());
    assert_eq!(
        sizes,
        [(2 * 256) << 10, (2 * 4096) << 10],
        "port b: 256 KiB each way (ring_kb); port a: the default, 4 MiB each way"
    );
    q.stop();
}
