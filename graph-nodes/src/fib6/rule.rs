//! What a rule of the IPv6 table is, shared by the writer and its tests: a prefix (its
//! [`mask`]), a value (at most [`MAX_VALUE`], as in the IPv4 table), and why a change fails
//! ([`Lpm6Error`]).

pub use crate::fib::lpm::MAX_VALUE;

/// Why a route could not be added or a change shown to readers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Lpm6Error {
    /// Prefix length over 128.
    #[error("prefix length {0} is over 128")]
    BadLength(u8),
    /// Value over 15 bits.
    #[error("route value {0} is over the largest, {MAX_VALUE}")]
    BadValue(u32),
    /// The node memory is full: the changes not yet shown stay recorded, readers keep the old
    /// contents of the /16s they touch, and the next change or [`Lpm6::flush`](super::Lpm6::flush)
    /// tries again (after [`Lpm6::recycle_retired`](super::Lpm6::recycle_retired) has freed what
    /// earlier changes unlinked).
    #[error("the IPv6 FIB's node memory is full ({0} bytes); retired nodes are reused after the next commit")]
    NoSpace(u64),
    /// The table's memory could not be mapped.
    #[error("cannot map the IPv6 table: {0}")]
    Memory(String),
}

/// The mask of an IPv6 prefix length (0..=128; longer lengths give the full mask).
#[inline]
pub fn mask(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len.min(128) as u32)
    }
}
