//! The NSM forwarder service with SPIFFE identities: every hop mTLS with SVIDs from test
//! Workload APIs (the real `SpiffeWorkloadAPI` protocol, certificates from an rcgen CA), path
//! tokens checked on the way in and minted on the way out, certificate rotation without a
//! restart, and registration with a registry that expires entries, restarts, and sees Quiver
//! leave.
//!
//! - `harness`: a CA, a Workload API per workload, Quiver over a recording data path, an NSE
//!   behind mTLS that checks Quiver's path token as nsmgr would, an NSC's channel;
//! - `requests`: Requests over mTLS, fds passed under TLS, clients without an SVID;
//! - `tokens`: path tokens that are expired, forged, replayed or missing;
//! - `transport`: rotation, the health probe, TCP with mTLS only, plaintext on unix sockets only;
//! - `registration`: Register, Find and Unregister with Quiver's token; refresh and restart.

mod harness;
mod registration;
mod requests;
mod tokens;
mod transport;
