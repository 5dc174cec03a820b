//! `[[vxlan]]` in `quiver.toml`: VXLAN tunnels to other forwarders (RFC 7348), over IPv4 or
//! IPv6. A tunnel is an interface like a port: cross-connected (L2, the default), or routed
//! (`routed = true`: an L3 interface with addresses, a `[[table]]` and routes, so that one VNI
//! carries one tenant's table between two forwarders).

use std::collections::HashSet;
use std::net::IpAddr;

use serde::Deserialize;

use super::values::{self, ValueError};
use super::{Config, ConfigError};

/// One `[[vxlan]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VxlanSection {
    /// The tunnel's interface name, used by the other sections and in every table.
    pub name: String,
    /// Quiver's end: one of its `[[address]]`es (IPv4 or IPv6).
    pub local: String,
    /// The far end (of `local`'s family).
    pub remote: String,
    /// The VXLAN network identifier (below 2^24).
    pub vni: u32,
    /// The far end's UDP port (default 4789).
    #[serde(default = "default_port")]
    pub port: u16,
    /// An L3 interface (addresses, a table, routes) rather than a cross-connected one.
    #[serde(default)]
    pub routed: bool,
    /// A routed tunnel's MAC (default: a locally administered one from its VNI).
    pub mac: Option<String>,
    /// A routed tunnel's MTU (default: 1450 over IPv4, 1430 over IPv6, as under a 1500-byte
    /// underlay).
    pub mtu: Option<u16>,
}

fn default_port() -> u16 {
    4789
}

/// One `[[vxlan]]`, parsed.
#[derive(Debug)]
pub struct Vxlan<'a> {
    /// As written.
    pub section: &'a VxlanSection,
    /// Quiver's end.
    pub local: IpAddr,
    /// The far end.
    pub remote: IpAddr,
    /// A routed tunnel's MAC and MTU (`None`: cross-connected).
    pub routed: Option<([u8; 6], u16)>,
}

impl VxlanSection {
    /// The MAC a routed tunnel gets unless one is given: locally administered, from its VNI.
    pub fn default_mac(&self) -> [u8; 6] {
        let [_, a, b, c] = self.vni.to_be_bytes();
        [0x02, 0x7e, 0x00, a, b, c]
    }
}

impl Config {
    /// `[[vxlan]]`: names unique among ports and tunnels, addresses of one family and
    /// unicast, the VNI, a routed tunnel's MAC; `local` must be one of `addresses`.
    pub(super) fn check_vxlan<'a>(
        &'a self,
        taken: &HashSet<&str>,
        addresses: &[IpAddr],
    ) -> Result<Vec<Vxlan<'a>>, ConfigError> {
        let mut out: Vec<Vxlan<'a>> = Vec::new();
        for (i, v) in self.vxlan.iter().enumerate() {
            let key = |k: &str| format!("vxlan[{i}].{k}");
            let value = |k: &str| {
                let key = key(k);
                move |source| ConfigError::Value { key, source }
            };
            let refused = |k: &str, why: String| ConfigError::Value {
                key: key(k),
                source: ValueError::Refused(why),
            };
            let name = v.name.as_str();
            if name.is_empty() || name.len() > 64 || name.chars().any(char::is_whitespace) {
                return Err(refused("name", "1 to 64 characters, no spaces".into()));
            }
            if taken.contains(name) || out.iter().any(|x| x.section.name == name) {
                return Err(value("name")(ValueError::Duplicate(name.into())));
            }
            let local = values::ip(&v.local).map_err(value("local"))?;
            let remote = values::ip(&v.remote).map_err(value("remote"))?;
            if local.is_ipv4() != remote.is_ipv4() {
                return Err(refused(
                    "remote",
                    format!("{remote} is not of the family of local {local}"),
                ));
            }
            if remote.is_unspecified() || remote.is_multicast() {
                return Err(refused(
                    "remote",
                    format!("{remote} cannot be a remote VTEP"),
                ));
            }
            if !addresses.contains(&local) {
                return Err(refused(
                    "local",
                    format!("{local} is not one of the [[address]]es"),
                ));
            }
            if v.vni >= 1 << 24 {
                return Err(refused("vni", format!("{} does not fit in 24 bits", v.vni)));
            }
            if v.port == 0 {
                return Err(refused("port", "0 is not a port".into()));
            }
            if !v.routed && (v.mac.is_some() || v.mtu.is_some()) {
                return Err(refused(
                    "routed",
                    "mac and mtu are a routed tunnel's (routed = true)".into(),
                ));
            }
            let routed = match v.routed {
                false => None,
                true => {
                    let mac = match &v.mac {
                        Some(m) => values::mac(m).map_err(value("mac"))?,
                        None => v.default_mac(),
                    };
                    let mtu = v.mtu.unwrap_or(if local.is_ipv4() { 1450 } else { 1430 });
                    if !(576..=9000).contains(&mtu) {
                        return Err(refused("mtu", format!("{mtu} is outside 576..=9000")));
                    }
                    Some((mac, mtu))
                }
            };
            out.push(Vxlan {
                section: v,
                local,
                remote,
                routed,
            });
        }
        Ok(out)
    }
}
