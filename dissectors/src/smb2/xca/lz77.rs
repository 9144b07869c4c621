//! Plain LZ77 (MS-XCA §2.3 compression, §2.4 decompression). A 32-bit little-endian flag
//! word precedes each group of 32 items; its bits, highest first, say literal (0) or match
//! (1). A match is a 16-bit token: offset - 1 in the high 13 bits (offsets up to 8192),
//! length - 3 in the low 3; the value 7 continues in a shared half-byte (two matches share one
//! byte, low nibble first), 15 there continues in a byte, 255 there in a 16-bit length - 3,
//! and 0 there in a 32-bit one. The stream ends where a token would start after the input.

use super::matcher::Matcher;
use super::{Sink, XcaError};

const MAX_OFFSET: usize = 8192;

#[inline]
fn byte(input: &[u8], at: &mut usize) -> Result<usize, XcaError> {
    let b = *input.get(*at).ok_or(XcaError::Truncated)?;
    *at += 1;
    Ok(b as usize)
}

#[inline]
fn u16_le(input: &[u8], at: &mut usize) -> Result<usize, XcaError> {
    let b = input.get(*at..*at + 2).ok_or(XcaError::Truncated)?;
    *at += 2;
    Ok(u16::from_le_bytes([b[0], b[1]]) as usize)
}

pub(super) fn decompress(input: &[u8], sink: &mut Sink) -> Result<(), XcaError> {
    let mut at = 0usize;
    let mut flags = 0u32;
    let mut flag_count = 0u32;
    // Where the half-byte shared with the next long match is, once its low nibble is used.
    let mut half_byte: Option<usize> = None;
    loop {
        if flag_count == 0 {
            if at == input.len() {
                return Ok(());
            }
            let b = input.get(at..at + 4).ok_or(XcaError::Truncated)?;
            flags = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            at += 4;
            flag_count = 32;
        }
        flag_count -= 1;
        if at == input.len() {
            // The compressor sets the flags after the last item; either kind ends here.
            return Ok(());
        }
        if flags & (1 << flag_count) == 0 {
            sink.literal(input[at])?;
            at += 1;
            continue;
        }
        let token = u16_le(input, &mut at)?;
        let offset = (token >> 3) + 1;
        let mut len = token & 7;
        if len == 7 {
            len = match half_byte.take() {
                Some(h) => (input[h] >> 4) as usize,
                None => {
                    half_byte = Some(at);
                    byte(input, &mut at)? & 0x0f
                }
            };
            if len == 15 {
                len = byte(input, &mut at)?;
                if len == 255 {
                    len = u16_le(input, &mut at)?;
                    if len == 0 {
                        let b = input.get(at..at + 4).ok_or(XcaError::Truncated)?;
                        len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
                        at += 4;
                    }
                    if len < 15 + 7 {
                        return Err(XcaError::BadLength);
                    }
                    len -= 15 + 7;
                }
                len += 15;
            }
            len += 7;
        }
        len += 3;
        let window = sink.written();
        sink.copy_match(offset, len, window)?;
    }
}

/// The compressor's output: items, flag words reserved ahead of their items.
struct Writer<'a> {
    out: &'a mut Vec<u8>,
    flag_at: usize,
    flags: u32,
    flag_count: u32,
    half_byte: Option<usize>,
}

impl<'a> Writer<'a> {
    fn new(out: &'a mut Vec<u8>) -> Writer<'a> {
        let flag_at = out.len();
        out.extend_from_slice(&[0; 4]);
        Writer { out, flag_at, flags: 0, flag_count: 0, half_byte: None }
    }

    fn flag(&mut self, bit: u32) {
        self.flags = self.flags << 1 | bit;
        self.flag_count += 1;
        if self.flag_count == 32 {
            self.out[self.flag_at..self.flag_at + 4].copy_from_slice(&self.flags.to_le_bytes());
            self.flag_at = self.out.len();
            self.out.extend_from_slice(&[0; 4]);
            self.flags = 0;
            self.flag_count = 0;
        }
    }

    fn literal(&mut self, b: u8) {
        self.out.push(b);
        self.flag(0);
    }

    fn matched(&mut self, len: usize, offset: usize) {
        let l = len - 3;
        let low = l.min(7);
        self.out.extend_from_slice(&((((offset - 1) << 3) | low) as u16).to_le_bytes());
        if l >= 7 {
            let l2 = l - 7;
            let nibble = l2.min(15) as u8;
            match self.half_byte.take() {
                Some(h) => self.out[h] |= nibble << 4,
                None => {
                    self.half_byte = Some(self.out.len());
                    self.out.push(nibble);
                }
            }
            if l2 >= 15 {
                let l3 = l2 - 15;
                if l3 < 255 {
                    self.out.push(l3 as u8);
                } else {
                    self.out.push(255);
                    if l <= 0xffff {
                        self.out.extend_from_slice(&(l as u16).to_le_bytes());
                    } else {
                        self.out.extend_from_slice(&[0, 0]);
                        self.out.extend_from_slice(&(l as u32).to_le_bytes());
                    }
                }
            }
        }
        self.flag(1);
    }

    /// The last flag word: the unused flags set (MS-XCA §2.3.4), so a decoder that expects a
    /// match there finds the input's end.
    fn finish(self) {
        let n = self.flag_count;
        let flags = if n == 0 { u32::MAX } else { (self.flags << (32 - n)) | ((1u32 << (32 - n)) - 1) };
        self.out[self.flag_at..self.flag_at + 4].copy_from_slice(&flags.to_le_bytes());
    }
}

pub(super) fn compress(input: &[u8], out: &mut Vec<u8>) {
    let mut m = Matcher::new(input);
    let mut w = Writer::new(out);
    let mut p = 0;
    // Lengths fit the 32-bit form.
    let max_len = u32::MAX as usize;
    while p < input.len() {
        let (len, off) = m.find(p, 0, MAX_OFFSET, max_len);
        if len >= 3 {
            w.matched(len, off);
            p += len;
        } else {
            w.literal(input[p]);
            p += 1;
        }
    }
    w.finish();
}
