//! Which endpoints a Request is sent to, in which order ([`Router::route`]): the one the
//! connection holds already (a refresh), or those discovery finds, in turn from one further
//! along for each Request of the same network service ([`RoundRobin`], as cmd-forwarder-vpp's
//! sdk `roundrobin` server); a Request without a payload takes its network service's.

use std::collections::HashMap;
use std::sync::Mutex;

use nsm_proto::networkservice::NetworkServiceRequest;
use tonic::Status;

use super::check::Checked;
use super::entry::Entry;
use crate::config::NsmConfig;
use crate::endpoint::{Candidate, EndpointDiscovery};
use crate::validate;

/// The most network services whose turn [`RoundRobin`] remembers; beyond, it starts over.
const MAX_SERVICES: usize = 4096;

/// Where the next Request of each network service starts among its endpoints.
#[derive(Debug, Default)]
pub(super) struct RoundRobin(Mutex<HashMap<String, usize>>);

impl RoundRobin {
    /// `endpoints` in the order to try them for a Request of `service`: from the endpoint after
    /// the one the previous Request of it started with (all of them once).
    pub(super) fn order(&self, service: &str, mut endpoints: Vec<Candidate>) -> Vec<Candidate> {
        if endpoints.len() < 2 {
            return endpoints;
        }
        let turn = {
            let mut turns = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if turns.len() >= MAX_SERVICES && !turns.contains_key(service) {
                turns.clear();
            }
            let turn = turns.entry(service.to_string()).or_default();
            let now = *turn;
            *turn = turn.wrapping_add(1);
            now
        };
        let n = endpoints.len();
        endpoints.rotate_left(turn % n);
        endpoints
    }
}

/// Whether a Request for `checked` goes on to the endpoint `old` holds: it names that endpoint,
/// or no endpoint and the same network service.
fn keeps_endpoint(old: &Entry, checked: &Checked) -> bool {
    let conn = &checked.conn;
    match conn.network_service_endpoint_name.as_str() {
        "" => conn.network_service == old.published.network_service,
        name => name == old.endpoint_name,
    }
}

/// Whether `new` goes to another endpoint than `old` did: another URL, and not the same
/// registered name (an endpoint reached by another URL is still the same endpoint, and holds
/// the connection under the same id).
pub(super) fn moved(old: &Entry, new: &Entry) -> bool {
    old.endpoint_url != new.endpoint_url
        && (old.endpoint_name.is_empty() || old.endpoint_name != new.endpoint_name)
}

/// Where a Request goes: the settings, how endpoints are found, and whose turn it is.
pub(super) struct Router<'a> {
    pub(super) cfg: &'a NsmConfig,
    pub(super) discovery: &'a dyn EndpointDiscovery,
    pub(super) round_robin: &'a RoundRobin,
}

impl Router<'_> {
    /// The endpoints to send `checked` (of `req`) to, in order, and `checked` with the payload
    /// its network service has when the Request named none (a refresh keeps the one `old`
    /// has). A payload that contradicts the service's is `FailedPrecondition`; no endpoint at
    /// all `NotFound`.
    pub(super) async fn route(
        &self,
        req: &NetworkServiceRequest,
        checked: Checked,
        old: Option<&Entry>,
    ) -> Result<(Checked, Vec<Candidate>), Status> {
        if let Some(o) = old.filter(|o| keeps_endpoint(o, &checked)) {
            let kept = Candidate {
                name: o.endpoint_name.clone(),
                url: o.endpoint_url.clone(),
            };
            let checked = match checked.conn.payload.as_str() {
                "" if !o.published.payload.is_empty() => {
                    let payload = validate::payload(&o.published.payload)?;
                    checked.with_payload(self.cfg, req, payload)?
                }
                _ => checked,
            };
            return Ok((checked, vec![kept]));
        }
        let found = self.discovery.find(&checked.conn).await?;
        let conn = &checked.conn;
        if found.endpoints.is_empty() {
            return Err(Status::not_found(format!(
                "no endpoint of network service {:?} was found",
                conn.network_service
            )));
        }
        let checked = match (found.payload, conn.payload.as_str()) {
            (Some(p), "") => checked.with_payload(self.cfg, req, p)?,
            (Some(p), asked) if asked != p.as_str() => {
                return Err(Status::failed_precondition(format!(
                    "connection.payload is {asked}, but network service {:?} carries {}",
                    conn.network_service,
                    p.as_str()
                )))
            }
            _ => checked,
        };
        let endpoints = self
            .round_robin
            .order(&checked.conn.network_service, found.endpoints);
        let names: Vec<&str> = endpoints.iter().map(|e| e.name.as_str()).collect();
        tracing::debug!(
            id = checked.conn.id,
            service = checked.conn.network_service,
            payload = checked.conn.payload,
            endpoints = ?names,
            "endpoints to try, in order"
        );
        Ok((checked, endpoints))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates(names: &[&str]) -> Vec<Candidate> {
        names
            .iter()
            .map(|n| Candidate {
                name: n.to_string(),
                url: format!("unix:///{n}"),
            })
            .collect()
    }

    fn names(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn each_request_of_a_service_starts_one_further_along() {
        let rr = RoundRobin::default();
        let abc = || candidates(&["a", "b", "c"]);
        assert_eq!(names(&rr.order("s", abc())), ["a", "b", "c"]);
        assert_eq!(names(&rr.order("s", abc())), ["b", "c", "a"]);
        // Another service has its own turn; one endpoint takes no turn.
        assert_eq!(names(&rr.order("t", abc())), ["a", "b", "c"]);
        assert_eq!(names(&rr.order("s", candidates(&["x"]))), ["x"]);
        assert_eq!(names(&rr.order("s", abc())), ["c", "a", "b"]);
        assert_eq!(names(&rr.order("s", abc())), ["a", "b", "c"]);
    }
}
