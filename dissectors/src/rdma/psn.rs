//! Packet Sequence Number bookkeeping for one direction of a reliable connection (IBTA §9.7):
//! which PSNs were seen recently, so that a retransmitted packet counts once and a PSN never
//! seen is a gap. PSNs are 24-bit and wrap.

const BITS: u32 = 1024;
const MASK24: u32 = 0x00ff_ffff;

/// What `mark` decided about a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    New,
    /// Seen before within the window: a retransmission or a mirror copy.
    Duplicate,
    /// Older than the window: cannot tell, treated as a retransmission.
    TooOld,
}

/// Seen-bitmap over the last `BITS` PSNs up to the highest seen.
#[derive(Debug, Clone)]
pub struct PsnWindow {
    highest: Option<u32>,
    /// Lowest PSN seen: PSNs before it were never expected.
    base: u32,
    seen: [u64; (BITS / 64) as usize],
    /// PSNs that left the window (or were found at `finish`) without being seen.
    pub missing: u64,
}

impl Default for PsnWindow {
    fn default() -> Self {
        PsnWindow { highest: None, base: 0, seen: [0; (BITS / 64) as usize], missing: 0 }
    }
}

/// Signed distance a - b in 24-bit sequence space.
pub fn diff(a: u32, b: u32) -> i32 {
    let d = a.wrapping_sub(b) & MASK24;
    if d & 0x0080_0000 != 0 {
        d as i32 - (1 << 24)
    } else {
        d as i32
    }
}

impl PsnWindow {
    fn bit(&self, psn: u32) -> bool {
        let i = psn % BITS;
        self.seen[(i / 64) as usize] & (1 << (i % 64)) != 0
    }
    fn set(&mut self, psn: u32, v: bool) {
        let i = psn % BITS;
        let w = &mut self.seen[(i / 64) as usize];
        if v {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }

    pub fn mark(&mut self, psn: u32) -> Mark {
        let psn = psn & MASK24;
        let Some(h) = self.highest else {
            self.highest = Some(psn);
            self.base = psn;
            self.set(psn, true);
            return Mark::New;
        };
        let d = diff(psn, h);
        if d > 0 {
            if d as u32 >= BITS {
                // A jump past the whole window: everything unseen in it and the jump is lost.
                self.missing += self.unseen_in_window(h) + u64::from(d as u32 - BITS);
                self.seen = [0; (BITS / 64) as usize];
            } else {
                for k in 1..=d as u32 {
                    let p = (h + k) & MASK24;
                    // The slot held PSN p - BITS, which now leaves the window.
                    let leaving = p.wrapping_sub(BITS) & MASK24;
                    if !self.bit(p) && diff(leaving, self.base) >= 0 {
                        self.missing += 1;
                    }
                    self.set(p, false);
                }
            }
            self.set(psn, true);
            self.highest = Some(psn);
            Mark::New
        } else if (-d) as u32 >= BITS {
            Mark::TooOld
        } else if self.bit(psn) {
            Mark::Duplicate
        } else {
            self.set(psn, true);
            if diff(psn, self.base) < 0 {
                self.base = psn;
            }
            Mark::New
        }
    }

    /// Unseen PSNs in [max(base, h - BITS + 1), h].
    fn unseen_in_window(&self, h: u32) -> u64 {
        let span = (diff(h, self.base).max(0) as u32 + 1).min(BITS);
        (0..span).filter(|k| !self.bit(h.wrapping_sub(*k) & MASK24)).count() as u64
    }

    /// End of the connection: PSNs still unseen in the window are lost.
    pub fn finish(&mut self) -> u64 {
        if let Some(h) = self.highest {
            self.missing += self.unseen_in_window(h);
            self.highest = None;
            self.seen = [0; (BITS / 64) as usize];
        }
        self.missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn duplicates_reorder_and_loss() {
        let mut w = PsnWindow::default();
        assert_eq!(w.mark(0xfffffe), Mark::New);
        assert_eq!(w.mark(0x000001), Mark::New); // wraps, skips 0xffffff and 0
        assert_eq!(w.mark(0xffffff), Mark::New); // late, not a duplicate
        assert_eq!(w.mark(0xffffff), Mark::Duplicate);
        assert_eq!(w.finish(), 1); // PSN 0 never seen
        let mut w = PsnWindow::default();
        w.mark(10);
        w.mark(10 + 5000);
        assert_eq!(w.mark(11), Mark::TooOld);
        assert_eq!(w.finish(), 4999);
    }

    proptest! {
        /// Any permutation with duplicates of a contiguous run loses nothing.
        #[test]
        fn permutations_lose_nothing(start in 0u32..(1 << 24), n in 1usize..300, seed in any::<u64>()) {
            let mut psns: Vec<u32> = (0..n as u32).map(|i| (start + i) & MASK24).collect();
            let mut s = seed;
            for i in (1..psns.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let j = (s >> 33) as usize % (i + 1);
                psns.swap(i, j);
            }
            let mut w = PsnWindow::default();
            let mut dups = 0;
            for &p in psns.iter().chain(psns.iter().take(n / 3)) {
                if w.mark(p) == Mark::Duplicate { dups += 1; }
            }
            prop_assert_eq!(dups, n / 3);
            // Anything before the first PSN seen is not counted as missing.
            prop_assert_eq!(w.finish(), 0);
        }
    }
}
