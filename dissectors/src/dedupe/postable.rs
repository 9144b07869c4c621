//! The index's lookup tables: sets of 32-bit block positions whose keys (a digest, with an
//! edge or a receiver) are kept elsewhere, in the block ring and the send table.
//!
//! Open addressing with linear probing over a control byte per slot (empty, deleted, or
//! 0x80 | 7 bits of the hash) and a 4-byte value: 5 bytes per slot, as with hashbrown. The
//! difference is growth. A table that must grow (or shed its deleted slots) allocates the new
//! slot array and moves the old entries over a few at a time, on later inserts; lookups and
//! removals see both arrays until the old one is empty. Re-hashing an entry means reading its
//! key back from the ring (a cache miss per entry, plus a lookup of its send): done all at
//! once, growing three tables of 2^19 entries stalled the ordered stage for 50-120 ms, which
//! is longer than a capture ring holds at a few Gbit/s (the live capture thread runs that
//! stage). Here no single call moves more than `MIGRATE_STEP` slots.
//!
//! The index's tables fill together (the block tables hold about one entry per new block
//! each), so they would all reach their limit on the same insert and move their entries in
//! the same stretch of inserts: three times the work per insert (a 1 MiB send took 8 times
//! as long while it lasted, and the live capture sheds load when its stage falls behind).
//! A table made `staggered(turn)` starts doubling `turn` moves' worth of inserts early (when
//! it holds that many entries fewer than its limit), so tables given turns 0, 1 and 2 that
//! fill together take turns instead, one moving at a time.
//!
//! The new array is allocated and written (its empty slots) ahead, a page every
//! `PREPARE_INSERTS_PER_PAGE` inserts before the growth (`prepare`), so its page faults are
//! spread out. A zeroed allocation made at the growth was faulted in all at once (the
//! allocator's memset, when it reused memory) or by the first inserts and moves, which land
//! on random slots: an array of 2^21 slots took most of its 2,560 faults within about 20 ms,
//! 3-10 us each in a VM, and the live capture thread went 20-30 ms without reading its ring,
//! enough to fill the default ring at 8 Gbit/s and shed the connection
//! (docs/performance-log.md, 2026-12-03).
//!
//! Everything depends only on the hashes (no per-process seed): the same events give the
//! same tables and the same memory figures in every run.

/// Slot never used since the array was made: a probe ends here.
const EMPTY: u8 = 0;
/// Slot whose entry was removed (or moved to the new array): probes go on past it.
const DELETED: u8 = 1;
/// Old slots examined per insert while an old array is being emptied (see `grow`: the new
/// array has room for every insert until then). Sixteen, not four: both arrays are held
/// while the old one empties, and with four that took a quarter of its slots in inserts (the
/// 1 MiB bench captures peaked with the tables' old arrays half emptied: 44 bytes per live
/// block instead of 38). Sixteen moves cost an insert at most about a microsecond (their
/// keys are loaded together).
const MIGRATE_STEP: usize = 16;
const MIN_BUCKETS: usize = 16;
/// A control byte and a 4-byte value.
const SLOT_BYTES: u64 = 5;
/// Inserts per page of the coming array written ahead of a growth (`PosTable::prepare`).
const PREPARE_INSERTS_PER_PAGE: usize = 64;
/// What `prepare` writes at a time: the smallest page size.
const PAGE_BYTES: usize = 4096;
/// Arrays of fewer pages are not prepared (their faults are few).
const PREPARE_MIN_PAGES: usize = 16;

/// The tables' hash step: a 64x64 -> 128-bit multiply folded to 64 bits.
#[inline]
pub(super) fn fold_mul(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

#[inline]
fn tag(hash: u64) -> u8 {
    0x80 | (hash >> 57) as u8
}

#[derive(Default)]
struct Slots {
    ctrl: Vec<u8>,
    vals: Vec<u32>,
    len: usize,
    /// Slots marked deleted (removed entries, and in an old array the moved ones too).
    deleted: usize,
}

impl Slots {
    fn with_buckets(n: usize) -> Self {
        debug_assert!(n.is_power_of_two());
        Slots { ctrl: vec![EMPTY; n], vals: vec![0; n], len: 0, deleted: 0 }
    }

    fn buckets(&self) -> usize {
        self.ctrl.len()
    }

    /// Pages the slot arrays of `n` slots span (the control bytes, then the values).
    fn pages_for(n: usize) -> usize {
        n.div_ceil(PAGE_BYTES) + (n * 4).div_ceil(PAGE_BYTES)
    }

    /// Arrays of `n` slots with room allocated and nothing written yet: `fill_page` makes
    /// them `n` empty slots a page at a time. (A zeroed allocation is written whole at once
    /// when the allocator reuses memory, and faults it all in within that call.)
    fn unfilled(n: usize) -> Self {
        Slots { ctrl: Vec::with_capacity(n), vals: Vec::with_capacity(n), len: 0, deleted: 0 }
    }

    /// Write the next page of empty slots of arrays made by `unfilled(n)`: control bytes
    /// first, then values. False once both hold `n`.
    fn fill_page(&mut self, n: usize) -> bool {
        if self.ctrl.len() < n {
            self.ctrl.resize((self.ctrl.len() + PAGE_BYTES).min(n), EMPTY);
        } else if self.vals.len() < n {
            self.vals.resize((self.vals.len() + PAGE_BYTES / 4).min(n), 0);
        } else {
            return false;
        }
        true
    }

    /// Bytes written of arrays being filled.
    fn filled_bytes(&self) -> usize {
        self.ctrl.len() + self.vals.len() * 4
    }

    fn limit(&self) -> usize {
        self.buckets() / 8 * 7
    }

    fn prefetch(&self, hash: u64) {
        let n = self.buckets();
        if n != 0 {
            let i = hash as usize & (n - 1);
            crate::hint::prefetch_one(&self.ctrl[i]);
            crate::hint::prefetch_one(&self.vals[i]);
        }
    }

    fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<usize> {
        let n = self.buckets();
        if n == 0 || self.len == 0 {
            return None;
        }
        let (mask, t) = (n - 1, tag(hash));
        let mut i = hash as usize & mask;
        loop {
            let c = self.ctrl[i];
            if c == EMPTY {
                return None;
            }
            if c == t && eq(self.vals[i]) {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Put a value whose key is not in the array (the caller checked) in the first free slot
    /// of its probe sequence. The array must have room (`len + deleted < limit`).
    fn insert(&mut self, hash: u64, val: u32) {
        let mask = self.buckets() - 1;
        let mut i = hash as usize & mask;
        loop {
            match self.ctrl[i] {
                EMPTY => break,
                DELETED => {
                    self.deleted -= 1;
                    break;
                }
                _ => i = (i + 1) & mask,
            }
        }
        self.ctrl[i] = tag(hash);
        self.vals[i] = val;
        self.len += 1;
    }

    /// Remove the entry in slot `i`. A removed slot followed by an empty one can be empty
    /// too (no probe needs to pass it: an entry past an empty slot was never probed through
    /// this one), and so can the deleted slots right before it.
    fn remove_at(&mut self, i: usize) {
        let mask = self.buckets() - 1;
        self.len -= 1;
        if self.ctrl[(i + 1) & mask] != EMPTY {
            self.ctrl[i] = DELETED;
            self.deleted += 1;
            return;
        }
        self.ctrl[i] = EMPTY;
        let mut j = i.wrapping_sub(1) & mask;
        while self.ctrl[j] == DELETED {
            self.ctrl[j] = EMPTY;
            self.deleted -= 1;
            j = j.wrapping_sub(1) & mask;
        }
    }
}

/// A set of 32-bit values (block positions) looked up by a caller-given hash and equality;
/// see the module comment.
#[derive(Default)]
pub(super) struct PosTable {
    cur: Slots,
    /// The array being emptied into `cur` (no slots when none is).
    old: Slots,
    /// Next slot of `old` to move.
    cursor: usize,
    /// Moves' worth of inserts it doubles before its limit (see the module comment).
    turn: usize,
    /// The array the next growth will move into, allocated and filled ahead (`prepare`).
    next: Slots,
    /// The slots `next` is being filled to (0: none is).
    next_buckets: usize,
    /// Inserts left before the growth when `next` was allocated.
    lead: usize,
}

impl PosTable {
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// A table that doubles `turn` moves of its array early (`turn` 0: at its limit, as
    /// `new`), so that tables filling together do not move their entries at once.
    pub(super) fn staggered(turn: usize) -> Self {
        PosTable { turn, ..Self::default() }
    }

    pub(super) fn len(&self) -> usize {
        self.cur.len + self.old.len
    }

    /// Slots allocated (both arrays while one is being emptied): 5 bytes each.
    pub(super) fn buckets(&self) -> usize {
        self.cur.buckets() + self.old.buckets()
    }

    /// Bytes of the slot arrays, with what is written of the coming one.
    pub(super) fn bytes(&self) -> u64 {
        self.buckets() as u64 * SLOT_BYTES + self.next.filled_bytes() as u64
    }

    /// Bytes the live entries need, from their count rather than the arrays (what
    /// `max_index_bytes` bounds): 8/7 slots per entry.
    pub(super) fn held_bytes(&self) -> u64 {
        (self.len() as u64 * 8 / 7) * SLOT_BYTES
    }

    /// Bytes of the slot array a table of `len` entries grows to: the smallest power of two
    /// of at least `MIN_BUCKETS` slots that keeps it under 7/8 full (for a table whose hash is
    /// seeded per process, so that its figure is the same in every run).
    pub(super) fn bytes_for_len(len: usize) -> u64 {
        match len {
            0 => 0,
            n => (n * 8 / 7 + 1).max(MIN_BUCKETS).next_power_of_two() as u64 * SLOT_BYTES,
        }
    }

    /// Start loading the slots a lookup of `hash` will probe first (the tables are larger
    /// than the caches; the index asks for a block's slots a few blocks ahead).
    #[inline]
    pub(super) fn prefetch(&self, hash: u64) {
        self.cur.prefetch(hash);
        if self.old.len != 0 {
            self.old.prefetch(hash);
        }
    }

    /// The value matching `eq`.
    pub(super) fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        if let Some(i) = self.cur.find(hash, &mut eq) {
            return Some(self.cur.vals[i]);
        }
        let i = self.old.find(hash, eq)?;
        Some(self.old.vals[i])
    }

    pub(super) fn find_mut(&mut self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<&mut u32> {
        if let Some(i) = self.cur.find(hash, &mut eq) {
            return Some(&mut self.cur.vals[i]);
        }
        let i = self.old.find(hash, eq)?;
        Some(&mut self.old.vals[i])
    }

    /// Remove and return the entry matching `eq`.
    pub(super) fn remove(&mut self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        if let Some(i) = self.cur.find(hash, &mut eq) {
            let v = self.cur.vals[i];
            self.cur.remove_at(i);
            return Some(v);
        }
        let i = self.old.find(hash, eq)?;
        let v = self.old.vals[i];
        self.old.remove_at(i);
        Some(v)
    }

    /// Add `val`, whose key is in neither array (the caller looked it up). `hasher` gives
    /// the hash of any value in the table, and `prefetch` starts loading what `hasher` will
    /// read for a value: both are used for the entries moved on this call.
    pub(super) fn insert_unique(&mut self, hash: u64, val: u32, hasher: impl Fn(u32) -> u64, prefetch: impl Fn(u32)) {
        let limit = self.cur.limit();
        if self.cur.len + self.cur.deleted + 1 > limit {
            self.grow(false, &hasher, &prefetch);
        } else if self.turn != 0 && self.old.buckets() == 0 {
            // Its turn: the entries alone (not deleted slots, which a rebuild at the same
            // size clears) are within `turn` moves of the limit.
            if self.cur.len + 1 > limit.saturating_sub(self.early_inserts()) {
                self.grow(true, &hasher, &prefetch);
            }
        }
        self.cur.insert(hash, val);
        self.migrate(MIGRATE_STEP, &hasher, &prefetch);
        self.prepare();
    }

    /// Inserts before its limit at which a table doubles on its turn: `turn` growths' moves
    /// of `cur` (see the module comment; 0 for a table without a turn).
    fn early_inserts(&self) -> usize {
        self.turn * (self.cur.buckets() / MIGRATE_STEP).max(1)
    }

    /// The slots of the array a growth now would make: the power of two that keeps it under
    /// 7/8 full with `len` entries plus every insert that can come while `cur` is being
    /// emptied (`MIGRATE_STEP` of its slots per insert), at least twice `cur` if `double`.
    fn grown_buckets(&self, len: usize, double: bool) -> usize {
        let during = self.cur.buckets() / MIGRATE_STEP;
        let want = ((len + during) * 8 / 7 + 1).max(MIN_BUCKETS).next_power_of_two();
        if double {
            want.max(self.cur.buckets() * 2)
        } else {
            want
        }
    }

    /// Inserts before the next growth if none removes an entry, and the size it will make
    /// (when that is clear already: the same with no entry removed as with every insert a
    /// new entry); None while an old array is being emptied.
    fn coming_growth(&self) -> Option<(usize, usize)> {
        if self.old.buckets() != 0 || self.cur.buckets() == 0 {
            return None;
        }
        let (limit, used) = (self.cur.limit(), self.cur.len + self.cur.deleted);
        let full = limit.saturating_sub(used);
        let early = match self.turn {
            0 => usize::MAX,
            _ => limit.saturating_sub(self.early_inserts()).saturating_sub(self.cur.len),
        };
        let left = full.min(early);
        let double = early <= full;
        let want = self.grown_buckets(self.cur.len, double);
        (want == self.grown_buckets(self.cur.len + left, double)).then_some((left, want))
    }

    /// Allocate the array of the coming growth `PREPARE_INSERTS_PER_PAGE` inserts per page
    /// ahead of it, and write its pages evenly over those inserts (see the module comment).
    fn prepare(&mut self) {
        // Most inserts are far from a growth: the coming array has at most twice the slots
        // of `cur`, so none is due while even that many pages' inserts and the table's turn
        // leave it under its limit.
        if self.next_buckets == 0 {
            let b = self.cur.buckets();
            let horizon = Slots::pages_for(2 * b) * PREPARE_INSERTS_PER_PAGE + self.early_inserts();
            if self.cur.len + self.cur.deleted + horizon < self.cur.limit() {
                return;
            }
        }
        let Some((left, want)) = self.coming_growth() else { return };
        let pages = Slots::pages_for(want);
        if pages < PREPARE_MIN_PAGES {
            return;
        }
        if self.next_buckets != want {
            // None yet, or one of a size the growth will no longer make.
            self.next = Slots::default();
            self.next_buckets = 0;
            if left > pages * PREPARE_INSERTS_PER_PAGE {
                return;
            }
            self.next = Slots::unfilled(want);
            self.next_buckets = want;
            self.lead = left.max(1);
        }
        let due = (pages - pages * left.min(self.lead) / self.lead + 1).min(pages);
        while self.next.filled_bytes().div_ceil(PAGE_BYTES) < due && self.next.fill_page(want) {}
    }

    /// Start emptying `cur` into a new array. Its size is the power of two that keeps it
    /// under 7/8 full with the live entries plus every insert that can come while `cur` is
    /// being emptied (`MIGRATE_STEP` of its slots per insert): a full array doubles (the
    /// new one starts 7/16 full, as hashbrown's), one mostly of deleted slots keeps its size
    /// or halves; a table taking its turn early (`double`) doubles. So an older array is
    /// always empty before the next growth; were one not, it would be finished first.
    fn grow(&mut self, double: bool, hasher: &impl Fn(u32) -> u64, prefetch: &impl Fn(u32)) {
        self.migrate(usize::MAX, hasher, prefetch);
        let want = self.grown_buckets(self.cur.len, double);
        let mut next = std::mem::take(&mut self.next);
        let fresh = if self.next_buckets == want {
            while next.fill_page(want) {}
            next
        } else {
            Slots::with_buckets(want)
        };
        self.next_buckets = 0;
        self.old = std::mem::replace(&mut self.cur, fresh);
        self.cursor = 0;
        if self.old.len == 0 {
            self.old = Slots::default();
        }
    }

    /// Move the entries of up to `steps` slots of the old array, `MIGRATE_STEP` slots at a
    /// time: their keys are loaded together (each is a cache miss in the block ring), then
    /// hashed, then their new slots loaded together, then filled.
    #[inline(never)]
    fn migrate(&mut self, steps: usize, hasher: &impl Fn(u32) -> u64, prefetch: &impl Fn(u32)) {
        let mut left = steps;
        while self.old.len != 0 && left != 0 {
            let end = self.old.buckets().min(self.cursor + left.min(MIGRATE_STEP));
            left -= end - self.cursor;
            let mut batch = [(0u32, 0u64); MIGRATE_STEP];
            let mut k = 0;
            while self.cursor < end && self.old.len != 0 {
                let i = self.cursor;
                if self.old.ctrl[i] >= 0x80 {
                    // Left deleted, not empty: entries after it may have probed through it.
                    self.old.ctrl[i] = DELETED;
                    self.old.deleted += 1;
                    self.old.len -= 1;
                    batch[k].0 = self.old.vals[i];
                    k += 1;
                }
                self.cursor += 1;
            }
            for (v, _) in &batch[..k] {
                prefetch(*v);
            }
            for (v, h) in &mut batch[..k] {
                *h = hasher(*v);
                self.cur.prefetch(*h);
            }
            for &(v, h) in &batch[..k] {
                self.cur.insert(h, v);
            }
        }
        if self.old.len == 0 && self.old.buckets() != 0 {
            self.old = Slots::default();
            self.cursor = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Keys are the values themselves, hashed badly on purpose (few distinct home slots at
    /// small sizes, long runs) so probing, wrap-around and deletion are exercised.
    fn h(v: u32) -> u64 {
        let x = (v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^ (x >> 29)
    }

    /// The counts agree with the control bytes, in both arrays, and the current array keeps
    /// an empty slot.
    fn assert_consistent(t: &PosTable) {
        for (name, a) in [("cur", &t.cur), ("old", &t.old)] {
            let full = a.ctrl.iter().filter(|&&c| c >= 0x80).count();
            let deleted = a.ctrl.iter().filter(|&&c| c == DELETED).count();
            assert_eq!((a.len, a.deleted), (full, deleted), "{name}: counts against control bytes");
        }
        assert!(t.cur.buckets() == 0 || t.cur.len + t.cur.deleted <= t.cur.limit());
    }

    fn xorshift(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    #[test]
    fn agrees_with_a_set_under_random_inserts_updates_and_removals() {
        for seed in 1..6u64 {
            let mut rng = seed * 0x2545_f491_4f6c_dd1d;
            let mut t = PosTable::new();
            let mut model: HashMap<u32, ()> = HashMap::new();
            // Keys drawn from a range that makes the table grow, shrink and hold many
            // deleted slots; a sliding-window phase like the index's.
            for step in 0..200_000u32 {
                let r = xorshift(&mut rng);
                let range = if step < 100_000 { 1 << 14 } else { 1 << 9 };
                let k = (r % range) as u32;
                if r >> 60 < 9 {
                    let found = t.find_mut(h(k), |v| v == k).is_some();
                    assert_eq!(found, model.contains_key(&k));
                    if !found {
                        t.insert_unique(h(k), k, h, |_| {});
                        model.insert(k, ());
                    }
                } else {
                    assert_eq!(t.remove(h(k), |v| v == k), model.remove(&k).map(|_| k));
                }
                assert_eq!(t.len(), model.len());
                if step % 97 == 0 || t.old.buckets() != 0 && step % 7 == 0 {
                    assert_consistent(&t);
                }
            }
            for k in 0..(1u32 << 14) {
                assert_eq!(t.find_mut(h(k), |v| v == k).is_some(), model.contains_key(&k), "key {k}");
            }
        }
    }

    #[test]
    fn growth_moves_a_bounded_number_of_slots_per_insert() {
        for turn in 0..3 {
            growth_moves_a_bounded_number_of_slots_per_insert_with(turn);
        }
    }

    fn growth_moves_a_bounded_number_of_slots_per_insert_with(turn: usize) {
        let mut t = PosTable::staggered(turn);
        let mut calls_max = 0;
        let mut since_growth: Option<(usize, usize)> = None;
        for k in 0..300_000u32 {
            let calls = std::cell::Cell::new(0);
            let loads = std::cell::Cell::new(0);
            t.insert_unique(
                h(k),
                k,
                |v| {
                    calls.set(calls.get() + 1);
                    h(v)
                },
                |_| loads.set(loads.get() + 1),
            );
            assert_eq!(calls.get(), loads.get(), "every moved entry's key is loaded ahead");
            calls_max = calls_max.max(calls.get());
            // Never two arrays being emptied, and the old one is gone before the next growth,
            // within its slots / MIGRATE_STEP inserts.
            assert!(t.old.buckets() == 0 || t.old.buckets() * 2 <= t.cur.buckets());
            match (t.old.buckets(), since_growth) {
                (0, _) => since_growth = None,
                (n, None) => since_growth = Some((n, 0)),
                (n, Some((m, i))) => {
                    assert_eq!(n, m);
                    assert!(i < n / MIGRATE_STEP, "old array of {n} slots still there after {i} inserts");
                    since_growth = Some((n, i + 1));
                }
            }
        }
        assert!(calls_max <= MIGRATE_STEP, "{calls_max} entries re-hashed on one insert");
        assert_eq!(t.len(), 300_000);
        for k in (0..300_000u32).step_by(7) {
            assert_eq!(t.find_mut(h(k), |v| v == k).copied(), Some(k));
        }
        // 5 bytes per slot: the current array at most 7/16 full when made, and the old one,
        // half its size, while it is emptied.
        assert!(t.bytes() <= 300_000 * SLOT_BYTES * 16 / 7 * 3 / 2 + SLOT_BYTES * 16, "{} bytes", t.bytes());
    }

    #[test]
    fn tables_filling_together_take_turns_to_move_their_entries() {
        // The index's block tables: the same inserts (keys hashed differently), turns 0, 1, 2.
        let hashers: [fn(u32) -> u64; 3] = [h, |v| h(v ^ 0x5555_5555), |v| h(v.wrapping_mul(7) ^ 0xaaaa)];
        let mut tables: Vec<PosTable> = (0..3).map(PosTable::staggered).collect();
        let (mut growths, mut overlaps) = ([0usize; 3], 0usize);
        for k in 0..400_000u32 {
            for (i, t) in tables.iter_mut().enumerate() {
                let had_old = t.old.buckets() != 0;
                t.insert_unique(hashers[i](k), k, hashers[i], |_| {});
                if !had_old && t.old.buckets() != 0 {
                    growths[i] += 1;
                }
            }
            let moving = tables.iter().filter(|t| t.old.buckets() != 0).count();
            // Once past the smallest sizes (where a turn is a few inserts), one at a time.
            if moving > 1 && tables[0].cur.buckets() >= 1024 {
                overlaps += 1;
            }
        }
        assert_eq!(overlaps, 0, "inserts with two tables moving entries at once");
        // Each doubled as often, a later turn at most once more (400,000 entries are within
        // two turns of 2^19 slots' limit: the third table has doubled again), and each still
        // finds every key.
        assert!(growths[0] >= 14 && growths.iter().all(|&g| g == growths[0] || g == growths[0] + 1), "{growths:?}");
        assert_eq!(growths[2], growths[0] + 1, "{growths:?}");
        for (i, t) in tables.iter_mut().enumerate() {
            assert_eq!(t.len(), 400_000);
            assert_consistent(t);
            for k in (0..400_000u32).step_by(11) {
                assert_eq!(t.find_mut(hashers[i](k), |v| v == k).copied(), Some(k));
            }
            // Early by `turn` moves: at most the array a table at its limit would have.
            assert!(t.cur.buckets() <= 1 << 20, "table {i}: {} slots", t.cur.buckets());
        }
        // Without turns they all move at once.
        let mut plain: Vec<PosTable> = (0..3).map(|_| PosTable::new()).collect();
        let mut together = 0;
        for k in 0..400_000u32 {
            for (i, t) in plain.iter_mut().enumerate() {
                t.insert_unique(hashers[i](k), k, hashers[i], |_| {});
            }
            together += usize::from(plain.iter().all(|t| t.old.buckets() != 0) && plain[0].cur.buckets() >= 1024);
        }
        assert!(together > 10_000, "{together}");
    }

    #[test]
    fn the_coming_array_is_written_ahead_a_page_at_a_time() {
        for turn in 0..3 {
            let mut t = PosTable::staggered(turn);
            let (mut growths, mut prepared_growths, mut most) = (0, 0, 0);
            for k in 0..600_000u32 {
                let (before, had_old, cur) = (t.next.filled_bytes(), t.old.buckets() != 0, t.cur.buckets());
                let next = t.next_buckets;
                let ready = next != 0 && t.next.filled_bytes() == next * SLOT_BYTES as usize;
                t.insert_unique(h(k), k, h, |_| {});
                if !had_old && t.old.buckets() != 0 {
                    growths += 1;
                    // Every array of PREPARE_MIN_PAGES pages or more was allocated and wholly
                    // written before the insert that grew into it.
                    if Slots::pages_for(t.cur.buckets()) >= PREPARE_MIN_PAGES {
                        assert!(ready && next == t.cur.buckets(), "turn {turn}: growth {cur} -> {} unprepared", t.cur.buckets());
                        prepared_growths += 1;
                    }
                    assert_eq!((t.next_buckets, t.next.filled_bytes()), (0, 0));
                } else {
                    most = most.max(t.next.filled_bytes().saturating_sub(before).div_ceil(PAGE_BYTES));
                }
            }
            assert!(prepared_growths >= 5, "turn {turn}: {prepared_growths} of {growths} growths prepared");
            // A page (two on the insert that allocates the array) per insert at most.
            assert!(most <= 2, "turn {turn}: {most} pages written on one insert");
            for k in (0..600_000u32).step_by(13) {
                assert_eq!(t.find_mut(h(k), |v| v == k).copied(), Some(k));
            }
        }
        // A window sliding at a steady size rebuilds its array at the same size, prepared too.
        let mut t = PosTable::new();
        let (mut rebuilds, mut prepared) = (0, 0);
        for k in 0..2_000_000u32 {
            if k >= 20_000 {
                let old = k - 20_000;
                assert_eq!(t.remove(h(old), |v| v == old), Some(old));
            }
            let ready = t.next_buckets != 0 && t.next.filled_bytes() == t.next_buckets * SLOT_BYTES as usize;
            let had_old = t.old.buckets() != 0;
            t.insert_unique(h(k), k, h, |_| {});
            if !had_old && t.old.buckets() != 0 && k > 100_000 {
                rebuilds += 1;
                prepared += usize::from(ready);
            }
        }
        assert!(rebuilds >= 3 && prepared == rebuilds, "{prepared} of {rebuilds} rebuilds prepared");
    }

    #[test]
    fn a_sliding_window_does_not_fill_up_with_deleted_slots() {
        // Insert k, remove k - 1000: the live count stays at 1000, the table small.
        let mut t = PosTable::new();
        for k in 0..1_000_000u32 {
            if k >= 1000 {
                let old = k - 1000;
                assert_eq!(t.remove(h(old), |v| v == old), Some(old));
            }
            assert!(t.find_mut(h(k), |v| v == k).is_none());
            t.insert_unique(h(k), k, h, |_| {});
        }
        assert_eq!(t.len(), 1000);
        assert!(t.buckets() <= 4096 + 2048, "{} slots for 1000 entries", t.buckets());
    }

    #[test]
    fn updates_through_find_mut_stick_in_either_array() {
        let mut t = PosTable::new();
        for k in 0..112u32 {
            t.insert_unique(h(k), k, h, |_| {});
        }
        // The next insert grows the table (7/8 of 128 slots): entries sit in both arrays
        // for a while.
        t.insert_unique(h(500), 500, h, |_| {});
        assert!(t.old.buckets() > 0);
        for k in 0..112u32 {
            *t.find_mut(h(k), |v| v == k).unwrap() = k; // same key, same value: found
        }
        // Values replaced in place keep their key (the index puts the newer position of the
        // same digest there): 1013 has 13's key.
        let key = |v: u32| h(v % 1000);
        let k = 13u32;
        let slot = t.find_mut(h(k), |v| v == k).unwrap();
        *slot = 1013;
        for k in 200..260u32 {
            t.insert_unique(key(k), k, key, |_| {}); // moves every old entry, 1013 by its key
        }
        assert_eq!(t.old.buckets(), 0);
        assert_eq!(t.find_mut(h(k), |v| v == 1013).copied(), Some(1013));
        assert_eq!(t.remove(h(k), |v| v == 1013), Some(1013));
        assert_eq!(t.len(), 172);
    }
}
