//! The compressors' match finder: a hash chain over 3-byte prefixes, greedy, with a bounded
//! chain walk. Shared by the three compressors; each gives its own window and length limits.

const HASH_BITS: u32 = 15;
const NONE: u32 = u32::MAX;
/// Candidates examined per position.
const CHAIN_DEPTH: usize = 24;

pub(super) struct Matcher<'a> {
    data: &'a [u8],
    head: Vec<u32>,
    prev: Vec<u32>,
    /// Positions below this are in the tables.
    inserted: usize,
}

#[inline]
fn hash3(b: &[u8]) -> usize {
    let v = (b[0] as u32) | (b[1] as u32) << 8 | (b[2] as u32) << 16;
    (v.wrapping_mul(0x9E37_79B1) >> (32 - HASH_BITS)) as usize
}

impl<'a> Matcher<'a> {
    pub(super) fn new(data: &'a [u8]) -> Matcher<'a> {
        Matcher { data, head: vec![NONE; 1 << HASH_BITS], prev: vec![NONE; data.len()], inserted: 0 }
    }

    /// Adds every position before `end` to the tables.
    pub(super) fn insert_to(&mut self, end: usize) {
        while self.inserted < end {
            let p = self.inserted;
            if p + 3 <= self.data.len() {
                let h = hash3(&self.data[p..]);
                self.prev[p] = self.head[h];
                self.head[h] = p as u32;
            }
            self.inserted += 1;
        }
    }

    /// The longest match (length, offset) for `pos` with offset at most `max_offset`, not
    /// reaching before `min_pos`, length at most `max_len`; length 0 when none of 3 or more.
    /// Inserts the positions before `pos` first.
    pub(super) fn find(&mut self, pos: usize, min_pos: usize, max_offset: usize, max_len: usize) -> (usize, usize) {
        self.insert_to(pos);
        let data = self.data;
        let max_len = max_len.min(data.len() - pos);
        if max_len < 3 {
            return (0, 0);
        }
        let lowest = pos.saturating_sub(max_offset).max(min_pos);
        let mut cand = self.head[hash3(&data[pos..])];
        let (mut best_len, mut best_off) = (0usize, 0usize);
        let mut depth = 0;
        while cand != NONE && depth < CHAIN_DEPTH {
            let c = cand as usize;
            if c < lowest {
                break;
            }
            if data[c + best_len.min(max_len - 1)] == data[pos + best_len.min(max_len - 1)] {
                let mut l = 0;
                while l < max_len && data[c + l] == data[pos + l] {
                    l += 1;
                }
                if l > best_len {
                    best_len = l;
                    best_off = pos - c;
                    if l == max_len {
                        break;
                    }
                }
            }
            cand = self.prev[c];
            depth += 1;
        }
        if best_len >= 3 {
            (best_len, best_off)
        } else {
            (0, 0)
        }
    }
}
