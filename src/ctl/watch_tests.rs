use super::*;

fn port(name: &str, rx: u64, tx: u64, bytes_per_packet: u64, drops: u64) -> pb::Interface {
    pb::Interface {
        name: name.into(),
        r#type: "memif".into(),
        link_up: true,
        rx_packets: rx,
        rx_bytes: rx * bytes_per_packet,
        tx_packets: tx,
        tx_bytes: tx * bytes_per_packet,
        rx_dropped: drops,
        ..Default::default()
    }
}

fn node(name: &str, calls: u64, packets: u64, clocks: u64) -> pb::NodeRuntime {
    pb::NodeRuntime {
        name: name.into(),
        calls,
        packets,
        clocks,
        ..Default::default()
    }
}

fn error(reason: &str, count: u64) -> pb::ErrorCounter {
    pb::ErrorCounter {
        node: "ip4-input".into(),
        reason: reason.into(),
        description: format!("{reason} packets"),
        count,
    }
}

fn snap(
    secs: f64,
    ifs: Vec<pb::Interface>,
    workers: Vec<Vec<pb::NodeRuntime>>,
    errors: Vec<pb::ErrorCounter>,
) -> Snapshot {
    Snapshot {
        secs,
        interfaces: pb::ShowInterfacesReply { interfaces: ifs },
        runtime: pb::ShowRuntimeReply {
            tsc_hz: 1_000_000_000,
            workers: workers
                .into_iter()
                .map(|nodes| pb::WorkerRuntime {
                    busy_packets: nodes.iter().map(|n| n.packets).sum(),
                    busy_clocks: nodes.iter().map(|n| n.clocks).sum(),
                    nodes,
                    ..Default::default()
                })
                .collect(),
        },
        errors: pb::ShowErrorsReply { errors },
    }
}

#[test]
fn rates_are_deltas_over_the_interval_summed_over_workers() {
    let a = snap(
        10.0,
        vec![
            port("src", 1_000, 0, 100, 0),
            port("sink", 0, 1_000, 100, 5),
        ],
        vec![
            vec![node("ip4-lookup", 10, 1_000, 50_000)],
            vec![node("ip4-lookup", 10, 1_000, 50_000)],
        ],
        vec![error("bad-checksum", 2), error("ttl-expired", 0)],
    );
    // 2 s later: 200k more packets each way, 100 B each; 40 more drops.
    let b = snap(
        12.0,
        vec![
            port("src", 201_000, 0, 100, 0),
            port("sink", 0, 201_000, 100, 45),
            port("new", 7, 7, 100, 0),
        ],
        vec![
            vec![node("ip4-lookup", 110, 101_000, 2_050_000)],
            vec![node("ip4-lookup", 110, 101_000, 4_050_000)],
        ],
        vec![error("bad-checksum", 22), error("ttl-expired", 0)],
    );
    let f = Frame::between(Some(&a), &b);
    assert_eq!(f.interval, Some(2.0));
    assert_eq!(
        f.interfaces[0].rates,
        Some([100_000.0, 0.0, 80e6, 0.0, 0.0])
    );
    assert_eq!(
        f.interfaces[1].rates,
        Some([0.0, 100_000.0, 0.0, 80e6, 20.0])
    );
    assert_eq!(f.interfaces[1].dropped, 45);
    assert_eq!(
        f.interfaces[2].rates, None,
        "an interface that just appeared"
    );
    // 200k packets in 6M clocks over both workers, 200 calls.
    assert_eq!(
        f.nodes,
        vec![NodeRates {
            name: "ip4-lookup".into(),
            packets_per_sec: Some(100_000.0),
            clocks_per_packet: 30.0,
            vectors_per_call: 1000.0,
        }]
    );
    assert_eq!(f.busy_clocks_per_packet, 30.0);
    assert_eq!(
        f.drops,
        vec![DropRates {
            node: "ip4-input".into(),
            reason: "bad-checksum".into(),
            description: "bad-checksum packets".into(),
            count: 22,
            per_sec: Some(10.0),
        }]
    );

    let text = f.render("t");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "t (rates over the last 2.0 s)");
    let row = |name: &str| -> Vec<&str> {
        lines
            .iter()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row {name}:\n{text}"))
            .split_whitespace()
            .collect()
    };
    assert_eq!(
        row("src"),
        ["src", "memif", "up", "100.0k", "80.00", "0", "0.00", "0", "201000", "0", "0"]
    );
    assert_eq!(
        row("sink"),
        ["sink", "memif", "up", "0", "0.00", "100.0k", "80.00", "20", "0", "201000", "45"]
    );
    assert_eq!(row("new")[3..8], ["-", "-", "-", "-", "-"]);
    assert_eq!(
        row("ip4-lookup"),
        ["ip4-lookup", "100.0k", "30.0", "1000.0"]
    );
    assert_eq!(
        row("ip4-input"),
        [
            "ip4-input",
            "bad-checksum",
            "22",
            "10",
            "bad-checksum",
            "packets"
        ]
    );
    assert!(!text.contains("ttl-expired"), "{text}");

    let j = f.json();
    assert_eq!(j["interfaces"][1]["tx_pps"], 100_000.0);
    assert_eq!(j["interfaces"][1]["tx_bps"], 80e6);
    assert_eq!(j["interfaces"][2]["rx_pps"], Value::Null);
    assert_eq!(j["nodes"][0]["clocks_per_packet"], 30.0);
    assert_eq!(j["drops"][0]["per_sec"], 10.0);
}

#[test]
fn the_first_frame_shows_totals_and_cleared_counters_count_from_zero() {
    let a = snap(
        0.0,
        vec![port("p", 500, 400, 64, 0)],
        vec![vec![
            node("ip4-lookup", 5, 500, 10_000),
            node("idle", 0, 0, 0),
        ]],
        vec![error("no-route", 3)],
    );
    let f = Frame::between(None, &a);
    assert_eq!(f.interval, None);
    assert_eq!(f.interfaces[0].rates, None);
    assert_eq!(f.interfaces[0].rx_packets, 500);
    assert_eq!(f.nodes.len(), 1, "nodes without packets are left out");
    assert_eq!(f.nodes[0].packets_per_sec, None);
    assert_eq!(f.nodes[0].clocks_per_packet, 20.0);
    assert_eq!(f.drops[0].per_sec, None);
    assert!(f.render("t").starts_with("t (first sample"));

    // `quiver ctl clear counters` between two frames: the counters restart from zero.
    let b = snap(
        0.5,
        vec![port("p", 50, 0, 64, 0)],
        vec![vec![node("ip4-lookup", 1, 50, 1_000)]],
        vec![error("no-route", 1)],
    );
    let f = Frame::between(Some(&a), &b);
    assert_eq!(
        f.interfaces[0].rates,
        Some([100.0, 0.0, 51_200.0, 0.0, 0.0])
    );
    assert_eq!(f.nodes[0].packets_per_sec, Some(100.0));
    assert_eq!(f.drops[0].per_sec, Some(2.0));
}

#[test]
fn rates_print_short_and_the_terminal_view_redraws_in_place() {
    assert_eq!(count_rate(None), "-");
    assert_eq!(count_rate(Some(950.4)), "950");
    assert_eq!(count_rate(Some(12_345.0)), "12.3k");
    assert_eq!(count_rate(Some(1_250_000.0)), "1.25M");
    assert_eq!(mbps(Some(1_234_567.0)), "1.23");
    assert_eq!(in_place("a\nb\n"), "\x1b[Ha\x1b[K\nb\x1b[K\n\x1b[J");
    assert!(parse_interval("0.05").is_err());
    assert_eq!(parse_interval("0.5"), Ok(0.5));
}
