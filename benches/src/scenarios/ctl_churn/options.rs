//! `ctl-churn`'s options: how it mixes its mechanisms.

use quiver::control::nsm::KernelBackend;

/// How the churn mixes its mechanisms.
pub struct Options {
    /// Percent of the churned pairs with KERNEL on both sides (the others MEMIF).
    pub kernel_share: u8,
    /// Which interfaces KERNEL mechanisms get.
    pub kernel_backend: KernelBackend,
}

impl Options {
    /// From the command line: `--kernel-share PERCENT` (default 25), `--kernel` (100),
    /// `--kernel-backend tap|veth` (default tap, Quiver's).
    pub fn parse(share: Option<u8>, all: bool, backend: &str) -> Result<Options, String> {
        Ok(Options {
            kernel_share: match (share, all) {
                (Some(_), true) => return Err("--kernel is --kernel-share 100: give one".into()),
                (Some(s), false) if s > 100 => {
                    return Err(format!("--kernel-share {s}: a percentage, 0 to 100"))
                }
                (Some(s), false) => s,
                (None, true) => 100,
                (None, false) => 25,
            },
            kernel_backend: match backend {
                "tap" => KernelBackend::Tap,
                "veth" => KernelBackend::Veth,
                other => return Err(format!("--kernel-backend {other}: tap or veth")),
            },
        })
    }

    /// The backend's name, as the command line gives it.
    pub(super) fn backend_name(&self) -> &'static str {
        match self.kernel_backend {
            KernelBackend::Tap => "tap",
            KernelBackend::Veth => "veth",
        }
    }
}
