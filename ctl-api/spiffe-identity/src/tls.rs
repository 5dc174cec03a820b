//! rustls configurations made of an [`Identity`]: mTLS between SPIFFE workloads.
//!
//! Both sides present the current SVID (read at every handshake, so a rotation applies to the
//! next one without a restart) and verify the peer's chain against the bundle of the peer's
//! trust domain, requiring a SPIFFE ID (one URI SAN) and accepting any; no hostname is checked.
//! TLS 1.2 and 1.3 only; ALPN `h2` (gRPC); no session resumption, so every connection runs a
//! full handshake against the current certificates and bundles.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::ResolvesClientCert;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, NoServerSessionStorage, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, OtherError,
    ServerConfig, SignatureScheme,
};

use crate::crypto::provider;
use crate::error::SpiffeError;
use crate::svid::leaf_info;
use crate::workload::Identity;

const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// A server configuration: presents the current SVID, requires a client certificate that is a
/// valid SVID of a trusted trust domain.
pub fn server_config(identity: &Identity) -> Result<Arc<ServerConfig>, SpiffeError> {
    let provider = Arc::new(provider());
    let algorithms = provider.signature_verification_algorithms;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(VERSIONS)?
        .with_client_cert_verifier(Arc::new(SvidVerifier::new(identity.clone(), algorithms)))
        .with_cert_resolver(Arc::new(SvidResolver::new(identity.clone())));
    config.alpn_protocols = vec![b"h2".to_vec()];
    config.session_storage = Arc::new(NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// A client configuration: presents the current SVID, requires the server's certificate to be a
/// valid SVID of a trusted trust domain (any SPIFFE ID, no hostname check).
pub fn client_config(identity: &Identity) -> Result<Arc<ClientConfig>, SpiffeError> {
    let provider = Arc::new(provider());
    let algorithms = provider.signature_verification_algorithms;
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(VERSIONS)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(SvidVerifier::new(identity.clone(), algorithms)))
        .with_client_cert_resolver(Arc::new(SvidResolver::new(identity.clone())));
    config.alpn_protocols = vec![b"h2".to_vec()];
    config.resumption = rustls::client::Resumption::disabled();
    // Names mean nothing here: the peer is known by its SPIFFE ID.
    config.enable_sni = false;
    Ok(Arc::new(config))
}

/// Presents the identity's current SVID, on either side.
#[derive(Debug)]
pub struct SvidResolver {
    identity: Identity,
}

impl SvidResolver {
    /// A resolver reading `identity` at every handshake.
    pub fn new(identity: Identity) -> Self {
        Self { identity }
    }
}

impl ResolvesServerCert for SvidResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.identity.current().certified_key().clone())
    }
}

impl ResolvesClientCert for SvidResolver {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.identity.current().certified_key().clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Verifies the peer's certificate as an X509-SVID of a trusted trust domain, on either side:
/// as a [`ClientCertVerifier`] (server side, for client authentication) and as a
/// [`ServerCertVerifier`] (client side, for server authentication, ignoring the server name).
/// The bundles are read from the identity at every handshake.
#[derive(Debug)]
pub struct SvidVerifier {
    identity: Identity,
    algorithms: WebPkiSupportedAlgorithms,
}

/// The server side's verifier of client certificates.
pub type SpiffeClientCertVerifier = SvidVerifier;
/// The client side's verifier of server certificates.
pub type SpiffeServerCertVerifier = SvidVerifier;

impl SvidVerifier {
    /// A verifier trusting the bundles of `identity` (read at every handshake).
    pub fn new(identity: Identity, algorithms: WebPkiSupportedAlgorithms) -> Self {
        Self {
            identity,
            algorithms,
        }
    }

    fn verify(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
        usage: webpki::KeyUsage,
    ) -> Result<(), rustls::Error> {
        verify_svid(
            &self.identity,
            &self.algorithms,
            end_entity,
            intermediates,
            now,
            usage,
        )
    }
}

/// The handshake-signature methods [`ClientCertVerifier`] and [`ServerCertVerifier`] share (the
/// same three methods in both traits): checked with the provider's algorithms.
macro_rules! handshake_signatures {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.algorithms.supported_schemes()
        }
    };
}

impl ClientCertVerifier for SvidVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.verify(
            end_entity,
            intermediates,
            now,
            webpki::KeyUsage::client_auth(),
        )?;
        Ok(ClientCertVerified::assertion())
    }

    handshake_signatures!();
}

impl ServerCertVerifier for SvidVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.verify(
            end_entity,
            intermediates,
            now,
            webpki::KeyUsage::server_auth(),
        )?;
        Ok(ServerCertVerified::assertion())
    }

    handshake_signatures!();
}

/// The X509-SVID check both sides make: a SPIFFE ID in the leaf, and a chain to the bundle of
/// that ID's trust domain, valid now, for `usage`.
fn verify_svid(
    identity: &Identity,
    algorithms: &WebPkiSupportedAlgorithms,
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    now: UnixTime,
    usage: webpki::KeyUsage,
) -> Result<(), rustls::Error> {
    let leaf = leaf_info(end_entity).map_err(|e| other(SpiffeError::InvalidSvid(e.to_string())))?;
    let current = identity.current();
    let bundle = current
        .bundle(leaf.spiffe_id.trust_domain())
        .ok_or_else(|| {
            tracing::debug!(peer = %leaf.spiffe_id, "peer from an untrusted trust domain");
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
        })?;
    let cert = webpki::EndEntityCert::try_from(end_entity).map_err(pki_error)?;
    cert.verify_for_usage(
        algorithms.all,
        bundle.anchors(),
        intermediates,
        now,
        usage,
        None,
        None,
    )
    .map_err(pki_error)?;
    Ok(())
}

fn other(e: SpiffeError) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(e))))
}

/// webpki's verdicts as rustls errors (the alert the peer receives follows from them).
#[allow(deprecated)] // `RequiredEkuNotFound` is still what older paths return.
fn pki_error(e: webpki::Error) -> rustls::Error {
    use webpki::Error as E;
    let kind = match e {
        E::BadDer | E::BadDerTime | E::TrailingData(_) => CertificateError::BadEncoding,
        E::CertExpired { .. } | E::InvalidCertValidity => CertificateError::Expired,
        E::CertNotValidYet { .. } => CertificateError::NotValidYet,
        E::UnknownIssuer => CertificateError::UnknownIssuer,
        E::CertRevoked => CertificateError::Revoked,
        E::InvalidSignatureForPublicKey => CertificateError::BadSignature,
        E::RequiredEkuNotFound | E::RequiredEkuNotFoundContext(_) => {
            CertificateError::InvalidPurpose
        }
        e => CertificateError::Other(OtherError(Arc::new(e))),
    };
    rustls::Error::InvalidCertificate(kind)
}
