//! What `quiver ctl` prints: human tables, or JSON with stable field names (`--json`).

use std::fmt::Write;

use quiver_admin_api::proto as pb;
use serde_json::{json, Map, Value};

/// A text table: columns as wide as their widest cell, numbers right-aligned.
pub struct Table {
    headers: Vec<&'static str>,
    right: Vec<bool>,
    rows: Vec<Row>,
}

enum Row {
    Cells(Vec<String>),
    /// A line under the previous row, indented (a reason, an address, a counter).
    Note(String),
}

impl Table {
    /// A table with these columns; a header starting with `>` is right-aligned.
    pub fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.trim_start_matches('>')).collect(),
            right: headers.iter().map(|h| h.starts_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(Row::Cells(cells));
    }

    /// Adds an indented line under the last row.
    pub fn note(&mut self, text: String) {
        self.rows.push(Row::Note(text));
    }

    /// The table, one line per row, no trailing spaces.
    pub fn render(&self) -> String {
        let mut width: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            if let Row::Cells(c) = r {
                for (w, cell) in width.iter_mut().zip(c) {
                    *w = (*w).max(cell.chars().count());
                }
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (k, cell) in cells.iter().enumerate() {
                let w = width.get(k).copied().unwrap_or(0);
                if k > 0 {
                    s.push_str("  ");
                }
                if self.right.get(k).copied().unwrap_or(false) {
                    let _ = write!(s, "{cell:>w$}");
                } else {
                    let _ = write!(s, "{cell:<w$}");
                }
            }
            s.trim_end().to_string()
        };
        let headers: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        let mut out = line(&headers) + "\n";
        for r in &self.rows {
            match r {
                Row::Cells(c) => out += &(line(c) + "\n"),
                Row::Note(t) => out += &format!("    {t}\n"),
            }
        }
        out
    }
}

fn link(up: bool) -> &'static str {
    if up {
        "up"
    } else {
        "down"
    }
}

fn counters(c: &[pb::Counter]) -> Value {
    Value::Object(
        c.iter()
            .map(|c| (c.name.clone(), json!(c.value)))
            .collect::<Map<String, Value>>(),
    )
}

/// `show interfaces`.
pub fn interfaces(r: &pb::ShowInterfacesReply) -> String {
    let mut t = Table::new(&[
        "Name",
        ">Idx",
        "Type",
        "Link",
        "Mode",
        ">MTU",
        "MAC",
        ">RX packets",
        ">RX bytes",
        ">TX packets",
        ">TX bytes",
        ">RX drops",
        ">TX drops",
    ]);
    for i in &r.interfaces {
        t.row(vec![
            i.name.clone(),
            i.index.to_string(),
            i.r#type.clone(),
            link(i.link_up).into(),
            i.mode.clone(),
            i.mtu.to_string(),
            i.mac.clone(),
            i.rx_packets.to_string(),
            i.rx_bytes.to_string(),
            i.tx_packets.to_string(),
            i.tx_bytes.to_string(),
            i.rx_dropped.to_string(),
            i.tx_dropped.to_string(),
        ]);
        if !i.link_up && !i.link_reason.is_empty() {
            t.note(format!("down: {}", i.link_reason));
        }
        if !i.addresses.is_empty() {
            t.note(format!("addresses: {}", i.addresses.join(", ")));
        }
        if let Some(modes) = rx_modes(&i.rx_modes) {
            t.note(format!("rx mode: {modes}"));
        }
        if i.ring_kb != 0 {
            t.note(format!("rings: {} KiB each way per queue", i.ring_kb));
        }
        for c in i.detail.iter().filter(|c| c.value != 0) {
            t.note(format!("{}: {}", c.name, c.value));
        }
    }
    t.render()
}

/// A port's receive queues' modes: `interrupt` for one queue, `q0 polling, q1 interrupt` for
/// several; `None` for ports whose queues are always polled.
fn rx_modes(modes: &[String]) -> Option<String> {
    match modes {
        [] => None,
        [one] => Some(one.clone()),
        _ => Some(
            modes
                .iter()
                .enumerate()
                .map(|(q, m)| format!("q{q} {m}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
    }
}

/// `show interfaces --json`.
pub fn interfaces_json(r: &pb::ShowInterfacesReply) -> Value {
    Value::Array(
        r.interfaces
            .iter()
            .map(|i| {
                json!({
                    "index": i.index,
                    "name": i.name,
                    "type": i.r#type,
                    "mac": i.mac,
                    "mtu": i.mtu,
                    "mode": i.mode,
                    "link": link(i.link_up),
                    "link_reason": i.link_reason,
                    "addresses": i.addresses,
                    "rx_packets": i.rx_packets,
                    "rx_bytes": i.rx_bytes,
                    "tx_packets": i.tx_packets,
                    "tx_bytes": i.tx_bytes,
                    "rx_dropped": i.rx_dropped,
                    "tx_dropped": i.tx_dropped,
                    "detail": counters(&i.detail),
                    "rx_modes": i.rx_modes,
                    "ring_kb": i.ring_kb,
                })
            })
            .collect(),
    )
}

fn worker_title(w: &pb::WorkerRuntime) -> String {
    match (w.worker, w.core) {
        (Some(n), Some(c)) => format!("Thread {n} (core {c})"),
        (Some(n), None) => format!("Thread {n}"),
        (None, _) => "All threads".into(),
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// `show runtime`: like VPP's, one table per worker (or one for the sum); nodes never called
/// are left out.
pub fn runtime(r: &pb::ShowRuntimeReply) -> String {
    let mut out = String::new();
    for (k, w) in r.workers.iter().enumerate() {
        if k > 0 {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "{}: {} busy passes, {:.1} clocks/pkt busy, {:.0} clocks per empty poll, TSC {:.3} GHz",
            worker_title(w),
            w.busy_passes,
            ratio(w.busy_clocks, w.busy_packets),
            ratio(w.idle_clocks, w.idle_passes),
            r.tsc_hz as f64 / 1e9
        );
        let mut t = Table::new(&[
            "Name",
            "State",
            ">Calls",
            ">Vectors",
            ">Packets",
            ">Clocks/pkt",
            ">Vectors/Call",
        ]);
        for n in w.nodes.iter().filter(|n| n.calls > 0) {
            t.row(vec![
                n.name.clone(),
                n.state.clone(),
                n.calls.to_string(),
                n.vectors.to_string(),
                n.packets.to_string(),
                format!("{:.2}", n.clocks_per_packet),
                format!("{:.2}", n.vectors_per_call),
            ]);
        }
        out += &t.render();
    }
    out
}

/// `show runtime --json`.
pub fn runtime_json(r: &pb::ShowRuntimeReply) -> Value {
    json!({
        "tsc_hz": r.tsc_hz,
        "workers": r.workers.iter().map(|w| json!({
            "worker": w.worker,
            "core": w.core,
            "busy_passes": w.busy_passes,
            "busy_packets": w.busy_packets,
            "busy_clocks": w.busy_clocks,
            "idle_passes": w.idle_passes,
            "idle_clocks": w.idle_clocks,
            "nodes": w.nodes.iter().map(|n| json!({
                "name": n.name,
                "state": n.state,
                "calls": n.calls,
                "vectors": n.vectors,
                "packets": n.packets,
                "clocks": n.clocks,
                "clocks_per_packet": n.clocks_per_packet,
                "vectors_per_call": n.vectors_per_call,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// `show errors`: non-zero counters (all with `all`).
pub fn errors(r: &pb::ShowErrorsReply, all: bool) -> String {
    let mut t = Table::new(&[">Count", "Node", "Reason", "Description"]);
    for e in r.errors.iter().filter(|e| all || e.count > 0) {
        t.row(vec![
            e.count.to_string(),
            e.node.clone(),
            e.reason.clone(),
            e.description.clone(),
        ]);
    }
    t.render()
}

/// `show errors --json`: every counter, zero or not.
pub fn errors_json(r: &pb::ShowErrorsReply) -> Value {
    Value::Array(
        r.errors
            .iter()
            .map(|e| {
                json!({
                    "node": e.node,
                    "reason": e.reason,
                    "description": e.description,
                    "count": e.count,
                })
            })
            .collect(),
    )
}

fn path_text(p: &pb::RoutePath) -> String {
    match p.kind.as_str() {
        "rewrite" => format!("via {} {}", p.next_hop, p.interface),
        "arp" => format!("via {} {} (unresolved)", p.next_hop, p.interface),
        "glean" => format!("connected {}", p.interface),
        "next-table" => format!("lookup in table {}", p.next_table),
        other => other.to_string(),
    }
}

/// `show fib`.
pub fn fib(r: &pb::ShowFibReply) -> String {
    // A table column only when some route is in another table than the default one.
    let tables = r
        .routes
        .iter()
        .any(|x| !x.table.is_empty() && x.table != "default");
    let mut t = if tables {
        Table::new(&["Table", "Prefix", "Source", "Paths"])
    } else {
        Table::new(&["Prefix", "Source", "Paths"])
    };
    for route in &r.routes {
        let paths: Vec<String> = route.paths.iter().map(path_text).collect();
        let mut row = vec![route.prefix.clone(), route.source.clone(), paths.join(", ")];
        if tables {
            row.insert(0, route.table.clone());
        }
        t.row(row);
    }
    t.render()
}

/// `show tables`.
pub fn tables(r: &pb::ShowTablesReply) -> String {
    let mut t = Table::new(&["Table", "Interfaces"]);
    for table in &r.tables {
        t.row(vec![table.name.clone(), table.interfaces.join(", ")]);
    }
    t.render()
}

/// `show tables --json`.
pub fn tables_json(r: &pb::ShowTablesReply) -> Value {
    Value::Array(
        r.tables
            .iter()
            .map(|t| json!({"name": t.name, "interfaces": t.interfaces}))
            .collect(),
    )
}

/// One path of `show fib --json`: `next_table` only for a next-table path.
fn path_json(p: &pb::RoutePath) -> Value {
    let mut v = json!({
        "kind": p.kind,
        "next_hop": p.next_hop,
        "interface": p.interface,
    });
    if !p.next_table.is_empty() {
        v["next_table"] = json!(p.next_table);
    }
    v
}

/// `show fib --json`.
pub fn fib_json(r: &pb::ShowFibReply) -> Value {
    Value::Array(
        r.routes
            .iter()
            .map(|route| {
                json!({
                    "table": route.table,
                    "prefix": route.prefix,
                    "source": route.source,
                    "paths": route.paths.iter().map(path_json).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// `show neighbors`.
pub fn neighbors(r: &pb::ShowNeighborsReply) -> String {
    let mut t = Table::new(&["Interface", "IP", "MAC", "State"]);
    for n in &r.neighbors {
        t.row(vec![
            n.interface.clone(),
            n.ip.clone(),
            n.mac.clone(),
            n.state.clone(),
        ]);
    }
    t.render()
}

/// `show neighbors --json`.
pub fn neighbors_json(r: &pb::ShowNeighborsReply) -> Value {
    Value::Array(
        r.neighbors
            .iter()
            .map(|n| json!({"interface": n.interface, "ip": n.ip, "mac": n.mac, "state": n.state}))
            .collect(),
    )
}

/// `show cross-connects`.
pub fn cross_connects(r: &pb::ShowCrossConnectsReply) -> String {
    let mut t = Table::new(&["A", "B", "Kind", "Path", "Peers"]);
    for x in &r.cross_connects {
        let peers = if x.kind == "l3" {
            format!("{} ↔ {}", x.peer_a, x.peer_b)
        } else {
            String::new()
        };
        t.row(vec![
            x.a.clone(),
            x.b.clone(),
            x.kind.clone(),
            x.path.clone(),
            peers,
        ]);
    }
    t.render()
}

/// `show cross-connects --json`.
pub fn cross_connects_json(r: &pb::ShowCrossConnectsReply) -> Value {
    Value::Array(
        r.cross_connects
            .iter()
            .map(|x| {
                json!({"a": x.a, "b": x.b, "kind": x.kind, "path": x.path, "peer_a": x.peer_a, "peer_b": x.peer_b})
            })
            .collect(),
    )
}

/// `show memif`.
pub fn memif(r: &pb::ShowMemifReply) -> String {
    let mut t = Table::new(&[
        "Name",
        ">Idx",
        "Role",
        "Mode",
        "Socket",
        ">Id",
        "Link",
        ">Queues",
        ">Ring",
        ">Buffer",
        ">RX packets",
        ">TX packets",
        ">RX drops",
        ">TX drops",
    ]);
    for m in &r.memifs {
        t.row(vec![
            m.name.clone(),
            m.index.to_string(),
            m.role.clone(),
            m.mode.clone(),
            m.socket.clone(),
            m.id.to_string(),
            link(m.link_up).into(),
            memif_queues(m),
            m.ring_size.to_string(),
            m.buffer_size.to_string(),
            m.rx_packets.to_string(),
            m.tx_packets.to_string(),
            m.rx_dropped.to_string(),
            m.tx_dropped.to_string(),
        ]);
        if !m.link_up && !m.link_reason.is_empty() {
            t.note(format!("down: {}", m.link_reason));
        }
        if !m.last_refusal.is_empty() {
            t.note(format!("last refused: {}", m.last_refusal));
        }
        for c in m.detail.iter().filter(|c| c.value != 0) {
            t.note(format!("{}: {}", c.name, c.value));
        }
    }
    t.render()
}

/// A memif's queues: receive/transmit as connected, else the configured pairs.
fn memif_queues(m: &pb::Memif) -> String {
    if m.link_up {
        format!("{}/{}", m.rx_queues, m.tx_queues)
    } else {
        m.queues.to_string()
    }
}

/// `show memif --json`.
pub fn memif_json(r: &pb::ShowMemifReply) -> Value {
    Value::Array(
        r.memifs
            .iter()
            .map(|m| {
                json!({
                    "name": m.name,
                    "index": m.index,
                    "role": m.role,
                    "socket": m.socket,
                    "id": m.id,
                    "mode": m.mode,
                    "link": link(m.link_up),
                    "link_reason": m.link_reason,
                    "ring_size": m.ring_size,
                    "buffer_size": m.buffer_size,
                    "queues": m.queues,
                    "rx_queues": m.rx_queues,
                    "tx_queues": m.tx_queues,
                    "configured_ring_size": m.configured_ring_size,
                    "configured_buffer_size": m.configured_buffer_size,
                    "last_refusal": m.last_refusal,
                    "rx_packets": m.rx_packets,
                    "rx_bytes": m.rx_bytes,
                    "tx_packets": m.tx_packets,
                    "tx_bytes": m.tx_bytes,
                    "rx_dropped": m.rx_dropped,
                    "tx_dropped": m.tx_dropped,
                    "detail": counters(&m.detail),
                })
            })
            .collect(),
    )
}

/// `show connections`.
pub fn connections(r: &pb::ShowConnectionsReply) -> String {
    let mut t = Table::new(&[
        "Id",
        "Network service",
        "State",
        "Client",
        "Endpoint",
        ">Expires",
    ]);
    for c in &r.connections {
        t.row(vec![
            c.id.clone(),
            c.network_service.clone(),
            c.state.clone(),
            format!("{} {}", c.client_mechanism, c.client_interface),
            format!("{} {}", c.endpoint_mechanism, c.endpoint_interface),
            if c.expires_unix == 0 {
                "never".into()
            } else {
                c.expires_unix.to_string()
            },
        ]);
    }
    t.render()
}

/// `show connections --json`.
pub fn connections_json(r: &pb::ShowConnectionsReply) -> Value {
    Value::Array(
        r.connections
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "network_service": c.network_service,
                    "state": c.state,
                    "client_mechanism": c.client_mechanism,
                    "client_interface": c.client_interface,
                    "endpoint_mechanism": c.endpoint_mechanism,
                    "endpoint_interface": c.endpoint_interface,
                    "expires_unix": c.expires_unix,
                })
            })
            .collect(),
    )
}

/// `show trace`: each packet's records, as the data plane formatted them.
pub fn trace(r: &pb::ShowTraceReply) -> String {
    if r.packets.is_empty() {
        return "no packets traced (trace add <input node> <count> first)\n".into();
    }
    let mut out = String::new();
    for p in &r.packets {
        match p.worker {
            Some(w) => {
                let _ = writeln!(out, "Packet {} (worker {w})", p.id);
            }
            None => {
                let _ = writeln!(out, "Packet {}", p.id);
            }
        }
        for l in &p.lines {
            let _ = writeln!(out, "{l}");
        }
        out.push('\n');
    }
    out
}

/// `show trace --json`.
pub fn trace_json(r: &pb::ShowTraceReply) -> Value {
    Value::Array(
        r.packets
            .iter()
            .map(|p| json!({"id": p.id, "worker": p.worker, "nodes": p.nodes, "lines": p.lines}))
            .collect(),
    )
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
