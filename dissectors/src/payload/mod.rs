//! Payload digests, computed while the payload streams past (never buffered whole).
//!
//! A payload is cut into 4 KiB blocks aligned to its start (the last may be shorter).
//! Each block gets a BLAKE3-256 digest (the first 16 bytes index the dedupe window) and a
//! trivial flag (all bytes equal). The payload digest is BLAKE3-256 over the block digests
//! (see `hash.rs` for the exact, documented construction) so it costs one pass over the data.

mod batch;
pub mod hash;
pub mod offload;
pub mod send;

pub const BLOCK_SIZE: usize = 4096;

/// Digest of one block of a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockDigest {
    /// First 16 bytes of BLAKE3-256(block bytes).
    pub hash: [u8; 16],
    pub len: u32,
    /// All bytes of the block are equal (zero-filled space and the like).
    pub trivial: bool,
}

/// Digest of a whole payload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PayloadDigest {
    pub len: u64,
    /// BLAKE3-256 payload digest (construction documented in `hash.rs`).
    pub digest: [u8; 32],
    pub blocks: Vec<BlockDigest>,
}
