//! `quiver ctl watch`: a live view of a running Quiver, like `top`. Every interval it reads
//! `show interfaces`, `show runtime` and `show errors` over the admin socket and shows what
//! changed since the last read: per interface packets/s and Mbit/s each way and drops/s, per
//! node packets/s, clocks/packet and vectors/call, and drop counters by reason with their rate.
//!
//! On a terminal each frame redraws the screen in place (cursor home, clear); otherwise (a pipe,
//! a file) the frames follow one another, separated by a blank line. With `--json`, one JSON
//! object per frame and line.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use quiver_admin_api::proto as pb;
use quiver_admin_api::AdminClient;
use serde_json::{json, Value};

use super::render::Table;

/// `quiver ctl watch`'s arguments.
#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Seconds between frames (fractions allowed, at least 0.1).
    #[arg(long, default_value_t = 1.0, value_parser = parse_interval)]
    interval: f64,
    /// Stop after this many frames (default: until interrupted).
    #[arg(long)]
    count: Option<u64>,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.1 => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds ≥ 0.1")),
    }
}

/// What the admin API said at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// When it was taken, in seconds from any fixed origin (only differences matter).
    pub secs: f64,
    /// `show interfaces`.
    pub interfaces: pb::ShowInterfacesReply,
    /// `show runtime` (summed over workers, or per worker: nodes are summed by name here).
    pub runtime: pb::ShowRuntimeReply,
    /// `show errors`.
    pub errors: pb::ShowErrorsReply,
}

/// One interface's line of a frame.
#[derive(Debug, Clone, PartialEq)]
pub struct InterfaceRates {
    /// Interface name.
    pub name: String,
    /// Driver type.
    pub r#type: String,
    /// Link up.
    pub link_up: bool,
    /// Packets/s received, sent; bits/s received, sent; drops/s (rx + tx). `None` in the first
    /// frame or for an interface that just appeared.
    pub rates: Option<[f64; 5]>,
    /// Totals: packets received, sent, dropped (rx + tx).
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Packets dropped (rx + tx).
    pub dropped: u64,
}

/// One graph node's line of a frame.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRates {
    /// Node name.
    pub name: String,
    /// Packets per second over the interval (`None` in the first frame).
    pub packets_per_sec: Option<f64>,
    /// Clocks per packet over the interval (since start in the first frame).
    pub clocks_per_packet: f64,
    /// Packets per call over the interval (since start in the first frame).
    pub vectors_per_call: f64,
}

/// One drop reason's line of a frame.
#[derive(Debug, Clone, PartialEq)]
pub struct DropRates {
    /// Node that counted the drops.
    pub node: String,
    /// Reason.
    pub reason: String,
    /// What the counter counts (a few count events, "not a drop").
    pub description: String,
    /// Total so far.
    pub count: u64,
    /// Per second over the interval (`None` in the first frame).
    pub per_sec: Option<f64>,
}

/// Everything one frame shows: the rates between two snapshots (or totals only, for the first).
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Seconds between the snapshots (`None`: the first frame).
    pub interval: Option<f64>,
    /// Interfaces in the order Quiver lists them.
    pub interfaces: Vec<InterfaceRates>,
    /// Nodes that handled packets (in the interval, or ever for the first frame).
    pub nodes: Vec<NodeRates>,
    /// Busy clocks per packet of the workers, over the interval (since start in the first frame).
    pub busy_clocks_per_packet: f64,
    /// Drop reasons with a non-zero count.
    pub drops: Vec<DropRates>,
}

/// A counter's increase; a counter that went down was cleared, so all of it is new.
fn delta(cur: u64, prev: u64) -> u64 {
    if cur >= prev {
        cur - prev
    } else {
        cur
    }
}

fn per(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Node counters summed over workers, by name, in first-seen order.
fn nodes_by_name(r: &pb::ShowRuntimeReply) -> Vec<pb::NodeRuntime> {
    let mut out: Vec<pb::NodeRuntime> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for n in r.workers.iter().flat_map(|w| &w.nodes) {
        let k = *at.entry(n.name.clone()).or_insert_with(|| {
            out.push(pb::NodeRuntime {
                name: n.name.clone(),
                ..Default::default()
            });
            out.len() - 1
        });
        out[k].calls += n.calls;
        out[k].packets += n.packets;
        out[k].clocks += n.clocks;
    }
    out
}

/// Busy clocks and packets summed over workers.
fn busy(r: &pb::ShowRuntimeReply) -> (u64, u64) {
    r.workers
        .iter()
        .fold((0, 0), |(c, p), w| (c + w.busy_clocks, p + w.busy_packets))
}

/// A counter's increase per second over `dt` (per 1 s when there is no interval).
fn rate(c: u64, p: u64, dt: Option<f64>) -> f64 {
    delta(c, p) as f64 / dt.unwrap_or(1.0)
}

/// Each interface's rates since `prev` (none for one `prev` did not list) and totals.
fn interface_rates(
    prev: Option<&Snapshot>,
    cur: &Snapshot,
    dt: Option<f64>,
) -> Vec<InterfaceRates> {
    let rate = |c: u64, p: u64| rate(c, p, dt);
    let old_ifs: HashMap<&str, &pb::Interface> = prev
        .map(|p| {
            p.interfaces
                .interfaces
                .iter()
                .map(|i| (i.name.as_str(), i))
                .collect()
        })
        .unwrap_or_default();
    cur.interfaces
        .interfaces
        .iter()
        .map(|i| InterfaceRates {
            name: i.name.clone(),
            r#type: i.r#type.clone(),
            link_up: i.link_up,
            rates: old_ifs.get(i.name.as_str()).map(|o| {
                [
                    rate(i.rx_packets, o.rx_packets),
                    rate(i.tx_packets, o.tx_packets),
                    rate(i.rx_bytes, o.rx_bytes) * 8.0,
                    rate(i.tx_bytes, o.tx_bytes) * 8.0,
                    rate(i.rx_dropped + i.tx_dropped, o.rx_dropped + o.tx_dropped),
                ]
            }),
            rx_packets: i.rx_packets,
            tx_packets: i.tx_packets,
            dropped: i.rx_dropped + i.tx_dropped,
        })
        .collect()
}

/// The nodes that handled packets since `prev` (ever, without one), with their rates.
fn node_rates(prev: Option<&Snapshot>, cur: &Snapshot, dt: Option<f64>) -> Vec<NodeRates> {
    let old_nodes: HashMap<String, pb::NodeRuntime> = prev
        .map(|p| {
            nodes_by_name(&p.runtime)
                .into_iter()
                .map(|n| (n.name.clone(), n))
                .collect()
        })
        .unwrap_or_default();
    nodes_by_name(&cur.runtime)
        .into_iter()
        .filter_map(|n| {
            let o = old_nodes.get(&n.name).cloned().unwrap_or_default();
            let (calls, packets, clocks) = match prev {
                Some(_) => (
                    delta(n.calls, o.calls),
                    delta(n.packets, o.packets),
                    delta(n.clocks, o.clocks),
                ),
                None => (n.calls, n.packets, n.clocks),
            };
            (packets > 0).then(|| NodeRates {
                name: n.name,
                packets_per_sec: dt.map(|dt| packets as f64 / dt),
                clocks_per_packet: per(clocks, packets),
                vectors_per_call: per(packets, calls),
            })
        })
        .collect()
}

/// The drop reasons with a non-zero count, with their rates since `prev`.
fn drop_rates(prev: Option<&Snapshot>, cur: &Snapshot, dt: Option<f64>) -> Vec<DropRates> {
    let rate = |c: u64, p: u64| rate(c, p, dt);
    let old_errors: HashMap<(&str, &str), u64> = prev
        .map(|p| {
            p.errors
                .errors
                .iter()
                .map(|e| ((e.node.as_str(), e.reason.as_str()), e.count))
                .collect()
        })
        .unwrap_or_default();
    cur.errors
        .errors
        .iter()
        .filter(|e| e.count > 0)
        .map(|e| DropRates {
            node: e.node.clone(),
            reason: e.reason.clone(),
            description: e.description.clone(),
            count: e.count,
            per_sec: dt.map(|_| {
                let old = old_errors
                    .get(&(e.node.as_str(), e.reason.as_str()))
                    .copied()
                    .unwrap_or(0);
                rate(e.count, old)
            }),
        })
        .collect()
}

impl Frame {
    /// The frame between `prev` (the previous snapshot, if any) and `cur`.
    pub fn between(prev: Option<&Snapshot>, cur: &Snapshot) -> Frame {
        let dt = prev.map(|p| cur.secs - p.secs).filter(|dt| *dt > 0.0);
        let prev = prev.filter(|_| dt.is_some());
        let (clocks, packets) = busy(&cur.runtime);
        let (old_clocks, old_packets) = prev.map(|p| busy(&p.runtime)).unwrap_or((0, 0));
        let busy_clocks_per_packet = per(delta(clocks, old_clocks), delta(packets, old_packets));
        Frame {
            interval: dt,
            interfaces: interface_rates(prev, cur, dt),
            nodes: node_rates(prev, cur, dt),
            busy_clocks_per_packet,
            drops: drop_rates(prev, cur, dt),
        }
    }

    /// The frame as text: three tables under a title line.
    pub fn render(&self, title: &str) -> String {
        let mut out = String::new();
        let span = match self.interval {
            Some(dt) => format!("rates over the last {dt:.1} s"),
            None => "first sample: totals only, rates from the next frame".into(),
        };
        let _ = writeln!(out, "{title} ({span})\n");
        let mut t = Table::new(&[
            "Interface",
            "Type",
            "Link",
            ">RX pps",
            ">RX Mbps",
            ">TX pps",
            ">TX Mbps",
            ">Drops/s",
            ">RX packets",
            ">TX packets",
            ">Drops",
        ]);
        for i in &self.interfaces {
            let r = |k: usize| i.rates.map(|r| r[k]);
            t.row(vec![
                i.name.clone(),
                i.r#type.clone(),
                if i.link_up { "up" } else { "down" }.into(),
                count_rate(r(0)),
                mbps(r(2)),
                count_rate(r(1)),
                mbps(r(3)),
                count_rate(r(4)),
                i.rx_packets.to_string(),
                i.tx_packets.to_string(),
                i.dropped.to_string(),
            ]);
        }
        out += &t.render();
        let _ = writeln!(
            out,
            "\nGraph nodes ({:.1} busy clocks/packet over all nodes)",
            self.busy_clocks_per_packet
        );
        let mut t = Table::new(&["Node", ">Packets/s", ">Clocks/pkt", ">Vectors/call"]);
        for n in &self.nodes {
            t.row(vec![
                n.name.clone(),
                count_rate(n.packets_per_sec),
                format!("{:.1}", n.clocks_per_packet),
                format!("{:.1}", n.vectors_per_call),
            ]);
        }
        out += &t.render();
        out += "\nDrops by reason (and the events `show errors` counts)\n";
        if self.drops.is_empty() {
            out += "none\n";
        } else {
            let mut t = Table::new(&["Node", "Reason", ">Count", ">Per s", "Description"]);
            for d in &self.drops {
                t.row(vec![
                    d.node.clone(),
                    d.reason.clone(),
                    d.count.to_string(),
                    count_rate(d.per_sec),
                    d.description.clone(),
                ]);
            }
            out += &t.render();
        }
        out
    }

    /// The frame as one JSON object.
    pub fn json(&self) -> Value {
        let opt = |v: Option<f64>| v.map_or(Value::Null, |v| json!(v));
        json!({
            "interval_secs": self.interval,
            "interfaces": self.interfaces.iter().map(|i| {
                let r = |k: usize| opt(i.rates.map(|r| r[k]));
                json!({
                    "name": i.name,
                    "type": i.r#type,
                    "link": if i.link_up { "up" } else { "down" },
                    "rx_pps": r(0),
                    "tx_pps": r(1),
                    "rx_bps": r(2),
                    "tx_bps": r(3),
                    "drops_per_sec": r(4),
                    "rx_packets": i.rx_packets,
                    "tx_packets": i.tx_packets,
                    "dropped": i.dropped,
                })
            }).collect::<Vec<_>>(),
            "busy_clocks_per_packet": self.busy_clocks_per_packet,
            "nodes": self.nodes.iter().map(|n| json!({
                "name": n.name,
                "packets_per_sec": opt(n.packets_per_sec),
                "clocks_per_packet": n.clocks_per_packet,
                "vectors_per_call": n.vectors_per_call,
            })).collect::<Vec<_>>(),
            "drops": self.drops.iter().map(|d| json!({
                "node": d.node,
                "reason": d.reason,
                "description": d.description,
                "count": d.count,
                "per_sec": opt(d.per_sec),
            })).collect::<Vec<_>>(),
        })
    }
}

/// A count per second, short: `0`, `950`, `12.3k`, `1.25M`; `-` when unknown.
fn count_rate(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v < 1e3 => format!("{v:.0}"),
        Some(v) if v < 1e6 => format!("{:.1}k", v / 1e3),
        Some(v) => format!("{:.2}M", v / 1e6),
    }
}

/// Bits per second as Mbit/s with two decimals; `-` when unknown.
fn mbps(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.2}", v / 1e6))
}

/// The time of day (UTC), for the title.
fn clock() -> String {
    let s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        % 86_400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
}

/// Moves the cursor home, draws `text` clearing each line's rest, then clears below.
fn in_place(text: &str) -> String {
    let mut out = String::from("\x1b[H");
    for line in text.lines() {
        out += line;
        out += "\x1b[K\n";
    }
    out + "\x1b[J"
}

/// Reads the three replies.
fn snapshot(client: &AdminClient, origin: Instant) -> Result<Snapshot, String> {
    let mut s = client.stub();
    let lost = |e: quiver_admin_api::Status| format!("quiver stopped answering: {}", e.message());
    let interfaces = client
        .block_on(s.show_interfaces(pb::Empty {}))
        .map_err(lost)?
        .into_inner();
    let secs = origin.elapsed().as_secs_f64();
    let runtime = client
        .block_on(s.show_runtime(pb::ShowRuntimeRequest { per_worker: false }))
        .map_err(lost)?
        .into_inner();
    let errors = client
        .block_on(s.show_errors(pb::Empty {}))
        .map_err(lost)?
        .into_inner();
    Ok(Snapshot {
        secs,
        interfaces,
        runtime,
        errors,
    })
}

/// Runs `quiver ctl watch` until interrupted, `--count` frames, or Quiver stops answering.
pub fn run(
    client: &AdminClient,
    args: &WatchArgs,
    json: bool,
    socket: &Path,
) -> Result<(), String> {
    let tty = std::io::stdout().is_terminal() && !json;
    let origin = Instant::now();
    let interval = Duration::from_secs_f64(args.interval);
    let mut prev: Option<Snapshot> = None;
    let mut frames = 0u64;
    let mut stdout = std::io::stdout().lock();
    if tty {
        let _ = write!(stdout, "\x1b[2J");
    }
    loop {
        let cur = snapshot(client, origin)?;
        let frame = Frame::between(prev.as_ref(), &cur);
        let written = if json {
            writeln!(stdout, "{}", frame.json())
        } else {
            let title = format!(
                "quiver ctl watch: {} every {} s, {}",
                socket.display(),
                args.interval,
                clock()
            );
            let text = frame.render(&title);
            if tty {
                write!(stdout, "{}", in_place(&text))
            } else {
                writeln!(stdout, "{text}")
            }
        };
        // The reader went away (`| head`): stop quietly.
        if written.and_then(|()| stdout.flush()).is_err() {
            return Ok(());
        }
        frames += 1;
        if args.count.is_some_and(|c| frames >= c) {
            return Ok(());
        }
        prev = Some(cur);
        let next = origin + interval.mul_f64(frames as f64);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
