//! One X.509 identity as the Workload API hands it over: the SVID (chain, key), the trust
//! bundles, checked once when it arrives and kept ready for TLS (a rustls `CertifiedKey`,
//! webpki trust anchors) and for path tokens (an ES256 signer).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, TrustAnchor};
use rustls::sign::CertifiedKey;
use x509_parser::certificate::X509Certificate;
use x509_parser::error::X509Error;
use x509_parser::extensions::GeneralName;
use x509_parser::oid_registry::{OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY};
use x509_parser::prelude::FromDer;

use crate::crypto::provider;
use crate::error::SpiffeError;
use crate::id::{trust_domain_of_key, SpiffeId, SpiffeIdError};

/// The CA certificates of one trust domain, and the trust anchors made of them.
pub struct TrustBundle {
    trust_domain: String,
    certificates: Vec<CertificateDer<'static>>,
    anchors: Vec<TrustAnchor<'static>>,
}

impl TrustBundle {
    /// A bundle for `trust_domain` from its DER certificates, concatenated as the Workload API
    /// sends them.
    pub fn from_der(trust_domain: &str, concatenated: &[u8]) -> Result<Self, SpiffeError> {
        let certificates = split_certificates(concatenated)
            .map_err(|e| invalid(format!("bundle of {trust_domain}: {e}")))?;
        if certificates.is_empty() {
            return Err(invalid(format!("bundle of {trust_domain} is empty")));
        }
        let anchors = certificates
            .iter()
            .map(|c| {
                webpki::anchor_from_trusted_cert(c)
                    .map(|a| a.to_owned())
                    .map_err(|e| invalid(format!("bundle of {trust_domain}: {e}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            trust_domain: trust_domain.to_string(),
            certificates,
            anchors,
        })
    }

    /// The trust domain's name (`example.org`).
    pub fn trust_domain(&self) -> &str {
        &self.trust_domain
    }

    /// The CA certificates.
    pub fn certificates(&self) -> &[CertificateDer<'static>] {
        &self.certificates
    }

    pub(crate) fn anchors(&self) -> &[TrustAnchor<'static>] {
        &self.anchors
    }
}

impl fmt::Debug for TrustBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustBundle")
            .field("trust_domain", &self.trust_domain)
            .field("certificates", &self.certificates.len())
            .finish()
    }
}

/// What Quiver reads from a leaf certificate (its own or a peer's).
#[derive(Clone)]
pub(crate) struct LeafInfo {
    pub spiffe_id: SpiffeId,
    pub not_after: SystemTime,
    pub serial: Vec<u8>,
    /// The uncompressed P-256 point when the key is EC P-256 (the only one ES256 signs with).
    pub p256_public_key: Option<Vec<u8>>,
}

/// Why a leaf certificate is not an X509-SVID, or DER certificates do not split.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CertificateError {
    /// The leaf is not a DER X.509 certificate.
    #[error("unreadable certificate: {0}")]
    Unreadable(x509_parser::nom::Err<X509Error>),
    /// The leaf is a CA.
    #[error("the leaf certificate is a CA certificate")]
    IsCa,
    /// The subjectAltName extension does not parse (or is there twice).
    #[error("unreadable subjectAltName: {0}")]
    UnreadableSan(X509Error),
    /// No subjectAltName extension.
    #[error("the certificate has no subjectAltName (no SPIFFE ID)")]
    NoSan,
    /// A subjectAltName without a URI.
    #[error("the certificate has no URI SAN (no SPIFFE ID)")]
    NoUriSan,
    /// More than one URI: which is the SPIFFE ID?
    #[error("the certificate has more than one URI SAN")]
    SeveralUriSans,
    /// The URI is not a SPIFFE ID.
    #[error(transparent)]
    SpiffeId(#[from] SpiffeIdError),
    /// One of concatenated certificates (counted from 0) does not parse.
    #[error("certificate {index}: {source}")]
    InChain {
        /// Its place in the chain.
        index: usize,
        /// Why.
        source: x509_parser::nom::Err<X509Error>,
    },
}

/// Reads a leaf certificate as an X509-SVID: exactly one URI SAN, a SPIFFE ID, and not a CA.
pub(crate) fn leaf_info(der: &[u8]) -> Result<LeafInfo, CertificateError> {
    let (_, cert) = X509Certificate::from_der(der).map_err(CertificateError::Unreadable)?;
    if cert.is_ca() {
        return Err(CertificateError::IsCa);
    }
    let san = cert
        .subject_alternative_name()
        .map_err(CertificateError::UnreadableSan)?
        .ok_or(CertificateError::NoSan)?;
    let uris: Vec<&str> = san
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::URI(u) => Some(*u),
            _ => None,
        })
        .collect();
    let uri = match uris.as_slice() {
        [one] => *one,
        [] => return Err(CertificateError::NoUriSan),
        _ => return Err(CertificateError::SeveralUriSans),
    };
    let spiffe_id = SpiffeId::parse(uri)?;
    let not_after = system_time(cert.validity().not_after.timestamp());
    let spki = cert.public_key();
    let is_p256 = spki.algorithm.algorithm == OID_KEY_TYPE_EC_PUBLIC_KEY
        && spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok())
            .is_some_and(|oid| oid == OID_EC_P256);
    Ok(LeafInfo {
        spiffe_id,
        not_after,
        serial: cert.raw_serial().to_vec(),
        p256_public_key: is_p256.then(|| spki.subject_public_key.data.to_vec()),
    })
}

fn system_time(unix_seconds: i64) -> SystemTime {
    if unix_seconds >= 0 {
        UNIX_EPOCH + Duration::from_secs(unix_seconds.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_secs(unix_seconds.unsigned_abs())
    }
}

/// Splits DER certificates concatenated back to back.
pub(crate) fn split_certificates(
    mut der: &[u8],
) -> Result<Vec<CertificateDer<'static>>, CertificateError> {
    let mut out = Vec::new();
    while !der.is_empty() {
        let (rest, _) =
            X509Certificate::from_der(der).map_err(|source| CertificateError::InChain {
                index: out.len(),
                source,
            })?;
        let (one, _) = der.split_at(der.len() - rest.len());
        out.push(CertificateDer::from(one.to_vec()));
        der = rest;
    }
    Ok(out)
}

fn invalid(reason: String) -> SpiffeError {
    SpiffeError::InvalidSvid(reason)
}

/// One X.509 identity: the SVID (certificate chain and private key) and the trust bundles, as
/// one Workload API response carries them. Immutable: a rotation brings a new one.
pub struct X509Identity {
    leaf: LeafInfo,
    hint: String,
    certified_key: Arc<CertifiedKey>,
    signer: Option<EcdsaKeyPair>,
    bundles: BTreeMap<String, Arc<TrustBundle>>,
}

impl X509Identity {
    /// Builds an identity from the Workload API's DER fields: `chain` (leaf first, concatenated),
    /// the unencrypted PKCS#8 `key`, the own trust domain's `bundle`, and `federated` bundles
    /// keyed by trust domain (`spiffe://example.org`). `expected_id`, when not empty, must be the
    /// leaf's SPIFFE ID.
    pub fn from_der(
        expected_id: &str,
        chain: &[u8],
        key: &[u8],
        bundle: &[u8],
        federated: &std::collections::HashMap<String, Vec<u8>>,
    ) -> Result<Self, SpiffeError> {
        let certificates = split_certificates(chain).map_err(|e| invalid(format!("SVID: {e}")))?;
        let leaf_der = certificates
            .first()
            .ok_or_else(|| invalid("the SVID has no certificate".into()))?;
        let leaf = leaf_info(leaf_der).map_err(|e| invalid(format!("SVID: {e}")))?;
        if !expected_id.is_empty() && expected_id != leaf.spiffe_id.as_str() {
            return Err(invalid(format!(
                "the SVID is for {expected_id} but its certificate says {}",
                leaf.spiffe_id
            )));
        }
        let provider = provider();
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.to_vec()));
        let certified_key = CertifiedKey::from_der(certificates, key_der, &provider)
            .map_err(|e| invalid(format!("the SVID's key: {e}")))?;
        let signer = leaf.p256_public_key.as_ref().and_then(|_| {
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, key, &SystemRandom::new())
                .ok()
        });
        let mut bundles = BTreeMap::new();
        let own_td = leaf.spiffe_id.trust_domain().to_string();
        for (key, der) in federated {
            let td = trust_domain_of_key(key)
                .map_err(|e| invalid(format!("federated bundle key: {e}")))?;
            bundles.insert(td.clone(), Arc::new(TrustBundle::from_der(&td, der)?));
        }
        bundles.insert(
            own_td.clone(),
            Arc::new(TrustBundle::from_der(&own_td, bundle)?),
        );
        Ok(Self {
            leaf,
            hint: String::new(),
            certified_key: Arc::new(certified_key),
            signer,
            bundles,
        })
    }

    /// The same identity with the Workload API's `hint`.
    pub(crate) fn with_hint(mut self, hint: String) -> Self {
        self.hint = hint;
        self
    }

    /// The SVID's SPIFFE ID.
    pub fn spiffe_id(&self) -> &SpiffeId {
        &self.leaf.spiffe_id
    }

    /// The SVID's hint (empty unless the operator set one).
    pub fn hint(&self) -> &str {
        &self.hint
    }

    /// The certificate chain, leaf first.
    pub fn certificates(&self) -> &[CertificateDer<'static>] {
        &self.certified_key.cert
    }

    /// When the leaf certificate expires.
    pub fn not_after(&self) -> SystemTime {
        self.leaf.not_after
    }

    /// The leaf certificate's serial number (big-endian bytes as encoded).
    pub fn serial(&self) -> &[u8] {
        &self.leaf.serial
    }

    /// The bundle of `trust_domain`, if this identity trusts it.
    pub fn bundle(&self, trust_domain: &str) -> Option<&Arc<TrustBundle>> {
        self.bundles.get(trust_domain)
    }

    /// The trust domains this identity trusts (its own and the federated ones).
    pub fn trust_domains(&self) -> impl Iterator<Item = &str> {
        self.bundles.keys().map(String::as_str)
    }

    pub(crate) fn certified_key(&self) -> &Arc<CertifiedKey> {
        &self.certified_key
    }

    /// The ES256 signer, when the SVID's key is EC P-256.
    pub(crate) fn es256_signer(&self) -> Option<&EcdsaKeyPair> {
        self.signer.as_ref()
    }
}

impl fmt::Debug for X509Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("X509Identity")
            .field("spiffe_id", &self.leaf.spiffe_id)
            .field("not_after", &self.leaf.not_after)
            .field("trust_domains", &self.bundles.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}
