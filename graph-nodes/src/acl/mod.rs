//! Access control lists: the rule model, the compiler, and the batch classifier ACL nodes call.
//!
//! A [`RuleList`] is ordered rules ([`RuleSpec`] checked into [`Rule`]): source and destination
//! prefixes of one family (or any), protocol, port ranges, ICMP/ICMPv6 type and code ranges,
//! TCP flags; the first matching rule wins, a packet matching none gets the list's default
//! action. [`Classifier::compile`] turns a list into an immutable lookup structure (off the
//! workers); [`Classifier::classify4`]/[`Classifier::classify6`] take a frame's parsed keys
//! ([`Key4`], [`Key6`]) and return each one's rule index, which the node counts and maps to
//! an action with [`Classifier::action`]. [`RuleList::first_match4`] is the same answer by a
//! linear scan: the definition the classifier is tested against.
//!
//! **Fragments.** A key with `fragment` set (a non-first fragment: no L4 header) matches on
//! L3 only, VPP's rule: its prefixes and protocol are compared, the rule's ports, ICMP type and
//! code and TCP flags are not. A first fragment has its L4 header and is a normal key.
//!
//! **The structure: a HiCuts-style decision tree with short leaves** . Each
//! internal node cuts one dimension of its region into 2^b equal parts (b ≤ 8, so a step is
//! a shift, a mask and one load); a leaf holds at most a few rules, copied in rule order, that
//! the key is compared with in full. Why this one:
//! - **Lookups cost a few dependent loads, independent across keys.** ClassBench-like ACLs
//!   are split by the addresses in 3–6 steps; a group of 8 keys walks down together so their
//!   loads overlap, which is what a batch API buys. RFC is faster per packet but its cross-
//!   product tables grow with the product of the fields' classes (hundreds of MB at 10k
//!   rules); tuple-space search probes one hash table per prefix-length pair (tens in ACL sets);
//!   bit vectors read n/64 words per field per packet.
//! - **The build is simple and bounded**: each cut may replicate its rules at most 4 times,
//!   and a rule covering a node's whole region drops the rules after it there (nothing later
//!   can be first), which keeps overlapping wildcard rules from multiplying.
//! - **One generic tree for both families**: IPv6 addresses are four 32-bit dimensions each
//!   (a prefix is exactly a range in every word), so the same code serves 5 and 11
//!   dimensions. A fragment view (the rules without their L4 conditions) is a second root in
//!   the same arena.
//!
//! The tree is plain safe Rust: no `unsafe`, no allocation, no lock on the lookup path;
//! every index is checked (an out-of-range one reads as "no rule", never a panic).

mod classifier;
mod fields;
mod key;
mod lookup;
mod reference;
mod rule;
mod tree;

pub use classifier::{Classifier, BATCH};
pub use key::{Key4, Key6};
pub use rule::{proto, Action, Field, ListError, Prefix, Rule, RuleError, RuleList, RuleSpec};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_reference;
