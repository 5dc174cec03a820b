//! [`InodeKey`]: a file's identity, as the `inode://<dev>/<ino>` URLs of NSM's grpcfd name the
//! files passed beside gRPC.

use std::fmt;
use std::os::fd::AsFd;

/// A file's identity, as an `inode://<dev>/<ino>` URL says it (both decimal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InodeKey {
    /// `st_dev` of the file.
    pub dev: u64,
    /// `st_ino` of the file.
    pub ino: u64,
}

impl InodeKey {
    /// The identity of the file `fd` refers to.
    pub fn of(fd: impl AsFd) -> std::io::Result<InodeKey> {
        let st = nix::sys::stat::fstat(fd).map_err(std::io::Error::from)?;
        Ok(InodeKey {
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }

    /// Parses `inode://<dev>/<ino>`; `None` when `url` is not one (any other scheme, or a
    /// malformed inode URL).
    pub fn parse(url: &str) -> Option<InodeKey> {
        let rest = url.strip_prefix("inode://")?;
        let (dev, ino) = rest.split_once('/')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(dev) || !digits(ino) {
            return None;
        }
        Some(InodeKey {
            dev: dev.parse().ok()?,
            ino: ino.parse().ok()?,
        })
    }
}

impl fmt::Display for InodeKey {
    /// `inode://<dev>/<ino>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "inode://{}/{}", self.dev, self.ino)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_urls_round_trip_and_junk_is_not_one() {
        let k = InodeKey {
            dev: 4,
            ino: 4026531992,
        };
        assert_eq!(k.to_string(), "inode://4/4026531992");
        assert_eq!(InodeKey::parse("inode://4/4026531992"), Some(k));
        for bad in [
            "file:///proc/self/ns/net",
            "inode://",
            "inode://4",
            "inode://4/",
            "inode:///5",
            "inode://a/5",
            "inode://4/5/6",
            "inode://-4/5",
            "inode://99999999999999999999999/5",
        ] {
            assert_eq!(InodeKey::parse(bad), None, "{bad}");
        }
    }
}
