//! Classic libpcap format (magic a1b2c3d4 µs / a1b23c4d ns, either byte order), as
//! described in draft-ietf-opsawg-pcap: a 24-byte file header, then records of a 16-byte
//! header (seconds, sub-seconds, captured length, original length) and the frame bytes.
//! Also the "modified" pcap of Alexey Kuznetzov's patched tcpdump that libpcap reads
//! (magic a1b2cd34): µs records with 8 more header bytes (interface index, protocol,
//! packet type, padding), accounted as container bytes.

use super::source::Source;
use super::{CaptureError, FrameInfo, FrameReader, RawFrame};
use crate::accounting::{cat, Accounting};
use crate::anomaly::Anomalies;
use crate::frame::FrameRef;
use super::Anomaly;

pub const FILE_HEADER_LEN: usize = 24;
pub const RECORD_HEADER_LEN: usize = 16;
/// Records longer than this (and than the snaplen) are damage: tcpdump's largest snaplen.
pub const MAX_CAPLEN: u32 = 262_144;
/// Even a file declaring a larger snaplen may not make us buffer more than this per record.
pub const MAX_SNAPLEN_HONOURED: u32 = 4 << 20;

pub const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
pub const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
pub const MAGIC_MODIFIED: u32 = 0xa1b2_cd34;
/// Record header of the modified format: the standard 16 bytes, then ifindex (4),
/// protocol (2), packet type (1), padding (1).
pub const MODIFIED_RECORD_HEADER_LEN: usize = 24;

/// The variant a magic number names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    pub big_endian: bool,
    pub nanos: bool,
    /// Kuznetzov's modified pcap (24-byte record headers).
    pub modified: bool,
}

/// Does this 4-byte prefix start a pcap file?
pub fn sniff(magic: [u8; 4]) -> Option<Variant> {
    let v = |big_endian, nanos, modified| Some(Variant { big_endian, nanos, modified });
    match (u32::from_be_bytes(magic), u32::from_le_bytes(magic)) {
        (MAGIC_MICROS, _) => v(true, false, false),
        (MAGIC_NANOS, _) => v(true, true, false),
        (MAGIC_MODIFIED, _) => v(true, false, true),
        (_, MAGIC_MICROS) => v(false, false, false),
        (_, MAGIC_NANOS) => v(false, true, false),
        (_, MAGIC_MODIFIED) => v(false, false, true),
        _ => None,
    }
}

pub struct PcapReader {
    src: Source,
    big_endian: bool,
    nanos: bool,
    record_header_len: usize,
    linktype: u32,
    snaplen: u32,
    file_index: u16,
    frames: u64,
    header_accounted: bool,
    /// The current frame: its metadata and captured length (bytes at `src.peek()[..len]`).
    cur: Option<(FrameInfo, usize)>,
    done: bool,
}

impl PcapReader {
    /// Read and check the file header (the source is positioned at the start of the file).
    pub fn new(mut src: Source, path: &str, file_index: u16) -> Result<Self, CaptureError> {
        if src.fill(FILE_HEADER_LEN) < FILE_HEADER_LEN {
            return Err(CaptureError::BadHeader { path: path.to_string(), reason: "pcap file header shorter than 24 bytes".into() });
        }
        let h = src.peek();
        let Variant { big_endian, nanos, modified } =
            sniff([h[0], h[1], h[2], h[3]]).ok_or_else(|| CaptureError::NotACapture { path: path.to_string() })?;
        let rd32 = |o: usize| read_u32(&h[o..o + 4], big_endian);
        let major = if big_endian { u16::from_be_bytes([h[4], h[5]]) } else { u16::from_le_bytes([h[4], h[5]]) };
        if major != 2 {
            return Err(CaptureError::BadHeader { path: path.to_string(), reason: format!("unsupported pcap version {major}") });
        }
        let snaplen = rd32(16);
        // The low 16 bits are the link type; upper bits carry FCS information.
        let linktype = rd32(20) & 0xffff;
        src.consume(FILE_HEADER_LEN);
        Ok(PcapReader {
            src,
            big_endian,
            nanos,
            record_header_len: if modified { MODIFIED_RECORD_HEADER_LEN } else { RECORD_HEADER_LEN },
            linktype,
            snaplen,
            file_index,
            frames: 0,
            header_accounted: false,
            cur: None,
            done: false,
        })
    }

    pub fn linktype(&self) -> u32 {
        self.linktype
    }

    fn max_caplen(&self) -> u32 {
        MAX_CAPLEN.max(self.snaplen.min(MAX_SNAPLEN_HONOURED))
    }

    /// Give up on the rest of the file: a damaged record header cannot be resynchronised.
    fn abandon(&mut self, acct: &mut Accounting, an: &mut Anomalies, anomaly: Anomaly, category: &'static str) {
        an.raise(self.src.why_ended(anomaly));
        let rest = self.src.skip_to_end();
        acct.add(category, rest);
        self.done = true;
    }
}

pub(crate) fn read_u32(b: &[u8], big_endian: bool) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    if big_endian {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

impl FrameReader for PcapReader {
    fn advance(&mut self, acct: &mut Accounting, an: &mut Anomalies) -> bool {
        if !self.header_accounted {
            self.header_accounted = true;
            acct.add(cat::CAPTURE_FORMAT, FILE_HEADER_LEN as u64);
            // A snaplen of 0 or one beyond any capture tool's is damage, or a writer's bug:
            // say so once (records are still read, each checked against `max_caplen`).
            if self.snaplen == 0 {
                an.raise(Anomaly::PcapSnaplenZero);
            } else if self.snaplen > MAX_SNAPLEN_HONOURED {
                an.raise(Anomaly::PcapSnaplenImplausible);
            }
        }
        if let Some((_, len)) = self.cur.take() {
            self.src.consume(len);
        }
        if self.done {
            return false;
        }
        let hlen = self.record_header_len;
        let avail = self.src.fill(hlen);
        if avail == 0 && !self.src.read_error && !self.src.interrupted {
            self.done = true;
            return false;
        }
        if avail < hlen {
            self.abandon(acct, an, Anomaly::TruncatedRecord, cat::TRUNCATED_TAIL);
            return false;
        }
        let h = self.src.peek();
        let be = self.big_endian;
        let (sec, frac, caplen, orig_len) = (read_u32(&h[0..4], be), read_u32(&h[4..8], be), read_u32(&h[8..12], be), read_u32(&h[12..16], be));
        if caplen > self.max_caplen() {
            self.abandon(acct, an, Anomaly::PcapBadRecordLength, cat::MALFORMED);
            return false;
        }
        if self.snaplen != 0 && caplen > self.snaplen {
            // libpcap refuses such a record; the bytes are plausible, so keep them, and say so.
            an.raise(Anomaly::PcapRecordExceedsSnaplen);
        }
        let need = hlen + caplen as usize;
        if self.src.fill(need) < need {
            self.abandon(acct, an, Anomaly::TruncatedRecord, cat::TRUNCATED_TAIL);
            return false;
        }
        // The next record's header (and the start of its frame) is read right after this
        // frame is handled: ask for its cache lines now, so a mapped capture's reader does not
        // wait on memory for every record.
        if let Some(next) = self.src.peek().get(need..need + 128) {
            super::prefetch(next);
        }
        // And a few records further on (the headers of wire-size frames, 1.5 KB apart, are
        // the only bytes of them this thread touches with `--threads`): one record ahead
        // leaves no time for the load.
        if let Some(ahead) = self.src.peek().get(need + super::PREFETCH_AHEAD..need + super::PREFETCH_AHEAD + 1) {
            super::prefetch(ahead);
        }
        if (!self.nanos && frac >= 1_000_000) || (self.nanos && frac >= 1_000_000_000) {
            an.raise(Anomaly::PcapBadTimestampFraction);
        }
        let ts_ns = u64::from(sec) * 1_000_000_000 + u64::from(frac) * if self.nanos { 1 } else { 1_000 };
        acct.add(cat::CAPTURE_FORMAT, hlen as u64);
        self.src.consume(hlen);
        self.frames += 1;
        let info = FrameInfo {
            frame: FrameRef { file: self.file_index, number: self.frames },
            ts_ns,
            linktype: self.linktype,
            orig_len,
        };
        self.cur = Some((info, caplen as usize));
        true
    }

    fn current(&self) -> Option<RawFrame<'_>> {
        let (info, len) = self.cur?;
        Some(RawFrame { info, data: &self.src.peek()[..len] })
    }

    fn source(&self) -> &Source {
        &self.src
    }

    fn source_mut(&mut self) -> &mut Source {
        &mut self.src
    }

    fn file_size(&self) -> u64 {
        self.src.size()
    }

    fn position(&self) -> u64 {
        self.src.position() + self.cur.map_or(0, |(_, l)| l as u64)
    }
}
