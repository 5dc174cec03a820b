//! The crypto Quiver's TLS and SVIDs use: rustls' ring provider (no cmake, no NASM).

use rustls::crypto::CryptoProvider;

/// rustls' ring provider.
pub(crate) fn provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}
