//! One module per scenario.

pub mod acl;
pub mod acl_rules;
pub mod common;
pub mod ctl_churn;
pub mod dispatch;
pub mod dpdk;
pub mod graph_ip6;
pub mod graphs;
pub mod host_state;
pub mod kernel;
pub mod lpm;
pub mod lpm6;
pub mod lpm6_routes;
pub mod memif_rate;
pub mod memif_xc;
pub mod procs;
pub mod soak;
pub mod wg_floor;
pub mod wg_net;
pub mod wireguard;

/// Pins the calling thread to the last CPU this process may use (the first is left to the OS).
pub fn pin_to_last_core() -> Result<usize, String> {
    let set =
        nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).map_err(|e| e.to_string())?;
    let core = (0..nix::sched::CpuSet::count())
        .rev()
        .find(|&c| set.is_set(c).unwrap_or(false))
        .ok_or("no CPU available")?;
    let mut one = nix::sched::CpuSet::new();
    one.set(core).map_err(|e| e.to_string())?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one)
        .map_err(|e| e.to_string())?;
    Ok(core)
}
