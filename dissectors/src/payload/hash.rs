//! Streaming payload hasher: block digests and the payload digest in one pass.
//!
//! # The construction (smbwire payload digest v1)
//!
//! Given a payload `P` of `n` bytes:
//!
//! 1. Cut `P` into blocks of 4096 bytes starting at offset 0; the last block may be shorter.
//!    An empty payload has no blocks.
//! 2. For each block `B_i`: `D_i = BLAKE3-256(B_i)` (plain BLAKE3 hash mode, 32 bytes).
//!    `BlockDigest.hash` keeps `D_i[0..16]`; `trivial` says all bytes of `B_i` are equal.
//! 3. Payload digest = BLAKE3 in derive-key mode with context string
//!    `"smbwire payload digest v1"` over `D_0 || D_1 || ... || D_{k-1} || LE64(n)`,
//!    i.e. the full 32-byte block digests in order followed by the payload length as
//!    a little-endian u64. (The length goes last so the digest can be computed while the
//!    payload streams past without knowing its length in advance; the input is
//!    unambiguous because `k` follows from `n`.)
//!
//! To recompute it from a file of the payload bytes (`pip install blake3`):
//!
//! ```text
//! import blake3, sys
//! data = open(sys.argv[1], "rb").read()
//! h = blake3.blake3(derive_key_context="smbwire payload digest v1")
//! for i in range(0, len(data), 4096):
//!     h.update(blake3.blake3(data[i:i + 4096]).digest())
//! h.update(len(data).to_bytes(8, "little"))
//! print(h.hexdigest())
//! ```

use super::batch::{self, LANES};
use super::offload;
use std::sync::atomic::{AtomicUsize, Ordering};
use super::{BlockDigest, PayloadDigest, BLOCK_SIZE};

/// Context string of the derive-key mode; changing the construction means a new version.
pub const PAYLOAD_DIGEST_CONTEXT: &str = "smbwire payload digest v1";

/// Comparison stride of the trivial-block check (one SIMD-friendly slice compare per stride).
const TRIVIAL_STRIDE: usize = 64;

/// Hashes a payload handed over in chunks of any size.
///
/// Whole 4 KiB blocks are digested `LANES` at a time (`batch::digest_blocks`), so the SIMD
/// lanes of the BLAKE3 compression are full: one 4 KiB block alone has only 4 chunks to hash
/// in parallel. Blocks wait in a staging buffer sized for the payload's announced length, at
/// most `LANES` blocks (64 KiB); a run of `LANES` whole blocks while nothing waits is digested
/// straight from the caller's slice. The block digests and
/// the payload digest do not depend on the batching (tests below).
pub struct PayloadHasher {
    /// Bytes waiting for their digest: whole blocks, then the start of the next one.
    /// Appended to (never zero-filled); room for what the payload needs, at most `LANES`
    /// blocks, is reserved at the first byte.
    staging: Vec<u8>,
    /// Room to reserve at the first staged byte (the payload's expected length, capped).
    reserve: usize,
    /// Blocks digested together: `reserve / BLOCK_SIZE` once staging is reserved (1 when
    /// the process-wide staging budget is spent).
    batch: usize,
    /// Bytes of `STAGING_BYTES` this hasher holds.
    accounted: usize,
    len: u64,
    payload: DigestInput,
    blocks: Vec<BlockDigest>,
    /// Blocks digested elsewhere, in order, their digests not yet taken: batches handed to
    /// an idle worker (`offload`), blocks gathered with other payloads' (`offload::gather`).
    pending: Vec<Part>,
}

/// Blocks of a payload in a `HashJob`: a batch of its own (`first` 0, every block of the
/// job), or its blocks among other payloads' in a gathering job (`shared`).
pub(crate) struct Part {
    job: std::sync::Arc<offload::HashJob>,
    first: u8,
    count: u8,
    shared: bool,
}

impl Part {
    /// A payload dropped before its digest: a batch of its own need not be digested at all.
    fn cancel(self) {
        if !self.shared {
            self.job.cancel();
        }
    }
}

impl Default for PayloadHasher {
    fn default() -> Self {
        Self::new()
    }
}

/// Staging memory held by all hashers together, and its budget: past it a new hasher stages
/// one block at a time (4 KiB, as without batching), so many payloads open at once (a flood of
/// flows each starting a WRITE) cannot hold 64 KiB each.
static STAGING_BYTES: AtomicUsize = AtomicUsize::new(0);
const STAGING_BUDGET: usize = 64 << 20;

impl Drop for PayloadHasher {
    fn drop(&mut self) {
        for part in self.pending.drain(..) {
            part.cancel();
        }
        STAGING_BYTES.fetch_sub(self.accounted, Ordering::Relaxed);
    }
}

/// A hasher of the payload digest's derive-key mode.
fn payload_hasher() -> blake3::Hasher {
    use blake3::hazmat::HasherExt;
    blake3::Hasher::new_from_context_key(context_key())
}

/// The payload digest's derive-key context key, computed once.
fn context_key() -> &'static [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    KEY.get_or_init(|| blake3::hazmat::hash_derive_key_context(PAYLOAD_DIGEST_CONTEXT))
}

impl PayloadHasher {
    pub fn new() -> Self {
        PayloadHasher {
            staging: Vec::new(),
            reserve: LANES * BLOCK_SIZE,
            batch: 1,
            accounted: 0,
            len: 0,
            payload: DigestInput::default(),
            blocks: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Like `new`, with room reserved for a payload of about `len_hint` bytes. The hint comes
    /// from a length field of the wire, so the reservation is capped (at 4 MiB of payload).
    pub fn with_len_hint(len_hint: u64) -> Self {
        let mut h = Self::new();
        let blocks = len_hint.div_ceil(BLOCK_SIZE as u64).min(1024) as usize;
        h.blocks.reserve_exact(blocks);
        h.reserve = blocks.clamp(1, LANES) * BLOCK_SIZE;
        h
    }

    /// Bytes hashed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn update(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len() as u64;
        while !bytes.is_empty() {
            if self.staging.is_empty() && bytes.len() >= LANES * BLOCK_SIZE {
                // Straight from the caller's slice.
                let (run, rest) = bytes.split_at(LANES * BLOCK_SIZE);
                self.digest_run(run);
                bytes = rest;
                continue;
            }
            if self.staging.capacity() == 0 {
                let mut want = self.reserve;
                if want > BLOCK_SIZE && STAGING_BYTES.fetch_add(want, Ordering::Relaxed) + want > STAGING_BUDGET {
                    STAGING_BYTES.fetch_sub(want, Ordering::Relaxed);
                    want = BLOCK_SIZE;
                } else if want <= BLOCK_SIZE {
                    STAGING_BYTES.fetch_add(want, Ordering::Relaxed);
                }
                self.accounted = want;
                self.batch = want / BLOCK_SIZE;
                self.staging.reserve_exact(want);
            }
            let fill = self.staging.len() % BLOCK_SIZE;
            let take = (BLOCK_SIZE - fill).min(bytes.len());
            self.staging.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.staging.len() == self.batch * BLOCK_SIZE {
                self.flush_staged();
            }
        }
    }

    /// Digest the staged whole blocks (and move a partial block to the front). A full batch
    /// of several blocks goes to an idle `--threads` worker when there is one and this
    /// thread is behind (`offload`).
    fn flush_staged(&mut self) {
        let n = self.staging.len() / BLOCK_SIZE * BLOCK_SIZE;
        if n == 0 {
            return;
        }
        if n < offload::GATHER_BELOW * BLOCK_SIZE && offload::gathering() {
            // A small payload: its blocks wait for other payloads' to fill the lanes, in their
            // staging buffer (a payload staged in whole blocks: its next bytes, if any, get a
            // new one), or copied out of it.
            let piece = if n == self.staging.len() {
                STAGING_BYTES.fetch_sub(self.accounted, Ordering::Relaxed);
                self.accounted = 0;
                std::mem::take(&mut self.staging)
            } else {
                let piece = self.staging[..n].to_vec();
                self.staging.copy_within(n.., 0);
                let rest = self.staging.len() - n;
                self.staging.truncate(rest);
                piece
            };
            let count = (n / BLOCK_SIZE) as u8;
            let (job, first) = offload::gather(piece).map_err(|_| ()).expect("gathering is on");
            self.pending.push(Part { job, first: first as u8, count, shared: true });
            return;
        }
        if n == self.staging.len() && n > BLOCK_SIZE {
            // Once a batch is out, the later ones queue behind it (digested here when no
            // worker is idle), so this one waits for the helper only at the payload's end
            // (`finish`; `finish_deferred` does not wait).
            if let Some(pool) = offload::pool().filter(|p| (p.has_idle() && offload::behind()) || !self.pending.is_empty()) {
                let capacity = self.staging.capacity();
                let data = std::mem::take(&mut self.staging);
                let count = (data.len() / BLOCK_SIZE) as u8;
                self.pending.push(Part { job: pool.submit(data), first: 0, count, shared: false });
                self.staging = pool.buffer(capacity);
                return;
            }
        }
        self.resolve_pending();
        let staging = std::mem::take(&mut self.staging);
        self.digest_run(&staging[..n]);
        self.staging = staging;
        self.staging.copy_within(n.., 0);
        let rest = self.staging.len() - n;
        self.staging.truncate(rest);
    }

    /// The digests of the batches handed out, in order (each digested here if nobody took it).
    fn resolve_pending(&mut self) {
        resolve_jobs(&mut self.pending, &mut self.payload, &mut self.blocks);
    }

    /// Digest whole blocks (`run.len()` a multiple of `BLOCK_SIZE`, at most `LANES` blocks).
    fn digest_run(&mut self, run: &[u8]) {
        self.resolve_pending();
        let (payload, blocks) = (&mut self.payload, &mut self.blocks);
        digest_whole(run, |block, digest| push_digest(payload, blocks, block, digest));
    }

    /// Like `finish`, without waiting for blocks other workers are still digesting: when
    /// batches of this payload went to other workers (`offload`), the rest is digested here and
    /// the payload digest is completed later (`PendingDigest::settle`, by the ordered stage).
    ///
    /// `finish` waited at every payload's end for the helpers that had taken its last batches.
    /// On one busy connection with `--threads 2` that wait was the busy worker's only idle time:
    /// perf (2026-11-28) showed every scheduler entry of that worker under this wait, the
    /// helper it waited for having lost its CPU to the third busy thread.
    pub fn finish_deferred(mut self) -> Finished {
        if self.pending.iter().all(|p| p.job.is_done()) {
            return Finished::Ready(self.finish());
        }
        // A full batch joins the others (they are queued, or digested here when the queue is
        // full); what is left is digested here, its digests kept aside until the ones handed
        // out are in.
        let n = self.staging.len() / BLOCK_SIZE * BLOCK_SIZE;
        if n == self.staging.len() && n > BLOCK_SIZE {
            self.flush_staged();
        }
        let mut tail = Vec::new();
        let staging = std::mem::take(&mut self.staging);
        let whole = staging.len() / BLOCK_SIZE * BLOCK_SIZE;
        for run in staging[..whole].chunks(LANES * BLOCK_SIZE) {
            digest_whole(run, |block, digest| tail.push((*digest, block.len() as u32, is_trivial(block))));
        }
        if whole < staging.len() {
            let block = &staging[whole..];
            tail.push((*blake3::hash(block).as_bytes(), block.len() as u32, is_trivial(block)));
        }
        self.staging = staging;
        Finished::Pending(PendingDigest {
            payload: std::mem::take(&mut self.payload),
            blocks: std::mem::take(&mut self.blocks),
            pending: std::mem::take(&mut self.pending),
            tail,
            len: self.len,
        })
    }

    pub fn finish(mut self) -> PayloadDigest {
        self.flush_staged();
        self.resolve_pending();
        if !self.staging.is_empty() {
            let digest = blake3::hash(&self.staging);
            push_digest(&mut self.payload, &mut self.blocks, &self.staging, digest.as_bytes());
        }
        PayloadDigest {
            len: self.len,
            digest: std::mem::take(&mut self.payload).finalize(self.len),
            blocks: std::mem::take(&mut self.blocks),
        }
    }
}

/// The payload digest's input as it grows: the block digests in order, then (`finalize`) the
/// payload's length. The BLAKE3 hasher is made only at a payload's third block, and boxed: a
/// `blake3::Hasher` is 1.9 KB, which every payload's hasher carried and moved (into the
/// message's state, out of `finish_deferred`, ...). A payload of one or two blocks (4 KiB I/O:
/// every payload) keeps its digests here and hashes them in one call at its end: 4% less CPU on
/// 4 KiB I/O with one thread (2.19 -> 2.11 s, 2026-11-28).
#[derive(Default)]
struct DigestInput {
    first: [[u8; 32]; 2],
    held: u8,
    hasher: Option<Box<blake3::Hasher>>,
}

impl DigestInput {
    fn push(&mut self, digest: &[u8; 32]) {
        if let Some(h) = self.hasher.as_mut() {
            h.update(digest);
        } else if usize::from(self.held) < self.first.len() {
            self.first[usize::from(self.held)] = *digest;
            self.held += 1;
        } else {
            let mut h = Box::new(payload_hasher());
            for d in &self.first {
                h.update(d);
            }
            h.update(digest);
            self.hasher = Some(h);
        }
    }

    /// The payload digest of the digests pushed, for a payload of `len` bytes.
    fn finalize(self, len: u64) -> [u8; 32] {
        let len = len.to_le_bytes();
        match self.hasher {
            Some(mut h) => *h.update(&len).finalize().as_bytes(),
            None => {
                let mut h = payload_hasher();
                for d in &self.first[..usize::from(self.held)] {
                    h.update(d);
                }
                *h.update(&len).finalize().as_bytes()
            }
        }
    }
}

/// The digests of `jobs` (batches handed to other workers), in order, into the payload hasher
/// and the block list; each job run here if nobody took it, else waited for.
fn resolve_jobs(jobs: &mut Vec<Part>, payload: &mut DigestInput, blocks: &mut Vec<BlockDigest>) {
    if jobs.is_empty() {
        return;
    }
    let pool = offload::pool();
    for part in jobs.drain(..) {
        let range = usize::from(part.first)..usize::from(part.first + part.count);
        part.job.resolve(pool.as_deref(), range, |digest, trivial| push_block(payload, blocks, digest, BLOCK_SIZE as u32, trivial));
    }
}

/// A payload's digest, complete or still waiting for blocks other workers digest.
pub enum Finished {
    Ready(PayloadDigest),
    Pending(PendingDigest),
}

impl Finished {
    /// The digest (waiting for the other workers' blocks if it must).
    pub fn settle(self) -> PayloadDigest {
        match self {
            Finished::Ready(d) => d,
            Finished::Pending(p) => p.settle(),
        }
    }
}

/// A payload whose last blocks were digested where it was hashed while batches of it were
/// still with other workers (`PayloadHasher::finish_deferred`).
pub struct PendingDigest {
    payload: DigestInput,
    /// Blocks before the batches handed out.
    blocks: Vec<BlockDigest>,
    pending: Vec<Part>,
    /// The blocks after them: full digest, length, trivial.
    tail: Vec<([u8; 32], u32, bool)>,
    len: u64,
}

impl std::fmt::Debug for PendingDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingDigest").field("len", &self.len).field("batches", &self.pending.len()).finish_non_exhaustive()
    }
}

impl PendingDigest {
    /// The jobs its blocks wait in (tests: which payloads were gathered together).
    #[cfg(test)]
    pub(crate) fn jobs(&self) -> Vec<*const offload::HashJob> {
        self.pending.iter().map(|p| std::sync::Arc::as_ptr(&p.job)).collect()
    }

    /// Are all its blocks digested (`settle` will not wait or digest)?
    pub fn is_ready(&self) -> bool {
        self.pending.iter().all(|p| p.job.is_done())
    }

    /// The payload digest: the handed-out batches' digests (each run here if nobody took it,
    /// else waited for), then the rest, as `finish` would have given.
    pub fn settle(mut self) -> PayloadDigest {
        resolve_jobs(&mut self.pending, &mut self.payload, &mut self.blocks);
        for (digest, len, trivial) in std::mem::take(&mut self.tail) {
            push_block(&mut self.payload, &mut self.blocks, &digest, len, trivial);
        }
        PayloadDigest {
            len: self.len,
            digest: std::mem::take(&mut self.payload).finalize(self.len),
            blocks: std::mem::take(&mut self.blocks),
        }
    }
}

impl Drop for PendingDigest {
    fn drop(&mut self) {
        for part in self.pending.drain(..) {
            part.cancel();
        }
    }
}

/// Convenience for whole payloads already in memory (tests, synthetic captures).
pub fn digest_of(payload: &[u8]) -> PayloadDigest {
    let mut h = PayloadHasher::with_len_hint(payload.len() as u64);
    h.update(payload);
    h.finish()
}

/// `out(block, digest)` for each whole block of `run` (at most `LANES`), digested together.
fn digest_whole(run: &[u8], mut out: impl FnMut(&[u8], &[u8; 32])) {
    let mut digests = [[0u8; 32]; LANES];
    let n = run.len() / BLOCK_SIZE;
    batch::digest_blocks(run, &mut digests[..n]);
    for (block, digest) in run.chunks_exact(BLOCK_SIZE).zip(&digests[..n]) {
        out(block, digest);
    }
}

fn push_digest(payload: &mut DigestInput, blocks: &mut Vec<BlockDigest>, block: &[u8], digest: &[u8; 32]) {
    push_block(payload, blocks, digest, block.len() as u32, is_trivial(block));
}

/// A block's digest into the payload digest and the block list (its first 16 bytes kept).
fn push_block(payload: &mut DigestInput, blocks: &mut Vec<BlockDigest>, digest: &[u8; 32], len: u32, trivial: bool) {
    payload.push(digest);
    let mut hash = [0u8; 16];
    hash.copy_from_slice(&digest[..16]);
    blocks.push(BlockDigest { hash, len, trivial });
}

/// All bytes equal. Compares whole strides against a stride filled with the first byte
/// (memcmp-style slice equality, vectorised), so a non-trivial block usually costs one stride.
pub fn is_trivial(block: &[u8]) -> bool {
    let Some(&first) = block.first() else {
        return true;
    };
    let pattern = [first; TRIVIAL_STRIDE];
    let mut strides = block.chunks_exact(TRIVIAL_STRIDE);
    for stride in &mut strides {
        if stride != &pattern[..] {
            return false;
        }
    }
    let rest = strides.remainder();
    rest == &pattern[..rest.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// Deterministic, non-repeating test payload (no block of it is trivial).
    fn sample(n: usize) -> Vec<u8> {
        (0..n).map(|i| ((i * 7 + 3) % 251) as u8).collect()
    }

    /// The construction of the module docs, written out with the blake3 crate directly.
    fn reference(data: &[u8]) -> [u8; 32] {
        let mut h = blake3::Hasher::new_derive_key("smbwire payload digest v1");
        for block in data.chunks(BLOCK_SIZE) {
            h.update(blake3::hash(block).as_bytes());
        }
        h.update(&(data.len() as u64).to_le_bytes());
        *h.finalize().as_bytes()
    }

    #[test]
    fn known_answer_vectors() {
        // Pinned values were computed with the Python `blake3` package (1.0.11) running
        // the script in the module docs, independently of this code.
        let data = sample(10_000);
        let d = digest_of(&data);
        assert_eq!(
            hex(&d.digest),
            "85f1c9b2fdfc7b545c072205c17fe5119817e5ebc783c0fcf2ec1f962db88f55"
        );
        assert_eq!(d.digest, reference(&data));
        assert_eq!(hex(&d.blocks[0].hash), "b473e5eda3434e512b9ca771e67c3158");
        assert_eq!(
            hex(&digest_of(b"abc").digest),
            "934425a285f45c4abe055ccfb7f28640e3846d663b82a839b57219ddbc4812c3"
        );
        assert_eq!(
            hex(&digest_of(b"").digest),
            "f4b16cfdebb2c4ee3d27fafbdd5c3807c33b573b5ca50759b11532adef272127"
        );
    }

    #[test]
    fn blocks_are_aligned_to_payload_start_with_short_last_block() {
        let data = sample(10_000);
        let d = digest_of(&data);
        assert_eq!(d.len, 10_000);
        let lens: Vec<u32> = d.blocks.iter().map(|b| b.len).collect();
        assert_eq!(lens, vec![4096, 4096, 1808]);
        for (b, chunk) in d.blocks.iter().zip(data.chunks(BLOCK_SIZE)) {
            assert_eq!(b.hash[..], blake3::hash(chunk).as_bytes()[..16]);
            assert!(!b.trivial);
        }
        // Exactly one block: no empty trailing block.
        let d = digest_of(&sample(4096));
        assert_eq!(d.blocks.len(), 1);
        assert_eq!(d.blocks[0].len, 4096);
    }

    #[test]
    fn empty_payload_has_no_blocks() {
        let d = PayloadHasher::new().finish();
        assert_eq!(d.len, 0);
        assert!(d.blocks.is_empty());
        assert_eq!(d.digest, reference(&[]));
    }

    #[test]
    fn trivial_blocks() {
        let mut data = vec![0u8; 4096]; // zeros: trivial
        data.extend(std::iter::repeat_n(0xAB, 4096)); // any repeated byte: trivial
        let mut almost = vec![0x11u8; 4096];
        almost[4095] = 0x12; // differs only in the last byte: not trivial
        data.extend(&almost);
        let mut early = vec![0x11u8; 4096];
        early[1] = 0; // differs in the first stride
        data.extend(&early);
        data.extend(std::iter::repeat_n(7u8, 100)); // short last block, trivial
        let d = digest_of(&data);
        let trivial: Vec<bool> = d.blocks.iter().map(|b| b.trivial).collect();
        assert_eq!(trivial, vec![true, true, false, false, true]);
        assert_eq!(d.blocks[4].len, 100);
        // A short last block that is not trivial, with a length not a multiple of the stride.
        let d = digest_of(&[5, 5, 5, 5, 5, 5, 5, 6]);
        assert!(!d.blocks[0].trivial);
        assert!(is_trivial(&[9]));
        for n in [1usize, 63, 64, 65, 127, 4095] {
            let mut v = vec![3u8; n];
            assert!(is_trivial(&v));
            v[n - 1] = 4;
            assert_eq!(is_trivial(&v), n == 1, "len {n}");
        }
    }

    /// Payloads of 1 to 40 blocks (and a tail), in chunks of a wire-size frame, with and
    /// without the length hint: every block digest is BLAKE3 of the block.
    #[test]
    fn batched_blocks_equal_single_hashes() {
        for blocks in [1usize, 2, 15, 16, 17, 33, 40] {
            let data = sample(blocks * BLOCK_SIZE + 123);
            for hint in [None, Some(data.len() as u64), Some(4096)] {
                let mut h = hint.map_or_else(PayloadHasher::new, PayloadHasher::with_len_hint);
                for frame in data.chunks(1448) {
                    h.update(frame);
                }
                let d = h.finish();
                assert_eq!(d.digest, reference(&data), "{blocks} blocks, hint {hint:?}");
                for (b, chunk) in d.blocks.iter().zip(data.chunks(BLOCK_SIZE)) {
                    assert_eq!(b.hash[..], blake3::hash(chunk).as_bytes()[..16]);
                }
            }
            // Whole runs straight from one large slice.
            assert_eq!(digest_of(&data).digest, reference(&data));
        }
    }

    #[test]
    fn byte_at_a_time_matches_whole() {
        let data = sample(3 * 4096 + 17);
        let mut h = PayloadHasher::new();
        for b in &data {
            h.update(std::slice::from_ref(b));
        }
        assert_eq!(h.len(), data.len() as u64);
        assert_eq!(h.finish(), digest_of(&data));
    }

    proptest! {
        #[test]
        fn chunking_does_not_change_digests(
            len in 0usize..20_000,
            seed in any::<u64>(),
            cuts in proptest::collection::vec(0usize..20_000, 0..40),
            hint in proptest::option::of(0u64..200_000),
        ) {
            let mut state = seed | 1;
            let data: Vec<u8> = (0..len).map(|i| {
                state ^= state << 13; state ^= state >> 7; state ^= state << 17;
                // Runs of equal bytes so some blocks are trivial.
                if (i / 4096) % 3 == 1 { 0 } else { state as u8 }
            }).collect();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (len + 1)).collect();
            cuts.push(0);
            cuts.push(len);
            cuts.sort_unstable();
            // The length hint sets the batch (1 to 16 blocks); it may be wrong, as on the wire.
            let mut h = hint.map_or_else(PayloadHasher::new, PayloadHasher::with_len_hint);
            for w in cuts.windows(2) {
                h.update(&data[w[0]..w[1]]);
            }
            let chunked = h.finish();
            prop_assert_eq!(&chunked, &digest_of(&data));
            prop_assert_eq!(chunked.digest, reference(&data));
            prop_assert_eq!(chunked.blocks.len(), len.div_ceil(BLOCK_SIZE));
            for (b, chunk) in chunked.blocks.iter().zip(data.chunks(BLOCK_SIZE)) {
                prop_assert_eq!(b.trivial, chunk.iter().all(|&x| x == chunk[0]));
            }
        }
    }
}
