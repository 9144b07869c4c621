//! Several capture files (one per mirror port, say) merged in timestamp order.
use super::{open, CaptureError, FrameReader, RawFrame};
use crate::accounting::Accounting;
use crate::anomaly::Anomalies;

pub struct Merged {
    readers: Vec<Box<dyn FrameReader>>,
    live: Vec<bool>,
    picked: Option<usize>,
    started: bool,
}

impl Merged {
    pub fn open(paths: &[String]) -> Result<Self, CaptureError> {
        let mut readers = Vec::with_capacity(paths.len());
        for (i, p) in paths.iter().enumerate() {
            readers.push(open(p, i as u16)?);
        }
        let n = readers.len();
        Ok(Merged { readers, live: vec![true; n], picked: None, started: false })
    }

    pub fn from_readers(readers: Vec<Box<dyn FrameReader>>) -> Self {
        let n = readers.len();
        Merged { readers, live: vec![true; n], picked: None, started: false }
    }

    /// The next frame in timestamp order across all files (ties: lower file index first).
    pub fn next_frame(&mut self, acct: &mut Accounting, an: &mut Anomalies) -> Option<RawFrame<'_>> {
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
        let i = self.picked?;
        self.readers[i].current()
    }

    pub fn total_size(&self) -> u64 {
        self.readers.iter().map(|r| r.file_size()).sum()
    }
    pub fn position(&self) -> u64 {
        self.readers.iter().map(|r| r.position()).sum()
    }
}
