//! (f) `quiver.toml`: any text through `Config::parse`, and every value a valid configuration
//! carries through the parsers the forwarder applies to it at start (addresses, prefixes, MACs,
//! memif socket addresses, the buffer pool's settings). Invariant: no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver::config::topology::{parse_ip, parse_mac, parse_prefix};
use quiver::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(cfg) = Config::parse(text) else {
        return;
    };
    let _ = cfg.buffers.pool_config();
    for a in &cfg.address {
        let _ = parse_prefix(&a.ip);
    }
    for r in &cfg.route {
        let _ = parse_prefix(&r.prefix);
        for v in &r.via {
            let _ = parse_ip(v);
        }
    }
    for n in &cfg.neighbor {
        let _ = parse_ip(&n.ip);
        let _ = parse_mac(&n.mac);
    }
    for p in &cfg.port {
        let c = p.common();
        if let Some(m) = c.mac {
            let _ = parse_mac(m);
        }
    }
    let _ = format!("{cfg:?}");
});
