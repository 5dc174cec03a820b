//! Routes shaped like a real IPv6 table, for `lpm6`: the length mix of the global table (about
//! half /48, then /32, /44, /40, /29, /36, …) plus an internal tail (/56, /64, a few /128),
//! placed as registries and operators place them: everything in the RIRs' blocks under
//! 2000::/3 (2001::/16, 2400::/12, 2600::/12, 2620::/23, 2800::/12, 2a00::/12, 2c00::/12),
//! allocations (/20–/32) in their registry's block, more-specifics of /33–/48 inside an
//! allocation (some announced, some not; a few allocations holding most of them), sites' /49–/64
//! inside /40–/48s, the tail past /64 inside /64s; each placed at random half the time and drawn
//! towards its parent's start the other half (sequential assignment). Deterministic for a seed.

use std::collections::HashSet;

use graph_nodes::fib6::mask;

use super::common::Rng;

/// The length mix, in routes per 10,000.
pub const MIX: [(u8, u32); 36] = [
    (20, 1),
    (22, 1),
    (24, 2),
    (26, 1),
    (27, 1),
    (28, 4),
    (29, 300),
    (30, 50),
    (31, 50),
    (32, 1000),
    (33, 100),
    (34, 100),
    (35, 50),
    (36, 300),
    (37, 50),
    (38, 50),
    (39, 50),
    (40, 600),
    (41, 50),
    (42, 100),
    (43, 50),
    (44, 800),
    (45, 50),
    (46, 200),
    (47, 200),
    (48, 4600),
    (52, 100),
    (56, 300),
    (60, 100),
    (64, 520),
    (96, 2),
    (112, 2),
    (120, 2),
    (126, 2),
    (127, 1),
    (128, 100),
];

/// The registries' blocks (prefix, length) and their share of the allocations in percent.
const BLOCKS: [(u128, u8, u32); 7] = [
    (0x2001 << 112, 16, 6),
    (0x2400 << 112, 12, 22),
    (0x2600 << 112, 12, 21),
    (0x2620 << 112, 23, 1),
    (0x2800 << 112, 12, 9),
    (0x2a00 << 112, 12, 38),
    (0x2c00 << 112, 12, 3),
];

impl Rng {
    /// A float in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A number below `n` drawn towards 0: `n × u²`, so a few of the first take most.
    fn skewed(&mut self, n: usize) -> usize {
        let u = self.unit();
        ((n as f64 * u * u) as usize).min(n.saturating_sub(1))
    }

    /// `bits` random bits.
    fn bits(&mut self, bits: u32) -> u128 {
        let r = (self.next() as u128) << 64 | self.next() as u128;
        if bits == 0 {
            0
        } else {
            r >> (128 - bits)
        }
    }

    /// A subnet number of `bits` bits: at random half the time, else towards the low end
    /// (numbered from the start of the block).
    fn subnet(&mut self, bits: u32) -> u128 {
        if bits == 0 || self.next().is_multiple_of(2) {
            return self.bits(bits);
        }
        let u = self.unit();
        ((bits as f64).exp2() * u * u * u) as u128 & (u128::MAX >> (128 - bits))
    }
}

/// About `n` distinct routes with [`MIX`], each with a value (1..=`MAX_VALUE`), shuffled.
pub fn generate(n: usize, seed: u64) -> Vec<(u128, u8, u32)> {
    let mut rng = Rng(seed | 1);
    let total: u32 = MIX.iter().map(|m| m.1).sum();
    let count = |len: u8| {
        let per = MIX.iter().find(|m| m.0 == len).map_or(0, |m| m.1);
        (n as u64 * per as u64 / total as u64) as usize
    };
    let mut seen = HashSet::with_capacity(n * 2);
    let mut routes: Vec<(u128, u8)> = Vec::with_capacity(n);
    let mut push = |routes: &mut Vec<(u128, u8)>, p: u128, len: u8| {
        let p = p & mask(len);
        seen.insert((p, len)) && {
            routes.push((p, len));
            true
        }
    };
    // Allocations: announced, plus as many unannounced (PI blocks, aggregates filtered) that
    // more-specifics still fall in.
    let mut parents: Vec<(u128, u8)> = Vec::new();
    for &(len, _) in MIX.iter().filter(|m| m.0 <= 32) {
        let mut made = 0;
        while made < count(len) {
            let pick = (rng.next() % 100) as u32;
            let mut acc = 0;
            let &(block, blen, _) = BLOCKS
                .iter()
                .find(|b| {
                    acc += b.2;
                    pick < acc
                })
                .unwrap_or(&BLOCKS[5]);
            let blen = blen.min(len);
            let p = block | rng.subnet((len - blen) as u32) << (128 - len as u32);
            if push(&mut routes, p, len) {
                made += 1;
                parents.push((p & mask(len), len));
            } else if rng.next().is_multiple_of(4) {
                // A crowded block: an unannounced allocation beside it keeps the count going.
                parents.push((p & mask(len), len));
            }
        }
    }
    shuffle(&mut parents, &mut rng);
    // More-specifics of /33–/48 inside allocations; sites' /49–/64 inside /40–/48s; hosts
    // and the rest of the tail inside /64s (or a site when no /64 is left).
    let mut sites: Vec<(u128, u8)> = Vec::new();
    let mut subnets: Vec<(u128, u8)> = Vec::new();
    for &(len, _) in MIX.iter().filter(|m| m.0 > 32) {
        let mut made = 0;
        let mut tries = 0usize;
        while made < count(len) {
            tries += 1;
            let pool = match len {
                33..=48 => &parents,
                49..=64 if !sites.is_empty() => &sites,
                49..=64 => &parents,
                _ if !subnets.is_empty() => &subnets,
                _ => &sites,
            };
            let (pp, plen) = pool[rng.skewed(pool.len())];
            // Nested ones spread more as their parent fills.
            let plen = if plen >= len { plen.min(len - 1) } else { plen };
            let bits = (len - plen) as u32;
            let sub = if tries > 4 * count(len) {
                rng.bits(bits)
            } else {
                rng.subnet(bits)
            };
            let p = pp | sub << (128 - len as u32);
            if push(&mut routes, p, len) {
                made += 1;
                let p = p & mask(len);
                match len {
                    40..=48 => sites.push((p, len)),
                    64 => subnets.push((p, len)),
                    _ => {}
                }
            }
        }
    }
    let mut out: Vec<(u128, u8, u32)> = routes
        .into_iter()
        .enumerate()
        .map(|(i, (p, l))| (p, l, (i % graph_nodes::fib6::MAX_VALUE as usize) as u32 + 1))
        .collect();
    shuffle(&mut out, &mut rng);
    out
}

fn shuffle<T>(v: &mut [T], rng: &mut Rng) {
    for i in (1..v.len()).rev() {
        v.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
}

/// `n` lookup addresses, each inside a route drawn at random (random bits past its length).
pub fn addresses(routes: &[(u128, u8, u32)], n: usize, seed: u64) -> Vec<u128> {
    let mut rng = Rng(seed | 1);
    (0..n)
        .map(|_| {
            let (p, l, _) = routes[(rng.next() % routes.len() as u64) as usize];
            p | ((rng.next() as u128) << 64 | rng.next() as u128) & !mask(l)
        })
        .collect()
}

/// Routes per length.
pub fn histogram(routes: &[(u128, u8, u32)]) -> std::collections::BTreeMap<u8, usize> {
    let mut h = std::collections::BTreeMap::new();
    for &(_, l, _) in routes {
        *h.entry(l).or_insert(0) += 1;
    }
    h
}
