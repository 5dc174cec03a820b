//! NSM path tokens: every NSM call carries `nsm-client-token`, an ES256 JWT signed with the
//! caller's SVID key (`sub` = the caller's SPIFFE ID, `aud` = [the callee's], `exp`), and
//! `nsm-client-token-expires`, the same expiry in RFC 3339 with nanoseconds (Go's
//! `time.RFC3339Nano`). A hop checks that the token it received was signed by the key of the
//! TLS peer it came from, names that peer as `sub`, has not expired and was minted for the hop
//! itself (its own SPIFFE ID in `aud`: a token taken from another hop and replayed is refused),
//! stamps it into the previous path segment, and mints its own for its segment and the next hop.
//!
//! Server side, per call: [`verify_request`] (the peer from the request's extensions, the token
//! from its metadata, the audience the server's own SPIFFE ID), then
//! [`PathToken::apply_to_segment`] on the previous segment. Own segment
//! and client side: [`mint`] for the peer ([`crate::PeerIdentity`]), then
//! [`PathToken::apply_to_segment`] and [`PathToken::insert_into`] on the outgoing request.
//! Refusals are `PermissionDenied` statuses saying why.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};
use serde::{Deserialize, Serialize};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Request, Status};

use nsm_proto::connection::PathSegment;

use crate::id::SpiffeId;
use crate::peer::PeerIdentity;
use crate::svid::X509Identity;

/// The metadata key of the token.
pub const TOKEN_METADATA: &str = "nsm-client-token";
/// The metadata key of the token's expiry (RFC 3339 with nanoseconds).
pub const EXPIRES_METADATA: &str = "nsm-client-token-expires";
/// NSM's default `NSM_MAX_TOKEN_LIFETIME`.
pub const DEFAULT_MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(600);

/// The JOSE header of every token Quiver mints.
const HEADER: &str = r#"{"alg":"ES256","typ":"JWT"}"#;

/// A path token and when it expires, as carried in metadata and path segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathToken {
    /// The JWT (JWS compact serialization).
    pub token: String,
    /// When it expires (`nsm-client-token-expires`; the JWT's `exp` is this, in whole seconds).
    pub expires: SystemTime,
}

/// The claims of a path token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenClaims {
    /// The SPIFFE ID of the workload that minted it.
    pub sub: String,
    /// The SPIFFE ID(s) it was minted for (a string or an array in JWTs; always an array here).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "one_or_many"
    )]
    pub aud: Vec<String>,
    /// Expiry, seconds since the Unix epoch.
    pub exp: i64,
}

/// Why a token could not be minted or was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The call carries no token, or no expiry.
    #[error("the call carries no {0} metadata")]
    Missing(&'static str),
    /// The token or its expiry is not well formed.
    #[error("malformed path token: {0}")]
    Malformed(String),
    /// The token is not signed with ES256.
    #[error("path token algorithm {0:?} is not ES256")]
    Algorithm(String),
    /// The signature is not the TLS peer's.
    #[error("path token not signed by the TLS peer {peer}")]
    BadSignature {
        /// The TLS peer's SPIFFE ID.
        peer: String,
    },
    /// The token has expired.
    #[error("path token expired at {exp} (now {now}, seconds since the epoch)")]
    Expired {
        /// The token's `exp`.
        exp: i64,
        /// The time it was checked at.
        now: i64,
    },
    /// `nsm-client-token-expires` says later than the token's own `exp`.
    #[error("{EXPIRES_METADATA} is later than the token's exp")]
    ExpiresMismatch,
    /// `sub` is not the TLS peer's SPIFFE ID.
    #[error("path token sub {sub:?} is not the TLS peer {peer}")]
    WrongSubject {
        /// The token's `sub`.
        sub: String,
        /// The TLS peer's SPIFFE ID.
        peer: String,
    },
    /// `aud` does not name the receiver: the token was minted for another workload.
    #[error(
        "path token aud {aud:?} does not include {own} (the token was minted for another workload)"
    )]
    WrongAudience {
        /// The token's `aud`.
        aud: Vec<String>,
        /// The receiver's own SPIFFE ID.
        own: String,
    },
    /// The call did not come over SPIFFE mTLS, so there is no peer to check against.
    #[error("no TLS peer identity: path tokens need SPIFFE mTLS")]
    NoPeer,
    /// A key is not EC P-256, which ES256 needs.
    #[error("{0} has no EC P-256 key: ES256 path tokens need one")]
    UnsupportedKey(String),
    /// Signing failed.
    #[error("signing the path token failed")]
    Signing,
}

impl From<TokenError> for Status {
    fn from(e: TokenError) -> Self {
        let code = match e {
            TokenError::UnsupportedKey(_) | TokenError::Signing => Code::Internal,
            _ => Code::PermissionDenied,
        };
        Status::new(code, e.to_string())
    }
}

/// Mints a token from `own` for `peer`, valid until the earliest of now + `max_lifetime`, the
/// end of `own`'s certificate and the end of `peer`'s.
pub fn mint(
    own: &X509Identity,
    peer: &PeerIdentity,
    max_lifetime: Duration,
) -> Result<PathToken, TokenError> {
    mint_at(own, peer, max_lifetime, SystemTime::now())
}

/// [`mint`] as of `now`.
pub fn mint_at(
    own: &X509Identity,
    peer: &PeerIdentity,
    max_lifetime: Duration,
    now: SystemTime,
) -> Result<PathToken, TokenError> {
    let expires = (now + max_lifetime)
        .min(own.not_after())
        .min(peer.not_after());
    let claims = TokenClaims {
        sub: own.spiffe_id().to_string(),
        aud: vec![peer.spiffe_id().to_string()],
        exp: unix_seconds(expires),
    };
    Ok(PathToken {
        token: sign(own, &claims)?,
        expires,
    })
}

/// Signs `claims` as an ES256 JWT with `own`'s SVID key. [`mint`] is what calls need; this is
/// for tokens with claims of one's choosing (tests, tools).
pub fn sign(own: &X509Identity, claims: &TokenClaims) -> Result<String, TokenError> {
    let signer = own
        .es256_signer()
        .ok_or_else(|| TokenError::UnsupportedKey(own.spiffe_id().to_string()))?;
    let payload = serde_json::to_vec(claims).map_err(|_| TokenError::Signing)?;
    let mut jwt = URL_SAFE_NO_PAD.encode(HEADER);
    jwt.push('.');
    jwt.push_str(&URL_SAFE_NO_PAD.encode(payload));
    let signature = signer
        .sign(&SystemRandom::new(), jwt.as_bytes())
        .map_err(|_| TokenError::Signing)?;
    jwt.push('.');
    jwt.push_str(&URL_SAFE_NO_PAD.encode(signature.as_ref()));
    Ok(jwt)
}

/// Checks a token received from `peer`: ES256, signed by the key of `peer`'s certificate, not
/// expired, `sub` = `peer`'s SPIFFE ID. Returns its claims. It does not look at `aud`: a
/// receiver checks that with [`verify_for`] (or [`check_audience`]); this alone is for reading
/// the tokens of a path (whose audiences are other hops).
pub fn verify(token: &str, peer: &PeerIdentity) -> Result<TokenClaims, TokenError> {
    verify_at(token, peer, SystemTime::now())
}

/// [`verify`] as of `now`.
pub fn verify_at(
    token: &str,
    peer: &PeerIdentity,
    now: SystemTime,
) -> Result<TokenClaims, TokenError> {
    let malformed = |what: &str| TokenError::Malformed(what.to_string());
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed("not three dot-separated parts"));
    };
    let header: serde_json::Value = URL_SAFE_NO_PAD
        .decode(header)
        .ok()
        .and_then(|h| serde_json::from_slice(&h).ok())
        .ok_or_else(|| malformed("unreadable header"))?;
    match header.get("alg").and_then(|a| a.as_str()) {
        Some("ES256") => {}
        other => return Err(TokenError::Algorithm(other.unwrap_or("").to_string())),
    }
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| malformed("unreadable signature"))?;
    let key = peer
        .p256_public_key()
        .ok_or_else(|| TokenError::UnsupportedKey(peer.spiffe_id().to_string()))?;
    let signed = &token[..header_and_payload_len(token)];
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, key)
        .verify(signed.as_bytes(), &signature)
        .map_err(|_| TokenError::BadSignature {
            peer: peer.spiffe_id().to_string(),
        })?;
    let claims: TokenClaims = URL_SAFE_NO_PAD
        .decode(payload)
        .ok()
        .and_then(|p| serde_json::from_slice(&p).ok())
        .ok_or_else(|| malformed("unreadable claims (sub and exp are required)"))?;
    let now = unix_seconds(now);
    if now >= claims.exp {
        return Err(TokenError::Expired {
            exp: claims.exp,
            now,
        });
    }
    if claims.sub != peer.spiffe_id().as_str() {
        return Err(TokenError::WrongSubject {
            sub: claims.sub,
            peer: peer.spiffe_id().to_string(),
        });
    }
    Ok(claims)
}

/// [`verify`], and `own` (the receiver's SPIFFE ID) must be among the token's `aud`.
pub fn verify_for(
    token: &str,
    peer: &PeerIdentity,
    own: &SpiffeId,
) -> Result<TokenClaims, TokenError> {
    verify_for_at(token, peer, own, SystemTime::now())
}

/// [`verify_for`] as of `now`.
pub fn verify_for_at(
    token: &str,
    peer: &PeerIdentity,
    own: &SpiffeId,
    now: SystemTime,
) -> Result<TokenClaims, TokenError> {
    let claims = verify_at(token, peer, now)?;
    check_audience(&claims, own)?;
    Ok(claims)
}

/// `own` must be among `claims.aud` (a token minted for another workload is refused).
pub fn check_audience(claims: &TokenClaims, own: &SpiffeId) -> Result<(), TokenError> {
    if claims.aud.iter().any(|a| a == own.as_str()) {
        Ok(())
    } else {
        Err(TokenError::WrongAudience {
            aud: claims.aud.clone(),
            own: own.to_string(),
        })
    }
}

fn header_and_payload_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(token.len())
}

/// Checks the path token of a call that came over [`crate::serve_tls`] to the server
/// whose SPIFFE ID is `own`: the token and expiry from its metadata, against the TLS peer from
/// its extensions and `own` as the audience (see [`verify_for`]; the expiry must not have
/// passed nor be later than the token's `exp`). Returns the token, ready to be stamped into the
/// previous path segment.
pub fn verify_request<T>(request: &Request<T>, own: &SpiffeId) -> Result<PathToken, Status> {
    verify_request_at(request, own, SystemTime::now())
}

/// [`verify_request`] as of `now`.
pub fn verify_request_at<T>(
    request: &Request<T>,
    own: &SpiffeId,
    now: SystemTime,
) -> Result<PathToken, Status> {
    let peer = PeerIdentity::from_request(request).ok_or(TokenError::NoPeer)?;
    let token = PathToken::from_metadata(request.metadata())?;
    let claims = verify_for_at(&token.token, peer, own, now)?;
    if unix_seconds(token.expires) > claims.exp {
        return Err(TokenError::ExpiresMismatch.into());
    }
    if token.expires <= now {
        return Err(TokenError::Expired {
            exp: claims.exp,
            now: unix_seconds(now),
        }
        .into());
    }
    Ok(token)
}

/// Stamps the token and expiry of `metadata` (as a caller sent them) into `segment`, without
/// checking them (see [`verify_request`] for that).
pub fn stamp_segment(segment: &mut PathSegment, metadata: &MetadataMap) -> Result<(), Status> {
    PathToken::from_metadata(metadata)?.apply_to_segment(segment);
    Ok(())
}

impl PathToken {
    /// Reads `nsm-client-token` and `nsm-client-token-expires`.
    pub fn from_metadata(metadata: &MetadataMap) -> Result<Self, TokenError> {
        let get = |key: &'static str| {
            metadata
                .get(key)
                .ok_or(TokenError::Missing(key))?
                .to_str()
                .map_err(|_| TokenError::Malformed(format!("{key} is not ASCII")))
        };
        let token = get(TOKEN_METADATA)?.to_string();
        let expires = parse_rfc3339(get(EXPIRES_METADATA)?)?;
        Ok(Self { token, expires })
    }

    /// Sets `nsm-client-token` and `nsm-client-token-expires` (replacing earlier values).
    pub fn insert_into(&self, metadata: &mut MetadataMap) -> Result<(), TokenError> {
        let token = MetadataValue::try_from(self.token.as_str())
            .map_err(|_| TokenError::Malformed("token is not ASCII".into()))?;
        let expires = MetadataValue::try_from(format_rfc3339_nano(self.expires))
            .map_err(|_| TokenError::Malformed("expiry is not ASCII".into()))?;
        metadata.insert(TOKEN_METADATA, token);
        metadata.insert(EXPIRES_METADATA, expires);
        Ok(())
    }

    /// Sets a path segment's `token` and `expires`.
    pub fn apply_to_segment(&self, segment: &mut PathSegment) {
        segment.token = self.token.clone();
        segment.expires = Some(timestamp(self.expires));
    }

    /// The expiry as it goes in `nsm-client-token-expires`.
    pub fn expires_rfc3339(&self) -> String {
        format_rfc3339_nano(self.expires)
    }
}

/// `t` as Go's `time.RFC3339Nano` writes a UTC time: `2006-01-02T15:04:05.999999999Z`, the
/// fraction without trailing zeros, and none at all on a whole second.
pub fn format_rfc3339_nano(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    let mut s = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    let nanos = t.nanosecond();
    if nanos != 0 {
        let fraction = format!("{nanos:09}");
        s.push('.');
        s.push_str(fraction.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// Parses an RFC 3339 time (any offset, any fraction), as Go's `time.Parse(time.RFC3339Nano)`.
pub fn parse_rfc3339(s: &str) -> Result<SystemTime, TokenError> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map(SystemTime::from)
        .map_err(|e| TokenError::Malformed(format!("{EXPIRES_METADATA} {s:?}: {e}")))
}

fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        // Before the epoch: round towards minus infinity, as truncating a time does.
        Err(e) => {
            let d = e.duration();
            -i64::try_from(d.as_secs() + u64::from(d.subsec_nanos() > 0)).unwrap_or(i64::MAX)
        }
    }
}

fn timestamp(t: SystemTime) -> prost_types::Timestamp {
    let seconds = unix_seconds(t);
    let nanos = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.subsec_nanos(),
        Err(e) => (1_000_000_000 - e.duration().subsec_nanos()) % 1_000_000_000,
    };
    prost_types::Timestamp {
        seconds,
        nanos: nanos as i32,
    }
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_nano_is_gos_format() {
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 123_450_000);
        assert_eq!(format_rfc3339_nano(t), "2023-11-14T22:13:20.12345Z");
        let whole = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(format_rfc3339_nano(whole), "2023-11-14T22:13:20Z");
        let one_ns = UNIX_EPOCH + Duration::new(1_700_000_000, 1);
        assert_eq!(
            format_rfc3339_nano(one_ns),
            "2023-11-14T22:13:20.000000001Z"
        );
        for t in [t, whole, one_ns] {
            assert_eq!(parse_rfc3339(&format_rfc3339_nano(t)).unwrap(), t);
        }
        // Go writes local times with their offset; the instant is what counts.
        assert_eq!(parse_rfc3339("2023-11-14T23:13:20.12345+01:00").unwrap(), t);
        assert!(parse_rfc3339("2023-11-14 22:13:20").is_err());
    }

    #[test]
    fn audience_reads_as_string_or_array() {
        let one: TokenClaims =
            serde_json::from_str(r#"{"sub":"spiffe://a/b","aud":"spiffe://a/c","exp":5}"#).unwrap();
        let many: TokenClaims =
            serde_json::from_str(r#"{"sub":"spiffe://a/b","aud":["spiffe://a/c"],"exp":5}"#)
                .unwrap();
        assert_eq!(one, many);
        assert_eq!(one.aud, vec!["spiffe://a/c".to_string()]);
    }

    #[test]
    fn timestamps_before_and_after_the_epoch() {
        let t = UNIX_EPOCH + Duration::new(10, 5);
        assert_eq!(
            timestamp(t),
            prost_types::Timestamp {
                seconds: 10,
                nanos: 5
            }
        );
        let before = UNIX_EPOCH - Duration::new(1, 250_000_000);
        assert_eq!(
            timestamp(before),
            prost_types::Timestamp {
                seconds: -2,
                nanos: 750_000_000
            }
        );
    }
}
