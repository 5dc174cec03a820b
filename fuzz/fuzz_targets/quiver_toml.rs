//! (f) `quiver.toml`: any text through `Config::parse`, then `Config::topology` (the check of
//! the whole file the forwarder applies at start), and every value a valid configuration
//! carries through the parsers behind it (addresses and prefixes of either family, next hops,
//! MACs, the buffer pool's settings). Invariant: no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver::config::topology::parse_mac;
use quiver::config::values;
use quiver::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(cfg) = Config::parse(text) else {
        return;
    };
    let _ = cfg.buffers.pool_config();
    let _ = cfg.topology();
    for a in &cfg.address {
        let _ = values::prefix(&a.ip);
    }
    for r in &cfg.route {
        let _ = values::prefix(&r.prefix);
        for v in &r.via {
            let _ = values::via(v);
        }
    }
    for n in &cfg.neighbor {
        let _ = values::ip(&n.ip);
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
