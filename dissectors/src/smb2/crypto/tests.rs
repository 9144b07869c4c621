use super::*;

fn hex(s: &str) -> Vec<u8> {
    parse_hex(&s.replace(' ', "")).unwrap()
}

/// Wireshark wiki SampleCaptures, 'SMB3.1.1 encryption' (smb311-aes128ccm-filt-wiki.pcap): the
/// preauth hash after the second SESSION_SETUP request, and the final keys.
const WIKI_311_PREAUTH: &str = "fb 11 6c 80 20 e2 3f d8 e4 e3 07 01 f1 da d7 af d8 e3 ff 22 0d c4 5b ff 1d 7f fb 92 ee a3 a6 89 5f 7f 49 39 b9 75 7e ed 97 a8 1e c4 fa d9 75 91 e8 81 73 de 78 1f 32 82 33 a6 f5 37 45 59 f1 2a";

#[test]
fn kdf_311_matches_the_wiki_keys() {
    let sk = hex("b25a135fc3dc14269f20d7cbc8716b6b");
    let mut h = [0u8; 64];
    h.copy_from_slice(&hex(WIKI_311_PREAUTH));
    let (c2s, s2c) = derive(&sk, true, Cipher::Aes128Ccm, Some(&h)).unwrap();
    // "final server decryption key" = client-to-server.
    assert_eq!(c2s, hex("f8c1a6b544e8226f98ee44778eaf316b"));
    assert_eq!(s2c, hex("394071f1a21db5ba683efa868c36aedf"));
    // Without the preauth hash there is nothing to derive for 3.1.1.
    assert!(derive(&sk, true, Cipher::Aes128Ccm, None).is_none());
}

#[test]
fn kdf_30_matches_the_wireshark_test_keys() {
    // smb300-aes128ccm-wstest.pcap (Wireshark test suite keys).
    let (c2s, s2c) = derive(&hex("9a9ea16a0cdbeb6064772318073f172f"), false, Cipher::Aes128Ccm, None).unwrap();
    assert_eq!(s2c, hex("8be6cc53d4beba29387e69aef035d497"));
    assert_eq!(c2s, hex("bff985870e81784d533fdc09497b8eab"));
}

#[test]
fn kdf_256_uses_l_256_and_the_full_key() {
    let sk: Vec<u8> = (0u8..32).collect();
    let a = kdf(&sk, b"SMBC2SCipherKey\0", &[7; 64], 256);
    assert_eq!(a.len(), 32);
    let b = kdf(&sk[..16], b"SMBC2SCipherKey\0", &[7; 64], 256);
    assert_ne!(a, b);
    // L is part of the input: the 128-bit key is not a prefix of the 256-bit one.
    assert_ne!(kdf(&sk, b"SMBC2SCipherKey\0", &[7; 64], 128), a[..16].to_vec());
}

#[test]
fn round_trip_every_cipher_and_wrong_key_fails() {
    let mut hdr = vec![0u8; TRANSFORM_LEN];
    hdr[0..4].copy_from_slice(&[0xFD, b'S', b'M', b'B']);
    hdr[20..32].copy_from_slice(&[9; 12]);
    hdr[36..40].copy_from_slice(&100u32.to_le_bytes());
    hdr[42] = 1;
    hdr[44..52].copy_from_slice(&0x1122u64.to_le_bytes());
    for c in Cipher::ALL {
        let key: Vec<u8> = (0..c.key_len() as u8).collect();
        let plain: Vec<u8> = (0..100u8).collect();
        let mut buf = plain.clone();
        let tag = encrypt(c, &key, &hdr, &mut buf).unwrap();
        assert_ne!(buf, plain);
        let mut h = hdr.clone();
        h[4..20].copy_from_slice(&tag);
        let mut wrong = buf.clone();
        let mut bad_key = key.clone();
        bad_key[0] ^= 1;
        assert!(!decrypt(c, &bad_key, &h, &mut wrong), "{}", c.name());
        assert!(decrypt(c, &key, &h, &mut buf), "{}", c.name());
        assert_eq!(buf, plain);
        // AAD covers the SessionId.
        let mut h2 = h.clone();
        h2[44] ^= 1;
        let mut again = buf.clone();
        encrypt(c, &key, &hdr, &mut again);
        assert!(!decrypt(c, &key, &h2, &mut again));
    }
}

#[test]
fn keys_file_forms() {
    let t = KeyTable::parse(
        "# comment\n\
         1900009c003c0000,9a9ea16a0cdbeb6064772318073f172f\n\
         \"2900009c003c0000\",\"\",\"763d5552dbc9650b700869467a5857e4\",\"35e69833c6578e438c8701cb40bf483e\"  # tshark form\n\
         \n",
    )
    .unwrap();
    assert_eq!(t.len(), 2);
    let a = t.get(u64::from_le_bytes(hex("1900009c003c0000").try_into().unwrap())).unwrap();
    assert_eq!(a.session_key.as_deref(), Some(&hex("9a9ea16a0cdbeb6064772318073f172f")[..]));
    assert!(a.server_to_client.is_none());
    let b = t.get(0x0000_3c00_9c00_0029).unwrap();
    assert!(b.session_key.is_none());
    assert_eq!(b.client_to_server.as_deref(), Some(&hex("35e69833c6578e438c8701cb40bf483e")[..]));
    for (bad, says) in [
        ("1900009c003c00,00112233445566778899aabbccddeeff", "line 1: the SessionId must be 8 bytes"),
        ("1900009c003c0000,zz", "not hex"),
        ("1900009c003c0000", "got 1 fields"),
        ("\n1900009c003c0000,0011", "line 2: the session key must be 16 or 32 bytes"),
        ("1900009c003c0000,,00112233445566778899aabbccddeeff,", "give both"),
    ] {
        let e = KeyTable::parse(bad).unwrap_err();
        assert!(e.contains(says), "{bad:?}: {e}");
    }
}

#[test]
fn candidates_follow_the_negotiate() {
    let e = KeyEntry { session_key: Some(vec![1; 16]), ..KeyEntry::default() };
    let c = candidates(&e, Some(0x0302), None, None);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].cipher, Cipher::Aes128Ccm);
    // 3.1.1 without a preauth hash: nothing to derive.
    assert!(candidates(&e, Some(0x0311), Some(2), None).is_empty());
    assert_eq!(candidates(&e, Some(0x0311), Some(2), Some(&[0; 64]))[0].cipher, Cipher::Aes128Gcm);
    // No NEGOTIATE seen: the 3.0 derivation for the 128-bit ciphers (no 256-bit ones for a 16-byte key).
    let any = candidates(&e, None, None, None);
    assert!(any.iter().all(|k| k.cipher.key_len() == 16) && any.len() == 2);
}
