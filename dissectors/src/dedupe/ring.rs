//! The window's queues (the send table and the block ring): a deque in fixed chunks.
//!
//! A `VecDeque` grows by doubling: at the moment it grows it holds the old array and the new
//! one twice as large, copies every entry over, and afterwards keeps up to half of its room
//! unused. For the window, which holds tens of millions of entries at storage-network rates,
//! that is up to three times the memory the entries need, and a copy of the whole window in
//! one call of the ordered stage. Here entries live in chunks of `2^SHIFT` entries: growing
//! adds one chunk, a chunk emptied at the front is kept for reuse (one, so a steady window
//! allocates nothing), and the room held beyond the entries is at most two chunks.

use std::collections::VecDeque;

/// Push `v` into a chunk that has an entry free (`chunk` entries at most); the only chunk of
/// a container grows as a `Vec` does, by doubling up to `chunk`. Returns the room added.
fn push_within<T>(last: &mut Vec<T>, v: T, only: bool, chunk: usize) -> usize {
    let before = last.capacity();
    if only && last.len() == before {
        last.reserve_exact(before.max(4).min(chunk - before));
    }
    last.push(v);
    last.capacity() - before
}

/// A new chunk: the first of a container starts small (`push_within` grows it), later ones
/// are allocated whole.
fn new_chunk<T>(first: bool, chunk: usize) -> Vec<T> {
    Vec::with_capacity(if first { 4.min(chunk) } else { chunk })
}

/// A deque of `T` in chunks of `2^SHIFT` entries.
pub(super) struct Ring<T: Copy, const SHIFT: u32> {
    chunks: VecDeque<Vec<T>>,
    /// Index in `chunks[0]` of the first entry.
    head: usize,
    len: usize,
    /// An emptied chunk kept for the next growth.
    spare: Option<Vec<T>>,
    /// Entries the chunks (the spare one included) have room for.
    allocated: usize,
}

impl<T: Copy, const SHIFT: u32> Default for Ring<T, SHIFT> {
    fn default() -> Self {
        Ring { chunks: VecDeque::new(), head: 0, len: 0, spare: None, allocated: 0 }
    }
}

impl<T: Copy, const SHIFT: u32> Ring<T, SHIFT> {
    /// Entries per chunk.
    pub(super) const CHUNK: usize = 1 << SHIFT;
    const MASK: usize = Self::CHUNK - 1;

    pub(super) fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries the allocated chunks hold room for (the spare one included).
    pub(super) fn capacity(&self) -> usize {
        self.allocated
    }

    /// Add `v` at the back. A ring of one chunk grows it as a `Vec` does, up to the chunk
    /// size (a small window holds little); later chunks are allocated whole.
    pub(super) fn push_back(&mut self, v: T) {
        let one = self.chunks.len() == 1;
        match self.chunks.back_mut() {
            Some(last) if last.len() < Self::CHUNK => self.allocated += push_within(last, v, one, Self::CHUNK),
            _ => {
                let mut c = match self.spare.take() {
                    Some(c) => c,
                    None => {
                        let c = new_chunk(self.chunks.is_empty(), Self::CHUNK);
                        self.allocated += c.capacity();
                        c
                    }
                };
                c.clear();
                c.push(v);
                self.chunks.push_back(c);
            }
        }
        self.len += 1;
    }

    #[inline]
    fn slot(&self, i: usize) -> (usize, usize) {
        let j = self.head + i;
        (j >> SHIFT, j & Self::MASK)
    }

    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        let (c, o) = self.slot(i);
        Some(&self.chunks[c][o])
    }

    #[inline]
    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i >= self.len {
            return None;
        }
        let (c, o) = self.slot(i);
        Some(&mut self.chunks[c][o])
    }

    pub(super) fn front(&self) -> Option<&T> {
        self.get(0)
    }

    pub(super) fn back_mut(&mut self) -> Option<&mut T> {
        match self.len {
            0 => None,
            n => self.get_mut(n - 1),
        }
    }

    pub(super) fn pop_front(&mut self) -> Option<T> {
        let v = *self.front()?;
        self.drop_front(1);
        Some(v)
    }

    /// Remove the first `n` entries (at most all of them).
    pub(super) fn drop_front(&mut self, n: usize) {
        let n = n.min(self.len);
        self.len -= n;
        self.head += n;
        while self.head >= Self::CHUNK || (self.len == 0 && !self.chunks.is_empty()) {
            let Some(c) = self.chunks.pop_front() else { break };
            self.head = self.head.saturating_sub(Self::CHUNK);
            // A chunk still growing (the ring's only one) is not worth keeping.
            if self.spare.is_none() && c.capacity() == Self::CHUNK {
                self.spare = Some(c);
            } else {
                self.allocated -= c.capacity();
            }
        }
        if self.len == 0 {
            self.head = 0;
        }
    }

    /// Entries `start..end`, in order.
    pub(super) fn range(&self, start: usize, end: usize) -> impl ExactSizeIterator<Item = &T> + '_ {
        let end = end.min(self.len);
        (start.min(end)..end).map(move |i| {
            let (c, o) = self.slot(i);
            &self.chunks[c][o]
        })
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.range(0, self.len)
    }
}

impl<T: Copy, const SHIFT: u32> std::ops::Index<usize> for Ring<T, SHIFT> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        self.get(i).expect("index within the ring")
    }
}

impl<T: Copy, const SHIFT: u32> std::ops::IndexMut<usize> for Ring<T, SHIFT> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.get_mut(i).expect("index within the ring")
    }
}

/// A vector in chunks of `2^SHIFT` entries (indexed, grown at the back, never shrunk): the
/// open payloads' slots, which a `Vec` would hold up to twice the room for.
pub(super) struct Chunked<T, const SHIFT: u32> {
    chunks: Vec<Vec<T>>,
    len: usize,
    allocated: usize,
}

impl<T, const SHIFT: u32> Default for Chunked<T, SHIFT> {
    fn default() -> Self {
        Chunked { chunks: Vec::new(), len: 0, allocated: 0 }
    }
}

impl<T, const SHIFT: u32> Chunked<T, SHIFT> {
    const CHUNK: usize = 1 << SHIFT;

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Entries the allocated chunks hold room for.
    pub(super) fn capacity(&self) -> usize {
        self.allocated
    }

    /// Add `v` at the end: the first chunk grows as a `Vec` does, up to the chunk size;
    /// later ones are allocated whole.
    pub(super) fn push(&mut self, v: T) {
        let one = self.chunks.len() == 1;
        match self.chunks.last_mut() {
            Some(last) if last.len() < Self::CHUNK => self.allocated += push_within(last, v, one, Self::CHUNK),
            _ => {
                let mut c = new_chunk(self.chunks.is_empty(), Self::CHUNK);
                self.allocated += c.capacity();
                c.push(v);
                self.chunks.push(c);
            }
        }
        self.len += 1;
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks.iter().flatten()
    }
}

impl<T, const SHIFT: u32> std::ops::Index<usize> for Chunked<T, SHIFT> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        &self.chunks[i >> SHIFT][i & (Self::CHUNK - 1)]
    }
}

impl<T, const SHIFT: u32> std::ops::IndexMut<usize> for Chunked<T, SHIFT> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.chunks[i >> SHIFT][i & (Self::CHUNK - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring behaves as a `VecDeque` under any mix of pushes and front removals across
    /// chunk boundaries, and holds at most two chunks beyond its entries.
    #[test]
    fn behaves_as_a_deque() {
        const CHUNK: usize = Ring::<u64, 5>::CHUNK;
        let mut ring = Ring::<u64, 5>::new();
        let mut model = VecDeque::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = 0u64;
        for _ in 0..4000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = (x % (3 * CHUNK as u64)) as usize;
            if x & (1 << 40) != 0 {
                for _ in 0..n {
                    ring.push_back(next);
                    model.push_back(next);
                    next += 1;
                }
            } else if x & (1 << 41) != 0 {
                let n = n.min(model.len() + 3);
                ring.drop_front(n);
                model.drain(..n.min(model.len()));
            } else {
                assert_eq!(ring.pop_front(), model.pop_front());
            }
            assert_eq!(ring.len(), model.len());
            assert!(ring.capacity() <= model.len() + 3 * CHUNK, "{} for {}", ring.capacity(), model.len());
            assert_eq!(ring.front(), model.front());
            if let (Some(a), Some(b)) = (ring.back_mut(), model.back_mut()) {
                assert_eq!(a, b);
            }
            let probe = (x as usize >> 3) % (model.len() + 2);
            assert_eq!(ring.get(probe), model.get(probe));
            let (a, b) = (probe / 2, probe);
            assert!(ring.range(a, b).eq(model.range(a.min(model.len())..b.min(model.len()))));
        }
        assert!(ring.iter().eq(model.iter()));
    }

    #[test]
    fn chunked_is_a_vector() {
        let mut c = Chunked::<String, 3>::default();
        for i in 0..100 {
            c.push(i.to_string());
            assert_eq!(c.len(), i + 1);
            let want = if i < 8 { (i + 1).next_power_of_two().max(4) } else { (i / 8 + 1) * 8 };
            assert_eq!(c.capacity(), want, "{i}");
        }
        c[42].push('!');
        assert_eq!(c[42], "42!");
        assert_eq!(c[99], "99");
        assert_eq!(c.iter().count(), 100);
    }
}
