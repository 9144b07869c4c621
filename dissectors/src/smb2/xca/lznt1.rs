//! LZNT1 (MS-XCA §2.5): a sequence of chunks, each holding at most 4096 bytes of output.
//! A chunk starts with a 16-bit little-endian header: bits 0-11 the chunk's size minus 3
//! (so the data after the header is that value plus 1 bytes), bits 12-14 the signature 0b011,
//! bit 15 set when the data is compressed. A zero header (or the input's end) ends the stream.
//! Compressed data is groups of a flag byte (bit i, lowest first, set = the i-th item is a
//! 2-byte copy token) and up to 8 items; a copy token splits into offset and length bits by
//! how much of the chunk is already decompressed (the offset field is as wide as needed to
//! reach the chunk's start, at least 4 bits). References never leave the chunk.

use super::matcher::Matcher;
use super::{Sink, XcaError};

const CHUNK: usize = 4096;
const SIGNATURE: u16 = 0x3000;
const COMPRESSED: u16 = 0x8000;

/// Length bits of a copy token when `pos` bytes of the chunk are decompressed (1..=4096).
#[inline]
fn length_bits(pos: usize) -> u32 {
    // Offset bits: enough to represent pos - 1, at least 4.
    let need = usize::BITS - (pos - 1).leading_zeros();
    16 - need.max(4)
}

pub(super) fn decompress(input: &[u8], sink: &mut Sink) -> Result<(), XcaError> {
    let mut at = 0usize;
    while at < input.len() {
        if at + 2 > input.len() {
            return Err(XcaError::Truncated);
        }
        let header = u16::from_le_bytes([input[at], input[at + 1]]);
        if header == 0 {
            return Ok(());
        }
        at += 2;
        if header & 0x7000 != SIGNATURE {
            return Err(XcaError::BadChunk);
        }
        let size = (header & 0x0fff) as usize + 1;
        let chunk = input.get(at..at + size).ok_or(XcaError::Truncated)?;
        at += size;
        if header & COMPRESSED == 0 {
            sink.raw(chunk)?;
        } else {
            chunk_decompress(chunk, sink)?;
        }
    }
    Ok(())
}

fn chunk_decompress(chunk: &[u8], sink: &mut Sink) -> Result<(), XcaError> {
    let chunk_start = sink.written();
    let mut i = 0usize;
    while i < chunk.len() {
        let flags = chunk[i];
        i += 1;
        for bit in 0..8 {
            if i >= chunk.len() {
                break;
            }
            let pos = sink.written() - chunk_start;
            if flags & (1 << bit) == 0 {
                if pos >= CHUNK {
                    return Err(XcaError::BadChunk);
                }
                sink.literal(chunk[i])?;
                i += 1;
            } else {
                if i + 2 > chunk.len() {
                    return Err(XcaError::Truncated);
                }
                let token = u16::from_le_bytes([chunk[i], chunk[i + 1]]) as usize;
                i += 2;
                if pos == 0 {
                    return Err(XcaError::BadOffset);
                }
                let lbits = length_bits(pos.min(CHUNK));
                let len = (token & ((1 << lbits) - 1)) + 3;
                let offset = (token >> lbits) + 1;
                if pos + len > CHUNK {
                    return Err(XcaError::BadChunk);
                }
                sink.copy_match(offset, len, pos)?;
            }
        }
    }
    Ok(())
}

pub(super) fn compress(input: &[u8], out: &mut Vec<u8>) {
    let mut m = Matcher::new(input);
    let mut body = Vec::with_capacity(CHUNK + CHUNK / 8 + 8);
    for start in (0..input.len()).step_by(CHUNK) {
        let end = (start + CHUNK).min(input.len());
        body.clear();
        chunk_compress(&mut m, input, start, end, &mut body);
        if body.len() < end - start {
            out.extend_from_slice(&(COMPRESSED | SIGNATURE | (body.len() - 1) as u16).to_le_bytes());
            out.extend_from_slice(&body);
        } else {
            out.extend_from_slice(&(SIGNATURE | (end - start - 1) as u16).to_le_bytes());
            out.extend_from_slice(&input[start..end]);
        }
    }
}

fn chunk_compress(m: &mut Matcher, input: &[u8], start: usize, end: usize, body: &mut Vec<u8>) {
    let mut p = start;
    let mut flag_at = usize::MAX;
    let mut items = 8;
    while p < end {
        if items == 8 {
            flag_at = body.len();
            body.push(0);
            items = 0;
        }
        let pos = p - start;
        let (len, off) = if pos == 0 {
            (0, 0)
        } else {
            let lbits = length_bits(pos);
            let max_len = ((1usize << lbits) - 1 + 3).min(end - p);
            m.find(p, start, 1 << (16 - lbits), max_len)
        };
        if len >= 3 {
            let lbits = length_bits(pos);
            let token = ((off - 1) << lbits) | (len - 3);
            body.extend_from_slice(&(token as u16).to_le_bytes());
            body[flag_at] |= 1 << items;
            p += len;
        } else {
            body.push(input[p]);
            p += 1;
        }
        items += 1;
    }
}
