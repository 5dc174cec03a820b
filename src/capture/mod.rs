//! Packet capture's control side: `quiver ctl capture start IFACE --file F` makes a
//! [`Capture`]: the pcap file opened and its header written, then a writer thread
//! (`quiver-capture`) that drains the data path's record queues (see [`dataplane::capture`])
//! into it, in timestamp order, until the packet or size limit, a stop, or a write error.
//!
//! - [`pcap`]: the classic libpcap file format.

pub mod pcap;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use dataplane::capture::{CaptureRecord, CaptureSession};
use graph_nodes::IfIndex;

/// Snap length when none is given: whole frames up to 2 KiB.
pub const DEFAULT_SNAPLEN: u32 = 2048;

/// Bytes of Ethernet header left out of IP-mode memif packets (their files are LINKTYPE_RAW:
/// what the peer really sent).
const ETHERNET_HEADER: usize = 14;

/// What to capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureRequest {
    /// The port's name.
    pub interface: String,
    /// The pcap file to write (created or truncated).
    pub file: PathBuf,
    /// Received packets.
    pub rx: bool,
    /// Sent packets.
    pub tx: bool,
    /// Stop after this many packets (0: no limit).
    pub max_packets: u64,
    /// Keep the file at most this many bytes (0: no limit).
    pub max_bytes: u64,
    /// Bytes kept of each packet.
    pub snaplen: u32,
}

/// A capture as `show captures` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureInfo {
    /// The request.
    pub request: CaptureRequest,
    /// "running", "done" (a limit was reached), "stopped", or "failed: why".
    pub state: String,
    /// Packets written.
    pub packets: u64,
    /// Bytes of the file.
    pub bytes: u64,
    /// Packets missed because the writer fell behind.
    pub dropped: u64,
    /// "ethernet" or "raw" (IPv4/IPv6 without a link header).
    pub linktype: &'static str,
}

/// What the writer thread reports.
#[derive(Default)]
struct Progress {
    packets: AtomicU64,
    bytes: AtomicU64,
    /// A limit was reached.
    done: AtomicBool,
    /// The thread ended.
    finished: AtomicBool,
    error: Mutex<Option<String>>,
}

/// What a reader sees of a capture: its request and live progress (see [`Capture::watch`]).
#[derive(Clone)]
pub struct CaptureWatch {
    request: CaptureRequest,
    session: Arc<CaptureSession>,
    raw: bool,
    progress: Arc<Progress>,
    stopped: bool,
}

impl CaptureWatch {
    /// The capture as `show captures` lists it, counters as of now.
    pub fn info(&self) -> CaptureInfo {
        let p = &self.progress;
        let error = p.error.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let state = match error {
            Some(e) => format!("failed: {e}"),
            None if p.done.load(Ordering::Acquire) => "done".into(),
            None if self.stopped => "stopped".into(),
            None => "running".into(),
        };
        CaptureInfo {
            request: self.request.clone(),
            state,
            packets: p.packets.load(Ordering::Acquire),
            bytes: p.bytes.load(Ordering::Acquire),
            dropped: self.session.dropped(),
            linktype: if self.raw { "raw" } else { "ethernet" },
        }
    }
}

/// One running capture's control side; dropping it stops it and closes its file.
pub struct Capture {
    request: CaptureRequest,
    interface: IfIndex,
    session: Arc<CaptureSession>,
    raw: bool,
    progress: Arc<Progress>,
    quit: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    stopped: bool,
}

/// Why a capture cannot start.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file cannot be created.
    #[error("cannot create {}: {source}", path.display())]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file's header cannot be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The writer thread cannot start.
    #[error("cannot start the capture writer: {0}")]
    Thread(std::io::Error),
}

impl Capture {
    /// Creates the file and writes its header, then starts the writer draining `session`
    /// (interface `interface`). `raw_ip`: the port is an IP-mode memif (LINKTYPE_RAW, the
    /// Ethernet header the driver adds left out). The session is not yet in any worker's tap.
    pub fn start(
        request: CaptureRequest,
        interface: IfIndex,
        session: Arc<CaptureSession>,
        raw_ip: bool,
    ) -> Result<Capture, CaptureError> {
        let file = File::create(&request.file).map_err(|source| CaptureError::Create {
            path: request.file.clone(),
            source,
        })?;
        let mut out = BufWriter::new(file);
        let linktype = if raw_ip {
            pcap::LINKTYPE_RAW
        } else {
            pcap::LINKTYPE_ETHERNET
        };
        pcap::write_header(&mut out, request.snaplen, linktype)
            .and_then(|()| out.flush())
            .map_err(|source| CaptureError::Write {
                path: request.file.clone(),
                source,
            })?;
        let progress = Arc::new(Progress::default());
        progress
            .bytes
            .store(pcap::FILE_HEADER_LEN, Ordering::Relaxed);
        let quit = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            out,
            session: session.clone(),
            progress: progress.clone(),
            quit: quit.clone(),
            strip: if raw_ip { ETHERNET_HEADER } else { 0 },
            max_packets: request.max_packets,
            max_bytes: request.max_bytes,
            clock: (dataplane::cycles::now(), SystemTime::now()),
        };
        let thread = std::thread::Builder::new()
            .name("quiver-capture".into())
            .spawn(move || writer.run())
            .map_err(CaptureError::Thread)?;
        tracing::info!(
            interface = %request.interface,
            file = %request.file.display(),
            "capture started"
        );
        Ok(Capture {
            request,
            interface,
            session,
            raw: raw_ip,
            progress,
            quit,
            thread: Some(thread),
            stopped: false,
        })
    }

    /// The port's name.
    pub fn name(&self) -> &str {
        &self.request.interface
    }

    /// The interface index it captures.
    pub fn interface(&self) -> IfIndex {
        self.interface
    }

    /// The data path's side.
    pub fn session(&self) -> &Arc<CaptureSession> {
        &self.session
    }

    /// The file it writes.
    pub fn file(&self) -> &std::path::Path {
        &self.request.file
    }

    /// Whether its writer ended (a limit reached, or a write error).
    pub fn is_finished(&self) -> bool {
        self.progress.finished.load(Ordering::Acquire)
    }

    /// Where it stands.
    pub fn info(&self) -> CaptureInfo {
        self.watch().info()
    }

    /// A reader's handle on this capture's progress, for `show captures` without the
    /// capture itself.
    pub fn watch(&self) -> CaptureWatch {
        CaptureWatch {
            request: self.request.clone(),
            session: self.session.clone(),
            raw: self.raw,
            progress: self.progress.clone(),
            stopped: self.stopped,
        }
    }

    /// Ends the capture once no worker holds its session any more: writes what is queued,
    /// closes the file, and reports.
    pub fn finish(mut self) -> CaptureInfo {
        self.end();
        self.info()
    }

    fn end(&mut self) {
        self.session.stop();
        self.quit.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
            self.stopped = true;
            tracing::info!(
                interface = %self.request.interface,
                file = %self.request.file.display(),
                packets = self.progress.packets.load(Ordering::Relaxed),
                "capture ended"
            );
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.end();
    }
}

/// The writer thread's state.
struct Writer {
    out: BufWriter<File>,
    session: Arc<CaptureSession>,
    progress: Arc<Progress>,
    quit: Arc<AtomicBool>,
    strip: usize,
    max_packets: u64,
    max_bytes: u64,
    /// A TSC reading and the wall-clock time at that moment.
    clock: (u64, SystemTime),
}

impl Writer {
    /// How often the queues are drained when they were empty.
    const POLL: Duration = Duration::from_millis(2);

    fn run(mut self) {
        if let Err(e) = self.write_all() {
            self.session.stop();
            *self
                .progress
                .error
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
        }
        self.progress.finished.store(true, Ordering::Release);
    }

    fn timestamp(&self, tsc: u64) -> SystemTime {
        let (tsc0, wall0) = self.clock;
        wall0 + Duration::from_secs_f64(dataplane::cycles::to_seconds(tsc.saturating_sub(tsc0)))
    }

    fn write_all(&mut self) -> std::io::Result<()> {
        let mut batch: Vec<Box<CaptureRecord>> = Vec::new();
        let (mut packets, mut bytes) = (0u64, pcap::FILE_HEADER_LEN);
        loop {
            // Read before draining: once told to quit (no worker holds the session any more),
            // this drain is the last and gets everything.
            let quitting = self.quit.load(Ordering::Acquire);
            self.session.take(&mut batch);
            // Each worker's records are in order; merge the workers'.
            batch.sort_by_key(|r| r.tsc);
            let mut limit = false;
            for r in &batch {
                let len = r.len as usize;
                let data = &r.data[self.strip.min(len)..len];
                let orig = r.orig_len.saturating_sub(self.strip as u32);
                let size = pcap::RECORD_HEADER_LEN + data.len() as u64;
                if (self.max_packets > 0 && packets >= self.max_packets)
                    || (self.max_bytes > 0 && bytes + size > self.max_bytes)
                {
                    limit = true;
                    break;
                }
                let at = self.timestamp(r.tsc);
                pcap::write_record(&mut self.out, at, orig, data)?;
                packets += 1;
                bytes += size;
            }
            let idle = batch.is_empty();
            self.session.give_back(batch.drain(..));
            if !idle {
                self.out.flush()?;
                self.progress.packets.store(packets, Ordering::Release);
                self.progress.bytes.store(bytes, Ordering::Release);
            }
            if limit || (self.max_packets > 0 && packets >= self.max_packets) {
                self.session.stop();
                self.progress.done.store(true, Ordering::Release);
                return Ok(());
            }
            if quitting {
                return Ok(());
            }
            if idle {
                std::thread::sleep(Self::POLL);
            }
        }
    }
}

impl CaptureInfo {
    /// As the admin API sends it.
    pub fn to_proto(&self) -> quiver_admin_api::proto::Capture {
        let r = &self.request;
        quiver_admin_api::proto::Capture {
            interface: r.interface.clone(),
            file: r.file.display().to_string(),
            direction: match (r.rx, r.tx) {
                (true, true) => "both",
                (true, false) => "rx",
                _ => "tx",
            }
            .into(),
            state: self.state.clone(),
            packets: self.packets,
            bytes: self.bytes,
            dropped: self.dropped,
            max_packets: r.max_packets,
            max_bytes: r.max_bytes,
            snaplen: r.snaplen,
            linktype: self.linktype.into(),
        }
    }
}

impl From<&quiver_admin_api::CaptureSpec> for CaptureRequest {
    fn from(s: &quiver_admin_api::CaptureSpec) -> CaptureRequest {
        CaptureRequest {
            interface: s.interface.clone(),
            file: s.file.clone(),
            rx: s.rx,
            tx: s.tx,
            max_packets: s.max_packets,
            max_bytes: s.max_bytes,
            snaplen: s.snaplen,
        }
    }
}
