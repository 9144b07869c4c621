//! BLAKE3-256 of several independent 4 KiB blocks at once, with the SIMD lanes full.
//!
//! `blake3::hash` of one 4 KiB block compresses its four 1 KiB chunks side by side, so it
//! fills four SIMD lanes; AVX2 has 8 and AVX-512 16. Here up to `LANES` blocks are hashed
//! together: chunk `j` of every block in one `hash_many` call (all have chunk counter `j`),
//! then the two parent nodes of every block, then every block's root node, each level one
//! call. The tree is BLAKE3's own for a 4096-byte input (spec §2.1, §5.1.2): chunks 0-3,
//! parents (0,1) and (2,3), their parent with the ROOT flag, whose chaining value is the
//! 32-byte hash.
//!
//! `hash_many` is the blake3 crate's SIMD entry point (`blake3::platform`, public but
//! documented as unstable), so the crate's version is pinned (`=` in Cargo.toml) and the
//! tests compare every digest with `blake3::hash`.

use super::BLOCK_SIZE;
use blake3::platform::Platform;
use blake3::{IncrementCounter, BLOCK_LEN, CHUNK_LEN};
use std::sync::OnceLock;

/// Blocks digested together: AVX-512's 16 lanes of 1 KiB chunks need 16 blocks (one chunk
/// of each per lane); narrower platforms run the same batch in several passes.
pub const LANES: usize = 16;

const CHUNKS: usize = BLOCK_SIZE / CHUNK_LEN;

/// BLAKE3's IV (spec §2.2; the hash mode's key words).
const IV: [u32; 8] = [
    0x6A09_E667, 0xBB67_AE85, 0x3C6E_F372, 0xA54F_F53A, 0x510E_527F, 0x9B05_688C, 0x1F83_D9AB, 0x5BE0_CD19,
];
/// Domain flags (spec §2.1, Table 3).
const CHUNK_START: u8 = 1;
const CHUNK_END: u8 = 2;
const PARENT: u8 = 4;
const ROOT: u8 = 8;

fn platform() -> Platform {
    static P: OnceLock<Platform> = OnceLock::new();
    *P.get_or_init(Platform::detect)
}

/// `out[i] = BLAKE3-256(blocks[i * 4096 .. (i + 1) * 4096])`; `blocks.len()` must be
/// `out.len() * 4096` with `out.len() <= LANES`.
pub fn digest_blocks(blocks: &[u8], out: &mut [[u8; 32]]) {
    let n = out.len();
    assert!(n <= LANES && blocks.len() == n * BLOCK_SIZE, "digest_blocks: {} bytes for {n} digests", blocks.len());
    let mut refs: [&[u8; BLOCK_SIZE]; LANES] = [&[0; BLOCK_SIZE]; LANES];
    for (r, block) in refs.iter_mut().zip(blocks.chunks_exact(BLOCK_SIZE)) {
        *r = block.try_into().expect("block length");
    }
    digest_refs(&refs[..n], out);
}

/// `out[i] = BLAKE3-256(blocks[i])`, the blocks anywhere in memory (`out.len() ==
/// blocks.len() <= LANES`).
pub fn digest_refs(blocks: &[&[u8; BLOCK_SIZE]], out: &mut [[u8; 32]]) {
    let n = out.len();
    assert!(n <= LANES && blocks.len() == n, "digest_refs: {} blocks for {n} digests", blocks.len());
    if n == 1 {
        out[0] = *blake3::hash(blocks[0]).as_bytes();
        return;
    }
    let p = platform();
    // Chaining values of every chunk, laid out as each block's parent inputs: block i's
    // chunks 0..4 at cvs[i][0..128].
    let mut cvs = [[0u8; CHUNKS * 32]; LANES];
    let mut chunk_refs: [&[u8; CHUNK_LEN]; LANES] = [&[0; CHUNK_LEN]; LANES];
    let mut chunk_out = [0u8; LANES * 32];
    for j in 0..CHUNKS {
        for (r, block) in chunk_refs[..n].iter_mut().zip(blocks) {
            *r = block[j * CHUNK_LEN..(j + 1) * CHUNK_LEN].try_into().expect("chunk length");
        }
        p.hash_many(&chunk_refs[..n], &IV, j as u64, IncrementCounter::No, 0, CHUNK_START, CHUNK_END, &mut chunk_out[..n * 32]);
        for (i, cv) in cvs[..n].iter_mut().enumerate() {
            cv[j * 32..j * 32 + 32].copy_from_slice(&chunk_out[i * 32..i * 32 + 32]);
        }
    }
    // Parents (0,1) and (2,3) of every block: 2n parent nodes of 64 bytes.
    let mut parent_refs: [&[u8; BLOCK_LEN]; 2 * LANES] = [&[0; BLOCK_LEN]; 2 * LANES];
    for (i, cv) in cvs[..n].iter().enumerate() {
        parent_refs[2 * i] = cv[..64].try_into().expect("parent length");
        parent_refs[2 * i + 1] = cv[64..].try_into().expect("parent length");
    }
    let mut parents = [[0u8; 64]; LANES];
    {
        let mut flat = [0u8; 2 * LANES * 32];
        p.hash_many(&parent_refs[..2 * n], &IV, 0, IncrementCounter::No, PARENT, 0, 0, &mut flat[..2 * n * 32]);
        for (i, pb) in parents[..n].iter_mut().enumerate() {
            pb.copy_from_slice(&flat[i * 64..i * 64 + 64]);
        }
    }
    // The roots.
    let mut root_refs: [&[u8; BLOCK_LEN]; LANES] = [&[0; BLOCK_LEN]; LANES];
    for (r, pb) in root_refs[..n].iter_mut().zip(&parents[..n]) {
        *r = pb;
    }
    let mut flat = [0u8; LANES * 32];
    p.hash_many(&root_refs[..n], &IV, 0, IncrementCounter::No, PARENT | ROOT, 0, 0, &mut flat[..n * 32]);
    for (i, o) in out.iter_mut().enumerate() {
        o.copy_from_slice(&flat[i * 32..i * 32 + 32]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    #[test]
    fn every_batch_size_equals_blake3_hash() {
        for n in 1..=LANES {
            let blocks = data(n * BLOCK_SIZE, n as u64);
            let mut out = vec![[0u8; 32]; n];
            digest_blocks(&blocks, &mut out);
            for (i, d) in out.iter().enumerate() {
                let want = blake3::hash(&blocks[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE]);
                assert_eq!(d, want.as_bytes(), "batch of {n}, block {i}");
            }
        }
    }

    #[test]
    fn equal_and_zero_blocks_in_one_batch() {
        let mut blocks = vec![0u8; LANES * BLOCK_SIZE];
        let one = data(BLOCK_SIZE, 9);
        blocks[3 * BLOCK_SIZE..4 * BLOCK_SIZE].copy_from_slice(&one);
        blocks[9 * BLOCK_SIZE..10 * BLOCK_SIZE].copy_from_slice(&one);
        let mut out = [[0u8; 32]; LANES];
        digest_blocks(&blocks, &mut out);
        assert_eq!(out[3], out[9]);
        assert_eq!(out[3], *blake3::hash(&one).as_bytes());
        assert_eq!(out[0], *blake3::hash(&[0u8; BLOCK_SIZE]).as_bytes());
    }
}
