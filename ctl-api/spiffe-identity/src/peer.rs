//! The other end of an mTLS connection: its SPIFFE ID and certificate chain, as the handshake
//! verified them.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use rustls::pki_types::CertificateDer;

use crate::error::SpiffeError;
use crate::id::SpiffeId;
use crate::svid::{leaf_info, LeafInfo};

/// The verified peer of a connection. On the server side, tonic puts it in every request's
/// extensions ([`PeerIdentity::from_request`], in `connection.rs`); on the client side, [`crate::PeerChannel::peer`]
/// returns it. Cheap to clone.
#[derive(Clone)]
pub struct PeerIdentity(Arc<Inner>);

struct Inner {
    leaf: LeafInfo,
    certificates: Vec<CertificateDer<'static>>,
}

impl PeerIdentity {
    /// Reads a peer's certificate chain (leaf first). It does not verify the chain: the TLS
    /// handshake that produced it did.
    pub fn from_certificates(
        certificates: Vec<CertificateDer<'static>>,
    ) -> Result<Self, SpiffeError> {
        let leaf = certificates
            .first()
            .ok_or_else(|| SpiffeError::InvalidSvid("the peer sent no certificate".into()))
            .and_then(|c| {
                leaf_info(c).map_err(|e| SpiffeError::InvalidSvid(format!("peer SVID: {e}")))
            })?;
        Ok(Self(Arc::new(Inner { leaf, certificates })))
    }

    /// The peer's SPIFFE ID (the URI SAN of its leaf certificate).
    pub fn spiffe_id(&self) -> &SpiffeId {
        &self.0.leaf.spiffe_id
    }

    /// The peer's certificate chain, leaf first.
    pub fn certificates(&self) -> &[CertificateDer<'static>] {
        &self.0.certificates
    }

    /// When the peer's leaf certificate expires.
    pub fn not_after(&self) -> SystemTime {
        self.0.leaf.not_after
    }

    /// The peer's leaf certificate serial number (big-endian bytes as encoded).
    pub fn serial(&self) -> &[u8] {
        &self.0.leaf.serial
    }

    /// The peer's P-256 public key (an uncompressed point), when its key is EC P-256.
    pub(crate) fn p256_public_key(&self) -> Option<&[u8]> {
        self.0.leaf.p256_public_key.as_deref()
    }
}

impl fmt::Debug for PeerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerIdentity")
            .field("spiffe_id", &self.0.leaf.spiffe_id)
            .field("not_after", &self.0.leaf.not_after)
            .finish_non_exhaustive()
    }
}
