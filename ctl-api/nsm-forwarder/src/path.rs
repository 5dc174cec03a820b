//! Path handling: checking the caller's path, adding (or, on a refresh, reusing) Quiver's own
//! segment after the caller's, the deadline a connection expires at, and the monitor's
//! selector.

use std::time::{Duration, SystemTime};

use prost_types::Timestamp;
use tonic::Status;

use nsm_proto::connection::{Connection, MonitorScopeSelector, Path, PathSegment};

/// Where a Request stands on its path once Quiver's segment is in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The caller's index (restored in the answer).
    pub prev_index: u32,
    /// The caller's connection id (restored in the answer; the key of Quiver's table).
    pub prev_id: String,
    /// Quiver's segment index (`prev_index + 1`).
    pub own_index: u32,
    /// Quiver's segment id: the connection id toward the endpoint.
    pub own_id: String,
    /// When the caller's segment expires: Quiver closes the connection then unless refreshed.
    pub expires: SystemTime,
}

/// Checks the caller's path: a non-empty connection id, a path whose index is in range and
/// whose segment at that index carries the connection's id.
pub fn check(conn: &Connection) -> Result<&Path, Status> {
    if conn.id.is_empty() {
        return Err(Status::invalid_argument("connection.id is empty"));
    }
    let path = conn
        .path
        .as_ref()
        .filter(|p| !p.path_segments.is_empty())
        .ok_or_else(|| Status::invalid_argument("connection.path is missing or empty"))?;
    let index = path.index as usize;
    let Some(prev) = path.path_segments.get(index) else {
        return Err(Status::invalid_argument(format!(
            "connection.path.index {index} is out of range: the path has {} segments",
            path.path_segments.len()
        )));
    };
    if prev.id != conn.id {
        return Err(Status::invalid_argument(format!(
            "connection.path.path_segments[{index}].id {:?} is not connection.id {:?}",
            prev.id, conn.id
        )));
    }
    Ok(path)
}

/// Moves the path to Quiver's segment (index + 1): reuses the segment named `name` that
/// follows the caller's (a refresh; later segments stay, the endpoint reuses its own), or
/// `known_id` (Quiver already has this connection), or a new id; replaces whatever followed
/// otherwise. Quiver's segment expires `lifetime` from `now` and, until the call toward the
/// endpoint is signed, holds the caller's token: with a SPIFFE identity
/// [`super::secure::sign`] replaces both with the token Quiver mints for the endpoint (the
/// caller's own token having been checked and stamped into the caller's segment by
/// [`super::secure::accept`]); in plaintext, where nothing can be minted, the caller's token
/// is what Quiver passes on.
pub fn advance(
    conn: &Connection,
    name: &str,
    known_id: Option<&str>,
    lifetime: Duration,
    now: SystemTime,
) -> Result<(Path, Position), Status> {
    let path = check(conn)?;
    let index = path.index as usize;
    let prev = &path.path_segments[index];
    let mut segments = path.path_segments.clone();
    let reuse = segments
        .get(index + 1)
        .filter(|s| s.name == name && !s.id.is_empty())
        .map(|s| s.id.clone());
    let own_id = match reuse {
        Some(id) => id,
        None => {
            segments.truncate(index + 1);
            segments.push(PathSegment::default());
            known_id.map_or_else(new_id, str::to_string)
        }
    };
    let own = &mut segments[index + 1];
    own.name = name.to_string();
    own.id = own_id.clone();
    own.token.clone_from(&prev.token);
    own.expires = Some(timestamp(now + lifetime));
    let expires = prev
        .expires
        .as_ref()
        .and_then(system_time)
        .unwrap_or(now + lifetime);
    let position = Position {
        prev_index: path.index,
        prev_id: conn.id.clone(),
        own_index: path.index + 1,
        own_id,
        expires,
    };
    Ok((
        Path {
            index: position.own_index,
            path_segments: segments,
        },
        position,
    ))
}

/// A protobuf timestamp of `t`.
pub fn timestamp(t: SystemTime) -> Timestamp {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// The time a protobuf timestamp names (`None` if it is before 1970 or malformed).
pub fn system_time(t: &Timestamp) -> Option<SystemTime> {
    let secs = u64::try_from(t.seconds).ok()?;
    let nanos = u32::try_from(t.nanos).ok().filter(|&n| n < 1_000_000_000)?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

/// A random (version 4) UUID.
pub fn new_id() -> String {
    use std::io::Read;
    let mut b = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_err()
    {
        // No /dev/urandom: fall back to the clock and a counter, still unique per process.
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        b[..8].copy_from_slice(&t.to_le_bytes());
        let n =
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed) ^ u64::from(std::process::id());
        b[8..].copy_from_slice(&n.to_le_bytes());
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn segment_matches(want: &PathSegment, have: &PathSegment) -> bool {
    (want.name.is_empty() || want.name == have.name)
        && (want.id.is_empty() || want.id == have.id)
        && (want.token.is_empty() || want.token == have.token)
}

/// True if `conn` is in the monitor's scope: its network service is one of the selector's
/// (when it names any) and the selector's path segments are a contiguous run of the
/// connection's path (empty fields match anything).
pub fn matches_selector(conn: &Connection, selector: &MonitorScopeSelector) -> bool {
    if !selector.network_services.is_empty()
        && !selector.network_services.contains(&conn.network_service)
    {
        return false;
    }
    let want = &selector.path_segments;
    if want.is_empty() {
        return true;
    }
    let have = conn.path.as_ref().map_or(&[][..], |p| &p.path_segments[..]);
    have.windows(want.len())
        .any(|w| w.iter().zip(want).all(|(h, s)| segment_matches(s, h)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn seg(name: &str, id: &str) -> PathSegment {
        PathSegment {
            name: name.into(),
            id: id.into(),
            ..Default::default()
        }
    }

    fn conn(id: &str, index: u32, segs: Vec<PathSegment>) -> Connection {
        Connection {
            id: id.into(),
            path: Some(Path {
                index,
                path_segments: segs,
            }),
            ..Default::default()
        }
    }

    const LIFE: Duration = Duration::from_secs(600);

    #[test]
    fn new_segment_is_appended_after_the_callers() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut c = conn(
            "b",
            1,
            vec![seg("nsc", "a"), seg("nsmgr", "b"), seg("old", "x")],
        );
        c.path.as_mut().unwrap().path_segments[1].token = "tok".into();
        let (p, pos) = advance(&c, "quiver", None, LIFE, now).unwrap();
        assert_eq!(p.index, 2);
        assert_eq!(p.path_segments.len(), 3);
        let own = &p.path_segments[2];
        assert_eq!(own.name, "quiver");
        assert_eq!(own.id, pos.own_id);
        assert_ne!(own.id, "x");
        assert_eq!(own.id.len(), 36);
        assert_eq!(own.token, "tok");
        assert_eq!(own.expires, Some(timestamp(now + LIFE)));
        assert_eq!((pos.prev_index, pos.prev_id.as_str()), (1, "b"));
        // The caller's segment had no expiry: Quiver's lifetime applies.
        assert_eq!(pos.expires, now + LIFE);
    }

    #[test]
    fn refresh_reuses_own_segment_and_keeps_the_rest() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut c = conn(
            "b",
            1,
            vec![
                seg("nsc", "a"),
                seg("nsmgr", "b"),
                seg("quiver", "q"),
                seg("nse", "e"),
            ],
        );
        let deadline = now + Duration::from_secs(30);
        c.path.as_mut().unwrap().path_segments[1].expires = Some(timestamp(deadline));
        let (p, pos) = advance(&c, "quiver", Some("other"), LIFE, now).unwrap();
        assert_eq!(pos.own_id, "q");
        assert_eq!(p.path_segments.len(), 4);
        assert_eq!(p.path_segments[3].id, "e");
        assert_eq!(pos.expires, deadline);
        // Without our segment in the path, the id Quiver knows is reused.
        let c = conn("b", 1, vec![seg("nsc", "a"), seg("nsmgr", "b")]);
        assert_eq!(
            advance(&c, "quiver", Some("k"), LIFE, now)
                .unwrap()
                .1
                .own_id,
            "k"
        );
    }

    #[test]
    fn bad_paths() {
        let code = |c: &Connection| check(c).unwrap_err().code();
        assert_eq!(
            code(&conn("", 0, vec![seg("nsc", "")])),
            Code::InvalidArgument
        );
        assert_eq!(
            code(&Connection {
                id: "a".into(),
                ..Default::default()
            }),
            Code::InvalidArgument
        );
        assert_eq!(code(&conn("a", 0, vec![])), Code::InvalidArgument);
        assert_eq!(
            code(&conn("a", 1, vec![seg("nsc", "a")])),
            Code::InvalidArgument
        );
        assert_eq!(
            code(&conn("a", 0, vec![seg("nsc", "z")])),
            Code::InvalidArgument
        );
        assert!(check(&conn("a", 0, vec![seg("nsc", "a")])).is_ok());
    }

    #[test]
    fn timestamps_round_trip() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123);
        assert_eq!(system_time(&timestamp(t)), Some(t));
        assert_eq!(
            system_time(&Timestamp {
                seconds: -1,
                nanos: 0
            }),
            None
        );
    }

    #[test]
    fn ids_are_uuids_and_differ() {
        let (a, b) = (new_id(), new_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn selectors_match_contiguous_runs() {
        let c = Connection {
            network_service: "ns".into(),
            ..conn(
                "b",
                1,
                vec![seg("nsc", "a"), seg("nsmgr", "b"), seg("quiver", "q")],
            )
        };
        let sel = |segs: Vec<PathSegment>, ns: Vec<&str>| MonitorScopeSelector {
            path_segments: segs,
            network_services: ns.into_iter().map(String::from).collect(),
        };
        assert!(matches_selector(&c, &sel(vec![], vec![])));
        assert!(matches_selector(
            &c,
            &sel(vec![seg("nsmgr", "b"), seg("quiver", "")], vec![])
        ));
        assert!(matches_selector(&c, &sel(vec![seg("", "q")], vec!["ns"])));
        // Not contiguous, wrong order, wrong id, too long, other service.
        assert!(!matches_selector(
            &c,
            &sel(vec![seg("nsc", ""), seg("quiver", "")], vec![])
        ));
        assert!(!matches_selector(
            &c,
            &sel(vec![seg("quiver", ""), seg("nsmgr", "")], vec![])
        ));
        assert!(!matches_selector(
            &c,
            &sel(vec![seg("quiver", "z")], vec![])
        ));
        let long = vec![seg("", ""), seg("", ""), seg("", ""), seg("", "")];
        assert!(!matches_selector(&c, &sel(long, vec![])));
        assert!(!matches_selector(&c, &sel(vec![], vec!["other"])));
    }
}
