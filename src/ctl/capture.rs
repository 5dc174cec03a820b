//! `quiver ctl capture start|stop` and `show captures`: pcap capture of a port, written by
//! `quiver run` into a file it creates.

use clap::Subcommand;
use quiver_admin_api::proto as pb;
use quiver_admin_api::AdminClient;
use serde_json::{json, Value};

use super::render::Table;
use super::reply::{print_json, status};

/// Runs `capture start|stop` and prints the reply.
pub fn run(client: &AdminClient, cmd: CaptureCmd, as_json: bool) -> Result<(), String> {
    let mut s = client.stub();
    let reply = match cmd.request()? {
        Request::Start(r) => client.block_on(s.capture_start(r)),
        Request::Stop(r) => client.block_on(s.capture_stop(r)),
    }
    .map_err(status)?
    .into_inner();
    if as_json {
        print_json(&json(&reply));
    } else {
        print!("{}", line(&reply));
    }
    Ok(())
}

/// `quiver ctl capture …`.
#[derive(Subcommand)]
pub enum CaptureCmd {
    /// Capture a port's packets into a pcap file (classic libpcap format; tshark, tcpdump and
    /// wireshark read it). One capture per port; it ends at a limit or with `capture stop`.
    Start {
        /// The port.
        interface: String,
        /// The pcap file quiver run writes (created or truncated; a relative path is made
        /// absolute here).
        #[arg(long)]
        file: std::path::PathBuf,
        /// rx, tx or both.
        #[arg(long, default_value = "both")]
        direction: String,
        /// Stop after this many packets (default: no limit).
        #[arg(long, default_value_t = 0)]
        max_packets: u64,
        /// Keep the file at most this many bytes (default: no limit).
        #[arg(long, default_value_t = 0)]
        max_bytes: u64,
        /// Bytes kept of each packet (1 to 16384).
        #[arg(long, default_value_t = 2048)]
        snaplen: u32,
    },
    /// Stop a port's capture: what is queued is written and the file closed.
    Stop {
        /// The port.
        interface: String,
    },
}

impl CaptureCmd {
    /// The request to send.
    pub fn request(self) -> Result<Request, String> {
        Ok(match self {
            CaptureCmd::Start {
                interface,
                file,
                direction,
                max_packets,
                max_bytes,
                snaplen,
            } => {
                let file = std::path::absolute(&file)
                    .map_err(|e| format!("--file {}: {e}", file.display()))?;
                Request::Start(pb::CaptureStartRequest {
                    interface,
                    file: file.display().to_string(),
                    direction,
                    max_packets,
                    max_bytes,
                    snaplen,
                })
            }
            CaptureCmd::Stop { interface } => Request::Stop(pb::CaptureStopRequest { interface }),
        })
    }
}

/// A capture request.
pub enum Request {
    /// `capture start`.
    Start(pb::CaptureStartRequest),
    /// `capture stop`.
    Stop(pb::CaptureStopRequest),
}

fn limit(v: u64) -> String {
    if v == 0 {
        "-".into()
    } else {
        v.to_string()
    }
}

/// One capture as a line of text (after `capture start` or `stop`).
pub fn line(c: &pb::Capture) -> String {
    format!(
        "{}: {} into {} ({} packets, {} bytes, {} dropped)\n",
        c.interface, c.state, c.file, c.packets, c.bytes, c.dropped
    )
}

/// `show captures`.
pub fn table(r: &pb::ShowCapturesReply) -> String {
    if r.captures.is_empty() {
        return "no captures (capture start <interface> --file <path> first)\n".into();
    }
    let mut t = Table::new(&[
        "Interface",
        "Direction",
        "State",
        ">Packets",
        ">Bytes",
        ">Dropped",
        ">Max packets",
        ">Max bytes",
        "File",
    ]);
    for c in &r.captures {
        t.row(vec![
            c.interface.clone(),
            c.direction.clone(),
            c.state.clone(),
            c.packets.to_string(),
            c.bytes.to_string(),
            c.dropped.to_string(),
            limit(c.max_packets),
            limit(c.max_bytes),
            c.file.clone(),
        ]);
    }
    t.render()
}

/// One capture as JSON.
pub fn json(c: &pb::Capture) -> Value {
    json!({
        "interface": c.interface,
        "file": c.file,
        "direction": c.direction,
        "state": c.state,
        "packets": c.packets,
        "bytes": c.bytes,
        "dropped": c.dropped,
        "max_packets": c.max_packets,
        "max_bytes": c.max_bytes,
        "snaplen": c.snaplen,
        "linktype": c.linktype,
    })
}

/// `show captures --json`.
pub fn table_json(r: &pb::ShowCapturesReply) -> Value {
    Value::Array(r.captures.iter().map(json).collect())
}
