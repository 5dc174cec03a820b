//! The IPv4 forwarding table: longest-prefix match to a load-balance index.
//!
//! [`lpm`] is the public face: the writer [`Lpm`] and the table workers read, [`LpmTable`].
//! Inside, `shadow` is the writer's exact DIR-24-8 copy of the rules, `chunk` encodes one /17 of
//! it for readers, `rule` is what a rule is (its prefix mask, the largest value, the errors),
//! `table` is the table workers read (one cache line per /17), and `arena` tracks
//! the memory its blocks and /24 nodes live in.

mod arena;
mod chunk;
pub mod lpm;
mod rule;
mod shadow;
mod table;

pub use lpm::{LinePrefetcher, Lpm, LpmError, LpmTable};
