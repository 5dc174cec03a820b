//! (e) NSM Request translation: arbitrary bytes decoded as a protobuf `NetworkServiceRequest`
//! (prost), then checked as `Core::request` checks it before touching anything
//! (`nsm_forwarder::connect::check_request`: id, payload, IP context, MTU, path, mechanism
//! selection), fresh and as a refresh, with and without a tunnel address; each preference also
//! read as an endpoint's answer (`mechanism::endpoint_side`), and the path as a Close and a
//! monitor selector see it. Invariants: no panic; an error `Status` or a plan whose id is the
//! connection's, whose path has Quiver's segment right after the caller's, whose MTU and
//! mechanism are ones Quiver serves.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nsm_forwarder::connect::{check_request, MAX_ID_LEN};
use nsm_forwarder::{mechanism, mtu, path, NsmConfig};
use nsm_proto::connection::MonitorScopeSelector;
use nsm_proto::networkservice::NetworkServiceRequest;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(req) = NetworkServiceRequest::decode(data) else {
        return;
    };
    if req.mechanism_preferences.len() > 64 {
        return;
    }
    let plain = NsmConfig::default();
    let tunnel = NsmConfig {
        tunnel_ip: Some("192.0.2.1".parse().unwrap()),
        ..NsmConfig::default()
    };
    for cfg in [&plain, &tunnel] {
        for known in [None, Some("b5e4c7a2-0000-4000-8000-000000000001")] {
            let Ok(plan) = check_request(cfg, &req, known) else {
                continue;
            };
            let conn = req
                .connection
                .as_ref()
                .expect("a plan without a connection");
            assert_eq!(plan.id, conn.id);
            assert!(!plan.id.is_empty() && plan.id.len() <= MAX_ID_LEN);
            let p = &plan.position;
            assert_eq!(p.own_index, p.prev_index + 1);
            assert_eq!(plan.path.index, p.own_index);
            let own = &plan.path.path_segments[p.own_index as usize];
            assert_eq!(own.name, cfg.name);
            assert_eq!(own.id, p.own_id);
            assert!(!p.own_id.is_empty());
            assert_eq!(
                plan.path.path_segments[p.prev_index as usize].id, plan.id,
                "the caller's segment"
            );
            assert!((mtu::MIN_MTU..=mtu::MAX_MTU).contains(&plan.mtu));
            assert!(mechanism::SUPPORTED.contains(&plan.mechanism.r#type.as_str()));
            // The answer's path, as the monitor and a later Close see it.
            let mut answer = conn.clone();
            answer.path = Some(plan.path.clone());
            answer.id = p.own_id.clone();
            assert!(path::check(&answer).is_ok());
            let sel = MonitorScopeSelector {
                path_segments: plan.path.path_segments[p.prev_index as usize..]
                    .iter()
                    .take(2)
                    .cloned()
                    .collect(),
                network_services: Vec::new(),
            };
            assert!(path::matches_selector(&answer, &sel));
        }
    }
    for m in req.mechanism_preferences.iter().take(4) {
        // Answers read as after each offer Quiver makes: VXLAN, WireGuard, or LOCAL only.
        for remote in [
            Some(mechanism::Remote::Vxlan),
            Some(mechanism::Remote::Wireguard),
            None,
        ] {
            let _ = mechanism::endpoint_side(Some(m), "nsm-fuzz", remote);
        }
    }
    if let Some(c) = &req.connection {
        let _ = path::check(c);
        for remote in [mechanism::Remote::Vxlan, mechanism::Remote::Wireguard] {
            let prefs = &req.mechanism_preferences;
            let _ = mechanism::select(c.mechanism.as_ref(), prefs, Some(remote));
        }
    }
});
