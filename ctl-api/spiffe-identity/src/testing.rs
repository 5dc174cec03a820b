//! Test SPIFFE infrastructure (feature `testing`): a CA made with rcgen, and a Workload API
//! server speaking the real `SpiffeWorkloadAPI` gRPC protocol on a unix socket, whose X.509
//! responses the test pushes (rotations). For tests: failures panic.

use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use time::OffsetDateTime;
use tokio::net::UnixListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::peer::PeerIdentity;
use crate::svid::X509Identity;
use crate::tls::{SpiffeServerCertVerifier, SvidResolver};
use crate::workload::Identity;
use crate::workload_api::spiffe_workload_api_server::{SpiffeWorkloadApi, SpiffeWorkloadApiServer};
use crate::workload_api::{
    JwtBundlesRequest, JwtBundlesResponse, JwtsvidRequest, JwtsvidResponse, ValidateJwtsvidRequest,
    ValidateJwtsvidResponse, X509BundlesRequest, X509BundlesResponse, X509svid, X509svidRequest,
    X509svidResponse,
};

/// A SPIFFE CA for one trust domain.
pub struct TestCa {
    trust_domain: String,
    issuer: Issuer<'static, KeyPair>,
    cert_der: Vec<u8>,
}

/// An SVID the CA issued: what the Workload API hands over.
#[derive(Clone)]
pub struct TestSvid {
    /// `spiffe://<trust domain><path>`.
    pub spiffe_id: String,
    /// The certificate (DER).
    pub chain_der: Vec<u8>,
    /// The private key (PKCS#8 DER).
    pub key_der: Vec<u8>,
}

impl TestCa {
    /// A new self-signed CA for `trust_domain`.
    pub fn new(trust_domain: &str) -> Self {
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("test CA of {trust_domain}"));
        params.distinguished_name = dn;
        params.subject_alt_names.push(SanType::URI(
            format!("spiffe://{trust_domain}").try_into().unwrap(),
        ));
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Self {
            trust_domain: trust_domain.to_string(),
            issuer: Issuer::new(params, key),
            cert_der: cert.der().to_vec(),
        }
    }

    /// The trust bundle (DER).
    pub fn bundle_der(&self) -> Vec<u8> {
        self.cert_der.clone()
    }

    /// An X509-SVID for `spiffe://<trust domain><path>` (EC P-256, both TLS usages).
    pub fn issue(&self, path: &str, serial: u64, not_after: OffsetDateTime) -> TestSvid {
        let spiffe_id = format!("spiffe://{}{path}", self.trust_domain);
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![SanType::URI(spiffe_id.clone().try_into().unwrap())];
        params.serial_number = Some(SerialNumber::from(serial));
        params.not_before = OffsetDateTime::now_utc() - time::Duration::hours(1);
        params.not_after = not_after;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::KeyAgreement,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        TestSvid {
            spiffe_id,
            chain_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        }
    }

    /// The Workload API response carrying `svid` and this CA's bundle.
    pub fn response(&self, svid: &TestSvid) -> X509svidResponse {
        X509svidResponse {
            svids: vec![X509svid {
                spiffe_id: svid.spiffe_id.clone(),
                x509_svid: svid.chain_der.clone(),
                x509_svid_key: svid.key_der.clone(),
                bundle: self.bundle_der(),
                hint: String::new(),
            }],
            crl: vec![],
            federated_bundles: HashMap::new(),
        }
    }
}

/// In a year: SVIDs that do not expire during a test.
pub fn in_a_year() -> OffsetDateTime {
    OffsetDateTime::now_utc() + time::Duration::days(365)
}

/// A workload: its own Workload API in `dir` serving `svid`, and the identity fetched from it.
pub async fn workload(
    dir: &Path,
    name: &str,
    ca: &TestCa,
    svid: &TestSvid,
) -> (FakeWorkloadApi, Identity) {
    let api = FakeWorkloadApi::start(dir, name, ca.response(svid));
    let identity = Identity::connect(api.endpoint()).await.unwrap();
    (api, identity)
}

impl TestCa {
    /// A workload with an SVID of this CA for `path` (serial `serial`, valid a year) from its
    /// own Workload API in `dir`: see [`workload`].
    pub async fn workload(
        &self,
        dir: &Path,
        name: &str,
        path: &str,
        serial: u64,
    ) -> (FakeWorkloadApi, Identity) {
        workload(dir, name, self, &self.issue(path, serial, in_a_year())).await
    }
}

/// A SPIFFE client's TLS configuration built by hand (for what [`crate::client_config`]
/// does not do): verifies the server's SVID with `identity`'s bundles, speaks `versions`, and
/// presents `identity`'s SVID only when `present_svid`.
pub fn client_config_with(
    identity: &Identity,
    versions: &[&'static rustls::SupportedProtocolVersion],
    present_svid: bool,
) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(SpiffeServerCertVerifier::new(
            identity.clone(),
            algorithms,
        )));
    let mut config = if present_svid {
        builder.with_client_cert_resolver(Arc::new(SvidResolver::new(identity.clone())))
    } else {
        builder.with_no_client_auth()
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// `svid` as an identity of one's own, without a Workload API (to sign tokens with).
pub fn x509(ca: &TestCa, svid: &TestSvid) -> X509Identity {
    X509Identity::from_der(
        &svid.spiffe_id,
        &svid.chain_der,
        &svid.key_der,
        &ca.bundle_der(),
        &Default::default(),
    )
    .unwrap()
}

/// `svid` as the peer of a connection sees it (to verify its tokens with).
pub fn peer_of(svid: &TestSvid) -> PeerIdentity {
    PeerIdentity::from_certificates(vec![svid.chain_der.clone().into()]).unwrap()
}

/// A Workload API server on a unix socket; every FetchX509SVID stream gets the current response,
/// then each one [`FakeWorkloadApi::push`]ed.
pub struct FakeWorkloadApi {
    responses: watch::Sender<X509svidResponse>,
    endpoint: String,
    _server: tokio::task::JoinHandle<()>,
}

impl FakeWorkloadApi {
    /// Serves `first` on `dir/<name>.sock` (call within a tokio runtime).
    pub fn start(dir: &Path, name: &str, first: X509svidResponse) -> Self {
        let path = dir.join(format!("{name}.sock"));
        let listener = UnixListener::bind(&path).unwrap();
        let (responses, _) = watch::channel(first);
        let service = WorkloadService {
            responses: responses.clone(),
        };
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(SpiffeWorkloadApiServer::new(service))
                .serve_with_incoming(UnixListenerStream::new(listener))
                .await
                .unwrap();
        });
        Self {
            responses,
            endpoint: format!("unix://{}", path.display()),
            _server: server,
        }
    }

    /// `unix:///…/name.sock`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Streams `response` to every open FetchX509SVID (a rotation).
    pub fn push(&self, response: X509svidResponse) {
        self.responses.send_replace(response);
    }
}

#[derive(Clone)]
struct WorkloadService {
    responses: watch::Sender<X509svidResponse>,
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// As SPIRE's agent does: a call without the security header is refused.
fn check_header<T>(request: &Request<T>) -> Result<(), Status> {
    match request.metadata().get("workload.spiffe.io") {
        Some(v) if v == "true" => Ok(()),
        _ => Err(Status::invalid_argument(
            "security header missing from request",
        )),
    }
}

#[tonic::async_trait]
impl SpiffeWorkloadApi for WorkloadService {
    type FetchX509SVIDStream = ReceiverStream<Result<X509svidResponse, Status>>;
    type FetchX509BundlesStream = BoxStream<X509BundlesResponse>;
    type FetchJWTBundlesStream = BoxStream<JwtBundlesResponse>;

    async fn fetch_x509svid(
        &self,
        request: Request<X509svidRequest>,
    ) -> Result<Response<Self::FetchX509SVIDStream>, Status> {
        check_header(&request)?;
        let mut responses = self.responses.subscribe();
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                let response = responses.borrow_and_update().clone();
                if tx.send(Ok(response)).await.is_err() || responses.changed().await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn fetch_x509_bundles(
        &self,
        request: Request<X509BundlesRequest>,
    ) -> Result<Response<Self::FetchX509BundlesStream>, Status> {
        check_header(&request)?;
        Err(Status::unimplemented("not in the test Workload API"))
    }

    async fn fetch_jwtsvid(
        &self,
        request: Request<JwtsvidRequest>,
    ) -> Result<Response<JwtsvidResponse>, Status> {
        check_header(&request)?;
        Err(Status::unimplemented("not in the test Workload API"))
    }

    async fn fetch_jwt_bundles(
        &self,
        request: Request<JwtBundlesRequest>,
    ) -> Result<Response<Self::FetchJWTBundlesStream>, Status> {
        check_header(&request)?;
        Err(Status::unimplemented("not in the test Workload API"))
    }

    async fn validate_jwtsvid(
        &self,
        request: Request<ValidateJwtsvidRequest>,
    ) -> Result<Response<ValidateJwtsvidResponse>, Status> {
        check_header(&request)?;
        Err(Status::unimplemented("not in the test Workload API"))
    }
}
