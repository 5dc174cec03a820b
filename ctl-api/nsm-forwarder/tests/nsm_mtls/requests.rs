//! Requests over mTLS: paths whose tokens verify, namespaces passed by fd, clients without an SVID.

use std::path::Path as FsPath;
use std::time::{Duration, UNIX_EPOCH};

use nsm_forwarder::dial::dial_with;
use nsm_proto::connection::State;
use nsm_proto::networkservice::network_service_client::NetworkServiceClient;
use spiffe_identity::testing::{in_a_year, peer_of, TestCa};
use spiffe_identity::tokens::{self};
use spiffe_identity::{self as spiffe, connect_tls, Identity, X509Identity};
use tonic::{Code, Request};

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_mtls_returns_a_path_whose_tokens_verify() {
    let h = harness().await;
    let channel = h.nsc_channel().await;
    let Answered {
        quiver,
        token,
        answer,
    } = request_up(&h, &channel, "c1").await;
    let mut client = NetworkServiceClient::new(channel.channel());
    let segments = &answer.path.as_ref().unwrap().path_segments;

    // The NSC's segment: its token as Quiver checked it, signed by the NSC's key.
    let claims = tokens::verify(&segments[0].token, &peer_of(&h.nsc_svid)).unwrap();
    assert_eq!(claims.sub, h.nsc_svid.spiffe_id);
    assert_eq!(claims.aud, [quiver.spiffe_id().to_string()]);

    // Quiver's segment: its own token, signed with its SVID's key, for the endpoint.
    let own = &segments[1];
    assert_ne!(own.token, token.token, "Quiver minted its own token");
    let claims = tokens::verify(&own.token, &quiver).unwrap();
    assert_eq!(claims.sub, quiver.spiffe_id().as_str());
    assert_eq!(claims.aud, [h.nse_svid.spiffe_id.as_str()]);
    let expires = nsm_forwarder::path::system_time(own.expires.as_ref().unwrap()).unwrap();
    assert_eq!(
        expires.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64,
        claims.exp,
        "the segment's expiry is the token's"
    );
    {
        // The endpoint got it in the metadata too, from Quiver's TLS identity.
        let log = h.nse.log.lock().unwrap();
        let (peer, verdict, _) = &log.requests[0];
        assert_eq!(peer.spiffe_id(), quiver.spiffe_id());
        assert_eq!(verdict.as_ref().unwrap().token, own.token);
    }

    // Close goes through with tokens both ways too.
    let mut close = Request::new(answer.clone());
    nsc_token(&h, &channel)
        .insert_into(close.metadata_mut())
        .unwrap();
    client.close(close).await.unwrap();
    let log = h.nse.log.lock().unwrap();
    assert_eq!(log.closes.len(), 1);
    assert!(log.closes[0].is_ok(), "{:?}", log.closes[0]);
    drop(log);
    assert!(h.dp.is_empty());
}

/// grpcfd under TLS: the NSC passes its namespace's fd on the socket beneath the TLS and names
/// it `inode://dev/ino`; Quiver resolves it (an unknown one is refused before anything is
/// built), answers with the client's URL, holds the fd while the connection lives and closes
/// it at Close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_fd_passed_under_mtls_resolves_inode_urls_until_close() {
    let h = harness().await;
    let channel = h.nsc_channel().await;
    let mut client = NetworkServiceClient::new(channel.channel());
    let with_url = |url: &str| {
        let mut req = memif_request("fd1");
        req.mechanism_preferences[0]
            .parameters
            .insert("inodeURL".into(), url.into());
        with_token(req, &nsc_token(&h, &channel))
    };
    let key = channel
        .fds()
        .send_file(FsPath::new("/proc/self/ns/net"))
        .unwrap();
    let unknown = grpc_unix::InodeKey {
        dev: key.dev,
        ino: key.ino ^ 0x5a5a,
    };
    let err = client
        .request(with_url(&unknown.to_string()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message()
            .contains(&format!("no file descriptor was passed for {unknown}")),
        "{err:?}"
    );
    h.assert_no_state("an unknown inode:// URL");
    // The fd went with that call's bytes, under the TLS: the next call may name it.
    let answer = client
        .request(with_url(&key.to_string()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.state, State::Up as i32);
    assert_eq!(
        answer.mechanism.as_ref().unwrap().parameters["inodeURL"],
        key.to_string()
    );
    assert_eq!(h.service.held_fds().len(), 1, "held by the connection");
    let mut close = Request::new(answer);
    nsc_token(&h, &channel)
        .insert_into(close.metadata_mut())
        .unwrap();
    client.close(close).await.unwrap();
    assert!(
        h.service.held_fds().is_empty(),
        "closed with the connection"
    );
    assert!(h.dp.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_valid_svid_is_refused_at_the_handshake() {
    let h = harness().await;
    // An SVID from a CA of the same trust domain name that Quiver does not trust; the client
    // itself trusts Quiver's CA, so the refusal is Quiver's.
    let rogue_ca = TestCa::new(TD);
    let rogue_svid = rogue_ca.issue(NSC_PATH, 9, in_a_year());
    let rogue = Identity::fixed(
        X509Identity::from_der(
            &rogue_svid.spiffe_id,
            &rogue_svid.chain_der,
            &rogue_svid.key_der,
            &h.ca.bundle_der(),
            &Default::default(),
        )
        .unwrap(),
    );
    let refused = async {
        let channel = connect_tls(&h.listen_on, &rogue).await?;
        // TLS 1.3: the server's verdict on the client certificate may come after the client
        // finished; the first call then fails.
        NetworkServiceClient::new(channel.channel())
            .request(memif_request("r1"))
            .await
            .map_err(spiffe::SpiffeError::from)?;
        Ok::<_, spiffe::SpiffeError>(())
    };
    assert!(refused.await.is_err(), "a foreign SVID got through");
    // Without any certificate (plaintext over the same socket).
    let plain = dial_with(&h.listen_on, Duration::from_secs(10), None).await;
    let got_through = match plain {
        Ok(channel) => NetworkServiceClient::new(channel)
            .request(memif_request("p1"))
            .await
            .is_ok(),
        Err(_) => false,
    };
    assert!(!got_through, "a plaintext client got through");
    h.assert_no_state("refused clients");
}
