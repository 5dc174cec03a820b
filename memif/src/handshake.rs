//! Why a control connection's handshake fails: the reason the peer is told (in DISCONNECT) and
//! the interface's link shows.

use crate::refusal::RefusalKind;
use crate::Error;

/// A handshake the master or the slave gives up on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandshakeError {
    /// The master's version is outside the range this slave speaks.
    #[error("incompatible version range {min:#06x}..{max:#06x}")]
    VersionRange {
        /// The lowest version the master speaks.
        min: u16,
        /// The highest.
        max: u16,
    },
    /// The slave speaks another version than this master.
    #[error("incompatible version {0:#06x}")]
    Version(u16),
    /// A message after CONNECTED.
    #[error("unexpected message type {0} after connect")]
    AfterConnect(u16),
    /// The slave's first message is not INIT.
    #[error("expected INIT, got message type {0}")]
    ExpectedInit(u16),
    /// A message out of turn.
    #[error("unexpected message type {0}")]
    Unexpected(u16),
    /// INIT names an interface this master does not have.
    #[error("unknown interface id {0}")]
    UnknownInterface(u32),
    /// INIT names an interface that is a slave.
    #[error("interface is not a master")]
    NotMaster,
    /// INIT names an interface another connection holds.
    #[error("interface already connected")]
    AlreadyConnected,
    /// Ethernet on one side, IP on the other.
    #[error("mode mismatch")]
    ModeMismatch,
    /// The interface has a secret and INIT none.
    #[error("secret required")]
    SecretRequired,
    /// INIT's secret is not the interface's.
    #[error("incorrect secret")]
    IncorrectSecret,
    /// ADD_REGION without its memory's fd.
    #[error("missing region fd")]
    MissingRegionFd,
    /// ADD_REGION out of order.
    #[error("non-sequential region index {0}")]
    RegionIndex(u16),
    /// ADD_REGION past the configured limit.
    #[error("region index {0} too large")]
    RegionIndexTooLarge(u16),
    /// The peer's region cannot be used.
    #[error("region: {0}")]
    Region(Error),
    /// ADD_RING without its eventfd.
    #[error("missing ring eventfd")]
    MissingRingEventfd,
    /// ADD_RING out of order.
    #[error("non-sequential ring index {0}")]
    RingIndex(u16),
    /// ADD_RING past the configured limit.
    #[error("ring index {0} too large")]
    RingIndexTooLarge(u16),
    /// ADD_RING past the interface's queue count.
    #[error("ring index {index} out of range: the interface has {queues} queue(s)")]
    TooManyQueues {
        /// The ring's index.
        index: u16,
        /// The interface's queue pairs.
        queues: u16,
    },
    /// ADD_RING asks for a private header.
    #[error("private header not supported")]
    PrivateHeader,
    /// ADD_RING's ring is larger than allowed.
    #[error("ring size 2^{0} too large")]
    RingSizeTooLarge(u8),
    /// ADD_RING names a region not added.
    #[error("ring in unknown region {0}")]
    UnknownRegion(u16),
    /// ADD_RING's ring does not fit its region.
    #[error("ring outside its region")]
    RingOutsideRegion,
    /// CONNECT before a ring of each direction.
    #[error("connect without rings")]
    NoRings,
    /// A ring's cookie is not memif's.
    #[error("bad ring cookie")]
    BadCookie,
    /// The rings the slave would make do not fit a region.
    #[error("region too large for the configured rings")]
    RegionTooLarge,
    /// The slave's region cannot be made.
    #[error("create region: {0}")]
    CreateRegion(Error),
    /// An eventfd cannot be made.
    #[error("eventfd: {0}")]
    Eventfd(nix::Error),
    /// A message cannot be sent (the slave's handshake messages).
    #[error("send: {0}")]
    Send(Error),
    /// A reply cannot be sent (the master's ACK, CONNECTED).
    #[error("send {what}: {source}")]
    SendReply {
        /// The message.
        what: &'static str,
        /// Why.
        source: Error,
    },
    /// This side's own state is inconsistent (a bug).
    #[error("internal: {0}")]
    Internal(&'static str),
}

impl HandshakeError {
    /// What kind of refusal this is, when a master turns a peer away for it.
    pub(crate) fn refusal_kind(&self) -> RefusalKind {
        match self {
            HandshakeError::SecretRequired => RefusalKind::SecretRequired,
            HandshakeError::IncorrectSecret => RefusalKind::IncorrectSecret,
            HandshakeError::ModeMismatch => RefusalKind::ModeMismatch,
            HandshakeError::AlreadyConnected => RefusalKind::AlreadyConnected,
            HandshakeError::Version(_) | HandshakeError::VersionRange { .. } => {
                RefusalKind::Version
            }
            HandshakeError::TooManyQueues { .. } => RefusalKind::TooManyQueues,
            _ => RefusalKind::Handshake,
        }
    }
}
