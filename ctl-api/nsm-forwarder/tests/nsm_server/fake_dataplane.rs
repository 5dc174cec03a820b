//! The in-memory data path: refuses what the real one would (duplicate ports, cross-connects of
//! unknown ports) and records what was made and removed.

use std::collections::BTreeMap;
use std::sync::Mutex;

use nsm_forwarder::dataplane::{KernelSpec, MemifSpec};
use nsm_forwarder::{
    BackendError, L3NextHops, LinkEvent, LinkEvents, NsmBackend, PortName, PortSpec,
};

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Xc {
    L2(String),
    L3(String, L3NextHops),
}

#[derive(Default, Debug)]
pub(crate) struct FakeState {
    pub(crate) ports: BTreeMap<String, (String, PortSpec)>,
    pub(crate) xcs: BTreeMap<String, (String, Xc)>,
    /// Every successful create, in order (port names).
    pub(crate) created: Vec<String>,
    /// Every successful remove_port or removal by remove_owned (port names).
    pub(crate) removed: Vec<String>,
    /// Creating this port fails.
    pub(crate) fail_create: Option<String>,
    /// The owner of every remove_owned call, in order.
    pub(crate) removed_owners: Vec<String>,
    /// The next this many remove_owned calls fail (as a worker that does not answer).
    pub(crate) fail_remove_owned: u32,
}

#[derive(Default)]
pub(crate) struct FakeDp {
    pub(crate) state: Mutex<FakeState>,
    pub(crate) links: Mutex<Option<LinkEvents>>,
}

impl FakeDp {
    pub(crate) fn st(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap()
    }
    pub(crate) fn is_empty(&self) -> bool {
        let s = self.st();
        s.ports.is_empty() && s.xcs.is_empty()
    }
    pub(crate) fn port(&self, name: &str) -> Option<PortSpec> {
        self.st().ports.get(name).map(|(_, p)| p.clone())
    }
    pub(crate) fn xc(&self, from: &str) -> Option<Xc> {
        self.st().xcs.get(from).map(|(_, x)| x.clone())
    }
    pub(crate) fn created(&self) -> Vec<String> {
        self.st().created.clone()
    }
    pub(crate) fn removed(&self) -> Vec<String> {
        self.st().removed.clone()
    }
    pub(crate) fn add(&self, owner: &str, spec: PortSpec) -> Result<(), BackendError> {
        let mut s = self.st();
        let name = spec.name().0.clone();
        if s.fail_create.as_ref() == Some(&name) {
            return Err(BackendError::Failed(format!("cannot create {name}")));
        }
        if s.ports.contains_key(&name) {
            return Err(BackendError::AlreadyExists(name));
        }
        s.ports.insert(name.clone(), (owner.into(), spec));
        s.created.push(name);
        Ok(())
    }
    pub(crate) fn link(&self, ev: LinkEvent) {
        self.links.lock().unwrap().as_ref().unwrap().send(ev);
    }
}

impl NsmBackend for FakeDp {
    fn create_memif(&self, owner: &str, spec: &MemifSpec) -> Result<(), BackendError> {
        self.add(owner, PortSpec::Memif(spec.clone()))
    }
    fn create_kernel(&self, owner: &str, spec: &KernelSpec) -> Result<(), BackendError> {
        self.add(owner, PortSpec::Kernel(spec.clone()))
    }
    fn remove_port(&self, owner: &str, port: &PortName) -> Result<(), BackendError> {
        let mut s = self.st();
        match s.ports.get(&port.0) {
            Some((o, _)) if o == owner => {}
            _ => return Err(BackendError::NotFound(port.0.clone())),
        }
        if s.xcs.contains_key(&port.0)
            || s.xcs
                .values()
                .any(|(_, x)| matches!(x, Xc::L2(t) | Xc::L3(t, _) if *t == port.0))
        {
            return Err(BackendError::InvalidArgument(format!(
                "{port} is cross-connected"
            )));
        }
        s.ports.remove(&port.0);
        s.removed.push(port.0.clone());
        Ok(())
    }
    fn l2_cross_connect(
        &self,
        owner: &str,
        a: &PortName,
        b: &PortName,
    ) -> Result<(), BackendError> {
        let mut s = self.st();
        for p in [a, b] {
            if !s.ports.contains_key(&p.0) {
                return Err(BackendError::NotFound(p.0.clone()));
            }
            if s.xcs.contains_key(&p.0) {
                return Err(BackendError::AlreadyExists(format!(
                    "cross-connect from {p}"
                )));
            }
        }
        s.xcs
            .insert(a.0.clone(), (owner.into(), Xc::L2(b.0.clone())));
        s.xcs
            .insert(b.0.clone(), (owner.into(), Xc::L2(a.0.clone())));
        Ok(())
    }
    fn l3_cross_connect(
        &self,
        owner: &str,
        a: &PortName,
        b: &PortName,
        peer_b: L3NextHops,
        peer_a: L3NextHops,
    ) -> Result<(), BackendError> {
        let mut s = self.st();
        for p in [a, b] {
            if !s.ports.contains_key(&p.0) {
                return Err(BackendError::NotFound(p.0.clone()));
            }
            if s.xcs.contains_key(&p.0) {
                return Err(BackendError::AlreadyExists(format!(
                    "cross-connect from {p}"
                )));
            }
        }
        s.xcs
            .insert(a.0.clone(), (owner.into(), Xc::L3(b.0.clone(), peer_b)));
        s.xcs
            .insert(b.0.clone(), (owner.into(), Xc::L3(a.0.clone(), peer_a)));
        Ok(())
    }
    fn disconnect(&self, _owner: &str, port: &PortName) -> Result<(), BackendError> {
        let mut s = self.st();
        match s.xcs.remove(&port.0) {
            Some((_, Xc::L2(peer) | Xc::L3(peer, _))) => {
                s.xcs.remove(&peer);
                Ok(())
            }
            None => Err(BackendError::NotFound(format!(
                "no cross-connect from {port}"
            ))),
        }
    }
    fn remove_owned(&self, owner: &str) -> Result<(), BackendError> {
        let mut s = self.st();
        s.removed_owners.push(owner.into());
        if s.fail_remove_owned > 0 {
            s.fail_remove_owned -= 1;
            return Err(BackendError::Failed(
                "worker 0 did not acknowledge the command".into(),
            ));
        }
        s.xcs.retain(|_, (o, _)| o != owner);
        let gone: Vec<String> = s
            .ports
            .iter()
            .filter(|(_, (o, _))| o == owner)
            .map(|(n, _)| n.clone())
            .collect();
        for n in gone {
            s.ports.remove(&n);
            s.removed.push(n);
        }
        Ok(())
    }
    fn owners(&self) -> Result<Vec<String>, BackendError> {
        let s = self.st();
        let mut o: Vec<String> = s.ports.values().map(|(o, _)| o.clone()).collect();
        o.dedup();
        Ok(o)
    }
    fn watch_links(&self, events: LinkEvents) {
        *self.links.lock().unwrap() = Some(events);
    }
}
