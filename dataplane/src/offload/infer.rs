//! Recognising a partial checksum on a frame that came without a virtio-net header.
//!
//! An AF_XDP socket hands Quiver a frame's bytes and nothing else: a frame a local stack sent
//! with its checksum left for offload (`CHECKSUM_PARTIAL`, a veth's default) arrives with the
//! TCP or UDP checksum field holding only the pseudo-header's sum, folded and not inverted —
//! exactly what [`super::complete_checksum`] expects to finish. [`infer_partial_checksum`]
//! spots that value and returns the work, as a virtio-net header would have said it. A frame
//! whose checksum is already complete holds that value only by a 1-in-65,536 chance, and then
//! completing it writes the same correct checksum again: the inference never breaks a frame.

use super::checksum::fold;
use super::{Gso, Offload};

const ETH_HLEN: usize = 14;

/// The partial checksum `frame` carries, if its TCP or UDP checksum field holds exactly the
/// pseudo-header's sum (IPv4 without fragments, or IPv6 with TCP/UDP as the first next header,
/// behind an Ethernet header and at most one VLAN tag). `None` for anything else, including
/// frames too short for their headers.
pub fn infer_partial_checksum(frame: &[u8]) -> Option<Offload> {
    let mut l3 = ETH_HLEN;
    let mut ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    if ethertype == 0x8100 {
        ethertype = u16::from_be_bytes([*frame.get(16)?, *frame.get(17)?]);
        l3 += 4;
    }
    let ip = frame.get(l3..)?;
    let (proto, l4, l4_len, mut sum) = match ethertype {
        0x0800 => {
            let h = ip.get(..20)?;
            let ihl = usize::from(h[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            // A fragment: the checksum spans fragments.
            if h[6] & 0x3f != 0 || h[7] != 0 || ihl < 20 || total < ihl {
                return None;
            }
            let addrs = super::ones_sum(&h[12..20]);
            (h[9], l3 + ihl, total - ihl, addrs)
        }
        0x86dd => {
            let h = ip.get(..40)?;
            let payload = usize::from(u16::from_be_bytes([h[4], h[5]]));
            (h[6], l3 + 40, payload, super::ones_sum(&h[8..40]))
        }
        _ => return None,
    };
    let csum_offset = match proto {
        6 => 16,
        17 => 6,
        _ => return None,
    };
    let field_at = l4 + csum_offset;
    if field_at + 2 > frame.len() || l4 + l4_len > frame.len() {
        return None;
    }
    sum += u64::from(proto) + l4_len as u64;
    let field = u16::from_be_bytes([frame[field_at], frame[field_at + 1]]);
    (field == fold(sum)).then_some(Offload {
        csum_start: l4 as u16,
        csum_offset: csum_offset as u16,
        gso_size: 0,
        gso: Gso::None,
        bits: Offload::NEEDS_CSUM,
    })
}
