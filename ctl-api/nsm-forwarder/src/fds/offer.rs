//! Quiver's own files, offered to an endpoint by fd (NSM's sendfd on Quiver's client side).

use grpc_unix::FdSender;
use nsm_proto::networkservice::NetworkServiceRequest;
use tonic::Status;

/// Quiver as a client on a unix socket: every `file:///path` parameter of `req`'s mechanism
/// preferences (Quiver's own offers) goes as the file's `inode://<dev>/<ino>`, its fd queued
/// on `fds` to go with the call, as NSM's sendfd does. The connection's mechanism (the
/// endpoint's own answer, sent back on refresh) is left alone. A file that cannot be opened
/// is `Internal`.
pub fn pass_offered_files(fds: &FdSender, req: &mut NetworkServiceRequest) -> Result<(), Status> {
    for m in &mut req.mechanism_preferences {
        fds.rewrite_file_urls(&mut m.parameters).map_err(|e| {
            Status::internal(format!("cannot pass a file of Quiver's offer by fd: {e}"))
        })?;
    }
    Ok(())
}
