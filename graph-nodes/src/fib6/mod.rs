//! The IPv6 forwarding table: longest-prefix match of /0–/128 routes to a load-balance index.
//!
//! [`lpm6`] is the public face: the writer [`Lpm6`] and the table workers read, [`Lpm6Table`].
//! Inside, `table` is the table workers read (a root word per /16, then nodes of 8 bits
//! compressed into runs), `encode` turns one node's 256 entries into what workers read,
//! `rule` is what a rule is (its prefix mask, the largest value, the errors), and `arena`
//! tracks the node memory. The contract with readers is the IPv4 table's (`fib::lpm`): changes
//! are shown with atomic stores, each /16 before or after a change, and memory a change
//! unlinked is reused only after [`Lpm6::recycle_retired`].

mod arena;
mod encode;
pub mod lpm6;
mod rule;
mod table;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_reference;

pub use lpm6::{mask, Lpm6, Lpm6Error, Lpm6Prefetcher, Lpm6Table, MAX_VALUE};
