//! Hashers for the engine's internal maps (the per-frame and per-block hot paths).
//!
//! `std`'s default SipHash-1-3 costs more than the lookups it serves here (about 8% of an
//! analysis in `perf`). Two replacements:
//! - `FastMap` / `FastSet`: foldhash, seeded per map from a random per-process seed, for keys an
//!   attacker on the wire can choose (addresses, ports, message ids): fast, and still not
//!   predictable enough to build collisions offline.
//! - `DigestMap`: for keys that are, or lead with, BLAKE3 output (block digests). Those bits are
//!   already uniformly distributed and cannot be steered without a preimage attack, so the
//!   hasher only folds them (and any small integers beside them) into 64 bits.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

pub type FastState = foldhash::fast::RandomState;
pub type FastMap<K, V> = HashMap<K, V, FastState>;
pub type FastSet<K> = HashSet<K, FastState>;

/// Folds BLAKE3 digest bytes (already uniform) and the small integers keyed with them.
#[derive(Default, Clone, Copy)]
pub struct DigestHasher(u64);

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for DigestHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // A digest: its first 8 bytes carry 64 uniform bits; the rest add nothing needed.
        let mut w = [0u8; 8];
        let n = bytes.len().min(8);
        w[..n].copy_from_slice(&bytes[..n]);
        self.0 = (self.0 ^ u64::from_le_bytes(w)).rotate_left(23);
    }

    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64)
    }

    #[inline]
    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64)
    }

    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64)
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(K).rotate_left(29);
    }

    #[inline]
    fn write_usize(&mut self, _len: usize) {
        // Slice length prefixes (always 16 for a block digest): nothing to mix.
    }

    #[inline]
    fn finish(&self) -> u64 {
        // hashbrown takes its control byte from the top bits: spread everything there.
        self.0.wrapping_mul(K) ^ (self.0 >> 32)
    }
}

pub type DigestState = BuildHasherDefault<DigestHasher>;
pub type DigestMap<K, V> = HashMap<K, V, DigestState>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn digest_keys_spread_over_the_top_bits() {
        // Distinct digests (BLAKE3 outputs) with the same small integer, and the same digest
        // with distinct integers, must differ in the 7 bits hashbrown uses as a tag and in the
        // low bits it uses as a bucket index.
        let s = DigestState::default();
        let mut tags = std::collections::HashSet::new();
        let mut buckets = std::collections::HashSet::new();
        for i in 0u32..4096 {
            let d: [u8; 16] = blake3::hash(&i.to_le_bytes()).as_bytes()[..16].try_into().unwrap();
            let h = s.hash_one((7u32, d));
            tags.insert(h >> 57);
            buckets.insert(h & 0xfff);
            let h2 = s.hash_one((i, d));
            buckets.insert(h2 & 0xfff);
        }
        assert_eq!(tags.len(), 128, "every 7-bit tag is used");
        assert!(buckets.len() > 2500, "{} of 4096 low-bit buckets", buckets.len());
        let d = [0xabu8; 16];
        assert_ne!(s.hash_one((1u32, d)), s.hash_one((2u32, d)));
    }
}
