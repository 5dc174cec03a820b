//! Queues for tests: a transmit queue that records what it is given, a receive queue fed from a
//! list of frames.

use crate::BufferIndex;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::buffer::WorkerBuffers;
use crate::port::{RxQueue, TxQueue};

/// Frames a [`CaptureTx`] has transmitted, shared with the test.
pub type Captured = Arc<Mutex<Vec<Vec<u8>>>>;

/// A transmit queue that copies every packet out (whole chains), then frees it; it can be told to
/// accept only so many packets per call, to act like a full ring.
pub struct CaptureTx {
    frames: Captured,
    accept_per_call: usize,
}

impl CaptureTx {
    /// A capture that accepts everything; returns it and the shared list of frames.
    pub fn new() -> (CaptureTx, Captured) {
        let frames = Captured::default();
        (
            CaptureTx {
                frames: frames.clone(),
                accept_per_call: usize::MAX,
            },
            frames,
        )
    }

    /// Accepts at most `n` packets per call.
    pub fn accepting(mut self, n: usize) -> CaptureTx {
        self.accept_per_call = n;
        self
    }
}

impl TxQueue for CaptureTx {
    fn transmit(&mut self, buffers: &mut WorkerBuffers, packets: &[BufferIndex]) -> usize {
        let n = packets.len().min(self.accept_per_call);
        let mut frames = self.frames.lock().unwrap_or_else(|p| p.into_inner());
        for &bi in &packets[..n] {
            let mut bytes = Vec::new();
            buffers.copy_packet(bi, &mut bytes);
            frames.push(bytes);
        }
        buffers.free(&packets[..n]);
        n
    }
}

/// A receive queue that hands out frames pushed into a shared list.
pub struct ScriptedRx {
    frames: Arc<Mutex<VecDeque<Vec<u8>>>>,
}

impl ScriptedRx {
    /// A queue and the list that feeds it.
    pub fn new() -> (ScriptedRx, Arc<Mutex<VecDeque<Vec<u8>>>>) {
        let frames: Arc<Mutex<VecDeque<Vec<u8>>>> = Arc::default();
        (
            ScriptedRx {
                frames: frames.clone(),
            },
            frames,
        )
    }
}

impl RxQueue for ScriptedRx {
    fn receive(&mut self, buffers: &mut WorkerBuffers, out: &mut [BufferIndex]) -> usize {
        let mut frames = self.frames.lock().unwrap_or_else(|p| p.into_inner());
        let mut n = 0;
        while n < out.len() {
            let Some(bytes) = frames.front() else { break };
            let Some(bi) = buffers.alloc_one() else { break };
            if buffers.write_packet(bi, bytes).is_err() {
                buffers.free_one(bi);
                break;
            }
            frames.pop_front();
            out[n] = bi;
            n += 1;
        }
        n
    }
}
