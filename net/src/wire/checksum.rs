//! The Internet checksum (RFC 1071) the fast way: [`ones_sum`] over any bytes, eight at a time,
//! [`fold`] to 16 bits, and [`Summer`] for a sum fed piece by piece (a packet's chain of
//! buffers). The engine's offloads, the drivers' coalescing and the views' checksums
//! ([`super::sum16`]) all sum this way.

/// A running one's-complement sum of bytes taken as big-endian 16-bit words, fed piece by
/// piece (pieces may have odd lengths).
#[derive(Debug, Default, Clone, Copy)]
pub struct Summer {
    acc: u64,
    /// The next byte is the low byte of a word.
    odd: bool,
}

impl Summer {
    /// Adds `data`, which follows what was added so far.
    pub fn add(&mut self, data: &[u8]) {
        let mut s = ones_sum(data);
        if self.odd {
            // Every byte of `data` sits in the other half of its word.
            s = fold(s).swap_bytes() as u64;
        }
        self.acc += s;
        self.odd ^= data.len() % 2 == 1;
    }

    /// The sum so far, not folded.
    pub fn acc(&self) -> u64 {
        self.acc
    }

    /// The sum folded to 16 bits (not inverted).
    pub fn folded(&self) -> u16 {
        fold(self.acc)
    }
}

/// The one's-complement sum of `data` as big-endian 16-bit words (a trailing odd byte padded
/// with zero), not necessarily folded: any value congruent to it modulo 0xffff, zero only for
/// a zero sum, which is all a caller may add to or fold to 16 bits.
///
/// The sum does not depend on byte order (RFC 1071, 2(B)): summed as little-endian words it
/// is the big-endian sum with its bytes swapped. So it is taken eight bytes at a time in
/// native order, each word added as its two 32-bit halves into four accumulators (which no
/// packet can overflow, and which the compiler keeps in vector registers), then folded and
/// swapped once.
pub fn ones_sum(data: &[u8]) -> u64 {
    const LOW: u64 = 0xffff_ffff;
    let mut acc = [0u64; 4];
    let mut blocks = data.chunks_exact(32);
    for block in &mut blocks {
        for (a, w) in acc.iter_mut().zip(block.chunks_exact(8)) {
            let w = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            *a += (w & LOW) + (w >> 32);
        }
    }
    let mut sum = acc.iter().sum::<u64>();
    let mut words = blocks.remainder().chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_le_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        // The high byte of its big-endian word: the low byte of a little-endian one.
        sum += u64::from(*last);
    }
    u64::from(fold(sum).swap_bytes())
}

/// Folds a sum to 16 bits (not inverted).
pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}
