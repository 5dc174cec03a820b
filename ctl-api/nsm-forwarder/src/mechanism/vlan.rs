//! NSM's REMOTE VLAN mechanism (api `pkg/api/networkservice/mechanisms/vlan`), toward an
//! endpoint on an external network such as cmd-nse-remote-vlan: Quiver offers it with no
//! parameters, the endpoint answers the VLAN in `vlan-id` and names the host network in the
//! connection's `via` label (see [`crate::device_selector`]).

use std::collections::HashMap;

use tonic::Status;

use super::names::REMOTE;
use nsm_proto::connection::Mechanism;

/// The mechanism type.
pub const VLAN: &str = "VLAN";
/// Parameter: the VLAN id (decimal, 12 bits), the endpoint's answer.
pub const VLAN_ID: &str = "vlan-id";

/// What Quiver offers an endpoint: REMOTE VLAN, no parameters (as sdk-vpp's vlan client).
pub fn offer() -> Mechanism {
    Mechanism {
        cls: REMOTE.into(),
        r#type: VLAN.into(),
        parameters: HashMap::new(),
    }
}

/// Whether `m` is a VLAN mechanism (an empty `cls` counts).
pub fn is(m: &Mechanism) -> bool {
    m.r#type == VLAN && (m.cls.is_empty() || m.cls == REMOTE)
}

/// Checks `vlan-id`, when present: a decimal VLAN id of 12 bits.
pub(super) fn check_syntax(what: &str, m: &Mechanism) -> Result<(), Status> {
    match m.parameters.get(VLAN_ID).filter(|v| !v.is_empty()) {
        Some(v) => vlan_id(v)
            .map(drop)
            .map_err(|why| Status::invalid_argument(format!("{what}: {VLAN_ID} {v:?} {why}"))),
        None => Ok(()),
    }
}

fn vlan_id(v: &str) -> Result<u16, &'static str> {
    match v.parse::<u16>() {
        Ok(id) if id < 4096 => Ok(id),
        _ => Err("is not a VLAN id (0 to 4095)"),
    }
}

/// The VLAN of the endpoint's answer `m`: its `vlan-id`, which Quiver tags with (1 to 4094).
/// Anything else is the endpoint's fault (`FailedPrecondition`): a missing id, and the
/// untagged 0 (sdk-vpp then bridges the host interface itself, which Quiver does not).
pub fn answered_vlan(m: &Mechanism) -> Result<u16, Status> {
    let what = format!("endpoint mechanism {}/{VLAN}", m.cls);
    let v = m
        .parameters
        .get(VLAN_ID)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Status::failed_precondition(format!("{what}: {VLAN_ID} is missing")))?;
    match vlan_id(v) {
        Ok(id @ 1..=4094) => Ok(id),
        Ok(id) => Err(Status::failed_precondition(format!(
            "{what}: {VLAN_ID} {id}: Quiver tags with VLANs 1 to 4094 (no untagged or reserved one)"
        ))),
        Err(why) => Err(Status::failed_precondition(format!(
            "{what}: {VLAN_ID} {v:?} {why}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(id: Option<&str>) -> Mechanism {
        let mut m = offer();
        if let Some(id) = id {
            m.parameters.insert(VLAN_ID.into(), id.into());
        }
        m
    }

    #[test]
    fn the_endpoints_vlan_id_is_read_and_checked() {
        assert_eq!(answered_vlan(&answer(Some("100"))).unwrap(), 100);
        assert_eq!(answered_vlan(&answer(Some("4094"))).unwrap(), 4094);
        for bad in [
            None,
            Some("0"),
            Some("4095"),
            Some("4096"),
            Some("x"),
            Some("-1"),
        ] {
            let e = answered_vlan(&answer(bad)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{bad:?}");
            assert!(e.message().contains(VLAN_ID), "{bad:?}: {}", e.message());
        }
        assert!(check_syntax("m", &answer(Some("4096"))).is_err());
        assert!(check_syntax("m", &answer(Some("0"))).is_ok());
        assert!(is(&offer()) && offer().parameters.is_empty());
    }
}
