use super::*;
use proptest::prelude::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn unpack(alg: Algorithm, input: &[u8], max_out: usize) -> Result<Vec<u8>, (XcaError, Vec<u8>)> {
    let mut out = Vec::new();
    match decompress(alg, input, &mut out, max_out) {
        Ok(()) => Ok(out),
        Err(e) => Err((e, out)),
    }
}

fn pack(alg: Algorithm, input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    compress(alg, input, &mut out);
    out
}

fn round_trip(alg: Algorithm, data: &[u8]) {
    let c = pack(alg, data);
    let d = unpack(alg, &c, data.len()).unwrap_or_else(|(e, _)| panic!("{alg:?} {} bytes: {e}", data.len()));
    assert!(d == data, "{alg:?}: {} bytes came back as {} different bytes", data.len(), d.len());
}

// --- The public capture smb311-compress-lz77-lz77huff-lznt1.pcap: three READ responses, each
// an unchained COMPRESSION_TRANSFORM_HEADER (Offset 0, OriginalCompressedSegmentSize 4176)
// whose payload decompresses to the 80-byte SMB2 header + READ response body and 4096 x 'a'.
// The bytes below are the compressed data after the 16-byte header, frame by frame.

/// Frame 1, CompressionAlgorithm 2 (LZ77).
const CAPTURE_LZ77: &str = "b0828800fe534d4240000100010008000a4c000000068a000000fffe009a006d790010a40037001111005000ffffff5f00bf006107000ffffc0f";
/// Frame 2, CompressionAlgorithm 3 (LZ77+Huffman).
const CAPTURE_LZ77_HUFFMAN: &str = "52000005050500005500000000000000000000000000000000000000000000000505000000005000055000000000000050000000000000005000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000555500000000000050000000000000000000000000050000000000050000000000500505000500000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000a0ac08f7a130407b909ea75a9c527906b4757e889b270080fffc0f0000";
/// Frame 3, CompressionAlgorithm 1 (LZNT1).
const CAPTURE_LZNT1: &str = "70b100fe534d424000010011010008000a04900000064102880000fffe00024c750d013c100450081811005000fa00082e61ff017f807f107f107f10ff7f107f107f103f083f043f043f043f04ff3f043f043f043f043f043f043f043f04ff3f043f043f043f043f043f043f043f04ff3f043f043f043f043f043f043f043f04ff3f041f021f011f011f011f011f011f01ff1f011f011f011f011f011f011f011f01ff1f011f011f011f011f011f011f011f01ff1f011f011f011f011f011f011f011f01ff1f011f011f011f011f011f011f011f01ff1f011f011f011f011f011f011f011f01ff1f011f011f011f011f011f011f011f01ff1f011f011f011f011f011f011f011f01ff1f011f011f011f011f011f011f011f01ff1f011f011f011f011f011f011f011f01ff1f011f011f011f011f011f011f011f01ff1f011f011f011f011f011f011f011f01ff1f011f011f011f011f011f011f011f01ff1f011f011f011f011f011f011f011f01031f01100103b002614c00";

/// The first 80 bytes tshark shows for each frame's decompressed message (SMB2 header and
/// READ response fixed part, DataOffset 0x50, DataLength 0x1000); `{id}` is the low byte of
/// the SessionId (0x6d, 0x71, 0x75 in frames 1, 2, 3).
const CAPTURE_READ_HEADER: &str = "fe534d4240000100000000000800 0a00 0100000000000000 0600000000000000 fffe000001000000 {id}00000000100000 0000000000000000 0000000000000000 1100500000100000 0000000000000000";

fn check_capture_read(alg: Algorithm, compressed: &str, id: &str) {
    let out = unpack(alg, &hex(compressed), 4176).unwrap_or_else(|(e, _)| panic!("{alg:?}: {e}"));
    assert_eq!(out.len(), 4176, "{alg:?}");
    let header = hex(&CAPTURE_READ_HEADER.replace("{id}", id));
    assert_eq!(out[..0x50], header[..], "{alg:?}");
    assert!(out[0x50..].iter().all(|&b| b == b'a'), "{alg:?}");
    // With a larger cap the stream still ends at the same place.
    assert_eq!(unpack(alg, &hex(compressed), 1 << 20).unwrap(), out, "{alg:?}");
}

#[test]
fn capture_lznt1_read_response() {
    check_capture_read(Algorithm::Lznt1, CAPTURE_LZNT1, "75");
}

#[test]
fn capture_lz77_read_response() {
    check_capture_read(Algorithm::Lz77, CAPTURE_LZ77, "6d");
}

#[test]
fn capture_lz77_huffman_read_response() {
    check_capture_read(Algorithm::Lz77Huffman, CAPTURE_LZ77_HUFFMAN, "71");
}

/// smb311-compress-chained-patternv1-lznt1.pcapng frame 1, a chained WRITE request: its first
/// payload is LZNT1 with OriginalPayloadSize 0x70 (the SMB2 header and WRITE fixed part), at
/// message offset 20, 0x54 bytes; the second is Pattern_V1 (0xaa x 256).
#[test]
fn capture_chained_lznt1_write_header() {
    let msg = hex("fc534d4270010000010001005800000070000000 51b000fe534d4240000100b501000900700800380100040018110100fffe000054000005000800140238000064 00c2890690655e1f74001f9d2a29145bc2310c00700340040018 0c01001e0e000e0124010e0d00 040000000800 0000aa00000000010000");
    let lznt1 = &msg[20..20 + 0x54];
    let out = unpack(Algorithm::Lznt1, lznt1, 0x70).unwrap();
    // tshark's decompressed message, first 0x70 bytes (header: WRITE, MessageId 8; body:
    // StructureSize 49, DataOffset 0x70, Length 0x100).
    let expect = hex("fe534d424000010000000000090001000800000000000000 0400000000000000 fffe000001000000 0508001402380000 64c2890690655e1f741f9d2a29145bc2 3100700000010000 0000000000000000 180c01000e000000 010000000e000000 0000000000000000 0000000000000000");
    assert_eq!(out, expect);
}

// --- The MS-XCA examples (§3.1 Plain LZ77 examples): input and compressed bytes.

#[test]
fn spec_plain_lz77_examples() {
    let alphabet = b"abcdefghijklmnopqrstuvwxyz";
    let mut c = hex("3f000000");
    c.extend_from_slice(alphabet);
    assert_eq!(pack(Algorithm::Lz77, alphabet), c);
    assert_eq!(unpack(Algorithm::Lz77, &c, 26).unwrap(), alphabet);

    let abc: Vec<u8> = b"abc".repeat(100);
    let c = hex("ffffff1f 616263 1700 0f ff 2601");
    assert_eq!(pack(Algorithm::Lz77, &abc), c);
    assert_eq!(unpack(Algorithm::Lz77, &c, 300).unwrap(), abc);
}

// --- Hostile input.

/// A few bytes that claim megabytes: each algorithm stops at the cap with OutputLimit and
/// has written exactly the cap, nothing beyond.
#[test]
fn decompression_bomb_is_capped() {
    let zeros = vec![0u8; 16 << 20];
    for alg in Algorithm::ALL {
        let bomb = pack(alg, &zeros);
        assert!(bomb.len() < zeros.len() / 100, "{alg:?}: {} bytes", bomb.len());
        let cap = 100_000;
        let (e, out) = unpack(alg, &bomb, cap).unwrap_err();
        assert_eq!(e, XcaError::OutputLimit, "{alg:?}");
        assert_eq!(out.len(), cap, "{alg:?}");
        // Appending after existing bytes: the cap counts this call's bytes only.
        let mut out = vec![7u8; 10];
        assert_eq!(decompress(alg, &bomb, &mut out, cap), Err(XcaError::OutputLimit));
        assert_eq!(out.len(), 10 + cap);
    }
    // Plain LZ77's 32-bit length form: one 4 GiB match in 15 bytes.
    let bomb = hex("00000040 61 0700 0f ff 0000 ffffffff");
    let (e, out) = unpack(Algorithm::Lz77, &bomb, 1 << 20).unwrap_err();
    assert_eq!((e, out.len()), (XcaError::OutputLimit, 1 << 20));
}

#[test]
fn back_reference_before_the_output_is_refused() {
    // LZ77: a match first (offset 1, nothing written yet).
    assert_eq!(unpack(Algorithm::Lz77, &hex("00000080 0000"), 100).unwrap_err().0, XcaError::BadOffset);
    // LZNT1: a copy token as the chunk's first item.
    assert_eq!(unpack(Algorithm::Lznt1, &hex("02b0 01 0000"), 100).unwrap_err().0, XcaError::BadOffset);
    // A references into bytes `out` held before this call is refused too.
    let mut out = b"xyz".to_vec();
    assert_eq!(decompress(Algorithm::Lz77, &hex("00000080 1000"), &mut out, 100), Err(XcaError::BadOffset));
}

#[test]
fn malformed_streams_are_named() {
    // LZNT1: bad signature, chunk longer than the input, a lone byte.
    assert_eq!(unpack(Algorithm::Lznt1, &hex("0080 00"), 100).unwrap_err().0, XcaError::BadChunk);
    assert_eq!(unpack(Algorithm::Lznt1, &hex("0fb0 00"), 100).unwrap_err().0, XcaError::Truncated);
    assert_eq!(unpack(Algorithm::Lznt1, &hex("01"), 100).unwrap_err().0, XcaError::Truncated);
    // A zero header ends the stream; what follows is not read.
    assert_eq!(unpack(Algorithm::Lznt1, &hex("0030 41 0000 ffff"), 100).unwrap(), b"A");
    // LZ77: a match token cut in half; a 16-bit length below its minimum.
    assert_eq!(unpack(Algorithm::Lz77, &hex("00000040 61 00"), 100).unwrap_err().0, XcaError::Truncated);
    assert_eq!(unpack(Algorithm::Lz77, &hex("00000040 61 0700 0f ff 0500"), 100).unwrap_err().0, XcaError::BadLength);
    // LZ77+Huffman: a table without codes; a table cut short; an over-subscribed table.
    assert_eq!(unpack(Algorithm::Lz77Huffman, &[0u8; 260], 100).unwrap_err().0, XcaError::BadHuffmanTable);
    assert_eq!(unpack(Algorithm::Lz77Huffman, &[0x11u8; 100], 100).unwrap_err().0, XcaError::Truncated);
    assert_eq!(unpack(Algorithm::Lz77Huffman, &[0x11u8; 300], 100).unwrap_err().0, XcaError::BadHuffmanTable);
    // An incomplete table (one 1-bit code for 'a') and bits that hit the missing half.
    let mut t = vec![0u8; 256];
    t[0x61 / 2] = 0x10;
    t.extend_from_slice(&hex("0000 0080"));
    assert_eq!(unpack(Algorithm::Lz77Huffman, &t, 100).unwrap_err().0, XcaError::BadHuffmanCode);
}

#[test]
fn algorithm_ids() {
    for a in Algorithm::ALL {
        assert_eq!(Algorithm::from_u16(a.to_u16()), Some(a));
    }
    assert_eq!(Algorithm::from_u16(0), None);
    assert_eq!(Algorithm::from_u16(4), None);
    assert_eq!(Algorithm::from_u16(5), None);
}

// --- Round trips.

#[test]
fn round_trip_edges() {
    for alg in Algorithm::ALL {
        round_trip(alg, b"");
        round_trip(alg, b"a");
        round_trip(alg, b"aaa");
        round_trip(alg, &[0u8; 4096]);
        round_trip(alg, &[0u8; 4097]);
        round_trip(alg, &vec![0u8; 65536]);
        round_trip(alg, &vec![0u8; 65537]);
        round_trip(alg, &vec![0x55u8; 3 * 65536]);
        // Long matches of every length form.
        for n in [7 + 3, 22 + 3, 22 + 3 + 254, 22 + 3 + 255, 70_000, 300_000] {
            let mut v = b"xyz".to_vec();
            v.extend(std::iter::repeat_n(b'q', n));
            v.extend_from_slice(b"tail");
            round_trip(alg, &v);
        }
    }
}

fn lcg_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect()
}

#[test]
fn round_trip_large_mixed() {
    // Text-like data with repeats far apart (beyond LZ77's 8 KiB and LZNT1's 4 KiB windows),
    // and random data that does not compress.
    let mut v = Vec::new();
    let words: Vec<Vec<u8>> = (0..200).map(|i| lcg_bytes(i, 3 + (i as usize % 9))).collect();
    let mut x = 1u64;
    while v.len() < 300_000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        v.extend_from_slice(&words[(x >> 40) as usize % words.len()]);
    }
    v.extend(lcg_bytes(99, 100_000));
    for alg in Algorithm::ALL {
        round_trip(alg, &v);
        let c = pack(alg, &v);
        assert!(c.len() < v.len(), "{alg:?} did not compress: {} -> {}", v.len(), c.len());
    }
}

fn data_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..3000),
        // Few symbols: many matches of all lengths and offsets.
        proptest::collection::vec(0u8..3, 0..20_000),
        // Runs of random length, some longer than a block.
        proptest::collection::vec((any::<u8>(), 1usize..3000), 0..60).prop_map(|runs| {
            runs.into_iter().flat_map(|(b, n)| std::iter::repeat_n(b, n)).collect()
        }),
        (any::<u64>(), 60_000usize..140_000, 1usize..64).prop_map(|(seed, n, period)| {
            let base = lcg_bytes(seed, period);
            let mut v: Vec<u8> = base.iter().cycle().take(n).copied().collect();
            for (i, b) in lcg_bytes(seed ^ 1, n / 97).into_iter().enumerate() {
                v[(i * 97 + b as usize) % n] = b;
            }
            v
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_lznt1(data in data_strategy()) {
        round_trip(Algorithm::Lznt1, &data);
    }

    #[test]
    fn round_trip_lz77(data in data_strategy()) {
        round_trip(Algorithm::Lz77, &data);
    }

    #[test]
    fn round_trip_lz77_huffman(data in data_strategy()) {
        round_trip(Algorithm::Lz77Huffman, &data);
    }

    /// Arbitrary bytes never panic, and never write past the cap.
    #[test]
    fn hostile_input_is_bounded(input in proptest::collection::vec(any::<u8>(), 0..2000), cap in 0usize..100_000) {
        for alg in Algorithm::ALL {
            let mut out = Vec::new();
            let _ = decompress(alg, &input, &mut out, cap);
            prop_assert!(out.len() <= cap);
        }
    }

    /// A valid stream cut short or with a flipped byte is refused or decoded, never a panic.
    #[test]
    fn damaged_streams_are_bounded(data in proptest::collection::vec(0u8..4, 1..5000), cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>()) {
        for alg in Algorithm::ALL {
            let mut c = pack(alg, &data);
            let i = flip.index(c.len());
            c[i] ^= 0x5a;
            c.truncate(cut.index(c.len()) + 1);
            let mut out = Vec::new();
            let _ = decompress(alg, &c, &mut out, data.len() * 2);
            prop_assert!(out.len() <= data.len() * 2);
        }
    }
}

/// Windows-made LZ77+Huffman vectors (`vectors/`, from Samba's test data: made with the Windows
/// Compression API; 36 of the 61 decompress to more than one 64 KiB block, several code symbol 256 as
/// a match mid-stream): every stream decompresses to the length and SHA-256 in `SHA256SUMS`.
#[test]
fn windows_vectors_decompress_byte_for_byte() {
    use sha2::{Digest, Sha256};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/smb2/xca/vectors");
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    let mut bad = Vec::new();
    let (mut n, mut multi) = (0, 0);
    for line in sums.lines() {
        let mut it = line.split_whitespace();
        let (name, len, sum) = (it.next().unwrap(), it.next().unwrap().parse::<usize>().unwrap(), it.next().unwrap());
        let c = std::fs::read(dir.join(name)).unwrap();
        n += 1;
        if len > 65536 {
            multi += 1;
        }
        match unpack(Algorithm::Lz77Huffman, &c, len) {
            Ok(d) if d.len() == len && format!("{:x}", Sha256::digest(&d)) == sum => {}
            Ok(d) => bad.push(format!("{name}: {} of {len} bytes, wrong digest", d.len())),
            Err((e, d)) => bad.push(format!("{name}: {e} after {} of {len} bytes", d.len())),
        }
    }
    assert_eq!((n, multi), (61, 36));
    assert!(bad.is_empty(), "{} of {n} failed:\n{}", bad.len(), bad.join("\n"));
}


/// A table of 512 4-bit code lengths with these (symbol, length) pairs.
fn huffman_table(codes: &[(usize, u8)]) -> Vec<u8> {
    let mut t = vec![0u8; 256];
    for &(sym, len) in codes {
        t[sym / 2] |= len << (4 * (sym % 2));
    }
    t
}

/// 65536 x 'a' then 'b', as MS-XCA §2.2.4 lays out two blocks: block 1 (table: 'a' and symbol
/// 271 = match offset 1, long length, 1 bit each) is 'a' + a 65535-byte match (extra length
/// bytes ff, u16 65532); the output reaches BlockEnd, so the next table is read at the current
/// input position (after the two read-ahead words and the three length bytes); block 2 (table:
/// 'b' and 256, 1 bit each) is 'b' + end of stream.
fn two_block_stream() -> Vec<u8> {
    let mut s = huffman_table(&[(b'a' as usize, 1), (271, 1)]);
    s.extend_from_slice(&[0x00, 0x40, 0x00, 0x00, 0xff, 0xfc, 0xff]); // bits 0 1, then zeros
    s.extend(huffman_table(&[(b'b' as usize, 1), (256, 1)]));
    s.extend_from_slice(&[0x00, 0x40, 0x00, 0x00]);
    s
}

/// The same 65537 bytes coded as if the whole stream were one block (one table: 'a', 'b', 256,
/// 271 with 2 bits each; bits a, match, b, end of stream = 00 11 01 10). Not a valid
/// multi-block stream: output passes 65536 bytes and no second table follows.
fn one_table_stream() -> Vec<u8> {
    let mut s = huffman_table(&[(b'a' as usize, 2), (b'b' as usize, 2), (256, 2), (271, 2)]);
    s.extend_from_slice(&[0x00, 0x36, 0x00, 0x00, 0xff, 0xfc, 0xff]);
    s
}

#[test]
fn block_transition_reads_the_next_table_after_the_read_ahead() {
    let mut want = vec![b'a'; 65536];
    want.push(b'b');
    assert_eq!(unpack(Algorithm::Lz77Huffman, &two_block_stream(), want.len()).unwrap(), want);
    // Our compressor lays out the same data the same way: block 2's table right after block 1's
    // last read-ahead word (and any length bytes).
    let ours = pack(Algorithm::Lz77Huffman, &want);
    let first_block_end = ours.len() - 256 - 4;
    assert_eq!(&ours[first_block_end..first_block_end + 256], &huffman_table(&[(b'b' as usize, 1), (256, 1)])[..]);
    assert_eq!(unpack(Algorithm::Lz77Huffman, &ours, want.len()).unwrap(), want);
    // A one-table stream (what tshark 4.0 decodes, tests/oracle) stops at the block boundary:
    // what follows is no table, so 'b' is never produced.
    let got = unpack(Algorithm::Lz77Huffman, &one_table_stream(), want.len()).unwrap_or_else(|(_, d)| d);
    assert_eq!(got.len(), 65536);
}
