//! Path tokens that are expired, forged, replayed or missing: PermissionDenied, nothing changed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nsm_proto::networkservice::network_service_client::NetworkServiceClient;
use spiffe_identity::testing::{in_a_year, peer_of, x509};
use spiffe_identity::tokens::{self, PathToken, TokenClaims};
use spiffe_identity::{SpiffeId, X509Identity};
use tonic::{Code, Request};

use crate::harness::*;

/// A token signed with `key`, with `sub`, `aud` and `expires` as given, right or wrong.
fn signed(key: &X509Identity, sub: &SpiffeId, aud: &SpiffeId, expires: SystemTime) -> PathToken {
    PathToken {
        token: tokens::sign(
            key,
            &TokenClaims {
                sub: sub.to_string(),
                aud: vec![aud.to_string()],
                exp: expires.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64,
            },
        )
        .unwrap(),
        expires,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_forged_replayed_or_missing_path_tokens_are_permission_denied_and_change_nothing() {
    let h = harness().await;
    let channel = h.nsc_channel().await;
    let quiver = channel.peer().unwrap();
    let mut client = NetworkServiceClient::new(channel.channel());
    let nsc = h.nsc_identity.current();

    // Expired: signed by the NSC, but its exp has passed.
    let past = SystemTime::now() - Duration::from_secs(120);
    let expired = signed(&nsc, nsc.spiffe_id(), quiver.spiffe_id(), past);
    // Forged: well-formed, for Quiver, but signed by another workload's key.
    let other = x509(&h.ca, &h.ca.issue("/ns/default/sa/other", 7, in_a_year()));
    let forged = tokens::mint(&other, &quiver, Duration::from_secs(600)).unwrap();
    let forged_as_nsc = signed(&other, nsc.spiffe_id(), quiver.spiffe_id(), forged.expires);
    // Replayed: the NSC's own, well signed, but minted for another workload (as a token taken
    // from another hop would be).
    let elsewhere = peer_of(
        &h.ca
            .issue("/ns/nsm-system/sa/another-forwarder", 8, in_a_year()),
    );
    let for_another = tokens::mint(&nsc, &elsewhere, Duration::from_secs(600)).unwrap();
    // The NSC's key and audience right, but another workload named as sub.
    let wrong_sub = signed(
        &nsc,
        elsewhere.spiffe_id(),
        quiver.spiffe_id(),
        forged.expires,
    );
    // Each refusal says which check failed.
    let not_for_quiver = format!("does not include {}", quiver.spiffe_id());
    for (what, token, says) in [
        ("expired", Some(&expired), "expired"),
        (
            "signed by another key",
            Some(&forged),
            "not signed by the TLS peer",
        ),
        (
            "another key, the NSC's sub",
            Some(&forged_as_nsc),
            "not signed by the TLS peer",
        ),
        (
            "minted for another audience",
            Some(&for_another),
            not_for_quiver.as_str(),
        ),
        ("another sub", Some(&wrong_sub), "is not the TLS peer"),
        ("missing", None, "nsm-client-token"),
    ] {
        let request = match token {
            Some(t) => with_token(memif_request("c1"), t),
            None => Request::new(memif_request("c1")),
        };
        let status = client.request(request).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{what}: {status:?}");
        assert!(status.message().contains(says), "{what}: {status:?}");
        h.assert_no_state(what);
    }
    // On Close too: a token minted for another workload closes nothing.
    let mut close = Request::new(memif_request("c1").connection.unwrap());
    for_another.insert_into(close.metadata_mut()).unwrap();
    let status = client.close(close).await.unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    // A bad token on Close is refused too (nothing to close, nothing sent on).
    let mut close = Request::new(memif_request("c1").connection.unwrap());
    expired.insert_into(close.metadata_mut()).unwrap();
    assert_eq!(
        client.close(close).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    assert!(h.nse.log.lock().unwrap().closes.is_empty());
    // The same channel still works with a good token: the refusals were the tokens'.
    client
        .request(with_token(memif_request("c1"), &nsc_token(&h, &channel)))
        .await
        .unwrap();
}
