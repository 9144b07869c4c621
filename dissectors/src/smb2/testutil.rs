//! SMB2 messages for the engine's tests, written with the records' emitters: the setup,
//! binding and WRITE messages a session's tests need, and their TRANSFORM (§2.2.41).

use super::crypto::{self, Cipher};
use super::records::{self as rec, command, HeaderRepr};

/// An SMB2 message (sync header, TreeId 3): a response when `status` is given.
pub fn message(cmd: u16, mid: u64, sid: u64, status: Option<u32>, flags: u32, body: &[u8]) -> Vec<u8> {
    let fl = flags | if status.is_some() { rec::flags::SERVER_TO_REDIR } else { 0 };
    let r = HeaderRepr { command: cmd, message_id: mid, flags: fl, status: status.unwrap_or(0), session_id: sid, credit: 1, tree_id: Some(3), ..Default::default() };
    let mut b = [0u8; 64];
    r.emit(&mut b);
    let mut m = b.to_vec();
    m.extend_from_slice(body);
    m
}

/// A NEGOTIATE request and response too short to be read (their dialect stays unknown, so
/// every derivation is tried), hashed into the preauth hash as any.
pub fn negotiate_pair() -> (Vec<u8>, Vec<u8>) {
    (
        message(command::NEGOTIATE, 0, 0, None, 0, &[36, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0]),
        message(command::NEGOTIATE, 0, 0, Some(0), 0, &[65, 0, 1, 0, 0x11, 0x03]),
    )
}

/// A SESSION_SETUP request (§2.2.5), a binding (SMB2_SESSION_FLAG_BINDING, signed) when
/// `binding`, with a 16-byte token of `token`.
pub fn setup_request(mid: u64, sid: u64, binding: bool, token: u8) -> Vec<u8> {
    let mut body = vec![0u8; 24];
    body[0..2].copy_from_slice(&25u16.to_le_bytes());
    body[2] = u8::from(binding);
    body[3] = 1;
    body[12..14].copy_from_slice(&88u16.to_le_bytes());
    body[14..16].copy_from_slice(&16u16.to_le_bytes());
    body.extend_from_slice(&[token; 16]);
    message(command::SESSION_SETUP, mid, sid, None, if binding { 0x08 } else { 0 }, &body)
}

/// A SESSION_SETUP response (§2.2.6) with `status` and a 16-byte token of `token`.
pub fn setup_response(mid: u64, sid: u64, status: u32, token: u8) -> Vec<u8> {
    let mut body = vec![0u8; 8];
    body[0..2].copy_from_slice(&9u16.to_le_bytes());
    body[4..6].copy_from_slice(&72u16.to_le_bytes());
    body[6..8].copy_from_slice(&16u16.to_le_bytes());
    body.extend_from_slice(&[token; 16]);
    message(command::SESSION_SETUP, mid, sid, Some(status), 0, &body)
}

/// A WRITE request (§2.2.21) of `data` at `offset`, FileId all 9s.
pub fn write_request(mid: u64, sid: u64, offset: u64, data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&49u16.to_le_bytes());
    body.extend_from_slice(&0x70u16.to_le_bytes());
    body.extend_from_slice(&(data.len() as u32).to_le_bytes());
    body.extend_from_slice(&offset.to_le_bytes());
    body.extend_from_slice(&[9; 16]);
    body.extend_from_slice(&[0u8; 16]);
    body.extend_from_slice(data);
    message(command::WRITE, mid, sid, None, 0, &body)
}

/// A TRANSFORM message (§2.2.41) of session `sid` around `plain`, encrypted with `key`.
pub fn transform(cipher: Cipher, key: &[u8], sid: u64, plain: &[u8], nonce: u64) -> Vec<u8> {
    let mut m = vec![0u8; crypto::TRANSFORM_LEN];
    m[0..4].copy_from_slice(&[0xFD, b'S', b'M', b'B']);
    m[20..28].copy_from_slice(&nonce.to_le_bytes());
    m[36..40].copy_from_slice(&(plain.len() as u32).to_le_bytes());
    m[42..44].copy_from_slice(&1u16.to_le_bytes());
    m[44..52].copy_from_slice(&sid.to_le_bytes());
    let mut body = plain.to_vec();
    let tag = crypto::encrypt(cipher, key, &m, &mut body).unwrap();
    m[4..20].copy_from_slice(&tag);
    m.extend_from_slice(&body);
    m
}
