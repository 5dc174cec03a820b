//! DPDK's Environment Abstraction Layer: started once per process from an [`EalConfig`].

use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;
use std::sync::OnceLock;

use dpdk_sys as sys;
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// An error from DPDK or from setting it up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DpdkError {
    /// `rte_eal_init` failed (it cannot be retried in the same process).
    #[error("DPDK EAL initialisation failed: {0}")]
    Eal(String),
    /// The EAL was started earlier with another configuration.
    #[error("the DPDK EAL is already running with another configuration ({0})")]
    AlreadyInitialised(String),
    /// The EAL has not been started.
    #[error("the DPDK EAL is not initialised")]
    NotInitialised,
    /// A DPDK call failed.
    #[error("{what}: {message} (errno {errno})")]
    Call {
        /// What was being done.
        what: String,
        /// The positive errno value.
        errno: i32,
        /// `rte_strerror`'s text for it.
        message: String,
    },
    /// The configuration cannot work.
    #[error("{0}")]
    Config(String),
}

impl DpdkError {
    /// A failed call that returned `-errno` (ethdev's convention) or set `rte_errno`.
    pub(crate) fn call(what: impl Into<String>, errno: i32) -> DpdkError {
        let errno = errno.abs();
        // SAFETY: rte_strerror returns a pointer to a static or per-lcore string for any value.
        let message = unsafe { CStr::from_ptr(sys::rte_strerror(errno)) }
            .to_string_lossy()
            .into_owned();
        DpdkError::Call {
            what: what.into(),
            errno,
            message,
        }
    }

    /// A failed call that reported its error in `rte_errno`.
    pub(crate) fn from_rte_errno(what: impl Into<String>) -> DpdkError {
        // SAFETY: reads the calling thread's rte_errno; no preconditions.
        DpdkError::call(what, unsafe { sys::quiver_rte_errno() })
    }
}

impl From<DpdkError> for crate::PortError {
    fn from(e: DpdkError) -> Self {
        match e {
            DpdkError::Config(s) => crate::PortError::Config(s),
            other => crate::PortError::Device(other.to_string()),
        }
    }
}

/// Where the EAL takes its own memory from (rings, queues, mempool headers: not Quiver's buffers,
/// which live in Quiver's pool either way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EalMemory {
    /// Hugepages without files in hugetlbfs (`--in-memory`): nothing to clean up after a crash,
    /// no secondary processes.
    InMemory,
    /// Hugepages through hugetlbfs files named by the file prefix (multi-process capable).
    Hugepages,
    /// Ordinary pages (`--no-huge -m <megabytes>`): works without any hugepage reserved.
    NoHuge {
        /// Memory the EAL reserves up front.
        megabytes: u32,
    },
}

/// Which physical devices the EAL may probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PciDevices {
    /// None (`--no-pci`): only virtual devices. The host's own NICs are never touched.
    None,
    /// Only these PCI addresses (`-a 0000:01:00.0` …), bound to vfio-pci beforehand.
    Allow(Vec<String>),
}

/// How the EAL is started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EalConfig {
    /// The CPU of the main lcore. `None`: the first CPU this thread may run on.
    pub main_lcore: Option<usize>,
    /// Physical devices.
    pub pci: PciDevices,
    /// Virtual devices created at start-up, as `--vdev` takes them (`net_ring0`,
    /// `net_null0,size=64`). More can be added later with [`Eal::create_vdev`].
    pub vdevs: Vec<String>,
    /// Where the EAL's own memory comes from.
    pub memory: EalMemory,
    /// `--file-prefix`: unique per process, so that concurrent DPDK processes never share
    /// runtime files.
    pub file_prefix: String,
    /// `--log-level` (`notice`, `warning`, `lib.eal:debug` …).
    pub log_level: String,
    /// More driver plugins to load (`-d <file or directory>`). Debian's shared DPDK loads every
    /// plugin of its own PMD directory without being asked.
    pub driver_paths: Vec<PathBuf>,
    /// Start the telemetry socket.
    pub telemetry: bool,
    /// Arguments passed through unchanged, after everything above.
    pub extra_args: Vec<String>,
}

impl EalConfig {
    /// Virtual devices only: `--no-pci`, `--in-memory`, no telemetry, log level `warning`, the
    /// file prefix `quiver-<pid>`.
    pub fn vdevs_only() -> EalConfig {
        EalConfig {
            main_lcore: None,
            pci: PciDevices::None,
            vdevs: Vec::new(),
            memory: EalMemory::InMemory,
            file_prefix: format!("quiver-{}", std::process::id()),
            log_level: "warning".into(),
            driver_paths: Vec::new(),
            telemetry: false,
            extra_args: Vec::new(),
        }
    }

    /// The arguments `rte_eal_init` gets (after `argv[0]`).
    pub fn args(&self) -> Result<Vec<String>, DpdkError> {
        let main = match self.main_lcore {
            Some(c) => c,
            None => first_allowed_cpu()?,
        };
        let mut a = vec![
            "-l".to_string(),
            main.to_string(),
            format!("--main-lcore={main}"),
            format!("--file-prefix={}", self.file_prefix),
            format!("--log-level={}", self.log_level),
            // Quiver's buffers are its own memory, described to devices by virtual address
            // (see the mempool module): physical addresses are neither known nor needed.
            "--iova-mode=va".to_string(),
        ];
        match &self.pci {
            PciDevices::None => a.push("--no-pci".into()),
            PciDevices::Allow(list) => {
                for d in list {
                    a.push("-a".into());
                    a.push(d.clone());
                }
            }
        }
        for v in &self.vdevs {
            a.push(format!("--vdev={v}"));
        }
        match self.memory {
            EalMemory::InMemory => a.push("--in-memory".into()),
            EalMemory::Hugepages => {}
            EalMemory::NoHuge { megabytes } => {
                a.push("--no-huge".into());
                a.push("-m".into());
                a.push(megabytes.to_string());
            }
        }
        for d in &self.driver_paths {
            a.push("-d".into());
            a.push(d.display().to_string());
        }
        if !self.telemetry {
            a.push("--no-telemetry".into());
        }
        a.extend(self.extra_args.iter().cloned());
        Ok(a)
    }
}

/// Where the EAL keeps its runtime files for `prefix`: as DPDK decides it, /var/run for root,
/// else $XDG_RUNTIME_DIR or /tmp.
fn runtime_dir(prefix: &str) -> PathBuf {
    // SAFETY: getuid has no preconditions and cannot fail.
    let base = if unsafe { libc::getuid() } == 0 {
        PathBuf::from("/var/run")
    } else {
        std::env::var_os("XDG_RUNTIME_DIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
    };
    base.join("dpdk").join(prefix)
}

fn first_allowed_cpu() -> Result<usize, DpdkError> {
    let set = sched_getaffinity(Pid::from_raw(0))
        .map_err(|e| DpdkError::Config(format!("cannot read this thread's CPU affinity: {e}")))?;
    (0..CpuSet::count())
        .find(|&c| set.is_set(c).unwrap_or(false))
        .ok_or_else(|| DpdkError::Config("this thread may run on no CPU".into()))
}

/// The running EAL. There is at most one per process, for the life of the process: DPDK cannot
/// start its EAL twice, nor again after a failed attempt.
#[derive(Debug)]
pub struct Eal {
    config: EalConfig,
    args: Vec<String>,
    iova_va: bool,
}

static EAL: OnceLock<Result<Eal, DpdkError>> = OnceLock::new();

impl Eal {
    /// Starts the EAL with `config`, or returns the one already running if it was started with
    /// the same configuration.
    ///
    /// The calling thread becomes DPDK's main lcore: it gets an lcore id (and so a mempool cache
    /// of its own), but keeps its CPU affinity.
    pub fn init(config: &EalConfig) -> Result<&'static Eal, DpdkError> {
        let eal = EAL.get_or_init(|| Eal::start(config));
        match eal {
            Ok(e) if e.config == *config => Ok(e),
            Ok(e) => Err(DpdkError::AlreadyInitialised(e.args.join(" "))),
            Err(err) => Err(err.clone()),
        }
    }

    /// The running EAL, if one was started.
    pub fn get() -> Option<&'static Eal> {
        EAL.get().and_then(|r| r.as_ref().ok())
    }

    fn start(config: &EalConfig) -> Result<Eal, DpdkError> {
        let args = config.args()?;
        let mut argv_owned: Vec<CString> = Vec::with_capacity(args.len() + 1);
        argv_owned.push(CString::new("quiver").expect("no NUL"));
        for a in &args {
            argv_owned.push(
                CString::new(a.as_str())
                    .map_err(|_| DpdkError::Config(format!("EAL argument {a:?} contains NUL")))?,
            );
        }
        // rte_eal_init may keep pointers into argv and permutes the array (getopt): give it
        // storage that lives for the rest of the process. This happens once per process.
        let argv: &'static mut [*mut c_char] = Box::leak(
            argv_owned
                .into_iter()
                .map(CString::into_raw)
                .chain(std::iter::once(std::ptr::null_mut()))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let argc = (argv.len() - 1) as i32;

        // rte_eal_init pins the calling thread to the main lcore's CPU (it treats the caller
        // as the main lcore's thread). Quiver calls it from its control side, which must keep
        // floating over every allowed CPU — pinned, it would compete with the worker pinned to
        // that CPU. So: save this thread's affinity, and put it back afterwards. (The EAL's own
        // service threads get the EAL's control-thread CPU set, unaffected by this.)
        let saved = sched_getaffinity(Pid::from_raw(0)).map_err(|e| {
            DpdkError::Config(format!("cannot read this thread's CPU affinity: {e}"))
        })?;
        tracing::info!(args = %args.join(" "), "starting the DPDK EAL");
        // SAFETY: argv is a NUL-terminated array of `argc` valid C strings that lives for the
        // rest of the process; EAL start-up runs at most once (guarded by the OnceLock).
        let rc = unsafe { sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        let restored = sched_setaffinity(Pid::from_raw(0), &saved);
        if rc < 0 {
            let e = DpdkError::from_rte_errno("rte_eal_init");
            return Err(DpdkError::Eal(format!(
                "{e} (arguments: {})",
                args.join(" ")
            )));
        }
        if let Err(e) = restored {
            tracing::warn!(error = %e, "cannot restore this thread's CPU affinity after rte_eal_init");
        }
        if config.memory == EalMemory::InMemory && !config.telemetry {
            // In memory and without telemetry, the EAL keeps no file in its runtime directory
            // (/var/run/dpdk/<prefix>) but still creates it: remove it while it is empty, so
            // that processes leave nothing behind. (`remove_dir` fails on a non-empty one.)
            let _ = std::fs::remove_dir(runtime_dir(&config.file_prefix));
        }
        // SAFETY: plain query, valid after a successful init.
        let iova_va = unsafe { sys::rte_eal_iova_mode() } == sys::RTE_IOVA_VA;
        // SAFETY: rte_version returns a static string.
        let version = unsafe { CStr::from_ptr(sys::rte_version()) }.to_string_lossy();
        tracing::info!(%version, iova_va, "DPDK EAL running");
        Ok(Eal {
            config: config.clone(),
            args,
            iova_va,
        })
    }

    /// The configuration it was started with.
    pub fn config(&self) -> &EalConfig {
        &self.config
    }

    /// The arguments `rte_eal_init` was given.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Whether devices address memory by virtual address (IOVA as VA), as Quiver needs for
    /// physical NICs.
    pub fn iova_is_va(&self) -> bool {
        self.iova_va
    }

    /// DPDK's version string.
    pub fn version(&self) -> String {
        // SAFETY: rte_version returns a static string.
        unsafe { CStr::from_ptr(sys::rte_version()) }
            .to_string_lossy()
            .into_owned()
    }

    /// Creates a virtual device now (`rte_vdev_init`), e.g. `("net_null0", "size=64")`. It lives
    /// until the process ends; its ethdev port is opened with `DpdkPort::open` under the same
    /// name. (Removing a vdev under an open port would pull the device from under the port, so
    /// this API offers no removal.)
    pub fn create_vdev(&self, name: &str, args: &str) -> Result<(), DpdkError> {
        let n = CString::new(name).map_err(|_| DpdkError::Config("NUL in vdev name".into()))?;
        let a = CString::new(args).map_err(|_| DpdkError::Config("NUL in vdev args".into()))?;
        // SAFETY: two valid C strings; the EAL is initialised (self exists).
        let rc = unsafe { sys::rte_vdev_init(n.as_ptr(), a.as_ptr()) };
        if rc > 0 {
            return Err(DpdkError::Config(format!(
                "rte_vdev_init({name}, {args}): no driver for this name"
            )));
        }
        if rc < 0 {
            return Err(DpdkError::call(
                format!("rte_vdev_init({name}, {args})"),
                rc,
            ));
        }
        Ok(())
    }
}
