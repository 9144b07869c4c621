//! The bytes a VM writes (or reads): one buffer per I/O, filled once from a seeded
//! generator and reused for every copy of that I/O, plus the block facts the expected
//! results need (which 4 KiB blocks are trivial, i.e. all bytes equal).

use smbwire_dissectors::payload::BLOCK_SIZE;

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough for test data.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Independent streams from one seed: (purpose, index) → generator.
pub fn stream(seed: u64, purpose: u64, index: u64) -> SplitMix64 {
    let mut m = SplitMix64::new(seed ^ purpose.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    let a = m.next_u64();
    SplitMix64::new(a ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

const PURPOSE_DATA: u64 = 1;
const PURPOSE_ZERO: u64 = 2;

/// Non-trivial blocks shorter than this are compared by content for uniqueness; longer
/// blocks of 64-bit generator output from distinct streams are distinct for all practical
/// purposes (a collision needs 2^128 work at 16 bytes).
pub const SHORT_BLOCK: usize = 32;

/// One I/O's data and its block facts.
#[derive(Default)]
pub struct IoData {
    pub index: u64,
    pub bytes: Vec<u8>,
    /// Bytes in blocks whose bytes are all equal (excluded from the ratio).
    pub trivial_bytes: u64,
    /// Content of the last block when it is non-trivial and shorter than `SHORT_BLOCK`.
    pub short_tail: Option<Vec<u8>>,
}

impl IoData {
    pub fn nontrivial_bytes(&self) -> u64 {
        self.bytes.len() as u64 - self.trivial_bytes
    }

    /// Refill for I/O `index` of `len` bytes. A fraction `zero_fill` of the 4 KiB blocks
    /// (aligned to the payload start, as the analyzer cuts them) is all zeros.
    pub fn fill(&mut self, seed: u64, index: u64, len: usize, zero_fill: f64) {
        self.index = index;
        self.bytes.resize(len, 0);
        let mut data = stream(seed, PURPOSE_DATA, index);
        let mut zero = stream(seed, PURPOSE_ZERO, index);
        for block in self.bytes.chunks_mut(BLOCK_SIZE) {
            if zero_fill > 0.0 && zero.unit() < zero_fill {
                block.fill(0);
                continue;
            }
            let mut words = block.chunks_exact_mut(8);
            for w in &mut words {
                w.copy_from_slice(&data.next_u64().to_le_bytes());
            }
            let rest = words.into_remainder();
            if !rest.is_empty() {
                let v = data.next_u64().to_le_bytes();
                rest.copy_from_slice(&v[..rest.len()]);
            }
        }
        self.trivial_bytes = 0;
        self.short_tail = None;
        let nblocks = self.bytes.len().div_ceil(BLOCK_SIZE);
        for (i, block) in self.bytes.chunks(BLOCK_SIZE).enumerate() {
            if block.iter().all(|&b| b == block[0]) {
                self.trivial_bytes += block.len() as u64;
            } else if i + 1 == nblocks && block.len() < SHORT_BLOCK {
                self.short_tail = Some(block.to_vec());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_distinct() {
        let (mut a, mut b, mut c) = (IoData::default(), IoData::default(), IoData::default());
        a.fill(7, 3, 10_000, 0.0);
        b.fill(7, 3, 10_000, 0.0);
        c.fill(7, 4, 10_000, 0.0);
        assert_eq!(a.bytes, b.bytes);
        assert_ne!(a.bytes, c.bytes);
        assert_eq!(a.trivial_bytes, 0);
        let mut d = IoData::default();
        d.fill(8, 3, 10_000, 0.0);
        assert_ne!(a.bytes, d.bytes);
    }

    #[test]
    fn zero_fill_makes_trivial_blocks() {
        let mut a = IoData::default();
        a.fill(1, 0, 1 << 20, 0.5);
        let zero_blocks = a
            .bytes
            .chunks(BLOCK_SIZE)
            .filter(|b| b.iter().all(|&x| x == 0))
            .count();
        assert_eq!(a.trivial_bytes, zero_blocks as u64 * BLOCK_SIZE as u64);
        assert!((64..192).contains(&zero_blocks), "{zero_blocks} of 256");
        a.fill(1, 0, 1 << 20, 1.0);
        assert_eq!(a.nontrivial_bytes(), 0);
    }

    #[test]
    fn one_byte_tail_is_trivial() {
        let mut a = IoData::default();
        a.fill(1, 0, BLOCK_SIZE + 1, 0.0);
        assert_eq!(a.trivial_bytes, 1);
        a.fill(1, 0, BLOCK_SIZE + 20, 0.0);
        assert_eq!(a.short_tail.as_ref().map(Vec::len), Some(20));
    }
}
