//! MS-XCA Lznt1 decompression of arbitrary bytes: no panic, never more than the cap written.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smbwire_dissectors::smb2::xca::{decompress, Algorithm};

/// Small enough to keep runs fast, large enough for several LZ77+Huffman blocks.
const CAP: usize = 1 << 18;

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    let _ = decompress(Algorithm::Lznt1, data, &mut out, CAP);
    assert!(out.len() <= CAP);
});
