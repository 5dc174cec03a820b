//! `quiver ctl health`: exit 0 when Quiver answers, the admin API or the NSM services.

use quiver_admin_api::proto as pb;
use quiver_admin_api::AdminClient;

use super::reply::{print_json, status};

/// `quiver ctl health`: the admin API answers a call.
pub fn admin(client: &AdminClient, json: bool) -> Result<(), String> {
    let mut s = client.stub();
    client
        .block_on(s.show_interfaces(pb::Empty {}))
        .map_err(status)?;
    if json {
        print_json(&serde_json::json!({ "serving": ["quiver.admin.Admin"] }));
    } else {
        println!("serving: quiver.admin.Admin");
    }
    Ok(())
}

/// `quiver ctl health --nsm-socket S`: both NSM services SERVING.
pub fn nsm(socket: &str, timeout: u64, json: bool) -> Result<(), String> {
    let url = nsm_url(socket);
    let serving =
        nsm_forwarder::health::check_blocking(&url, std::time::Duration::from_secs(timeout))?;
    if json {
        print_json(&serde_json::json!({ "serving": serving }));
    } else {
        println!("serving: {}", serving.join(", "));
    }
    Ok(())
}

/// `--nsm-socket` as a URL: `unix://` and `tcp://` ones as they are, a path as `unix://path`.
fn nsm_url(socket: &str) -> String {
    if socket.starts_with("unix://") || socket.starts_with("tcp://") {
        socket.to_string()
    } else {
        format!("unix://{socket}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nsm_socket_is_a_path_or_a_unix_or_tcp_url() {
        assert_eq!(nsm_url("/listen.on.sock"), "unix:///listen.on.sock");
        assert_eq!(nsm_url("unix:///listen.on.sock"), "unix:///listen.on.sock");
        assert_eq!(nsm_url("tcp://10.0.0.1:5001"), "tcp://10.0.0.1:5001");
    }
}
