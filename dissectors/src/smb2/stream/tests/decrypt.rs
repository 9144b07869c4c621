//! Decryption (`--keys`): the five encrypted public captures with their keys agree with
//! tshark run with the same keys (expected.json "with_keys"); a wrong key; and synthetic
//! encrypted WRITEs over TCP (split over frames) and over SMB Direct (unframed).
use super::*;
use crate::smb2::crypto::{self, Cipher, KeyEntry, KeyTable};
use std::sync::Arc;

fn hexb(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn sid(wire_hex: &str) -> u64 {
    u64::from_le_bytes(hexb(wire_hex).try_into().unwrap())
}

use crate::capture::testutil::ENCRYPTED;

fn with_keys(sid_hex: &str, e: KeyEntry) -> SmbState {
    let mut t = KeyTable::default();
    t.insert(sid(sid_hex), e);
    SmbState::default().with_keys(Arc::new(t))
}

fn key_of(s: &str) -> Option<Vec<u8>> {
    (!s.is_empty()).then(|| hexb(s))
}

fn commands_as_tshark(h: &Harness) -> BTreeMap<String, u64> {
    h.smb
        .stats
        .commands
        .iter()
        .map(|(k, v)| {
            let (name, dir) = k.split_once('.').unwrap();
            (format!("{}_{}", name.to_lowercase(), if dir == "request" { "req" } else { "resp" }), *v)
        })
        .collect()
}

fn expected_with_keys(file: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(captures().join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["files"][file]["variants"]["with_keys"]["values"].clone()
}

#[test]
fn encrypted_public_captures_decrypt_and_agree_with_tshark() {
    for (file, s, sk, s2c, c2s) in ENCRYPTED {
        let want = expected_with_keys(file);
        let mut tshark = BTreeMap::new();
        for (k, v) in want["smb2_pdus"].as_object().unwrap() {
            tshark.insert(k.clone(), v.as_u64().unwrap());
        }
        // The session key alone (derivation: 3.0 labels, or 3.1.1 with the preauth hash
        // tracked from the NEGOTIATE and SESSION_SETUP messages), and the directional keys alone.
        let mut forms = vec![("session key", KeyEntry { session_key: key_of(sk), ..KeyEntry::default() })];
        if !s2c.is_empty() {
            forms.push(("s2c/c2s keys", KeyEntry { session_key: None, server_to_client: key_of(s2c), client_to_server: key_of(c2s) }));
        }
        for (form, entry) in forms {
            for chunk in [0, 7] {
                let h = run_capture_with(file, chunk, with_keys(s, entry.clone()));
                let st = &h.smb.stats;
                let what = format!("{file} ({form}, chunk {chunk})");
                assert_eq!(st.decrypted_messages, want["transform_headers"].as_u64().unwrap(), "{what}");
                assert_eq!((st.encrypted_without_key, st.decrypt_failed), (0, 0), "{what}");
                assert_eq!(commands_as_tshark(&h), tshark, "{what}");
                assert_eq!(h.accounting.get(cat::SMB_ENCRYPTED), 0, "{what}");
                assert_eq!(smb_categories(&h), h.fed, "{what}: accounting");
                assert_eq!(h.accounting.get(cat::SMB_UNPARSED), 0, "{what}");
                assert!(h.anomalies.iter().next().is_none(), "{what}: {:?}", h.anomalies.iter().collect::<Vec<_>>());
            }
        }
    }
}

#[test]
fn wrong_key_is_decrypt_failed_and_no_key_is_todays_behaviour() {
    let file = "smb300-aes128ccm-wiki.pcap";
    let plain = run_capture(file, 0);
    let wrong = run_capture_with(file, 0, with_keys("3d00009400480000", KeyEntry { session_key: Some(vec![0x42; 16]), ..KeyEntry::default() }));
    assert_eq!(wrong.smb.stats.decrypt_failed, 44);
    assert_eq!(wrong.smb.stats.decrypted_messages, 0);
    assert_eq!(wrong.anomalies.get("smb2.decrypt_failed"), 44);
    // Exactly the bytes that are encrypted without keys, moved to the failed category.
    assert_eq!(wrong.accounting.get(cat::SMB_DECRYPT_FAILED), plain.accounting.get(cat::SMB_ENCRYPTED));
    assert_eq!(wrong.accounting.get(cat::SMB_ENCRYPTED), 0);
    assert_eq!(smb_categories(&wrong), wrong.fed);
    // Another session's key: the messages stay encrypted, as with no keys at all.
    let other = run_capture_with(file, 0, with_keys("0100000000000000", KeyEntry { session_key: Some(vec![1; 16]), ..KeyEntry::default() }));
    for h in [&plain, &other] {
        assert_eq!(h.smb.stats.encrypted_without_key, 44);
        assert_eq!(h.accounting.get(cat::SMB_DECRYPT_FAILED), 0);
    }
    assert_eq!(other.accounting.get(cat::SMB_ENCRYPTED), plain.accounting.get(cat::SMB_ENCRYPTED));
    assert_eq!(plain.smb.stats.commands, other.smb.stats.commands);
}

const SID: u64 = 0x99;

/// A TRANSFORM message (§2.2.41) of session `SID` around `plain`, encrypted with `key`.
fn transform(cipher: Cipher, key: &[u8], plain: &[u8], nonce: u8) -> Vec<u8> {
    crate::smb2::testutil::transform(cipher, key, SID, plain, u64::from(nonce))
}

fn directional(c2s: &[u8], s2c: &[u8]) -> SmbState {
    let mut t = KeyTable::default();
    t.insert(SID, KeyEntry { session_key: None, server_to_client: Some(s2c.to_vec()), client_to_server: Some(c2s.to_vec()) });
    SmbState::default().with_keys(Arc::new(t))
}

#[test]
fn encrypted_write_over_tcp_is_hashed_like_the_plain_one_with_its_frames() {
    let payload = data(20_000, 9);
    let plain = pad8(write_req(5, [3; 16], 4096, &payload, false, 0));
    for cipher in Cipher::ALL {
        let c2s: Vec<u8> = (0..cipher.key_len() as u8).collect();
        let s2c = vec![0xEE; cipher.key_len()];
        let wire = netbios(&transform(cipher, &c2s, &plain, 1));
        // Plain reference.
        let mut ref_h = Harness::default();
        let np = netbios(&plain);
        one_stream(&mut ref_h, &[&np]).on_close(&ctx(0), &mut ref_h.parts());
        // Encrypted, cut into three frames.
        let mut h = Harness { smb: directional(&c2s, &s2c), ..Harness::default() };
        let (a, rest) = wire.split_at(30);
        let (b, c) = rest.split_at(9000);
        let mut st = one_stream(&mut h, &[a, b, c]);
        st.on_close(&ctx(9), &mut h.parts());
        assert_eq!(h.smb.stats.decrypted_messages, 1, "{}", cipher.name());
        assert_eq!(h.rec.sends.len(), 1);
        let (got, want) = (&h.rec.sends[0], &ref_h.rec.sends[0]);
        assert_eq!(got.digest, want.digest);
        assert_eq!((got.offset, got.message_id, got.transport), (4096, 5, Transport::Tcp));
        // The payload begins in frame 2 (frame 1 holds the headers) and ends in frame 3.
        assert_eq!((got.first_frame.number, got.last_frame.number, got.ts_ns), (2, 3, 2000));
        assert_eq!(h.accounting.get(cat::SMB_PAYLOAD), payload.len() as u64);
        assert_eq!(h.accounting.get(cat::SMB_METADATA), ref_h.accounting.get(cat::SMB_METADATA) + 52);
        assert_eq!(smb_categories(&h), h.fed);
        // The same bytes sent the other way (server to client) need the other key.
        let mut back = Harness { smb: directional(&c2s, &s2c), ..Harness::default() };
        let mut s = Smb2Stream::new(1, false, addr(2, 445), addr(1, 50000));
        back.fed += wire.len() as u64;
        s.on_message(&wire, &ctx(1), &mut back.parts());
        assert_eq!((back.smb.stats.decrypt_failed, back.rec.sends.len()), (1, 0));
        assert_eq!(back.accounting.get(cat::SMB_DECRYPT_FAILED), wire.len() as u64 - 4);
        assert_eq!(smb_categories(&back), back.fed);
    }
}

#[test]
fn encrypted_write_inside_smb_direct_is_decrypted() {
    let payload = data(3000, 1);
    let plain = write_req(6, [4; 16], 0, &payload, false, 0);
    let key = vec![7u8; 16];
    let msg = transform(Cipher::Aes128Gcm, &key, &plain, 2);
    let mut h = Harness { smb: directional(&key, &key), ..Harness::default() };
    let mut s = Smb2Stream::new_unframed(1, true, addr(1, 50000), addr(2, 445), 0);
    h.fed += msg.len() as u64;
    s.on_message(&msg, &ctx(4), &mut h.parts());
    assert_eq!(h.rec.sends.len(), 1);
    assert_eq!(h.rec.sends[0].transport, Transport::SmbDirect);
    assert_eq!(h.rec.sends[0].digest, digest_of(&payload));
    assert_eq!(h.accounting.get(cat::SMB_PAYLOAD), 3000);
    assert_eq!(smb_categories(&h), h.fed);
}

#[test]
fn gaps_and_hostile_transforms_are_counted_never_decrypted() {
    let key = vec![7u8; 16];
    let plain = pad8(write_req(6, [4; 16], 0, &data(5000, 1), false, 0));
    let wire = netbios(&transform(Cipher::Aes128Ccm, &key, &plain, 3));
    // A gap inside the buffered ciphertext: the message stays encrypted, framing survives.
    let mut h = Harness { smb: directional(&key, &key), ..Harness::default() };
    let mut s = Smb2Stream::new(1, true, addr(1, 50000), addr(2, 445));
    h.fed += 2000;
    s.on_message(&wire[..2000], &ctx(1), &mut h.parts());
    s.on_gap(1000, &ctx(2), &mut h.parts());
    h.fed += (wire.len() - 3000) as u64;
    s.on_message(&wire[3000..], &ctx(3), &mut h.parts());
    let again = netbios(&transform(Cipher::Aes128Ccm, &key, &plain, 4));
    h.fed += again.len() as u64;
    s.on_message(&again, &ctx(4), &mut h.parts());
    assert_eq!(h.smb.stats.decrypted_messages, 1);
    assert_eq!(h.rec.sends.len(), 1);
    // What arrived of the broken message, NetBIOS header aside, stays encrypted.
    assert_eq!(h.accounting.get(cat::SMB_ENCRYPTED), (wire.len() - 1000 - 4) as u64);
    assert_eq!(smb_categories(&h), h.fed);
    // OriginalMessageSize beyond the message: not decrypted, counted.
    let mut bad = transform(Cipher::Aes128Ccm, &key, &plain, 5);
    bad[36..40].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut h = Harness { smb: directional(&key, &key), ..Harness::default() };
    let nb = netbios(&bad);
    one_stream(&mut h, &[&nb, &again]);
    assert_eq!(h.anomalies.get("smb2.transform_bad_size"), 1);
    assert_eq!((h.smb.stats.decrypt_failed, h.smb.stats.decrypted_messages), (1, 1));
    assert_eq!(smb_categories(&h), h.fed);
    // A transform message shorter than its header.
    let mut h = Harness { smb: directional(&key, &key), ..Harness::default() };
    let short = netbios(&bad[..30]);
    one_stream(&mut h, &[&short, &again]);
    assert_eq!(h.smb.stats.decrypted_messages, 1);
    assert_eq!(smb_categories(&h), h.fed);
}

/// An encrypted WRITE delivered one byte a frame (100,000 frames): the frames noted while it
/// is buffered stay within `MAX_PIECES` (40 bytes each, not one per byte), the message still
/// decrypts to the plain WRITE's digest, its send names the frames the plain WRITE's send
/// names (its first frame falls before the cap, its last one is the newest), and the cap is
/// counted once.
#[test]
fn message_in_one_byte_frames_notes_at_most_max_pieces() {
    use super::super::decrypt::MAX_PIECES;
    let key = vec![7u8; 16];
    let payload = data(100_000, 4);
    let plain = pad8(write_req(6, [4; 16], 0, &payload, false, 0));
    let wire = netbios(&transform(Cipher::Aes128Gcm, &key, &plain, 6));
    assert!(wire.len() > MAX_PIECES + 1000);
    let mut h = Harness { smb: directional(&key, &key), ..Harness::default() };
    let mut s = Smb2Stream::new(1, true, addr(1, 50000), addr(2, 445));
    for (i, b) in wire.iter().enumerate() {
        h.fed += 1;
        s.on_message(std::slice::from_ref(b), &ctx(i as u64 + 1), &mut h.parts());
        if let Some(cb) = s.crypt.as_ref() {
            assert!(cb.pieces.len() <= MAX_PIECES, "frame {}: {} pieces", i + 1, cb.pieces.len());
        }
    }
    assert_eq!(h.smb.stats.decrypted_messages, 1);
    assert_eq!(h.anomalies.get("smb2.message_frames_capped"), 1);
    assert_eq!(h.rec.sends.len(), 1);
    let send = &h.rec.sends[0];
    assert_eq!(send.digest, digest_of(&payload));
    // The frames the plain message names when it is delivered the same way, 52 frames (the
    // TRANSFORM header's bytes) later.
    let mut plain_h = Harness::default();
    let mut ps = Smb2Stream::new(1, true, addr(1, 50000), addr(2, 445));
    for (i, b) in netbios(&plain).iter().enumerate() {
        ps.on_message(std::slice::from_ref(b), &ctx(i as u64 + 1), &mut plain_h.parts());
    }
    ps.on_close(&ctx(0), &mut plain_h.parts());
    let want = &plain_h.rec.sends[0];
    assert_eq!((send.first_frame.number, send.last_frame.number), (want.first_frame.number + 52, want.last_frame.number + 52));
    assert_eq!(send.last_frame.number, wire.len() as u64, "the newest frame stands for the capped stretch");
    assert_eq!(smb_categories(&h), h.fed);
}

/// A 3.1.1 session whose keys file gives the session key alone: its keys derive from the
/// preauth hash of its own SESSION_SETUP exchange (§3.2.5.3.1), which a later channel's
/// binding (hashed in the new channel's own `PreauthSession`, §3.3.5.5) and a
/// re-authentication do not change. Both came before the session's first encrypted message
/// here; until 2026-12-07 they were folded into the session's hash, so the keys derived from
/// it were wrong and every message of the session was `smb_decrypt_failed`.
#[test]
fn a_binding_or_reauthentication_before_the_first_encrypted_message_leaves_the_keys_as_derived() {
    use crate::smb2::records::status;
    use crate::smb2::testutil::{negotiate_pair, setup_request as setup_req};
    let setup_resp = |mid: u64, status: u32, token: u8| crate::smb2::testutil::setup_response(mid, SID, status, token);
    let (neg_req, neg_resp) = negotiate_pair();
    let more = status::MORE_PROCESSING_REQUIRED;
    // The session's own exchange on connection 1, then connection 2 binds to it, then
    // connection 1 re-authenticates: each a message in its direction, in this order.
    let conn1: Vec<(bool, Vec<u8>)> = vec![
        (true, neg_req.clone()),
        (false, neg_resp.clone()),
        (true, setup_req(1, 0, false, 1)),
        (false, setup_resp(1, more, 2)),
        (true, setup_req(2, SID, false, 3)),
        (false, setup_resp(2, 0, 4)),
    ];
    let conn2: Vec<(bool, Vec<u8>)> = vec![
        (true, neg_req),
        (false, neg_resp),
        (true, setup_req(1, SID, true, 5)),
        (false, setup_resp(1, more, 6)),
        (true, setup_req(2, SID, true, 7)),
        (false, setup_resp(2, 0, 8)),
    ];
    let reauth: Vec<(bool, Vec<u8>)> =
        vec![(true, setup_req(3, SID, false, 9)), (false, setup_resp(3, more, 10)), (true, setup_req(4, SID, false, 11)), (false, setup_resp(4, 0, 12))];
    // The session's hash (§3.2.5.2): the connection's NEGOTIATE request and response, then
    // the session's SESSION_SETUP requests and responses but the final one.
    let mut hash = [0u8; 64];
    for (_, m) in &conn1[..5] {
        crypto::preauth_update(&mut hash, m);
    }
    let session_key: Vec<u8> = (0x40..0x50).collect();
    let (c2s, _) = crypto::derive(&session_key, true, Cipher::Aes128Gcm, Some(&hash)).unwrap();
    let payload = data(12_000, 3);
    let write = netbios(&transform(Cipher::Aes128Gcm, &c2s, &pad8(write_req(5, [3; 16], 0, &payload, false, 0)), 1));

    for (case, steps) in [vec![&conn1], vec![&conn1, &conn2], vec![&conn1, &reauth], vec![&conn1, &conn2, &reauth]].into_iter().enumerate() {
        let mut t = KeyTable::default();
        t.insert(SID, KeyEntry { session_key: Some(session_key.clone()), server_to_client: None, client_to_server: None });
        let mut h = Harness { smb: SmbState::default().with_keys(Arc::new(t)), ..Harness::default() };
        let mut streams = [
            Smb2Stream::new(1, true, addr(1, 50000), addr(2, 445)),
            Smb2Stream::new(1, false, addr(2, 445), addr(1, 50000)),
            Smb2Stream::new(2, true, addr(3, 50001), addr(4, 445)),
            Smb2Stream::new(2, false, addr(4, 445), addr(3, 50001)),
        ];
        let mut n = 0;
        for part in &steps {
            let base = if std::ptr::eq(*part, &conn2) { 2 } else { 0 };
            for (to_server, m) in part.iter() {
                n += 1;
                let wire = netbios(m);
                h.fed += wire.len() as u64;
                streams[base + usize::from(!to_server)].on_message(&wire, &ctx(n), &mut h.parts());
            }
        }
        h.fed += write.len() as u64;
        streams[0].on_message(&write, &ctx(n + 1), &mut h.parts());
        assert_eq!((h.smb.stats.decrypted_messages, h.smb.stats.decrypt_failed), (1, 0), "case {case}");
        assert_eq!(h.rec.sends.len(), 1);
        assert_eq!(h.rec.sends[0].digest, digest_of(&payload));
        assert_eq!(smb_categories(&h), h.fed);
    }
}
