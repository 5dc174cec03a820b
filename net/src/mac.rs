//! MAC addresses: one way to read them and one way to write them, for every place a person or
//! a peer hands Quiver one (`quiver.toml`, `quiver ctl`, the admin API, NSM's IP context).

/// A MAC address as it lies in a header.
pub type Mac = [u8; 6];

/// The broadcast MAC address.
pub const BROADCAST: Mac = [0xff; 6];

/// A string that is not a MAC address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a MAC address (six hex bytes separated by colons, as aa:bb:cc:dd:ee:ff)")]
pub struct MacError(pub String);

/// Reads a MAC address: six groups of one or two hexadecimal digits (either case) separated by
/// colons, as Linux's `ip` and Go's `net.ParseMAC` write them (`02:fe:00:00:00:01`, or
/// `2:fe:0:0:0:1`), with white space around it ignored. Nothing else: no sign, no other
/// separator, no seventh group.
pub fn parse(s: &str) -> Result<Mac, MacError> {
    let bad = || MacError(s.to_string());
    let mut mac = [0u8; 6];
    let mut groups = s.trim().split(':');
    for byte in &mut mac {
        let g = groups.next().ok_or_else(bad)?;
        if g.is_empty() || g.len() > 2 || !g.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        *byte = u8::from_str_radix(g, 16).map_err(|_| bad())?;
    }
    if groups.next().is_some() {
        return Err(bad());
    }
    Ok(mac)
}

/// Writes `m` as `aa:bb:cc:dd:ee:ff` (lower case, two digits a byte).
pub fn format(m: &Mac) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_reads_what_people_and_peers_write() {
        let m = [0x02, 0xfe, 0, 0, 0, 0x01];
        assert_eq!(parse("02:fe:00:00:00:01"), Ok(m));
        assert_eq!(parse("02:FE:00:00:00:01"), Ok(m));
        assert_eq!(parse(" 2:fe:0:0:0:1 "), Ok(m));
        assert_eq!(parse("a:b:c:d:e:f"), Ok([0xa, 0xb, 0xc, 0xd, 0xe, 0xf]));
        for bad in [
            "",
            "02:fe:00:00:00",
            "02:fe:00:00:00:01:02",
            "02:fe:00:00:00:",
            "02:fe:00:00:00:001",
            "+2:fe:00:00:00:01",
            "02-fe-00-00-00-01",
            "02:fe:00:00:00:0g",
            "02:fe::00:00:01",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(format(&m), "02:fe:00:00:00:01");
        assert_eq!(parse(&format(&m)), Ok(m));
    }
}
