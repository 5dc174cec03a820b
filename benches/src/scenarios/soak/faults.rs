//! The faults, each done to the running soak: a memif CNF killed with SIGKILL mid-traffic
//! (then started again, then its peer killed too), a client's namespace deleted under live
//! connections, the churn's endpoints refusing, then stalling past Quiver's endpoint timeout,
//! and Quiver itself killed with SIGKILL and started again mid-churn.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use nsm_forwarder::testing::{BlockingClient, EndpointBehaviour};
use nsm_proto::connection::Connection;
use serde_json::{json, Value};

use super::super::procs::IP;
use super::churn::DEADLINE;
use super::host::{wait_for, Netns};
use super::nsm::{first_request, ip_context, quiver_id, ClientSide, Mech};
use super::quiver::Quiver;
use super::world::World;

/// How long Quiver waits for an endpoint's answer (`ENDPOINT_TIMEOUT` in nsm-forwarder's
/// endpoint client).
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(15);

/// The kinds of fault, in the order a run cycles through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A memif CNF killed with SIGKILL mid-traffic.
    CnfKill,
    /// A client's namespace deleted under live connections.
    NetnsDelete,
    /// The endpoints refuse every Request for a while.
    EndpointRefuses,
    /// The endpoints stall past Quiver's endpoint timeout for a while.
    EndpointStalls,
    /// Quiver killed with SIGKILL and started again.
    QuiverKill,
}

impl Fault {
    /// Every kind, in order.
    pub const ALL: [Fault; 5] = [
        Fault::CnfKill,
        Fault::NetnsDelete,
        Fault::EndpointRefuses,
        Fault::EndpointStalls,
        Fault::QuiverKill,
    ];

    /// Its name in the report (and in the churn's failure counts).
    pub fn name(self) -> &'static str {
        match self {
            Fault::CnfKill => "cnf-kill",
            Fault::NetnsDelete => "netns-delete",
            Fault::EndpointRefuses => "endpoint-refuses",
            Fault::EndpointStalls => "endpoint-stalls",
            Fault::QuiverKill => "quiver-kill",
        }
    }
}

/// A child process killed (SIGKILL) and reaped on drop.
struct Cnf(Option<Child>);

impl Cnf {
    fn spawn(ns: &str, exe: &str, args: &[&str]) -> Result<Cnf, String> {
        let child = Command::new(IP)
            .args(["netns", "exec", ns, exe])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {exe}: {e}"))?;
        Ok(Cnf(Some(child)))
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGKILL);
            let _ = c.wait();
        }
    }

    /// Waits (at most `within`) for it to exit; whether it exited with 0.
    fn wait_ok(&mut self, within: Duration) -> bool {
        let Some(c) = self.0.as_mut() else {
            return false;
        };
        let mut ok = None;
        wait_for(within, Duration::from_millis(20), || {
            ok = c.try_wait().ok().flatten().map(|s| s.success());
            ok.is_some()
        });
        if ok.is_some() {
            self.0 = None;
        }
        ok.unwrap_or(false)
    }
}

impl Drop for Cnf {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A number of `v` (JSON numbers, or strings of one).
fn num(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

/// The interface `name` as `quiver ctl show interfaces` has it: (link up, rx packets).
fn port(q: &Quiver, name: &str) -> Option<(bool, u64)> {
    let v = q.ctl_json(&["show", "interfaces"]).ok()?;
    let i = v.as_array()?.iter().find(|i| i["name"] == name)?.clone();
    Some((i["link"] == "up", num(&i["rx_packets"])))
}

/// The connection `id`'s (client, endpoint) interfaces, as `show connections` has them.
fn ports_of(q: &Quiver, id: &str) -> Option<(String, String)> {
    let v = q.ctl_json(&["show", "connections"]).ok()?;
    let c = v.as_array()?.iter().find(|c| c["id"] == id)?.clone();
    Some((
        c["client_interface"].as_str()?.to_string(),
        c["endpoint_interface"].as_str()?.to_string(),
    ))
}

/// Which of `ids` (Quiver's own) `show connections` lists.
fn held(q: &Quiver, ids: &[String]) -> Vec<String> {
    let v = q.ctl_json(&["show", "connections"]).unwrap_or(Value::Null);
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["id"].as_str())
        .filter(|id| ids.iter().any(|i| i == id))
        .map(str::to_string)
        .collect()
}

impl World {
    fn fault_client(&mut self) -> Result<&mut BlockingClient, String> {
        if self.grpc.is_none() {
            let url = self.spec.nsm_url();
            self.grpc = Some(BlockingClient::connect(&url).map_err(|e| e.to_string())?);
        }
        self.grpc.as_mut().ok_or_else(|| "no client".into())
    }

    fn fault_request(
        &mut self,
        id: &str,
        ep: &str,
        side: &ClientSide,
        ip: bool,
    ) -> Result<Connection, String> {
        let req = first_request(id, ep, side, ip.then(|| ip_context(99, 0)));
        let first = req.connection.clone().unwrap_or_default();
        self.fault_calls.0 += 1;
        let r = self.fault_client()?.request_within(req, DEADLINE);
        r.map_err(|e| {
            // As NSM's clients do after a failed Request: Close whatever may be left (the
            // Close waits for a Request still under way in Quiver).
            let _ = self.fault_close(first);
            format!("Request {id}: {:?}: {}", e.code(), e.message())
        })
    }

    fn fault_close(&mut self, conn: Connection) -> Result<(), String> {
        let id = conn.id.clone();
        self.fault_calls.1 += 1;
        let r = self.fault_client()?.close(conn);
        r.map_err(|e| {
            self.grpc = None;
            format!("Close {id}: {:?}: {}", e.code(), e.message())
        })
    }

    /// Does `fault`; what happened, as JSON.
    pub fn fault(&mut self, fault: Fault) -> Result<Value, String> {
        *self.ctx.fault.lock().unwrap_or_else(|e| e.into_inner()) = Some(fault.name());
        let r = match fault {
            Fault::CnfKill => self.cnf_kill(),
            Fault::NetnsDelete => self.netns_delete(),
            Fault::EndpointRefuses => self.endpoint_refuses(),
            Fault::EndpointStalls => self.endpoint_stalls(),
            Fault::QuiverKill => self.quiver_kill(),
        };
        *self.ctx.fault.lock().unwrap_or_else(|e| e.into_inner()) = None;
        r
    }

    /// A MEMIF connection whose two ends are the memif example `traffic`: the NSC sends 20k
    /// frames/s and is killed (SIGKILL) mid-traffic; Quiver's port must go down; a new NSC
    /// connects to the same socket and its frames must come through; then the NSE is killed
    /// too, with frames still coming; then the connection is Closed.
    fn cnf_kill(&mut self) -> Result<Value, String> {
        self.cnf_n += 1;
        let id = format!("{}cnf-{}", self.id_prefix, self.cnf_n);
        let side = ClientSide {
            ns_url: self.ns.cnf.url(),
            mech: Mech::Memif,
            ifname: String::new(),
        };
        let conn = self.fault_request(&id, "cnf", &side, false)?;
        let socket = conn
            .mechanism
            .as_ref()
            .and_then(|m| m.parameters.get("socketfile").cloned())
            .ok_or("the CNF's connection has no socketfile")?;
        let exe = self.traffic.display().to_string();
        let (cnf_ns, nse_ns) = (self.ns.cnf.name.clone(), self.ns.nse.name.clone());
        let nse_sock = format!("@{}-cnf", self.tag);
        let qid = quiver_id(&conn, &self.spec.name).unwrap_or_default();
        let result = (|| -> Result<Value, String> {
            let (client_if, endpoint_if) = ports_of(&self.quiver, &qid)
                .ok_or_else(|| format!("the CNF's connection ({qid}) is not shown"))?;
            let mut sink = Cnf::spawn(
                &nse_ns,
                &exe,
                &[
                    "--rx",
                    &nse_sock,
                    "--rx-role",
                    "master",
                    "--connect-timeout",
                    "60s",
                ],
            )?;
            let source_args = ["--tx", &socket, "--tx-role", "slave", "--rate", "20k"];
            let mut source = Cnf::spawn(&cnf_ns, &exe, &source_args)?;
            let rx = |q: &Quiver| port(q, &client_if).map_or(0, |p| p.1);
            let flowing = wait_for(Duration::from_secs(20), Duration::from_millis(50), || {
                rx(&self.quiver) >= 2000
            });
            if !flowing {
                return Err(format!("no traffic from the CNF in 20 s ({client_if})"));
            }
            source.kill9();
            let t0 = Instant::now();
            let down = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
                port(&self.quiver, &client_if).is_some_and(|p| !p.0)
            });
            let client_down_ms = t0.elapsed().as_millis() as u64;
            // The CNF restarted: it dials the same socket and sends 5,000 frames.
            let before = rx(&self.quiver);
            let mut again = Cnf::spawn(
                &cnf_ns,
                &exe,
                &[
                    "--tx",
                    &socket,
                    "--tx-role",
                    "slave",
                    "--rate",
                    "20k",
                    "--count",
                    "5000",
                    "--connect-timeout",
                    "30s",
                ],
            )?;
            let sent_ok = again.wait_ok(Duration::from_secs(40));
            let after = rx(&self.quiver);
            // Then the NSE's CNF is killed while frames still come.
            let mut third = Cnf::spawn(&cnf_ns, &exe, &source_args)?;
            let base = rx(&self.quiver);
            wait_for(Duration::from_secs(10), Duration::from_millis(50), || {
                rx(&self.quiver) >= base + 2000
            });
            sink.kill9();
            let t0 = Instant::now();
            let endpoint_down =
                wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
                    port(&self.quiver, &endpoint_if).is_some_and(|p| !p.0)
                });
            let endpoint_down_ms = t0.elapsed().as_millis() as u64;
            third.kill9();
            Ok(json!({
                "client_link_down": down,
                "client_link_down_ms": client_down_ms,
                "restarted_cnf_sent_all": sent_ok,
                "frames_through_after_restart": after.saturating_sub(before),
                "endpoint_link_down": endpoint_down,
                "endpoint_link_down_ms": endpoint_down_ms,
            }))
        })();
        let closed = self.fault_close(conn);
        let mut v = result?;
        v["closed"] = json!(closed.is_ok());
        closed?;
        Ok(v)
    }

    /// Two connections (KERNEL with an IP context, MEMIF) from a namespace made for them,
    /// which is then deleted (`ip netns del`): Quiver must close both on its own.
    fn netns_delete(&mut self) -> Result<Value, String> {
        self.doom_n += 1;
        let mut ns = Netns::new(&format!("{}-doom{}", self.tag, self.doom_n))?;
        let kernel = ClientSide {
            ns_url: ns.url(),
            mech: Mech::Kernel,
            ifname: "d-c".into(),
        };
        let memif = ClientSide {
            mech: Mech::Memif,
            ..kernel.clone()
        };
        let ids = [
            format!("{}doom{}-k", self.id_prefix, self.doom_n),
            format!("{}doom{}-m", self.id_prefix, self.doom_n),
        ];
        let answers = [
            self.fault_request(&ids[0], "doomk", &kernel, true)?,
            self.fault_request(&ids[1], "doomm", &memif, false)?,
        ];
        let ids: Vec<String> = answers
            .iter()
            .filter_map(|a| quiver_id(a, &self.spec.name))
            .collect();
        let made = held(&self.quiver, &ids).len();
        ns.delete()?;
        let t0 = Instant::now();
        let closed = wait_for(Duration::from_secs(20), Duration::from_millis(20), || {
            held(&self.quiver, &ids).is_empty()
        });
        Ok(json!({
            "connections_made": made,
            "closed_by_quiver": closed,
            "closed_after_ms": t0.elapsed().as_millis() as u64,
            "left": held(&self.quiver, &ids),
        }))
    }

    /// The churn's endpoints refuse every Request for a while, then answer again.
    fn endpoint_refuses(&mut self) -> Result<Value, String> {
        let secs = if self.quick { 6 } else { 15 };
        self.endpoints
            .set_churn_behaviour(EndpointBehaviour::Refuse);
        let before = self.churn_failures();
        self.churn_for(Duration::from_secs(secs));
        self.endpoints
            .set_churn_behaviour(EndpointBehaviour::Answer);
        // Refusals on their way back still count as the fault's.
        self.churn_for(Duration::from_secs(2));
        Ok(json!({
            "seconds": secs,
            "requests_refused": self.churn_failures() - before,
        }))
    }

    /// The churn's endpoints take longer than Quiver's endpoint timeout (15 s) to answer the
    /// Requests that come for a few seconds; the clients give up first (their deadline is
    /// 10 s) and Close. Then the endpoints answer again and the run waits for the stalled
    /// Requests to end in Quiver.
    fn endpoint_stalls(&mut self) -> Result<Value, String> {
        let stall = ENDPOINT_TIMEOUT + Duration::from_secs(2);
        self.endpoints
            .set_churn_behaviour(EndpointBehaviour::Stall(stall));
        let before = self.churn_failures();
        self.churn_for(Duration::from_secs(4));
        self.endpoints
            .set_churn_behaviour(EndpointBehaviour::Answer);
        // Requests that came meanwhile end in Quiver after its timeout.
        self.churn_for(ENDPOINT_TIMEOUT + Duration::from_secs(3));
        Ok(json!({
            "stall_s": stall.as_secs(),
            "requests_timed_out": self.churn_failures() - before,
        }))
    }

    /// SIGKILL to Quiver mid-churn; what it left in the namespaces; a new Quiver (the other
    /// KERNEL backend) started; the stable connections healed (the churn heals on its own).
    fn quiver_kill(&mut self) -> Result<Value, String> {
        let old = self.quiver.incarnation;
        self.stable.mark_kill();
        self.quiver.kill9();
        let t0 = Instant::now();
        self.grpc = None;
        self.rss.set_pid(0, old);
        // What the dead Quiver left behind (the new one must reap it).
        let left = self.host_leftovers()?;
        let n = old + 1;
        self.restart(n)?;
        let restart_ms = t0.elapsed().as_millis() as u64;
        let reaped = self.quiver.log_lines("no connection owns").len()
            + self.quiver.log_lines("orphaned interface").len();
        let healed = self.stable.heal()?;
        // The churn re-Requests what it held on its own.
        self.churn_for(Duration::from_secs(3));
        Ok(json!({
            "killed": old,
            "started": n,
            "backend": self.quiver.backend,
            "left_by_the_killed": left,
            "restart_ms": restart_ms,
            "ready_after_ms": self.quiver.ready_after.as_millis() as u64,
            "reaped_log_lines": reaped,
            "stable_healed_ms": healed.as_millis() as u64,
        }))
    }
}

impl World {
    /// Why the stable connections' traffic did not drain: each flow's missing frames, its
    /// ports' counters in Quiver, the kernel interfaces' counters, Quiver's non-zero error
    /// counters.
    pub fn stable_diag(&self) -> Value {
        let interfaces = self
            .quiver
            .ctl_json(&["show", "interfaces"])
            .unwrap_or(Value::Null);
        let of = |name: &str| {
            interfaces
                .as_array()
                .and_then(|a| a.iter().find(|i| i["name"] == name))
                .map(|i| {
                    json!({
                        "name": name, "link": i["link"], "rx": i["rx_packets"], "tx": i["tx_packets"],
                        "rx_dropped": i["rx_dropped"], "tx_dropped": i["tx_dropped"],
                    })
                })
        };
        let mut flows = serde_json::Map::new();
        for ((name, qid), c) in self
            .stable
            .quiver_ids(&self.spec.name)
            .into_iter()
            .zip(&self.stable.conns)
        {
            let ports = qid.and_then(|q| ports_of(&self.quiver, &q));
            flows.insert(
                name.into(),
                json!({
                    "missing": c.flow.missing(),
                    "flow": c.flow.report(),
                    "client_port": ports.as_ref().and_then(|p| of(&p.0)),
                    "endpoint_port": ports.as_ref().and_then(|p| of(&p.1)),
                }),
            );
        }
        let link = |ns: &str, dev: &str| {
            super::super::procs::run(&[IP, "-s", "-j", "-n", ns, "link", "show", dev])
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .map(|v| v[0]["stats64"].clone())
        };
        let errors: Vec<Value> = self
            .quiver
            .ctl_json(&["show", "errors"])
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .filter(|e| num(&e["count"]) > 0)
            .map(|e| json!({"node": e["node"], "reason": e["reason"], "count": e["count"]}))
            .collect();
        json!({
            "flows": flows,
            "sk-c": link(&self.ns.st.name, "sk-c"),
            "sk-e": link(&self.ns.nse.name, "sk-e"),
            "errors": errors,
        })
    }
}
