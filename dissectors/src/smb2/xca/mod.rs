//! MS-XCA compression algorithms used by SMB 3.1.1 compression (MS-SMB2 §2.2.42, §3.1.4.4,
//! §3.1.5.3): LZNT1 (MS-XCA §2.5), Plain LZ77 (§2.3/2.4) and LZ77+Huffman (§2.1/2.2).
//!
//! Decompression is for hostile input: the output is capped by the caller (`max_out`), a
//! back-reference may not reach before the start of this call's output, every malformed
//! stream ends with a named `XcaError` (an anomaly, `smb2.decompress_*`), never a panic.
//! Time is linear in input plus output: overlapping matches are copied by doubling runs,
//! non-overlapping ones as one slice copy.
//!
//! Compression is a correct, simple greedy hash-chain LZ (not Windows' byte-exact output):
//! for the synthesizer and for round-trip tests.
//!
//! End of stream: LZNT1 ends at the input's end or a zero chunk header; Plain LZ77 at the
//! input's end where a token would start; LZ77+Huffman at the end-of-stream symbol (256) once
//! the input is used up, or once the output reaches `max_out` (pass the expected size, e.g.
//! OriginalPayloadSize, as `max_out`: MS-XCA §2.2.4 ends on the expected size).

mod lz77;
mod lz77_huffman;
mod lznt1;
mod matcher;

#[cfg(test)]
mod tests;

crate::anomaly::anomalies! {
    /// Why a compressed stream was refused. Each is an anomaly name (docs/json-schema.md).
    pub enum XcaError {
        /// The input ends inside a token, a chunk or a Huffman table.
        Truncated = "smb2.decompress_truncated",
        /// A back-reference reaches before the start of the output (or of the LZNT1 chunk).
        BadOffset = "smb2.decompress_bad_offset",
        /// The decompressed bytes would exceed the caller's cap (a decompression bomb, or more
        /// than the header's OriginalPayloadSize); the output stops at the cap.
        OutputLimit = "smb2.decompress_output_limit",
        /// An extended match length below its own minimum (MS-XCA §2.2.4, §2.4.4).
        BadLength = "smb2.decompress_bad_length",
        /// An LZNT1 chunk header without the 0b011 signature, or a chunk decompressing to more
        /// than 4096 bytes (MS-XCA §2.5.1).
        BadChunk = "smb2.decompress_bad_chunk",
        /// An LZ77+Huffman code-length table that is empty or over-subscribed.
        BadHuffmanTable = "smb2.decompress_bad_huffman_table",
        /// Bits that match no code of an incomplete LZ77+Huffman table.
        BadHuffmanCode = "smb2.decompress_bad_huffman_code",
        /// A CompressionAlgorithm this module does not implement (NONE, Pattern_V1 and LZ4 are
        /// not MS-XCA LZ algorithms; for the transform-header code to raise).
        UnsupportedAlgorithm = "smb2.decompress_unsupported_algorithm",
    }
}

impl std::fmt::Display for XcaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for XcaError {}

/// The MS-XCA algorithms of MS-SMB2 §2.2.3.1.3 CompressionAlgorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Lznt1,
    Lz77,
    Lz77Huffman,
}

impl Algorithm {
    pub const ALL: [Algorithm; 3] = [Algorithm::Lznt1, Algorithm::Lz77, Algorithm::Lz77Huffman];

    /// From the CompressionAlgorithm field (1, 2, 3); `None` for NONE, Pattern_V1, LZ4 and
    /// unknown values.
    pub fn from_u16(v: u16) -> Option<Algorithm> {
        match v {
            0x0001 => Some(Algorithm::Lznt1),
            0x0002 => Some(Algorithm::Lz77),
            0x0003 => Some(Algorithm::Lz77Huffman),
            _ => None,
        }
    }

    pub fn to_u16(self) -> u16 {
        match self {
            Algorithm::Lznt1 => 0x0001,
            Algorithm::Lz77 => 0x0002,
            Algorithm::Lz77Huffman => 0x0003,
        }
    }

    /// The name used by the synthesizer's spec and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Lznt1 => "lznt1",
            Algorithm::Lz77 => "lz77",
            Algorithm::Lz77Huffman => "lz77huffman",
        }
    }
}

/// Appends the decompressed bytes of `input` to `out`; never more than `max_out` bytes in all
/// (a decompression bomb stops with `XcaError::OutputLimit`, nothing beyond the cap is
/// written). On an error, `out` keeps what was decompressed before it.
pub fn decompress(alg: Algorithm, input: &[u8], out: &mut Vec<u8>, max_out: usize) -> Result<(), XcaError> {
    let mut sink = Sink::new(out, max_out);
    match alg {
        Algorithm::Lznt1 => lznt1::decompress(input, &mut sink),
        Algorithm::Lz77 => lz77::decompress(input, &mut sink),
        Algorithm::Lz77Huffman => lz77_huffman::decompress(input, &mut sink),
    }
}

/// A correct (not necessarily optimal) compressor for each algorithm, for the synthesizer and
/// tests. Appends to `out`.
pub fn compress(alg: Algorithm, input: &[u8], out: &mut Vec<u8>) {
    match alg {
        Algorithm::Lznt1 => lznt1::compress(input, out),
        Algorithm::Lz77 => lz77::compress(input, out),
        Algorithm::Lz77Huffman => lz77_huffman::compress(input, out),
    }
}

/// The capped output of one decompression: literals and back-references, bounds-checked.
pub(crate) struct Sink<'a> {
    out: &'a mut Vec<u8>,
    /// `out.len()` when this decompression started: no reference reaches before it.
    start: usize,
    /// `out.len()` may not exceed this.
    limit: usize,
}

impl<'a> Sink<'a> {
    fn new(out: &'a mut Vec<u8>, max_out: usize) -> Sink<'a> {
        let start = out.len();
        Sink { out, start, limit: start.saturating_add(max_out) }
    }

    /// Bytes written by this decompression so far.
    #[inline]
    fn written(&self) -> usize {
        self.out.len() - self.start
    }

    #[inline]
    fn at_limit(&self) -> bool {
        self.out.len() >= self.limit
    }

    #[inline]
    fn literal(&mut self, b: u8) -> Result<(), XcaError> {
        if self.out.len() >= self.limit {
            return Err(XcaError::OutputLimit);
        }
        self.out.push(b);
        Ok(())
    }

    /// Copies input bytes as they are, up to the cap.
    fn raw(&mut self, b: &[u8]) -> Result<(), XcaError> {
        let room = self.limit - self.out.len();
        if b.len() > room {
            self.out.extend_from_slice(&b[..room]);
            return Err(XcaError::OutputLimit);
        }
        self.out.extend_from_slice(b);
        Ok(())
    }

    /// Copies `len` bytes from `offset` bytes back, where the reference may reach back at most
    /// `window` bytes (the bytes this decompression, or this chunk, wrote). Overlapping copies
    /// repeat the period by doubling runs, so time is linear in `len`.
    #[inline]
    fn copy_match(&mut self, offset: usize, len: usize, window: usize) -> Result<(), XcaError> {
        if offset == 0 || offset > window {
            return Err(XcaError::BadOffset);
        }
        let room = self.limit - self.out.len();
        let (n, capped) = if len > room { (room, true) } else { (len, false) };
        let src = self.out.len() - offset;
        if offset >= n {
            self.out.extend_from_within(src..src + n);
        } else {
            self.out.reserve(n);
            let mut left = n;
            while left > 0 {
                let run = left.min(self.out.len() - src);
                self.out.extend_from_within(src..src + run);
                left -= run;
            }
        }
        if capped {
            Err(XcaError::OutputLimit)
        } else {
            Ok(())
        }
    }
}
