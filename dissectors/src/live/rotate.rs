//! `smbwire live --write`: the captured frames as a rotating set of pcapng files, for
//! offline proof later (`smbwire analyze` on the set gives the same figures).
//!
//! The user asked for a capture file, so this is the one place where payload bytes are
//! written to disk; the files are created mode 0600. Format: pcapng (draft-ietf-opsawg-
//! pcapng): one Section Header Block, one Interface Description Block (Ethernet,
//! `if_tsresol` = 9 so timestamps are nanoseconds), then one Enhanced Packet Block per frame.
//!
//! Without a size limit everything goes to the path given. With one, files are
//! `STEM-00001.EXT`, `STEM-00002.EXT`, … each closed before it would pass the limit, and
//! only the newest `count` are kept.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::capture::RawFrame;

use crate::capture::writer;

/// SHB + one IDB (Ethernet).
const HEADER_LEN: u64 = writer::SHB_LEN + writer::IDB_LEN;

#[derive(Clone, Debug)]
pub struct WriteOptions {
    pub path: PathBuf,
    /// Bytes per file before the next one starts; 0: one file, no rotation.
    pub size_limit: u64,
    /// Files kept (the oldest is deleted past this); at least 1.
    pub count: usize,
    /// Snap length recorded in the interface block.
    pub snaplen: u32,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct WriteStats {
    /// Files currently kept, oldest first.
    pub files: Vec<String>,
    pub files_deleted: u64,
    pub frames_written: u64,
    pub bytes_written: u64,
    /// Set when writing failed; nothing more is written after that.
    pub error: Option<String>,
}

pub struct RotatingPcapng {
    opts: WriteOptions,
    out: Option<BufWriter<File>>,
    current_len: u64,
    seq: u64,
    kept: VecDeque<PathBuf>,
    stats: WriteStats,
}

impl RotatingPcapng {
    /// Creates the first file (so a bad path fails before the capture starts).
    pub fn create(opts: WriteOptions) -> io::Result<RotatingPcapng> {
        let mut w = RotatingPcapng {
            opts: WriteOptions {
                count: opts.count.max(1),
                ..opts
            },
            out: None,
            current_len: 0,
            seq: 0,
            kept: VecDeque::new(),
            stats: WriteStats::default(),
        };
        w.open_next()?;
        Ok(w)
    }

    /// Gives the open file to `uid`/`gid` (`--user`: the first file is created before the
    /// privilege drop).
    pub fn chown_current(&self, uid: u32, gid: u32) -> io::Result<()> {
        match self.out.as_ref() {
            Some(out) => std::os::unix::fs::fchown(out.get_ref(), Some(uid), Some(gid)),
            None => Ok(()),
        }
    }

    pub fn stats(&self) -> WriteStats {
        let mut s = self.stats.clone();
        s.files = self.kept.iter().map(|p| p.display().to_string()).collect();
        s
    }

    /// Appends one frame; after an error nothing more is written (the error is kept in the stats).
    pub fn write(&mut self, frame: &RawFrame<'_>) {
        if self.stats.error.is_some() {
            return;
        }
        if let Err(e) = self.try_write(frame) {
            self.stats.error = Some(format!("{}: {e}", self.current_path().display()));
            self.out = None;
        }
    }

    pub fn flush(&mut self) {
        if let Some(out) = self.out.as_mut() {
            if let Err(e) = out.flush() {
                self.stats.error = Some(format!("{}: {e}", self.current_path().display()));
                self.out = None;
            }
        }
    }

    fn current_path(&self) -> PathBuf {
        self.kept.back().cloned().unwrap_or_else(|| self.opts.path.clone())
    }

    fn try_write(&mut self, frame: &RawFrame<'_>) -> io::Result<()> {
        let data = frame.data;
        let block_len = writer::epb_len(data.len(), None);
        if self.opts.size_limit > 0
            && self.current_len > HEADER_LEN
            && self.current_len + block_len > self.opts.size_limit
        {
            self.open_next()?;
        }
        let out = self
            .out
            .as_mut()
            .ok_or_else(|| io::Error::other("capture file closed"))?;
        writer::write_epb(out, 0, frame.info.ts_ns, data, frame.info.orig_len, None)?;
        self.current_len += block_len;
        self.stats.frames_written += 1;
        self.stats.bytes_written += block_len;
        Ok(())
    }

    fn open_next(&mut self) -> io::Result<()> {
        if let Some(mut out) = self.out.take() {
            out.flush()?;
        }
        self.seq += 1;
        let path = if self.opts.size_limit == 0 {
            self.opts.path.clone()
        } else {
            numbered(&self.opts.path, self.seq)
        };
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&header(self.opts.snaplen))?;
        self.kept.push_back(path);
        while self.kept.len() > self.opts.count {
            if let Some(old) = self.kept.pop_front() {
                // Already gone (the user moved it away) is fine.
                let _ = std::fs::remove_file(&old);
                self.stats.files_deleted += 1;
            }
        }
        self.out = Some(out);
        self.current_len = HEADER_LEN;
        self.stats.bytes_written += HEADER_LEN;
        Ok(())
    }
}

/// `dir/cap.pcapng`, 3 → `dir/cap-00003.pcapng`.
pub fn numbered(path: &Path, seq: u64) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{seq:05}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{seq:05}"),
    };
    path.with_file_name(name)
}

fn header(snaplen: u32) -> Vec<u8> {
    let mut b = writer::shb();
    b.extend(writer::idb(crate::capture::linktype::ETHERNET, snaplen));
    debug_assert_eq!(b.len() as u64, HEADER_LEN);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{self, FrameInfo};
    use crate::frame::FrameRef;

    fn frame(n: u64, data: &[u8]) -> RawFrame<'_> {
        RawFrame {
            info: FrameInfo {
                frame: FrameRef { file: 0, number: n },
                ts_ns: 1_700_000_000_123_456_789 + n,
                linktype: capture::linktype::ETHERNET,
                orig_len: data.len() as u32 + 10,
            },
            data,
        }
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("smbwire-rotate-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn one_file_reads_back_frame_for_frame() {
        let d = tmpdir("one");
        let path = d.join("cap.pcapng");
        let mut w = RotatingPcapng::create(WriteOptions {
            path: path.clone(),
            size_limit: 0,
            count: 1,
            snaplen: 65535,
        })
        .unwrap();
        let frames: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 60 + i as usize]).collect();
        for (i, f) in frames.iter().enumerate() {
            w.write(&frame(i as u64, f));
        }
        w.flush();
        assert!(w.stats().error.is_none());
        let mut r = capture::open(path.to_str().unwrap(), 0).unwrap();
        let mut an = crate::anomaly::Anomalies::default();
        let mut acct = crate::accounting::Accounting::default();
        for (i, f) in frames.iter().enumerate() {
            assert!(r.advance(&mut acct, &mut an));
            let got = r.current().expect("frame");
            assert_eq!(got.data, &f[..]);
            assert_eq!(got.info.ts_ns, 1_700_000_000_123_456_789 + i as u64);
            assert_eq!(got.info.orig_len as usize, f.len() + 10);
        }
        assert!(!r.advance(&mut acct, &mut an));
        assert!(an.iter().next().is_none());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), w.stats().bytes_written);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn rotation_keeps_the_newest_files_under_the_limit() {
        let d = tmpdir("rot");
        let path = d.join("cap.pcapng");
        let mut w = RotatingPcapng::create(WriteOptions {
            path: path.clone(),
            size_limit: 1000,
            count: 3,
            snaplen: 65535,
        })
        .unwrap();
        let data = vec![7u8; 200];
        for i in 0..40 {
            w.write(&frame(i, &data));
        }
        w.flush();
        let s = w.stats();
        assert!(s.error.is_none());
        assert_eq!(s.files.len(), 3);
        assert!(s.files_deleted > 0);
        assert!(s.files.last().unwrap().ends_with(&format!("cap-{:05}.pcapng", s.files_deleted + 3)));
        for f in &s.files {
            let len = std::fs::metadata(f).unwrap().len();
            assert!(len <= 1000, "{f}: {len}");
        }
        assert!(!path.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_path_fails_at_create() {
        let r = RotatingPcapng::create(WriteOptions {
            path: PathBuf::from("/nonexistent-dir-smbwire/x.pcapng"),
            size_limit: 0,
            count: 1,
            snaplen: 100,
        });
        assert!(r.is_err());
    }
}
