//! The compiled, immutable classifier of one rule list, and its batch lookup.

use std::time::{Duration, Instant};

use super::fields::{box4, box6, D4, D6, WIDTHS4, WIDTHS6};
use super::rule::{Action, RuleList};
use super::tree::{Tree, SPLIT_ABOVE_BYTES};
use super::{Key4, Key6};

/// The most keys one call is meant for: a frame.
pub const BATCH: usize = 256;

/// A rule list compiled for lookup: an IPv4 and an IPv6 tree (each with its fragment view),
/// the rules' actions, the default. Immutable; share it (`Arc`) in the snapshot.
#[derive(Clone, Debug)]
pub struct Classifier {
    v4: Tree<D4>,
    v6: Tree<D6>,
    actions: Vec<Action>,
    default: Action,
    build_time: Duration,
}

impl Classifier {
    /// Compiles `list` (off the workers: it allocates; about milliseconds for thousands of
    /// rules).
    pub fn compile(list: &RuleList) -> Classifier {
        Self::compile_split_above(list, SPLIT_ABOVE_BYTES)
    }

    /// [`Classifier::compile`], splitting the rules into parts when a single tree would take
    /// more than `split_above` bytes (tests split small lists with 0).
    pub(super) fn compile_split_above(list: &RuleList, split_above: usize) -> Classifier {
        let t0 = Instant::now();
        let rules = list.rules();
        let v4 = |l3| -> Vec<_> {
            rules
                .iter()
                .enumerate()
                .filter(|(_, r)| r.is_v4())
                .map(|(i, r)| box4(r, i as u32, l3))
                .collect()
        };
        let v6 = |l3| -> Vec<_> {
            rules
                .iter()
                .enumerate()
                .filter(|(_, r)| r.is_v6())
                .map(|(i, r)| box6(r, i as u32, l3))
                .collect()
        };
        let t4 = Tree::build(&v4(false), &v4(true), WIDTHS4, [0, 1], split_above);
        let t6 = Tree::build(&v6(false), &v6(true), WIDTHS6, [0, 4], split_above);
        Classifier {
            v4: t4,
            v6: t6,
            actions: rules.iter().map(|r| r.action()).collect(),
            default: list.default_action(),
            build_time: t0.elapsed(),
        }
    }

    /// The first matching rule's index (its position in the list) for each IPv4 key, into
    /// `out`, or `None`; as many keys as `out` has room for. No allocation, no panic.
    pub fn classify4(&self, keys: &[Key4], out: &mut [Option<u32>]) {
        self.v4.classify(keys, out);
    }

    /// The same for IPv6 keys.
    pub fn classify6(&self, keys: &[Key6], out: &mut [Option<u32>]) {
        self.v6.classify(keys, out);
    }

    /// What a lookup's result means: the rule's action, or the list's default for `None` (or
    /// an index the list does not have).
    #[inline]
    pub fn action(&self, rule: Option<u32>) -> Action {
        rule.and_then(|i| self.actions.get(i as usize).copied())
            .unwrap_or(self.default)
    }

    /// The list's default action.
    pub fn default_action(&self) -> Action {
        self.default
    }

    /// How many rules the list has (hit counters: one per rule).
    pub fn rule_count(&self) -> usize {
        self.actions.len()
    }

    /// How long [`Classifier::compile`] took.
    pub fn build_time(&self) -> Duration {
        self.build_time
    }

    /// Bytes the lookups read (both families' nodes and leaf rules).
    pub fn lookup_bytes(&self) -> usize {
        self.v4.bytes() + self.v6.bytes()
    }
}
