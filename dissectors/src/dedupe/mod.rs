//! The dedupe index and attribution.
//!
//! Every payload send (an SMB2 WRITE request's data, a READ response's data, later an RDMA
//! transfer linked to one of those) arrives here as a `SendRecord` with its block digests,
//! in capture time order. Within a sliding time window (default 60 s) the index finds the
//! blocks that already crossed the same edge (duplicates), splits duplicates into per-copy
//! sends and repeated content, detects redirection (the receiver of a WRITE sends the same
//! block on), and classifies every byte (`class`). Memory is bounded by the window: sends
//! and blocks older than the window are folded into per-edge totals and forgotten.
//!
//! - `topology`: nodes (several addresses each), membership, share/file rules.
//! - `index`: the sliding-window block index and send table.
//! - `attribution`: the rules that decide duplicate kind and class.
//! - `evidence`: duplicated payloads with the frames of each send (JSON lines, top list).
//! - `figures`: the per-(edge, class) figures and the serialisable report.
//!
//! The rules and the JSON fields are documented in docs/attribution.md.

pub mod attribution;
pub mod evidence;
pub mod figures;
pub mod index;
pub mod topology;

pub use attribution::Class;
pub use index::{Dedupe, DedupeReport};
pub use topology::Topology;

use crate::frame::FrameRef;
use crate::payload::PayloadDigest;
use std::net::IpAddr;
use std::sync::Arc;

/// Which SMB2 operation moved the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SendKind {
    /// WRITE request data (client → server).
    Write,
    /// READ response data (server → client).
    Read,
}

/// How the payload crossed the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Inline in an SMB2 message over TCP (NetBIOS framing).
    Tcp,
    /// Moved by RDMA Read/Write (SMB Direct), linked to an SMB2 WRITE/READ.
    Rdma,
    /// Inline in an SMB2 message carried in SMB Direct Send messages.
    SmbDirect,
}

/// One distinct send of a payload (one SMB2 message, or one RDMA transfer).
#[derive(Clone, Debug, PartialEq)]
pub struct SendRecord {
    /// Connection id (unique per TCP connection / RDMA QP pair in this run).
    pub conn: u64,
    /// SMB2 MessageId of the WRITE request / READ request this payload belongs to.
    pub message_id: u64,
    pub kind: SendKind,
    pub transport: Transport,
    /// Network addresses of the sender and receiver of the payload bytes.
    pub src: IpAddr,
    pub dst: IpAddr,
    pub session_id: u64,
    pub tree_id: u32,
    pub file_id: [u8; 16],
    /// Share path from TREE_CONNECT (e.g. `\\server\share`), when seen.
    pub share: Option<Arc<str>>,
    /// File name from CREATE, when seen.
    pub file_name: Option<Arc<str>>,
    /// File offset of the WRITE / READ.
    pub offset: u64,
    /// Frames that carried the payload (first and last).
    pub first_frame: FrameRef,
    pub last_frame: FrameRef,
    /// The frame of the SMB2 header when it is not among the payload frames: over SMB Direct,
    /// the Send that carried the WRITE request or the READ response (the payload moved in RDMA
    /// Read Responses / RDMA Writes). `None` when the header shares the first payload frame.
    pub header_frame: Option<FrameRef>,
    /// Time of the first payload byte (ns since epoch).
    pub ts_ns: u64,
    pub digest: PayloadDigest,
}

/// Configuration of the index.
#[derive(Clone, Debug)]
pub struct DedupeConfig {
    pub window_ns: u64,
    /// How many top duplicated payloads the report keeps.
    pub top_n: usize,
    /// Bound on blocks held in the window (all blocks of all live sends). Past it the oldest
    /// sends leave early (anomaly `dedupe.live_block_cap`): the window shrinks, memory does not grow.
    pub max_live_blocks: usize,
}

impl Default for DedupeConfig {
    fn default() -> Self {
        DedupeConfig {
            window_ns: 60_000_000_000,
            top_n: 10,
            max_live_blocks: index::DEFAULT_MAX_LIVE_BLOCKS,
        }
    }
}

#[cfg(test)]
mod tests;
