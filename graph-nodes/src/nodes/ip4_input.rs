//! `ip4-input`: checks an IPv4 header before anything trusts it. Every drop names its reason.

use dataplane::buffer::flags;
use dataplane::BufferIndex;
use dataplane::{next_arcs, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::arcs::Arcs;
use super::names;
use crate::state::{ForwardingState, IfIndex};
use crate::wire::{self, Ipv4};

next_arcs! {
    LOOKUP => names::IP4_LOOKUP,
    L3XC => names::IP4_L3XC,
}

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
    /// Chained packets longer than their IPv4 total length, cut once the loop is done.
    trim: Vec<(BufferIndex, u16)>,
}

impl Ip4Input {
    /// A new node.
    pub fn new() -> Self {
        Ip4Input {
            nexts: [Next::DROP; FRAME_SIZE],
            trim: Vec::with_capacity(FRAME_SIZE),
        }
    }
}

impl Default for Ip4Input {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether a source address is 0.0.0.0, 255.255.255.255 or multicast (224.0.0.0/4).
#[inline(always)]
fn bad_source(src: u32) -> bool {
    (src.wrapping_add(1) < 2) | (src >> 28 == 0xe)
}

/// The total length and destination of a header that passes every check: the common case,
/// decided with few branches (the checksum on the header read as five native-order words).
/// `None` when it does not; [`check`] then says why.
#[inline(always)]
fn passes(ip: &Ipv4<&[u8]>, checksum_verified: bool, buffer_total: u32) -> Option<(u16, u32)> {
    // Read first, whatever the fields say: the compiler then takes the fields from these
    // registers instead of loading them again.
    let words = ip.words();
    let total = ip.total_len();
    let fields = ip.is_plain()
        & (total as usize >= wire::IP4_HEADER)
        & (total as u32 <= buffer_total)
        & (ip.frag_offset() != 1)
        & !bad_source(ip.src());
    (fields && (checksum_verified || wire::ip4_words_checksum_ok(&words)))
        .then(|| (total, ip.dst()))
}

/// Checks one header; returns the total length the packet claims.
#[inline]
fn check(ip: &Ipv4<&[u8]>, checksum_verified: bool, buffer_total: u32) -> Result<u16, Drop> {
    if ip.version() != 4 {
        return Err(Drop::BadVersion);
    }
    if ip.ihl() < 5 {
        return Err(Drop::BadIhl);
    }
    if ip.ihl() > 5 {
        return Err(Drop::Options);
    }
    if !checksum_verified && !ip.checksum_ok() {
        return Err(Drop::BadChecksum);
    }
    let total = ip.total_len();
    if (total as usize) < wire::IP4_HEADER {
        return Err(Drop::BadLength);
    }
    if total as u32 > buffer_total {
        return Err(Drop::Truncated);
    }
    if ip.frag_offset() == 1 {
        return Err(Drop::FragmentOffset1);
    }
    if bad_source(ip.src()) {
        return Err(Drop::BadSource);
    }
    Ok(total)
}

impl Node<ForwardingState> for Ip4Input {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP4_INPUT).nexts(NEXTS).errors(&[
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
        let fib = cx.state().fib.prefetcher();
        let state = cx.state();
        // Held in a register: the stores into packets below would otherwise make the compiler
        // reload it for every packet.
        let any_l3xconnect = state.any_l3xconnect;
        let bis = frame.as_slice();
        let n = bis.len();
        let mut arcs = Arcs::new(&mut self.nexts[..n], LOOKUP);
        // No prefetching: the node before touched these buffers a frame ago, and they are
        // still in cache (measured: prefetching cost more than it saved).
        let mut buffers = cx.buffers.view();
        for (i, &bi) in bis.iter().enumerate() {
            let (meta, d) = buffers.meta_and_data_mut(bi);
            let verified = meta.flags & flags::IP4_CHECKSUM_OK != 0;
            let verdict = match Ipv4::new_checked(&*d) {
                Err(_) => Err(Drop::TooShort),
                Ok(ip) => match passes(&ip, verified, meta.total_length()) {
                    Some(good) => Ok(good),
                    None => check(&ip, verified, meta.total_length()).map(|t| (t, ip.dst())),
                },
            };
            let (total, dst) = match verdict {
                Ok(good) => good,
                Err(reason) => {
                    meta.error = base + reason as u16;
                    arcs.set(i, Next::DROP);
                    continue;
                }
            };
            // Start fetching the FIB line now; ip4-lookup finds it in cache.
            fib.prefetch(dst);
            meta.flags |= flags::IP4_CHECKSUM_OK | flags::L3_VALID;
            meta.l3_offset = meta.data_offset();
            // L3 cross-connected interfaces bypass the FIB (one branch while there are none).
            if any_l3xconnect && state.l3xconnect(IfIndex::new(meta.rx_interface)).is_some() {
                arcs.set(i, L3XC);
            }
            // Trim Ethernet padding. A chain has none, but may carry anything after the IPv4
            // packet (fuzz: a 2,110-byte memif frame holding a 48-byte packet left a
            // 1,500-byte-MTU port whole): cut after the loop.
            if meta.next().is_none() {
                if (total as usize) < d.len() {
                    buffers.set_length(bi, total);
                }
            } else if u32::from(total) < meta.total_length() {
                self.trim.push((bi, total));
            }
        }
        for (bi, total) in self.trim.drain(..) {
            cx.buffers.truncate(bi, u32::from(total));
        }
        arcs.enqueue(cx, frame);
        n
    }
}
