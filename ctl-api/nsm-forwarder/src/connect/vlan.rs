//! NSM's VLAN mechanism in a build: Quiver offers it when the connection carries ETHERNET and
//! `NSM_DEVICE_SELECTOR_FILE` selects a host interface; the endpoint's answer is read whole
//! (its `vlan-id`, and the `via` label it puts on the connection, which the selector must map
//! to a host interface) before anything is built; the connection's MTU is then the host
//! interface's when it is smaller, as sdk-vpp's vlan `mtu` client sets it.

use nsm_proto::connection::{Connection, Mechanism};
use tonic::Status;

use crate::device_selector::{DeviceSelector, VIA_LABEL};
use crate::mechanism::{vlan, EndpointMechanism};
use crate::validate::Payload;

/// Quiver's VLAN offer for a connection of `payload`, when `selector` has host interfaces.
pub(super) fn offer(selector: &DeviceSelector, payload: Payload) -> Option<Mechanism> {
    (payload == Payload::Ethernet && !selector.is_empty()).then(vlan::offer)
}

/// The endpoint side of a VLAN answer `m` of `answer`: its VLAN, and the host interface its
/// `via` label selects. `FailedPrecondition` (the endpoint's or the selector's fault, nothing
/// built) when either is missing.
pub(super) fn read(
    answer: &Connection,
    m: &Mechanism,
    selector: &DeviceSelector,
) -> Result<EndpointMechanism, Status> {
    let vlan = vlan::answered_vlan(m)?;
    let via = answer
        .labels
        .get(VIA_LABEL)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            Status::failed_precondition(format!(
                "the endpoint answered VLAN {vlan} without a {VIA_LABEL:?} label on the \
                 connection: no host interface to tag on"
            ))
        })?;
    let host = selector.interface(via).ok_or_else(|| {
        let known: Vec<String> = selector
            .entries()
            .map(|(v, name)| format!("{v} -> {name}"))
            .collect();
        Status::failed_precondition(format!(
            "the endpoint answered VLAN {vlan} via {via:?}, which NSM_DEVICE_SELECTOR_FILE \
             does not select (it has {})",
            known.join(", ")
        ))
    })?;
    Ok(EndpointMechanism::Vlan {
        vlan,
        host: host.to_string(),
    })
}

/// The connection's MTU over a VLAN on a host interface of `host_mtu`: `mtu`, or the host's
/// when smaller (sdk-vpp's vlan `mtu` client; the remote-vlan endpoint zeroes the MTU in the
/// Request, so there the host's is what the connection gets).
pub(super) fn mtu(mtu: u32, host_mtu: u32) -> u32 {
    match host_mtu {
        0 => mtu,
        h => mtu.min(h),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn selector() -> DeviceSelector {
        DeviceSelector::parse(
            "interfaces:\n  - name: ext_net1\n    matches:\n      - labelSelector:\n          - via: gw1\n",
        )
        .unwrap()
    }

    fn answer(labels: &[(&str, &str)]) -> (Connection, Mechanism) {
        let mut m = vlan::offer();
        m.parameters.insert(vlan::VLAN_ID.into(), "100".into());
        let conn = Connection {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>(),
            mechanism: Some(m.clone()),
            ..Default::default()
        };
        (conn, m)
    }

    #[test]
    fn the_via_label_selects_the_host_interface() {
        let (conn, m) = answer(&[("via", "gw1")]);
        assert_eq!(
            read(&conn, &m, &selector()).unwrap(),
            EndpointMechanism::Vlan {
                vlan: 100,
                host: "ext_net1".into()
            }
        );
        for labels in [&[][..], &[("via", "gw2")][..], &[("via", "")][..]] {
            let (conn, m) = answer(labels);
            let e = read(&conn, &m, &selector()).unwrap_err();
            assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{labels:?}");
        }
        assert!(offer(&selector(), Payload::Ethernet).is_some());
        assert!(offer(&selector(), Payload::Ip).is_none());
        assert!(offer(&DeviceSelector::default(), Payload::Ethernet).is_none());
        assert_eq!(mtu(9000, 1450), 1450);
        assert_eq!(mtu(1400, 1450), 1400);
    }
}
