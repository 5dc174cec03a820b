//! Checks a `CaptureStart` request's syntax before the backend sees it.

use super::{AdminError, AdminResult, CaptureSpec};
use crate::proto::quiver_admin as pb;

/// Snap length when the request gives none.
pub const DEFAULT_SNAPLEN: u32 = 2048;

/// The spec a `CaptureStart` request asks for, or why it is invalid.
pub fn spec(r: &pb::CaptureStartRequest) -> AdminResult<CaptureSpec> {
    let interface = r.interface.trim();
    if interface.is_empty() {
        return Err(AdminError::InvalidArgument("interface is empty".into()));
    }
    let file = std::path::PathBuf::from(r.file.trim());
    if !file.is_absolute() {
        return Err(AdminError::InvalidArgument(format!(
            "capture file `{}` is not an absolute path (quiver run writes it)",
            r.file
        )));
    }
    let (rx, tx) = match r.direction.trim() {
        "" | "both" => (true, true),
        "rx" => (true, false),
        "tx" => (false, true),
        other => {
            return Err(AdminError::InvalidArgument(format!(
                "capture direction `{other}`: rx, tx or both"
            )))
        }
    };
    Ok(CaptureSpec {
        interface: interface.to_string(),
        file,
        rx,
        tx,
        max_packets: r.max_packets,
        max_bytes: r.max_bytes,
        snaplen: if r.snaplen == 0 {
            DEFAULT_SNAPLEN
        } else {
            r.snaplen
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_paths_and_defaults_are_checked() {
        let r = |direction: &str, file: &str| pb::CaptureStartRequest {
            interface: "memif0".into(),
            file: file.into(),
            direction: direction.into(),
            ..Default::default()
        };
        let s = spec(&r("", "/tmp/a.pcap")).unwrap();
        assert_eq!((s.rx, s.tx, s.snaplen), (true, true, DEFAULT_SNAPLEN));
        let s = spec(&r("tx", "/tmp/a.pcap")).unwrap();
        assert_eq!((s.rx, s.tx), (false, true));
        assert!(matches!(
            spec(&r("sideways", "/tmp/a.pcap")),
            Err(AdminError::InvalidArgument(_))
        ));
        assert!(matches!(
            spec(&r("rx", "a.pcap")),
            Err(AdminError::InvalidArgument(_))
        ));
        let mut no_name = r("rx", "/tmp/a.pcap");
        no_name.interface = " ".into();
        assert!(spec(&no_name).is_err());
    }
}
