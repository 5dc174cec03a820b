//! The daemon's log: to stderr, filtered by `RUST_LOG`, else by `NSM_LOG_LEVEL` (as
//! cmd-forwarder-vpp reads it), else at `info`. As in cmd-forwarder-vpp, SIGUSR1 switches a
//! running Quiver to TRACE and SIGUSR2 back to what it started with, without a restart.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// Switches the level of the log installed by [`init`].
#[derive(Clone)]
pub struct LogLevel {
    handle: reload::Handle<EnvFilter, Registry>,
    /// The filter the log started with, as text.
    initial: String,
}

/// Installs the log for this process; the handle switches its level later.
pub fn init() -> LogLevel {
    let initial = std::env::var("RUST_LOG")
        .ok()
        .filter(|f| EnvFilter::try_new(f).is_ok())
        .unwrap_or_else(|| {
            nsm_forwarder::NsmConfig::from_env()
                .map_or("info", |c| c.tracing_level())
                .to_string()
        });
    let (filter, handle) = reload::Layer::new(EnvFilter::new(&initial));
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .init();
    LogLevel { handle, initial }
}

impl LogLevel {
    /// Everything from now on, down to TRACE.
    pub fn trace(&self) {
        self.set("trace");
        tracing::trace!("log level TRACE (SIGUSR1; SIGUSR2 goes back)");
    }

    /// Back to the level the log started with.
    pub fn restore(&self) {
        self.set(&self.initial.clone());
        tracing::info!(filter = %self.initial, "log level back to where it started (SIGUSR2)");
    }

    fn set(&self, filter: &str) {
        if let Err(e) = self.handle.reload(EnvFilter::new(filter)) {
            tracing::warn!(error = %e, "cannot change the log level");
        }
    }

    /// Switches on SIGUSR1 (TRACE) and SIGUSR2 (back), on a thread of its own, from now on.
    pub fn follow_signals(&self) -> std::io::Result<()> {
        use signal_hook::consts::{SIGUSR1, SIGUSR2};
        let mut signals = signal_hook::iterator::Signals::new([SIGUSR1, SIGUSR2])?;
        let level = self.clone();
        std::thread::Builder::new()
            .name("quiver-log-level".into())
            .spawn(move || {
                for signal in signals.forever() {
                    match signal {
                        SIGUSR1 => level.trace(),
                        _ => level.restore(),
                    }
                }
            })?;
        Ok(())
    }
}
