//! LZ77+Huffman (MS-XCA §2.1 compression, §2.2 decompression). The output is cut in blocks
//! of 65536 bytes; each block's input starts with 256 bytes holding 512 4-bit code lengths
//! (low nibble = even symbol), a canonical Huffman code (codes ordered by length, then
//! symbol; at most 15 bits). Then a bit stream read from 16-bit little-endian words, highest
//! bit first, with 32 bits read ahead. Symbols 0-255 are literals; 256 + (offset bit count
//! << 4 | length nibble) is a match: the offset is 2^count plus `count` more stream bits,
//! the length nibble + 3 (15 continues in a byte at the current input position, 255 there
//! in a 16-bit length - 3, 0 there in a 32-bit one). Symbol 256 at the end of the input is
//! the end of the stream. Because of the read-ahead, the extra length bytes sit after the
//! words already read, and each block's table after its last read-ahead word (§2.2.4: a block
//! ends once the output reaches BlockEnd; the next table is read at the current input position).
//! Windows writes multi-block streams so (tests.rs, `windows_vectors_decompress_byte_for_byte`).

use super::matcher::Matcher;
use super::{Sink, XcaError};

const BLOCK: usize = 65536;
const TABLE_BYTES: usize = 256;
const SYMBOLS: usize = 512;
const MAX_BITS: u32 = 15;
const EOF: u16 = 256;
const MAX_OFFSET: usize = 65535;

/// The bit stream of one block: `next` holds the bits read ahead, highest first.
struct Bits<'a> {
    input: &'a [u8],
    at: usize,
    next: u32,
    /// Bits in `next` beyond the 16 the decoder may look at, as in MS-XCA §2.2.4.
    extra: i32,
    /// Words read past the input's end (zeros); their bits may be looked at, not consumed.
    phantom: i32,
}

impl<'a> Bits<'a> {
    fn word(&mut self) -> u32 {
        let w = match self.input.get(self.at..self.at + 2) {
            Some(b) => u16::from_le_bytes([b[0], b[1]]) as u32,
            None => {
                if self.at < self.input.len() {
                    self.input[self.at] as u32
                } else {
                    self.phantom += 1;
                    0
                }
            }
        };
        self.at += 2;
        w
    }

    fn new(input: &'a [u8], at: usize) -> Bits<'a> {
        let mut b = Bits { input, at, next: 0, extra: 16, phantom: 0 };
        let hi = b.word();
        let lo = b.word();
        b.next = hi << 16 | lo;
        b
    }

    #[inline]
    fn peek15(&self) -> usize {
        (self.next >> (32 - MAX_BITS)) as usize
    }

    /// Drops `n` (at most 16) bits and reads a word when the read-ahead runs short.
    #[inline]
    fn consume(&mut self, n: u32) -> Result<(), XcaError> {
        if n == 0 {
            return Ok(());
        }
        self.next = if n >= 32 { 0 } else { self.next << n };
        self.extra -= n as i32;
        if self.extra < 0 {
            let w = self.word();
            self.next |= w << (-self.extra) as u32;
            self.extra += 16;
        }
        // Consumed bits must come from the input, not from the zeros read past its end.
        if 16 + self.extra < 16 * self.phantom {
            return Err(XcaError::Truncated);
        }
        Ok(())
    }

    /// `n` (at most 15) bits as a number.
    #[inline]
    fn take(&mut self, n: u32) -> Result<usize, XcaError> {
        if n == 0 {
            return Ok(0);
        }
        let v = (self.next >> (32 - n)) as usize;
        self.consume(n)?;
        Ok(v)
    }

    fn byte(&mut self) -> Result<usize, XcaError> {
        let b = *self.input.get(self.at).ok_or(XcaError::Truncated)?;
        self.at += 1;
        Ok(b as usize)
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], XcaError> {
        let b = self.input.get(self.at..self.at + N).ok_or(XcaError::Truncated)?;
        self.at += N;
        Ok(b.try_into().expect("N bytes"))
    }

    /// The whole input has been read (the read-ahead holds the rest).
    fn exhausted(&self) -> bool {
        self.at >= self.input.len()
    }
}

/// Fills `table` (2^15 entries: symbol << 4 | length, 0 = no code) from a block's lengths.
fn decoding_table(lengths: &[u8], table: &mut [u16]) -> Result<(), XcaError> {
    table.fill(0);
    let mut next = 0usize; // the next code, left-aligned to 15 bits
    let mut any = false;
    for len in 1..=MAX_BITS {
        let span = 1usize << (MAX_BITS - len);
        for sym in 0..SYMBOLS {
            let l = (lengths[sym / 2] >> (4 * (sym % 2))) & 0x0f;
            if l as u32 != len {
                continue;
            }
            if next + span > table.len() {
                return Err(XcaError::BadHuffmanTable);
            }
            table[next..next + span].fill((sym as u16) << 4 | len as u16);
            next += span;
            any = true;
        }
    }
    if !any {
        return Err(XcaError::BadHuffmanTable);
    }
    Ok(())
}

pub(super) fn decompress(input: &[u8], sink: &mut Sink) -> Result<(), XcaError> {
    let mut table = vec![0u16; 1 << MAX_BITS];
    let mut at = 0usize;
    loop {
        if at >= input.len() {
            return Ok(());
        }
        let lengths = input.get(at..at + TABLE_BYTES).ok_or(XcaError::Truncated)?;
        decoding_table(lengths, &mut table)?;
        let mut bits = Bits::new(input, at + TABLE_BYTES);
        let block_end = sink.written() + BLOCK;
        while sink.written() < block_end {
            let entry = table[bits.peek15()];
            if entry == 0 {
                return Err(XcaError::BadHuffmanCode);
            }
            bits.consume((entry & 0x0f) as u32)?;
            let sym = entry >> 4;
            if sym < 256 {
                sink.literal(sym as u8)?;
                continue;
            }
            if sym == EOF && (bits.exhausted() || sink.at_limit()) {
                return Ok(());
            }
            let m = (sym - 256) as usize;
            let mut len = m & 0x0f;
            let offset_bits = (m >> 4) as u32;
            if len == 15 {
                len = bits.byte()?;
                if len == 255 {
                    len = u16::from_le_bytes(bits.bytes::<2>()?) as usize;
                    if len == 0 {
                        len = u32::from_le_bytes(bits.bytes::<4>()?) as usize;
                    }
                    if len < 15 {
                        return Err(XcaError::BadLength);
                    }
                    len -= 15;
                }
                len += 15;
            }
            len += 3;
            let offset = (1usize << offset_bits) + bits.take(offset_bits)?;
            let window = sink.written();
            sink.copy_match(offset, len, window)?;
        }
        at = bits.at;
        // What is left cannot hold another block (a stream whose last block is full ends its
        // end-of-stream symbol there): done.
        if input.len().saturating_sub(at) < TABLE_BYTES + 4 {
            return Ok(());
        }
    }
}

/// One item of a block, before its code is known.
#[derive(Clone, Copy)]
enum Item {
    Literal(u8),
    Match { len: usize, offset: usize },
}

fn match_symbol(len: usize, offset: usize) -> usize {
    let offset_bits = usize::BITS - 1 - offset.leading_zeros();
    256 + ((offset_bits as usize) << 4) + (len - 3).min(15)
}

/// Code lengths of at most `MAX_BITS` for these frequencies (Huffman; frequencies are halved
/// until the longest code fits). At least two symbols get a code.
fn code_lengths(freq: &[u32; SYMBOLS]) -> [u8; SYMBOLS] {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut f = *freq;
    let mut used = f.iter().filter(|&&x| x > 0).count();
    for x in f.iter_mut() {
        if used >= 2 {
            break;
        }
        if *x == 0 {
            *x = 1;
            used += 1;
        }
    }
    loop {
        // Nodes: leaves 0..512, then internal nodes; parent links give the depths.
        let mut parent: Vec<usize> = vec![usize::MAX; SYMBOLS];
        let mut heap: BinaryHeap<Reverse<(u64, usize)>> =
            (0..SYMBOLS).filter(|&s| f[s] > 0).map(|s| Reverse((f[s] as u64, s))).collect();
        while heap.len() > 1 {
            let Reverse((fa, a)) = heap.pop().expect("two nodes");
            let Reverse((fb, b)) = heap.pop().expect("two nodes");
            let n = parent.len();
            parent.push(usize::MAX);
            parent[a] = n;
            parent[b] = n;
            heap.push(Reverse((fa + fb, n)));
        }
        let mut depth = vec![0u8; parent.len()];
        for n in (0..parent.len()).rev() {
            if parent[n] != usize::MAX {
                depth[n] = depth[parent[n]] + 1;
            }
        }
        let mut lengths = [0u8; SYMBOLS];
        let mut longest = 0;
        for s in 0..SYMBOLS {
            if f[s] > 0 {
                lengths[s] = depth[s];
                longest = longest.max(depth[s] as u32);
            }
        }
        if longest <= MAX_BITS {
            return lengths;
        }
        for x in f.iter_mut().filter(|x| **x > 0) {
            *x = (*x >> 1).max(1);
        }
    }
}

/// Canonical codes for these lengths (as the decoder builds them).
fn canonical_codes(lengths: &[u8; SYMBOLS]) -> [u16; SYMBOLS] {
    let mut codes = [0u16; SYMBOLS];
    let mut next = 0u32;
    for len in 1..=MAX_BITS as u8 {
        for s in 0..SYMBOLS {
            if lengths[s] == len {
                codes[s] = next as u16;
                next += 1;
            }
        }
        next <<= 1;
    }
    codes
}

/// Writes the bit stream as the decoder reads it: a word's two bytes are reserved when the
/// decoder would read it ahead, so bytes written between (extra match lengths) land where the
/// decoder finds them.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    /// Reserved word positions not yet filled, oldest first.
    slots: std::collections::VecDeque<usize>,
    acc: u32,
    acc_bits: u32,
    /// Bits the decoder has consumed, and words it has read.
    consumed: u64,
    words_read: u64,
}

impl<'a> BitWriter<'a> {
    fn new(out: &'a mut Vec<u8>) -> BitWriter<'a> {
        let mut w = BitWriter { out, slots: Default::default(), acc: 0, acc_bits: 0, consumed: 0, words_read: 0 };
        w.reserve();
        w.reserve();
        w
    }

    fn reserve(&mut self) {
        self.slots.push_back(self.out.len());
        self.out.extend_from_slice(&[0, 0]);
        self.words_read += 1;
    }

    fn put(&mut self, value: u32, n: u32) {
        if n == 0 {
            return;
        }
        self.acc = self.acc << n | (value & ((1 << n) - 1));
        self.acc_bits += n;
        if self.acc_bits >= 16 {
            let word = (self.acc >> (self.acc_bits - 16)) as u16;
            self.acc_bits -= 16;
            self.acc &= (1u32 << self.acc_bits).wrapping_sub(1);
            let at = self.slots.pop_front().expect("the decoder read this word ahead");
            self.out[at..at + 2].copy_from_slice(&word.to_le_bytes());
        }
        self.consumed += n as u64;
        // The decoder reads one more word once fewer than 16 bits are left ahead of it.
        if self.consumed > 16 * (self.words_read - 1) {
            self.reserve();
        }
    }

    /// Fills the last, partial word; the remaining reserved words stay zero.
    fn finish(mut self) {
        if self.acc_bits > 0 {
            let word = (self.acc << (16 - self.acc_bits)) as u16;
            let at = self.slots.pop_front().expect("a reserved word for the last bits");
            self.out[at..at + 2].copy_from_slice(&word.to_le_bytes());
        }
    }
}

pub(super) fn compress(input: &[u8], out: &mut Vec<u8>) {
    if input.is_empty() {
        return;
    }
    let mut m = Matcher::new(input);
    let mut items = Vec::new();
    for start in (0..input.len()).step_by(BLOCK) {
        let end = (start + BLOCK).min(input.len());
        let last = end == input.len();
        items.clear();
        let mut freq = [0u32; SYMBOLS];
        let mut p = start;
        while p < end {
            // Matches stay inside the block, so every decoder agrees where blocks end.
            let (mut len, offset) = m.find(p, 0, MAX_OFFSET, end - p);
            if len == 3 && offset == 1 {
                len = 0; // symbol 256 is kept for the end of the stream
            }
            if len >= 3 {
                items.push(Item::Match { len, offset });
                freq[match_symbol(len, offset)] += 1;
                p += len;
            } else {
                items.push(Item::Literal(input[p]));
                freq[input[p] as usize] += 1;
                p += 1;
            }
        }
        freq[EOF as usize] += 1;
        let lengths = code_lengths(&freq);
        let codes = canonical_codes(&lengths);
        for pair in lengths.chunks(2) {
            out.push(pair[0] | pair[1] << 4);
        }
        let mut w = BitWriter::new(out);
        for item in &items {
            match *item {
                Item::Literal(b) => w.put(codes[b as usize] as u32, lengths[b as usize] as u32),
                Item::Match { len, offset } => {
                    let sym = match_symbol(len, offset);
                    w.put(codes[sym] as u32, lengths[sym] as u32);
                    let l = len - 3;
                    if l >= 15 {
                        if l - 15 < 255 {
                            w.out.push((l - 15) as u8);
                        } else {
                            w.out.push(255);
                            if l <= 0xffff {
                                w.out.extend_from_slice(&(l as u16).to_le_bytes());
                            } else {
                                w.out.extend_from_slice(&[0, 0]);
                                w.out.extend_from_slice(&(l as u32).to_le_bytes());
                            }
                        }
                    }
                    let offset_bits = usize::BITS - 1 - offset.leading_zeros();
                    w.put((offset - (1 << offset_bits)) as u32, offset_bits);
                }
            }
        }
        if last {
            w.put(codes[EOF as usize] as u32, lengths[EOF as usize] as u32);
        }
        w.finish();
    }
}
