use super::*;

fn port(name: &str, index: u32, up: bool) -> pb::Interface {
    pb::Interface {
        index,
        name: name.into(),
        r#type: "memif".into(),
        mac: "02:fe:00:00:00:01".into(),
        mtu: 1500,
        mode: "l3".into(),
        link_up: up,
        link_reason: if up { "" } else { "no peer" }.into(),
        addresses: vec!["10.0.0.1/24".into()],
        rx_packets: 12345,
        tx_packets: 7,
        detail: vec![
            pb::Counter {
                name: "tx-link-down".into(),
                value: 3,
            },
            pb::Counter {
                name: "connects".into(),
                value: 0,
            },
        ],
        ..Default::default()
    }
}

#[test]
fn tables_align_columns_to_the_widest_cell_and_numbers_to_the_right() {
    let mut t = Table::new(&["Name", ">Count"]);
    t.row(vec!["a".into(), "5".into()]);
    t.row(vec!["longer-name".into(), "12345".into()]);
    t.note("under".into());
    assert_eq!(
        t.render(),
        "Name         Count\n\
         a                5\n\
         longer-name  12345\n    under\n"
    );
}

#[test]
fn show_interfaces_has_one_row_per_interface_with_notes_for_link_addresses_and_nonzero_detail() {
    let r = pb::ShowInterfacesReply {
        interfaces: vec![port("memif0", 0, true), port("memif-long-name", 1, false)],
    };
    let text = interfaces(&r);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("Name "), "{text}");
    let row0: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        row0,
        [
            "memif0",
            "0",
            "memif",
            "up",
            "l3",
            "1500",
            "02:fe:00:00:00:01",
            "12345",
            "0",
            "7",
            "0",
            "0",
            "0"
        ]
    );
    assert_eq!(lines[2], "    addresses: 10.0.0.1/24");
    assert_eq!(lines[3], "    tx-link-down: 3");
    assert!(lines[4].starts_with("memif-long-name  "), "{text}");
    assert_eq!(lines[5], "    down: no peer");
    assert!(
        !text.contains("connects"),
        "zero detail is not shown:\n{text}"
    );
    // Every row's columns start where the header's do.
    let col = lines[0].find("Idx").unwrap() + "Idx".len();
    assert_eq!(&lines[1][col - 1..col], "0");
    assert_eq!(&lines[4][col - 1..col], "1");

    let j = interfaces_json(&r);
    assert_eq!(j[0]["name"], "memif0");
    assert_eq!(j[0]["link"], "up");
    assert_eq!(j[1]["link"], "down");
    assert_eq!(j[1]["link_reason"], "no peer");
    assert_eq!(j[0]["rx_packets"], 12345);
    assert_eq!(j[0]["detail"]["tx-link-down"], 3);
    assert_eq!(j[0]["detail"]["connects"], 0);
    assert_eq!(j[0]["addresses"][0], "10.0.0.1/24");
}

#[test]
fn show_interfaces_notes_each_receive_queue_mode_of_ports_that_have_them() {
    let one = pb::Interface {
        rx_modes: vec!["interrupt".into()],
        ..port("tap0", 0, true)
    };
    let two = pb::Interface {
        rx_modes: vec!["polling".into(), "interrupt".into()],
        ..port("tap1", 1, true)
    };
    let r = pb::ShowInterfacesReply {
        interfaces: vec![one, two, port("memif0", 2, true)],
    };
    let text = interfaces(&r);
    let notes: Vec<&str> = text.lines().filter(|l| l.contains("rx mode")).collect();
    assert_eq!(
        notes,
        [
            "    rx mode: interrupt",
            "    rx mode: q0 polling, q1 interrupt"
        ],
        "none for a port always polled:\n{text}"
    );
    let j = interfaces_json(&r);
    assert_eq!(j[0]["rx_modes"], serde_json::json!(["interrupt"]));
    assert_eq!(
        j[1]["rx_modes"],
        serde_json::json!(["polling", "interrupt"])
    );
    assert_eq!(j[2]["rx_modes"], serde_json::json!([]));
}

#[test]
fn show_interfaces_gives_an_af_packet_port_its_ring_size() {
    let host0 = pb::Interface {
        r#type: "af_packet".into(),
        ring_kb: 256,
        ..port("host0", 0, true)
    };
    let r = pb::ShowInterfacesReply {
        interfaces: vec![host0, port("memif0", 1, true)],
    };
    let text = interfaces(&r);
    let notes: Vec<&str> = text.lines().filter(|l| l.contains("rings")).collect();
    assert_eq!(notes, ["    rings: 256 KiB each way per queue"], "{text}");
    let j = interfaces_json(&r);
    assert_eq!(j[0]["ring_kb"], 256);
    assert_eq!(j[1]["ring_kb"], 0);
}

#[test]
fn show_runtime_prints_vpp_columns_and_leaves_out_nodes_never_called() {
    let node = |name: &str, calls: u64, packets: u64| pb::NodeRuntime {
        name: name.into(),
        state: "active".into(),
        calls,
        vectors: calls,
        packets,
        clocks: packets * 20,
        clocks_per_packet: if packets > 0 { 20.0 } else { 0.0 },
        vectors_per_call: ratio(packets, calls),
    };
    let r = pb::ShowRuntimeReply {
        tsc_hz: 2_000_000_000,
        workers: vec![pb::WorkerRuntime {
            worker: None,
            core: None,
            nodes: vec![node("ip4-lookup", 4, 1024), node("vxlan4-encap", 0, 0)],
            busy_passes: 4,
            busy_packets: 1024,
            busy_clocks: 102400,
            idle_passes: 10,
            idle_clocks: 500,
        }],
    };
    let text = runtime(&r);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "All threads: 4 busy passes, 100.0 clocks/pkt busy, 50 clocks per empty poll, TSC 2.000 GHz"
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        [
            "Name",
            "State",
            "Calls",
            "Vectors",
            "Packets",
            "Clocks/pkt",
            "Vectors/Call"
        ]
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["ip4-lookup", "active", "4", "4", "1024", "20.00", "256.00"]
    );
    assert_eq!(lines.len(), 3, "{text}");
    let j = runtime_json(&r);
    assert_eq!(j["workers"][0]["worker"], Value::Null);
    assert_eq!(j["workers"][0]["nodes"][0]["packets"], 1024);
    assert_eq!(j["workers"][0]["nodes"][1]["name"], "vxlan4-encap");
}

#[test]
fn show_errors_hides_zero_counters_unless_asked_and_json_keeps_them_all() {
    let e = |reason: &str, count| pb::ErrorCounter {
        node: "ip4-input".into(),
        reason: reason.into(),
        description: "why".into(),
        count,
    };
    let r = pb::ShowErrorsReply {
        errors: vec![e("bad-checksum", 3), e("ttl-expired", 0)],
    };
    let text = errors(&r, false);
    assert!(text.contains("bad-checksum"), "{text}");
    assert!(!text.contains("ttl-expired"), "{text}");
    assert!(errors(&r, true).contains("ttl-expired"));
    assert_eq!(errors_json(&r).as_array().unwrap().len(), 2);
}

#[test]
fn show_fib_names_each_path_by_kind() {
    let p = |kind: &str, nh: &str, i: &str| pb::RoutePath {
        kind: kind.into(),
        next_hop: nh.into(),
        interface: i.into(),
        next_table: String::new(),
    };
    let r = pb::ShowFibReply {
        routes: vec![
            pb::Route {
                prefix: "10.0.0.0/24".into(),
                source: "connected".into(),
                paths: vec![p("glean", "", "memif0")],
                table: "default".into(),
            },
            pb::Route {
                prefix: "10.9.0.0/16".into(),
                source: "static".into(),
                paths: vec![
                    p("rewrite", "10.0.1.2", "memif1"),
                    p("arp", "10.0.1.3", "memif1"),
                ],
                table: "default".into(),
            },
            pb::Route {
                prefix: "192.0.2.0/24".into(),
                source: "static".into(),
                paths: vec![p("drop", "", "")],
                table: "default".into(),
            },
        ],
    };
    let text = fib(&r);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[1].ends_with("connected memif0"), "{text}");
    assert!(
        lines[2].ends_with("via 10.0.1.2 memif1, via 10.0.1.3 memif1 (unresolved)"),
        "{text}"
    );
    assert!(lines[3].ends_with("drop"), "{text}");
    let j = fib_json(&r);
    assert_eq!(j[1]["prefix"], "10.9.0.0/16");
    assert_eq!(j[1]["paths"][0]["next_hop"], "10.0.1.2");
    assert_eq!(j[1]["paths"][0]["interface"], "memif1");
    assert_eq!(j[1]["table"], "default");
    assert!(
        !text.contains("Table"),
        "no table column with one table: {text}"
    );
    // With a route of another table, each row says its table.
    let mut r = r;
    r.routes.push(pb::Route {
        prefix: "10.0.0.0/24".into(),
        source: "connected".into(),
        paths: vec![p("glean", "", "red0")],
        table: "red".into(),
    });
    r.routes.push(pb::Route {
        prefix: "0.0.0.0/0".into(),
        source: "static".into(),
        paths: vec![pb::RoutePath {
            next_table: "default".into(),
            ..p("next-table", "", "")
        }],
        table: "red".into(),
    });
    let text = fib(&r);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("Table"), "{text}");
    assert!(lines[1].starts_with("default"), "{text}");
    assert!(lines[4].starts_with("red "), "{text}");
    assert!(lines[5].ends_with("lookup in table default"), "{text}");
    assert_eq!(fib_json(&r)[4]["paths"][0]["next_table"], "default");
    assert!(fib_json(&r)[0]["paths"][0].get("next_table").is_none());
    let t = tables(&pb::ShowTablesReply {
        tables: vec![pb::RoutingTable {
            name: "red".into(),
            interfaces: vec!["red0".into(), "red1".into()],
        }],
    });
    assert!(t.lines().nth(1).unwrap().ends_with("red0, red1"), "{t}");
    assert_eq!(
        tables_json(&pb::ShowTablesReply::default()),
        serde_json::json!([])
    );
}

#[test]
fn show_trace_prints_each_packet_with_its_lines_or_says_there_are_none() {
    assert!(trace(&pb::ShowTraceReply::default()).starts_with("no packets traced"));
    let r = pb::ShowTraceReply {
        packets: vec![pb::TracedPacket {
            id: 1,
            worker: Some(0),
            nodes: vec!["port-input".into(), "ethernet-input".into()],
            lines: vec!["00:00:00:000001: port-input".into(), "  IP4: …".into()],
        }],
    };
    assert_eq!(
        trace(&r),
        "Packet 1 (worker 0)\n00:00:00:000001: port-input\n  IP4: …\n\n"
    );
    assert_eq!(trace_json(&r)[0]["nodes"][1], "ethernet-input");
}

#[test]
fn small_tables_render_their_rows() {
    let n = neighbors(&pb::ShowNeighborsReply {
        neighbors: vec![
            pb::Neighbor {
                interface: "memif1".into(),
                ip: "10.0.1.2".into(),
                mac: "02:00:00:00:00:02".into(),
                state: String::new(),
            },
            pb::Neighbor {
                interface: "memif1".into(),
                ip: "fe80::2".into(),
                mac: "02:00:00:00:00:02".into(),
                state: "probing 2".into(),
            },
        ],
    });
    let rows: Vec<&str> = n.lines().skip(1).map(str::trim_end).collect();
    assert_eq!(
        rows,
        [
            "memif1     10.0.1.2  02:00:00:00:00:02",
            "memif1     fe80::2   02:00:00:00:00:02  probing 2"
        ]
    );
    let x = cross_connects(&pb::ShowCrossConnectsReply {
        cross_connects: vec![pb::CrossConnect {
            a: "a".into(),
            b: "b".into(),
            kind: "l3".into(),
            peer_a: "10.0.0.2".into(),
            peer_b: "10.0.1.2".into(),
            path: "graph".into(),
        }],
    });
    assert!(
        x.lines()
            .nth(1)
            .unwrap()
            .ends_with("l3    graph  10.0.0.2 ↔ 10.0.1.2"),
        "{x}"
    );
    let c = connections(&pb::ShowConnectionsReply::default());
    assert_eq!(c.lines().count(), 1, "only the header: {c}");
    let m = memif(&pb::ShowMemifReply {
        memifs: vec![pb::Memif {
            name: "memif0".into(),
            role: "master".into(),
            mode: "ethernet".into(),
            socket: "/run/quiver/memif.sock".into(),
            ring_size: 1024,
            buffer_size: 2048,
            queues: 1,
            link_reason: "no peer".into(),
            ..Default::default()
        }],
    });
    let row: Vec<&str> = m.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        row,
        [
            "memif0",
            "0",
            "master",
            "ethernet",
            "/run/quiver/memif.sock",
            "0",
            "down",
            "1",
            "1024",
            "2048",
            "0",
            "0",
            "0",
            "0"
        ]
    );
    assert_eq!(m.lines().nth(2).unwrap(), "    down: no peer");
}
