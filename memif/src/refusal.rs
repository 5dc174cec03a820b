//! [`Refusals`]: why a master turned peers away from one of its interfaces, so that an operator
//! sees it without a debug log: the last refusal (reason, peer) and a count per reason.

use std::time::SystemTime;

/// Why a master refused a peer for an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalKind {
    /// The interface has a secret and the peer sent none.
    SecretRequired,
    /// The peer's secret is not the interface's.
    IncorrectSecret,
    /// ETHERNET on one side, IP on the other.
    ModeMismatch,
    /// Another peer holds the interface.
    AlreadyConnected,
    /// The peer speaks another protocol version.
    Version,
    /// The peer offered more rings than the interface's queue count allows.
    TooManyQueues,
    /// Anything else the handshake refused (a region, a ring, a message out of turn).
    Handshake,
}

impl RefusalKind {
    /// Every kind, in the order [`Refusals::counts`] gives them.
    pub const ALL: [RefusalKind; 7] = [
        RefusalKind::SecretRequired,
        RefusalKind::IncorrectSecret,
        RefusalKind::ModeMismatch,
        RefusalKind::AlreadyConnected,
        RefusalKind::Version,
        RefusalKind::TooManyQueues,
        RefusalKind::Handshake,
    ];

    /// A counter name for it (`refused-incorrect-secret` …).
    pub fn counter_name(self) -> &'static str {
        match self {
            RefusalKind::SecretRequired => "refused-secret-required",
            RefusalKind::IncorrectSecret => "refused-incorrect-secret",
            RefusalKind::ModeMismatch => "refused-mode-mismatch",
            RefusalKind::AlreadyConnected => "refused-already-connected",
            RefusalKind::Version => "refused-version",
            RefusalKind::TooManyQueues => "refused-too-many-queues",
            RefusalKind::Handshake => "refused-handshake",
        }
    }
}

/// One refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What kind.
    pub kind: RefusalKind,
    /// The reason as the peer was told it (in DISCONNECT).
    pub reason: String,
    /// The peer's process id, when the socket tells it (`SO_PEERCRED`).
    pub peer_pid: Option<i32>,
    /// When.
    pub at: SystemTime,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)?;
        if let Some(pid) = self.peer_pid {
            write!(f, " (peer pid {pid})")?;
        }
        Ok(())
    }
}

/// An interface's refusals: the last one, and how many of each kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refusals {
    last: Option<Refusal>,
    counts: [u64; RefusalKind::ALL.len()],
}

impl Refusals {
    /// The last refusal, if any.
    pub fn last(&self) -> Option<&Refusal> {
        self.last.as_ref()
    }

    /// How many refusals of `kind`.
    pub fn count(&self, kind: RefusalKind) -> u64 {
        self.counts[Self::slot(kind)]
    }

    /// Every kind with its count, in [`RefusalKind::ALL`]'s order.
    pub fn counts(&self) -> impl Iterator<Item = (RefusalKind, u64)> + '_ {
        RefusalKind::ALL.iter().map(|&k| (k, self.count(k)))
    }

    /// All refusals so far.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Records `r`; returns whether it is news (another reason or another peer than the last
    /// one), which a caller logs at INFO, leaving a peer that retries the same way to DEBUG.
    pub(crate) fn record(&mut self, r: Refusal) -> bool {
        self.counts[Self::slot(r.kind)] += 1;
        let news = self
            .last
            .as_ref()
            .is_none_or(|l| l.kind != r.kind || l.peer_pid != r.peer_pid || l.reason != r.reason);
        self.last = Some(r);
        news
    }

    fn slot(kind: RefusalKind) -> usize {
        RefusalKind::ALL
            .iter()
            .position(|&k| k == kind)
            .unwrap_or(RefusalKind::ALL.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(kind: RefusalKind, pid: i32) -> Refusal {
        Refusal {
            kind,
            reason: format!("{kind:?}"),
            peer_pid: Some(pid),
            at: SystemTime::now(),
        }
    }

    #[test]
    fn a_peer_retrying_the_same_way_is_news_once_and_counted_each_time() {
        let mut r = Refusals::default();
        assert!(r.record(refusal(RefusalKind::IncorrectSecret, 7)));
        assert!(!r.record(refusal(RefusalKind::IncorrectSecret, 7)));
        assert!(
            r.record(refusal(RefusalKind::IncorrectSecret, 8)),
            "another peer"
        );
        assert!(
            r.record(refusal(RefusalKind::ModeMismatch, 8)),
            "another reason"
        );
        assert_eq!(r.count(RefusalKind::IncorrectSecret), 3);
        assert_eq!(r.count(RefusalKind::ModeMismatch), 1);
        assert_eq!(r.total(), 4);
        assert_eq!(r.last().map(|l| l.kind), Some(RefusalKind::ModeMismatch));
        assert_eq!(r.last().unwrap().to_string(), "ModeMismatch (peer pid 8)");
    }
}
