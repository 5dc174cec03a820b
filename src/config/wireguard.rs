//! `[[wireguard]]`: WireGuard tunnels.
//!
//! ```toml
//! [[wireguard]]
//! name = "wg0"
//! private_key_file = "/etc/quiver/wg0.key"   # or private_key = "<base64>"
//! listen_port = 51820
//! address = "192.0.2.1"                       # one of Quiver's addresses (the underlay),
//!                                             # IPv4 or IPv6 ("2001:db8::1")
//! [[wireguard.peers]]
//! public_key = "<base64>"
//! endpoint = "192.0.2.2:51820"               # of the address's family: "[2001:db8::2]:51820"
//! allowed_ips = ["10.9.0.2/32"]
//! persistent_keepalive = 25
//! ```
//! Route into the tunnel with `[[route]]` (`via` any address, `interface` the tunnel's name) or
//! an L3 cross-connect; its interface carries IP payload (IPv4 and IPv6, no L2 header) with
//! an MTU below `underlay_mtu` (default 1500) by WireGuard's overhead: 60 bytes over IPv4, 80
//! over IPv6. Listed in a `[[table]]`'s `interfaces`, the tunnel is that table's: what it
//! decrypts is routed there and the routes into it are that table's (`table = "red"`); its
//! underlay (`address`, the peers' endpoints) stays the default table's.

use serde::Deserialize;

/// `[[wireguard]]`: one tunnel.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct WireguardSection {
    /// The tunnel's interface name.
    pub name: String,
    /// Our private key, base64 as `wg genkey` writes it.
    pub private_key: String,
    /// Or a file holding it.
    pub private_key_file: String,
    /// The UDP port we listen on.
    pub listen_port: u16,
    /// Our underlay address (one of Quiver's), IPv4 or IPv6: the family of the tunnel's outer
    /// headers and of its peers' endpoints.
    pub address: String,
    /// The underlay's MTU (the tunnel's is 60 less over IPv4, 80 over IPv6). 0: 1500.
    pub underlay_mtu: u16,
    /// The peers.
    pub peers: Vec<WireguardPeerSection>,
}

/// `[[wireguard.peers]]`: one peer.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct WireguardPeerSection {
    /// Its public key, base64.
    pub public_key: String,
    /// `IPv4:port` or `[IPv6]:port`, of the tunnel's address's family; empty: learned from
    /// its first handshake.
    pub endpoint: String,
    /// IPv4 and IPv6 prefixes (`a.b.c.d/len`, `x:y::/len`) it may send from and is sent to.
    pub allowed_ips: Vec<String>,
    /// Seconds between keepalives (0: none).
    pub persistent_keepalive: u16,
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn tunnels_and_peers_parse_and_unknown_keys_are_refused() {
        let cfg = Config::parse(
            r#"
[[wireguard]]
name = "wg0"
private_key = "k"
listen_port = 51820
address = "192.0.2.1"
[[wireguard.peers]]
public_key = "p"
endpoint = "192.0.2.2:51820"
allowed_ips = ["10.9.0.0/24", "10.8.0.1/32"]
persistent_keepalive = 25
"#,
        )
        .unwrap();
        let w = &cfg.wireguard[0];
        assert_eq!(
            (w.name.as_str(), w.listen_port, w.underlay_mtu),
            ("wg0", 51820, 0)
        );
        assert_eq!(w.peers[0].allowed_ips.len(), 2);
        assert_eq!(w.peers[0].persistent_keepalive, 25);
        assert!(Config::parse("[[wireguard]]\nname = \"a\"\nport = 1\n").is_err());
        assert!(Config::parse("[[wireguard]]\n[[wireguard.peers]]\nkey = \"x\"\n").is_err());
    }
}
