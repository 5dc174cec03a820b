//! SPIFFE IDs (`spiffe://<trust domain>/<path>`), checked as the SPIFFE ID specification says:
//! lower-case scheme and trust domain, no port, user info, query or fragment, no empty, `.` or
//! `..` path segment, no trailing slash.

use std::fmt;
use std::str::FromStr;

/// The scheme every SPIFFE ID starts with.
const SCHEME: &str = "spiffe://";
/// The longest SPIFFE ID accepted (the specification's limit for URIs in SVIDs).
const MAX_LEN: usize = 2048;

/// A valid SPIFFE ID.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpiffeId {
    id: String,
    /// Where the trust domain ends (the path, possibly empty, follows).
    td_end: usize,
}

/// Why a string is not a SPIFFE ID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a SPIFFE ID: {reason}")]
pub struct SpiffeIdError {
    input: String,
    reason: &'static str,
}

impl SpiffeId {
    /// Parses and checks `s`.
    pub fn parse(s: &str) -> Result<Self, SpiffeIdError> {
        let fail = |reason| SpiffeIdError {
            input: s.chars().take(256).collect(),
            reason,
        };
        if s.len() > MAX_LEN {
            return Err(fail("longer than 2048 bytes"));
        }
        let rest = s
            .strip_prefix(SCHEME)
            .ok_or_else(|| fail("it does not start with spiffe://"))?;
        let td_len = rest.find('/').unwrap_or(rest.len());
        let (td, path) = rest.split_at(td_len);
        if td.is_empty() {
            return Err(fail("the trust domain is empty"));
        }
        if !td
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b))
        {
            return Err(fail(
                "the trust domain may only hold a-z, 0-9, '-', '.' and '_'",
            ));
        }
        if !path.is_empty() {
            for segment in path[1..].split('/') {
                match segment {
                    "" => return Err(fail("the path has an empty segment or a trailing slash")),
                    "." | ".." => return Err(fail("the path has a '.' or '..' segment")),
                    _ => {}
                }
                if !segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
                {
                    return Err(fail(
                        "the path may only hold a-z, A-Z, 0-9, '-', '.', '_' and '/'",
                    ));
                }
            }
        }
        Ok(Self {
            id: s.to_string(),
            td_end: SCHEME.len() + td_len,
        })
    }

    /// The whole ID, `spiffe://example.org/ns/x/sa/y`.
    pub fn as_str(&self) -> &str {
        &self.id
    }

    /// The trust domain's name, `example.org`.
    pub fn trust_domain(&self) -> &str {
        &self.id[SCHEME.len()..self.td_end]
    }

    /// The path, `/ns/x/sa/y` (empty for a trust domain's own ID).
    pub fn path(&self) -> &str {
        &self.id[self.td_end..]
    }
}

/// The trust domain named by a bundle key of the Workload API: the trust domain's SPIFFE ID
/// (`spiffe://example.org`) or, leniently, its bare name.
pub(crate) fn trust_domain_of_key(key: &str) -> Result<String, SpiffeIdError> {
    let id = if key.starts_with(SCHEME) {
        SpiffeId::parse(key)?
    } else {
        SpiffeId::parse(&format!("{SCHEME}{key}"))?
    };
    Ok(id.trust_domain().to_string())
}

impl FromStr for SpiffeId {
    type Err = SpiffeIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for SpiffeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

impl fmt::Debug for SpiffeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpiffeId({})", self.id)
    }
}

impl AsRef<str> for SpiffeId {
    fn as_ref(&self) -> &str {
        &self.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_ids_split_into_trust_domain_and_path() {
        let id = SpiffeId::parse("spiffe://example.org/ns/nsm-system/sa/forwarder").unwrap();
        assert_eq!(id.trust_domain(), "example.org");
        assert_eq!(id.path(), "/ns/nsm-system/sa/forwarder");
        let td = SpiffeId::parse("spiffe://cluster.local").unwrap();
        assert_eq!(td.trust_domain(), "cluster.local");
        assert_eq!(td.path(), "");
        assert_eq!(trust_domain_of_key("spiffe://a.b").unwrap(), "a.b");
        assert_eq!(trust_domain_of_key("a.b").unwrap(), "a.b");
    }

    #[test]
    fn invalid_ids_are_refused() {
        for bad in [
            "",
            "spiffe://",
            "spiffe:///path",
            "SPIFFE://example.org/x",
            "spiffe://Example.org/x",
            "spiffe://example.org:8080/x",
            "spiffe://user@example.org/x",
            "spiffe://example.org/",
            "spiffe://example.org//x",
            "spiffe://example.org/./x",
            "spiffe://example.org/../x",
            "spiffe://example.org/x?q=1",
            "spiffe://example.org/x#f",
            "https://example.org/x",
        ] {
            assert!(SpiffeId::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
