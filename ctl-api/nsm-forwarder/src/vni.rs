//! VNIs of the VXLAN tunnels Quiver answers for: unique per requesting forwarder's address
//! (the decapsulating side tells its tunnels apart by source address and VNI), chosen by Quiver
//! as the receiving side, kept across refreshes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// The largest VNI (24 bits).
pub const MAX_VNI: u32 = (1 << 24) - 1;

/// Which VNI each connection holds toward each remote tunnel address.
#[derive(Debug, Default)]
pub struct VniTable {
    held: Mutex<HashMap<(IpAddr, u32), String>>,
}

impl VniTable {
    /// Claims a VNI toward `remote` for `owner`: `preferred` when it is free or already
    /// `owner`'s (a refresh keeps its VNI), else the first free one from a start derived from
    /// `owner` (so a connection tends to get the same VNI again). Whatever else `owner` held is
    /// released: a connection has one VXLAN client side. `None` when all 2^24 - 1 are taken.
    pub fn claim(&self, remote: IpAddr, owner: &str, preferred: Option<u32>) -> Option<u32> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let free = |held: &HashMap<(IpAddr, u32), String>, vni: u32| {
            (1..=MAX_VNI).contains(&vni) && held.get(&(remote, vni)).is_none_or(|o| o == owner)
        };
        let vni = match preferred.filter(|&v| free(&held, v)) {
            Some(v) => v,
            None => {
                let start = 1 + fnv1a(owner.as_bytes()) % MAX_VNI;
                (0..MAX_VNI)
                    .map(|i| 1 + (start - 1 + i) % MAX_VNI)
                    .find(|&v| free(&held, v))?
            }
        };
        held.retain(|_, o| o != owner);
        held.insert((remote, vni), owner.to_string());
        Some(vni)
    }

    /// Releases every VNI `owner` holds.
    pub fn release(&self, owner: &str) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.retain(|_, o| o != owner);
    }

    /// How many VNIs are held.
    pub fn len(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no VNI is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn fnv1a(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, &x| {
        (h ^ x as u32).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 50, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 50, 2));

    #[test]
    fn unique_per_remote_and_kept_on_refresh() {
        let t = VniTable::default();
        let c1 = t.claim(A, "c1", None).unwrap();
        // The same preferred VNI toward the same remote goes to one connection only.
        let c2 = t.claim(A, "c2", Some(c1)).unwrap();
        assert_ne!(c1, c2);
        // Toward another remote it may be reused.
        assert_eq!(t.claim(B, "c3", Some(c1)), Some(c1));
        // A refresh keeps it.
        assert_eq!(t.claim(A, "c1", Some(c1)), Some(c1));
        assert_eq!(t.len(), 3);
        t.release("c1");
        assert_eq!(t.len(), 2);
        // Free again once released.
        assert_eq!(t.claim(A, "c4", Some(c1)), Some(c1));
    }

    #[test]
    fn out_of_range_preferences_are_not_taken() {
        let t = VniTable::default();
        for bad in [0, MAX_VNI + 1] {
            let v = t.claim(A, "c", Some(bad)).unwrap();
            assert!((1..=MAX_VNI).contains(&v));
        }
        // One connection holds one VNI.
        assert_eq!(t.len(), 1);
    }
}
