//! The expected results of a generated capture, tallied while it is written.
//!
//! Per edge (data sender node → receiver node) and class:
//! - `payload_bytes`: data bytes of every WRITE request / READ response, each SMB2 message
//!   counted once (retransmitted and mirror-duplicated frames add nothing);
//! - `trivial_bytes`: of those, bytes in 4 KiB blocks (aligned to the payload start) whose
//!   bytes are all equal;
//! - `unique_bytes`: distinct non-trivial content;
//! - `dup_ratio` = (payload − trivial) / unique, `null` when nothing is non-trivial;
//! - `per_copy_duplicate_bytes`: non-trivial bytes that repeat an I/O already sent on the
//!   edge (the copies of one I/O); `repeated_content_bytes`: non-trivial bytes of a
//!   different I/O whose content was already sent (only very short tail blocks can do so).

use super::data::IoData;
use serde::Serialize;
use std::collections::HashSet;

/// Why the bytes crossed the edge (the analyzer's attribution classes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// The owner copies a write to its partner's disks (mirror/nested/three-way copies).
    Replication,
    /// A non-owner forwards its VM's write to the owner (CSV redirected I/O).
    Redirection,
    /// The owner returns data read by a VM on a non-owner.
    RedirectedRead,
}

#[derive(Debug, Clone, Serialize)]
pub struct EdgeTruth {
    pub src: String,
    pub dst: String,
    pub src_address: String,
    pub dst_address: String,
    pub class: Class,
    pub payload_bytes: u64,
    pub trivial_bytes: u64,
    pub unique_bytes: u64,
    pub sends: u64,
    pub dup_ratio: Option<f64>,
    pub per_copy_duplicate_bytes: u64,
    pub repeated_content_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Totals {
    /// Sum of `payload_bytes` over all edges.
    pub payload_bytes: u64,
    /// W: what the VM wrote or read.
    pub logical_bytes: u64,
    /// payload_bytes / logical_bytes (0 when nothing was written).
    pub amplification: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Smb2Counts {
    /// SMB2 messages of any command, requests and responses.
    pub messages: u64,
    pub write_requests: u64,
    pub write_data_bytes: u64,
    pub read_responses: u64,
    pub read_data_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CaptureTruth {
    /// Records in the pcap file, mirror copies included.
    pub frames: u64,
    pub file_bytes: u64,
    pub mirror_duplicate_frames: u64,
    pub first_ts_ns: u64,
    pub last_ts_ns: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeTruth {
    pub name: String,
    pub addresses: Vec<String>,
    pub member: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopologyTruth {
    pub nodes: Vec<NodeTruth>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Truth {
    pub schema: &'static str,
    pub scenario: String,
    pub transport: String,
    pub dialect: String,
    pub seed: u64,
    pub bytes: u64,
    pub io_size: u64,
    pub ios: u64,
    pub channels: u64,
    pub edges: Vec<EdgeTruth>,
    pub totals: Totals,
    pub smb2: Smb2Counts,
    pub tcp: super::tcp::TcpStats,
    /// SMB Direct and RDMA figures (rocev1, rocev2 and iwarp only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rdma: Option<super::rdma::RdmaTruth>,
    pub capture: CaptureTruth,
    pub topology: TopologyTruth,
}

pub const SCHEMA: &str = "smbwire-synth/1";

/// Running counts for one (src node, dst node, class).
struct EdgeTally {
    src: usize,
    dst: usize,
    class: Class,
    payload: u64,
    trivial: u64,
    unique: u64,
    repeated: u64,
    sends: u64,
    /// I/Os whose full blocks were already counted as unique (the scenario sends the
    /// copies of one I/O before the next I/O, so remembering the last one suffices).
    last_io: Option<u64>,
    short_tails: HashSet<Vec<u8>>,
}

#[derive(Default)]
pub struct Tally {
    edges: Vec<EdgeTally>,
    pub smb2: Smb2Counts,
}

impl Tally {
    /// One payload send of I/O `io` from node `src` to node `dst`.
    pub fn send(&mut self, src: usize, dst: usize, class: Class, io: &IoData) {
        let i = match self
            .edges
            .iter()
            .position(|e| (e.src, e.dst, e.class) == (src, dst, class))
        {
            Some(i) => i,
            None => {
                self.edges.push(EdgeTally {
                    src,
                    dst,
                    class,
                    payload: 0,
                    trivial: 0,
                    unique: 0,
                    repeated: 0,
                    sends: 0,
                    last_io: None,
                    short_tails: HashSet::new(),
                });
                self.edges.len() - 1
            }
        };
        let e = &mut self.edges[i];
        e.payload += io.bytes.len() as u64;
        e.trivial += io.trivial_bytes;
        e.sends += 1;
        if e.last_io != Some(io.index) {
            e.last_io = Some(io.index);
            let tail = io.short_tail.as_ref().map_or(0, |t| t.len() as u64);
            e.unique += io.nontrivial_bytes() - tail;
            if let Some(t) = &io.short_tail {
                if e.short_tails.insert(t.clone()) {
                    e.unique += tail;
                } else {
                    e.repeated += tail;
                }
            }
        }
    }

    pub fn edges(&self, nodes: &[super::Host]) -> Vec<EdgeTruth> {
        self.edges
            .iter()
            .map(|e| {
                let nontrivial = e.payload - e.trivial;
                EdgeTruth {
                    src: nodes[e.src].name.to_string(),
                    dst: nodes[e.dst].name.to_string(),
                    src_address: nodes[e.src].ip.to_string(),
                    dst_address: nodes[e.dst].ip.to_string(),
                    class: e.class,
                    payload_bytes: e.payload,
                    trivial_bytes: e.trivial,
                    unique_bytes: e.unique,
                    sends: e.sends,
                    dup_ratio: (e.unique > 0).then(|| nontrivial as f64 / e.unique as f64),
                    per_copy_duplicate_bytes: nontrivial - e.unique - e.repeated,
                    repeated_content_bytes: e.repeated,
                }
            })
            .collect()
    }
}
