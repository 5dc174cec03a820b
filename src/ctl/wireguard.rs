//! `quiver ctl show wireguard`: WireGuard tunnels, one table of peers each.

use quiver_admin_api::proto as pb;
use serde_json::{json, Value};

use super::render::Table;

/// Seconds since the last handshake, as `wg show` says it.
fn ago(unix: u64, now: u64) -> String {
    if unix == 0 {
        return "never".into();
    }
    format!("{}s ago", now.saturating_sub(unix))
}

/// `show wireguard` as text, `now` in seconds since the epoch.
pub fn table_at(r: &pb::ShowWireguardReply, now: u64) -> String {
    if r.tunnels.is_empty() {
        return "no WireGuard tunnels ([[wireguard]] in quiver.toml)\n".into();
    }
    let mut out = String::new();
    for t in &r.tunnels {
        out.push_str(&format!(
            "{}: listening on {}, public key {}\n  punted {}, bad MACs {}, refused {}\n",
            t.name, t.listen, t.public_key, t.punts, t.bad_macs, t.refused
        ));
        let mut tab = Table::new(&[
            "Peer",
            "Endpoint",
            "Allowed IPs",
            "Handshake",
            ">Handshakes",
            ">Rekeys",
            ">Replays",
            ">Bad tags",
            ">Rx bytes",
            ">Tx bytes",
        ]);
        for p in &t.peers {
            tab.row(vec![
                p.public_key.clone(),
                p.endpoint.clone(),
                p.allowed_ips.join(","),
                ago(p.last_handshake_unix, now),
                p.handshakes.to_string(),
                p.rekeys.to_string(),
                p.replays.to_string(),
                p.bad_tags.to_string(),
                p.rx_bytes.to_string(),
                p.tx_bytes.to_string(),
            ]);
        }
        out.push_str(&tab.render());
    }
    out
}

/// `show wireguard` as text.
pub fn table(r: &pb::ShowWireguardReply) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    table_at(r, now)
}

/// `show wireguard --json`.
pub fn table_json(r: &pb::ShowWireguardReply) -> Value {
    Value::Array(
        r.tunnels
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "public_key": t.public_key,
                    "listen": t.listen,
                    "bad_macs": t.bad_macs,
                    "refused": t.refused,
                    "punts": t.punts,
                    "peers": t.peers.iter().map(|p| json!({
                        "public_key": p.public_key,
                        "endpoint": p.endpoint,
                        "allowed_ips": p.allowed_ips,
                        "last_handshake_unix": p.last_handshake_unix,
                        "handshakes": p.handshakes,
                        "rekeys": p.rekeys,
                        "initiations_sent": p.initiations_sent,
                        "replays": p.replays,
                        "bad_tags": p.bad_tags,
                        "rx_bytes": p.rx_bytes,
                        "tx_bytes": p.tx_bytes,
                        "rx_packets": p.rx_packets,
                        "tx_packets": p.tx_packets,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tunnels_render_with_their_peers() {
        let r = pb::ShowWireguardReply {
            tunnels: vec![pb::WireguardTunnel {
                name: "wg0".into(),
                public_key: "PUB".into(),
                listen: "192.0.2.1:51820".into(),
                punts: 3,
                peers: vec![pb::WireguardPeer {
                    public_key: "PEER".into(),
                    endpoint: "192.0.2.2:51820".into(),
                    allowed_ips: vec!["10.9.0.0/24".into()],
                    last_handshake_unix: 1000,
                    handshakes: 2,
                    replays: 5,
                    rx_bytes: 84,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let text = table_at(&r, 1042);
        assert!(text.starts_with("wg0: listening on 192.0.2.1:51820, public key PUB\n"));
        assert!(text.contains("  punted 3, bad MACs 0, refused 0\n"));
        let row = text
            .lines()
            .find(|l| l.starts_with("PEER"))
            .expect("a peer row");
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cols,
            [
                "PEER",
                "192.0.2.2:51820",
                "10.9.0.0/24",
                "42s",
                "ago",
                "2",
                "0",
                "5",
                "0",
                "84",
                "0"
            ]
        );
        let j = table_json(&r);
        assert_eq!(j[0]["peers"][0]["replays"], 5);
        assert_eq!(
            table_at(&pb::ShowWireguardReply::default(), 0),
            "no WireGuard tunnels ([[wireguard]] in quiver.toml)\n"
        );
    }
}
