//! `ip4-input`: checks an IPv4 header before anything trusts it. Every drop names its reason.

use dataplane::buffer::flags;
use dataplane::{Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::names;
use crate::state::ForwardingState;
use crate::wire::{self, be16, be32, ip4};

const LOOKUP: Next = Next::declared(0);

/// Drop reasons, in the order of the node's errors.
#[derive(Clone, Copy)]
#[repr(u16)]
enum Drop {
    TooShort,
    BadVersion,
    BadIhl,
    Options,
    BadChecksum,
    BadLength,
    Truncated,
    FragmentOffset1,
    BadSource,
}

/// The `ip4-input` node.
pub struct Ip4Input {
    nexts: [Next; FRAME_SIZE],
}

impl Ip4Input {
    /// A new node.
    pub fn new() -> Self {
        Ip4Input {
            nexts: [Next::DROP; FRAME_SIZE],
        }
    }
}

impl Default for Ip4Input {
    fn default() -> Self {
        Self::new()
    }
}

/// Checks one header; returns the total length the packet claims.
#[inline(always)]
fn check(d: &[u8], checksum_verified: bool, buffer_total: u32) -> Result<u16, Drop> {
    if d.len() < wire::IP4_HEADER {
        return Err(Drop::TooShort);
    }
    let ver_ihl = d[ip4::VER_IHL];
    if ver_ihl >> 4 != 4 {
        return Err(Drop::BadVersion);
    }
    let ihl = ver_ihl & 0xf;
    if ihl < 5 {
        return Err(Drop::BadIhl);
    }
    if ihl > 5 {
        return Err(Drop::Options);
    }
    if !checksum_verified && !wire::ip4_header_checksum_ok(d) {
        return Err(Drop::BadChecksum);
    }
    let total = be16(d, ip4::TOTAL_LEN);
    if (total as usize) < wire::IP4_HEADER {
        return Err(Drop::BadLength);
    }
    if total as u32 > buffer_total {
        return Err(Drop::Truncated);
    }
    if be16(d, ip4::FRAG) & ip4::OFFSET_MASK == 1 {
        return Err(Drop::FragmentOffset1);
    }
    let src = be32(d, ip4::SRC);
    if src == 0 || src == u32::MAX || src >> 28 == 0xe {
        return Err(Drop::BadSource);
    }
    Ok(total)
}

impl Node<ForwardingState> for Ip4Input {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP4_INPUT)
            .nexts(&[names::IP4_LOOKUP])
            .errors(&[
                ("too-short", "shorter than an IPv4 header"),
                ("bad-version", "IP version is not 4"),
                ("bad-ihl", "header length below 5 words"),
                ("options", "IPv4 options are not handled"),
                ("bad-checksum", "header checksum is wrong"),
                ("bad-length", "total length below the header length"),
                ("truncated", "total length beyond the received bytes"),
                (
                    "fragment-offset-1",
                    "fragment offset of 1 (RFC 1858 overlap attack)",
                ),
                (
                    "bad-source",
                    "source is 0.0.0.0, 255.255.255.255 or multicast",
                ),
            ])
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let base = cx.error_id(0);
        let fib = &cx.state().fib;
        let bis = frame.as_slice();
        for (i, &bi) in bis.iter().enumerate() {
            if let Some(&ahead) = bis.get(i + 4) {
                cx.buffers.prefetch_buffer(ahead);
            }
            let (meta, d) = cx.buffers.meta_and_data_mut(bi);
            let verified = meta.flags & flags::IP4_CHECKSUM_OK != 0;
            match check(d, verified, meta.total_length()) {
                Ok(total) => {
                    // Start fetching the FIB entry now; ip4-lookup finds it in cache.
                    fib.prefetch(be32(d, ip4::DST));
                    self.nexts[i] = LOOKUP;
                    meta.flags |= flags::IP4_CHECKSUM_OK | flags::L3_VALID;
                    meta.l3_offset = meta.data_offset();
                    // Trim Ethernet padding (single-buffer packets; chains carry no padding).
                    if meta.next().is_none() && (total as usize) < d.len() {
                        cx.buffers.set_length(bi, total);
                    }
                }
                Err(reason) => {
                    meta.error = base + reason as u16;
                    self.nexts[i] = Next::DROP;
                }
            }
        }
        cx.enqueue_to_nexts(&self.nexts[..bis.len()], bis);
        bis.len()
    }
}
