//! A capture read through one bounded buffer: records are parsed in place and frames are
//! borrowed from it, so memory does not grow with the capture.
//!
//! A regular file is mapped into memory instead (`memmap2`, read-only, sequential advice):
//! the readers then parse the page cache's bytes where they are, without a copy into a
//! buffer. The mapping covers the size the file had when opened; bytes appended later are
//! not read (as before, the size known at open bounds the progress total). A file truncated
//! by another process while it is mapped is outside what can be handled (the kernel signals a
//! read past the end of a mapping), so `analyze` and `--annotate` read through the buffer
//! (`ReadMode::Buffered`: such a file just ends); the `--dask` shards map. When mapping fails
//! the file is read as a stream.
//!
//! The bytes come from a regular file, or from a stream whose size is known only at its end
//! (standard input, a FIFO such as `tcpdump -w fifo`, a character device), possibly through
//! a decompressor (gzip, zstd, xz: recognised by their magic numbers, as Wireshark does).
//! A stream is never read blocking: the reader waits in `poll` in short steps and asks
//! `interrupt::requested()` between them, so Ctrl-C is honoured while a FIFO has no writer.

use super::CaptureError;
use std::fs::File;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Initial buffer size; it only grows when a single record is larger (records are capped
/// by the readers, so the buffer is bounded).
pub const BUF_LEN: usize = 1 << 20;
/// Memory the xz decoder may take (its dictionary, mostly; `xz -9` streams need 65 MiB). A
/// stream declaring more is not decoded: at the start the input is refused in one line, later
/// the rest is unread (anomaly `capture.decompress_memory_limit`). zstd's own default refuses
/// frames needing a window beyond 128 MiB (`ZSTD_WINDOWLOG_LIMIT_DEFAULT`); gzip's is 32 KiB.
pub const XZ_MEMLIMIT: u64 = 256 << 20;

/// How a capture's bytes reach the reader (reported per input).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    File,
    Stdin,
    Fifo,
    CharDevice,
}

impl InputKind {
    pub fn name(self) -> &'static str {
        match self {
            InputKind::File => "file",
            InputKind::Stdin => "stdin",
            InputKind::Fifo => "fifo",
            InputKind::CharDevice => "character_device",
        }
    }
}

/// A compressed capture's container format, recognised by its magic number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Gzip,
    Zstd,
    Xz,
}

impl Compression {
    /// gzip (RFC 1952 §2.3.1), zstd frame (RFC 8878 §3.1.1), xz stream header (.xz format §2.1.1.1).
    pub fn sniff(head: &[u8]) -> Option<Compression> {
        if head.starts_with(&[0x1f, 0x8b]) {
            Some(Compression::Gzip)
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Some(Compression::Zstd)
        } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
            Some(Compression::Xz)
        } else {
            None
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
        }
    }
}

/// Counts the bytes read through it (the compressed size of a compressed capture).
struct Counting<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// A byte stream that may stay silent for a long time (stdin, FIFO, character device): each
/// read first waits in `poll` in steps of `POLL_STEP_MS`, asking `interrupt::requested()`
/// between steps, so it never blocks past a Ctrl-C.
#[cfg(target_os = "linux")]
struct Polled {
    file: File,
}

#[cfg(target_os = "linux")]
const POLL_STEP_MS: i32 = 100;

#[cfg(target_os = "linux")]
impl Read for Polled {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::io::AsRawFd;
        loop {
            let mut pfd = libc::pollfd { fd: self.file.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd for the duration of the call.
            let r = unsafe { libc::poll(&mut pfd, 1, POLL_STEP_MS) };
            if r > 0 {
                match self.file.read(buf) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    other => return other,
                }
            } else if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            if super::interrupt::requested() {
                return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, super::interrupt::MARK));
            }
        }
    }
}

/// A shared mapping read as bytes (a compressed file's stream reads its mapping).
struct MapBytes(Arc<memmap2::Mmap>);

impl AsRef<[u8]> for MapBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0[..]
    }
}

/// Mapped pages are handed back in steps of this many bytes (one `madvise` each) ...
const RELEASE_STEP: usize = 8 << 20;
/// ... when they are at least this far behind the reading (the frame being read and
/// processed lies within it).
const RELEASE_LAG: usize = 1 << 20;

pub struct Source {
    file: Box<dyn Read + Send>,
    /// The whole file, when mapped (`ReadMode::Mapped`): it stands for `buf`, with `end` its
    /// length.
    map: Option<Arc<memmap2::Mmap>>,
    /// Mapped bytes before this offset were handed back to the kernel (`consume`), so a
    /// long capture's pages do not pile up in the process's resident set.
    released: usize,
    /// The read buffer. `--threads` workers hold on to it for the frames in their batches
    /// (`chunk`); while one does, the next read goes to another buffer (`unshare`).
    buf: Arc<Vec<u8>>,
    /// Buffers handed on before (`unshare`), reused once no worker holds them.
    retired: std::collections::VecDeque<Arc<Vec<u8>>>,
    /// First unconsumed byte in `buf`.
    start: usize,
    /// End of valid bytes in `buf`.
    end: usize,
    /// Offset (in the capture's own, decompressed, bytes) of `buf[start]`.
    consumed: u64,
    /// The capture's size when known in advance (a regular, uncompressed file).
    known_size: Option<u64>,
    eof: bool,
    /// Set when a read failed: the rest of the file is treated as unreadable.
    pub read_error: bool,
    /// Set when the user interrupted a wait for more bytes (Ctrl-C on a silent stream).
    pub interrupted: bool,
    /// Set with `read_error` when the xz decoder refused a stream needing more than
    /// `XZ_MEMLIMIT`.
    pub memory_limited: bool,
    pub kind: InputKind,
    pub compression: Option<Compression>,
    /// Bytes read from the file or stream itself (before decompression).
    raw_read: Arc<AtomicU64>,
}

/// How a regular, uncompressed capture file is read.
///
/// `analyze` reads it through 1 MiB buffers (`Buffered`; with `--threads` the workers' batches
/// hold the buffers their frames lie in, `chunk`): the kernel's copy of the page cache into a
/// buffer, which stays in this core's cache for the decoding and hashing that follow, costs
/// less than faulting in and handing back every page of a mapping and reading the payload
/// from memory through it. Alternating runs, 2026-11-29, `--threads 1`: 1 MiB writes with MSS
/// 1448 0.49-0.52 s read against 0.60-0.78 s mapped (user CPU 0.33-0.40 against 0.51-0.53 s),
/// MSS 8948 0.32-0.34 against 0.38-0.55 s, 4 KiB I/O 0.68-0.74 against 0.75-0.90 s;
/// `--threads 2`: MSS 1448 0.30-0.34 against 0.36-0.64 s, 4 KiB I/O 0.40-0.44 against
/// 0.48-0.65 s (docs/performance-log.md). `Mapped` is the default of `capture::open` (the
/// `--dask` shards, which skip most frames unread, and the other readers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    Mapped,
    Buffered,
}

impl Source {
    /// Open a path: `-` is standard input; a FIFO or character device is read as a stream
    /// (opening a FIFO does not wait for its writer); a directory or a socket is refused in
    /// one line. gzip, zstd and xz captures are decompressed on the fly. A regular file is
    /// mapped (`ReadMode::Mapped`).
    pub fn open(path: &str) -> Result<Self, CaptureError> {
        Self::open_with(path, ReadMode::Mapped)
    }

    /// `open`, a regular uncompressed file mapped or read through the buffer as `how` says.
    pub fn open_with(path: &str, how: ReadMode) -> Result<Self, CaptureError> {
        // The same words the command line uses for the same fault, whether the file is the
        // only input or one beside others.
        let io = |e: std::io::Error| CaptureError::Io {
            path: path.to_string(),
            reason: match e.kind() {
                std::io::ErrorKind::NotFound => "no such file".to_string(),
                std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
                _ => format!("cannot read: {e}"),
            },
        };
        if path == "-" {
            return Self::stream(Box::new(std::io::stdin()), InputKind::Stdin, path);
        }
        let meta = std::fs::metadata(path).map_err(io)?;
        let not_capture = |what: &str| CaptureError::Io { path: path.to_string(), reason: format!("is {what}, not a capture file") };
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
            let ft = meta.file_type();
            if ft.is_socket() {
                return Err(not_capture("a socket"));
            }
            if ft.is_block_device() {
                return Err(not_capture("a block device"));
            }
            if ft.is_fifo() || ft.is_char_device() {
                // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer,
                // out of reach of Ctrl-C. `Polled` does the waiting.
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(path)
                    .map_err(io)?;
                let kind = if ft.is_fifo() { InputKind::Fifo } else { InputKind::CharDevice };
                return Self::stream(Box::new(Polled { file }), kind, path);
            }
        }
        if meta.is_dir() {
            return Err(not_capture("a directory"));
        }
        let file = File::open(path).map_err(io)?;
        if how == ReadMode::Mapped {
            if let Some(mapped) = Self::mapped(&file, meta.len()) {
                return Ok(mapped);
            }
        }
        Ok(Self::from_reader(Box::new(file), meta.len()))
    }

    /// A regular file of `size` bytes, mapped (None when it is empty or cannot be mapped).
    fn mapped(file: &File, size: u64) -> Option<Self> {
        if size == 0 || usize::try_from(size).is_err() {
            return None;
        }
        // SAFETY: the mapping is read-only and private to this reader; the file is not
        // written through it. Another process truncating the file while it is read is the
        // documented exception (module docs).
        let map = unsafe { memmap2::MmapOptions::new().len(size as usize).map(file) }.ok()?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        let count = Arc::new(AtomicU64::new(size));
        Some(Source {
            file: Box::new(std::io::empty()),
            buf: Arc::new(Vec::new()),
            retired: Default::default(),
            start: 0,
            end: map.len(),
            map: Some(Arc::new(map)),
            released: 0,
            consumed: 0,
            known_size: Some(size),
            eof: true,
            read_error: false,
            interrupted: false,
            memory_limited: false,
            kind: InputKind::File,
            compression: None,
            raw_read: count,
        })
    }

    /// A stream of unknown size (standard input, FIFO, character device).
    fn stream(reader: Box<dyn Read + Send>, kind: InputKind, _path: &str) -> Result<Self, CaptureError> {
        // Standard input is wrapped by `Polled` too when it is not a regular file, so a
        // silent pipe does not hold off Ctrl-C.
        #[cfg(target_os = "linux")]
        let reader: Box<dyn Read + Send> = if kind == InputKind::Stdin {
            use std::os::unix::io::FromRawFd;
            // SAFETY: fd 0 is duplicated, so the File owns its own descriptor.
            let fd = unsafe { libc::dup(0) };
            if fd < 0 {
                reader
            } else {
                Box::new(Polled { file: unsafe { File::from_raw_fd(fd) } })
            }
        } else {
            reader
        };
        let count = Arc::new(AtomicU64::new(0));
        Ok(Source {
            file: Box::new(Counting { inner: reader, count: count.clone() }),
            map: None,
            released: 0,
            buf: Arc::new(vec![0; BUF_LEN]),
            retired: Default::default(),
            start: 0,
            end: 0,
            consumed: 0,
            known_size: None,
            eof: false,
            read_error: false,
            interrupted: false,
            memory_limited: false,
            kind,
            compression: None,
            raw_read: count,
        })
    }

    /// Read from any byte stream of known size (in-memory captures, tests).
    pub fn from_reader(file: Box<dyn Read + Send>, size: u64) -> Self {
        let count = Arc::new(AtomicU64::new(0));
        Source {
            file: Box::new(Counting { inner: file, count: count.clone() }),
            map: None,
            released: 0,
            buf: Arc::new(vec![0; BUF_LEN]),
            retired: Default::default(),
            start: 0,
            end: 0,
            consumed: 0,
            known_size: Some(size),
            eof: false,
            read_error: false,
            interrupted: false,
            memory_limited: false,
            kind: InputKind::File,
            compression: None,
            raw_read: count,
        }
    }

    /// When the first bytes are a gzip, zstd or xz header, read the rest through the matching
    /// decompressor: the readers then see the capture itself, of a size known only at its end.
    pub fn decompress_if_compressed(&mut self, path: &str) -> Result<(), CaptureError> {
        self.fill(6);
        if self.interrupted {
            return Err(CaptureError::Interrupted);
        }
        let Some(c) = Compression::sniff(self.peek()) else { return Ok(()) };
        // The bytes already buffered go first, then the rest of the file (a mapped file: all
        // of it, read from the mapping and counted as it is).
        let raw: Box<dyn Read + Send> = match self.map.take() {
            Some(map) => {
                self.raw_read.store(0, Ordering::Relaxed);
                self.buf = Arc::new(vec![0; BUF_LEN]);
                let mut cur = std::io::Cursor::new(MapBytes(map));
                cur.set_position(self.start as u64);
                Box::new(Counting { inner: cur, count: self.raw_read.clone() })
            }
            None => {
                let head = self.buf[self.start..self.end].to_vec();
                let rest = std::mem::replace(&mut self.file, Box::new(std::io::empty()));
                Box::new(std::io::Cursor::new(head).chain(rest))
            }
        };
        let io = |e: std::io::Error| CaptureError::Io { path: path.to_string(), reason: format!("cannot read: {} stream: {e}", c.name()) };
        self.file = match c {
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(raw)),
            Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(raw).map_err(io)?),
            Compression::Xz => {
                // The decoder allocates what the stream's filter declares (an LZMA2 dictionary
                // may be declared up to 4 GiB): the memory limit refuses more than XZ_MEMLIMIT.
                let stream = liblzma::stream::Stream::new_stream_decoder(XZ_MEMLIMIT, liblzma::stream::CONCATENATED)
                    .map_err(|e| io(e.into()))?;
                Box::new(liblzma::read::XzDecoder::new_stream(raw, stream))
            }
        };
        self.compression = Some(c);
        self.known_size = None;
        self.start = 0;
        self.end = 0;
        self.eof = false;
        self.read_error = false;
        Ok(())
    }

    /// Bytes read from the file or stream itself: the compressed size of a compressed
    /// capture (final once the capture has been read to its end).
    pub fn raw_bytes(&self) -> u64 {
        self.raw_read.load(Ordering::Relaxed)
    }

    /// Treat the bytes as a stream of unknown size (tests: stdin and FIFOs without a terminal).
    #[cfg(test)]
    pub fn forget_size(&mut self) {
        self.known_size = None;
    }

    /// The anomaly for a reader giving up on the rest of its input: the interruption or the
    /// read error that ended it, when one did (the unread rest cannot be accounted), else
    /// `otherwise` (damage the reader found).
    pub fn why_ended(&self, otherwise: super::Anomaly) -> super::Anomaly {
        if self.interrupted {
            super::Anomaly::Interrupted
        } else if self.memory_limited {
            super::Anomaly::DecompressMemoryLimit
        } else if self.read_error {
            super::Anomaly::ReadError
        } else {
            otherwise
        }
    }

    /// Is the size known before reading (a regular, uncompressed file)?
    pub fn size_known(&self) -> bool {
        self.known_size.is_some()
    }

    /// The capture's size: known in advance for a regular file; for a stream or a compressed
    /// capture, the bytes seen so far (final at the end).
    pub fn size(&self) -> u64 {
        self.known_size.unwrap_or(self.consumed + (self.end - self.start) as u64)
    }

    /// File offset of the first unconsumed byte.
    pub fn position(&self) -> u64 {
        self.consumed
    }

    /// Bytes the file had at open time beyond the consumed ones.
    pub fn remaining(&self) -> u64 {
        self.size().saturating_sub(self.consumed)
    }

    /// Try to make `n` contiguous unconsumed bytes available; returns how many are (less
    /// than `n` only at the end of the file or after a read error).
    pub fn fill(&mut self, n: usize) -> usize {
        if self.end - self.start >= n || self.map.is_some() {
            return self.end - self.start;
        }
        if Arc::get_mut(&mut self.buf).is_none() {
            self.unshare(n);
        }
        let buf = Arc::get_mut(&mut self.buf).expect("the buffer is this reader's alone");
        if self.start + n > buf.len() {
            buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if n > buf.len() {
                buf.resize(n, 0);
            }
        }
        while self.end - self.start < n && !self.eof {
            match self.file.read(&mut buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if super::interrupt::is_mark(&e) => {
                    self.eof = true;
                    self.interrupted = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.eof = true;
                    self.read_error = true;
                    let inner = e.get_ref().and_then(|x| x.downcast_ref::<liblzma::stream::Error>());
                    self.memory_limited = matches!(inner, Some(liblzma::stream::Error::MemLimit));
                }
            }
        }
        self.end - self.start
    }

    /// Continue in a buffer no worker holds, with room for `n` bytes: a retired one all
    /// workers let go of, else a new one; the unconsumed bytes move to its front. Buffers are
    /// made only while every retired one is held, so they are as many as the workers' batches
    /// in flight hold at once (each batch at most 1 MiB of frames, `parallel::BATCH_BYTES`), plus one; at most
    /// `RETIRED` are kept for reuse.
    fn unshare(&mut self, n: usize) {
        const RETIRED: usize = 48;
        let len = BUF_LEN.max(n);
        let mut next = match self.retired.iter().position(|b| Arc::strong_count(b) == 1 && b.len() >= len) {
            Some(i) => self.retired.remove(i).expect("found"),
            None => Arc::new(vec![0; len]),
        };
        let rest = self.end - self.start;
        Arc::get_mut(&mut next).expect("held by nobody else")[..rest].copy_from_slice(&self.buf[self.start..self.end]);
        let old = std::mem::replace(&mut self.buf, next);
        self.start = 0;
        self.end = rest;
        if self.retired.len() >= RETIRED {
            self.retired.pop_front();
        }
        self.retired.push_back(old);
    }

    /// The buffer the unconsumed bytes are in, when they are read through one (not mapped):
    /// a `--threads` worker can hold on to it for the frames in it rather than copy them.
    pub fn chunk(&self) -> Option<&Arc<Vec<u8>>> {
        self.map.is_none().then_some(&self.buf)
    }

    /// Are its frames read from a mapping (`ReadMode::Mapped`)?
    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }

    /// The unconsumed bytes currently buffered.
    pub fn peek(&self) -> &[u8] {
        match &self.map {
            Some(map) => &map[self.start..self.end],
            None => &self.buf[self.start..self.end],
        }
    }

    /// Drop `n` buffered bytes (`n` must not exceed what `fill` reported).
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.end - self.start);
        self.start += n;
        self.consumed += n as u64;
        if self.start == self.end && self.map.is_none() {
            self.start = 0;
            self.end = 0;
        }
        self.release_consumed();
    }

    /// Every `RELEASE_STEP` of a mapped file, the pages read more than `RELEASE_LAG` bytes ago
    /// leave the resident set (MADV_DONTNEED): read once, they would
    /// otherwise count as the process's memory for the whole run (1.1 GB of RSS for a 1.1 GB
    /// capture). The page cache keeps them; touching one again re-reads it from the unchanged
    /// file.
    fn release_consumed(&mut self) {
        let Some(map) = &self.map else { return };
        let upto = self.start.saturating_sub(RELEASE_LAG) & !0xfff;
        if upto < self.released + RELEASE_STEP {
            return;
        }
        #[cfg(unix)]
        {
            // SAFETY: a private, read-only mapping of a file nobody writes through it: after
            // MADV_DONTNEED a page reads back as the same file bytes, so borrowed slices
            // (frames handed out before) stay valid and unchanged.
            let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, self.released, upto - self.released) };
        }
        self.released = upto;
    }

    /// Skip `n` bytes, reading through the buffer; returns how many were skipped (fewer
    /// at the end of the file).
    pub fn skip(&mut self, n: u64) -> u64 {
        let mut left = n;
        while left > 0 {
            let want = left.min(self.buf.len().max(BUF_LEN) as u64) as usize;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Mapped pages are handed back `RELEASE_LAG` behind the reading, in `RELEASE_STEP`
    /// steps.
    #[test]
    fn mapped_pages_are_handed_back_behind_the_reading() {
        let path = std::env::temp_dir().join(format!("smbwire-release-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 48 << 20]).unwrap();
        let mut s = Source::open(path.to_str().unwrap()).unwrap();
        assert!(s.is_mapped());
        let chunk = 64 << 10;
        while s.start < (40 << 20) {
            s.consume(chunk);
            assert!(s.released + RELEASE_LAG <= s.start.max(RELEASE_LAG));
            assert!(s.released + RELEASE_LAG + RELEASE_STEP >= s.start, "released {} at {}", s.released, s.start);
        }
        assert!(s.peek().iter().all(|&b| b == 7));
        std::fs::remove_file(&path).ok();
    }

    /// A file truncated by another process after it was opened for `ReadMode::Buffered` ends
    /// where it now ends: reads stop there (a mapping would raise SIGBUS past its new end).
    #[test]
    fn a_buffered_file_truncated_while_read_just_ends() {
        let path = std::env::temp_dir().join(format!("smbwire-truncated-{}", std::process::id()));
        std::fs::write(&path, vec![5u8; 3 * BUF_LEN]).unwrap();
        let mut s = Source::open_with(path.to_str().unwrap(), ReadMode::Buffered).unwrap();
        assert_eq!(s.fill(1000).min(1000), 1000);
        s.consume(1000);
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(BUF_LEN as u64 + 10).unwrap();
        let mut read = 1000;
        loop {
            let got = s.fill(65_536).min(65_536);
            if got == 0 {
                break;
            }
            read += got;
            s.consume(got);
        }
        // What the first read had buffered (up to BUF_LEN) may be more than the new length.
        assert!((BUF_LEN + 10..=2 * BUF_LEN).contains(&read), "{read}");
        std::fs::remove_file(&path).ok();
    }

    /// `ReadMode::Buffered` reads a regular file through the buffer, byte for byte what the
    /// mapping holds, and holds at most what the buffer holds.
    #[test]
    fn a_buffered_file_reads_the_same_bytes_as_its_mapping() {
        let path = std::env::temp_dir().join(format!("smbwire-buffered-{}", std::process::id()));
        let data: Vec<u8> = (0..(3 * BUF_LEN + 12_345)).map(|i| (i * 31 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let p = path.to_str().unwrap();
        let mapped = Source::open_with(p, ReadMode::Mapped).unwrap();
        assert!(mapped.is_mapped());
        assert_eq!(mapped.peek(), &data[..]);
        let mut s = Source::open_with(p, ReadMode::Buffered).unwrap();
        assert!(!s.is_mapped() && s.chunk().is_some());
        let mut read = Vec::new();
        // Uneven pieces, as records come.
        for step in [16usize, 1514, 9014, 65_536].into_iter().cycle() {
            let got = s.fill(step).min(step);
            if got == 0 {
                break;
            }
            assert!(s.buf.len() <= BUF_LEN.max(step), "buffer grew to {}", s.buf.len());
            read.extend_from_slice(&s.peek()[..got]);
            s.consume(got);
        }
        assert_eq!(read, data);
        std::fs::remove_file(&path).ok();
    }

    /// While a `--threads` batch holds the read buffer (`chunk`), the reader reads on into
    /// another one and leaves the held bytes as they were; a buffer nobody holds any more is
    /// reused, so the buffers are as many as are held at once, plus one.
    #[test]
    fn a_held_buffer_is_never_written_and_is_reused_once_let_go() {
        let data: Vec<u8> = (0..(8 * BUF_LEN)).map(|i| (i * 7 % 253) as u8).collect();
        let mut s = Source::from_reader(Box::new(std::io::Cursor::new(data.clone())), data.len() as u64);
        let mut held: Vec<(Arc<Vec<u8>>, usize, usize)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut at = 0usize;
        let step = 1514;
        while s.fill(step) > 0 {
            let got = s.fill(step).min(step);
            let c = s.chunk().expect("not mapped").clone();
            let off = s.peek().as_ptr() as usize - c.as_ptr() as usize;
            assert_eq!(&c[off..off + got], &data[at..at + got]);
            seen.insert(Arc::as_ptr(&c) as usize);
            // A batch holds the buffer of every 3rd piece, for 4 pieces' time.
            if (at / step).is_multiple_of(3) {
                held.push((c, off, at));
            }
            held.retain(|(_, _, from)| at - from < 4 * step);
            for (c, off, from) in &held {
                let n = step.min(data.len() - from);
                assert_eq!(&c[*off..off + n], &data[*from..from + n], "a held frame changed");
            }
            s.consume(got);
            at += got;
        }
        assert_eq!(at, data.len());
        // Held buffers made the reader move on (2 or more), and let-go ones came back (few).
        assert!((2..=3).contains(&seen.len()), "{} buffers for at most two held at a time", seen.len());
    }
}
