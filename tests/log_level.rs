//! A running Quiver changes its log level on signals, as cmd-forwarder-vpp does: SIGUSR1 to
//! TRACE, SIGUSR2 back to where it started (here `info`, from the environment).

mod support;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::{memif_pair_config, Quiver, Scratch};

#[test]
fn sigusr1_switches_to_trace_and_sigusr2_back() {
    let dir = Scratch::new("log-level");
    let config = memif_pair_config(&dir.path("memif.sock"), "[stats]\ninterval_secs = 0");
    let mut q = Quiver::spawn_with(&dir, "q", &config, &dir.path("admin.sock"), |c| {
        c.env_remove("RUST_LOG").env("NSM_LOG_LEVEL", "INFO");
    });
    q.wait_log("admin API listening");
    assert!(
        !q.log().contains("TRACE"),
        "TRACE before any signal:\n{}",
        q.log()
    );
    let pid = Pid::from_raw(q.child.id() as i32);

    kill(pid, Signal::SIGUSR1).unwrap();
    // Written at TRACE: it shows only once the switch is made.
    q.wait_log("log level TRACE");
    kill(pid, Signal::SIGUSR2).unwrap();
    q.wait_log("log level back to where it started");
    assert!(q.log().contains("filter=info"), "{}", q.log());
    q.stop();
}
