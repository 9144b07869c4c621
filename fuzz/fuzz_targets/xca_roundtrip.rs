//! Compress then decompress arbitrary bytes with each MS-XCA algorithm: the bytes come back.
//! The first byte chooses a transformation that makes the data repetitive (long matches,
//! LZ77+Huffman blocks beyond 64 KiB).
#![no_main]

use libfuzzer_sys::fuzz_target;
use smbwire_dissectors::smb2::xca::{compress, decompress, Algorithm};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let input: Vec<u8> = match mode % 4 {
        0 => rest.to_vec(),
        // Each byte repeated: runs of every length.
        1 => rest.iter().flat_map(|&b| std::iter::repeat_n(b, 1 + (b as usize % 64))).collect(),
        // The input tiled past one 64 KiB block.
        2 if !rest.is_empty() => rest.iter().cycle().take(70_000 + rest.len()).copied().collect(),
        // Few distinct symbols.
        _ => rest.iter().map(|b| b % 3).collect(),
    };
    for alg in Algorithm::ALL {
        let mut packed = Vec::new();
        compress(alg, &input, &mut packed);
        let mut out = Vec::new();
        decompress(alg, &packed, &mut out, input.len()).unwrap_or_else(|e| panic!("{alg:?}: {e}"));
        assert!(out == input, "{alg:?}: round trip differs");
    }
});
