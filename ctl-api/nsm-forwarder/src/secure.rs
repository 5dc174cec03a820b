//! SPIFFE on NSM calls (see `specs/nsm.md`, Security): path tokens in and out.
//!
//! - Incoming Request/Close ([`accept`]): with an identity, the caller's `nsm-client-token` must
//!   be signed by the key of the TLS peer's SVID, have that peer's SPIFFE ID as `sub`, not be
//!   expired and have Quiver's own SPIFFE ID in `aud` ([`spiffe_identity::tokens`]), or the call is
//!   refused with `PermissionDenied` (saying which check failed) before anything is looked at;
//!   the token and its expiry are then stamped into the caller's path segment
//!   (`path_segments[index]`).
//!   Without an identity (plaintext), a token in the metadata is stamped unchecked.
//! - Outgoing Request/Close ([`outgoing`], [`sign`]): with an identity, Quiver mints its own
//!   token for the server it dialed (sub = own SPIFFE ID, aud = [the server's], exp = the
//!   earliest of now + `NSM_MAX_TOKEN_LIFETIME` and both certificates' ends), puts it in its
//!   own segment (`path_segments[index]` of the outgoing connection) and in the metadata.
//!   Without an identity nothing is minted: Quiver's segment keeps the caller's token (see
//!   [`super::path::advance`]).
//! - Registry calls (Register, Find, Unregister; [`sign_call`]): with an identity, a token for
//!   the registry (aud = its SPIFFE ID from the TLS handshake) in the metadata, as every NSM hop
//!   sends one.

use std::time::Duration;

use nsm_proto::connection::{Connection, PathSegment};
use nsm_proto::networkservice::NetworkServiceRequest;
use spiffe_identity::tokens::{self, PathToken};
use spiffe_identity::{Identity, PeerIdentity};
use tonic::transport::Channel;
use tonic::{Request, Status};

use crate::config::NsmConfig;
use crate::dial::dial_peer;

/// A message that carries an NSM connection (and so a path): Request's and Close's.
pub trait CarriesConnection {
    /// The connection, if the message has one.
    fn connection_mut(&mut self) -> Option<&mut Connection>;
}

impl CarriesConnection for NetworkServiceRequest {
    fn connection_mut(&mut self) -> Option<&mut Connection> {
        self.connection.as_mut()
    }
}

impl CarriesConnection for Connection {
    fn connection_mut(&mut self) -> Option<&mut Connection> {
        Some(self)
    }
}

/// The segment at the path's index (the caller's on a call received, Quiver's on a call made),
/// if the path has one there. A path without it is left for validation to refuse.
fn current_segment<T: CarriesConnection>(msg: &mut T) -> Option<&mut PathSegment> {
    let path = msg.connection_mut()?.path.as_mut()?;
    let index = path.index as usize;
    path.path_segments.get_mut(index)
}

/// Checks an incoming call's path token (with an identity) and stamps it into the caller's
/// segment; returns the message. A refusal (`PermissionDenied`) changes nothing.
pub fn accept<T: CarriesConnection>(
    identity: Option<&Identity>,
    request: Request<T>,
) -> Result<T, Status> {
    let token = match identity {
        Some(identity) => Some(
            tokens::verify_request(&request, &identity.spiffe_id()).inspect_err(|e| {
                tracing::warn!(error = %e.message(), "refused a call: bad path token");
            })?,
        ),
        // Plaintext: nothing to check a token against; pass on what the caller sent.
        None => PathToken::from_metadata(request.metadata()).ok(),
    };
    let mut msg = request.into_inner();
    if let (Some(token), Some(segment)) = (token, current_segment(&mut msg)) {
        token.apply_to_segment(segment);
    }
    Ok(msg)
}

/// Prepares an outgoing call to `peer` (the server the channel reached): with an identity,
/// mints Quiver's token for it into the current path segment and the metadata.
pub fn sign<T: CarriesConnection>(
    identity: Option<&Identity>,
    peer: Option<&PeerIdentity>,
    max_lifetime: Duration,
    mut msg: T,
) -> Result<Request<T>, Status> {
    let Some(token) = mint_for(identity, peer, max_lifetime)? else {
        return Ok(Request::new(msg));
    };
    if let Some(segment) = current_segment(&mut msg) {
        token.apply_to_segment(segment);
    }
    with_token(msg, &token)
}

/// Prepares an outgoing call without a path (the registry's Register, Find, Unregister) to
/// `peer`: with an identity, Quiver's token for it (sub = own SPIFFE ID, aud = [peer's]) in
/// `nsm-client-token` and `nsm-client-token-expires`; without one, the bare message.
pub fn sign_call<T>(
    identity: Option<&Identity>,
    peer: Option<&PeerIdentity>,
    max_lifetime: Duration,
    msg: T,
) -> Result<Request<T>, Status> {
    match mint_for(identity, peer, max_lifetime)? {
        Some(token) => with_token(msg, &token),
        None => Ok(Request::new(msg)),
    }
}

/// Quiver's token for `peer`, when it has an identity (then the channel must have a verified
/// peer).
fn mint_for(
    identity: Option<&Identity>,
    peer: Option<&PeerIdentity>,
    max_lifetime: Duration,
) -> Result<Option<PathToken>, Status> {
    let Some(identity) = identity else {
        return Ok(None);
    };
    let peer = peer.ok_or_else(|| {
        Status::internal("no verified server identity on an mTLS channel: cannot mint a token")
    })?;
    Ok(Some(tokens::mint(&identity.current(), peer, max_lifetime)?))
}

fn with_token<T>(msg: T, token: &PathToken) -> Result<Request<T>, Status> {
    let mut request = Request::new(msg);
    token.insert_into(request.metadata_mut())?;
    Ok(request)
}

/// Dials `url` as `cfg` says (mTLS with `cfg.identity`, plaintext without) and signs `msg` for
/// the server that answered: the channel and the call to make on it.
pub async fn outgoing<T: CarriesConnection>(
    cfg: &NsmConfig,
    url: &str,
    msg: T,
) -> Result<(Channel, Request<T>), Status> {
    let channel = dial_peer(url, cfg.dial_timeout, cfg.identity.as_ref()).await?;
    let request = sign(
        cfg.identity.as_ref(),
        channel.peer().as_ref(),
        cfg.max_token_lifetime,
        msg,
    )?;
    Ok((channel.channel(), request))
}
