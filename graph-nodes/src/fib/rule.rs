//! What a rule of the table is, shared by the writer (`lpm`) and its exact copy (`shadow`): a
//! prefix (its [`mask`]), a value (at most [`MAX_VALUE`]), and why a change fails
//! ([`LpmError`]).

/// The largest value a route can carry (values are 15 bits).
pub const MAX_VALUE: u32 = 0x7ffe;

/// Why a route could not be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LpmError {
    /// Prefix length over 32.
    #[error("prefix length {0} is over 32")]
    BadLength(u8),
    /// Value over 15 bits.
    #[error("route value {0} is over the largest, {MAX_VALUE}")]
    BadValue(u32),
    /// No free tbl8 group for a prefix longer than /24.
    #[error("no free tbl8 group for a prefix longer than /24 (limit {0} in use, or 32768 in this quarter of the address space)")]
    NoGroups(u32),
    /// The node memory is full: the /17s not yet re-encoded keep their old contents for readers
    /// and are retried by the next change or [`Lpm::flush`](super::Lpm::flush).
    #[error(
        "the FIB's node memory is full ({0} lines); retired blocks are reused after the next commit"
    )]
    NoSpace(u32),
    /// The table's memory could not be mapped.
    #[error("cannot map the table: {0}")]
    Memory(String),
}

/// The mask of a prefix length.
#[inline]
pub fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len as u32)
    }
}
