//! IPv4 ICMP echo packets, built and checked by hand.

/// The Internet checksum of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from(c[0]) << 8
        };
        sum += u32::from(w);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An ICMP echo (request: type 8, reply: type 0) from `src` to `dst`.
pub fn echo(kind: u8, src: [u8; 4], dst: [u8; 4], id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let total = 20 + 8 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[6] = 0x40;
    p[8] = 64;
    p[9] = 1;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20] = kind;
    p[24..26].copy_from_slice(&id.to_be_bytes());
    p[26..28].copy_from_slice(&seq.to_be_bytes());
    p[28..].copy_from_slice(payload);
    let c = checksum(&p[20..]);
    p[22..24].copy_from_slice(&c.to_be_bytes());
    p
}

/// An ICMP echo message, parsed.
#[derive(Debug, PartialEq, Eq)]
pub struct Echo {
    /// 8 request, 0 reply.
    pub kind: u8,
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Identifier.
    pub id: u16,
    /// Sequence number.
    pub seq: u16,
    /// Data.
    pub payload: Vec<u8>,
}

/// Parses an IPv4 ICMP echo with valid checksums, or `None`.
pub fn parse_echo(p: &[u8]) -> Option<Echo> {
    if p.len() < 28 || p[0] != 0x45 || p[9] != 1 || checksum(&p[..20]) != 0 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    if total != p.len() || checksum(&p[20..]) != 0 || !matches!(p[20], 0 | 8) {
        return None;
    }
    Some(Echo {
        kind: p[20],
        src: p[12..16].try_into().ok()?,
        dst: p[16..20].try_into().ok()?,
        id: u16::from_be_bytes([p[24], p[25]]),
        seq: u16::from_be_bytes([p[26], p[27]]),
        payload: p[28..].to_vec(),
    })
}
