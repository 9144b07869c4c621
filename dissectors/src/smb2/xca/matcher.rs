//! The compressors' match finder: a hash chain over 3-byte prefixes, greedy, with a bounded
//! chain walk. Shared by the three compressors; each gives its own window and length limits.

const HASH_BITS: u32 = 15;
const NONE: u32 = u32::MAX;
/// Candidates examined per position.
const CHAIN_DEPTH: usize = 24;

pub(super) struct Matcher<'a> {
    data: &'a [u8],
    /// A fixed-size table: `hash3` is below its length by construction (no index check).
    head: Box<[u32; 1 << HASH_BITS]>,
    prev: Vec<u32>,
    /// Positions below this are in the tables.
    inserted: usize,
}

#[inline]
fn hash3(b: &[u8; 3]) -> usize {
    let v = (b[0] as u32) | (b[1] as u32) << 8 | (b[2] as u32) << 16;
    (v.wrapping_mul(0x9E37_79B1) >> (32 - HASH_BITS)) as usize
}

/// How many leading bytes `a` and `b` (of equal length) share: eight bytes a step, then the
/// first differing byte from the lowest set bit of the XOR (the same length a byte loop gives,
/// in an eighth of the steps: the compressors spend most of their time here on repetitive data).
#[inline]
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut l = 0;
    while l + 8 <= n {
        let x = u64::from_le_bytes(a[l..l + 8].try_into().unwrap()) ^ u64::from_le_bytes(b[l..l + 8].try_into().unwrap());
        if x != 0 {
            return l + (x.trailing_zeros() / 8) as usize;
        }
        l += 8;
    }
    while l < n && a[l] == b[l] {
        l += 1;
    }
    l
}

impl<'a> Matcher<'a> {
    pub(super) fn new(data: &'a [u8]) -> Matcher<'a> {
        let head = vec![NONE; 1 << HASH_BITS].into_boxed_slice().try_into().expect("1 << HASH_BITS entries");
        Matcher { data, head, prev: vec![NONE; data.len()], inserted: 0 }
    }

    /// Adds every position before `end` to the tables (those with 3 bytes from them: the rest
    /// start no match). One pass over 3-byte windows: no per-position index checks, the
    /// compressors' hottest loop.
    pub(super) fn insert_to(&mut self, end: usize) {
        let from = self.inserted;
        if from >= end {
            return;
        }
        let stop = end.min(self.data.len().saturating_sub(2));
        if from < stop {
            let windows = self.data[from..stop + 2].windows(3);
            for ((slot, w), p) in self.prev[from..stop].iter_mut().zip(windows).zip(from as u32..) {
                let h = hash3(w.try_into().expect("3-byte window"));
                *slot = self.head[h];
                self.head[h] = p;
            }
        }
        self.inserted = end;
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
        let mut cand = self.head[hash3(data[pos..pos + 3].try_into().expect("3 bytes"))];
        let (mut best_len, mut best_off) = (0usize, 0usize);
        let mut depth = 0;
        while cand != NONE && depth < CHAIN_DEPTH {
            let c = cand as usize;
            if c < lowest {
                break;
            }
            if data[c + best_len.min(max_len - 1)] == data[pos + best_len.min(max_len - 1)] {
                let l = common_prefix(&data[c..c + max_len], &data[pos..pos + max_len]);
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

#[cfg(test)]
mod tests {
    use super::{common_prefix, hash3, Matcher, CHAIN_DEPTH, NONE};

    fn bytewise(a: &[u8], b: &[u8]) -> usize {
        a.iter().zip(b).take_while(|(x, y)| x == y).count()
    }

    #[test]
    fn common_prefix_is_the_bytewise_length() {
        // Every length 0..40 and every position of the first difference (or none).
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in 0..40usize {
            let a: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            assert_eq!(common_prefix(&a, &a), len);
            for d in 0..len {
                for flip in [1u8, 0x80, 0xff] {
                    let mut b = a.clone();
                    b[d] ^= flip;
                    assert_eq!(common_prefix(&a, &b), d, "len {len} diff at {d}");
                    assert_eq!(common_prefix(&a, &b), bytewise(&a, &b));
                }
            }
        }
    }

    /// The chain walk written plainly: no one-byte filter before comparing a candidate, bytes
    /// compared one at a time.
    fn plain_find(m: &mut Matcher, pos: usize, min_pos: usize, max_offset: usize, max_len: usize) -> (usize, usize) {
        m.insert_to(pos);
        let data = m.data;
        let max_len = max_len.min(data.len() - pos);
        if max_len < 3 {
            return (0, 0);
        }
        let lowest = pos.saturating_sub(max_offset).max(min_pos);
        let mut cand = m.head[hash3(data[pos..pos + 3].try_into().unwrap())];
        let (mut best_len, mut best_off) = (0, 0);
        let mut depth = 0;
        while cand != NONE && depth < CHAIN_DEPTH {
            let c = cand as usize;
            if c < lowest {
                break;
            }
            let l = bytewise(&data[c..c + max_len], &data[pos..pos + max_len]);
            if l > best_len {
                best_len = l;
                best_off = pos - c;
                if l == max_len {
                    break;
                }
            }
            cand = m.prev[c];
            depth += 1;
        }
        if best_len >= 3 {
            (best_len, best_off)
        } else {
            (0, 0)
        }
    }

    /// `find` gives what the plain walk gives at every position (asked in rising order, as the
    /// compressors do, with and without skipping the positions a match covers), on random,
    /// run-heavy, few-symbol and tiled data, with windows, lower bounds and length limits
    /// the three compressors use and tighter ones.
    #[test]
    fn find_is_the_plain_chain_walk() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let random: Vec<u8> = (0..6000).map(|_| next() as u8).collect();
        let runs: Vec<u8> = random.iter().take(300).flat_map(|&b| std::iter::repeat_n(b, 1 + b as usize % 64)).collect();
        let few: Vec<u8> = random.iter().map(|b| b % 3).collect();
        let tiled: Vec<u8> = random[..700].iter().cycle().take(9000).copied().collect();
        let mixed: Vec<u8> = random.iter().enumerate().map(|(i, &b)| if (i / 97) % 2 == 0 { b } else { (i % 5) as u8 }).collect();
        let mut compared = 0;
        for data in [&random, &runs, &few, &tiled, &mixed] {
            for &(max_offset, max_len, chunk, skip) in
                &[(65535, 65538, 0, true), (8191, 4098, 4096, true), (1 << 12, 18, 4096, false), (40, 300, 0, false), (1 << 16, 3, 0, true)]
            {
                let (mut fast, mut plain) = (Matcher::new(data), Matcher::new(data));
                let mut pos = 0;
                while pos < data.len() {
                    let min_pos = pos.checked_div(chunk).map_or(0, |k| k * chunk);
                    let got = fast.find(pos, min_pos, max_offset, max_len);
                    assert_eq!(got, plain_find(&mut plain, pos, min_pos, max_offset, max_len), "at {pos} of {}", data.len());
                    compared += 1;
                    pos += if skip { got.0.max(1) } else { 1 };
                }
            }
        }
        assert!(compared > 50_000, "{compared}");
    }
}
