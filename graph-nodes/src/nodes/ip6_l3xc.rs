//! `ip6-l3xc`: IPv6 through an L3 cross-connect. Every IPv6 packet received on an L3
//! cross-connected interface leaves by the cross-connect's IPv6 adjacency with its hop limit
//! decremented, as NSM's IP payload needs: the peer interface toward the peer's IPv6 next hop
//! (resolved by neighbour discovery, `ip6-nd-resolve`), or, when the peer has an IPv4 next hop
//! only, toward that (the same station, resolved by ARP). What an L3 cross-connect may not
//! carry is dropped and counted — link-local and multicast traffic (neighbour discovery stays
//! on its link; the namespaces get static neighbours instead), a hop limit that would reach
//! zero, a packet longer than the next hop's MTU.

use dataplane::BufferIndex;
use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::arcs::Arcs;
use super::names;
use crate::state::{AdjIndex, Adjacency, AdjacencyKind, ForwardingState, IfIndex};
use crate::wire::{self, ipv6, Ethernet, Ipv6};

next_arcs! {
    OUTPUT => names::INTERFACE_OUTPUT,
    ARP => names::IP4_ARP,
    ND => names::IP6_ND_RESOLVE,
}

node_errors! {
    NO_L3XC => ("no-l3xc", "the receiving interface is no longer L3 cross-connected"),
    MALFORMED => ("malformed", "not IPv6, or shorter than its header or payload length"),
    LINK_LOCAL => ("link-local", "link-local or multicast: not forwarded off its link"),
    HOP_LIMIT => ("hop-limit-exceeded", "the hop limit would reach zero"),
    MTU_EXCEEDED => ("mtu-exceeded", "longer than the next hop's MTU"),
    NO_HEADROOM => ("no-headroom", "no headroom for the L2 header"),
    NOT_READY => ("not-ready", "the cross-connect's adjacency is not a next hop (a bug)"),
}

/// The `ip6-l3xc` node.
pub struct Ip6L3xc {
    nexts: [Next; FRAME_SIZE],
    /// Chained packets longer than their IPv6 length, with the length to cut them to once
    /// the loop is done.
    trim: Vec<(BufferIndex, u32)>,
}

impl Ip6L3xc {
    /// A new node.
    pub fn new() -> Self {
        Ip6L3xc {
            nexts: [OUTPUT; FRAME_SIZE],
            trim: Vec::with_capacity(FRAME_SIZE),
        }
    }
}

impl Default for Ip6L3xc {
    fn default() -> Self {
        Self::new()
    }
}

/// Checks one packet (IPv6 header at `d[0]`, `total` bytes in all) and decrements its hop
/// limit; the length the packet really has (Ethernet may have padded it).
#[inline]
fn check(d: &mut [u8], total: u32, mtu: u16) -> Result<u32, u16> {
    let mut ip = Ipv6::new_checked(d).map_err(|_| MALFORMED)?;
    let len = ip.total_len();
    if ip.version() != 6 || len > total {
        return Err(MALFORMED);
    }
    if ipv6::is_link_scope(&ip.src()) || ipv6::is_link_scope(&ip.dst()) {
        return Err(LINK_LOCAL);
    }
    let hops = ip.hop_limit();
    if hops <= 1 {
        return Err(HOP_LIMIT);
    }
    if len > u32::from(mtu) {
        return Err(MTU_EXCEEDED);
    }
    ip.set_hop_limit(hops - 1);
    Ok(len)
}

impl Node<ForwardingState> for Ip6L3xc {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP6_L3XC)
            .nexts(NEXTS)
            .errors(ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let state = cx.state();
        let base = cx.error_id(0);
        let bis = frame.as_slice();
        let n = bis.len();
        let mut arcs = Arcs::new(&mut self.nexts[..n], OUTPUT);
        let mut buffers = cx.buffers.view();
        // Packets of a frame usually come from one interface: resolve it once per run.
        let mut last_rx = u32::MAX;
        let mut adj: Result<(AdjIndex, &Adjacency), u16> = Err(NO_L3XC);
        for (i, &bi) in bis.iter().enumerate() {
            let (meta, d) = buffers.meta_and_data_mut(bi);
            if meta.rx_interface != last_rx {
                last_rx = meta.rx_interface;
                adj = match state.l3xconnect(IfIndex::new(last_rx)).map(|x| x.v6) {
                    None => Err(NO_L3XC),
                    Some(a) => match state.adjacencies.get(a.as_usize()) {
                        Some(x)
                            if matches!(x.kind, AdjacencyKind::Rewrite | AdjacencyKind::Arp) =>
                        {
                            Ok((a, x))
                        }
                        _ => Err(NOT_READY),
                    },
                };
            }
            let checked = adj.and_then(|(index, a)| {
                let len = check(d, meta.total_length(), a.mtu)?;
                meta.adjacency = index.get();
                Ok((a, len, len < meta.total_length(), meta.next().is_some()))
            });
            let trim = &mut self.trim;
            let verdict = checked.and_then(|(a, len, longer, chained)| {
                if longer && !chained {
                    // Ethernet padding after the packet.
                    buffers.set_length(bi, len as u16);
                }
                // A chain has no padding but may carry anything after the packet (fuzz: the
                // same fault ip4-input had): cut after the loop, headers included.
                let cut = longer && chained;
                if a.kind == AdjacencyKind::Arp {
                    if cut {
                        trim.push((bi, len));
                    }
                    // The IPv6 next hop's by neighbour discovery; else the IPv4 one's (the
                    // same station) by ARP.
                    return Ok(if a.next_hop6 != [0; 16] { ND } else { ARP });
                }
                let (meta, headroom, _) = buffers.meta_headroom_and_data_mut(bi);
                let hl = a.header_len as usize;
                if headroom.len() < hl || !meta.retreat(hl as u16) {
                    return Err(NO_HEADROOM);
                }
                let at = headroom.len() - hl;
                let h = &mut headroom[at..];
                h.copy_from_slice(&a.header[..hl]);
                // The adjacency's header may be the IPv4 next hop's (an interface without
                // one has no EtherType to set).
                if let Ok(mut eth) = Ethernet::new_checked(h) {
                    eth.set_payload_ethertype(wire::ETHERTYPE_IP6);
                }
                meta.tx_interface = a.tx.get();
                meta.l2_offset = meta.data_offset();
                if cut {
                    trim.push((bi, len + hl as u32));
                }
                Ok(OUTPUT)
            });
            match verdict {
                Ok(arc) => arcs.set(i, arc),
                Err(code) => {
                    buffers.meta_mut(bi).error = base + code;
                    arcs.set(i, Next::DROP);
                }
            }
        }
        for (bi, len) in self.trim.drain(..) {
            cx.buffers.truncate(bi, len);
        }
        arcs.enqueue(cx, frame);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(src: [u8; 2], dst: [u8; 2], hop: u8, payload: u16) -> Vec<u8> {
        let mut h = vec![0u8; ipv6::HEADER_LEN + payload as usize];
        h[0] = 0x60;
        h[4..6].copy_from_slice(&payload.to_be_bytes());
        h[6] = 17;
        h[7] = hop;
        h[8..10].copy_from_slice(&src);
        h[24..26].copy_from_slice(&dst);
        h
    }

    const G: [u8; 2] = [0x20, 0x01];

    #[test]
    fn packets_are_checked_and_their_hop_limit_decremented() {
        let mut p = header(G, G, 64, 10);
        assert_eq!(check(&mut p, 50, 1500), Ok(50));
        assert_eq!(p[7], 63);
        let mut padded = header(G, G, 64, 6);
        padded.extend_from_slice(&[0; 4]);
        assert_eq!(
            check(&mut padded, 50, 1500),
            Ok(46),
            "padding is not packet"
        );
        assert_eq!(check(&mut header(G, G, 1, 0), 40, 1500), Err(HOP_LIMIT));
        assert_eq!(check(&mut header(G, G, 64, 20), 50, 1500), Err(MALFORMED));
        for (src, dst) in [(G, [0xff, 0x02]), ([0xfe, 0x80], G), (G, [0xfe, 0xbf])] {
            assert_eq!(
                check(&mut header(src, dst, 64, 0), 40, 1500),
                Err(LINK_LOCAL),
                "{src:x?} -> {dst:x?}"
            );
        }
        // fec0::/10 (site-local, deprecated) is not link-local.
        assert!(check(&mut header([0xfe, 0xc0], G, 64, 0), 40, 1500).is_ok());
        assert_eq!(
            check(&mut header(G, G, 64, 1461), 1501, 1500),
            Err(MTU_EXCEEDED)
        );
        let mut v4 = header(G, G, 64, 0);
        v4[0] = 0x45;
        assert_eq!(check(&mut v4, 40, 1500), Err(MALFORMED));
        assert_eq!(check(&mut [0u8; 39], 39, 1500), Err(MALFORMED));
    }
}
