//! Capture readers: pcap (µs and ns), pcapng (several interfaces), merged by timestamp.
//!
//! Files are streamed through a bounded buffer, never loaded whole, so memory does not grow
//! with the capture. Every byte of a file is accounted: container bytes (file/record/block
//! headers, options, padding) go to `accounting::cat::CAPTURE_FORMAT`, a partial record at
//! the end to `TRUNCATED_TAIL`; frame bytes are accounted by later stages.

pub mod anomaly;
pub mod merge;
pub mod pcap;
pub mod pcapng;
pub mod writer;

pub use anomaly::Anomaly;

use crate::accounting::Accounting;
use crate::anomaly::Anomalies;
use crate::frame::FrameRef;

/// Link-layer types: defined with the link decoders (`wire::linktype`), named here too.
pub use crate::wire::linktype;

/// Metadata of one captured frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameInfo {
    pub frame: FrameRef,
    pub ts_ns: u64,
    pub linktype: u32,
    /// Length of the frame on the wire (may exceed the captured bytes: snaplen).
    pub orig_len: u32,
}

/// One captured frame, borrowed from the reader's buffer until the next advance.
#[derive(Clone, Copy, Debug)]
pub struct RawFrame<'a> {
    pub info: FrameInfo,
    pub data: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureError {
    /// The file could not be opened or read.
    Io { path: String, reason: String },
    /// The file does not start with a pcap or pcapng magic number.
    NotACapture { path: String },
    /// The file is empty (0 bytes).
    Empty { path: String },
    /// The file header itself is damaged (nothing in the file can be read).
    BadHeader { path: String, reason: String },
    /// The user interrupted (Ctrl-C) while smbwire waited for a stream's first bytes.
    Interrupted,
}

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaptureError::Io { path, reason } => write!(f, "{path}: {reason}"),
            CaptureError::NotACapture { path } => {
                write!(f, "{path}: not a pcap or pcapng capture file")
            }
            CaptureError::Empty { path } => write!(f, "{path}: empty file (0 bytes), not a capture"),
            CaptureError::BadHeader { path, reason } => {
                write!(f, "{path}: damaged capture header: {reason}")
            }
            CaptureError::Interrupted => write!(f, "interrupted"),
        }
    }
}

/// A single capture file, read frame by frame.
///
/// `advance` loads the next frame (returning false at the end); `current` borrows it.
/// Damage inside the file after a valid header is never an error: it raises an anomaly,
/// accounts the bytes, and ends or skips as the format allows.
pub trait FrameReader {
    fn advance(&mut self, acct: &mut Accounting, anomalies: &mut Anomalies) -> bool;
    fn current(&self) -> Option<RawFrame<'_>>;
    /// Size of the file in bytes (for progress and reconciliation).
    fn file_size(&self) -> u64;
    /// Bytes consumed so far (for progress).
    fn position(&self) -> u64;
    /// Where the bytes come from (file or stream, compression) and how many were read.
    fn source(&self) -> &source::Source;
    fn source_mut(&mut self) -> &mut source::Source;
}

/// Open one file, sniffing pcap vs pcapng from the magic number.
pub fn open(path: &str, file_index: u16) -> Result<Box<dyn FrameReader>, CaptureError> {
    open_with(path, file_index, source::ReadMode::Mapped)
}

/// `open`, a regular uncompressed file mapped or read through the buffer (`source::ReadMode`).
pub fn open_with(path: &str, file_index: u16, how: source::ReadMode) -> Result<Box<dyn FrameReader>, CaptureError> {
    sniff_and_open(source::Source::open_with(path, how)?, path, file_index)
}

/// Like `open`, over any byte stream whose total size is known (`name` is used in errors).
/// The stream is read through the same bounded buffer as a file.
pub fn open_reader(
    reader: Box<dyn std::io::Read + Send>,
    size: u64,
    name: &str,
    file_index: u16,
) -> Result<Box<dyn FrameReader>, CaptureError> {
    sniff_and_open(source::Source::from_reader(reader, size), name, file_index)
}

fn sniff_and_open(mut src: source::Source, path: &str, file_index: u16) -> Result<Box<dyn FrameReader>, CaptureError> {
    src.decompress_if_compressed(path)?;
    let got = src.fill(4);
    if src.interrupted {
        return Err(CaptureError::Interrupted);
    }
    if got == 0 && !src.read_error {
        return Err(CaptureError::Empty { path: path.to_string() });
    }
    if got < 4 && src.memory_limited {
        let limit = source::XZ_MEMLIMIT >> 20;
        return Err(CaptureError::Io { path: path.to_string(), reason: format!("its xz data needs more than {limit} MiB of memory to decode (a larger dictionary than xz -9's); not read") });
    }
    if got < 4 && src.read_error {
        let what = src.compression.map_or("the file".to_string(), |c| format!("its {} data", c.name()));
        return Err(CaptureError::Io { path: path.to_string(), reason: format!("{what} could not be read (damaged or cut short)") });
    }
    if got < 4 {
        return Err(CaptureError::BadHeader { path: path.to_string(), reason: "shorter than a magic number".into() });
    }
    let m = src.peek();
    let magic = [m[0], m[1], m[2], m[3]];
    if pcap::sniff(magic).is_some() {
        return Ok(Box::new(pcap::PcapReader::new(src, path, file_index)?));
    }
    if u32::from_be_bytes(magic) == pcapng::block::SHB {
        return Ok(Box::new(pcapng::PcapngReader::new(src, path, file_index)?));
    }
    Err(CaptureError::NotACapture { path: path.to_string() })
}

/// How far past the next record the readers ask for the cache line there: with `--threads`
/// the reader touches only the record headers of wire-size frames (1.5 KB apart), and one
/// record ahead leaves no time for the load (`advance` fell from about 5.6% to 3.5% of a
/// `--threads 2` run's samples on MSS 1448).
pub(crate) const PREFETCH_AHEAD: usize = 6144;

pub(crate) use crate::hint::prefetch;

pub mod source;

/// Ctrl-C while the engine waits on a silent stream. The engine cannot see the embedding
/// program's signal handling, so the embedder installs a check (`set_check`): the Python
/// binding asks the interpreter whether a signal is pending. Without one, nothing interrupts.
pub mod interrupt {
    use std::sync::OnceLock;

    static CHECK: OnceLock<fn() -> bool> = OnceLock::new();

    /// The text of the `io::Error` a stream returns when the user interrupted it.
    pub const MARK: &str = "smbwire: interrupted while waiting for input";

    /// Install the check (first call wins).
    pub fn set_check(f: fn() -> bool) {
        let _ = CHECK.set(f);
    }

    /// Has the user asked to stop?
    pub fn requested() -> bool {
        CHECK.get().is_some_and(|f| f())
    }

    pub fn is_mark(e: &std::io::Error) -> bool {
        e.kind() == std::io::ErrorKind::Interrupted && e.get_ref().is_some_and(|r| r.to_string() == MARK)
    }
}

/// Test helpers, also for the synthesizer's tests (feature `testutil`): captures built in
/// memory, and the public captures bundled in `captures/public/`.
#[cfg(any(test, feature = "testutil"))]
pub mod testutil {
    use super::*;
    use std::path::PathBuf;

    /// The repository's `captures/public/`: a missing directory fails the test.
    pub fn public_dir() -> PathBuf {
        let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../captures/public");
        assert!(d.join("expected.json").is_file(), "public captures not found at {}", d.display());
        d
    }

    /// (file name, size, expected packet count) for every capture in expected.json.
    pub fn public_files() -> Vec<(String, u64, u64)> {
        let d = public_dir();
        let text = std::fs::read_to_string(d.join("expected.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let files = v["files"].as_object().expect("expected.json: files");
        let mut out = Vec::new();
        for (name, f) in files {
            let variants = f["variants"].as_object().expect("variants");
            let counts: Vec<u64> = variants.values().map(|x| x["values"]["packets"].as_u64().expect("packets")).collect();
            assert!(!counts.is_empty() && counts.iter().all(|c| *c == counts[0]), "{name}: variants disagree");
            out.push((name.clone(), f["size_bytes"].as_u64().expect("size_bytes"), counts[0]));
        }
        assert!(out.len() >= 28, "expected.json lists only {} captures", out.len());
        out
    }

    /// The encrypted public captures and their keys (captures/public/MANIFEST.md): file,
    /// SessionId (wire bytes in hex), session key, ServerToClient and ClientToServer keys
    /// (empty when the manifest gives none).
    pub const ENCRYPTED: [(&str, &str, &str, &str, &str); 5] = [
        ("smb300-aes128ccm-wstest.pcap", "1900009c003c0000", "9a9ea16a0cdbeb6064772318073f172f", "8be6cc53d4beba29387e69aef035d497", "bff985870e81784d533fdc09497b8eab"),
        ("smb311-aes128ccm-wstest.pcap", "2900009c003c0000", "f1fa528d3cd182cca67bd4596dabd885", "763d5552dbc9650b700869467a5857e4", "35e69833c6578e438c8701cb40bf483e"),
        ("smb311-aes128gcm-wstest.pcap", "3900000000400000", "e79161ded03bda1449b2c8e58f753953", "b02f5de25e0562075c3dc329fa2aa396", "7201623a31754e6581864581209dd3d2"),
        ("smb300-aes128ccm-wiki.pcap", "3d00009400480000", "28f2847263c83dc00621f742dd3f2e7b", "", ""),
        ("smb311-aes128ccm-filt-wiki.pcap", "690000ac1c280000", "b25a135fc3dc14269f20d7cbc8716b6b", "394071f1a21db5ba683efa868c36aedf", "f8c1a6b544e8226f98ee44778eaf316b"),
    ];

    /// Every bundled (`captures/`) and public (`captures/public/`) capture, sorted.
    pub fn all_captures() -> Vec<PathBuf> {
        let bundled = public_dir().parent().expect("captures/").to_path_buf();
        let mut all: Vec<PathBuf> = Vec::new();
        for dir in [bundled, public_dir()] {
            for e in std::fs::read_dir(&dir).expect("captures directory") {
                let p = e.expect("entry").path();
                let name = p.file_name().unwrap().to_string_lossy().to_string();
                if name.ends_with(".pcap") || name.ends_with(".pcapng") {
                    all.push(p);
                }
            }
        }
        all.sort();
        assert!(all.len() >= 30, "bundled and public captures: {}", all.len());
        all
    }

    /// The inputs every "the same result as one pipeline" test (`parallel`, `distributed`) runs
    /// beyond each capture alone: the nested-mirror and multichannel captures (for a short
    /// window, which folds sends while others still arrive); the public SMB3 captures merged by
    /// time (several mirror ports' files); and generated captures of the same servers, with the
    /// same SessionIds at the same time, whose sessions one pipeline counts once per server.
    pub fn equality_inputs(all: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>, Vec<PathBuf>) {
        let named = |p: &PathBuf, s: &str| p.to_string_lossy().contains(s);
        let windowed: Vec<PathBuf> = all.iter().filter(|p| named(p, "nested4") || named(p, "multichannel")).cloned().collect();
        assert!(windowed.len() >= 2, "nested-mirror and multichannel captures: {}", windowed.len());
        let smb: Vec<PathBuf> = all.iter().filter(|p| named(p, "smb3") && !named(p, "aes")).cloned().collect();
        assert!(smb.len() >= 5, "public SMB3 captures: {}", smb.len());
        let same_servers = ["nested4-1MiB.pcap", "redirect4-1MiB.pcap", "mirror2-1MiB.pcap"]
            .iter()
            .map(|n| all.iter().find(|p| p.file_name().is_some_and(|f| f == *n)).unwrap_or_else(|| panic!("{n} not bundled")).clone())
            .collect();
        (windowed, smb, same_servers)
    }

    /// Fails with the top-level keys where two results differ (and their values, cut short).
    pub fn assert_same_json(what: &str, want: &serde_json::Value, got: &serde_json::Value) {
        if want == got {
            return;
        }
        let (a, b) = (want.as_object().expect("an object"), got.as_object().expect("an object"));
        let diff: Vec<_> =
            a.keys().chain(b.keys()).filter(|k| a.get(*k) != b.get(*k)).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        let show = |o: &serde_json::Map<String, serde_json::Value>| {
            let t = serde_json::to_string(&diff.iter().map(|k| o.get(*k)).collect::<Vec<_>>()).unwrap();
            t.chars().take(1500).collect::<String>()
        };
        panic!("{what} differs in {diff:?}:\n{}\n{}", show(a), show(b));
    }

    /// A TCP WRITE send of `payload` on connection `conn` (MessageId `conn`) from 198.18.0.`src`
    /// to 198.18.0.9, at 1 us.
    pub fn write_send(conn: u64, src: u8, payload: &[u8]) -> crate::payload::send::SendRecord {
        use crate::payload::send::{SendKind, SendRecord, Transport};
        SendRecord {
            conn,
            message_id: conn,
            kind: SendKind::Write,
            transport: Transport::Tcp,
            src: std::net::IpAddr::from([198, 18, 0, src]),
            dst: std::net::IpAddr::from([198, 18, 0, 9]),
            src_port: 50000,
            dst_port: 445,
            ip_proto: 6,
            session_id: 1,
            tree_id: 1,
            file_id: [1; 16],
            share: None,
            file_name: None,
            offset: 0,
            first_frame: crate::frame::FrameRef { file: 0, number: conn },
            last_frame: crate::frame::FrameRef { file: 0, number: conn },
            header_frame: None,
            ts_ns: 1_000,
            digest: crate::payload::hash::digest_of(payload),
        }
    }

    pub fn open_bytes(data: Vec<u8>) -> Result<Box<dyn FrameReader>, CaptureError> {
        let n = data.len() as u64;
        open_reader(Box::new(std::io::Cursor::new(data)), n, "<mem>", 0)
    }

    /// Everything one pass over a reader saw.
    pub struct Pass {
        pub frames: Vec<(FrameInfo, Vec<u8>)>,
        pub acct: Accounting,
        pub an: Anomalies,
    }

    impl Pass {
        pub fn frame_bytes(&self) -> u64 {
            self.frames.iter().map(|(_, d)| d.len() as u64).sum()
        }
        /// Bytes of the file the reader accounted or returned.
        pub fn covered(&self) -> u64 {
            use crate::accounting::cat;
            self.acct.get(cat::CAPTURE_FORMAT) + self.acct.get(cat::TRUNCATED_TAIL) + self.acct.get(cat::MALFORMED) + self.frame_bytes()
        }
    }

    pub fn read_all(mut r: Box<dyn FrameReader>) -> Pass {
        let mut acct = Accounting::default();
        let mut an = Anomalies::default();
        let mut frames = Vec::new();
        let mut guard = 0u64;
        while r.advance(&mut acct, &mut an) {
            let f = r.current().expect("advance returned true without a frame");
            frames.push((f.info, f.data.to_vec()));
            guard += 1;
            assert!(guard < 10_000_000);
        }
        assert!(r.current().is_none());
        assert!(!r.advance(&mut acct, &mut an), "advance after the end must stay false");
        assert_eq!(r.position(), r.file_size(), "position at the end");
        Pass { frames, acct, an }
    }

    /// A classic pcap: `records` are (ts seconds, ts fraction, data, orig_len).
    pub fn pcap(big_endian: bool, nanos: bool, linktype: u32, records: &[(u32, u32, &[u8], u32)]) -> Vec<u8> {
        let w32 = |v: &mut Vec<u8>, x: u32| v.extend_from_slice(&if big_endian { x.to_be_bytes() } else { x.to_le_bytes() });
        let w16 = |v: &mut Vec<u8>, x: u16| v.extend_from_slice(&if big_endian { x.to_be_bytes() } else { x.to_le_bytes() });
        let mut v = Vec::new();
        w32(&mut v, if nanos { pcap::MAGIC_NANOS } else { pcap::MAGIC_MICROS });
        w16(&mut v, 2);
        w16(&mut v, 4);
        w32(&mut v, 0);
        w32(&mut v, 0);
        w32(&mut v, 65535);
        w32(&mut v, linktype);
        for (s, f, d, o) in records {
            w32(&mut v, *s);
            w32(&mut v, *f);
            w32(&mut v, d.len() as u32);
            w32(&mut v, *o);
            v.extend_from_slice(d);
        }
        v
    }

    /// pcapng block writer in one byte order.
    pub struct Ng {
        pub big_endian: bool,
        pub out: Vec<u8>,
    }

    impl Ng {
        pub fn new(big_endian: bool) -> Self {
            Ng { big_endian, out: Vec::new() }
        }
        fn u32b(&self, x: u32) -> [u8; 4] {
            if self.big_endian {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            }
        }
        fn u16b(&self, x: u16) -> [u8; 2] {
            if self.big_endian {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            }
        }
        pub fn block(&mut self, ty: u32, body: &[u8]) -> &mut Self {
            let padded = (body.len() + 3) & !3;
            let total = (12 + padded) as u32;
            let (t, l) = (self.u32b(ty), self.u32b(total));
            self.out.extend_from_slice(&t);
            self.out.extend_from_slice(&l);
            self.out.extend_from_slice(body);
            self.out.resize(self.out.len() + padded - body.len(), 0);
            self.out.extend_from_slice(&l);
            self
        }
        pub fn shb(&mut self) -> &mut Self {
            let mut b = Vec::new();
            b.extend_from_slice(&self.u32b(pcapng::BYTE_ORDER_MAGIC));
            b.extend_from_slice(&self.u16b(1));
            b.extend_from_slice(&self.u16b(0));
            b.extend_from_slice(&[0xff; 8]); // section length -1: unknown
            self.block(pcapng::block::SHB, &b)
        }
        /// IDB with options given as (code, value).
        pub fn idb(&mut self, linktype: u16, snaplen: u32, opts: &[(u16, &[u8])]) -> &mut Self {
            let mut b = Vec::new();
            b.extend_from_slice(&self.u16b(linktype));
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(&self.u32b(snaplen));
            for (code, val) in opts {
                b.extend_from_slice(&self.u16b(*code));
                b.extend_from_slice(&self.u16b(val.len() as u16));
                b.extend_from_slice(val);
                b.resize((b.len() + 3) & !3, 0);
            }
            if !opts.is_empty() {
                b.extend_from_slice(&[0, 0, 0, 0]);
            }
            self.block(pcapng::block::IDB, &b)
        }
        pub fn epb(&mut self, iface: u32, ts: u64, data: &[u8], orig_len: u32) -> &mut Self {
            let mut b = Vec::new();
            for x in [iface, (ts >> 32) as u32, ts as u32, data.len() as u32, orig_len] {
                b.extend_from_slice(&self.u32b(x));
            }
            b.extend_from_slice(data);
            b.resize((b.len() + 3) & !3, 0);
            // An opt_comment option, then opt_endofopt: options are container bytes too.
            b.extend_from_slice(&self.u16b(1));
            b.extend_from_slice(&self.u16b(3));
            b.extend_from_slice(b"hi\0\0");
            b.extend_from_slice(&[0, 0, 0, 0]);
            self.block(pcapng::block::EPB, &b)
        }
        pub fn spb(&mut self, data: &[u8], orig_len: u32) -> &mut Self {
            let mut b = self.u32b(orig_len).to_vec();
            b.extend_from_slice(data);
            self.block(pcapng::block::SPB, &b)
        }
        pub fn pb(&mut self, iface: u16, ts: u64, data: &[u8], orig_len: u32) -> &mut Self {
            let mut b = Vec::new();
            b.extend_from_slice(&self.u16b(iface));
            b.extend_from_slice(&self.u16b(0));
            for x in [(ts >> 32) as u32, ts as u32, data.len() as u32, orig_len] {
                b.extend_from_slice(&self.u32b(x));
            }
            b.extend_from_slice(data);
            self.block(pcapng::block::PB, &b)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;
    use crate::accounting::cat;

    #[test]
    fn public_captures_frame_counts_match_tshark() {
        let dir = public_dir();
        let files = public_files();
        // Every capture in the directory is covered by expected.json (nothing skipped).
        for e in std::fs::read_dir(&dir).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".pcap") || name.ends_with(".pcapng") {
                assert!(files.iter().any(|(n, _, _)| *n == name), "{name} not in expected.json");
            }
        }
        for (name, size, packets) in files {
            let path = dir.join(&name);
            let r = open(path.to_str().unwrap(), 3).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.file_size(), size, "{name}: size");
            let p = read_all(r);
            assert_eq!(p.frames.len() as u64, packets, "{name}: frame count vs tshark");
            for (i, (info, data)) in p.frames.iter().enumerate() {
                assert_eq!(info.frame, crate::frame::FrameRef { file: 3, number: i as u64 + 1 });
                assert!(data.len() as u64 <= u64::from(info.orig_len).max(data.len() as u64));
                assert!(info.ts_ns > 1_000_000_000 * 1_000_000_000, "{name}: timestamp after 2001");
            }
            // Accounting invariant; public captures are whole and clean.
            assert_eq!(p.covered(), size, "{name}: accounting");
            assert_eq!(p.acct.get(cat::TRUNCATED_TAIL) + p.acct.get(cat::MALFORMED), 0, "{name}");
            assert_eq!(p.an.iter().count(), 0, "{name}: anomalies {:?}", p.an.iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn public_captures_timestamps_and_linktypes() {
        let dir = public_dir();
        // First frame times as printed by capinfos/tshark (frame.time_epoch).
        // First-frame times as tshark prints them (frame.time_epoch). The ERF file's pcap
        // record header carries µs; tshark shows the ERF header's finer time instead.
        let cases: [(&str, u64, u32); 6] = [
            ("smb311-negotiate-contexts-zeek.pcap", 1_566_488_999_981_767_000, capture_lt::ETHERNET),
            ("smb302-reads-writes.pcap", 1_672_167_351_731_494_000, capture_lt::NULL),
            ("smb311-compress-lz77-lz77huff-lznt1.pcap", 1_562_328_382_877_576_000, capture_lt::LINUX_SLL),
            ("smb311-win10-handshake.pcapng", 1_476_605_277_277_352_000, capture_lt::ETHERNET),
            ("smb311-ms-fasod-example1.pcapng", 1_588_494_649_186_589_000, capture_lt::ETHERNET),
            ("rdma-infiniband-erf-ipoib.pcap", 1_210_794_479_499_693_000, capture_lt::ERF),
        ];
        for (name, ts, lt) in cases {
            let p = read_all(open(dir.join(name).to_str().unwrap(), 0).unwrap());
            let first = p.frames[0].0;
            assert_eq!(first.linktype, lt, "{name}");
            assert_eq!(first.ts_ns, ts, "{name}");
        }
    }

    use super::linktype as capture_lt;

    #[test]
    fn open_errors() {
        assert!(matches!(open("/nonexistent/x.pcap", 0), Err(CaptureError::Io { .. })));
        assert!(matches!(open_bytes(vec![]), Err(CaptureError::Empty { .. })));
        assert!(matches!(open_bytes(vec![0xd4, 0xc3]), Err(CaptureError::BadHeader { .. })));
        assert!(matches!(open_bytes(b"GET / HTTP/1.1\r\n\r\n".to_vec()), Err(CaptureError::NotACapture { .. })));
        let full = pcap(false, false, 1, &[]);
        assert!(matches!(open_bytes(full[..23].to_vec()), Err(CaptureError::BadHeader { .. })));
        let mut bad_version = full.clone();
        bad_version[4] = 9;
        assert!(matches!(open_bytes(bad_version), Err(CaptureError::BadHeader { .. })));
        let mut ng = Ng::new(false);
        ng.shb();
        let mut bad_bom = ng.out.clone();
        bad_bom[8] = 0;
        assert!(matches!(open_bytes(bad_bom), Err(CaptureError::BadHeader { .. })));
        assert!(matches!(open_bytes(ng.out[..20].to_vec()), Err(CaptureError::BadHeader { .. })));
        // An empty but valid capture has no frames and accounts its header.
        let p = read_all(open_bytes(full.clone()).unwrap());
        assert!(p.frames.is_empty());
        assert_eq!(p.acct.get(cat::CAPTURE_FORMAT), 24);
        let p = read_all(open_bytes(ng.out.clone()).unwrap());
        assert!(p.frames.is_empty());
        assert_eq!(p.acct.get(cat::CAPTURE_FORMAT), ng.out.len() as u64);
    }

    /// Cut `data` at every offset in `cuts`: never a panic, and the invariant holds.
    fn check_cuts(name: &str, data: &[u8], cuts: impl Iterator<Item = usize>) {
        let whole = read_all(open_bytes(data.to_vec()).unwrap());
        for cut in cuts {
            let part = data[..cut].to_vec();
            match open_bytes(part) {
                Err(CaptureError::Empty { .. }) => assert_eq!(cut, 0),
                Err(CaptureError::BadHeader { .. }) => assert!(cut < 28, "{name}: cut {cut} refused"),
                Err(e) => panic!("{name}: cut {cut}: {e}"),
                Ok(r) => {
                    let p = read_all(r);
                    assert_eq!(p.covered(), cut as u64, "{name}: cut at {cut}");
                    assert!(p.frames.len() <= whole.frames.len());
                    // Frames returned are a prefix of the whole file's frames.
                    for (a, b) in p.frames.iter().zip(&whole.frames) {
                        assert_eq!(a.1, b.1, "{name}: cut at {cut}");
                        assert_eq!(a.0.ts_ns, b.0.ts_ns);
                    }
                    let tail = p.acct.get(cat::TRUNCATED_TAIL);
                    assert_eq!(tail > 0, p.an.get("capture.truncated_record") > 0, "{name}: cut at {cut}");
                    assert_eq!(p.acct.get(cat::MALFORMED), 0, "{name}: cut at {cut}");
                }
            }
        }
    }

    #[test]
    fn truncated_public_captures() {
        let dir = public_dir();
        for name in [
            "smb311-compress-lz77-lz77huff-lznt1.pcap",
            "smb311-compress-chained-patternv1-lznt1.pcapng",
            "smb2-compound-multiple-pdus-zeek.pcap",
        ] {
            let data = std::fs::read(dir.join(name)).unwrap();
            check_cuts(name, &data, 0..data.len());
        }
        for name in ["smb311-ms-fasod-example1.pcapng", "smb311-win10-handshake.pcapng", "smb302-reads-writes.pcap"] {
            let data = std::fs::read(dir.join(name)).unwrap();
            check_cuts(name, &data, (0..data.len()).step_by(997));
        }
    }

    #[test]
    fn truncated_tail_counts_partial_record() {
        let full = pcap(false, false, 1, &[(1, 0, &[1, 2, 3, 4], 4), (2, 0, &[5, 6, 7, 8, 9], 5)]);
        let cut = full.len() - 2;
        let p = read_all(open_bytes(full[..cut].to_vec()).unwrap());
        assert_eq!(p.frames.len(), 1);
        assert_eq!(p.acct.get(cat::TRUNCATED_TAIL), 16 + 3);
        assert_eq!(p.acct.get(cat::CAPTURE_FORMAT), 24 + 16);
        assert_eq!(p.an.get("capture.truncated_record"), 1);
    }

    #[test]
    fn oversized_pcap_record_stops_the_file() {
        let mut full = pcap(true, false, 1, &[(1, 0, &[1, 2, 3, 4], 4), (2, 0, &[5; 40], 40)]);
        // Second record's caplen → 16 MiB.
        let off = 24 + 16 + 4 + 8;
        full[off..off + 4].copy_from_slice(&(16u32 << 20).to_be_bytes());
        let p = read_all(open_bytes(full.clone()).unwrap());
        assert_eq!(p.frames.len(), 1);
        assert_eq!(p.an.get("pcap.bad_record_length"), 1);
        assert_eq!(p.acct.get(cat::MALFORMED), 16 + 40);
        assert_eq!(p.covered(), full.len() as u64);
    }

    #[test]
    fn pcap_timestamps_both_resolutions_and_byte_orders() {
        for be in [false, true] {
            let us = read_all(open_bytes(pcap(be, false, 1, &[(1_700_000_000, 123_456, &[0; 60], 60)])).unwrap());
            assert_eq!(us.frames[0].0.ts_ns, 1_700_000_000_123_456_000);
            assert_eq!(us.frames[0].0.linktype, 1);
            let ns = read_all(open_bytes(pcap(be, true, 228, &[(1_700_000_000, 123_456_789, &[0; 60], 1514)])).unwrap());
            assert_eq!(ns.frames[0].0.ts_ns, 1_700_000_000_123_456_789);
            assert_eq!(ns.frames[0].0.orig_len, 1514);
            assert_eq!(ns.frames[0].0.linktype, 228);
        }
    }

    #[test]
    fn pcapng_blocks_interfaces_and_resolutions() {
        for be in [false, true] {
            let mut ng = Ng::new(be);
            ng.shb()
                .idb(1, 65535, &[(2, b"eth0"), (9, &[9])]) // if_name, if_tsresol = ns
                .idb(113, 262144, &[]) // µs default
                .idb(101, 0, &[(9, &[0x80 | 10]), (14, &10i64.to_le_bytes())]) // 2^-10 s, +10 s (LE value, fixed below)
                .epb(0, 1_700_000_000_123_456_789, &[0xaa; 61], 1514)
                .block(0x0000_0bad, &[1, 2, 3, 4, 5]) // unknown block: skipped
                .epb(1, 1_700_000_000_123_456, &[0xbb; 20], 20)
                .epb(2, 1024 * 5 + 512, &[0xcc; 3], 3)
                .spb(&[0xdd; 10], 10) // interface 0: captured = min(orig_len, snaplen), padding dropped
                .pb(1, 1_700_000_001_000_000, &[0xee; 7], 7);
            if be {
                // if_tsoffset must be in the section's byte order.
                let pos = ng.out.windows(8).position(|w| w == 10i64.to_le_bytes()).unwrap();
                ng.out[pos..pos + 8].copy_from_slice(&10i64.to_be_bytes());
            }
            let size = ng.out.len() as u64;
            let p = read_all(open_bytes(ng.out.clone()).unwrap());
            let got: Vec<(u64, u32, usize, u32, u64)> =
                p.frames.iter().map(|(i, d)| (i.frame.number, i.linktype, d.len(), i.orig_len, i.ts_ns)).collect();
            assert_eq!(
                got,
                vec![
                    (1, 1, 61, 1514, 1_700_000_000_123_456_789),
                    (2, 113, 20, 20, 1_700_000_000_123_456_000),
                    (3, 101, 3, 3, 15_500_000_000),
                    (4, 1, 10, 10, 15_500_000_000),
                    (5, 113, 7, 7, 1_700_000_001_000_000_000),
                ],
                "big_endian={be}"
            );
            assert_eq!(p.frames[0].1, vec![0xaa; 61]);
            assert_eq!(p.frames[3].1, vec![0xdd; 10]);
            assert_eq!(p.covered(), size);
            assert_eq!(p.acct.get(cat::MALFORMED) + p.acct.get(cat::TRUNCATED_TAIL), 0);
            assert_eq!(p.an.iter().count(), 0);
        }
    }

    #[test]
    fn pcapng_sections_switch_byte_order_and_reset_interfaces() {
        let mut a = Ng::new(false);
        a.shb().idb(1, 0, &[]).epb(0, 1_000_000, &[1; 14], 14);
        let mut b = Ng::new(true);
        b.shb().idb(228, 0, &[(9, &[9])]).epb(0, 2_000_000_000, &[2; 20], 20);
        // A third section with no IDB: its EPB names an unknown interface.
        let mut c = Ng::new(false);
        c.shb().epb(0, 5, &[3; 8], 8);
        let mut data = a.out.clone();
        data.extend_from_slice(&b.out);
        data.extend_from_slice(&c.out);
        let p = read_all(open_bytes(data.clone()).unwrap());
        assert_eq!(p.frames.len(), 2);
        assert_eq!((p.frames[0].0.linktype, p.frames[0].0.ts_ns), (1, 1_000_000_000));
        assert_eq!((p.frames[1].0.linktype, p.frames[1].0.ts_ns), (228, 2_000_000_000));
        assert_eq!(p.an.get("pcapng.unknown_interface"), 1);
        assert_eq!(p.covered(), data.len() as u64);
    }

    #[test]
    fn pcapng_damaged_blocks() {
        let mut ng = Ng::new(false);
        ng.shb().idb(1, 0, &[]).epb(0, 1, &[1; 16], 16);
        let good = ng.out.len();
        ng.epb(0, 2, &[2; 16], 16);
        // caplen larger than the block.
        let mut d = ng.out.clone();
        d[good + 20..good + 24].copy_from_slice(&1000u32.to_le_bytes());
        let p = read_all(open_bytes(d.clone()).unwrap());
        assert_eq!(p.frames.len(), 1);
        assert_eq!(p.an.get("pcapng.bad_caplen"), 1);
        assert_eq!(p.covered(), d.len() as u64);
        // Block length not a multiple of 4: no resync, rest is malformed.
        let mut d = ng.out.clone();
        d[good + 4] = 0x31;
        let p = read_all(open_bytes(d.clone()).unwrap());
        assert_eq!(p.an.get("pcapng.bad_block_length"), 1);
        assert_eq!(p.acct.get(cat::MALFORMED), (d.len() - good) as u64);
        assert_eq!(p.covered(), d.len() as u64);
        // Trailing length disagrees: counted, frame still returned.
        let mut d = ng.out.clone();
        let last = d.len() - 4;
        d[last] ^= 0x40;
        let p = read_all(open_bytes(d.clone()).unwrap());
        assert_eq!(p.frames.len(), 2);
        assert_eq!(p.an.get("pcapng.block_length_mismatch"), 1);
    }

    #[test]
    fn large_records() {
        // A pcap declaring a 400 KiB snaplen may carry a 300 KiB record (beyond the buffer's
        // first fill); a pcapng block above MAX_PARSED_BLOCK is skipped unbuffered.
        let big = vec![0x11u8; 300 * 1024];
        let mut d = pcap(false, false, 1, &[(1, 0, &big, big.len() as u32), (2, 0, &[1, 2], 2)]);
        d[16..20].copy_from_slice(&(400u32 * 1024).to_le_bytes());
        let p = read_all(open_bytes(d.clone()).unwrap());
        assert_eq!(p.frames.len(), 2);
        assert_eq!(p.frames[0].1.len(), big.len());
        assert_eq!(p.covered(), d.len() as u64);

        let huge = vec![0x22u8; pcapng::MAX_PARSED_BLOCK];
        let mut ng = Ng::new(false);
        ng.shb().idb(1, 0, &[]).epb(0, 1, &huge, huge.len() as u32).epb(0, 2, &[3; 5], 5);
        let p = read_all(open_bytes(ng.out.clone()).unwrap());
        assert_eq!(p.frames.len(), 1);
        assert_eq!(p.frames[0].0.frame.number, 2, "the skipped packet block keeps its number");
        assert_eq!(p.an.get("pcapng.oversized_block"), 1);
        assert!(p.acct.get(cat::MALFORMED) > huge.len() as u64);
        assert_eq!(p.covered(), ng.out.len() as u64);
    }

    #[test]
    fn simple_packet_block_honours_snaplen() {
        let mut ng = Ng::new(true);
        ng.shb().idb(1, 8, &[]).epb(0, 7_000_000, &[1; 8], 1500).spb(&[9; 8], 1500);
        let p = read_all(open_bytes(ng.out.clone()).unwrap());
        assert_eq!(p.frames.len(), 2);
        let (info, data) = &p.frames[1];
        assert_eq!((data.len(), info.orig_len, info.ts_ns), (8, 1500, 7_000_000_000));
        assert_eq!(p.covered(), ng.out.len() as u64);
    }

    #[test]
    fn resolution_conversion() {
        use pcapng::TsResolution::*;
        assert_eq!(Pow10(6).to_ns(1_500_000, 0), 1_500_000_000);
        assert_eq!(Pow10(9).to_ns(7, 0), 7);
        assert_eq!(Pow10(12).to_ns(7_000, 0), 7);
        assert_eq!(Pow10(127).to_ns(u64::MAX, 0), 0);
        assert_eq!(Pow2(1).to_ns(3, 0), 1_500_000_000);
        assert_eq!(Pow2(127).to_ns(u64::MAX, 0), 0);
        assert_eq!(Pow10(0).to_ns(u64::MAX, 0), u64::MAX);
        assert_eq!(Pow10(6).to_ns(0, -5), 0);
        assert_eq!(pcapng::TsResolution::from_option(0x86), Pow2(6));
    }

    #[test]
    fn merge_interleaves_by_time() {
        let a = pcap(false, false, 1, &[(10, 0, &[0xa1], 1), (30, 0, &[0xa2], 1), (30, 5, &[0xa3], 1)]);
        let b = pcap(true, true, 1, &[(20, 0, &[0xb1], 1), (30, 0, &[0xb2], 1), (40, 0, &[0xb3], 1)]);
        let ra = open_reader(Box::new(std::io::Cursor::new(a)), 24 + 3 * 17, "a", 0).unwrap();
        let rb = open_reader(Box::new(std::io::Cursor::new(b)), 24 + 3 * 17, "b", 1).unwrap();
        let mut m = merge::Merged::from_readers(vec![ra, rb]);
        let mut acct = Accounting::default();
        let mut an = Anomalies::default();
        let mut order = Vec::new();
        while let Some(f) = m.next_frame(&mut acct, &mut an) {
            order.push((f.data[0], f.info.frame.file, f.info.frame.number));
        }
        // Ties (30 s) go to the lower file index first.
        assert_eq!(
            order,
            vec![(0xa1, 0, 1), (0xb1, 1, 1), (0xa2, 0, 2), (0xb2, 1, 2), (0xa3, 0, 3), (0xb3, 1, 3)]
        );
        assert_eq!(m.total_size(), 2 * (24 + 3 * 17));
        assert_eq!(m.position(), m.total_size());
        assert_eq!(acct.total() + 6, m.total_size());
    }

    #[test]
    fn merge_public_files_keeps_every_frame() {
        let dir = public_dir();
        let paths: Vec<String> = ["smb311-ms-fasod-example1.pcapng", "smb2-readwrite-midstream-zeek.pcap"]
            .iter()
            .map(|n| dir.join(n).to_str().unwrap().to_string())
            .collect();
        let mut m = merge::Merged::open(&paths).unwrap();
        let (mut acct, mut an) = (Accounting::default(), Anomalies::default());
        let (mut n, mut last, mut bytes) = (0u64, 0u64, 0u64);
        while let Some(f) = m.next_frame(&mut acct, &mut an) {
            // Both files are internally time-ordered, so the merge never goes back in time.
            assert!(f.info.ts_ns >= last, "merge went back in time");
            last = f.info.ts_ns;
            n += 1;
            bytes += f.data.len() as u64;
        }
        assert_eq!(n, 394 + 56);
        assert_eq!(acct.total() + bytes, m.total_size());
    }

    /// Frames name their file in 16 bits: a run of more files is refused before any is
    /// opened (none of these paths exists), not numbered twice.
    #[test]
    fn more_files_than_frames_can_name_are_refused() {
        let paths = vec!["/nonexistent/smbwire-x.pcap".to_string(); merge::MAX_FILES + 1];
        let err = merge::Merged::open(&paths).err().expect("refused");
        assert!(err.to_string().contains("more than 65536 in one run"), "{err}");
    }

    #[test]
    fn merge_skips_unusable_files_and_fails_only_when_none_is_usable() {
        let dir = std::env::temp_dir().join(format!("smbwire-merge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.pcap");
        std::fs::write(&good, pcap(false, false, 1, &[(10, 0, &[0xa1], 1), (20, 0, &[0xa2], 1)])).unwrap();
        let garbage = dir.join("garbage.bin");
        std::fs::write(&garbage, b"this is not a capture at all\n").unwrap();
        let missing = dir.join("missing.pcap");
        let s = |p: &std::path::PathBuf| p.to_str().unwrap().to_string();

        let paths = vec![s(&garbage), s(&good), s(&missing)];
        let mut m = merge::Merged::open(&paths).unwrap();
        assert_eq!(m.used, vec![1]);
        assert_eq!(m.skipped.len(), 2);
        assert_eq!(m.skipped[0], (0, CaptureError::NotACapture { path: s(&garbage) }));
        assert_eq!(m.skipped[1].0, 2);
        assert!(matches!(m.skipped[1].1, CaptureError::Io { .. }));
        let (mut acct, mut an) = (Accounting::default(), Anomalies::default());
        let mut got = Vec::new();
        while let Some(f) = m.next_frame(&mut acct, &mut an) {
            // The usable file is reader 0: frames name the reader, not the path's position.
            got.push((f.data[0], f.info.frame.file));
        }
        assert_eq!(got, vec![(0xa1, 0), (0xa2, 0)]);
        assert_eq!(m.total_size(), std::fs::metadata(&good).unwrap().len());

        // Nothing usable: the first file's error.
        let err = merge::Merged::open(&[s(&garbage), s(&missing)]).err().expect("no usable input");
        assert_eq!(err, CaptureError::NotACapture { path: s(&garbage) });
        std::fs::remove_dir_all(&dir).unwrap();
    }

    mod fuzz {
        use super::super::testutil::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

            #[test]
            fn garbage_after_pcap_header(be in any::<bool>(), ns in any::<bool>(), tail in proptest::collection::vec(any::<u8>(), 0..2048)) {
                let mut d = pcap(be, ns, 1, &[]);
                d.extend_from_slice(&tail);
                let n = d.len() as u64;
                let p = read_all(open_bytes(d).unwrap());
                prop_assert_eq!(p.covered(), n);
            }

            #[test]
            fn garbage_after_pcapng_header(be in any::<bool>(), idb in any::<bool>(), tail in proptest::collection::vec(any::<u8>(), 0..2048)) {
                let mut ng = Ng::new(be);
                ng.shb();
                if idb { ng.idb(1, 0, &[]); }
                let mut d = ng.out.clone();
                d.extend_from_slice(&tail);
                let n = d.len() as u64;
                let p = read_all(open_bytes(d).unwrap());
                prop_assert_eq!(p.covered(), n);
            }

            #[test]
            fn plausible_blocks_with_random_fields(be in any::<bool>(), words in proptest::collection::vec((0u32..8, 0u32..200, any::<u32>()), 0..40)) {
                // Blocks whose type and length are small numbers: exercises every parser path.
                let mut ng = Ng::new(be);
                ng.shb().idb(1, 0, &[]);
                for (ty, len, fill) in words {
                    let body: Vec<u8> = (0..len).map(|i| (fill >> (i % 4 * 8)) as u8).collect();
                    ng.block(ty, &body);
                }
                let d = ng.out.clone();
                let n = d.len() as u64;
                let p = read_all(open_bytes(d).unwrap());
                prop_assert_eq!(p.covered(), n);
            }

            #[test]
            fn arbitrary_bytes_never_panic(d in proptest::collection::vec(any::<u8>(), 0..512)) {
                let n = d.len() as u64;
                if let Ok(r) = open_bytes(d) {
                    let p = read_all(r);
                    prop_assert_eq!(p.covered(), n);
                }
            }
        }
    }

    fn sample_pcap() -> Vec<u8> {
        let frames: Vec<Vec<u8>> = (0..200u32).map(|i| vec![(i % 251) as u8; 60 + (i as usize * 37) % 1400]).collect();
        let recs: Vec<(u32, u32, &[u8], u32)> =
            frames.iter().enumerate().map(|(i, d)| (1_700_000_000 + i as u32, 0, d.as_slice(), d.len() as u32)).collect();
        pcap(false, false, 1, &recs)
    }

    /// Open bytes as a stream of unknown size (as stdin or a FIFO would be read).
    fn open_stream(data: Vec<u8>) -> Result<Box<dyn FrameReader>, CaptureError> {
        let mut src = source::Source::from_reader(Box::new(std::io::Cursor::new(data)), 0);
        src.forget_size();
        sniff_and_open(src, "<stream>", 0)
    }

    fn compressed(c: source::Compression, data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        match c {
            source::Compression::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            source::Compression::Zstd => zstd::stream::encode_all(data, 3).unwrap(),
            source::Compression::Xz => {
                let mut e = liblzma::write::XzEncoder::new(Vec::new(), 6);
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
        }
    }

    /// A regular file is mapped (no read buffer); opened by path it reads exactly as the same
    /// bytes from memory, plain and compressed (a compressed one leaves the mapping for the
    /// streaming decompressor, its compressed size counted once).
    #[test]
    fn files_opened_by_path_read_as_from_memory() {
        let dir = std::env::temp_dir().join(format!("smbwire-mapped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = sample_pcap();
        let whole = read_all(open_bytes(plain.clone()).unwrap());
        let path = dir.join("plain.pcap");
        std::fs::write(&path, &plain).unwrap();
        let r = open(path.to_str().unwrap(), 0).unwrap();
        assert!(r.source().size_known());
        assert_eq!(r.source().raw_bytes(), plain.len() as u64);
        let p = read_all(r);
        assert_eq!(p.frames, whole.frames);
        assert_eq!(p.covered(), plain.len() as u64);
        // A truncated tail (half a record) is accounted as from memory.
        let cut = &plain[..plain.len() - 7];
        std::fs::write(&path, cut).unwrap();
        let (a, b) = (read_all(open(path.to_str().unwrap(), 0).unwrap()), read_all(open_bytes(cut.to_vec()).unwrap()));
        assert_eq!(a.frames, b.frames);
        assert_eq!(a.acct.iter().collect::<Vec<_>>(), b.acct.iter().collect::<Vec<_>>());
        for c in [source::Compression::Gzip, source::Compression::Zstd, source::Compression::Xz] {
            let z = compressed(c, &plain);
            let zpath = dir.join("capture.z");
            std::fs::write(&zpath, &z).unwrap();
            let mut r = open(zpath.to_str().unwrap(), 0).unwrap();
            assert_eq!(r.source().compression, Some(c));
            let (mut acct, mut an) = (Accounting::default(), Anomalies::default());
            while r.advance(&mut acct, &mut an) {}
            assert_eq!(r.source().raw_bytes(), z.len() as u64, "{c:?}");
            let p = read_all(open(zpath.to_str().unwrap(), 0).unwrap());
            assert_eq!(p.frames, whole.frames, "{c:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn compressed_captures_read_as_the_capture_itself() {
        let plain = sample_pcap();
        let whole = read_all(open_bytes(plain.clone()).unwrap());
        for c in [source::Compression::Gzip, source::Compression::Zstd, source::Compression::Xz] {
            let z = compressed(c, &plain);
            for r in [open_bytes(z.clone()).unwrap(), open_stream(z.clone()).unwrap()] {
                let (kind, comp) = (r.source().kind, r.source().compression);
                assert_eq!((kind, comp), (source::InputKind::File, Some(c)));
                assert!(!r.source().size_known());
                let p = read_all(r);
                assert_eq!(p.frames, whole.frames, "{c:?}");
                // The accounting covers the decompressed capture, byte for byte.
                assert_eq!(p.covered(), plain.len() as u64, "{c:?}");
                assert_eq!(p.an.iter().count(), 0, "{c:?}");
            }
            // The compressed size is what was read from the file.
            let mut r = open_bytes(z.clone()).unwrap();
            let (mut acct, mut an) = (Accounting::default(), Anomalies::default());
            while r.advance(&mut acct, &mut an) {}
            assert_eq!(r.source().raw_bytes(), z.len() as u64, "{c:?}");
            assert_eq!(r.file_size(), plain.len() as u64, "{c:?}");
        }
        // Several gzip members concatenated (`cat a.gz b.gz`) are one stream, as gzip -d reads them.
        let half = plain.len() / 2;
        let mut two = compressed(source::Compression::Gzip, &plain[..half]);
        two.extend(compressed(source::Compression::Gzip, &plain[half..]));
        assert_eq!(read_all(open_bytes(two).unwrap()).frames, whole.frames);
    }

    #[test]
    fn damaged_compressed_captures_are_counted_not_fatal() {
        let plain = sample_pcap();
        for c in [source::Compression::Gzip, source::Compression::Zstd, source::Compression::Xz] {
            let z = compressed(c, &plain);
            // Cut short: the frames decompressed so far, then a read error; every byte that
            // came out of the decompressor is accounted.
            // (A decompressor may hold back a whole block: then not even the header comes out.)
            let cut = z[..z.len() * 2 / 3].to_vec();
            match open_bytes(cut) {
                Ok(r) => {
                    let p = read_all(r);
                    assert!(p.frames.len() < 200, "{c:?}: {} frames", p.frames.len());
                    assert_eq!(p.an.get("capture.read_error"), 1, "{c:?}");
                }
                Err(e) => {
                    assert!(c != source::Compression::Gzip, "gzip streams: {e}");
                    assert!(matches!(e, CaptureError::Io { .. }), "{c:?}: {e}");
                    assert!(e.to_string().contains(c.name()), "{e}");
                }
            }
            // Flipped bytes in the middle: no panic, an anomaly, frames before it intact.
            let mut bad = z.clone();
            let mid = bad.len() / 2;
            for b in &mut bad[mid..mid + 64] {
                *b ^= 0x5a;
            }
            if let Ok(r) = open_bytes(bad) {
                let p = read_all(r);
                assert!(p.frames.len() <= 200);
                assert!(p.an.iter().count() > 0, "{c:?}: damage went unnoticed");
            }
        }
        // A stream that is only a compression header is not a capture.
        assert!(open_bytes(vec![0x1f, 0x8b]).is_err());
    }

    /// Where the LZMA2 dictionary size code of an xz stream's first block is (.xz file format
    /// §3.1: the Block Header after the 12-byte Stream Header: size, flags, optional sizes,
    /// Filter Flags (ID 0x21, one property byte), padding, CRC32).
    fn xz_dictionary_at(z: &[u8]) -> usize {
        let flags = z[13];
        assert_eq!(flags & 0x03, 0, "one filter");
        let mut at = 14;
        for bit in [0x40, 0x80] {
            if flags & bit != 0 {
                while z[at] & 0x80 != 0 {
                    at += 1;
                }
                at += 1;
            }
        }
        assert_eq!(z[at..at + 2], [0x21, 0x01], "LZMA2 with one property byte");
        at + 2
    }

    /// The xz stream with dictionary size code `code`, its Block Header's CRC32 made right.
    fn xz_with_dictionary_code(mut z: Vec<u8>, code: u8) -> Vec<u8> {
        let size = (usize::from(z[12]) + 1) * 4;
        let at = xz_dictionary_at(&z);
        z[at] = code;
        let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&z[12..12 + size - 4]);
        z[12 + size - 4..12 + size].copy_from_slice(&crc.to_le_bytes());
        z
    }

    /// A section with more Interface Description Blocks than `MAX_INTERFACES`: the extra ones
    /// are not kept (`pcapng.too_many_interfaces`, their bytes `malformed`), and a packet
    /// naming one of them is an unknown interface.
    #[test]
    fn pcapng_interfaces_are_capped() {
        let mut ng = Ng::new(false);
        ng.shb();
        for _ in 0..pcapng::MAX_INTERFACES + 5 {
            ng.idb(1, 0, &[]);
        }
        ng.epb(0, 1, &[1; 16], 16).epb(pcapng::MAX_INTERFACES as u32, 2, &[2; 16], 16);
        let p = read_all(open_bytes(ng.out.clone()).unwrap());
        assert_eq!(p.an.get("pcapng.too_many_interfaces"), 5);
        assert_eq!(p.an.get("pcapng.unknown_interface"), 1);
        assert_eq!(p.frames.len(), 1);
        assert_eq!(p.covered(), ng.out.len() as u64);
    }

    /// An xz stream declaring a 4 GiB dictionary (code 40) is not decoded: past
    /// `XZ_MEMLIMIT` the decoder refuses it instead of allocating what it declares. First in
    /// the file: the input is refused in one line; after a sound stream: the frames of the
    /// sound one, then `capture.decompress_memory_limit`. The same bytes with a sound code
    /// (the encoder's) read whole, so the refusal is the declared size's.
    #[test]
    fn xz_streams_declaring_a_huge_dictionary_are_refused() {
        // Larger than the read buffer, so the sound stream's frames come out before the
        // decoder meets the next stream's header (an xz read that meets an error returns the
        // error, not the bytes decoded in the same call).
        let frames: Vec<Vec<u8>> = (0..3000u32).map(|i| (0..1400u32).map(|k| (i * 7 + k) as u8).collect()).collect();
        let recs: Vec<(u32, u32, &[u8], u32)> = frames.iter().enumerate().map(|(i, d)| (1_700_000_000 + i as u32, 0, d.as_slice(), 1400)).collect();
        let plain = pcap(false, false, 1, &recs);
        let half = plain.len() / 2;
        let tail = compressed(source::Compression::Xz, &plain[half..]);
        let sound_code = tail[xz_dictionary_at(&tail)];
        assert_eq!(xz_with_dictionary_code(tail.clone(), sound_code), tail);
        let e = open_bytes(xz_with_dictionary_code(compressed(source::Compression::Xz, &plain), 40)).err().expect("refused");
        assert!(matches!(e, CaptureError::Io { .. }) && e.to_string().contains("needs more than 256 MiB"), "{e}");
        let mut two = compressed(source::Compression::Xz, &plain[..half]);
        two.extend(xz_with_dictionary_code(tail.clone(), 40));
        let p = read_all(open_bytes(two).unwrap());
        assert_eq!(p.an.get("capture.decompress_memory_limit"), 1);
        assert_eq!(p.an.get("capture.read_error"), 0);
        let whole = read_all(open_bytes(plain.clone()).unwrap());
        assert!(p.frames.len() > 1000 && p.frames.len() < whole.frames.len(), "{} frames", p.frames.len());
        assert_eq!(p.frames[..], whole.frames[..p.frames.len()]);
        let mut sound = compressed(source::Compression::Xz, &plain[..half]);
        sound.extend(xz_with_dictionary_code(tail, sound_code));
        assert_eq!(read_all(open_bytes(sound).unwrap()).frames, whole.frames);
    }

    #[test]
    fn streams_of_unknown_size() {
        let plain = sample_pcap();
        let whole = read_all(open_bytes(plain.clone()).unwrap());
        let r = open_stream(plain.clone()).unwrap();
        assert!(!r.source().size_known());
        let p = read_all(r);
        assert_eq!(p.frames, whole.frames);
        assert_eq!(p.covered(), plain.len() as u64);
        assert!(matches!(open_stream(vec![]), Err(CaptureError::Empty { .. })));
        let mut ng = Ng::new(false);
        ng.shb().idb(1, 0, &[]).epb(0, 5, &[7; 70], 70);
        let p = read_all(open_stream(ng.out.clone()).unwrap());
        assert_eq!((p.frames.len(), p.covered()), (1, ng.out.len() as u64));
    }

    #[test]
    fn modified_pcap_records_carry_eight_more_header_bytes() {
        // Kuznetzov's modified format: magic a1b2cd34, then per record 16 + 8 header bytes.
        let mut v = pcap(false, false, 1, &[]);
        v[..4].copy_from_slice(&pcap::MAGIC_MODIFIED.to_le_bytes());
        for (i, len) in [(1u32, 60usize), (2, 1514)] {
            for x in [1_700_000_000 + i, 250_000, len as u32, len as u32, 3] {
                v.extend_from_slice(&x.to_le_bytes());
            }
            v.extend_from_slice(&[0x00, 0x08, 0x00, 0x00]); // protocol, packet type, padding
            v.extend(std::iter::repeat_n(i as u8, len));
        }
        let p = read_all(open_bytes(v.clone()).unwrap());
        assert_eq!(p.frames.len(), 2);
        assert_eq!(p.frames[1].1, vec![2u8; 1514]);
        assert_eq!(p.frames[0].0.ts_ns, 1_700_000_001_250_000_000);
        assert_eq!(p.acct.get(cat::CAPTURE_FORMAT), 24 + 2 * 24);
        assert_eq!(p.covered(), v.len() as u64);
        assert_eq!(p.an.iter().count(), 0);
        // Big-endian too.
        let mut be = pcap(true, false, 1, &[]);
        be[..4].copy_from_slice(&pcap::MAGIC_MODIFIED.to_be_bytes());
        for x in [1u32, 0, 4, 4, 0, 0] {
            be.extend_from_slice(&x.to_be_bytes());
        }
        be.extend_from_slice(&[9; 4]);
        let p = read_all(open_bytes(be).unwrap());
        assert_eq!(p.frames[0].1, vec![9u8; 4]);
    }

    #[test]
    fn snaplen_anomalies() {
        let set_snaplen = |v: &mut Vec<u8>, s: u32| v[16..20].copy_from_slice(&s.to_le_bytes());
        let rec: &[u8] = &[5; 100];
        for (snaplen, name) in [(0u32, "pcap.snaplen_zero"), (1 << 31, "pcap.snaplen_implausible")] {
            let mut v = pcap(false, false, 1, &[(1, 0, rec, 100)]);
            set_snaplen(&mut v, snaplen);
            let p = read_all(open_bytes(v).unwrap());
            assert_eq!(p.frames.len(), 1, "snaplen {snaplen}: the record is still read");
            assert_eq!(p.an.get(name), 1, "snaplen {snaplen}");
        }
        // A record longer than the file's snaplen: kept, and said.
        let mut v = pcap(false, false, 1, &[(1, 0, rec, 100), (2, 0, &rec[..50], 100)]);
        set_snaplen(&mut v, 64);
        let p = read_all(open_bytes(v).unwrap());
        assert_eq!((p.frames.len(), p.an.get("pcap.record_exceeds_snaplen")), (2, 1));
        // pcapng: an EPB longer than its interface's snaplen; snaplen 0 means none (§4.2).
        let mut ng = Ng::new(false);
        ng.shb().idb(1, 64, &[]).idb(1, 0, &[]).epb(0, 1, rec, 100).epb(1, 2, rec, 100).epb(0, 3, &rec[..64], 100);
        let p = read_all(open_bytes(ng.out.clone()).unwrap());
        assert_eq!((p.frames.len(), p.an.get("pcapng.record_exceeds_snaplen")), (3, 1));
        assert_eq!(p.covered(), ng.out.len() as u64);
    }
}
