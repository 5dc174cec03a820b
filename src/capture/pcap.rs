//! The classic libpcap file format (what `tcpdump -w` writes and `tshark -r` reads):
//! a 24-byte global header, then per packet a 16-byte record header and the captured bytes.
//! Microsecond timestamps, host byte order (readers detect it from the magic number).

use std::io::{self, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The magic number of microsecond-resolution files.
pub const MAGIC: u32 = 0xa1b2_c3d4;
/// LINKTYPE_ETHERNET: frames start with an Ethernet header.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// LINKTYPE_RAW: packets start with an IPv4 or IPv6 header.
pub const LINKTYPE_RAW: u32 = 101;
/// Bytes of the global header.
pub const FILE_HEADER_LEN: u64 = 24;
/// Bytes of a record header.
pub const RECORD_HEADER_LEN: u64 = 16;

/// Writes the global header: version 2.4, no time zone offset, `snaplen`, `linktype`.
pub fn write_header(out: &mut impl Write, snaplen: u32, linktype: u32) -> io::Result<()> {
    let mut h = [0u8; FILE_HEADER_LEN as usize];
    h[0..4].copy_from_slice(&MAGIC.to_ne_bytes());
    h[4..6].copy_from_slice(&2u16.to_ne_bytes());
    h[6..8].copy_from_slice(&4u16.to_ne_bytes());
    // thiszone (8..12) and sigfigs (12..16) stay 0.
    h[16..20].copy_from_slice(&snaplen.to_ne_bytes());
    h[20..24].copy_from_slice(&linktype.to_ne_bytes());
    out.write_all(&h)
}

/// Writes one packet: captured at `at`, `orig_len` bytes long on the wire, of which `data`
/// was kept.
pub fn write_record(
    out: &mut impl Write,
    at: SystemTime,
    orig_len: u32,
    data: &[u8],
) -> io::Result<()> {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let mut h = [0u8; RECORD_HEADER_LEN as usize];
    h[0..4].copy_from_slice(&(since.as_secs() as u32).to_ne_bytes());
    h[4..8].copy_from_slice(&since.subsec_micros().to_ne_bytes());
    h[8..12].copy_from_slice(&(data.len() as u32).to_ne_bytes());
    h[12..16].copy_from_slice(&orig_len.max(data.len() as u32).to_ne_bytes());
    out.write_all(&h)?;
    out.write_all(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_and_a_record_have_libpcap_layout() {
        let mut out = Vec::new();
        write_header(&mut out, 2048, LINKTYPE_ETHERNET).unwrap();
        let at = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        write_record(&mut out, at, 100, &[0xaa; 60]).unwrap();
        assert_eq!(out.len() as u64, FILE_HEADER_LEN + RECORD_HEADER_LEN + 60);
        let u32_at = |i: usize| u32::from_ne_bytes(out[i..i + 4].try_into().unwrap());
        assert_eq!(u32_at(0), MAGIC);
        assert_eq!(u32_at(16), 2048);
        assert_eq!(u32_at(20), 1);
        assert_eq!(u32_at(24), 1_700_000_000);
        assert_eq!(u32_at(28), 123_456);
        assert_eq!((u32_at(32), u32_at(36)), (60, 100));
    }
}
