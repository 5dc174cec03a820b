//! Typed indices into the forwarding tables: [`IfIndex`] (interfaces) and [`AdjIndex`]
//! (adjacencies), so that one cannot be passed where the other is meant.
//!
//! Both are a `u32` at run time (`repr(transparent)`, accessors `#[inline(always)]`), so the
//! data path pays nothing for them. The engine's buffer metadata (`rx_interface`,
//! `tx_interface`, `adjacency` in `dataplane::buffer::BufferMeta`) stays `u32`, as `dataplane`
//! knows nothing of ours: nodes convert where they read and write it, which is free.

use dataplane::index_type;

index_type! {
    /// An interface's index (like VPP's sw_if_index): its slot in
    /// [`ForwardingState::interfaces`](crate::ForwardingState::interfaces) and the tables kept
    /// per interface.
    IfIndex
}

index_type! {
    /// An adjacency's index: its slot in
    /// [`ForwardingState::adjacencies`](crate::ForwardingState::adjacencies), what load-balance
    /// buckets and L3 cross-connects hold and `ip4-rewrite` reads.
    AdjIndex
}

/// A routing table's number (a VRF; the default table is 0). Every interface is in one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TableId(pub u16);

impl TableId {
    /// The table every interface starts in.
    pub const DEFAULT: TableId = TableId(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_is_its_u32() {
        assert_eq!(std::mem::size_of::<IfIndex>(), 4);
        assert_eq!(std::mem::size_of::<Option<AdjIndex>>(), 8);
        let i = IfIndex::new(7);
        assert_eq!(
            (i.get(), i.as_usize(), i.to_string()),
            (7, 7, "7".to_string())
        );
        assert!(IfIndex::NONE.is_none() && !i.is_none());
        assert!(AdjIndex::new(1) < AdjIndex::new(2));
    }
}
