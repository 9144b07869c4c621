//! A capture file read through one bounded buffer: records are parsed in place and frames
//! are borrowed from it, so memory does not grow with the file.

use super::CaptureError;
use std::fs::File;
use std::io::Read;

/// Initial buffer size; it only grows when a single record is larger (records are capped
/// by the readers, so the buffer is bounded).
pub const BUF_LEN: usize = 1 << 20;

pub struct Source {
    file: Box<dyn Read + Send>,
    buf: Vec<u8>,
    /// First unconsumed byte in `buf`.
    start: usize,
    /// End of valid bytes in `buf`.
    end: usize,
    /// File offset of `buf[start]`.
    consumed: u64,
    size: u64,
    eof: bool,
    /// Set when a read failed: the rest of the file is treated as unreadable.
    pub read_error: bool,
}

impl Source {
    pub fn open(path: &str) -> Result<Self, CaptureError> {
        let io = |e: std::io::Error| CaptureError::Io { path: path.to_string(), reason: e.to_string() };
        let file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if meta.is_dir() {
            return Err(CaptureError::Io { path: path.to_string(), reason: "is a directory".into() });
        }
        Ok(Self::from_reader(Box::new(file), meta.len()))
    }

    /// Read from any byte stream of known size (in-memory captures, tests, pipes).
    pub fn from_reader(file: Box<dyn Read + Send>, size: u64) -> Self {
        Source { file, buf: vec![0; BUF_LEN], start: 0, end: 0, consumed: 0, size, eof: false, read_error: false }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// File offset of the first unconsumed byte.
    pub fn position(&self) -> u64 {
        self.consumed
    }

    /// Bytes the file had at open time beyond the consumed ones.
    pub fn remaining(&self) -> u64 {
        self.size.saturating_sub(self.consumed)
    }

    /// Try to make `n` contiguous unconsumed bytes available; returns how many are (less
    /// than `n` only at the end of the file or after a read error).
    pub fn fill(&mut self, n: usize) -> usize {
        if self.end - self.start >= n {
            return self.end - self.start;
        }
        if self.start + n > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if n > self.buf.len() {
                self.buf.resize(n, 0);
            }
        }
        while self.end - self.start < n && !self.eof {
            match self.file.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.eof = true;
                    self.read_error = true;
                }
            }
        }
        self.end - self.start
    }

    /// The unconsumed bytes currently buffered.
    pub fn peek(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Drop `n` buffered bytes (`n` must not exceed what `fill` reported).
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.end - self.start);
        self.start += n;
        self.consumed += n as u64;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Skip `n` bytes, reading through the buffer; returns how many were skipped (fewer
    /// at the end of the file).
    pub fn skip(&mut self, n: u64) -> u64 {
        let mut left = n;
        while left > 0 {
            let want = left.min(self.buf.len() as u64) as usize;
            let got = self.fill(want).min(want);
            if got == 0 {
                break;
            }
            self.consume(got);
            left -= got as u64;
        }
        n - left
    }

    /// Consume everything up to the end of the file; returns the byte count.
    pub fn skip_to_end(&mut self) -> u64 {
        self.skip(u64::MAX)
    }
}
