//! The IPv4 forwarding table: longest-prefix match to a load-balance index.

pub mod lpm;

pub use lpm::{Lpm, LpmError, LpmTable};
