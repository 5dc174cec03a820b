//! The NSM forwarder server over a unix socket, driven by a tonic client, with an in-memory
//! data path (which refuses anything the real one would: duplicate ports, cross-connects of
//! unknown ports) and a tonic server playing the endpoint (NSE).
//!
//! - `fake_dataplane`, `fake_endpoint` (the NSE, its MonitorConnections, nsmgr's registry) and
//!   `harness`: what the tests run against;
//! - `requests`: Request, refresh, Close, expiry, the monitor, link changes, payloads;
//! - `failures`: refusals, rollbacks, bad requests, health, startup, many at once;
//! - `hostile`: input tried the way an attacker would (sizes, forged fds, symlinks into
//!   `/proc/self`, memif socket files, a flood of Requests for one id);
//! - `clients`: a Python grpcio client, the registry;
//! - `next_hop`: watching the endpoint's MonitorConnections.

mod clients;
mod failures;
mod fake_dataplane;
mod fake_endpoint;
mod harness;
mod hostile;
mod next_hop;
mod requests;
