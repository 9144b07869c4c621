//! What of a live send only its evidence needs, as a byte stream (`ColdLog`).
//!
//! A send's first and last payload frames, the frame of its SMB2 header, its own capture
//! time, its file offset, its evidence context and its capture file are read only when the
//! send leaves the window (`Dedupe::fold_front`) or by a snapshot, both in send order; the
//! index decides nothing with them. So they are not kept in the send table's fixed-size
//! records (where they took 40 of 80 bytes) but appended here, each as a variable-length
//! integer of its difference from the previous send's value: sends come a frame or a few
//! apart, most often on a connection's one file, at nearby offsets. On 4 KiB I/O a send's
//! fields take 8-14 bytes. Every value comes back exactly, whatever it is (a difference is
//! taken modulo 2^64 and its sign folded into the low bit).

use super::ring::Ring;

/// One send's evidence fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Cold {
    /// Its first payload frame.
    pub frame: u64,
    pub last_frame: u64,
    /// The frame of its SMB2 header; `None` when the header came in the first payload frame
    /// (or is not known).
    pub header_frame: Option<u64>,
    /// Its window time minus its own capture time (a send handed over after a later one).
    pub time_back: u64,
    pub offset: u64,
    /// Its evidence context (`Evidence::intern`).
    pub ctx: u32,
    /// Its capture file (merged inputs).
    pub file: u16,
}

/// What the next send's differences are taken from: the previous send's values.
#[derive(Clone, Copy, Debug, Default)]
struct Prev {
    frame: u64,
    offset: u64,
    ctx: u32,
    file: u16,
}

impl Prev {
    fn of(c: &Cold) -> Prev {
        Prev { frame: c.frame, offset: c.offset, ctx: c.ctx, file: c.file }
    }
}

/// The stream grows and shrinks in chunks of this many bytes (64 KiB), like the send table.
const CHUNK_SHIFT: u32 = 16;

/// A send is read from the nearest of these before it (`ColdLog::get_sorted`).
const MARK_EVERY: u64 = 64;

/// Where a send's bytes start in the stream (counting every byte ever pushed) and the values
/// it is decoded against: one every `MARK_EVERY` sends, so a snapshot reads the few sends it
/// lists without decoding every one before them.
#[derive(Clone, Copy, Debug)]
struct Mark {
    /// The send's number, counting every send ever pushed.
    send: u64,
    byte: u64,
    prev: Prev,
}

/// The evidence fields of every live send, oldest first.
#[derive(Default)]
pub(super) struct ColdLog {
    bytes: Ring<u8, CHUNK_SHIFT>,
    /// The newest send's values (the next push is encoded against them).
    back: Prev,
    /// The values of the send before the oldest live one (the oldest is decoded against them).
    front: Prev,
    /// Sends in the stream.
    sends: usize,
    /// Sends ever pushed, and bytes ever dropped from the front.
    pushed: u64,
    dropped: u64,
    /// Of the live sends, every `MARK_EVERY`-th's (by `pushed`), oldest first.
    marks: std::collections::VecDeque<Mark>,
}

/// A signed difference folded into an unsigned one: 0, -1, 1, -2 ... become 0, 1, 2, 3 ...
#[inline]
fn fold_sign(d: u64) -> u64 {
    (d << 1) ^ ((d as i64 >> 63) as u64)
}

#[inline]
fn unfold_sign(v: u64) -> u64 {
    (v >> 1) ^ (v & 1).wrapping_neg()
}

/// Reads a send's values back, byte by byte.
struct Reader<I> {
    bytes: I,
    used: usize,
}

impl<'a, I: Iterator<Item = &'a u8>> Reader<I> {
    /// An unsigned value of up to 128 bits, 7 bits a byte, low bits first.
    fn value(&mut self) -> u128 {
        let mut v = 0u128;
        let mut shift = 0;
        loop {
            // The stream holds what `push` wrote: it cannot end inside a value.
            let Some(&b) = self.bytes.next() else {
                debug_assert!(false, "cold stream ends inside a value");
                return v;
            };
            self.used += 1;
            if shift < 128 {
                v |= u128::from(b & 0x7f) << shift;
            }
            if b & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }

    fn next_after(&mut self, prev: &Prev) -> Cold {
        let frame = prev.frame.wrapping_add(unfold_sign(self.value() as u64));
        let last_frame = frame.wrapping_add(unfold_sign(self.value() as u64));
        let header_frame = match self.value() {
            0 => None,
            v => Some(frame.wrapping_add(unfold_sign((v - 1) as u64))),
        };
        let time_back = self.value() as u64;
        let offset = prev.offset.wrapping_add(unfold_sign(self.value() as u64));
        let ctx = prev.ctx.wrapping_add(unfold_sign(self.value() as u64) as u32);
        let file = prev.file.wrapping_add(unfold_sign(self.value() as u64) as u16);
        Cold { frame, last_frame, header_frame, time_back, offset, ctx, file }
    }
}

impl ColdLog {
    fn put(&mut self, mut v: u128) {
        while v >= 0x80 {
            self.bytes.push_back(v as u8 | 0x80);
            v >>= 7;
        }
        self.bytes.push_back(v as u8);
    }

    /// Append the newest send's values.
    pub(super) fn push(&mut self, c: &Cold) {
        let p = self.back;
        if self.pushed.is_multiple_of(MARK_EVERY) {
            self.marks.push_back(Mark { send: self.pushed, byte: self.dropped + self.bytes.len() as u64, prev: p });
        }
        self.pushed += 1;
        self.put(u128::from(fold_sign(c.frame.wrapping_sub(p.frame))));
        self.put(u128::from(fold_sign(c.last_frame.wrapping_sub(c.frame))));
        self.put(c.header_frame.map_or(0, |h| u128::from(fold_sign(h.wrapping_sub(c.frame))) + 1));
        self.put(u128::from(c.time_back));
        self.put(u128::from(fold_sign(c.offset.wrapping_sub(p.offset))));
        // Differences of the narrower fields, sign-extended to 64 bits before folding.
        self.put(u128::from(fold_sign(i64::from(c.ctx.wrapping_sub(p.ctx) as i32) as u64)));
        self.put(u128::from(fold_sign(i64::from(c.file.wrapping_sub(p.file) as i16) as u64)));
        self.back = Prev::of(c);
        self.sends += 1;
    }

    /// Take the oldest send's values out.
    pub(super) fn pop_front(&mut self) -> Cold {
        debug_assert!(self.sends > 0, "pop from an empty cold stream");
        let (c, used) = {
            let mut r = Reader { bytes: self.bytes.iter(), used: 0 };
            (r.next_after(&self.front), r.used)
        };
        self.bytes.drop_front(used);
        self.dropped += used as u64;
        self.front = Prev::of(&c);
        self.sends = self.sends.saturating_sub(1);
        let oldest = self.pushed - self.sends as u64;
        while self.marks.front().is_some_and(|m| m.send < oldest) {
            self.marks.pop_front();
        }
        if self.sends == 0 {
            debug_assert!(self.bytes.is_empty());
            self.front = self.back;
        }
        c
    }

    /// Every live send's values, oldest first (tests; a snapshot reads a few: `get_sorted`).
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = Cold> + '_ {
        let mut r = Reader { bytes: self.bytes.iter(), used: 0 };
        let mut prev = self.front;
        (0..self.sends).map(move |_| {
            let c = r.next_after(&prev);
            prev = Prev::of(&c);
            c
        })
    }

    /// The values of the live sends at `at` (positions from the oldest, ascending; each
    /// less than the number of live sends), in that order. Each is read from the nearest mark
    /// before it or from the one read before, whichever is nearer: at most `MARK_EVERY` sends
    /// decoded per position, however many sends are live.
    pub(super) fn get_sorted(&self, at: &[usize]) -> Vec<Cold> {
        let oldest = self.pushed - self.sends as u64;
        let front = Mark { send: oldest, byte: self.dropped, prev: self.front };
        // The next send to decode, from where the last one read ended.
        let mut cur: Option<Mark> = None;
        let mut out = Vec::with_capacity(at.len());
        for &k in at {
            debug_assert!(k < self.sends, "cold stream has {} sends, asked for {k}", self.sends);
            let want = oldest + k as u64;
            let i = self.marks.partition_point(|m| m.send <= want);
            let mark = match i {
                0 => front,
                i => self.marks[i - 1],
            };
            let mut from = match cur {
                Some(c) if c.send <= want && c.send >= mark.send => c,
                _ => mark,
            };
            let start = (from.byte - self.dropped) as usize;
            let mut r = Reader { bytes: self.bytes.range(start, self.bytes.len()), used: 0 };
            let mut c = r.next_after(&from.prev);
            while from.send < want {
                from.send += 1;
                from.prev = Prev::of(&c);
                c = r.next_after(&from.prev);
            }
            cur = Some(Mark { send: want + 1, byte: from.byte + r.used as u64, prev: Prev::of(&c) });
            out.push(c);
        }
        out
    }

    /// Bytes the live sends' values take (their marks included).
    pub(super) fn len_bytes(&self) -> usize {
        self.bytes.len() + self.marks.len() * std::mem::size_of::<Mark>()
    }

    /// Bytes allocated for them.
    pub(super) fn capacity_bytes(&self) -> usize {
        self.bytes.capacity() + self.marks.capacity() * std::mem::size_of::<Mark>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(i: u64, x: u64) -> Cold {
        Cold {
            frame: 1000 + 3 * i,
            last_frame: 1000 + 3 * i + (x % 5),
            header_frame: (!i.is_multiple_of(3)).then(|| 999 + 3 * i),
            time_back: if i.is_multiple_of(7) { x % 100_000 } else { 0 },
            offset: (x % (1 << 30)) << 12,
            ctx: (i / 10) as u32,
            file: 0,
        }
    }

    /// Values come back exactly, in order, through pushes and pops interleaved, and a
    /// snapshot's iteration sees the live ones; the extremes of every field included.
    #[test]
    fn every_value_comes_back() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut want = std::collections::VecDeque::new();
        let mut log = ColdLog::default();
        let extremes = [
            Cold { frame: u64::MAX, last_frame: 0, header_frame: Some(u64::MAX), time_back: u64::MAX, offset: u64::MAX, ctx: u32::MAX, file: u16::MAX },
            Cold { frame: 0, last_frame: u64::MAX, header_frame: Some(0), time_back: 0, offset: 0, ctx: 0, file: 0 },
            Cold { frame: 1 << 63, last_frame: (1 << 63) - 1, header_frame: Some((1 << 63) + 1), time_back: 1 << 63, offset: 1 << 63, ctx: 1 << 31, file: 1 << 15 },
            Cold { frame: 5, last_frame: 5, header_frame: None, time_back: 1, offset: 4096, ctx: 7, file: 3 },
        ];
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let c = if i % 1000 < 4 { extremes[(i % 1000) as usize] } else { sample(i, x) };
            log.push(&c);
            want.push_back(c);
            if x.is_multiple_of(3) {
                assert_eq!(Some(log.pop_front()), want.pop_front());
            }
            if i % 4999 == 0 {
                assert!(log.iter().eq(want.iter().copied()));
            }
            if i % 997 == 0 && !want.is_empty() {
                // Any ascending positions: far apart, neighbours, repeated, the first and last.
                let n = want.len();
                let mut at: Vec<usize> = (0..40).map(|j| ((x >> j) as usize ^ (j * 7919)) % n).collect();
                at.extend([0, n - 1, n / 2, n / 2 + 1, n / 2 + 1]);
                at.retain(|&k| k < n);
                at.sort_unstable();
                let got = log.get_sorted(&at);
                assert_eq!(got, at.iter().map(|&k| want[k]).collect::<Vec<_>>(), "at {at:?}");
            }
        }
        assert!(log.iter().eq(want.iter().copied()));
        while let Some(c) = want.pop_front() {
            assert_eq!(log.pop_front(), c);
        }
        assert_eq!(log.len_bytes(), 0);
        assert!(log.marks.is_empty());
        // Emptied, it encodes the next send against the last one pushed.
        let c = sample(3, 77);
        log.push(&c);
        assert_eq!(log.pop_front(), c);
    }

    /// A 4 KiB send's fields in a few bytes: consecutive frames, one file, random offsets
    /// within a 4 TiB volume.
    #[test]
    fn small_io_takes_few_bytes() {
        let mut log = ColdLog::default();
        let mut x = 1u64;
        for i in 0..10_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            log.push(&Cold {
                frame: 1_000_000 + 4 * i,
                last_frame: 1_000_000 + 4 * i + 2,
                header_frame: None,
                time_back: 0,
                offset: (x >> 34) << 12,
                ctx: 3,
                file: 0,
            });
        }
        // 1 byte each but the offset's, a 43-bit difference: 7.
        assert!(log.len_bytes() <= 10_000 * 13, "{}", log.len_bytes());
    }

    #[test]
    fn sign_folding_round_trips() {
        for d in [0u64, 1, 2, u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) - 1, 12345, 0u64.wrapping_sub(12345)] {
            assert_eq!(unfold_sign(fold_sign(d)), d);
        }
        assert_eq!([0u64, u64::MAX, 1, u64::MAX - 1].map(fold_sign), [0, 1, 2, 3]);
    }
}
