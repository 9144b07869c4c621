//! Capture readers: pcap (µs and ns), pcapng (several interfaces), merged by timestamp.
//!
//! Files are streamed through a bounded buffer, never loaded whole, so memory does not grow
//! with the capture. Every byte of a file is accounted: container bytes (file/record/block
//! headers, options, padding) go to `accounting::cat::CAPTURE_FORMAT`, a partial record at
//! the end to `TRUNCATED_TAIL`; frame bytes are accounted by later stages.

pub mod merge;
pub mod pcap;
pub mod pcapng;

use crate::accounting::Accounting;
use crate::anomaly::Anomalies;
use crate::frame::FrameRef;

/// Link-layer types (tcpdump.org LINKTYPE_* values) that `wire::decode` understands.
pub mod linktype {
    pub const NULL: u32 = 0; // BSD loopback: 4-byte host-order address family
    pub const ETHERNET: u32 = 1;
    pub const RAW: u32 = 101; // raw IPv4/IPv6
    pub const LINUX_SLL: u32 = 113;
    pub const IPV4: u32 = 228;
    pub const IPV6: u32 = 229;
    pub const LINUX_SLL2: u32 = 276;
    pub const ERF: u32 = 197;
}

/// Metadata of one captured frame.
#[derive(Clone, Copy, Debug, Default)]
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
    /// The file is empty (zero length).
    Empty { path: String },
    /// The file header itself is damaged (nothing in the file can be read).
    BadHeader { path: String, reason: String },
}

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaptureError::Io { path, reason } => write!(f, "{path}: cannot read: {reason}"),
            CaptureError::NotACapture { path } => {
                write!(f, "{path}: not a pcap or pcapng capture file")
            }
            CaptureError::Empty { path } => write!(f, "{path}: empty file (zero length)"),
            CaptureError::BadHeader { path, reason } => {
                write!(f, "{path}: damaged capture header: {reason}")
            }
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
}

/// Open one file, sniffing pcap vs pcapng from the magic number.
pub fn open(path: &str, file_index: u16) -> Result<Box<dyn FrameReader>, CaptureError> {
    let _ = (path, file_index);
    Err(CaptureError::Io { path: path.to_string(), reason: "not implemented".into() })
}
