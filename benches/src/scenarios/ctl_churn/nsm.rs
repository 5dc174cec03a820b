//! The churn's NSM messages: mechanisms and Requests (MEMIF or KERNEL) as an NSC sends them.

use std::time::{Duration, SystemTime};

use nsm_forwarder::path::timestamp;
use nsm_proto::connection::{Connection, Mechanism, Path as NsmPath, PathSegment};
use nsm_proto::networkservice::NetworkServiceRequest;

/// A LOCAL mechanism of type `ty` with `params`.
pub(crate) fn mech(ty: &str, params: &[(&str, &str)]) -> Mechanism {
    Mechanism {
        cls: "LOCAL".into(),
        r#type: ty.into(),
        parameters: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// An NSC's first Request of connection `id` to endpoint `nse`: ETHERNET payload, MEMIF
/// offered in the namespace `netns` names, a path of the NSC's one segment valid for 10 minutes.
pub(crate) fn request(id: &str, nse: &str, netns: &str) -> NetworkServiceRequest {
    request_with(id, nse, mech("MEMIF", &[("inodeURL", netns)]))
}

/// [`request`] with KERNEL offered instead: the interface `ifname` in the namespace `netns`
/// names (as NSM's clients ask for theirs, `nsm-1` say).
pub(crate) fn kernel_request(
    id: &str,
    nse: &str,
    netns: &str,
    ifname: &str,
) -> NetworkServiceRequest {
    request_with(
        id,
        nse,
        mech("KERNEL", &[("inodeURL", netns), ("name", ifname)]),
    )
}

/// [`request`] with `preference` as the one mechanism offered.
fn request_with(id: &str, nse: &str, preference: Mechanism) -> NetworkServiceRequest {
    NetworkServiceRequest {
        connection: Some(Connection {
            id: id.into(),
            network_service: "churn".into(),
            network_service_endpoint_name: nse.into(),
            payload: "ETHERNET".into(),
            path: Some(NsmPath {
                index: 0,
                path_segments: vec![PathSegment {
                    name: "nsc".into(),
                    id: id.into(),
                    expires: Some(timestamp(SystemTime::now() + Duration::from_secs(600))),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        mechanism_preferences: vec![preference],
    }
}
