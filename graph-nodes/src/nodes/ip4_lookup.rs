//! `ip4-lookup`: longest-prefix match on the destination, then ECMP by flow hash. The whole
//! frame's destinations are looked up together so that table misses overlap. With several
//! routing tables (VRFs), each packet is looked up in its arrival interface's table (a frame
//! from one table still in one batch); with only the default table that costs one test per
//! frame. A next-table route's packets are looked up once more, in the table it names (off
//! the common path: such a route is not a single rewrite path); a second next-table route
//! drops the packet as `next-table-loop`.

use dataplane::buffer::{flags, BufferMeta, BufferView};
use dataplane::BufferIndex;
use dataplane::{next_arcs, node_errors, Context, Frame, Next, Node, NodeSpec, FRAME_SIZE};

use super::arcs::Arcs;
use super::names;
use crate::state::{AdjIndex, AdjacencyKind, ForwardingState, SinglePath};
use crate::wire::Ipv4;

next_arcs! {
    REWRITE => names::IP4_REWRITE,
    LOCAL => names::IP4_LOCAL,
    ARP => names::IP4_ARP,
}

node_errors! {
    NO_ROUTE => ("no-route", "no route to the destination"),
    BLACKHOLE => ("blackhole", "the route drops (a blackhole)"),
    BAD_OBJECT => ("bad-object", "the route points at a missing object (a bug)"),
    NEXT_TABLE_LOOP => ("next-table-loop", "a second next-table route (one extra lookup per packet)"),
}

/// The `ip4-lookup` node.
pub struct Ip4Lookup {
    nexts: [Next; FRAME_SIZE],
    dsts: [u32; FRAME_SIZE],
    results: [u32; FRAME_SIZE],
}

impl Ip4Lookup {
    /// A new node.
    pub fn new() -> Self {
        Ip4Lookup {
            nexts: [Next::DROP; FRAME_SIZE],
            dsts: [0; FRAME_SIZE],
            results: [0; FRAME_SIZE],
        }
    }
}

impl Default for Ip4Lookup {
    fn default() -> Self {
        Self::new()
    }
}

impl Node<ForwardingState> for Ip4Lookup {
    fn spec(&self) -> NodeSpec {
        NodeSpec::internal(names::IP4_LOOKUP)
            .nexts(NEXTS)
            .errors(ERRORS)
    }

    fn process(&mut self, cx: &mut Context<'_, ForwardingState>, frame: &mut Frame) -> usize {
        let state = cx.state();
        let errors = [
            cx.error_id(NO_ROUTE),
            cx.error_id(BLACKHOLE),
            cx.error_id(BAD_OBJECT),
            cx.error_id(NEXT_TABLE_LOOP),
        ];
        let bis = frame.as_slice();
        let n = bis.len();
        let (dsts, results) = (&mut self.dsts[..n], &mut self.results[..n]);
        let mut buffers = cx.buffers.view();
        for (&bi, dst) in bis.iter().zip(dsts.iter_mut()) {
            // ip4-input guaranteed 20 bytes; be defensive for packets that skipped it.
            *dst = Ipv4::new_checked(buffers.meta_and_data_mut(bi).1).map_or(0, |ip| ip.dst());
        }
        // ip4-input (or vxlan4-encap) started fetching each line into the second-level cache a
        // node ago; the batch brings them to the first level a fixed distance ahead of its
        // reads (measured: better than prefetching the whole frame's lines in the loop above).
        if state.multi_table {
            lookup_in_tables(state, &mut buffers, bis, dsts, results);
        } else {
            state.fib.lookup_batch(dsts, results);
        }
        let mut arcs = Arcs::new(&mut self.nexts[..n], REWRITE);
        // Held in registers: the stores into packet metadata below would otherwise make the
        // compiler reload the vector's address and length for every packet.
        let single_paths: &[SinglePath] = &state.single_paths;
        for (i, (&bi, &lb)) in bis.iter().zip(results.iter()).enumerate() {
            // Most routes have one path to a rewrite adjacency: one load and one comparison.
            let path = single_paths.get(lb as usize).copied();
            if let Some(adj) = path.and_then(SinglePath::rewrite) {
                buffers.meta_mut(bi).adjacency = adj.get();
                continue;
            }
            arcs.set(i, other(state, &mut buffers, bi, path, lb, &errors));
        }
        arcs.enqueue(cx, frame);
        n
    }
}

/// Looks each of `dsts` up in the table of its packet's arrival interface into `results`
/// (`u32::MAX`: no route, or a table gone): a batch when the frame is one table's, as it
/// usually is.
#[inline(never)]
fn lookup_in_tables(
    state: &ForwardingState,
    buffers: &mut BufferView<'_>,
    bis: &[BufferIndex],
    dsts: &[u32],
    results: &mut [u32],
) {
    let table = |buffers: &mut BufferView<'_>, bi| {
        let rx = buffers.meta_mut(bi).rx_interface;
        state.rx_table.get(rx as usize).copied().unwrap_or(0)
    };
    let Some(&first) = bis.first() else { return };
    let t0 = table(buffers, first);
    if bis.iter().all(|&bi| table(buffers, bi) == t0) {
        match state.fibs.get(usize::from(t0)).and_then(Option::as_deref) {
            Some(fib) => fib.lookup_batch(dsts, results),
            None => results.fill(u32::MAX),
        }
        return;
    }
    for ((&bi, &dst), r) in bis.iter().zip(dsts).zip(results.iter_mut()) {
        let rx = buffers.meta_mut(bi).rx_interface;
        *r = state
            .fib_of(rx)
            .and_then(|fib| fib.lookup(dst))
            .unwrap_or(u32::MAX);
    }
}

/// Where a packet whose route is not a single rewrite path goes; sets its adjacency or error.
#[inline(never)]
fn other(
    state: &ForwardingState,
    buffers: &mut BufferView<'_>,
    bi: BufferIndex,
    path: Option<SinglePath>,
    lb: u32,
    errors: &[u16; 4],
) -> Next {
    let (meta, d) = buffers.meta_and_data_mut(bi);
    let verdict = match path.and_then(SinglePath::get) {
        Some((adj, kind)) => route(adj, kind),
        None => general(state, meta, d, lb),
    };
    // A next-table route: looked up once more, where a next-table route is final.
    let verdict = match verdict {
        Err(NEXT_TABLE_LOOP) => again(state, meta, d, lb),
        v => v,
    };
    match verdict {
        Ok((to, adj)) => {
            meta.adjacency = adj.get();
            to
        }
        Err(code) => {
            meta.error = errors[code as usize];
            Next::DROP
        }
    }
}

/// Where a packet for adjacency `adj` of kind `kind` goes.
#[inline(always)]
fn route(adj: AdjIndex, kind: AdjacencyKind) -> Result<(Next, AdjIndex), u16> {
    let next = match kind {
        AdjacencyKind::Rewrite => REWRITE,
        AdjacencyKind::Local => LOCAL,
        AdjacencyKind::Arp | AdjacencyKind::Glean => ARP,
        AdjacencyKind::Drop => return Err(BLACKHOLE),
        // Looked up again by the caller the first time, dropped the second.
        AdjacencyKind::NextTable => return Err(NEXT_TABLE_LOOP),
    };
    Ok((next, adj))
}

/// The packet's way in the table next-table route `lb` names: its second and last lookup.
#[inline(never)]
fn again(
    state: &ForwardingState,
    meta: &BufferMeta,
    d: &[u8],
    lb: u32,
) -> Result<(Next, AdjIndex), u16> {
    let adj = state
        .load_balances
        .get(lb as usize)
        .and_then(|lb| lb.buckets.first())
        .and_then(|a| state.adjacencies.get(a.as_usize()))
        .ok_or(BAD_OBJECT)?;
    let dst = Ipv4::new_checked(d).map_or(0, |ip| ip.dst());
    let lb = state
        .fibs
        .get(usize::from(adj.next_table))
        .and_then(Option::as_deref)
        .and_then(|fib| fib.lookup(dst))
        .ok_or(NO_ROUTE)?;
    match state.single_paths.get(lb as usize).and_then(|p| p.get()) {
        Some((adj, kind)) => route(adj, kind),
        None => general(state, meta, d, lb),
    }
}

/// The general way from load-balance object `lb` to an adjacency: ECMP by flow hash.
#[inline]
fn general(
    state: &ForwardingState,
    meta: &BufferMeta,
    d: &[u8],
    lb: u32,
) -> Result<(Next, AdjIndex), u16> {
    let lb = state.load_balances.get(lb as usize).ok_or(NO_ROUTE)?;
    let adj_index = if lb.buckets.len() == 1 {
        lb.buckets[0]
    } else {
        let h = if meta.flags & flags::FLOW_HASH_VALID != 0 {
            meta.flow_hash
        } else {
            Ipv4::new_checked(d).map_or(0, |ip| ip.flow_hash())
        };
        lb.buckets[h as usize % lb.buckets.len()]
    };
    let adj = state
        .adjacencies
        .get(adj_index.as_usize())
        .ok_or(BAD_OBJECT)?;
    route(adj_index, adj.kind)
}
