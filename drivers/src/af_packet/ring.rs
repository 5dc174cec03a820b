//! The two mmap'd rings of a TPACKET_V3 socket and the walks over them.
//!
//! **Receive** (`RxRing`): the ring is `block_count` blocks of `block_size` bytes. The kernel
//! fills a block with frames back to back, then hands the whole block over by setting
//! `TP_STATUS_USER` in its status word (when it is full, or when the retire timer fires on a block
//! holding at least one frame). We copy its frames out one by one, possibly over several polls,
//! and hand the block back by storing `TP_STATUS_KERNEL`. Blocks are used in order, so one index
//! is the whole state, plus our position inside the open block.
//!
//! **Transmit** (`TxRing`): `frame_count` fixed slots. A slot whose status is
//! `TP_STATUS_AVAILABLE` is ours: we write the frame after the slot's header, its length into the
//! header, then `TP_STATUS_SEND_REQUEST`. A `sendto` makes the kernel send every requested slot
//! in order from its own position (which ours mirrors); it sets the slot back to available when
//! the frame has left (the skb is freed). A slot not yet available means the ring is full.
//!
//! Status words are read with `Acquire` and written with `Release` atomics, pairing with the
//! kernel's barriers around its own status stores: a frame's bytes are complete before its block
//! is seen as ours, and our bytes are complete before the kernel sees a send request. The other
//! header fields the kernel writes are read with volatile loads, and every offset it gives is
//! checked against the block before use, so a confused kernel (or test) costs a counted block,
//! never a read outside the ring.

use std::mem::{offset_of, size_of};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use libc::{tpacket3_hdr, tpacket_block_desc, tpacket_hdr_v1};

/// Where a block descriptor's fields are, from the start of the block.
const BLOCK_STATUS: usize =
    offset_of!(tpacket_block_desc, hdr) + offset_of!(tpacket_hdr_v1, block_status);
const BLOCK_NUM_PKTS: usize =
    offset_of!(tpacket_block_desc, hdr) + offset_of!(tpacket_hdr_v1, num_pkts);
const BLOCK_FIRST_PKT: usize =
    offset_of!(tpacket_block_desc, hdr) + offset_of!(tpacket_hdr_v1, offset_to_first_pkt);
/// Where a frame header's status word is.
const FRAME_STATUS: usize = offset_of!(tpacket3_hdr, tp_status);
/// The frame header's size.
const FRAME_HEADER: usize = size_of::<tpacket3_hdr>();
/// Bytes of a receive block a frame cannot use: the block descriptor, and the frame header with
/// the kernel's alignment padding before the frame's first byte (`TPACKET3_HDRLEN` aligned up
/// after room for a 16-byte link header).
pub(crate) const RX_BLOCK_OVERHEAD: usize =
    size_of::<tpacket_block_desc>() + ((libc::TPACKET3_HDRLEN + 16 + 15) & !15);
/// Where a transmit slot's frame starts: the kernel reads it right after the header aligned to
/// `TPACKET_ALIGNMENT` (`TPACKET3_HDRLEN` less the `sockaddr_ll` it counts for receive).
pub(crate) const TX_DATA_OFFSET: usize = libc::TPACKET3_HDRLEN - size_of::<libc::sockaddr_ll>();

/// The geometry of one ring as `PACKET_RX_RING` / `PACKET_TX_RING` are told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RingLayout {
    /// Bytes per block: a multiple of the page size and of `frame_size`.
    pub block_size: usize,
    /// Blocks in the ring.
    pub block_count: usize,
    /// Bytes per frame slot (transmit), or the kernel's accounting unit (receive).
    pub frame_size: usize,
}

impl RingLayout {
    /// Bytes of the mapping this ring takes.
    pub(crate) fn bytes(&self) -> usize {
        self.block_size * self.block_count
    }

    /// Frame slots in the ring.
    pub(crate) fn frames(&self) -> usize {
        self.block_count * (self.block_size / self.frame_size)
    }

    /// The request for `setsockopt(PACKET_RX_RING / PACKET_TX_RING)`; `retire_ms` is the
    /// receive block timeout (0 for transmit, which must leave it unset).
    pub(crate) fn request(&self, retire_ms: u32) -> libc::tpacket_req3 {
        libc::tpacket_req3 {
            tp_block_size: self.block_size as u32,
            tp_block_nr: self.block_count as u32,
            tp_frame_size: self.frame_size as u32,
            tp_frame_nr: self.frames() as u32,
            tp_retire_blk_tov: retire_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        }
    }
}

/// The status word at `p`, shared with the kernel.
///
/// # Safety
/// `p` must be 4-byte aligned and valid for the life of the returned reference, and the word
/// must only ever be accessed atomically (by us) or by the kernel.
unsafe fn status_word<'a>(p: *mut u8) -> &'a AtomicU32 {
    // SAFETY: the caller's contract.
    unsafe { AtomicU32::from_ptr(p.cast()) }
}

/// What a received frame's header said, checked against its block.
#[derive(Debug, Clone, Copy, Default)]
struct FrameInfo {
    /// Offset of the frame's first byte from the block start.
    data: usize,
    /// Bytes captured.
    captured: usize,
    /// Bytes the frame had on the wire.
    wire_len: u32,
    /// The frame header's status bits.
    status: u32,
    /// The VLAN tag the device stripped (TPID, TCI), if any.
    vlan: Option<(u16, u16)>,
    /// From this frame's header to the next one's.
    next: usize,
}

/// A received frame, borrowed from the ring until [`RxRing::advance`].
#[derive(Debug)]
pub(crate) struct RxFrame<'r> {
    /// The bytes captured.
    pub bytes: &'r [u8],
    /// The frame's length on the wire (more than `bytes.len()` when cut short).
    pub wire_len: u32,
    /// The 802.1Q tag the device took off the frame (TPID and TCI, as on the wire), to be put
    /// back after the MAC addresses.
    pub vlan: Option<[u8; 4]>,
    /// The sender left a checksum for offload to fill in (`TP_STATUS_CSUMNOTREADY`).
    pub checksum_partial: bool,
    /// The virtio-net header before the frame (zero when the socket has none).
    pub vnet: [u8; VNET_HDR],
}

/// Bytes of the virtio-net header before each frame of a socket with `PACKET_VNET_HDR`.
pub(crate) const VNET_HDR: usize = dataplane::offload::VIRTIO_NET_HDR_LEN;

/// The receive ring of one socket (TPACKET_V3 blocks).
pub(crate) struct RxRing {
    base: NonNull<u8>,
    layout: RingLayout,
    /// The block we are in or wait for.
    block: usize,
    /// Frames of the open block not yet advanced past (0: no block open).
    left: u32,
    /// Offset of the current frame's header in the open block.
    offset: usize,
    /// `current` describes the frame at `offset`.
    ready: bool,
    current: FrameInfo,
    /// Frames skipped because their block's headers did not hold together.
    bad: u64,
    /// Bytes of virtio-net header before each frame (0 or [`VNET_HDR`]).
    vnet: usize,
}

impl RxRing {
    /// A walk over the receive ring at `base`.
    ///
    /// # Safety
    /// `base` must point to `layout.bytes()` bytes, aligned to 8, that stay mapped and are
    /// shared only with the kernel's side of the TPACKET_V3 protocol for as long as the ring
    /// lives; every block must start out owned by the kernel (status `TP_STATUS_KERNEL`).
    pub(crate) unsafe fn new(base: NonNull<u8>, layout: RingLayout) -> RxRing {
        RxRing {
            base,
            layout,
            block: 0,
            left: 0,
            offset: 0,
            ready: false,
            current: FrameInfo::default(),
            bad: 0,
            vnet: 0,
        }
    }

    /// The same walk for a socket with `PACKET_VNET_HDR`: a virtio-net header before every
    /// frame.
    pub(crate) fn with_vnet_hdr(mut self, on: bool) -> RxRing {
        self.vnet = if on { VNET_HDR } else { 0 };
        self
    }

    fn block_ptr(&self, block: usize) -> *mut u8 {
        // SAFETY: `block < block_count`, so the offset stays inside the mapping.
        unsafe { self.base.as_ptr().add(block * self.layout.block_size) }
    }

    fn block_status(&self) -> &AtomicU32 {
        // SAFETY: the block start is page (or, in tests, 8-byte) aligned and the descriptor's
        // status word is 4-byte aligned within it; the mapping outlives `self`; the word is shared
        // only with the kernel, which writes it with its own barriers.
        unsafe { status_word(self.block_ptr(self.block).add(BLOCK_STATUS)) }
    }

    fn read_u32(&self, offset: usize) -> u32 {
        debug_assert!(offset + 4 <= self.layout.block_size && offset.is_multiple_of(4));
        // SAFETY: inside the open block (the callers' offsets are constants of the descriptor),
        // aligned; the block is ours (status USER was read with Acquire), so the kernel does not
        // write it while we read.
        unsafe {
            self.block_ptr(self.block)
                .add(offset)
                .cast::<u32>()
                .read_volatile()
        }
    }

    /// Opens the current block if the kernel has handed it over; `false` if not.
    fn open_block(&mut self) -> bool {
        if self.block_status().load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            return false;
        }
        self.left = self.read_u32(BLOCK_NUM_PKTS);
        self.offset = self.read_u32(BLOCK_FIRST_PKT) as usize;
        if self.left == 0 {
            self.release_block();
        }
        true
    }

    /// Hands the open block back to the kernel and moves to the next.
    fn release_block(&mut self) {
        self.block_status()
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.block = (self.block + 1) % self.layout.block_count;
        self.left = 0;
        self.ready = false;
    }

    /// Reads and checks the header of the frame at `offset` of the open block.
    fn decode(&self, offset: usize) -> Option<FrameInfo> {
        let block = self.layout.block_size;
        if !offset.is_multiple_of(8) || offset.checked_add(FRAME_HEADER)? > block {
            return None;
        }
        // SAFETY: the header lies inside the open block (checked just above) and is aligned (8,
        // more than the header's 4); the block is ours until we release it.
        let h = unsafe {
            self.block_ptr(self.block)
                .add(offset)
                .cast::<tpacket3_hdr>()
                .read_volatile()
        };
        let data = offset + h.tp_mac as usize;
        let captured = h.tp_snaplen as usize;
        if (h.tp_mac as usize) < FRAME_HEADER + self.vnet || data.checked_add(captured)? > block {
            return None;
        }
        let next = h.tp_next_offset as usize;
        // Every frame but the last names the next one, after its own bytes.
        if self.left > 1 && next < h.tp_mac as usize + captured {
            return None;
        }
        let vlan = (h.tp_status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
            let tpid = if h.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                h.hv1.tp_vlan_tpid
            } else {
                0x8100
            };
            (tpid, h.hv1.tp_vlan_tci as u16)
        });
        Some(FrameInfo {
            data,
            captured,
            wire_len: h.tp_len,
            status: h.tp_status,
            vlan,
            next,
        })
    }

    /// Makes the next received frame current; `false` when the kernel has handed over nothing
    /// more for now. Never blocks and makes no system call.
    pub(crate) fn poll(&mut self) -> bool {
        loop {
            if self.ready {
                return true;
            }
            if self.left == 0 {
                if !self.open_block() {
                    return false;
                }
                continue;
            }
            match self.decode(self.offset) {
                Some(info) => {
                    self.current = info;
                    self.ready = true;
                }
                None => {
                    self.bad += self.left as u64;
                    self.release_block();
                }
            }
        }
    }

    /// The current frame (after [`RxRing::poll`] returned `true`).
    pub(crate) fn frame(&self) -> RxFrame<'_> {
        assert!(self.ready, "RxRing::frame without a successful poll");
        let c = &self.current;
        let pre = self.vnet;
        // SAFETY: `decode` checked `data + captured` against the open block, and that the frame
        // header and `pre` bytes of virtio-net header fit before `data`; the block is ours until
        // released; releasing needs `&mut self`, which this borrow prevents.
        let all = unsafe {
            std::slice::from_raw_parts(
                self.block_ptr(self.block).add(c.data - pre),
                c.captured + pre,
            )
        };
        let (head, bytes) = all.split_at(pre);
        let mut vnet = [0; VNET_HDR];
        vnet[..pre].copy_from_slice(head);
        RxFrame {
            bytes,
            wire_len: c.wire_len,
            vlan: c.vlan.map(|(tpid, tci)| {
                let (p, t) = (tpid.to_be_bytes(), tci.to_be_bytes());
                [p[0], p[1], t[0], t[1]]
            }),
            checksum_partial: c.status & libc::TP_STATUS_CSUMNOTREADY != 0,
            vnet,
        }
    }

    /// Frames left in the open block, the current one included (0 when none is open).
    pub(crate) fn left_in_block(&self) -> u32 {
        self.left
    }

    /// Done with the current frame: moves past it, handing its block back after its last.
    pub(crate) fn advance(&mut self) {
        assert!(self.ready, "RxRing::advance without a successful poll");
        self.ready = false;
        self.left -= 1;
        if self.left == 0 {
            self.release_block();
        } else {
            self.offset += self.current.next;
        }
    }

    /// Frames skipped in blocks whose headers did not hold together, since the last call.
    pub(crate) fn take_bad(&mut self) -> u64 {
        std::mem::take(&mut self.bad)
    }
}

/// The transmit ring of one socket (fixed slots).
pub(crate) struct TxRing {
    base: NonNull<u8>,
    layout: RingLayout,
    frames_per_block: usize,
    /// The next slot to fill.
    head: usize,
}

impl TxRing {
    /// A walk over the transmit ring at `base`.
    ///
    /// # Safety
    /// As for [`RxRing::new`], with every slot starting out `TP_STATUS_AVAILABLE` and the
    /// kernel's own position at slot 0.
    pub(crate) unsafe fn new(base: NonNull<u8>, layout: RingLayout) -> TxRing {
        TxRing {
            base,
            layout,
            frames_per_block: layout.block_size / layout.frame_size,
            head: 0,
        }
    }

    /// Bytes a slot holds after its header: the longest frame this ring sends.
    pub(crate) fn capacity(&self) -> usize {
        self.layout.frame_size - TX_DATA_OFFSET
    }

    fn slot_ptr(&self, slot: usize) -> *mut u8 {
        let (block, within) = (slot / self.frames_per_block, slot % self.frames_per_block);
        // SAFETY: `slot < frames()`, so block and offset stay inside the mapping (slots never
        // straddle blocks: the kernel lays them out the same way).
        unsafe {
            self.base
                .as_ptr()
                .add(block * self.layout.block_size + within * self.layout.frame_size)
        }
    }

    fn slot_status(&self) -> &AtomicU32 {
        // SAFETY: slots are 16-byte aligned (frame size is a multiple of TPACKET_ALIGNMENT) and
        // the status word is 4-byte aligned within the header; shared only with the kernel.
        unsafe { status_word(self.slot_ptr(self.head).add(FRAME_STATUS)) }
    }

    /// The data area of the next slot, if the kernel has given it back; `None` means the ring
    /// is full.
    pub(crate) fn next_free(&mut self) -> Option<&mut [u8]> {
        if self.slot_status().load(Ordering::Acquire) != libc::TP_STATUS_AVAILABLE {
            return None;
        }
        let capacity = self.capacity();
        // SAFETY: the slot is available, so the kernel neither reads nor writes it until we
        // request a send; the data area lies inside the slot; `&mut self` makes this the only
        // reference to it.
        Some(unsafe {
            std::slice::from_raw_parts_mut(self.slot_ptr(self.head).add(TX_DATA_OFFSET), capacity)
        })
    }

    /// Requests that the kernel send the first `len` bytes written into the slot that
    /// [`TxRing::next_free`] gave, and moves to the next slot.
    pub(crate) fn send(&mut self, len: usize) {
        debug_assert!(len <= self.capacity());
        let h = self.slot_ptr(self.head).cast::<tpacket3_hdr>();
        // SAFETY: the slot is ours (available, checked by `next_free`); the fields are inside its
        // header, aligned; the kernel reads them only after the Release store below.
        unsafe {
            (&raw mut (*h).tp_len).write_volatile(len as u32);
            (&raw mut (*h).tp_snaplen).write_volatile(len as u32);
            (&raw mut (*h).tp_next_offset).write_volatile(0);
        }
        self.slot_status()
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.head = (self.head + 1) % self.layout.frames();
    }
}

#[cfg(test)]
pub(crate) mod fake;

#[cfg(test)]
mod tests {
    use super::fake::FakeKernel;
    use super::*;

    const RX: RingLayout = RingLayout {
        block_size: 4096,
        block_count: 3,
        frame_size: 2048,
    };

    fn rx() -> (FakeKernel, RxRing) {
        let mut k = FakeKernel::new(RX);
        // SAFETY: the fake kernel's memory outlives the ring in every test (declared first).
        let ring = unsafe { RxRing::new(k.base(), RX) };
        (k, ring)
    }

    fn drain(ring: &mut RxRing, max: usize) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        while v.len() < max && ring.poll() {
            v.push(ring.frame().bytes.to_vec());
            ring.advance();
        }
        v
    }

    #[test]
    fn an_empty_ring_yields_nothing() {
        let (_k, mut ring) = rx();
        assert!(!ring.poll());
        assert_eq!(ring.left_in_block(), 0);
    }

    #[test]
    fn frames_come_out_in_order_and_blocks_go_back_after_their_last_frame() {
        let (mut k, mut ring) = rx();
        let f: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 60 + i as usize]).collect();
        let b0 = k.deliver(&[
            (&f[0], 60, 0, None),
            (&f[1], 61, 0, None),
            (&f[2], 62, 0, None),
        ]);
        let b1 = k.deliver(&[(&f[3], 63, 0, None), (&f[4], 64, 0, None)]);
        // Two polls' worth: the first stops in the middle of block 0, which stays ours.
        assert_eq!(drain(&mut ring, 2), f[..2]);
        assert_eq!(k.block_status(b0), libc::TP_STATUS_USER);
        assert_eq!(ring.left_in_block(), 1);
        assert_eq!(drain(&mut ring, 10), f[2..]);
        assert_eq!(k.block_status(b0), libc::TP_STATUS_KERNEL);
        assert_eq!(k.block_status(b1), libc::TP_STATUS_KERNEL);
        assert!(!ring.poll());
        assert_eq!(ring.take_bad(), 0);
    }

    #[test]
    fn the_walk_wraps_around_the_ring() {
        let (mut k, mut ring) = rx();
        for round in 0..(RX.block_count * 3) as u8 {
            let frame = [round; 64];
            k.deliver(&[(&frame, 64, 0, None)]);
            assert_eq!(drain(&mut ring, 10), vec![frame.to_vec()], "round {round}");
        }
    }

    #[test]
    fn frame_metadata_is_reported() {
        let (mut k, mut ring) = rx();
        k.deliver(&[
            (&[1; 100], 1500, libc::TP_STATUS_CSUMNOTREADY, None),
            (&[2; 64], 64, 0, Some((0x88a8, 0x2064))),
        ]);
        assert!(ring.poll());
        let f = ring.frame();
        assert_eq!((f.bytes.len(), f.wire_len), (100, 1500));
        assert!(f.checksum_partial && f.vlan.is_none());
        ring.advance();
        assert!(ring.poll());
        let f = ring.frame();
        assert_eq!(f.vlan, Some([0x88, 0xa8, 0x20, 0x64]));
        assert!(!f.checksum_partial);
        ring.advance();
    }

    #[test]
    fn a_block_with_an_impossible_header_is_counted_and_given_back() {
        let (mut k, mut ring) = rx();
        let b = k.deliver(&[(&[1; 64], 64, 0, None), (&[2; 64], 64, 0, None)]);
        k.poke_first_frame_mac(b, 4000);
        k.deliver(&[(&[3; 64], 64, 0, None)]);
        assert_eq!(drain(&mut ring, 10), vec![vec![3u8; 64]]);
        assert_eq!(ring.take_bad(), 2);
        assert_eq!(k.block_status(b), libc::TP_STATUS_KERNEL);
    }

    const TX: RingLayout = RingLayout {
        block_size: 4096,
        block_count: 2,
        frame_size: 1024,
    };

    #[test]
    fn transmit_slots_fill_until_the_kernel_holds_them_all() {
        let mut k = FakeKernel::new(TX);
        // SAFETY: the fake kernel's memory outlives the ring.
        let mut ring = unsafe { TxRing::new(k.base(), TX) };
        assert_eq!(ring.capacity(), 1024 - 48);
        let mut sent = 0u8;
        while let Some(slot) = ring.next_free() {
            slot[..3].copy_from_slice(&[sent, sent, sent]);
            ring.send(3);
            sent += 1;
        }
        assert_eq!(
            sent as usize,
            TX.frames(),
            "every slot used before the ring is full"
        );
        let out = k.take_sent();
        assert_eq!(out.len(), TX.frames());
        assert!(out.iter().enumerate().all(|(i, f)| f == &[i as u8; 3]));
        assert!(ring.next_free().is_none(), "slots being sent are not ours");
        k.complete();
        let slot = ring.next_free().expect("completed slots come back");
        slot[..2].copy_from_slice(&[9, 9]);
        ring.send(2);
        assert_eq!(
            k.take_sent(),
            vec![vec![9, 9]],
            "the walk wraps in step with the kernel"
        );
    }
}
