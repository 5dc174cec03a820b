//! Declaring a node's next arcs and errors once: [`next_arcs!`](crate::next_arcs) and
//! [`node_errors!`](crate::node_errors) make, from one list, both the constants the node's code
//! uses and the list its [`NodeSpec`](crate::NodeSpec) gives the graph, so the two cannot drift
//! apart (an arc's constant always names the node at its position).
//!
//! ```
//! use dataplane::{next_arcs, node_errors, NodeSpec};
//!
//! next_arcs! {
//!     OUTPUT => "interface-output",
//!     ARP => "ip4-arp",
//! }
//! node_errors! {
//!     TTL_EXPIRED => ("ttl-expired", "TTL would reach zero"),
//!     NO_ROUTE => ("no-route", "no route to the destination"),
//! }
//!
//! let spec = NodeSpec::internal("example").nexts(NEXTS).errors(ERRORS);
//! assert_eq!(spec.next_nodes[ARP.0 as usize - 1], "ip4-arp");
//! assert_eq!(spec.errors[NO_ROUTE as usize].name, "no-route");
//!
//! mod second {
//!     dataplane::next_arcs! { pub(super) LOOKUP => "ip4-lookup" }
//! }
//! assert_eq!(second::NEXTS, ["ip4-lookup"]);
//! assert_eq!(second::LOOKUP, dataplane::Next::declared(0));
//! ```

/// Declares a node's next arcs in order: a [`Next`](crate::Next) constant for each, and
/// `NEXTS`, the names of the nodes they lead to, for [`NodeSpec::nexts`](crate::NodeSpec::nexts).
/// A visibility first (`pub(super)`) applies to every constant: two nodes of one file declare
/// theirs in a module each.
#[macro_export]
macro_rules! next_arcs {
    (@at [$vis:vis] $i:expr; $arc:ident $(, $rest:ident)*) => {
        $vis const $arc: $crate::Next = $crate::Next::declared($i);
        $crate::next_arcs!(@at [$vis] $i + 1; $($rest),*);
    };
    (@at [$vis:vis] $i:expr;) => {};
    ($vis:vis $($arc:ident => $node:expr),+ $(,)?) => {
        $crate::next_arcs!(@at [$vis] 0u16; $($arc),+);
        /// The nodes the arcs lead to, in the order of the arcs' constants.
        $vis const NEXTS: &[&str] = &[$($node),+];
    };
}

/// Declares a node's errors in order: a `u16` code constant for each (what
/// [`Context::error_id`](crate::Context::error_id) and
/// [`Context::count_error`](crate::Context::count_error) take), and `ERRORS`, their names and
/// descriptions, for [`NodeSpec::errors`](crate::NodeSpec::errors).
#[macro_export]
macro_rules! node_errors {
    (@at [$vis:vis] $i:expr; $code:ident $(, $rest:ident)*) => {
        $vis const $code: u16 = $i;
        $crate::node_errors!(@at [$vis] $i + 1; $($rest),*);
    };
    (@at [$vis:vis] $i:expr;) => {};
    ($vis:vis $($code:ident => ($name:expr, $description:expr)),+ $(,)?) => {
        $crate::node_errors!(@at [$vis] 0u16; $($code),+);
        /// The errors' names and descriptions, in the order of their codes.
        $vis const ERRORS: &[(&str, &str)] = &[$(($name, $description)),+];
    };
}
