//! The examples (`responder`, `traffic`) as real processes, against peers built here with the
//! crate's API, against test forwarders (faithful and misbehaving) and against `dpdk-testpmd`;
//! plus their frame parsers and checkers in-process (tables and property tests).
//!
//! The example binaries are built once per test run with the `cargo` that runs the tests
//! (`cargo build --examples --message-format=json`, which also says where they are). Readiness is
//! never a sleep: tests wait, with deadlines, for lines the tools print (`listening …`,
//! `connected …`), for link state, or for frames. DPDK tests need root, `dpdk-testpmd` and free
//! hugepages; without them they print why and pass, unless `QUIVER_REQUIRE_SYSTEM_TESTS=1`.

mod common;

#[allow(dead_code)]
#[path = "../examples/common/reply.rs"]
mod reply;
#[allow(dead_code)]
#[path = "../examples/common/reply6.rs"]
mod reply6;
#[allow(dead_code)]
#[path = "../examples/common/stream.rs"]
mod stream;
#[path = "../examples/common/wire.rs"]
mod wire;

// The sections, in examples/ beside this file. A test crate's root resolves `mod` like a
// `mod.rs` (from tests/, not tests/examples/), hence the paths.
#[path = "examples/frames.rs"]
mod frames;
#[path = "examples/peers.rs"]
mod peers;
#[path = "examples/responder.rs"]
mod responder;
#[path = "examples/responder_parser.rs"]
mod responder_parser;
#[path = "examples/testpmd.rs"]
mod testpmd;
#[path = "examples/tool.rs"]
mod tool;
#[path = "examples/traffic.rs"]
mod traffic;
#[path = "examples/traffic_stream.rs"]
mod traffic_stream;
