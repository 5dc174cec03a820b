//! The per-buffer metadata header: one cache line in front of each buffer's headroom.

use super::index::BufferIndex;

/// The value of an unset index field of the metadata (`rx_interface`, `tx_interface`,
/// `adjacency`): no interface, no adjacency. A missing buffer is [`BufferIndex::NONE`].
pub const INVALID_INDEX: u32 = u32::MAX;

/// Bits of [`BufferMeta::flags`].
pub mod flags {
    /// The buffer continues in [`super::BufferMeta::next`].
    pub const NEXT_PRESENT: u32 = 1 << 0;
    /// The packet is being traced; [`super::BufferMeta::trace_index`] names its trace.
    pub const TRACED: u32 = 1 << 1;
    /// The buffer is on a free list (set by the pool; an owned buffer never has it).
    pub const FREE: u32 = 1 << 2;
    /// `l2_offset` is valid.
    pub const L2_VALID: u32 = 1 << 3;
    /// `l3_offset` is valid.
    pub const L3_VALID: u32 = 1 << 4;
    /// `l4_offset` is valid.
    pub const L4_VALID: u32 = 1 << 5;
    /// `flow_hash` is valid.
    pub const FLOW_HASH_VALID: u32 = 1 << 6;
    /// The IPv4 header checksum was verified (by hardware or ip4-input).
    pub const IP4_CHECKSUM_OK: u32 = 1 << 7;
    /// [`super::BufferMeta::offload`] holds checksum or segmentation work left on the packet
    /// (see [`crate::offload`]).
    pub const OFFLOAD: u32 = 1 << 8;
    /// A tunnel's datagram (VXLAN, WireGuard) that Quiver made: a transmit queue may send it
    /// together with the next ones of its flow as one UDP GSO super-frame, since what receives
    /// it is a UDP socket or a forwarder, never a reader of raw frames (which would see the
    /// super-frame whole).
    pub const UDP_GSO_OK: u32 = 1 << 9;
    /// First bit free for nodes' own use.
    pub const USER_0: u32 = 1 << 16;
}

/// The metadata of one buffer: 64 bytes, cache-line aligned.
///
/// Offsets (`data_offset`, `l2_offset`, …) count from the start of the buffer's headroom, so a
/// packet's first byte is at `headroom_start + data_offset`. The data window (`data_offset`,
/// `length`) is private: it is changed only through methods that keep it inside the buffer.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub struct BufferMeta {
    pub(crate) data_offset: u16,
    pub(crate) length: u16,
    /// [`flags`] bits.
    pub flags: u32,
    /// The next buffer of a chained packet, or [`BufferIndex::NONE`].
    pub(crate) next: BufferIndex,
    /// In a chain's first buffer: the bytes in all the buffers after it.
    pub(crate) chain_rest: u32,
    /// The interface the packet arrived on.
    pub rx_interface: u32,
    /// The interface the packet is to leave on.
    pub tx_interface: u32,
    /// Start of the L2 header (from the headroom start).
    pub l2_offset: u16,
    /// Start of the L3 header.
    pub l3_offset: u16,
    /// Start of the L4 header.
    pub l4_offset: u16,
    /// Why the packet was dropped: a graph-wide error id (see `Context::drop_packet`).
    pub error: u16,
    /// A hash of the packet's flow (ECMP, RSS, VXLAN source port).
    pub flow_hash: u32,
    /// An adjacency / next-hop / load-balance index chosen by a lookup node.
    pub adjacency: u32,
    /// The trace this packet belongs to, when [`flags::TRACED`] is set.
    pub trace_index: u32,
    /// Checksum or segmentation work left on the packet, valid while [`flags::OFFLOAD`] is
    /// set (see [`BufferMeta::offload`]).
    pub(crate) offload: crate::offload::work::Offload,
    /// Scratch space for the node that owns the packet (a tunnel index, a loop count, …).
    pub opaque: [u32; 3],
}

const _: () = assert!(std::mem::size_of::<BufferMeta>() == 64);

impl BufferMeta {
    /// Fresh metadata for a buffer whose packet starts `headroom` bytes in, with no data.
    pub const fn new(headroom: u16) -> BufferMeta {
        BufferMeta {
            data_offset: headroom,
            length: 0,
            flags: 0,
            next: BufferIndex::NONE,
            chain_rest: 0,
            rx_interface: INVALID_INDEX,
            tx_interface: INVALID_INDEX,
            l2_offset: 0,
            l3_offset: 0,
            l4_offset: 0,
            error: 0,
            flow_hash: 0,
            adjacency: INVALID_INDEX,
            trace_index: 0,
            offload: crate::offload::work::Offload {
                csum_start: 0,
                csum_offset: 0,
                gso_size: 0,
                gso: crate::offload::work::Gso::None,
                bits: 0,
            },
            opaque: [0; 3],
        }
    }

    /// Offset of the packet's first byte from the headroom start.
    #[inline]
    pub fn data_offset(&self) -> u16 {
        self.data_offset
    }

    /// Bytes of packet data in this buffer.
    #[inline]
    pub fn length(&self) -> u16 {
        self.length
    }

    /// Bytes of the whole packet, this buffer and every chained one.
    #[inline]
    pub fn total_length(&self) -> u32 {
        self.length as u32 + self.chain_rest
    }

    /// The next buffer of the chain, if any.
    #[inline]
    pub fn next(&self) -> Option<BufferIndex> {
        (self.flags & flags::NEXT_PRESENT != 0).then_some(self.next)
    }

    /// Drops `n` bytes from the front of the packet (a header consumed); `false`, changing
    /// nothing, when the buffer holds fewer. Shrinking the window keeps it inside the buffer, so
    /// this needs no buffer geometry (see `WorkerBuffers::advance`).
    #[inline(always)]
    pub fn advance(&mut self, n: u16) -> bool {
        if self.length < n {
            return false;
        }
        self.data_offset += n;
        self.length -= n;
        true
    }

    /// Moves the front of the packet back by `n` bytes (over a header written just before it, or
    /// one [`BufferMeta::advance`] skipped); `false`, changing nothing, when fewer than `n`
    /// bytes precede the packet or the length would overflow. The end of the window stays
    /// where it is, so the window stays inside the buffer.
    #[inline(always)]
    pub fn retreat(&mut self, n: u16) -> bool {
        if self.data_offset < n || self.length as u32 + n as u32 > u16::MAX as u32 {
            return false;
        }
        self.data_offset -= n;
        self.length += n;
        true
    }

    /// Whether the packet is traced.
    #[inline]
    pub fn is_traced(&self) -> bool {
        self.flags & flags::TRACED != 0
    }
}
