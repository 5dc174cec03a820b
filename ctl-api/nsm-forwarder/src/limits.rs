//! The sizes Quiver accepts from a caller, checked before anything else of a call is looked at
//! (before the path token, the fds passed, the connection's lock): a message no larger than
//! [`MAX_MESSAGE_SIZE`] (gRPC's own default, set explicitly on the server), and within it no
//! more than a few of anything Quiver walks, copies or builds per item. A Request or Close over
//! a limit is `INVALID_ARGUMENT` naming the field and the limit; a message over
//! [`MAX_MESSAGE_SIZE`] is `RESOURCE_EXHAUSTED` ([`grpc_unix::MessageLimit`]). Everything
//! bounded only by the message size (labels, tokens, metrics, extra context) is at most
//! [`MAX_MESSAGE_SIZE`] per call, held no longer than the call or the connection.
//!
//! NSM's own components send far less: a path of 3 to 8 segments, 1 to 4 mechanism
//! preferences of a few parameters, an IP context of a few addresses and routes.

use nsm_proto::connection::{Connection, Mechanism};
use nsm_proto::connectioncontext::IpContext;
use nsm_proto::networkservice::NetworkServiceRequest;
use tonic::Status;

/// The longest connection id Quiver accepts (it names sockets and ports; NSM's are UUIDs).
pub const MAX_ID_LEN: usize = 48;

/// The largest message the NSM server decodes or sends (4 MiB, gRPC's default, as nsmgr and
/// cmd-forwarder-vpp use).
pub const MAX_MESSAGE_SIZE: usize = 4 << 20;

/// The most mechanism preferences a Request may offer.
pub const MAX_MECHANISM_PREFERENCES: usize = 16;

/// The most parameters one mechanism may carry.
pub const MAX_MECHANISM_PARAMETERS: usize = 32;

/// The longest mechanism parameter name or value, in bytes (a path: `PATH_MAX`).
pub const MAX_PARAMETER_LEN: usize = 4096;

/// The most segments a connection's path may have.
pub const MAX_PATH_SEGMENTS: usize = 32;

/// The most addresses of one side of an IP context (`src_ip_addrs`, `dst_ip_addrs`).
pub const MAX_IP_ADDRESSES: usize = 64;

/// The most routes of one side of an IP context (`src_routes`, `dst_routes`), and of all the
/// policies' routes together.
pub const MAX_ROUTES: usize = 1024;

/// The most prefixes of `excluded_prefixes`, and of `extra_prefixes`.
pub const MAX_PREFIXES: usize = 1024;

/// The most neighbours of an IP context (`ip_neighbors`).
pub const MAX_NEIGHBORS: usize = 256;

/// The most policies of an IP context (each is a rule and a routing table of its own).
pub const MAX_POLICIES: usize = 64;

fn over(what: &str, n: usize, max: usize) -> Result<(), Status> {
    if n > max {
        return Err(Status::invalid_argument(format!(
            "{what} has {n} entries: Quiver takes at most {max}"
        )));
    }
    Ok(())
}

/// Checks the sizes of a Request (see the module's limits).
pub fn request(req: &NetworkServiceRequest) -> Result<(), Status> {
    over(
        "mechanism_preferences",
        req.mechanism_preferences.len(),
        MAX_MECHANISM_PREFERENCES,
    )?;
    for (i, m) in req.mechanism_preferences.iter().enumerate() {
        mechanism(&format!("mechanism_preferences[{i}]"), m)?;
    }
    let Some(conn) = &req.connection else {
        return Ok(());
    };
    connection(conn)?;
    if let Some(m) = &conn.mechanism {
        mechanism("connection.mechanism", m)?;
    }
    if let Some(ip) = conn.context.as_ref().and_then(|c| c.ip_context.as_ref()) {
        ip_context(ip)?;
    }
    Ok(())
}

/// Checks the sizes of a connection's id and path (a Request's, or a Close's).
pub fn connection(conn: &Connection) -> Result<(), Status> {
    if conn.id.len() > MAX_ID_LEN {
        return Err(Status::invalid_argument(format!(
            "connection.id is {} bytes long: Quiver takes at most {MAX_ID_LEN}",
            conn.id.len()
        )));
    }
    if let Some(path) = &conn.path {
        over(
            "connection.path.path_segments",
            path.path_segments.len(),
            MAX_PATH_SEGMENTS,
        )?;
    }
    Ok(())
}

fn mechanism(what: &str, m: &Mechanism) -> Result<(), Status> {
    over(
        &format!("{what}.parameters"),
        m.parameters.len(),
        MAX_MECHANISM_PARAMETERS,
    )?;
    for (k, v) in &m.parameters {
        if k.len().max(v.len()) > MAX_PARAMETER_LEN {
            return Err(Status::invalid_argument(format!(
                "{what}.parameters: a name or value is longer than {MAX_PARAMETER_LEN} bytes"
            )));
        }
    }
    Ok(())
}

/// Checks the sizes of an IP context, a client's or an endpoint's (see the module's limits).
pub fn ip_context(c: &IpContext) -> Result<(), Status> {
    let what = "connection.context.ip_context";
    over(
        &format!("{what}.src_ip_addrs"),
        c.src_ip_addrs.len(),
        MAX_IP_ADDRESSES,
    )?;
    over(
        &format!("{what}.dst_ip_addrs"),
        c.dst_ip_addrs.len(),
        MAX_IP_ADDRESSES,
    )?;
    over(
        &format!("{what}.src_routes"),
        c.src_routes.len(),
        MAX_ROUTES,
    )?;
    over(
        &format!("{what}.dst_routes"),
        c.dst_routes.len(),
        MAX_ROUTES,
    )?;
    over(
        &format!("{what}.excluded_prefixes"),
        c.excluded_prefixes.len(),
        MAX_PREFIXES,
    )?;
    over(
        &format!("{what}.extra_prefixes"),
        c.extra_prefixes.len(),
        MAX_PREFIXES,
    )?;
    over(
        &format!("{what}.ip_neighbors"),
        c.ip_neighbors.len(),
        MAX_NEIGHBORS,
    )?;
    over(&format!("{what}.policies"), c.policies.len(), MAX_POLICIES)?;
    let policy_routes = c
        .policies
        .iter()
        .fold(0usize, |n, p| n.saturating_add(p.routes.len()));
    over(
        &format!("{what}.policies[*].routes"),
        policy_routes,
        MAX_ROUTES,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsm_proto::connection::{Path, PathSegment};
    use nsm_proto::connectioncontext::{ConnectionContext, PolicyRoute, Route};
    use tonic::Code;

    fn req(conn: Connection, prefs: usize) -> NetworkServiceRequest {
        NetworkServiceRequest {
            connection: Some(conn),
            mechanism_preferences: vec![Mechanism::default(); prefs],
        }
    }

    fn with_ip(ip: IpContext) -> NetworkServiceRequest {
        req(
            Connection {
                id: "c".into(),
                context: Some(ConnectionContext {
                    ip_context: Some(ip),
                    ..Default::default()
                }),
                ..Default::default()
            },
            1,
        )
    }

    fn code(r: &NetworkServiceRequest) -> Option<Code> {
        request(r).err().map(|s| s.code())
    }

    #[test]
    fn each_limit_is_inclusive_and_refused_one_over() {
        let id = |n: usize| Connection {
            id: "x".repeat(n),
            ..Default::default()
        };
        assert_eq!(code(&req(id(MAX_ID_LEN), 1)), None);
        assert_eq!(
            code(&req(id(MAX_ID_LEN + 1), 1)),
            Some(Code::InvalidArgument)
        );
        assert_eq!(code(&req(id(1), MAX_MECHANISM_PREFERENCES)), None);
        assert_eq!(
            code(&req(id(1), MAX_MECHANISM_PREFERENCES + 1)),
            Some(Code::InvalidArgument)
        );
        let segments = |n: usize| Connection {
            id: "c".into(),
            path: Some(Path {
                index: 0,
                path_segments: vec![PathSegment::default(); n],
            }),
            ..Default::default()
        };
        assert_eq!(code(&req(segments(MAX_PATH_SEGMENTS), 1)), None);
        assert_eq!(
            code(&req(segments(MAX_PATH_SEGMENTS + 1), 1)),
            Some(Code::InvalidArgument)
        );
        let mut r = req(id(1), 1);
        r.mechanism_preferences[0].parameters = (0..=MAX_MECHANISM_PARAMETERS)
            .map(|i| (i.to_string(), String::new()))
            .collect();
        assert_eq!(code(&r), Some(Code::InvalidArgument));
        r.mechanism_preferences[0].parameters =
            [("inodeURL".to_string(), "x".repeat(MAX_PARAMETER_LEN + 1))].into();
        assert_eq!(code(&r), Some(Code::InvalidArgument));
    }

    #[test]
    fn ip_context_lists_are_capped_policies_routes_together() {
        let route = Route::default();
        let lists: Vec<(&str, IpContext)> = vec![
            (
                "src_ip_addrs",
                IpContext {
                    src_ip_addrs: vec![String::new(); MAX_IP_ADDRESSES + 1],
                    ..Default::default()
                },
            ),
            (
                "dst_routes",
                IpContext {
                    dst_routes: vec![route.clone(); MAX_ROUTES + 1],
                    ..Default::default()
                },
            ),
            (
                "ip_neighbors",
                IpContext {
                    ip_neighbors: vec![Default::default(); MAX_NEIGHBORS + 1],
                    ..Default::default()
                },
            ),
            (
                "excluded_prefixes",
                IpContext {
                    excluded_prefixes: vec![String::new(); MAX_PREFIXES + 1],
                    ..Default::default()
                },
            ),
            (
                "policies[*].routes",
                IpContext {
                    // Each policy within the limit, all of them together over.
                    policies: vec![
                        PolicyRoute {
                            routes: vec![route.clone(); MAX_ROUTES / 2 + 1],
                            ..Default::default()
                        };
                        2
                    ],
                    ..Default::default()
                },
            ),
        ];
        for (field, ip) in lists {
            let e = request(&with_ip(ip)).unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{field}");
            assert!(e.message().contains(field), "{field}: {e:?}");
        }
        let at_limit = IpContext {
            src_routes: vec![route; MAX_ROUTES],
            src_ip_addrs: vec![String::new(); MAX_IP_ADDRESSES],
            ..Default::default()
        };
        assert_eq!(code(&with_ip(at_limit)), None);
    }
}
