//! DPDK rings, and ethdev ports built over them (the `net_ring` PMD's `rte_eth_from_rings`): a
//! way to give a [`super::DpdkPort`] a peer inside the process, for tests and benchmarks.

use dataplane::BufferIndex;
use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use dataplane::WorkerBuffers;
use dpdk_sys as sys;

use super::burst::{self, RxTally, BURST};
use super::eal::{DpdkError, Eal};
use super::mempool::DpdkMempool;

/// A single-producer, single-consumer `rte_ring` of mbuf pointers.
///
/// Rings live until the process ends: a port built over one keeps using it, and freeing it
/// under the port would be a use after free, so this type never frees its ring.
pub struct Ring {
    ring: NonNull<sys::rte_ring>,
    name: String,
    mbufs: Box<[*mut sys::rte_mbuf; BURST]>,
}

// SAFETY: the ring is DPDK's, usable from any thread; `&mut self` keeps this handle's own end of
// it (one producer, one consumer) to one thread at a time.
unsafe impl Send for Ring {}

impl Ring {
    /// A new ring of `size` slots (a power of two; it holds `size - 1` mbufs).
    pub fn create(_eal: &Eal, name: &str, size: u32) -> Result<Ring, DpdkError> {
        let cname =
            CString::new(name).map_err(|_| DpdkError::Config("NUL in a ring name".into()))?;
        // SAFETY: a valid name; the EAL is running (`_eal` exists).
        let ring = unsafe {
            sys::rte_ring_create(
                cname.as_ptr(),
                size,
                sys::SOCKET_ID_ANY,
                sys::RING_F_SP_ENQ | sys::RING_F_SC_DEQ,
            )
        };
        let ring = NonNull::new(ring)
            .ok_or_else(|| DpdkError::from_rte_errno(format!("rte_ring_create({name})")))?;
        Ok(Ring {
            ring,
            name: name.into(),
            mbufs: Box::new([std::ptr::null_mut(); BURST]),
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Mbufs in the ring now.
    pub fn len(&self) -> usize {
        // SAFETY: the ring is valid for the life of the process.
        unsafe { sys::rte_ring_count(self.ring.as_ptr()) as usize }
    }

    /// Whether the ring is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Puts Quiver packets into the ring as mbufs (no copy: each buffer's own mbuf), as a
    /// transmit queue would; returns how many of the first `packets` it took. The rest stay the
    /// caller's.
    pub fn enqueue(
        &mut self,
        mempool: &DpdkMempool,
        buffers: &mut WorkerBuffers,
        packets: &[BufferIndex],
    ) -> usize {
        assert!(
            Arc::ptr_eq(mempool.pool(), buffers.pool()),
            "buffers from another pool than the mempool's"
        );
        let map = mempool.map();
        let mut sent = 0;
        for chunk in packets.chunks(BURST) {
            // SAFETY: the caller owns `packets`, from the mempool's pool (checked).
            unsafe { burst::prepare_transmit(&map, buffers, chunk, &mut self.mbufs[..]) };
            // SAFETY: a valid ring; `chunk.len()` prepared mbuf pointers; we are its only
            // producer (`&mut self`).
            let n = unsafe {
                sys::rte_ring_enqueue_burst(
                    self.ring.as_ptr(),
                    self.mbufs.as_ptr().cast(),
                    chunk.len() as u32,
                    std::ptr::null_mut(),
                )
            } as usize;
            sent += n;
            if n < chunk.len() {
                // SAFETY: the rest are still ours.
                unsafe { burst::unlink_refused(&map, buffers, &chunk[n..]) };
                break;
            }
        }
        sent
    }

    /// Takes up to `out.len()` mbufs out of the ring as Quiver packets (no copy), as a receive
    /// queue would; returns how many. Mbufs of other mempools are freed to them, uncounted.
    pub fn dequeue(
        &mut self,
        mempool: &DpdkMempool,
        buffers: &mut WorkerBuffers,
        out: &mut [BufferIndex],
    ) -> usize {
        assert!(
            Arc::ptr_eq(mempool.pool(), buffers.pool()),
            "buffers from another pool than the mempool's"
        );
        let n = out.len().min(BURST);
        // SAFETY: a valid ring; room for `n` pointers; we are its only consumer (`&mut self`).
        let got = unsafe {
            sys::rte_ring_dequeue_burst(
                self.ring.as_ptr(),
                self.mbufs.as_mut_ptr().cast(),
                n as u32,
                std::ptr::null_mut(),
            )
        } as usize;
        let mut tally = RxTally::default();
        // SAFETY: the ring holds only mbufs put there by a producer that gave them up.
        unsafe { burst::receive(&mempool.map(), buffers, &self.mbufs[..got], out, &mut tally) }
    }
}

/// Creates an ethdev port from `name` whose queue `i` receives from `rx[i]` and transmits into
/// `tx[i]` (the `net_ring` PMD), and returns the port's name for `DpdkPort::open`. The port keeps
/// using the rings; `rx` and `tx` must be of equal, non-zero length.
pub fn ring_port(_eal: &Eal, name: &str, rx: &[&Ring], tx: &[&Ring]) -> Result<String, DpdkError> {
    if rx.is_empty() || rx.len() != tx.len() {
        return Err(DpdkError::Config(format!(
            "{name}: {} receive and {} transmit rings",
            rx.len(),
            tx.len()
        )));
    }
    let cname = CString::new(name).map_err(|_| DpdkError::Config("NUL in a port name".into()))?;
    let rx: Vec<*mut sys::rte_ring> = rx.iter().map(|r| r.ring.as_ptr()).collect();
    let tx: Vec<*mut sys::rte_ring> = tx.iter().map(|r| r.ring.as_ptr()).collect();
    // SAFETY: valid rings that live as long as the process; the arrays are read during the call.
    let rc = unsafe {
        sys::rte_eth_from_rings(
            cname.as_ptr(),
            rx.as_ptr(),
            rx.len() as u32,
            tx.as_ptr(),
            tx.len() as u32,
            sys::SOCKET_ID_ANY as u32,
        )
    };
    if rc < 0 {
        return Err(DpdkError::from_rte_errno(format!(
            "rte_eth_from_rings({name})"
        )));
    }
    let mut buf = [0 as std::ffi::c_char; sys::RTE_ETH_NAME_MAX_LEN as usize];
    // SAFETY: `rc` is the new port's id; the buffer has the size DPDK's names are bounded by.
    let rc = unsafe { sys::rte_eth_dev_get_name_by_port(rc as u16, buf.as_mut_ptr()) };
    if rc < 0 {
        return Err(DpdkError::call("rte_eth_dev_get_name_by_port", rc));
    }
    // SAFETY: DPDK wrote a NUL-terminated name into the buffer.
    Ok(unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}
