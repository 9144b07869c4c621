//! Several capture files (one per mirror port, say) merged in timestamp order.
//!
//! A file that cannot be read at all (missing, not a capture, damaged header) does not stop
//! the others: `open` keeps the usable files and names the unusable ones in `skipped`; it
//! fails only when no file is usable.
use super::source::ReadMode;
use super::{open_with, CaptureError, FrameReader, RawFrame};
use crate::accounting::Accounting;
use crate::anomaly::Anomalies;

pub struct Merged {
    readers: Vec<Box<dyn FrameReader>>,
    live: Vec<bool>,
    picked: Option<usize>,
    started: bool,
    /// For each reader, the index of its path in the `paths` given to `open`. Frames carry
    /// the reader's index (its position here), not the path's.
    pub used: Vec<usize>,
    /// The paths that could not be opened as captures: (index in `paths`, why).
    pub skipped: Vec<(usize, CaptureError)>,
}

impl Merged {
    /// Open every file; unusable ones are left out and listed in `skipped`. Err (the first
    /// file's error) only when files were given and none is usable.
    pub fn open(paths: &[String]) -> Result<Self, CaptureError> {
        Self::open_with(paths, ReadMode::Mapped)
    }

    /// `open`, regular uncompressed files mapped or read through a buffer (`ReadMode`).
    pub fn open_with(paths: &[String], how: ReadMode) -> Result<Self, CaptureError> {
        // Frames name their file in 16 bits (`FrameRef::file`): more files would share numbers.
        if paths.len() > MAX_FILES {
            return Err(CaptureError::Io {
                path: format!("{} capture files", paths.len()),
                reason: format!(
                    "more than {MAX_FILES} in one run (frames name their file in 16 bits); \
                     merge them first (captures: mergecap -w merged.pcapng FILE...)"
                ),
            });
        }
        fd_room(paths.len(), "capture files")?;
        let mut readers = Vec::with_capacity(paths.len());
        let mut used = Vec::with_capacity(paths.len());
        let mut skipped = Vec::new();
        for (i, p) in paths.iter().enumerate() {
            match open_with(p, readers.len() as u16, how) {
                Ok(r) => {
                    readers.push(r);
                    used.push(i);
                }
                Err(CaptureError::Interrupted) => return Err(CaptureError::Interrupted),
                Err(e) => skipped.push((i, e)),
            }
        }
        if readers.is_empty() && !skipped.is_empty() {
            return Err(skipped.swap_remove(0).1);
        }
        let mut m = Self::from_readers(readers);
        m.used = used;
        m.skipped = skipped;
        Ok(m)
    }

    pub fn from_readers(readers: Vec<Box<dyn FrameReader>>) -> Self {
        let n = readers.len();
        Merged { readers, live: vec![true; n], picked: None, started: false, used: (0..n).collect(), skipped: Vec::new() }
    }

    /// The next frame in timestamp order across all files (ties: lower file index first).
    pub fn next_frame(&mut self, acct: &mut Accounting, an: &mut Anomalies) -> Option<RawFrame<'_>> {
        let i = self.pick_next(acct, an)?;
        self.readers[i].current()
    }

    /// `next_frame`, with the read buffer it lies in when it is not mapped
    /// (`Source::chunk`): `--threads` workers hold on to it instead of copying the frame.
    pub fn next_shared(&mut self, acct: &mut Accounting, an: &mut Anomalies) -> Option<(RawFrame<'_>, Option<&std::sync::Arc<Vec<u8>>>)> {
        let i = self.pick_next(acct, an)?;
        let r = &self.readers[i];
        Some((r.current()?, r.source().chunk()))
    }

    /// Advance past the frame picked last; the reader whose current frame comes next.
    fn pick_next(&mut self, acct: &mut Accounting, an: &mut Anomalies) -> Option<usize> {
        if !self.started {
            self.started = true;
            for i in 0..self.readers.len() {
                self.live[i] = self.readers[i].advance(acct, an);
            }
        } else if let Some(i) = self.picked {
            self.live[i] = self.readers[i].advance(acct, an);
        }
        let mut best: Option<(u64, usize)> = None;
        for (i, r) in self.readers.iter().enumerate() {
            if !self.live[i] {
                continue;
            }
            if let Some(f) = r.current() {
                if best.is_none_or(|(ts, _)| f.info.ts_ns < ts) {
                    best = Some((f.info.ts_ns, i));
                }
            }
        }
        self.picked = best.map(|(_, i)| i);
        self.picked
    }

    /// Are all sizes known before the end (no stream, no compressed capture)?
    pub fn sizes_known(&self) -> bool {
        self.readers.iter().all(|r| r.source().size_known())
    }

    /// Did the user interrupt a wait on a stream?
    pub fn interrupted(&self) -> bool {
        self.readers.iter().any(|r| r.source().interrupted)
    }

    /// The source of reader `i` (its kind, compression and sizes).
    pub fn source(&self, i: usize) -> &super::source::Source {
        self.readers[i].source()
    }


    pub fn total_size(&self) -> u64 {
        self.readers.iter().map(|r| r.file_size()).sum()
    }
    pub fn position(&self) -> u64 {
        self.readers.iter().map(|r| r.position()).sum()
    }
}

/// Most capture files in one run: `FrameRef::file` numbers them 0..=65535.
pub const MAX_FILES: usize = u16::MAX as usize + 1;

/// Descriptors kept free beside the inputs: the ledger, the evidence, the annotated capture,
/// the interpreter's own files, threads' and the live session's descriptors.
const FD_MARGIN: libc::rlim_t = 64;

/// Every input stays open for the merge, so `n` of them need `n` descriptors at once (capture
/// files here; ledgers in `attribute`, ledger parts in `--dask`'s merge). With
/// the usual soft limit of 1,024 a directory of rotated captures (`tcpdump -C -W`) ran out:
/// each file past it was skipped with "Too many open files" and the result covered only the
/// others. The soft limit is raised to what is needed, up to the hard one (as Go's runtime
/// does for every program); when even that is too low, one error says so before anything
/// is read.
pub fn fd_room(n: usize, what: &str) -> Result<(), CaptureError> {
    let need = (n as libc::rlim_t).saturating_add(FD_MARGIN);
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        return Ok(());
    }
    if lim.rlim_cur >= need {
        return Ok(());
    }
    let hard = lim.rlim_max;
    let raised = libc::rlimit { rlim_cur: hard.min(need), rlim_max: hard };
    // SAFETY: setrlimit reads the struct it is given; raising the soft limit up to the hard
    // one needs no privilege.
    let ok = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0;
    if ok && raised.rlim_cur >= need {
        return Ok(());
    }
    Err(CaptureError::Io {
        path: format!("{n} {what}"),
        reason: format!(
            "too many to hold open at once: the open-file limit is {hard} (ulimit -Hn), {need} are needed; \
             merge them first (captures: mergecap -w merged.pcapng FILE...) or raise the limit"
        ),
    })
}
