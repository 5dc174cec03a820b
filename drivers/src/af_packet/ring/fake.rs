//! A stand-in for the kernel's side of both rings, over ordinary memory, for unit tests.

use super::*;

/// A frame to deliver: its bytes, its length on the wire, status bits, VLAN (TPID, TCI).
pub(crate) type FakeFrame<'a> = (&'a [u8], u32, u32, Option<(u16, u16)>);

/// Ring memory, 8-byte aligned, and the kernel's view of it.
pub(crate) struct FakeKernel {
    mem: Vec<u64>,
    pub layout: RingLayout,
    /// The next block the kernel fills (receive) or slot it sends (transmit).
    next: usize,
    /// Virtio-net headers written before the next delivery's frames, in order.
    pub vnet: Vec<[u8; VNET_HDR]>,
}

/// Where the kernel puts a frame after its header (TPACKET_V3 with no reserve:
/// `TPACKET_ALIGN(TPACKET3_HDRLEN + 16) - 14`).
pub(crate) const MAC_OFFSET: usize = ((libc::TPACKET3_HDRLEN + 16 + 15) & !15) - 14;
/// Where the first frame header of a block is (the descriptor, aligned to 8).
const FIRST_FRAME: usize = (size_of::<tpacket_block_desc>() + 7) & !7;

impl FakeKernel {
    pub(crate) fn new(layout: RingLayout) -> FakeKernel {
        FakeKernel {
            mem: vec![0; layout.bytes() / 8],
            layout,
            next: 0,
            vnet: Vec::new(),
        }
    }

    pub(crate) fn base(&mut self) -> NonNull<u8> {
        NonNull::new(self.mem.as_mut_ptr().cast()).unwrap()
    }

    fn bytes(&mut self) -> &mut [u8] {
        let len = self.mem.len() * 8;
        // SAFETY: the Vec's memory as bytes; u8 has no alignment or validity requirement.
        unsafe { std::slice::from_raw_parts_mut(self.mem.as_mut_ptr().cast(), len) }
    }

    fn put32(&mut self, at: usize, v: u32) {
        self.bytes()[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }

    fn get32(&mut self, at: usize) -> u32 {
        u32::from_ne_bytes(self.bytes()[at..at + 4].try_into().unwrap())
    }

    /// Block `b`'s status word.
    pub(crate) fn block_status(&mut self, b: usize) -> u32 {
        let at = b * self.layout.block_size + BLOCK_STATUS;
        self.get32(at)
    }

    /// Fills the next block with `frames` and hands it to the reader; returns the block's
    /// index.
    pub(crate) fn deliver(&mut self, frames: &[FakeFrame<'_>]) -> usize {
        let b = self.next;
        self.next = (b + 1) % self.layout.block_count;
        let start = b * self.layout.block_size;
        assert_eq!(
            self.block_status(b),
            libc::TP_STATUS_KERNEL,
            "block still held"
        );
        let mut off = FIRST_FRAME;
        for (i, &(bytes, wire_len, status, vlan)) in frames.iter().enumerate() {
            let h = start + off;
            let next = (MAC_OFFSET + bytes.len() + 7) & !7;
            assert!(
                off + next <= self.layout.block_size,
                "frames overflow the block"
            );
            let last = i + 1 == frames.len();
            self.put32(
                h + offset_of!(tpacket3_hdr, tp_next_offset),
                if last { 0 } else { next as u32 },
            );
            self.put32(h + offset_of!(tpacket3_hdr, tp_snaplen), bytes.len() as u32);
            self.put32(h + offset_of!(tpacket3_hdr, tp_len), wire_len);
            let mut st = status;
            let hv1 = h + offset_of!(tpacket3_hdr, hv1);
            if let Some((tpid, tci)) = vlan {
                st |= libc::TP_STATUS_VLAN_VALID | libc::TP_STATUS_VLAN_TPID_VALID;
                self.put32(
                    hv1 + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tci),
                    tci as u32,
                );
                let at = hv1 + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tpid);
                self.bytes()[at..at + 2].copy_from_slice(&tpid.to_ne_bytes());
            }
            self.put32(h + FRAME_STATUS, st);
            let mac = h + offset_of!(tpacket3_hdr, tp_mac);
            self.bytes()[mac..mac + 2].copy_from_slice(&(MAC_OFFSET as u16).to_ne_bytes());
            self.bytes()[h + MAC_OFFSET..h + MAC_OFFSET + bytes.len()].copy_from_slice(bytes);
            if let Some(v) = self.vnet.get(i).copied() {
                self.bytes()[h + MAC_OFFSET - VNET_HDR..h + MAC_OFFSET].copy_from_slice(&v);
            }
            off += next;
        }
        self.put32(start + BLOCK_NUM_PKTS, frames.len() as u32);
        self.put32(start + BLOCK_FIRST_PKT, FIRST_FRAME as u32);
        self.put32(start + BLOCK_STATUS, libc::TP_STATUS_USER);
        self.vnet.clear();
        b
    }

    /// Overwrites a 16-bit field of the first frame of block `b` (to corrupt it).
    pub(crate) fn poke_first_frame_mac(&mut self, b: usize, mac: u16) {
        let at = b * self.layout.block_size + FIRST_FRAME + offset_of!(tpacket3_hdr, tp_mac);
        self.bytes()[at..at + 2].copy_from_slice(&mac.to_ne_bytes());
    }

    fn slot(&self, s: usize) -> usize {
        let per = self.layout.block_size / self.layout.frame_size;
        (s / per) * self.layout.block_size + (s % per) * self.layout.frame_size
    }

    /// Sends what the writer requested, in order, as the kernel does on `sendto`: returns
    /// the frames and leaves their slots `SENDING` until [`FakeKernel::complete`].
    pub(crate) fn take_sent(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for _ in 0..self.layout.frames() {
            let at = self.slot(self.next);
            if self.get32(at + FRAME_STATUS) != libc::TP_STATUS_SEND_REQUEST {
                break;
            }
            let len = self.get32(at + offset_of!(tpacket3_hdr, tp_len)) as usize;
            out.push(self.bytes()[at + TX_DATA_OFFSET..at + TX_DATA_OFFSET + len].to_vec());
            self.put32(at + FRAME_STATUS, libc::TP_STATUS_SENDING);
            self.next = (self.next + 1) % self.layout.frames();
        }
        out
    }

    /// Every slot being sent is done: available again.
    pub(crate) fn complete(&mut self) {
        for s in 0..self.layout.frames() {
            let at = self.slot(s) + FRAME_STATUS;
            if self.get32(at) == libc::TP_STATUS_SENDING {
                self.put32(at, libc::TP_STATUS_AVAILABLE);
            }
        }
    }
}
