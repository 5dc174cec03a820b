//! `NSM_DEVICE_SELECTOR_FILE`: which host interface carries NSM's VLAN mechanism for a
//! connection, by the connection's `via` label (cmd-forwarder-vpp's `internal/devicecfg`).
//!
//! The file is YAML, as cmd-forwarder-vpp reads it:
//!
//! ```yaml
//! interfaces:
//!   - name: ext_net1          # a host interface in the forwarder's namespace
//!     matches:
//!       - labelSelector:
//!           - via: gw1        # a connection labelled via=gw1 leaves by ext_net1
//! ```
//!
//! It is checked as cmd-forwarder-vpp checks it (every interface named, in fewer than 15
//! bytes; every match with at least one selector, every selector with a `via`), and each
//! `via` names one interface: when two interfaces claim the same `via`, cmd-forwarder-vpp
//! keeps the last one silently, Quiver refuses the file.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// cmd-forwarder-vpp's bound: a Linux interface name has fewer than 16 bytes with its NUL, and
/// devicecfg refuses 15 or more.
const MAX_NAME: usize = 15;

/// The `via` label's name in a connection's labels (sdk-vpp's `viaLabel`).
pub const VIA_LABEL: &str = "via";

/// The host interfaces VLAN connections leave by, by `via` label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceSelector {
    by_via: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    interfaces: Vec<Device>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Device {
    #[serde(default)]
    name: String,
    #[serde(default)]
    matches: Vec<Selectors>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Selectors {
    #[serde(rename = "labelSelector", default)]
    label_selector: Vec<Labels>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Labels {
    #[serde(default)]
    via: String,
}

impl DeviceSelector {
    /// Reads and checks the file at `path`.
    pub fn read(path: &Path) -> Result<DeviceSelector, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
        DeviceSelector::parse(&text)
    }

    /// Parses and checks the file's text.
    pub fn parse(text: &str) -> Result<DeviceSelector, String> {
        // An empty file is an empty list, as Go's yaml reads it.
        let file: File = match text.trim() {
            "" | "---" => File {
                interfaces: Vec::new(),
            },
            _ => serde_yaml::from_str(text).map_err(|e| format!("not a device selector: {e}"))?,
        };
        let mut by_via = BTreeMap::new();
        for (i, d) in file.interfaces.iter().enumerate() {
            if d.name.is_empty() {
                return Err(format!("interfaces[{i}]: the interface name must be set"));
            }
            if d.name.len() >= MAX_NAME {
                return Err(format!(
                    "interfaces[{i}]: interface name {:?} is too long (at most {} bytes)",
                    d.name,
                    MAX_NAME - 1
                ));
            }
            for (j, m) in d.matches.iter().enumerate() {
                if m.label_selector.is_empty() {
                    return Err(format!(
                        "interfaces[{i}].matches[{j}]: at least one label selector must be given"
                    ));
                }
                for (k, l) in m.label_selector.iter().enumerate() {
                    if l.via.is_empty() {
                        return Err(format!(
                            "interfaces[{i}].matches[{j}].labelSelector[{k}]: {} has a selector \
                             without via",
                            d.name
                        ));
                    }
                    if let Some(other) = by_via.insert(l.via.clone(), d.name.clone()) {
                        if other != d.name {
                            return Err(format!(
                                "via {:?} selects two interfaces, {other} and {}",
                                l.via, d.name
                            ));
                        }
                    }
                }
            }
        }
        Ok(DeviceSelector { by_via })
    }

    /// The host interface for a connection labelled `via`.
    pub fn interface(&self, via: &str) -> Option<&str> {
        self.by_via.get(via).map(String::as_str)
    }

    /// Whether no interface is selected (no file, or one without selectors): Quiver then
    /// offers no VLAN mechanism.
    pub fn is_empty(&self) -> bool {
        self.by_via.is_empty()
    }

    /// The host interfaces, each once, in name order.
    pub fn interfaces(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.by_via.values().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The `via` labels and their interfaces, in label order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.by_via.iter().map(|(v, n)| (v.as_str(), n.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cmd-forwarder-vpp's own sample (`internal/devicecfg/config.yml`), but for gw2, which
    /// it gives to three interfaces (devicecfg keeps the last).
    const SAMPLE: &str = "---
interfaces:
  - name: eth1
    matches:
      - labelSelector:
          - via: gw0
  - name: eth2
    matches:
      - labelSelector:
          - via: gw1
      - labelSelector:
          - via: gw2
  - name: eth4
    matches:
      - labelSelector:
          - via: gw3
";

    #[test]
    fn each_via_label_selects_its_interface() {
        let s = DeviceSelector::parse(SAMPLE).unwrap();
        assert_eq!(s.interface("gw0"), Some("eth1"));
        assert_eq!(s.interface("gw1"), Some("eth2"));
        assert_eq!(s.interface("gw2"), Some("eth2"));
        assert_eq!(s.interface("gw3"), Some("eth4"));
        assert_eq!(s.interface("gw9"), None);
        assert_eq!(s.interfaces(), ["eth1", "eth2", "eth4"]);
        // deployments-k8s' remotevlan example, with its odd indentation.
        let k8s = "---\ninterfaces:\n  - name: ext_net1\n    matches:\n       - labelSelector:\n           - via: gw1\n";
        assert_eq!(
            DeviceSelector::parse(k8s).unwrap().interface("gw1"),
            Some("ext_net1")
        );
        assert!(DeviceSelector::parse("").unwrap().is_empty());
        assert!(DeviceSelector::parse("interfaces: []").unwrap().is_empty());
    }

    #[test]
    fn a_bad_file_is_refused_saying_where() {
        let bad = [
            ("interfaces:\n  - matches: []\n", "interfaces[0]: the interface name"),
            ("interfaces:\n  - name: abcdefghijklmnop\n", "too long"),
            (
                "interfaces:\n  - name: eth1\n    matches:\n      - labelSelector: []\n",
                "interfaces[0].matches[0]: at least one",
            ),
            (
                "interfaces:\n  - name: eth1\n    matches:\n      - labelSelector:\n          - via: \"\"\n",
                "labelSelector[0]: eth1 has a selector without via",
            ),
            (
                "interfaces:\n  - name: eth1\n    matches:\n      - labelSelector:\n          - via: gw\n  - name: eth2\n    matches:\n      - labelSelector:\n          - via: gw\n",
                "via \"gw\" selects two interfaces, eth1 and eth2",
            ),
            ("interfaces:\n  - name: eth1\n    mtu: 9000\n", "not a device selector"),
            ("[1, 2", "not a device selector"),
        ];
        for (text, want) in bad {
            let e = DeviceSelector::parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
