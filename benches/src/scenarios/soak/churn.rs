//! The churn: clients, each on a thread with its own namespace and gRPC connection, Request
//! new connections (MEMIF or KERNEL toward the client, MEMIF or KERNEL toward the endpoint,
//! drawn at random; an IP context on KERNEL sides), refresh them and Close them, keeping at
//! most [`SLOTS`] up at a time. A client parks (after closing what it holds) while the gate
//! is shut: the accounting runs then. A call that fails for want of Quiver (killed) drops the
//! gRPC connection; the client dials again and re-Requests what it held, as NSM's clients heal.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nsm_forwarder::testing::BlockingClient;
use nsm_proto::connection::Connection;
use nsm_proto::networkservice::NetworkServiceRequest;
use tonic::{Code, Status};

use super::host::Rng;
use super::nsm::{churn_endpoint, first_request, ip_context, refresh_of, ClientSide, Mech, SLOTS};

/// How long a client waits for an answer.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A gate the churn passes while it is open.
#[derive(Default)]
pub struct Gate {
    shut: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    /// Shuts it (clients park) or opens it.
    pub fn set_shut(&self, shut: bool) {
        *self.shut.lock().unwrap_or_else(|e| e.into_inner()) = shut;
        self.cv.notify_all();
    }

    /// Whether it is shut.
    pub fn is_shut(&self) -> bool {
        *self.shut.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until it opens or `stop` is set (checked at least every 100 ms).
    pub fn wait_open(&self, stop: &AtomicBool) {
        let mut shut = self.shut.lock().unwrap_or_else(|e| e.into_inner());
        while *shut && !stop.load(Ordering::Relaxed) {
            shut = self
                .cv
                .wait_timeout(shut, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// What the churn shares with the run.
pub struct Ctx {
    /// Quiver's NSM socket.
    pub nsm_url: String,
    /// Ends the churn.
    pub stop: AtomicBool,
    /// Shut while the accounting runs.
    pub gate: Gate,
    /// Clients parked at the shut gate.
    pub parked: AtomicUsize,
    /// The fault under way (failures meanwhile are its, not unexpected).
    pub fault: Mutex<Option<&'static str>>,
    /// Connection ids start with this.
    pub id_prefix: String,
    /// Failed calls so far, all clients.
    pub failures: std::sync::atomic::AtomicU64,
    /// The KERNEL backend of the Quiver running.
    pub backend: Mutex<&'static str>,
}

impl Ctx {
    fn fault(&self) -> Option<&'static str> {
        *self.fault.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What one client did.
#[derive(Default, Debug)]
pub struct ChurnStats {
    /// Requests of new connections sent.
    pub requests: u64,
    /// Refreshes sent.
    pub refreshes: u64,
    /// Re-Requests after Quiver came back.
    pub heals: u64,
    /// Closes sent (after failed Requests too).
    pub closes: u64,
    /// Successful new Requests' times, ms.
    pub request_ms: Vec<f64>,
    /// The same by Quiver's KERNEL backend at the time.
    pub request_ms_by_backend: BTreeMap<&'static str, Vec<f64>>,
    /// Successful refreshes' times, ms.
    pub refresh_ms: Vec<f64>,
    /// Successful Closes' times, ms.
    pub close_ms: Vec<f64>,
    /// Failed calls: "<fault or none>: <call> <code>" → how many.
    pub failures: BTreeMap<String, u64>,
    /// The first failures outside any fault, with their messages.
    pub unexpected: Vec<String>,
    /// One message of each kind of failure.
    pub examples: BTreeMap<String, String>,
    /// Connections made, by "<client mechanism>/<endpoint mechanism>".
    pub made: BTreeMap<String, u64>,
}

impl ChurnStats {
    /// Adds `other` into this.
    pub fn merge(&mut self, other: ChurnStats) {
        self.requests += other.requests;
        self.refreshes += other.refreshes;
        self.heals += other.heals;
        self.closes += other.closes;
        self.request_ms.extend(other.request_ms);
        for (k, v) in other.request_ms_by_backend {
            self.request_ms_by_backend.entry(k).or_default().extend(v);
        }
        self.refresh_ms.extend(other.refresh_ms);
        self.close_ms.extend(other.close_ms);
        for (k, v) in other.failures {
            *self.failures.entry(k).or_default() += v;
        }
        self.unexpected.extend(other.unexpected);
        for (k, v) in other.examples {
            self.examples.entry(k).or_insert(v);
        }
        for (k, v) in other.made {
            *self.made.entry(k).or_default() += v;
        }
    }

    /// Failures outside any fault.
    pub fn unexpected_failures(&self) -> u64 {
        self.failures
            .iter()
            .filter(|(k, _)| k.starts_with("none:"))
            .map(|(_, v)| v)
            .sum()
    }
}

/// A connection a client holds.
struct Live {
    id: String,
    answer: Connection,
    side: ClientSide,
    /// Quiver went away since it was answered: Request it again.
    heal: bool,
}

/// One churn client.
pub struct Client {
    k: usize,
    ns_url: String,
    ctx: Arc<Ctx>,
    grpc: Option<BlockingClient>,
    live: [Option<Live>; SLOTS],
    rng: Rng,
    n: u64,
    /// What it did.
    pub stats: ChurnStats,
}

/// Whether a failure means Quiver's socket is gone (killed): dial again.
/// (A deadline that passed is not: the connection to Quiver is fine, and the Close that follows
/// must go on it; nor is an endpoint's refusal Quiver passes on.)
fn transport(s: &Status) -> bool {
    match s.code() {
        Code::Unavailable => {
            s.message().contains("not connected") || s.message().contains("transport")
        }
        Code::Unknown => true,
        _ => false,
    }
}

impl Client {
    /// Client `k`, its connections made in the namespace `ns_url` names.
    pub fn new(k: usize, ns_url: String, ctx: Arc<Ctx>) -> Client {
        Client {
            k,
            ns_url,
            ctx,
            grpc: None,
            live: Default::default(),
            rng: Rng::new(0x5eed_0000 + k as u64 * 7919),
            n: 0,
            stats: ChurnStats::default(),
        }
    }

    /// Runs until the context stops; returns what it did.
    pub fn run(mut self) -> ChurnStats {
        while !self.ctx.stop.load(Ordering::Relaxed) {
            if self.ctx.gate.is_shut() {
                self.close_all();
                // Parked clients hold no connection to Quiver.
                self.grpc = None;
                self.ctx.parked.fetch_add(1, Ordering::SeqCst);
                self.ctx.gate.wait_open(&self.ctx.stop);
                self.ctx.parked.fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            if !self.connected() {
                // Quiver is away: dial again shortly (the gate and stop are checked meanwhile).
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            if let Some(s) = (0..SLOTS).find(|&s| self.live[s].as_ref().is_some_and(|l| l.heal)) {
                self.heal(s);
                continue;
            }
            let free: Vec<usize> = (0..SLOTS).filter(|&s| self.live[s].is_none()).collect();
            let held: Vec<usize> = (0..SLOTS).filter(|&s| self.live[s].is_some()).collect();
            let r = self.rng.below(10);
            if !free.is_empty() && (held.is_empty() || r < 5) {
                let s = free[self.rng.below(free.len() as u64) as usize];
                self.open(s);
            } else if r < 8 {
                let s = held[self.rng.below(held.len() as u64) as usize];
                self.refresh(s);
            } else {
                let s = held[self.rng.below(held.len() as u64) as usize];
                self.close(s);
            }
        }
        self.close_all();
        self.stats
    }

    fn connected(&mut self) -> bool {
        if self.grpc.is_none() {
            self.grpc = BlockingClient::connect(&self.ctx.nsm_url).ok();
        }
        self.grpc.is_some()
    }

    /// Notes a failed `call` (started while `at_start` was under way); a transport failure
    /// drops the connection and marks every live connection for healing.
    fn failed(&mut self, call: &str, id: &str, e: &Status, at_start: Option<&'static str>) {
        let fault = at_start.or(self.ctx.fault());
        self.ctx.failures.fetch_add(1, Ordering::Relaxed);
        let key = format!("{}: {call} {:?}", fault.unwrap_or("none"), e.code());
        *self.stats.failures.entry(key.clone()).or_default() += 1;
        self.stats
            .examples
            .entry(key)
            .or_insert_with(|| format!("{id}: {}", e.message()));
        if fault.is_none() && self.stats.unexpected.len() < 20 {
            self.stats
                .unexpected
                .push(format!("{call} {id}: {:?}: {}", e.code(), e.message()));
        }
        if transport(e) {
            self.grpc = None;
            for l in self.live.iter_mut().flatten() {
                l.heal = true;
            }
        }
    }

    /// Sends `req`: how long it took, the answer, the fault under way when it was sent.
    fn request(
        &mut self,
        req: NetworkServiceRequest,
    ) -> (Duration, Result<Connection, Status>, Option<&'static str>) {
        let fault = self.ctx.fault();
        let t0 = Instant::now();
        let r = match self.grpc.as_mut() {
            Some(g) => g.request_within(req, DEADLINE),
            None => Err(Status::unavailable("not connected")),
        };
        (t0.elapsed(), r, fault)
    }

    fn open(&mut self, s: usize) {
        self.n += 1;
        let id = format!("{}c{}-{}", self.ctx.id_prefix, self.k, self.n);
        let client = if self.rng.below(2) == 0 {
            Mech::Memif
        } else {
            Mech::Kernel
        };
        let endpoint = if self.rng.below(2) == 0 {
            Mech::Memif
        } else {
            Mech::Kernel
        };
        let side = ClientSide {
            ns_url: self.ns_url.clone(),
            mech: client,
            ifname: format!("c{}s{s}", self.k),
        };
        let ip = (client == Mech::Kernel || endpoint == Mech::Kernel)
            .then(|| ip_context(100 + self.k as u8, s as u8));
        let req = first_request(&id, &churn_endpoint(self.k, s, endpoint), &side, ip);
        self.stats.requests += 1;
        let (took, r, fault) = self.request(req);
        match r {
            Ok(answer) => {
                let ms = took.as_secs_f64() * 1e3;
                self.stats.request_ms.push(ms);
                let backend = *self.ctx.backend.lock().unwrap_or_else(|e| e.into_inner());
                self.stats
                    .request_ms_by_backend
                    .entry(backend)
                    .or_default()
                    .push(ms);
                let key = format!("{}/{}", client.name(), endpoint.name());
                *self.stats.made.entry(key).or_default() += 1;
                self.live[s] = Some(Live {
                    id,
                    answer,
                    side,
                    heal: false,
                });
            }
            Err(e) => {
                self.failed("Request", &id, &e, fault);
                // As NSM's clients do after a failed Request: Close whatever may be left.
                self.close_id(&id, None);
            }
        }
    }

    fn refresh(&mut self, s: usize) {
        let Some(l) = self.live[s].take() else { return };
        self.stats.refreshes += 1;
        let (took, r, fault) = self.request(refresh_of(&l.answer, &l.side));
        match r {
            Ok(answer) => {
                self.stats.refresh_ms.push(took.as_secs_f64() * 1e3);
                self.live[s] = Some(Live { answer, ..l });
            }
            Err(e) => {
                self.failed("refresh", &l.id, &e, fault);
                if transport(&e) {
                    self.live[s] = Some(Live { heal: true, ..l });
                } else {
                    self.close_id(&l.id, Some(l.answer));
                }
            }
        }
    }

    fn heal(&mut self, s: usize) {
        let Some(l) = self.live[s].take() else { return };
        self.stats.heals += 1;
        let (_, r, fault) = self.request(refresh_of(&l.answer, &l.side));
        match r {
            Ok(answer) => {
                self.live[s] = Some(Live {
                    answer,
                    heal: false,
                    ..l
                })
            }
            Err(e) => {
                self.failed("heal", &l.id, &e, fault);
                if transport(&e) {
                    self.live[s] = Some(l);
                } else {
                    self.close_id(&l.id, Some(l.answer));
                }
            }
        }
    }

    fn close(&mut self, s: usize) {
        if let Some(l) = self.live[s].take() {
            self.close_id(&l.id, Some(l.answer));
        }
    }

    /// Closes `id` (as answered, or as first Requested when it never was).
    fn close_id(&mut self, id: &str, answer: Option<Connection>) {
        let conn = answer.unwrap_or_else(|| Connection {
            id: id.into(),
            ..first_request(
                id,
                "",
                &ClientSide {
                    ns_url: self.ns_url.clone(),
                    mech: Mech::Memif,
                    ifname: String::new(),
                },
                None,
            )
            .connection
            .unwrap_or_default()
        });
        self.stats.closes += 1;
        let fault = self.ctx.fault();
        let t0 = Instant::now();
        let r = match self.grpc.as_mut() {
            Some(g) => g.close(conn),
            None => Err(Status::unavailable("not connected")),
        };
        match r {
            Ok(()) => self.stats.close_ms.push(t0.elapsed().as_secs_f64() * 1e3),
            Err(e) => self.failed("Close", id, &e, fault),
        }
    }

    /// Closes every connection it holds (those Quiver forgot when it was killed too: the
    /// Close is answered all the same).
    fn close_all(&mut self) {
        for s in 0..SLOTS {
            if self.live[s].is_some() && !self.connected() {
                // Quiver is away: what it held went with it.
                self.live[s] = None;
                continue;
            }
            self.close(s);
        }
    }
}
