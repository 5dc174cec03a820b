//! DPDK ethdev ports for real, in one EAL shared by every test of this binary (DPDK starts its
//! EAL once per process): `net_ring` port pairs forwarding through the graph's L2 cross-connect,
//! `net_null` sources and sinks, `net_memif` servers with Quiver's own memif crate as the client,
//! a `net_tap` port answering the kernel's ping, and the proof that no packet is copied.
//!
//! The EAL runs with `--no-pci` (the host's NICs are never touched), `--in-memory` (or `--no-huge`
//! when hugepages are short), `--no-telemetry` and a file prefix unique to this process. Needs root;
//! without it every test prints why and passes, unless `QUIVER_REQUIRE_SYSTEM_TESTS=1`, which
//! makes a missing prerequisite a failure. The tests take turns (one lock), since they share the
//! EAL, the cores and the worker.

#![cfg(feature = "dpdk")]

// The parts, in dpdk/ beside this file. A test crate's root resolves `mod` like a `mod.rs`
// (from tests/, not tests/dpdk/), hence the paths.
#[path = "dpdk/eal.rs"]
mod eal;
#[path = "dpdk/forwarding.rs"]
mod forwarding;
#[path = "dpdk/graph.rs"]
mod graph;
#[path = "dpdk/mbufs.rs"]
mod mbufs;
#[path = "dpdk/memif_servers.rs"]
mod memif_servers;
#[path = "dpdk/tap.rs"]
mod tap;
