//! Calls into the data path ([`NsmBackend`]) from async code: each runs on tokio's blocking
//! pool, and a refusal becomes the gRPC status that says what it was.

use std::sync::Arc;

use tonic::Status;

use crate::dataplane::{BackendError, NsmBackend, PortName, PortSpec};

/// The data path, as the core calls it.
#[derive(Clone)]
pub(super) struct DataPath(Arc<dyn NsmBackend>);

impl DataPath {
    /// Calls into `dp`.
    pub(super) fn new(dp: Arc<dyn NsmBackend>) -> DataPath {
        DataPath(dp)
    }

    /// Runs `f` on the data path, on tokio's blocking pool.
    pub(super) async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn NsmBackend) -> Result<T, BackendError> + Send + 'static,
    ) -> Result<T, Status> {
        let dp = self.0.clone();
        tokio::task::spawn_blocking(move || f(&*dp))
            .await
            .map_err(|e| Status::internal(format!("data-path task failed: {e}")))?
            .map_err(dp_status)
    }

    /// Creates the port `spec` for `owner`.
    pub(super) async fn create(&self, owner: &str, spec: PortSpec) -> Result<(), Status> {
        let o = owner.to_string();
        self.call(move |d| create_port(d, &o, &spec)).await
    }

    /// Removes the cross-connects of `ports` (one that has none is fine).
    pub(super) async fn disconnect(
        &self,
        owner: &str,
        ports: [&PortName; 2],
    ) -> Result<(), Status> {
        for p in ports.map(PortName::clone) {
            let o = owner.to_string();
            ignore_not_found(self.call(move |d| d.disconnect(&o, &p)).await)?;
        }
        Ok(())
    }

    /// Removes `port` of `owner` (one already gone is fine).
    pub(super) async fn remove_port(&self, owner: &str, port: PortName) -> Result<(), Status> {
        let o = owner.to_string();
        ignore_not_found(self.call(move |d| d.remove_port(&o, &port)).await)
    }

    /// Removes everything `owner` owns.
    pub(super) async fn remove_owned(&self, owner: &str) -> Result<(), Status> {
        let o = owner.to_string();
        self.call(move |d| d.remove_owned(&o)).await
    }
}

/// Creates the port `spec` for `owner`.
pub(super) fn create_port(
    d: &dyn NsmBackend,
    owner: &str,
    spec: &PortSpec,
) -> Result<(), BackendError> {
    match spec {
        PortSpec::Memif(m) => d.create_memif(owner, m),
        PortSpec::Kernel(k) => d.create_kernel(owner, k),
        PortSpec::Vxlan(v) => d.create_vxlan(owner, v),
        PortSpec::Wireguard(w) => d.create_wireguard(owner, w),
        PortSpec::Vlan(v) => d.create_vlan(owner, v),
    }
}

/// `r`, with `NotFound` as success.
pub(super) fn ignore_not_found(r: Result<(), Status>) -> Result<(), Status> {
    match r {
        Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
        other => other,
    }
}

fn dp_status(e: BackendError) -> Status {
    match e {
        BackendError::NotFound(m) => Status::not_found(m),
        BackendError::AlreadyExists(m) => Status::already_exists(m),
        BackendError::InvalidArgument(m) => Status::invalid_argument(m),
        BackendError::Failed(m) => Status::internal(m),
    }
}
