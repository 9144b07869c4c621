//! Compressed messages (COMPRESSION_TRANSFORM_HEADER, MS-SMB2 §2.2.42, §3.1.4.4, §3.1.5.3),
//! unchained and chained (NONE, LZNT1, LZ77, LZ77+Huffman, Pattern_V1): the whole message is
//! buffered (bounded: its NetBIOS length was checked against the connection's
//! `max_message_len`; an SMB Direct message by its reassembly), decompressed with the output
//! capped at the same bound (a bomb stops there: anomaly `smb2.decompress_output_limit`), and
//! the original message fed through an inner unframed `Smb2Stream`, so its WRITE/READ data is
//! hashed and deduplicated on the decompressed bytes.
//!
//! Accounting: the wire bytes of a decompressed message are `smb_decompressed` (its payload is
//! hashed on the decompressed bytes); what the decompressed message decodes to is counted
//! (`smb2.decompressed_*`) but not accounted a second time, so the categories still add up to
//! the input. A message that cannot be decompressed (LZ4, damaged data, a gap) stays
//! `smb_compressed` and has its SMB2 header counted from an uncompressed prefix when there is
//! one, as before decompression existed.

use super::decrypt::{reserve, CryptBuf};
use super::{Smb2Stream, State};
use crate::accounting::{cat, Accounting};
use crate::frame::FrameCtx;
use crate::smb2::records::Error as RecError;
use crate::smb2::transform::{compression_algorithm as alg, CompressionTransform};
use crate::smb2::xca::{self, XcaError};
use crate::smb2::Parts;

impl Smb2Stream {
    /// The ProtocolId 0xFC 'SMB' was read (and `msg_left` bytes follow).
    pub(super) fn start_comp(&mut self, id: &[u8; 4], p: &mut Parts) {
        let need = 4 + self.msg_left as u64;
        if !reserve(need, p) {
            p.smb.stats.decompress_failed += 1;
            p.accounting.add(cat::SMB_COMPRESSED, 4);
            self.state = State::Skip(cat::SMB_COMPRESSED);
            if self.msg_left == 0 {
                self.end_of_message();
            }
            return;
        }
        let mut cb = CryptBuf { lost_as: cat::SMB_COMPRESSED, reserved: need, ..CryptBuf::default() };
        cb.bytes.extend_from_slice(id);
        self.crypt = Some(Box::new(cb));
        self.state = State::Comp(4 + self.msg_left as usize);
        if self.msg_left == 0 {
            self.on_comp_buffered(p);
        }
    }

    pub(super) fn comp_bytes(&mut self, need: usize, input: &[u8], ctx: &FrameCtx, p: &mut Parts) -> usize {
        let Some((n, done)) = self.take_buffered(need, input, ctx, cat::SMB_COMPRESSED, p) else { return 0 };
        if done {
            self.on_comp_buffered(p);
        }
        n
    }

    fn on_comp_buffered(&mut self, p: &mut Parts) {
        let Some(cb) = self.crypt.take() else { return };
        cb.release(p);
        let cap = self.max_message_len(p) as usize;
        let mut out = Vec::new();
        match decompress_message(&cb.bytes, cap, &mut out) {
            Ok(()) => {
                p.accounting.add(cat::SMB_DECOMPRESSED, cb.bytes.len() as u64);
                p.smb.stats.decompressed_messages += 1;
                p.smb.stats.decompressed_wire_bytes += cb.bytes.len() as u64;
                p.smb.stats.decompressed_bytes += out.len() as u64;
                // The message's frames: the first carries its start, the last its end.
                let first = cb.pieces.first().map(|x| x.1);
                let last = cb.pieces.last().map(|x| x.1);
                let mut pieces = Vec::with_capacity(2);
                if let Some(f) = first {
                    pieces.push((0, f));
                }
                if let Some(l) = last {
                    if out.len() > 1 && pieces.first().is_some_and(|f| f.1.frame != l.frame) {
                        pieces.push((out.len() - 1, l));
                    }
                }
                let mut unz = self.unzipped.take().unwrap_or_else(|| Box::new(self.inner_stream(false, false)));
                // The wire bytes are accounted already: what the plaintext decodes to is
                // counted in a scratch accounting.
                let mut scratch = Accounting::default();
                {
                    let mut q = Parts { anomalies: &mut *p.anomalies, accounting: &mut scratch, smb: &mut *p.smb, sink: &mut *p.sink };
                    self.hold_in(&mut unz);
                    unz.feed_message_pieces(&out, &pieces, &mut q);
                    self.take_held_from(&mut unz);
                }
                p.smb.stats.decompressed_payload_bytes += scratch.get(cat::SMB_PAYLOAD);
                self.unzipped = Some(unz);
                if self.keep_opened {
                    self.opened = Some(out);
                }
            }
            Err(e) => {
                match e {
                    Failure::Record(r) => p.anomalies.raise(r),
                    Failure::Xca(x) => p.anomalies.raise(x),
                }
                p.accounting.add(cat::SMB_COMPRESSED, cb.bytes.len() as u64);
                p.smb.stats.decompress_failed += 1;
                // As before decompression existed: count an uncompressed SMB2 header.
                self.buf.clear();
                self.buf.extend_from_slice(&cb.bytes[..cb.bytes.len().min(super::COMPRESSED_PREFIX)]);
                self.on_compressed_prefix(p);
            }
        }
        if self.msg_left == 0 {
            self.end_of_message();
        } else {
            self.state = State::Skip(cat::SMB_COMPRESSED);
        }
    }
}

enum Failure {
    Record(RecError),
    Xca(XcaError),
}

/// Decompresses the whole message `b` (from its ProtocolId) into `out`, at most `cap` bytes.
fn decompress_message(b: &[u8], cap: usize, out: &mut Vec<u8>) -> Result<(), Failure> {
    let t = CompressionTransform::parse(b).map_err(Failure::Record)?;
    match t {
        CompressionTransform::Unchained { original_compressed_segment_size: size, compression_algorithm, offset } => {
            let start = CompressionTransform::UNCHAINED_LEN;
            let data_at = start.checked_add(offset as usize).filter(|&e| e <= b.len()).ok_or(Failure::Record(RecError::BadOffset))?;
            let total = (offset as usize).saturating_add(size as usize);
            if total > cap {
                return Err(Failure::Xca(XcaError::OutputLimit));
            }
            out.reserve(total);
            out.extend_from_slice(&b[start..data_at]);
            let body = &b[data_at..];
            match compression_algorithm {
                alg::NONE => out.extend_from_slice(&body[..body.len().min(size as usize)]),
                a => {
                    let a = xca::Algorithm::from_u16(a).ok_or(Failure::Xca(XcaError::UnsupportedAlgorithm))?;
                    xca::decompress(a, body, out, size as usize).map_err(Failure::Xca)?;
                }
            }
            if out.len() != total {
                return Err(Failure::Xca(XcaError::Truncated));
            }
        }
        CompressionTransform::Chained { original_compressed_segment_size: size, payloads } => {
            if size as usize > cap {
                return Err(Failure::Xca(XcaError::OutputLimit));
            }
            let mut end = 8;
            for pl in &payloads {
                let data = b.get(pl.data_offset..pl.data_offset.saturating_add(pl.data_length)).ok_or(Failure::Record(RecError::Truncated))?;
                end = pl.data_offset + pl.data_length;
                let room = (size as usize).saturating_sub(out.len());
                match pl.compression_algorithm {
                    alg::NONE => {
                        if data.len() > room {
                            return Err(Failure::Xca(XcaError::OutputLimit));
                        }
                        out.extend_from_slice(data);
                    }
                    alg::PATTERN_V1 => {
                        // SMB2_COMPRESSION_PATTERN_PAYLOAD_V1 (§2.2.42.2.2): Pattern, 3 reserved
                        // bytes, Repetitions.
                        if data.len() < 8 {
                            return Err(Failure::Record(RecError::Truncated));
                        }
                        let reps = u32::from_le_bytes([data[4], data[5], data[6], data[7]]) as usize;
                        if reps > room {
                            return Err(Failure::Xca(XcaError::OutputLimit));
                        }
                        out.resize(out.len() + reps, data[0]);
                    }
                    a => {
                        let a = xca::Algorithm::from_u16(a).ok_or(Failure::Xca(XcaError::UnsupportedAlgorithm))?;
                        let want = pl.original_payload_size.unwrap_or(0) as usize;
                        if want > room {
                            return Err(Failure::Xca(XcaError::OutputLimit));
                        }
                        let before = out.len();
                        xca::decompress(a, data, out, want).map_err(Failure::Xca)?;
                        if out.len() - before != want {
                            return Err(Failure::Xca(XcaError::Truncated));
                        }
                    }
                }
            }
            // Every payload listed and the segment complete.
            if end != b.len() || out.len() != size as usize {
                return Err(Failure::Xca(XcaError::Truncated));
            }
        }
    }
    Ok(())
}
