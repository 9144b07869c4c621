//! Decompression end to end in the stream: WRITEs compressed with the engine's own MS-XCA
//! compressors (unchained with an uncompressed prefix, chained NONE + LZ + Pattern_V1),
//! compressed inside encrypted, a bomb, a gap.
use super::*;
use crate::smb2::crypto::{self, Cipher, KeyEntry, KeyTable};
use crate::smb2::xca;
use std::sync::Arc;

/// Unchained COMPRESSION_TRANSFORM (§2.2.42.1): the first `offset` bytes of `plain` raw.
fn unchained(alg: xca::Algorithm, plain: &[u8], offset: usize) -> Vec<u8> {
    let mut m = vec![0xFC, b'S', b'M', b'B'];
    m.extend_from_slice(&((plain.len() - offset) as u32).to_le_bytes());
    m.extend_from_slice(&alg.to_u16().to_le_bytes());
    m.extend_from_slice(&0u16.to_le_bytes());
    m.extend_from_slice(&(offset as u32).to_le_bytes());
    m.extend_from_slice(&plain[..offset]);
    xca::compress(alg, &plain[offset..], &mut m);
    m
}

/// Chained (§2.2.42.2): NONE for the first `head` bytes, `alg` for the middle, and a
/// Pattern_V1 run of `tail` bytes of value `fill`.
fn chained(alg: xca::Algorithm, plain: &[u8], head: usize, tail: usize, fill: u8) -> Vec<u8> {
    let mut m = vec![0xFC, b'S', b'M', b'B'];
    m.extend_from_slice(&((plain.len()) as u32).to_le_bytes());
    let payload = |m: &mut Vec<u8>, a: u16, body: &[u8], orig: Option<u32>| {
        m.extend_from_slice(&a.to_le_bytes());
        m.extend_from_slice(&1u16.to_le_bytes());
        m.extend_from_slice(&((body.len() + orig.map_or(0, |_| 4)) as u32).to_le_bytes());
        if let Some(o) = orig {
            m.extend_from_slice(&o.to_le_bytes());
        }
        m.extend_from_slice(body);
    };
    payload(&mut m, 0, &plain[..head], None);
    let mid = &plain[head..plain.len() - tail];
    let mut c = Vec::new();
    xca::compress(alg, mid, &mut c);
    payload(&mut m, alg.to_u16(), &c, Some(mid.len() as u32));
    let mut pat = vec![fill, 0, 0, 0];
    pat.extend_from_slice(&(tail as u32).to_le_bytes());
    payload(&mut m, 4, &pat, None);
    m
}

fn plain_write(payload: &[u8]) -> Vec<u8> {
    write_req(11, [5; 16], 8192, payload, false, 0)
}

fn reference(plain: &[u8]) -> SendRecord {
    let mut h = Harness::default();
    let nb = netbios(plain);
    let mut s = one_stream(&mut h, &[&nb]);
    // The stream's first message is handed on once confirmed, or at the stream's end.
    s.on_close(&ctx(0), &mut h.parts());
    h.rec.sends[0].clone()
}

#[test]
fn compressed_writes_are_hashed_on_their_decompressed_bytes() {
    // Compressible but not trivial: 4 KiB blocks of a repeating 300-byte pattern.
    let payload: Vec<u8> = (0..40_000u32).map(|i| (i % 300) as u8 ^ 0x5A).collect();
    let mut plain = plain_write(&payload);
    plain.extend_from_slice(&[0u8; 512]);
    plain.truncate(112 + payload.len());
    let want = reference(&plain);
    for alg in xca::Algorithm::ALL {
        for (what, msg) in [("unchained", unchained(alg, &plain, 112)), ("chained", chained(alg, &plain, 112, 4000, 0x5A))] {
            // The chained Pattern_V1 tail must reproduce the plain tail for the digests to agree.
            let mut expect_plain = plain.clone();
            if what == "chained" {
                let n = expect_plain.len();
                expect_plain[n - 4000..].fill(0x5A);
            }
            let want = if what == "chained" { reference(&expect_plain) } else { want.clone() };
            let wire = netbios(&msg);
            assert!(wire.len() < plain.len() / 2, "{what} {}: compressed to {}", alg.name(), wire.len());
            let mut h = Harness::default();
            let (a, b) = wire.split_at(wire.len() / 2);
            let mut st = one_stream(&mut h, &[a, b]);
            st.on_close(&ctx(9), &mut h.parts());
            let s = &h.smb.stats;
            let ctx_s = format!("{what} {}", alg.name());
            assert_eq!((s.compressed_messages, s.decompressed_messages, s.decompress_failed), (1, 1, 0), "{ctx_s}");
            assert_eq!(h.rec.sends.len(), 1, "{ctx_s}");
            let got = &h.rec.sends[0];
            assert_eq!(got.digest, want.digest, "{ctx_s}");
            assert_eq!((got.offset, got.message_id, got.first_frame.number, got.last_frame.number), (8192, 11, 1, 2), "{ctx_s}");
            assert_eq!(s.decompressed_payload_bytes, payload.len() as u64);
            assert_eq!(s.decompressed_bytes, plain.len() as u64);
            assert_eq!(h.accounting.get(cat::SMB_DECOMPRESSED), (wire.len() - 4) as u64);
            assert_eq!(smb_categories(&h), h.fed, "{ctx_s}");
            assert!(h.anomalies.iter().next().is_none(), "{ctx_s}: {:?}", h.anomalies.iter().collect::<Vec<_>>());
        }
    }
}

#[test]
fn compressed_inside_encrypted_is_decrypted_then_decompressed() {
    let payload: Vec<u8> = (0..20_000u32).map(|i| (i % 97) as u8).collect();
    let plain = plain_write(&payload);
    let comp = unchained(xca::Algorithm::Lz77, &plain, 0);
    let key = vec![3u8; 16];
    let mut hdr = vec![0u8; crypto::TRANSFORM_LEN];
    hdr[0..4].copy_from_slice(&[0xFD, b'S', b'M', b'B']);
    hdr[20..31].copy_from_slice(&[1; 11]);
    hdr[36..40].copy_from_slice(&(comp.len() as u32).to_le_bytes());
    hdr[42] = 1;
    hdr[44..52].copy_from_slice(&0x77u64.to_le_bytes());
    let mut body = comp.clone();
    let tag = crypto::encrypt(Cipher::Aes128Ccm, &key, &hdr, &mut body).unwrap();
    hdr[4..20].copy_from_slice(&tag);
    hdr.extend_from_slice(&body);
    let mut t = KeyTable::default();
    t.insert(0x77, KeyEntry { session_key: None, server_to_client: Some(key.clone()), client_to_server: Some(key) });
    let mut h = Harness { smb: SmbState::default().with_keys(Arc::new(t)), ..Harness::default() };
    let wire = netbios(&hdr);
    one_stream(&mut h, &[&wire]);
    let s = &h.smb.stats;
    assert_eq!((s.decrypted_messages, s.compressed_messages, s.decompressed_messages), (1, 1, 1));
    assert_eq!(h.rec.sends.len(), 1);
    assert_eq!(h.rec.sends[0].digest, reference(&plain).digest);
    // The transform header is metadata, the compressed plaintext smb_decompressed.
    assert_eq!(h.accounting.get(cat::SMB_DECOMPRESSED), comp.len() as u64);
    assert_eq!(smb_categories(&h), h.fed);
}

#[test]
fn bombs_damage_and_gaps_stay_compressed() {
    let payload = vec![7u8; 30_000];
    let plain = plain_write(&payload);
    let good = netbios(&unchained(xca::Algorithm::Lznt1, &plain, 0));
    // A declared size past the connection's bound (no NEGOTIATE: 8 MiB + 1 MiB).
    let mut bomb = unchained(xca::Algorithm::Lznt1, &plain, 0);
    bomb[4..8].copy_from_slice(&(64u32 << 20).to_le_bytes());
    // Damaged compressed data.
    let mut damaged = unchained(xca::Algorithm::Lz77Huffman, &plain, 0);
    for b in damaged[16..].iter_mut().take(300) {
        *b = 0xFF;
    }
    // LZ4 is not implemented.
    let mut lz4 = unchained(xca::Algorithm::Lznt1, &plain, 0);
    lz4[8..10].copy_from_slice(&5u16.to_le_bytes());
    let mut h = Harness::default();
    let (b, d, l) = (netbios(&bomb), netbios(&damaged), netbios(&lz4));
    one_stream(&mut h, &[&b, &d, &l, &good]);
    let s = &h.smb.stats;
    assert_eq!((s.compressed_messages, s.decompressed_messages, s.decompress_failed), (4, 1, 3));
    assert_eq!(h.anomalies.get("smb2.decompress_output_limit"), 1);
    assert_eq!(h.anomalies.get("smb2.decompress_unsupported_algorithm"), 1);
    assert_eq!(h.rec.sends.len(), 1);
    assert_eq!(h.accounting.get(cat::SMB_COMPRESSED), (b.len() + d.len() + l.len() - 12) as u64);
    assert_eq!(smb_categories(&h), h.fed);
    // A gap inside a compressed message: what arrived stays smb_compressed, framing survives.
    let mut h = Harness::default();
    let mut st = Smb2Stream::new(1, true, addr(1, 50000), addr(2, 445));
    h.fed += 40;
    st.on_message(&good[..40], &ctx(1), &mut h.parts());
    st.on_gap(10, &ctx(2), &mut h.parts());
    h.fed += (good.len() - 50 + good.len()) as u64;
    st.on_message(&good[50..], &ctx(3), &mut h.parts());
    st.on_message(&good, &ctx(4), &mut h.parts());
    assert_eq!((h.smb.stats.decompressed_messages, h.rec.sends.len()), (1, 1));
    assert_eq!(h.accounting.get(cat::SMB_COMPRESSED), (good.len() - 10 - 4) as u64);
    assert_eq!(smb_categories(&h), h.fed);
}

#[test]
fn buffering_budget_is_shared_bounded_and_given_back() {
    let plain = plain_write(&data(10_000, 4));
    let msg = netbios(&unchained(xca::Algorithm::Lz77, &plain, 0));
    let mut h = Harness::default();
    // Gap and close release what was held.
    let mut st = Smb2Stream::new(1, true, addr(1, 50000), addr(2, 445));
    st.on_message(&msg[..100], &ctx(1), &mut h.parts());
    assert_eq!(h.smb.opening_bytes, (msg.len() - 4) as u64);
    st.on_gap(10, &ctx(2), &mut h.parts());
    assert_eq!(h.smb.opening_bytes, 0);
    st.on_message(&msg[110..], &ctx(3), &mut h.parts());
    st.on_message(&msg[..100], &ctx(4), &mut h.parts());
    st.on_close(&ctx(5), &mut h.parts());
    assert_eq!(h.smb.opening_bytes, 0);
    // Other streams hold (almost) all of it: the message is not opened, and counted.
    h.smb.opening_bytes = crate::smb2::state::OPENING_CAP - 100;
    let mut h2 = Harness { smb: std::mem::take(&mut h.smb), ..Harness::default() };
    one_stream(&mut h2, &[&msg]);
    assert_eq!(h2.anomalies.get("smb2.open_budget_exceeded"), 1);
    assert_eq!((h2.smb.stats.decompressed_messages, h2.smb.stats.decompress_failed), (0, 1));
    assert_eq!(h2.accounting.get(cat::SMB_COMPRESSED), (msg.len() - 4) as u64);
    assert_eq!(smb_categories(&h2), h2.fed);
    assert_eq!(h2.smb.opening_bytes, crate::smb2::state::OPENING_CAP - 100);
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    /// An encrypted (key known) compressed WRITE, then a plain one.
    fn stream_bytes() -> (Vec<u8>, SmbState) {
        let plain = plain_write(&data(3000, 2));
        let comp = unchained(xca::Algorithm::Lz77Huffman, &plain, 64);
        let key = vec![9u8; 16];
        let mut m = vec![0u8; crypto::TRANSFORM_LEN];
        m[0..4].copy_from_slice(&[0xFD, b'S', b'M', b'B']);
        m[36..40].copy_from_slice(&(comp.len() as u32).to_le_bytes());
        m[44..52].copy_from_slice(&0x55u64.to_le_bytes());
        let mut body = comp.clone();
        let tag = crypto::encrypt(Cipher::Aes128Gcm, &key, &m, &mut body).unwrap();
        m[4..20].copy_from_slice(&tag);
        m.extend_from_slice(&body);
        let s = [netbios(&m), netbios(&comp), netbios(&plain_write(&data(100, 3)))].concat();
        let mut t = KeyTable::default();
        t.insert(0x55, KeyEntry { session_key: Some(key.clone()), server_to_client: Some(key.clone()), client_to_server: Some(key) });
        (s, SmbState::default().with_keys(Arc::new(t)))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Mutations of encrypted and compressed messages, any chunking and gaps: never a
        /// panic, every byte in one category.
        #[test]
        fn mutated_encrypted_and_compressed_never_panic(pos in 0usize..6000, val in any::<u8>(), cut in 1usize..700, gap_at in 0usize..40, gap in 0u64..3000) {
            let (mut s, smb) = stream_bytes();
            let l = s.len();
            s[pos % l] = val;
            let mut h = Harness { smb, ..Harness::default() };
            let mut st = Smb2Stream::new(1, true, addr(1, 0), addr(2, 0));
            for (i, c) in s.chunks(cut).enumerate() {
                h.fed += c.len() as u64;
                st.on_message(c, &ctx(i as u64), &mut h.parts());
                if i == gap_at && gap > 0 {
                    st.on_gap(gap, &ctx(i as u64), &mut h.parts());
                }
            }
            st.on_close(&ctx(0), &mut h.parts());
            prop_assert_eq!(smb_categories(&h), h.fed);
            prop_assert_eq!(h.smb.opening_bytes, 0);
        }
    }
}

/// A compressed WRITE's image where a resynchronisation lands (a capture started inside a
/// WRITE's data that holds it) is held like a plain one: its decompressed WRITE is no send
/// when no header follows it. Read whole, it is data.
#[test]
fn a_compressed_message_image_where_a_resync_lands_is_not_a_send() {
    let image = netbios(&unchained(xca::Algorithm::Lz77, &plain_write(&data(20_000, 77)), 0));
    let mut d = data(3000, 5);
    d.extend_from_slice(&image);
    d.extend(std::iter::repeat_n(0xAA, 500));
    let w3 = netbios(&write_req(3, [1; 16], 0, &d, false, 0));
    let w4 = netbios(&write_req(4, [1; 16], 0, &data(4000, 4), false, 0));
    let w5 = netbios(&write_req(5, [1; 16], 0, &data(4000, 5), false, 0));
    let cut = w3.len() - d.len() + 100;
    let mut h = Harness::default();
    let mut s = one_stream(&mut h, &[&w3[cut..], &w4, &w5]);
    s.on_close(&ctx(0), &mut h.parts());
    assert_eq!(h.rec.sends.iter().map(|r| r.message_id).collect::<Vec<_>>(), vec![4, 5]);
    assert_eq!(h.anomalies.get("smb2.resync_unconfirmed"), 1);
    // Decompressed, then taken back with its WRITE (11) from the counters.
    let s = &h.smb.stats;
    assert_eq!((s.compressed_messages, s.decompressed_messages, s.decompressed_bytes, s.write_req_pdus), (0, 0, 0, 2));
    assert_eq!(total_commands(&h), 2);
    assert_eq!((h.accounting.get(cat::SMB_PAYLOAD), h.accounting.get(cat::SMB_DECOMPRESSED)), (8000, 0));
    assert_eq!(smb_categories(&h), h.fed);
    // Read whole: w3 is one send, its data holding the image.
    let mut h = Harness::default();
    let mut s = one_stream(&mut h, &[&w3, &w4, &w5]);
    s.on_close(&ctx(0), &mut h.parts());
    assert_eq!(h.rec.sends.iter().map(|r| r.message_id).collect::<Vec<_>>(), vec![3, 4, 5]);
    assert_eq!(h.smb.stats.decompressed_messages, 0);
}
