//! Clients and peers of other stacks: Python grpcio, nsmgr's registry.

use std::time::Duration;

use tonic::Code;

use crate::harness::*;

// ---------------------------------------------------------------------------------------------
// The same Request/Close from an independent client: Python grpcio, with stubs generated from
// our .proto files by grpcio-tools at test time.

const PYTHON_CLIENT: &str = r#"
import importlib.resources, os, sys
out, protodir, sock = sys.argv[1:4]
from grpc_tools import protoc
include = str(importlib.resources.files("grpc_tools") / "_proto")
protos = [os.path.join(protodir, p) for p in
          ("connection.proto", "connectioncontext.proto", "networkservice.proto", "registry.proto")]
rc = protoc.main(["protoc", "-I" + protodir, "-I" + include, "--python_out=" + out,
                  "--grpc_python_out=" + out] + protos)
assert rc == 0, "protoc failed"
sys.path.insert(0, out)
import grpc
import connection_pb2, connection_pb2_grpc, networkservice_pb2, networkservice_pb2_grpc

# grpcio's defaults, as a user has them: it puts the (percent-encoded) socket path in
# :authority, which Quiver accepts on a unix socket.
channel = grpc.insecure_channel("unix://" + sock)
ns = networkservice_pb2_grpc.NetworkServiceStub(channel)
monitor = connection_pb2_grpc.MonitorConnectionStub(channel)

request = networkservice_pb2.NetworkServiceRequest(
    connection=connection_pb2.Connection(
        id="py-1", network_service="icmp", network_service_endpoint_name="nse-1",
        payload="ETHERNET",
        path=connection_pb2.Path(index=0, path_segments=[
            connection_pb2.PathSegment(name="nsc", id="py-1", token="py-token")])),
    mechanism_preferences=[connection_pb2.Mechanism(
        cls="LOCAL", type="MEMIF", parameters={"inodeURL": "file:///proc/self/ns/net"})])
conn = ns.Request(request, timeout=30)
assert conn.id == "py-1", conn
assert conn.state == connection_pb2.UP, conn
assert conn.path.index == 0, conn
names = [s.name for s in conn.path.path_segments]
assert names == ["nsc", "quiver", "nse"], names
assert conn.path.path_segments[1].token == "py-token", conn
assert conn.path.path_segments[1].expires.seconds > 0, conn
assert conn.mechanism.type == "MEMIF", conn
assert conn.mechanism.parameters["socketfile"] == "@quiver/py-1/memif.socket", conn

events = monitor.MonitorConnections(connection_pb2.MonitorScopeSelector(), timeout=30)
first = next(events)
assert first.type == connection_pb2.INITIAL_STATE_TRANSFER, first
own = conn.path.path_segments[1].id
assert list(first.connections.keys()) == [own], first

try:
    ns.Request(networkservice_pb2.NetworkServiceRequest(
        connection=connection_pb2.Connection(id="py-2")), timeout=30)
    sys.exit("a Request without a path was accepted")
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
    assert "path" in e.details(), e.details()

ns.Close(conn, timeout=30)
deleted = next(events)
assert deleted.type == connection_pb2.DELETE and own in deleted.connections, deleted
ns.Close(conn, timeout=30)
events.cancel()
print("python client: ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_grpcio_client_requests_and_closes() {
    let venv = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("grpcio-venv");
    let python = match testkit::python_venv(&venv, &["grpcio", "grpcio-tools"]) {
        Ok(python) => python,
        Err(why) => {
            testkit::unavailable("python_grpcio_client_requests_and_closes", &why);
            return;
        }
    };
    let h = harness(DEFAULT).await;
    let stubs = tempfile::tempdir().unwrap();
    let script = stubs.path().join("client.py");
    std::fs::write(&script, PYTHON_CLIENT).unwrap();
    let proto = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto");
    let sock = h._dir.path().join("quiver.sock");
    let out = {
        let args = [
            script.display().to_string(),
            stubs.path().display().to_string(),
            proto.display().to_string(),
            sock.display().to_string(),
        ];
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(python)
                .args(args)
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    assert!(
        out.status.success(),
        "the Python client failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python client: ok"));
    // What Python asked for was built, then removed; the endpoint saw it all.
    assert_eq!(h.dp.created(), ["nsm-py-1-client", "nsm-py-1-endpoint"]);
    h.assert_no_state("after the Python client's Close");
    let order = h.nse_order();
    assert_eq!(order.len(), 3, "{order:?}");
    assert!(order[0].starts_with("request ") && order[1].starts_with("close "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_is_found_in_the_registry_and_quiver_registers_there() {
    let mut h = harness(Setup {
        registry: true,
        ..DEFAULT
    })
    .await;
    // Quiver registered itself: a p2p forwarder at its own socket.
    let mut registrations = h.registrations.take().unwrap();
    let me = tokio::time::timeout(Duration::from_secs(60), registrations.recv())
        .await
        .expect("no registration within 60 s")
        .unwrap();
    assert_eq!(me.name, "quiver");
    assert_eq!(me.network_service_names, ["forwarder"]);
    assert_eq!(me.network_service_labels["forwarder"].labels["p2p"], "true");
    // By fd (grpcfd): the inode of Quiver's socket.
    let socket = std::fs::metadata(h._dir.path().join("quiver.sock")).unwrap();
    let key = grpc_unix::InodeKey {
        dev: std::os::unix::fs::MetadataExt::dev(&socket),
        ino: std::os::unix::fs::MetadataExt::ino(&socket),
    };
    assert_eq!(me.url, key.to_string());

    // `nse-1` is in the registry: the Request reaches it.
    let answer = h.request(memif_request("c1")).await.unwrap();
    assert_eq!(segments(&answer)[2].0, "nse");
    assert_eq!(h.nse_requests(), 1);
    // An endpoint the registry does not know: NotFound, and the client side rolled back.
    let mut req = memif_request("c2");
    req.connection
        .as_mut()
        .unwrap()
        .network_service_endpoint_name = "nse-unknown".into();
    let err = h.request(req).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(h.dp.port("nsm-c2-client").is_none());
    assert_eq!(h.core.connection_count(), 1);
}
