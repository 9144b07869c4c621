//! Encrypted messages (TRANSFORM_HEADER, MS-SMB2 §2.2.41, §3.2.5.1.1.1) when `--keys` gave
//! keys: the 52-byte header is buffered to find the session; a session with a key has its whole
//! message buffered (bounded: the NetBIOS length was already checked against the connection's
//! `max_message_len`; an SMB Direct message by its reassembly), decrypted, and the plaintext fed
//! through an inner unframed `Smb2Stream`, piece by piece with the frames that carried it, so
//! its sends carry their real frames and times.
//!
//! Accounting: a decrypted message's transform header → `smb_metadata`, its plaintext bytes by
//! what they decode to (the ciphertext is as long as the plaintext); a message of a session
//! without a key → `smb_encrypted`; a key that does not verify the tag → `smb_decrypt_failed`.

use super::{Smb2Stream, State};
use crate::accounting::cat;
use crate::frame::FrameCtx;
use crate::smb2::crypto::{self, TRANSFORM_LEN};
use crate::smb2::records::Error as RecError;
use crate::smb2::transform::TransformHeader;
use crate::smb2::{Anomaly, Parts};

/// Frames noted for one buffered message (40 bytes each; a 16 MiB message in 1-byte
/// segments would otherwise note 16 million). Past it the latest piece stands for every later
/// frame: its start keeps its frame position, its frame becomes the newest (anomaly
/// `smb2.message_frames_capped`). Ordinary messages span a few thousand frames.
pub(super) const MAX_PIECES: usize = 1 << 16;

/// An encrypted message being buffered.
#[derive(Default)]
pub(super) struct CryptBuf {
    /// From the ProtocolId on.
    pub(super) bytes: Vec<u8>,
    /// (offset in `bytes`, frame) where each frame's bytes begin.
    pub(super) pieces: Vec<(usize, FrameCtx)>,
    /// Where the bytes go when the message is lost (gap, end of stream) before it is whole:
    /// `smb_encrypted` or `smb_compressed`.
    pub(super) lost_as: &'static str,
    /// Bytes of `SmbState::opening_bytes` this message holds (released when it is dropped).
    pub(super) reserved: u64,
    /// `pieces` reached `MAX_PIECES` (the anomaly was raised).
    pub(super) pieces_capped: bool,
}

impl CryptBuf {
    /// Gives the message's share of the buffering budget back.
    pub(super) fn release(&self, p: &mut Parts) {
        p.smb.opening_bytes = p.smb.opening_bytes.saturating_sub(self.reserved);
    }
}

/// Reserves `n` bytes of the buffering budget; false (and the anomaly) when it is spent.
pub(super) fn reserve(n: u64, p: &mut Parts) -> bool {
    if p.smb.opening_bytes.saturating_add(n) > p.smb.opening_cap {
        p.anomalies.raise(Anomaly::OpenBudgetExceeded);
        return false;
    }
    p.smb.opening_bytes += n;
    true
}

impl Smb2Stream {
    /// The ProtocolId 0xFD 'SMB' was read (and `msg_left` bytes follow).
    pub(super) fn start_crypt(&mut self, id: &[u8; 4], p: &mut Parts) {
        let mut cb = CryptBuf { lost_as: cat::SMB_ENCRYPTED, ..CryptBuf::default() };
        cb.bytes.extend_from_slice(id);
        self.crypt = Some(Box::new(cb));
        let need = (4 + self.msg_left as usize).min(TRANSFORM_LEN);
        self.state = State::Crypt(need);
        if self.msg_left == 0 {
            self.on_crypt_buffered(p);
        }
    }

    pub(super) fn crypt_bytes(&mut self, need: usize, input: &[u8], ctx: &FrameCtx, p: &mut Parts) -> usize {
        // `None` cannot happen: the state is entered with the buffer.
        let Some((n, done)) = self.take_buffered(need, input, ctx, cat::SMB_ENCRYPTED, p) else { return 0 };
        if done {
            self.on_crypt_buffered(p);
        }
        n
    }

    /// Appends the message's bytes to the transform buffer (up to `need` in all), noting the
    /// frame each piece came from; returns how many were taken and whether the buffered part is
    /// complete. Without a buffer the rest of the message goes to `lost_as`.
    pub(super) fn take_buffered(&mut self, need: usize, input: &[u8], ctx: &FrameCtx, lost_as: &'static str, p: &mut Parts) -> Option<(usize, bool)> {
        let Some(cb) = self.crypt.as_mut() else {
            self.state = State::Skip(lost_as);
            return None;
        };
        let n = (need - cb.bytes.len()).min(input.len()).min(self.msg_left as usize);
        if cb.pieces.last().is_none_or(|(_, c)| c.frame != ctx.frame) {
            if cb.pieces.len() < MAX_PIECES {
                let at = if cb.pieces.is_empty() { 0 } else { cb.bytes.len() };
                cb.pieces.push((at, *ctx));
            } else {
                if !cb.pieces_capped {
                    cb.pieces_capped = true;
                    p.anomalies.raise(Anomaly::MessageFramesCapped);
                }
                if let Some(last) = cb.pieces.last_mut() {
                    last.1 = *ctx;
                }
            }
        }
        cb.bytes.extend_from_slice(&input[..n]);
        self.msg_left -= n as u32;
        Some((n, cb.bytes.len() == need || self.msg_left == 0))
    }

    /// The header or the whole message is buffered.
    fn on_crypt_buffered(&mut self, p: &mut Parts) {
        let Some(mut cb) = self.crypt.take() else { return };
        cb.release(p);
        let hdr = match TransformHeader::parse(&cb.bytes) {
            Ok(h) => h,
            Err(_) => {
                // Shorter than a TRANSFORM header.
                p.anomalies.raise(RecError::Truncated);
                p.accounting.add(cat::SMB_ENCRYPTED, cb.bytes.len() as u64);
                p.smb.stats.encrypted_without_key += 1;
                return self.crypt_rest(cat::SMB_ENCRYPTED);
            }
        };
        let Some(entry) = p.smb.crypt.keys.get(hdr.session_id).cloned() else {
            p.accounting.add(cat::SMB_ENCRYPTED, cb.bytes.len() as u64);
            p.smb.stats.encrypted_without_key += 1;
            return self.crypt_rest(cat::SMB_ENCRYPTED);
        };
        let total = TRANSFORM_LEN as u64 + hdr.original_message_size as u64;
        let have = cb.bytes.len() as u64 + self.msg_left as u64;
        if hdr.original_message_size == 0 || total > have {
            // The ciphertext cannot be as long as the header says.
            p.anomalies.raise(Anomaly::TransformBadSize);
            p.accounting.add(cat::SMB_DECRYPT_FAILED, cb.bytes.len() as u64);
            p.smb.stats.decrypt_failed += 1;
            return self.crypt_rest(cat::SMB_DECRYPT_FAILED);
        }
        if (cb.bytes.len() as u64) < total {
            // Header seen, a key exists: buffer the ciphertext (within the budget).
            if !reserve(total, p) {
                p.accounting.add(cat::SMB_ENCRYPTED, cb.bytes.len() as u64);
                p.smb.stats.encrypted_without_key += 1;
                return self.crypt_rest(cat::SMB_ENCRYPTED);
            }
            cb.reserved = total;
            cb.bytes.reserve_exact(total as usize - cb.bytes.len());
            self.crypt = Some(cb);
            self.state = State::Crypt(total as usize);
            return;
        }
        // Whole message buffered.
        let (head, body) = cb.bytes.split_at_mut(TRANSFORM_LEN);
        let conn = p.smb.conn(self.conn);
        let (dialect, cipher) = (conn.map(|c| c.dialect), conn.and_then(|c| c.cipher));
        let learned = p.smb.crypt.learned_keys(hdr.session_id);
        let candidates = match learned {
            Some(k) => vec![k],
            None => {
                let preauth = if crypto::needs_preauth(&entry, dialect) { p.smb.crypt.preauth_for_keys(hdr.session_id) } else { None };
                crypto::candidates(&entry, dialect, cipher, preauth.as_ref())
            }
        };
        let mut ok = None;
        let single = candidates.len() == 1;
        let original = if single { Vec::new() } else { body.to_vec() };
        for k in candidates {
            let key = if self.to_server { &k.client_to_server } else { &k.server_to_client };
            if !single {
                body.copy_from_slice(&original);
            }
            if crypto::decrypt(k.cipher, key, head, body) {
                ok = Some(k);
                break;
            }
        }
        let Some(k) = ok else {
            p.anomalies.raise(Anomaly::DecryptFailed);
            p.accounting.add(cat::SMB_DECRYPT_FAILED, cb.bytes.len() as u64);
            p.smb.stats.decrypt_failed += 1;
            return self.crypt_rest(cat::SMB_DECRYPT_FAILED);
        };
        p.smb.crypt.learn(hdr.session_id, k);
        p.accounting.add(cat::SMB_METADATA, TRANSFORM_LEN as u64);
        p.smb.stats.decrypted_messages += 1;
        p.smb.stats.decrypted_bytes += body.len() as u64;
        // Frame pieces, as offsets in the plaintext.
        let mut pieces: Vec<(usize, FrameCtx)> = Vec::with_capacity(cb.pieces.len());
        for (off, c) in &cb.pieces {
            let o = off.saturating_sub(TRANSFORM_LEN);
            match pieces.last_mut() {
                Some(last) if last.0 == o => last.1 = *c,
                _ => pieces.push((o, *c)),
            }
        }
        let mut inner = self.inner.take().unwrap_or_else(|| Box::new(self.inner_stream(false, true)));
        inner.feed_message_pieces(body, &pieces, p);
        self.inner = Some(inner);
        if self.keep_opened {
            self.opened = Some(body.to_vec());
        }
        if self.msg_left > 0 {
            p.anomalies.raise(Anomaly::TrailingBytes);
        }
        self.crypt_rest(cat::SMB_UNPARSED);
    }

    /// After the buffered part: the rest of the message (`msg_left`) goes to `category`.
    fn crypt_rest(&mut self, category: &'static str) {
        if self.msg_left == 0 {
            self.end_of_message();
        } else {
            self.state = State::Skip(category);
        }
    }
}
