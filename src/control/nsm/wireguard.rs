//! NSM's WIREGUARD mechanism on Quiver's side: one key pair per Quiver (from
//! `NSM_WIREGUARD_PRIVATE_KEY_FILE`, else made at start), and a connection's tunnel as a
//! `[[wireguard]]` tunnel of its own: Quiver's key, the connection's port, one peer allowed
//! every address (the tunnel carries that one connection), a keepalive every 10 s as
//! cmd-forwarder-vpp has.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use nsm_forwarder::dataplane::WireguardSpec;
use nsm_forwarder::mechanism::encode_key;
use nsm_forwarder::NsmConfig;
use wireguard::keys::KeyParseError;
use wireguard::PrivateKey;

use crate::config::{WireguardPeerSection, WireguardSection};

/// Seconds between keepalives on a connection's tunnel (sdk-vpp's).
pub const KEEPALIVE_SECS: u16 = 10;

/// Why `NSM_WIREGUARD_PRIVATE_KEY_FILE` gave no key.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// The file could not be read.
    #[error("NSM_WIREGUARD_PRIVATE_KEY_FILE {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file does not hold a WireGuard key.
    #[error("NSM_WIREGUARD_PRIVATE_KEY_FILE {}: {source}", path.display())]
    NotAKey {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: KeyParseError,
    },
}

/// Quiver's WireGuard private key for NSM: read from `cfg.wireguard_key_file`, else a new one.
/// Sets `cfg.wireguard_public_key`; returns the private key as `[[wireguard]]` takes it.
pub fn load_key(cfg: &mut NsmConfig) -> Result<String, KeyFileError> {
    let key = match &cfg.wireguard_key_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| KeyFileError::Read {
                path: path.clone(),
                source,
            })?;
            PrivateKey::from_base64(text.trim()).map_err(|source| KeyFileError::NotAKey {
                path: path.clone(),
                source,
            })?
        }
        None => PrivateKey::random(),
    };
    cfg.wireguard_public_key = Some(key.public_key().0);
    Ok(key.to_base64())
}

/// The `[[wireguard]]` tunnel that carries a connection's side `spec`, with Quiver's
/// `private_key`.
pub fn tunnel_section(spec: &WireguardSpec, private_key: &str) -> WireguardSection {
    let any = Ipv4Addr::UNSPECIFIED;
    WireguardSection {
        name: spec.name.0.clone(),
        private_key: private_key.to_string(),
        private_key_file: String::new(),
        listen_port: spec.port,
        address: spec.local.to_string(),
        underlay_mtu: u16::try_from(spec.underlay_mtu).unwrap_or(u16::MAX),
        peers: vec![WireguardPeerSection {
            public_key: encode_key(&spec.remote_key),
            // `[IPv6]:port` over an IPv6 underlay.
            endpoint: std::net::SocketAddr::new(spec.remote, spec.remote_port).to_string(),
            // Both families: a dual-stack connection's IPv6 travels in the same tunnel.
            allowed_ips: vec![format!("{any}/0"), "::/0".into()],
            persistent_keepalive: KEEPALIVE_SECS,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsm_forwarder::PortName;

    #[test]
    fn a_key_file_is_read_and_a_missing_one_is_an_error() {
        let dir = std::env::temp_dir().join(format!("quiver-nsm-wg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("wg.key");
        let key = PrivateKey::random();
        std::fs::write(&path, format!("{}\n", key.to_base64())).unwrap();
        let mut cfg = NsmConfig {
            wireguard_key_file: Some(path.clone()),
            ..NsmConfig::default()
        };
        assert_eq!(load_key(&mut cfg).unwrap(), key.to_base64());
        assert_eq!(cfg.wireguard_public_key, Some(key.public_key().0));
        std::fs::write(&path, "not a key").unwrap();
        let refused = load_key(&mut cfg).unwrap_err();
        assert!(matches!(refused, KeyFileError::NotAKey { .. }), "{refused}");
        assert!(refused.to_string().contains("wg.key"));
        cfg.wireguard_key_file = None;
        let made = load_key(&mut cfg).unwrap();
        assert_ne!(made, key.to_base64());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_connections_tunnel_has_one_peer_allowed_everything() {
        let spec = WireguardSpec {
            name: PortName("nsm-abc-endpoint".into()),
            local: Ipv4Addr::new(192, 168, 9, 1).into(),
            port: 51821,
            remote: Ipv4Addr::new(192, 168, 9, 2).into(),
            remote_port: 51830,
            remote_key: [3; 32],
            underlay_mtu: 1500,
        };
        let t = tunnel_section(&spec, "k");
        assert_eq!(
            (t.name.as_str(), t.listen_port, t.address.as_str()),
            ("nsm-abc-endpoint", 51821, "192.168.9.1")
        );
        assert_eq!(t.peers.len(), 1);
        assert_eq!(t.peers[0].endpoint, "192.168.9.2:51830");
        assert_eq!(t.peers[0].allowed_ips, ["0.0.0.0/0", "::/0"]);
        // Over an IPv6 underlay: the address as it is, the endpoint in brackets.
        let six = WireguardSpec {
            local: "2001:db8:9::1".parse().unwrap(),
            remote: "2001:db8:9::2".parse().unwrap(),
            ..spec
        };
        let t = tunnel_section(&six, "k");
        assert_eq!(t.address, "2001:db8:9::1");
        assert_eq!(t.peers[0].endpoint, "[2001:db8:9::2]:51830");
        crate::config::values::endpoint(&t.peers[0].endpoint).unwrap();
    }
}
