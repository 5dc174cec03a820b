//! Quiver as the endpoint's client: Request and Close on the cached channel to its URL (see
//! `channels`), with mTLS and Quiver's path token when it has a SPIFFE identity (see
//! `secure`), the fds of Quiver's offers passed beside on a unix socket (see `fds`).

use std::future::Future;
use std::time::Duration;

use grpc_unix::ReceivedFds;
use nsm_proto::connection::{Connection, Mechanism};
use nsm_proto::networkservice::network_service_client::NetworkServiceClient;
use nsm_proto::networkservice::NetworkServiceRequest;
use spiffe_identity::PeerChannel;
use tonic::Status;

use crate::channels::{self, Channels};
use crate::config::NsmConfig;
use crate::fds::pass_offered_files;
use crate::secure::{self, CarriesConnection};

/// How long Quiver waits for the endpoint to answer a Request or Close.
pub const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(15);

/// Calls to endpoints on `channels`, as `cfg` says (identity, token lifetime, dial timeout).
pub(super) struct EndpointClient<'a> {
    pub(super) channels: &'a Channels,
    pub(super) cfg: &'a NsmConfig,
}

impl EndpointClient<'_> {
    /// Requests the endpoint at `url` (Quiver's offers in `NSM_MECHANISM_PRIORITY`'s order,
    /// see [`prioritize`]): its answer, and the fds passed on the channel (grpcfd;
    /// Quiver's own `file://` URLs, if it offers any, go as `inode://` with their fds).
    pub(super) async fn request(
        &self,
        url: &str,
        request: NetworkServiceRequest,
    ) -> Result<(Connection, ReceivedFds), Status> {
        let unix = url.starts_with("unix://");
        let mut request = request;
        prioritize(
            &mut request.mechanism_preferences,
            &self.cfg.mechanism_priority,
        );
        self.call(url, request, |channel, mut r| async move {
            if unix {
                pass_offered_files(channel.fds(), r.get_mut())?;
            }
            let answer = NetworkServiceClient::new(channel.channel())
                .request(r)
                .await?;
            Ok(answer.map(|a| (a, channel.received().clone())))
        })
        .await
        .map_err(|s| Status::new(s.code(), format!("endpoint {url}: {}", s.message())))
    }

    /// Closes `conn` toward the endpoint at `url`; failures are logged (the endpoint's own
    /// expiry cleans up after an endpoint that cannot be reached).
    pub(super) async fn close(&self, url: &str, conn: Connection) {
        let close = self.call(url, conn, |channel, r| async move {
            NetworkServiceClient::new(channel.channel()).close(r).await
        });
        if let Err(e) = close.await {
            tracing::warn!(url, error = %e, "Close toward the endpoint failed");
        }
    }

    /// Makes one call to the endpoint at `url` on the cached channel there: with mTLS and
    /// Quiver's path token when it has a SPIFFE identity. A transport failure drops the
    /// channel; on a channel that had served calls before (the endpoint may have closed it
    /// meanwhile) the call is made once more on a new one: Request and Close are idempotent.
    async fn call<T, R, F, Fut>(&self, url: &str, msg: T, call: F) -> Result<R, Status>
    where
        T: CarriesConnection + Clone,
        F: Fn(PeerChannel, tonic::Request<T>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, Status>>,
    {
        let identity = self.cfg.identity.as_ref();
        let mut retried = false;
        loop {
            let lease = self
                .channels
                .get(url, self.cfg.dial_timeout, identity)
                .await?;
            let mut r = secure::sign(
                identity,
                lease.channel.peer().as_ref(),
                self.cfg.max_token_lifetime,
                msg.clone(),
            )?;
            r.set_timeout(ENDPOINT_TIMEOUT);
            match call(lease.channel.clone(), r).await {
                Ok(answer) => return Ok(answer.into_inner()),
                Err(s) if channels::transport_failure(&s) => {
                    self.channels.forget(url, &lease);
                    if !lease.reused || retried {
                        return Err(s);
                    }
                    retried = true;
                    tracing::debug!(url, error = %s, "endpoint channel failed: dialing again");
                }
                Err(s) => return Err(s),
            }
        }
    }
}

/// Puts the offers whose type `priority` names first, in `priority`'s order; the others keep
/// their order after them (sdk's `mechanismpriority` client, `NSM_MECHANISM_PRIORITY`).
pub(super) fn prioritize(offers: &mut [Mechanism], priority: &[String]) {
    if priority.is_empty() {
        return;
    }
    // A stable sort: equal ranks keep their order.
    offers.sort_by_key(|m| {
        priority
            .iter()
            .position(|p| p.eq_ignore_ascii_case(&m.r#type))
            .unwrap_or(priority.len())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_reorders_the_offers_named_and_keeps_the_rest() {
        let m = |t: &str| Mechanism {
            r#type: t.into(),
            ..Default::default()
        };
        let types = |o: &[Mechanism]| o.iter().map(|m| m.r#type.clone()).collect::<Vec<_>>();
        let mut offers = vec![m("MEMIF"), m("KERNEL"), m("VXLAN")];
        prioritize(&mut offers, &[]);
        assert_eq!(types(&offers), ["MEMIF", "KERNEL", "VXLAN"]);
        prioritize(&mut offers, &["VXLAN".into(), "KERNEL".into()]);
        assert_eq!(types(&offers), ["VXLAN", "KERNEL", "MEMIF"]);
        prioritize(&mut offers, &["memif".into(), "WIREGUARD".into()]);
        assert_eq!(types(&offers), ["MEMIF", "VXLAN", "KERNEL"]);
    }
}
