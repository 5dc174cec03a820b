//! UDP ports of the WireGuard tunnels Quiver makes for NSM connections: one per connection
//! side (a tunnel is one connection's alone, so the port tells its datagrams apart), from
//! [`FIRST`] up, kept across refreshes, free again when the connection goes.

use std::collections::HashMap;
use std::sync::Mutex;

/// The first port given out (WireGuard's usual one).
pub const FIRST: u16 = crate::mechanism::WIREGUARD_DEFAULT_PORT;
/// How many ports there are to give out.
pub const COUNT: u16 = 4096;

/// Which connection side holds each port.
#[derive(Debug, Default)]
pub struct WgPorts {
    held: Mutex<HashMap<u16, String>>,
}

/// The key of a connection side in the table.
pub fn side_key(owner: &str, endpoint_side: bool) -> String {
    format!(
        "{owner}/{}",
        if endpoint_side { "endpoint" } else { "client" }
    )
}

impl WgPorts {
    /// Claims a port for `key` ([`side_key`]): `preferred` when it is in range and free or
    /// already `key`'s (a refresh keeps its port), else the first free one. Whatever else `key`
    /// held is released. `None` when all are taken.
    pub fn claim(&self, key: &str, preferred: Option<u16>) -> Option<u16> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let free = |held: &HashMap<u16, String>, p: u16| {
            (FIRST..FIRST + COUNT).contains(&p) && held.get(&p).is_none_or(|k| k == key)
        };
        let port = match preferred.filter(|&p| free(&held, p)) {
            Some(p) => p,
            None => (FIRST..FIRST + COUNT).find(|&p| free(&held, p))?,
        };
        held.retain(|_, k| k != key);
        held.insert(port, key.to_string());
        Some(port)
    }

    /// The port `key` holds, if any.
    pub fn held_by(&self, key: &str) -> Option<u16> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.iter().find(|(_, k)| *k == key).map(|(&p, _)| p)
    }

    /// Releases the port `key` holds.
    pub fn release_key(&self, key: &str) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.retain(|_, k| k != key);
    }

    /// Releases every port of connection `owner` (both sides).
    pub fn release(&self, owner: &str) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.retain(|_, k| k.rsplit_once('/').map_or(k.as_str(), |(o, _)| o) != owner);
    }

    /// How many ports are held.
    pub fn len(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no port is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_port_per_side_kept_on_refresh_and_released_with_the_connection() {
        let t = WgPorts::default();
        let a = t.claim(&side_key("c1", false), None).unwrap();
        let b = t.claim(&side_key("c1", true), None).unwrap();
        assert_ne!(a, b);
        assert_eq!(a, FIRST);
        // Another connection cannot take a held port, even when it asks for it.
        let c = t.claim(&side_key("c2", false), Some(a)).unwrap();
        assert!(c != a && c != b);
        // A refresh keeps its port; out of range is not taken.
        assert_eq!(t.claim(&side_key("c1", false), Some(a)), Some(a));
        assert_ne!(t.claim(&side_key("c2", false), Some(1)), Some(1));
        assert_eq!(t.held_by(&side_key("c1", true)), Some(b));
        t.release("c1");
        assert_eq!(t.len(), 1);
        assert_eq!(t.held_by(&side_key("c1", false)), None);
        t.release("c2");
        assert!(t.is_empty());
    }

    #[test]
    fn exhaustion_is_none() {
        let t = WgPorts::default();
        for i in 0..COUNT {
            assert!(t.claim(&format!("c{i}/client"), None).is_some());
        }
        assert_eq!(t.claim("last/client", None), None);
    }
}
