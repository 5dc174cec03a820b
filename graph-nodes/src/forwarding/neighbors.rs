//! [`Neighbors`]: the link-layer addresses of next hops and hosts on connected subnets, IPv4's
//! (configured, or learned by ARP) and IPv6's (configured, or learned by neighbour discovery,
//! RFC 4861, and aged as it says: a learned entry is reachable for [`REACHABLE_TIME`] after it
//! was last confirmed, then stale and still used while the control side asks it again by a
//! unicast solicitation every [`RETRANS_TIMER`], at most [`MAX_UNICAST_SOLICIT`] times; one
//! that never answers goes).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::index::IfIndex;
use crate::wire::Mac;

/// How long a learned IPv6 neighbour counts as reachable after it was confirmed (RFC 4861
/// 10: REACHABLE_TIME).
pub const REACHABLE_TIME: Duration = Duration::from_secs(30);
/// The pause between unicast solicitations of a stale neighbour (RETRANS_TIMER).
pub const RETRANS_TIMER: Duration = Duration::from_secs(1);
/// Unicast solicitations a stale neighbour gets before it is forgotten (MAX_UNICAST_SOLICIT).
pub const MAX_UNICAST_SOLICIT: u8 = 3;

/// Where an IPv6 neighbour stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Neighbor6State {
    /// Configured: never aged.
    Static,
    /// Confirmed within [`REACHABLE_TIME`].
    Reachable,
    /// Not confirmed since; still used, being asked again (`n` solicitations so far).
    Probing(u8),
}

/// An IPv6 neighbour as the control side shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbor6 {
    /// The interface it is on.
    pub interface: IfIndex,
    /// Its address.
    pub ip: u128,
    /// Its link-layer address.
    pub mac: Mac,
    /// Configured, or where its aging stands.
    pub state: Neighbor6State,
}

pub use crate::state::NdProbe;

#[derive(Debug, Clone, Copy)]
enum Learned {
    Static,
    Seen {
        confirmed: Instant,
        probes: u8,
        last_probe: Option<Instant>,
    },
}

#[derive(Debug, Clone, Copy)]
struct Entry6 {
    mac: Mac,
    learned: Learned,
}

/// Both families' neighbours.
pub(super) struct Neighbors {
    v4: HashMap<(IfIndex, u32), Mac>,
    v6: HashMap<(IfIndex, u128), Entry6>,
}

impl Neighbors {
    pub(super) fn new() -> Self {
        Neighbors {
            v4: HashMap::new(),
            v6: HashMap::new(),
        }
    }

    /// IPv4 neighbour `ip` on `i`'s MAC.
    pub(super) fn get4(&self, i: IfIndex, ip: u32) -> Option<Mac> {
        self.v4.get(&(i, ip)).copied()
    }

    pub(super) fn set4(&mut self, i: IfIndex, ip: u32, mac: Mac) {
        self.v4.insert((i, ip), mac);
    }

    pub(super) fn remove4(&mut self, i: IfIndex, ip: u32) {
        self.v4.remove(&(i, ip));
    }

    /// Every IPv4 neighbour: (interface, address, MAC), sorted.
    pub(super) fn list4(&self) -> Vec<(IfIndex, u32, Mac)> {
        let mut v: Vec<_> = self.v4.iter().map(|(&(i, ip), &m)| (i, ip, m)).collect();
        v.sort();
        v
    }

    /// IPv6 neighbour `ip` on `i`'s MAC.
    pub(super) fn get6(&self, i: IfIndex, ip: u128) -> Option<Mac> {
        self.v6.get(&(i, ip)).map(|e| e.mac)
    }

    /// Configures IPv6 neighbour `ip` on `i` (never aged).
    pub(super) fn set6(&mut self, i: IfIndex, ip: u128, mac: Mac) {
        self.v6.insert(
            (i, ip),
            Entry6 {
                mac,
                learned: Learned::Static,
            },
        );
    }

    /// Records that neighbour discovery showed `ip` on `i` at `mac`, `now`: a new entry, a new
    /// MAC, or a confirmation of a learned one (a configured entry is left alone). Returns
    /// whether the MAC it is reached at changed (so its adjacencies must be made again).
    pub(super) fn learn6(&mut self, i: IfIndex, ip: u128, mac: Mac, now: Instant) -> bool {
        let seen = Learned::Seen {
            confirmed: now,
            probes: 0,
            last_probe: None,
        };
        match self.v6.get_mut(&(i, ip)) {
            Some(Entry6 {
                learned: Learned::Static,
                ..
            }) => false,
            Some(e) => {
                let changed = e.mac != mac;
                *e = Entry6 { mac, learned: seen };
                changed
            }
            None => {
                self.v6.insert((i, ip), Entry6 { mac, learned: seen });
                true
            }
        }
    }

    /// Whether `ip` on `i` is known (learned or configured).
    #[cfg(test)]
    pub(super) fn has6(&self, i: IfIndex, ip: u128) -> bool {
        self.v6.contains_key(&(i, ip))
    }

    pub(super) fn remove6(&mut self, i: IfIndex, ip: u128) {
        self.v6.remove(&(i, ip));
    }

    /// Every IPv6 neighbour, sorted, with its state as of `now`.
    pub(super) fn list6(&self, now: Instant) -> Vec<Neighbor6> {
        let mut v: Vec<_> = self
            .v6
            .iter()
            .map(|(&(interface, ip), e)| Neighbor6 {
                interface,
                ip,
                mac: e.mac,
                state: match e.learned {
                    Learned::Static => Neighbor6State::Static,
                    Learned::Seen {
                        confirmed, probes, ..
                    } if probes == 0
                        && now.saturating_duration_since(confirmed) < REACHABLE_TIME =>
                    {
                        Neighbor6State::Reachable
                    }
                    Learned::Seen { probes, .. } => Neighbor6State::Probing(probes),
                },
            })
            .collect();
        v.sort_by_key(|n| (n.interface, n.ip));
        v
    }

    /// Ages the learned IPv6 neighbours to `now`: the solicitations to send (stale ones due a
    /// probe), and the neighbours forgotten (asked [`MAX_UNICAST_SOLICIT`] times in vain).
    pub(super) fn age6(&mut self, now: Instant) -> (Vec<NdProbe>, Vec<(IfIndex, u128)>) {
        let mut probes = Vec::new();
        let mut gone = Vec::new();
        for (&(interface, target), e) in self.v6.iter_mut() {
            let Learned::Seen {
                confirmed,
                probes: n,
                last_probe,
            } = &mut e.learned
            else {
                continue;
            };
            if now.saturating_duration_since(*confirmed) < REACHABLE_TIME {
                continue;
            }
            let due = last_probe.is_none_or(|t| now.saturating_duration_since(t) >= RETRANS_TIMER);
            if !due {
                continue;
            }
            if *n >= MAX_UNICAST_SOLICIT {
                gone.push((interface, target));
                continue;
            }
            *n += 1;
            *last_probe = Some(now);
            probes.push(NdProbe {
                interface,
                target: target.to_be_bytes(),
                mac: e.mac,
            });
        }
        for k in &gone {
            self.v6.remove(k);
        }
        (probes, gone)
    }

    /// Forgets every neighbour on interface `i`.
    pub(super) fn forget_interface(&mut self, i: IfIndex) {
        self.v4.retain(|(x, _), _| *x != i);
        self.v6.retain(|(x, _), _| *x != i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_learned_neighbour_is_reachable_then_asked_again_then_forgotten_unless_it_answers() {
        let t0 = Instant::now();
        let i = IfIndex::new(1);
        let mut n = Neighbors::new();
        assert!(n.learn6(i, 7, [2; 6], t0), "new");
        assert!(!n.learn6(i, 7, [2; 6], t0), "the same MAC: no change");
        n.set6(i, 9, [9; 6]);
        let state = |n: &Neighbors, at| n.list6(at)[0].state;
        assert_eq!(state(&n, t0), Neighbor6State::Reachable);
        assert_eq!(n.age6(t0 + REACHABLE_TIME / 2), (vec![], vec![]));
        // Stale: three unicast solicitations a second apart, then it is forgotten.
        let mut at = t0 + REACHABLE_TIME;
        for k in 1..=MAX_UNICAST_SOLICIT {
            let (probes, gone) = n.age6(at);
            assert_eq!(
                probes,
                vec![NdProbe {
                    interface: i,
                    target: 7u128.to_be_bytes(),
                    mac: [2; 6]
                }]
            );
            assert!(gone.is_empty());
            assert_eq!(state(&n, at), Neighbor6State::Probing(k));
            // Not again before the retransmission timer.
            assert_eq!(n.age6(at + RETRANS_TIMER / 2), (vec![], vec![]));
            at += RETRANS_TIMER;
        }
        assert_eq!(n.age6(at), (vec![], vec![(i, 7)]));
        assert!(!n.has6(i, 7));
        // The configured one never ages.
        assert!(n.has6(i, 9) && n.age6(at + REACHABLE_TIME * 10) == (vec![], vec![]));
        // An answer while asked makes it reachable again; a new MAC is a change.
        assert!(n.learn6(i, 5, [5; 6], t0));
        let (probes, _) = n.age6(t0 + REACHABLE_TIME);
        assert_eq!(probes.len(), 1);
        assert!(n.learn6(i, 5, [6; 6], t0 + REACHABLE_TIME), "moved");
        let five = |n: &Neighbors| n.list6(t0 + REACHABLE_TIME)[0];
        assert_eq!(five(&n).state, Neighbor6State::Reachable);
        assert_eq!(five(&n).mac, [6; 6]);
        // A configured entry is not replaced by what is learned.
        assert!(!n.learn6(i, 9, [1; 6], t0));
        assert_eq!(n.get6(i, 9), Some([9; 6]));
    }
}
