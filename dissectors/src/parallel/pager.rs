//! The mapped inputs' pages, off the reader's thread (`--threads`).
//!
//! With `--threads` the reader is also the ordered stage, which is the limit on small I/O.
//! Reading a mapped capture, it took every page fault (a fault maps a few pages, with their
//! memory-cgroup accounting) and made every `madvise(MADV_DONTNEED)` call that hands read
//! pages back: 13% of its time on the 4 KiB bench capture (perf, 2026-11-27). The pager
//! thread does both instead: it maps in the pages a few MiB ahead of the reading
//! (`MADV_POPULATE_READ`, or one read per page where the kernel lacks it) and hands back
//! the pages before the first frame a worker has yet to read (`Parallel::first_unread`).
//!
//! Neither changes what any thread reads: a page handed back reads back as the same file
//! bytes, and one not yet mapped in faults in as before. The pager only moves the work; if
//! it falls behind, the reader faults the pages in itself.

use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Pages are mapped in up to this far ahead of the reading ...
const AHEAD: usize = 4 << 20;
/// ... this many bytes at a time ...
const POPULATE_STEP: usize = 1 << 20;
/// ... and handed back this many at a time (one `madvise` call each).
const RELEASE_STEP: usize = 2 << 20;

const PAGE: usize = 4096;

enum Op {
    Populate { map: usize, from: usize, to: usize },
    Release { map: usize, from: usize, to: usize },
}

pub(super) struct Pager {
    /// The pager thread's queue (none when it could not be started: then pages are handed
    /// back here, and faulted in by the reader).
    ops: Option<Sender<Op>>,
    handle: Option<JoinHandle<()>>,
    maps: Vec<Arc<memmap2::Mmap>>,
    /// Per mapping: read up to here (the end of the last frame handed out), mapped in up to
    /// here, handed back up to here.
    reading: Vec<usize>,
    populated: Vec<usize>,
    released: Vec<usize>,
}

impl Pager {
    pub(super) fn new(maps: Vec<Arc<memmap2::Mmap>>, start: Option<fn()>) -> Pager {
        let n = maps.len();
        let theirs = maps.clone();
        let (tx, rx) = channel::<Op>();
        let handle = std::thread::Builder::new()
            .name("smbwire-pager".into())
            .spawn(move || {
                if let Some(f) = start {
                    f();
                }
                while let Ok(op) = rx.recv() {
                    run(&theirs, op);
                }
            })
            .ok();
        Pager {
            ops: handle.as_ref().map(|_| tx),
            handle,
            maps,
            reading: vec![0; n],
            populated: vec![0; n],
            released: vec![0; n],
        }
    }

    /// The reader has handed out a frame of mapping `map` ending at `end`: map in the pages
    /// up to `AHEAD` past it.
    #[inline]
    pub(super) fn read_to(&mut self, map: usize, end: usize) {
        self.reading[map] = end;
        let len = self.maps[map].len();
        let want = (end + AHEAD).min(len);
        let from = self.populated[map].max(end & !(PAGE - 1));
        if want >= from + POPULATE_STEP || (want == len && want > from) {
            self.populated[map] = want;
            if self.ops.is_some() {
                self.run(Op::Populate { map, from, to: want });
            }
        }
    }

    /// No frame before `first_unread[map]` will be read again (the workers' first unread
    /// frame there, `usize::MAX` when none): hand back the pages before it and before the
    /// reading.
    pub(super) fn done_before(&mut self, first_unread: &[usize]) {
        for (map, &first) in first_unread.iter().enumerate() {
            let to = first.min(self.reading[map]) & !(PAGE - 1);
            let from = self.released[map];
            if to >= from + RELEASE_STEP {
                self.released[map] = to;
                self.run(Op::Release { map, from, to });
            }
        }
    }

    /// On the pager thread, or here when there is none.
    fn run(&self, op: Op) {
        match &self.ops {
            Some(tx) => {
                if let Err(e) = tx.send(op) {
                    run(&self.maps, e.0);
                }
            }
            None => run(&self.maps, op),
        }
    }
}

fn run(maps: &[Arc<memmap2::Mmap>], op: Op) {
    match op {
        Op::Populate { map, from, to } => populate(&maps[map], from, to),
        Op::Release { map, from, to } => release(&maps[map], from, to),
    }
}

impl Drop for Pager {
    fn drop(&mut self) {
        drop(self.ops.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn populate(map: &memmap2::Mmap, from: usize, to: usize) {
    if from >= to {
        return;
    }
    #[cfg(target_os = "linux")]
    if map.advise_range(memmap2::Advice::PopulateRead, from, to - from).is_ok() {
        return;
    }
    // Without MADV_POPULATE_READ (Linux before 5.14): a read per page faults it in.
    let mut sum = 0u8;
    for p in (from..to).step_by(PAGE) {
        sum ^= map[p];
    }
    std::hint::black_box(sum);
}

fn release(map: &memmap2::Mmap, from: usize, to: usize) {
    if from >= to {
        return;
    }
    #[cfg(unix)]
    {
        // SAFETY: a private, read-only mapping of a file nobody writes through it: after
        // MADV_DONTNEED a page reads back as the same file bytes, so slices other threads
        // hold stay valid and unchanged (`capture::source::Source::release_consumed`).
        let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, to - from) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pager maps in at most `AHEAD` past the reading and never past the end, and hands
    /// back only pages before both the workers' first unread frame and the reading, in
    /// `RELEASE_STEP` steps.
    #[test]
    fn maps_in_ahead_and_hands_back_only_what_no_one_will_read() {
        let path = std::env::temp_dir().join(format!("smbwire-pager-{}", std::process::id()));
        let len = (40 << 20) + 12_345;
        std::fs::write(&path, vec![3u8; len]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a read-only private mapping of a file this test alone writes, before.
        let map = Arc::new(unsafe { memmap2::Mmap::map(&file) }.unwrap());
        let mut p = Pager::new(vec![map.clone()], None);
        // The bound on what may go: the first unread frame, or the reading when none is.
        let (mut end, mut unread) = (0usize, 0usize);
        let mut step = 0u64;
        while end < len {
            step = step.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            end = (end + 1 + (step >> 40) as usize % 9000).min(len);
            p.read_to(0, end);
            assert!(p.populated[0] <= (end + AHEAD).min(len));
            assert!(p.populated[0] + POPULATE_STEP > (end + AHEAD).min(len) || p.populated[0] == len);
            // The workers lag a few MiB behind, their first unread frame never moving back
            // (batches are replayed in order); sometimes nothing is in flight, and then the
            // next frames handed out start past the reading.
            let first = if step % 7 == 0 {
                usize::MAX
            } else {
                end.saturating_sub((step >> 20) as usize % (6 << 20)).max(unread)
            };
            unread = first.min(end);
            p.done_before(&[first]);
            assert!(p.released[0] <= unread, "released {} with {first} unread at {end}", p.released[0]);
            assert!(p.released[0] + RELEASE_STEP > unread & !(PAGE - 1), "released {} with {unread} unread", p.released[0]);
        }
        p.done_before(&[usize::MAX]);
        assert!(p.released[0] + RELEASE_STEP > len & !(PAGE - 1));
        assert_eq!(p.populated[0], len);
        drop(p);
        assert!(map.iter().step_by(4096).all(|&b| b == 3), "pages read back as the file's bytes");
        std::fs::remove_file(&path).ok();
    }
}
