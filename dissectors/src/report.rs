//! The result of an analysis: one serialisable model that feeds the terminal report, the
//! JSON file (`"schema": "smbwire/1"`, documented in docs/json-schema.md) and the live TUI.

use crate::dedupe::DedupeReport;
use crate::rdma::RdmaStats;
use crate::smb2::state::Smb2Stats;
use crate::tcp::ReassemblyStats;
use serde::Serialize;
use std::collections::BTreeMap;

pub const SCHEMA: &str = "smbwire/1";

#[derive(Debug, Clone, Serialize)]
pub struct InputFile {
    pub path: String,
    /// Bytes of the capture itself: for a compressed capture, the decompressed bytes (what
    /// the accounting counts); for a stream, the bytes read to its end.
    pub size_bytes: u64,
    pub frames: u64,
    /// "file", "stdin", "fifo" or "character_device".
    pub source: &'static str,
    /// "gzip", "zstd" or "xz" when the capture was compressed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<&'static str>,
    /// The compressed capture's own size (bytes read from the file or stream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compressed_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CaptureSpan {
    pub first_ts: Option<f64>,
    pub last_ts: Option<f64>,
    pub duration_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct AccountingReport {
    /// Bytes per category; every byte of every input file is in exactly one category.
    pub categories: BTreeMap<String, u64>,
    pub total_bytes: u64,
    /// Sum of the input files' sizes.
    pub input_bytes: u64,
    /// `total_bytes == input_bytes` (a false here is a bug: please report it).
    pub reconciled: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct TcpReport {
    pub segments: u64,
    pub retransmitted_bytes: u64,
    pub retransmitted_segments: u64,
    pub out_of_order_segments: u64,
    pub gap_bytes: u64,
    pub gaps: u64,
    pub mirror_duplicate_frames: u64,
    pub peak_buffered_bytes: u64,
    pub flows: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct AnalysisStats {
    pub elapsed_seconds: f64,
    pub frames: u64,
    pub bytes_per_second: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub schema: &'static str,
    pub smbwire_version: &'static str,
    pub inputs: Vec<InputFile>,
    pub window_seconds: f64,
    pub capture: CaptureSpan,
    #[serde(flatten)]
    pub dedupe: DedupeReport,
    pub accounting: AccountingReport,
    pub anomalies: BTreeMap<String, u64>,
    pub tcp: TcpReport,
    pub smb2: Smb2Stats,
    /// SMB Direct, iWARP and InfiniBand/RoCE counters.
    pub rdma: RdmaStats,
    pub warnings: Vec<String>,
    pub analysis: AnalysisStats,
}

impl TcpReport {
    pub fn from_stats(s: &ReassemblyStats, mirror_duplicate_frames: u64, flows: u64) -> Self {
        TcpReport {
            segments: s.segments,
            retransmitted_bytes: s.retransmitted_bytes,
            retransmitted_segments: s.retransmitted_segments,
            out_of_order_segments: s.out_of_order_segments,
            gap_bytes: s.gap_bytes,
            gaps: s.gaps,
            mirror_duplicate_frames,
            peak_buffered_bytes: s.peak_buffered_bytes,
            flows,
        }
    }
}

/// The warnings that follow from a result's figures (its `tcp`, `accounting` and `anomalies`
/// sections), in the order the report prints them. One function for `analyze` and
/// `attribute`, so a result rebuilt from ledgers warns exactly as the analysis did.
pub fn derived_warnings(r: &serde_json::Value) -> Vec<String> {
    let n = |path: &[&str]| -> u64 {
        let mut v = r;
        for k in path {
            v = &v[*k];
        }
        v.as_u64().unwrap_or(0)
    };
    let mut w = Vec::new();
    let (gap_bytes, gaps) = (n(&["tcp", "gap_bytes"]), n(&["tcp", "gaps"]));
    if gap_bytes > 0 {
        w.push(format!(
            "{gap_bytes} bytes missing from TCP streams in {gaps} gaps (lost or snaplen-truncated segments): payloads with missing bytes are not hashed"
        ));
    }
    let mirror = n(&["tcp", "mirror_duplicate_frames"]);
    if mirror > 0 {
        w.push(format!("{mirror} frames seen twice on the mirror port were removed (never counted as a second send)"));
    }
    let (rb, rs) = (n(&["tcp", "retransmitted_bytes"]), n(&["tcp", "retransmitted_segments"]));
    if rb > 0 {
        w.push(format!("{rb} retransmitted TCP bytes in {rs} segments were removed"));
    }
    let enc = n(&["accounting", "categories", crate::accounting::cat::SMB_ENCRYPTED]);
    if enc > 0 {
        w.push(format!("{enc} bytes of encrypted SMB3 messages (TRANSFORM header) were not analysed"));
    }
    let comp = n(&["accounting", "categories", crate::accounting::cat::SMB_COMPRESSED]);
    if comp > 0 {
        w.push(format!("{comp} bytes of compressed SMB3 messages were not analysed (decompression comes later)"));
    }
    let (total, input) = (n(&["accounting", "total_bytes"]), n(&["accounting", "input_bytes"]));
    if total != input {
        w.push(format!(
            "byte accounting does not reconcile: {total} accounted vs {input} in the input (a bug: please report it)"
        ));
    }
    let n_anom: u64 = r["anomalies"].as_object().map(|m| m.values().filter_map(|v| v.as_u64()).sum()).unwrap_or(0);
    if n_anom > 0 {
        w.push(format!("{n_anom} anomalies in the input (see \"anomalies\")"));
    }
    w
}
