//! Raw bindings to the parts of DPDK 22.11 that Quiver uses: EAL start-up and lcores, ethdev
//! ports and their rx/tx bursts, mempools (including custom mempool ops), mbufs, and rings; and,
//! for the benches' `graph-ip4` reference, DPDK's graph library (`rte_graph_*`), librte_node's
//! IPv4 and ethdev nodes (`rte_node_*`), `rte_lpm`, and `csrc/graph_bench.c`'s source node and
//! helpers (`quiver_gb_*`).
//!
//! Generated at build time by bindgen from the headers `pkg-config libdpdk` points at, restricted
//! to an allowlist (see `build.rs`). DPDK's fast path is made of `static inline` functions
//! (`rte_eth_rx_burst`, `rte_eth_tx_burst`, `rte_pktmbuf_free`, `rte_mempool_*` cache
//! operations, `rte_lcore_id`); bindgen's `wrap_static_fns` emits a C wrapper for each, compiled
//! into this crate, and the Rust declarations here call those wrappers. A few values bindgen cannot
//! see (the TLS `rte_errno`, constants built with function-like macros) come from `csrc/shim.c`
//! as `quiver_*` / `QUIVER_*`.
//!
//! Linking: every library `pkg-config --libs libdpdk` lists, plus `rte_bus_vdev` and
//! `rte_net_ring`. Poll-mode drivers are not linked: DPDK's shared build (Debian's) has
//! `rte_eal_init` load every plugin in `/usr/lib/<triplet>/dpdk/pmds-<abi>/`; EAL's `-d <path>`
//! loads more.
//!
//! Everything here is `unsafe` FFI; `drivers::dpdk` is the safe layer above it.

/// The generated bindings. bindgen's names follow C, not Rust conventions, and its output has
/// no docs, so its lints are relaxed here and only here.
#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    improper_ctypes,
    clippy::all,
    clippy::pedantic,
    clippy::undocumented_unsafe_blocks
)]
mod bindings {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}

pub use bindings::*;
