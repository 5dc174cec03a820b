//! Packet capture on the forwarder's ports: at most one capture per port, its session put in
//! (and taken out of) every worker's `port-input` and `interface-output` taps by worker
//! commands, so the data path never waits and never sees a half-made capture.

use dataplane::capture::{CaptureSession, MAX_SNAPLEN};

use super::*;
use crate::capture::{Capture, CaptureInfo, CaptureRequest, CaptureWatch};

/// Worker command: `session` in (or out of) this worker's capture taps.
fn tap_command(session: Arc<CaptureSession>, add: bool) -> WorkerCommand<ForwardingState> {
    Box::new(move |w| {
        let worker = w.worker;
        let input = w
            .graph
            .node_mut::<PortsInput>(PORT_INPUT)
            .ok_or_else(|| WorkerError::no_node(PORT_INPUT))?;
        if add {
            input.capture_mut().add(worker, session.clone());
        } else {
            drop(input.capture_mut().remove(&session));
        }
        let output = w
            .graph
            .node_mut::<InterfaceOutput>(names::INTERFACE_OUTPUT)
            .ok_or_else(|| WorkerError::no_node(names::INTERFACE_OUTPUT))?;
        if add {
            output.capture_mut().add(worker, session.clone());
        } else {
            drop(output.capture_mut().remove(&session));
        }
        Ok(())
    })
}

impl Forwarder {
    /// Starts capturing port `request.interface` into `request.file`. Refused, changing
    /// nothing, for a port that does not exist (`NotFound`), one already captured
    /// (`AlreadyExists`; a capture that reached its limit is replaced), a file another capture
    /// writes or that cannot be created (`InvalidArgument`).
    pub fn capture_start(
        &mut self,
        request: CaptureRequest,
    ) -> Result<CaptureInfo, ForwarderError> {
        let name = request.interface.clone();
        let interface = self
            .port(&name)
            .map(|p| p.interface)
            .ok_or_else(|| ForwarderError::NotFound(format!("no port named `{name}`")))?;
        if !(request.rx || request.tx) {
            return Err(ForwarderError::InvalidArgument(
                "capture neither rx nor tx".into(),
            ));
        }
        if request.snaplen == 0 || request.snaplen > MAX_SNAPLEN {
            return Err(ForwarderError::InvalidArgument(format!(
                "snap length {}: 1 to {MAX_SNAPLEN}",
                request.snaplen
            )));
        }
        if let Some(c) = self.captures.iter().find(|c| c.name() == name) {
            if !c.is_finished() {
                return Err(ForwarderError::AlreadyExists(format!(
                    "{name} is being captured already (into {}): `quiver ctl capture stop {name}` first",
                    c.file().display()
                )));
            }
        }
        if let Some(c) = self
            .captures
            .iter()
            .find(|c| c.name() != name && c.file() == request.file && !c.is_finished())
        {
            return Err(ForwarderError::InvalidArgument(format!(
                "{} is the file of the capture of {}",
                request.file.display(),
                c.name()
            )));
        }
        // A finished capture of this port makes room.
        if let Some(k) = self.captures.iter().position(|c| c.name() == name) {
            self.end_capture(k)?;
        }
        let raw_ip = matches!(
            self.port_section(&name),
            Some(PortSection::Memif(m)) if m.mode == MemifMode::Ip
        );
        let session = CaptureSession::new(
            interface.get(),
            request.rx,
            request.tx,
            request.snaplen,
            request.max_packets,
            self.workers,
        );
        let capture = Capture::start(request, interface, session.clone(), raw_ip)
            .map_err(|e| ForwarderError::InvalidArgument(e.to_string()))?;
        if let Err(e) = self
            .dataplane
            .command(|_| tap_command(session.clone(), true))
        {
            let _ = self
                .dataplane
                .command(|_| tap_command(session.clone(), false));
            let _ = std::fs::remove_file(capture.file());
            return Err(e.into());
        }
        let info = capture.info();
        self.captures.push(capture);
        Ok(info)
    }

    /// Stops the capture of port `name`: every worker lets go of it, what is queued is
    /// written, the file is closed. `NotFound` when the port is not being captured.
    pub fn capture_stop(&mut self, name: &str) -> Result<CaptureInfo, ForwarderError> {
        let k = self
            .captures
            .iter()
            .position(|c| c.name() == name)
            .ok_or_else(|| ForwarderError::NotFound(format!("no capture of `{name}`")))?;
        self.end_capture(k)
    }

    /// Every capture (running, or finished and not yet stopped).
    pub fn captures(&self) -> Vec<CaptureInfo> {
        self.captures.iter().map(Capture::info).collect()
    }

    /// Readers' handles on every capture's progress.
    pub fn capture_watches(&self) -> Vec<CaptureWatch> {
        self.captures.iter().map(Capture::watch).collect()
    }

    fn end_capture(&mut self, k: usize) -> Result<CaptureInfo, ForwarderError> {
        let capture = self.captures.remove(k);
        capture.session().stop();
        let session = capture.session().clone();
        let detached = self
            .dataplane
            .command(|_| tap_command(session.clone(), false));
        // Every worker acknowledged (or the data path is gone): nothing more is queued.
        let info = capture.finish();
        detached?;
        Ok(info)
    }
}
