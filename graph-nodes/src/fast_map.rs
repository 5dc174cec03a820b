//! [`FastMap`]: the hash map the data path looks tunnels and sessions up in.

use std::collections::HashMap;

/// A fast hasher for small fixed-size keys the data path looks up (tunnel endpoints): one
/// multiply per word, no protection against chosen collisions (the keys come from the control
/// side's configuration, and a lookup key that matches nothing costs one probe).
#[derive(Default, Clone, Copy)]
pub struct WordHasher(u64);

impl std::hash::Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(23) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A `HashMap` with [`WordHasher`].
pub type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<WordHasher>>;
