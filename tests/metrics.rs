//! Prometheus metrics as an operator scrapes them: the real `quiver` binary with memif ports
//! and memif CNFs sending real traffic, scraped with `curl`, the text format parsed here (every
//! sample under its `# HELP`/`# TYPE`, label escapes decoded), and the values compared with
//! what `quiver ctl … --json` shows.

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Command;

use serde_json::Value;
use support::{cnfs, interface_mac, one, route, routed_config, udp, Quiver, Scratch};
use testkit::{require, wait_for, Needs};

const CURL: &str = "/usr/bin/curl";
const NSENTER: &str = "/usr/bin/nsenter";
const UNSHARE: &str = "/usr/bin/unshare";

/// One sample.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed exposition.
#[derive(Debug, Default)]
struct Exposition {
    types: HashMap<String, String>,
    samples: Vec<Sample>,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Parses the text format (version 0.0.4), panicking on anything malformed: a sample before
/// its family's `# TYPE`, a family typed twice, a bad escape, a bad value.
fn parse(text: &str) -> Exposition {
    let mut e = Exposition::default();
    let mut helped: HashSet<String> = HashSet::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(helped.insert(name.to_string()), "HELP twice for {name}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut w = rest.split(' ');
            let (name, kind) = (w.next().unwrap(), w.next().expect("a type"));
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            assert!(
                e.types.insert(name.to_string(), kind.to_string()).is_none(),
                "TYPE twice for {name}"
            );
            assert!(helped.contains(name), "{name}: TYPE without HELP");
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let mut chars = line.char_indices().peekable();
        let mut end = 0;
        while let Some(&(i, c)) = chars.peek() {
            if !is_name_char(c) {
                break;
            }
            end = i + c.len_utf8();
            chars.next();
        }
        let name = line[..end].to_string();
        assert!(!name.is_empty(), "no metric name: {line}");
        let mut labels = BTreeMap::new();
        if chars.peek().map(|&(_, c)| c) == Some('{') {
            chars.next();
            loop {
                let mut key = String::new();
                loop {
                    let (_, c) = chars.next().unwrap_or_else(|| panic!("cut: {line}"));
                    match c {
                        '=' => break,
                        '}' if key.is_empty() => break,
                        ',' if key.is_empty() => continue,
                        c => key.push(c),
                    }
                }
                if key.is_empty() {
                    break;
                }
                assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line}");
                let mut value = String::new();
                loop {
                    let (_, c) = chars.next().unwrap_or_else(|| panic!("cut: {line}"));
                    match c {
                        '"' => break,
                        '\\' => match chars.next().map(|(_, c)| c) {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => panic!("bad escape \\{other:?} in {line}"),
                        },
                        '\n' => panic!("raw line feed in {line}"),
                        c => value.push(c),
                    }
                }
                assert!(labels.insert(key.clone(), value).is_none(), "{key} twice");
                match chars.next().map(|(_, c)| c) {
                    Some(',') => continue,
                    Some('}') => break,
                    other => panic!("{other:?} after a label in {line}"),
                }
            }
        }
        let rest: String = chars.map(|(_, c)| c).collect();
        let mut fields = rest.split_whitespace();
        let value: f64 = match fields.next().expect("a value") {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        if let Some(ts) = fields.next() {
            ts.parse::<i64>().expect("a timestamp");
        }
        assert!(
            e.types.contains_key(&name),
            "{name} has no # TYPE before it"
        );
        e.samples.push(Sample {
            name,
            labels,
            value,
        });
    }
    e
}

impl Exposition {
    /// Every sample of `name` whose labels include `labels`.
    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The one sample of `name` with `labels`, as an integer.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let found = self.find(name, labels);
        assert_eq!(found.len(), 1, "one {name}{labels:?}: {found:?}");
        let v = found[0].value;
        assert!(v >= 0.0 && v.fract() == 0.0, "{name}: {v}");
        v as u64
    }
}

/// `GET url` with curl: (status, content type, body).
fn curl(url: &str) -> (u32, String, String) {
    curl_from(Command::new(CURL), url)
}

/// [`curl`] inside the network namespace of process `pid`.
fn curl_in(pid: u32, url: &str) -> (u32, String, String) {
    let mut cmd = Command::new(NSENTER);
    cmd.arg(format!("--net=/proc/{pid}/ns/net")).arg(CURL);
    curl_from(cmd, url)
}

fn curl_from(mut cmd: Command, url: &str) -> (u32, String, String) {
    let out = cmd
        .args([
            "-sS",
            "--max-time",
            "20",
            "-w",
            "\n%{http_code} %{content_type}",
            url,
        ])
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "curl {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, trailer) = text.rsplit_once('\n').unwrap();
    let (code, ctype) = trailer.split_once(' ').unwrap();
    (code.parse().unwrap(), ctype.to_string(), body.to_string())
}

/// Scrapes `addr`/metrics, which must answer 200 in the text format, and parses it.
fn scrape(addr: &str) -> Exposition {
    parse_page(curl(&format!("http://{addr}/metrics")))
}

fn parse_page((code, ctype, body): (u32, String, String)) -> Exposition {
    assert_eq!(code, 200, "{body}");
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    parse(&body)
}

/// The address quiver logged it serves metrics on.
fn metrics_addr(q: &mut Quiver) -> String {
    q.wait_log("metrics listening");
    let log = q.log();
    let line = log
        .lines()
        .find(|l| l.contains("metrics listening"))
        .unwrap();
    let at = line.find("addr=").expect("the address in the log") + "addr=".len();
    line[at..].split_whitespace().next().unwrap().to_string()
}

/// The local addresses of every listening TCP socket process `pid` holds.
fn listening_tcp(pid: u32) -> Vec<String> {
    let mut inodes = HashSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        if let Ok(target) = std::fs::read_link(fd.path()) {
            let t = target.to_string_lossy().into_owned();
            if let Some(i) = t.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')) {
                inodes.insert(i.to_string());
            }
        }
    }
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            if f.len() > 9 && f[3] == "0A" && inodes.contains(f[9]) {
                out.push(f[1].to_string());
            }
        }
    }
    out
}

fn counter(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v:#}"))
}

fn has_curl(test: &str) -> bool {
    require(
        test,
        &Needs {
            tools: &[CURL],
            ..Needs::default()
        },
    )
}

#[test]
fn scraped_counters_match_quiver_ctl_and_grow_with_traffic() {
    if !has_curl("scraped_counters_match_quiver_ctl_and_grow_with_traffic") {
        return;
    }
    let dir = Scratch::new("scrape");
    let memif_socket = dir.path("memif.sock");
    let mut q = Quiver::start(
        &dir,
        &routed_config(&memif_socket, ""),
        &["--metrics-listen", "127.0.0.1:0"],
    );
    let addr = metrics_addr(&mut q);
    assert_eq!(
        listening_tcp(q.child.id()).len(),
        1,
        "quiver listens on one TCP socket: the metrics endpoint"
    );

    // Before the CNFs: links down, nothing counted.
    let m = scrape(&addr);
    assert_eq!(m.types["quiver_interface_rx_packets_total"], "counter");
    assert_eq!(m.types["quiver_memif_link_up"], "gauge");
    for port in ["memif0", "memif1"] {
        assert_eq!(m.get("quiver_memif_link_up", &[("interface", port)]), 0);
        assert_eq!(
            m.get("quiver_interface_rx_packets_total", &[("interface", port)]),
            0
        );
    }
    let m1 = &m.find("quiver_memif_link_up", &[("interface", "memif1")])[0];
    assert_eq!(m1.labels["role"], "master");
    assert_eq!(m1.labels["id"], "1");
    assert_eq!(m1.labels["socket"], memif_socket.display().to_string());
    // Without the NSM service there is no connection family.
    assert!(!m.types.contains_key("quiver_nsm_connections"));
    let capacity = m.get("quiver_buffer_pool_capacity", &[]);
    assert_eq!(capacity, 4096);
    assert_eq!(
        m.get("quiver_buffer_pool_free", &[]) + m.get("quiver_buffer_pool_in_use", &[]),
        capacity
    );
    let before = m.get("quiver_node_packets_total", &[("node", "ip4-lookup")]);

    let (mut a, mut b) = cnfs(&mut q, &memif_socket);
    let m = scrape(&addr);
    for port in ["memif0", "memif1"] {
        assert_eq!(m.get("quiver_memif_link_up", &[("interface", port)]), 1);
        assert_eq!(
            m.get(
                "quiver_interface_link_up",
                &[("interface", port), ("type", "memif")]
            ),
            1
        );
    }

    // Traffic: N routed frames, and D with no route (dropped by reason).
    const N: usize = 200;
    const D: usize = 3;
    let mac = interface_mac(&q, "memif0");
    let frames: Vec<Vec<u8>> = (0..N as u16)
        .map(|i| udp(mac, [10, 9, 0, 5], 100, i))
        .collect();
    let got = route(&mut a, &mut b, &frames, N);
    assert_eq!(got.len(), N);
    let drops: Vec<Vec<u8>> = (0..D as u16)
        .map(|i| udp(mac, [192, 0, 2, 1], 100, i))
        .collect();
    a.send(&drops);
    wait_for("the no-route drops", 30, || {
        a.poll();
        let m = scrape(&addr);
        m.find("quiver_errors_total", &[("reason", "no-route")])
            .iter()
            .map(|s| s.value as u64)
            .sum::<u64>()
            == D as u64
    });

    // Every interface counter is what `quiver ctl show interfaces` says.
    let m = scrape(&addr);
    let ifs = q.json(&["show", "interfaces"]);
    for port in ["memif0", "memif1"] {
        let i = one(&ifs, "name", port);
        for key in [
            "rx_packets",
            "rx_bytes",
            "tx_packets",
            "tx_bytes",
            "rx_dropped",
            "tx_dropped",
        ] {
            assert_eq!(
                m.get(
                    &format!("quiver_interface_{key}_total"),
                    &[("interface", port), ("type", "memif")]
                ),
                counter(i, key),
                "{port} {key}"
            );
        }
    }
    let rx0 = m.get(
        "quiver_interface_rx_packets_total",
        &[("interface", "memif0")],
    );
    let tx1 = m.get(
        "quiver_interface_tx_packets_total",
        &[("interface", "memif1")],
    );
    assert_eq!(rx0, (N + D) as u64);
    assert_eq!(tx1, N as u64);
    assert_eq!(
        m.get(
            "quiver_interface_rx_bytes_total",
            &[("interface", "memif0")]
        ),
        ((N + D) * 100) as u64
    );

    // Node counters: summed, per worker, and as `show runtime` has them.
    let after = m.get("quiver_node_packets_total", &[("node", "ip4-lookup")]);
    assert_eq!(after - before, (N + D) as u64);
    let rt = q.json(&["show", "runtime"]);
    for n in rt["workers"][0]["nodes"].as_array().unwrap() {
        let node = n["name"].as_str().unwrap();
        assert_eq!(
            m.get("quiver_node_packets_total", &[("node", node)]),
            counter(n, "packets"),
            "{node}"
        );
        assert_eq!(
            m.get("quiver_node_vectors_total", &[("node", node)]),
            counter(n, "vectors"),
            "{node}"
        );
        assert_eq!(
            m.get("quiver_node_clocks_total", &[("node", node)]),
            counter(n, "clocks"),
            "{node}"
        );
        // Scraped first: an input node is called on every poll since.
        assert!(m.get("quiver_node_calls_total", &[("node", node)]) <= counter(n, "calls"));
    }
    assert_eq!(
        m.get(
            "quiver_worker_node_packets_total",
            &[("worker", "0"), ("core", "1"), ("node", "ip4-rewrite")]
        ),
        N as u64
    );
    assert!(m.get("quiver_node_clocks_total", &[("node", "ip4-rewrite")]) > 0);
    assert!(m.get("quiver_tsc_hz", &[]) > 0);

    // Drops by node and reason: every error counter `show errors --all` lists.
    let errors = q.json(&["show", "errors", "--all"]);
    let errors = errors.as_array().unwrap();
    assert!(!errors.is_empty());
    for e in errors {
        let (node, reason) = (e["node"].as_str().unwrap(), e["reason"].as_str().unwrap());
        assert_eq!(
            m.get("quiver_errors_total", &[("node", node), ("reason", reason)]),
            counter(e, "count"),
            "{node} {reason}"
        );
    }
    assert_eq!(m.types["quiver_errors_total"], "counter");

    // More traffic: the counters grow by exactly that much.
    let got = route(&mut a, &mut b, &frames[..50], 50);
    assert_eq!(got.len(), 50);
    wait_for("the counters to grow", 30, || {
        let m = scrape(&addr);
        m.get(
            "quiver_interface_tx_packets_total",
            &[("interface", "memif1")],
        ) == tx1 + 50
    });
    let m = scrape(&addr);
    assert_eq!(
        m.get(
            "quiver_interface_rx_packets_total",
            &[("interface", "memif0")]
        ),
        rx0 + 50
    );

    // A peer leaving takes its link to 0.
    drop(b);
    wait_for("memif1's link down in the metrics", 30, || {
        scrape(&addr).get("quiver_memif_link_up", &[("interface", "memif1")]) == 0
    });

    // Only /metrics is served.
    let (code, _, _) = curl(&format!("http://{addr}/other"));
    assert_eq!(code, 404);
    let (code, _, _) = curl(&format!("http://{addr}/"));
    assert_eq!(code, 404);
}

#[test]
fn the_config_key_serves_metrics_and_nsm_connections_appear_with_the_nsm_service() {
    let test = "the_config_key_serves_metrics_and_nsm_connections_appear_with_the_nsm_service";
    // In a network namespace of its own: the NSM service's startup removes every quiver-made
    // veth it sees, which must not be another test's.
    if !require(
        test,
        &Needs {
            root: true,
            tools: &[CURL, NSENTER, UNSHARE],
            ..Needs::default()
        },
    ) {
        return;
    }
    let dir = Scratch::new("key");
    let memif_socket = dir.path("memif.sock");
    let nsm = format!("unix://{}", dir.path("nsm.sock").display());
    let mut q = Quiver::spawn_in_new_netns(
        &dir,
        &routed_config(&memif_socket, "[metrics]\nlisten = \"127.0.0.1:0\"\n"),
        &["--nsm"],
        &[("NSM_LISTEN_ON", &nsm), ("NSM_NAME", "quiver-metrics-test")],
    );
    q.wait_log("admin API listening");
    let addr = metrics_addr(&mut q);
    let m = parse_page(curl_in(q.child.id(), &format!("http://{addr}/metrics")));
    assert_eq!(m.types["quiver_nsm_connections"], "gauge");
    assert_eq!(m.get("quiver_nsm_connections", &[("state", "up")]), 0);
    assert_eq!(m.get("quiver_nsm_connections", &[("state", "down")]), 0);
    assert_eq!(
        q.json(&["show", "connections"]),
        serde_json::json!([]),
        "the same (empty) table ctl shows"
    );
    assert_eq!(m.get("quiver_memif_link_up", &[("interface", "memif0")]), 0);
}

#[test]
fn metrics_are_off_unless_configured() {
    let dir = Scratch::new("off");
    let memif_socket = dir.path("memif.sock");
    let mut q = Quiver::start(&dir, &routed_config(&memif_socket, ""), &[]);
    q.wait_log("forwarding");
    assert_eq!(
        listening_tcp(q.child.id()),
        Vec::<String>::new(),
        "no TCP socket listens"
    );
    assert!(!q.log().contains("metrics listening"));
    // The documented example address is not served either.
    match std::net::TcpStream::connect("127.0.0.1:9464") {
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused),
        Ok(_) => assert_eq!(
            listening_tcp(q.child.id()).len(),
            0,
            "something else serves 127.0.0.1:9464, not quiver"
        ),
    }
}

#[test]
fn a_bad_metrics_address_is_a_clear_startup_error() {
    let dir = Scratch::new("bad");
    let memif_socket = dir.path("memif.sock");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    for (config_extra, args, expected) in [
        (
            "",
            vec!["--metrics-listen", "localhost"],
            "metrics listen address `localhost` is not IP:PORT".to_string(),
        ),
        (
            "[metrics]\nlisten = \"10.0.0.1:99999\"\n",
            vec![],
            "metrics listen address `10.0.0.1:99999` is not IP:PORT".to_string(),
        ),
        (
            "",
            vec!["--metrics-listen", taken_addr.as_str()],
            format!("metrics: cannot listen on {taken_addr}: Address already in use"),
        ),
    ] {
        let q = Quiver::spawn(&dir, &routed_config(&memif_socket, config_extra), &args);
        let (status, log) = q.wait_exit();
        assert!(!status.success(), "{args:?}: quiver ran:\n{log}");
        assert!(
            log.contains(&expected),
            "{args:?}: expected `{expected}` in:\n{log}"
        );
        assert!(
            !log.contains("admin API listening") && !log.contains("memif"),
            "{args:?}: quiver started something before refusing:\n{log}"
        );
        assert!(!dir.path("admin.sock").exists());
    }
    drop(taken);
}
