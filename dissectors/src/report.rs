//! The result of an analysis: one serialisable model that feeds the terminal report, the
//! JSON file (`"schema": "smbwire/1"`, documented in docs/json-schema.md) and the live TUI.

use crate::dedupe::DedupeReport;
use crate::findings::Finding;
use crate::rdma::RdmaStats;
use crate::smb2::state::Smb2Stats;
use crate::tcp::ReassemblyStats;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SCHEMA: &str = "smbwire/1";

/// Fingerprint of the engine's sources (build.rs): `--dask` refuses workers and ledger parts
/// of another build.
pub const ENGINE_BUILD: &str = env!("SMBWIRE_BUILD_ID");

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
    /// This input's part of the result's `tunnels` (set when the result or a live snapshot
    /// is made; empty when none of its frames came in a tunnel).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tunnels: Option<BTreeMap<String, TunnelCount>>,
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

/// Frames decoded from inside one kind of remote mirror session or tunnel
/// (`wire::Tunnelling::key`), and the bytes around them (outer headers of every layer; part of
/// the accounting's `protocol_headers`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelCount {
    pub frames: u64,
    pub bytes: u64,
}

/// Per-frame tunnel counting: a short list searched linearly (a capture holds one kind, two
/// at most in practice), by input file, turned into the result's maps when counts are taken.
#[derive(Debug, Clone, Default)]
pub struct TunnelCounter(Vec<(u16, crate::wire::Tunnel, Option<crate::wire::Tunnel>, TunnelCount)>);

impl TunnelCounter {
    /// Counts `t`, a frame of input `file` (`FrameRef::file`).
    #[inline]
    pub fn add(&mut self, file: u16, t: &crate::wire::Tunnelling) {
        let c = match self.0.iter_mut().find(|(f, o, i, _)| *f == file && *o == t.outer && *i == t.inner) {
            Some((_, _, _, c)) => c,
            None => {
                self.0.push((file, t.outer, t.inner, TunnelCount::default()));
                &mut self.0.last_mut().expect("just pushed").3
            }
        };
        c.frames += 1;
        c.bytes += u64::from(t.bytes);
    }

    /// By input, by the result's key.
    pub fn counts(&self) -> TunnelsByInput {
        let mut out = TunnelsByInput::default();
        for (file, outer, inner, c) in &self.0 {
            let key = crate::wire::Tunnelling { outer: *outer, inner: *inner, bytes: 0 }.key();
            // One entry per (file, kind) in the list, so no sum is needed.
            out.0.entry(*file).or_default().insert(key, *c);
        }
        out
    }
}

/// Tunnel counts by input file (its index in `inputs`, `FrameRef::file`), then by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelsByInput(pub BTreeMap<u16, BTreeMap<String, TunnelCount>>);

impl TunnelsByInput {
    /// Over all inputs: the result's `tunnels`.
    pub fn total(&self) -> BTreeMap<String, TunnelCount> {
        let mut out = BTreeMap::new();
        for by_kind in self.0.values() {
            add_tunnels(&mut out, by_kind);
        }
        out
    }

    /// Sums `from` into this (workers, `--dask` parts).
    pub fn absorb(&mut self, from: &TunnelsByInput) {
        for (file, by_kind) in &from.0 {
            add_tunnels(self.0.entry(*file).or_default(), by_kind);
        }
    }

    /// Input `file`'s counts (empty when none of its frames came in a tunnel).
    pub fn of(&self, file: u16) -> BTreeMap<String, TunnelCount> {
        self.0.get(&file).cloned().unwrap_or_default()
    }
}

/// Sums `from` into `into` (workers, `--dask` parts).
pub fn add_tunnels(into: &mut BTreeMap<String, TunnelCount>, from: &BTreeMap<String, TunnelCount>) {
    for (k, c) in from {
        let e = into.entry(k.clone()).or_default();
        e.frames += c.frames;
        e.bytes += c.bytes;
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TcpReport {
    pub segments: u64,
    pub retransmitted_bytes: u64,
    pub retransmitted_segments: u64,
    pub out_of_order_segments: u64,
    pub gap_bytes: u64,
    pub gaps: u64,
    /// Holes the reorder buffer gave up on (limits reached), and the bytes of them that
    /// arrived later (reordering beyond the buffer; not in `gap_bytes`).
    pub reorder_overflow_gaps: u64,
    pub reordered_late_bytes: u64,
    pub reordered_late_segments: u64,
    /// Keep-alive probes (RFC 1122 §4.2.3.6); their garbage octet is `protocol_headers`.
    pub keepalive_segments: u64,
    pub mirror_duplicate_frames: u64,
    pub peak_buffered_bytes: u64,
    pub flows: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct AnalysisStats {
    pub elapsed_seconds: f64,
    pub frames: u64,
    pub bytes_per_second: f64,
    /// Decoding threads the analysis ran on (`--threads`; 1 for one pipeline, or for a
    /// ledger replay).
    pub threads: usize,
    /// Batches of 16 blocks a worker digested for another (`payload::offload`; 0 on one
    /// pipeline). How much of the hashing the sharding by connection would have left on
    /// one worker was spread.
    pub hash_batches_helped: u64,
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
    /// Frames that arrived inside a remote mirror session or tunnel, by kind (empty for a
    /// local mirror port or a host capture).
    pub tunnels: BTreeMap<String, TunnelCount>,
    pub anomalies: BTreeMap<String, u64>,
    pub tcp: TcpReport,
    pub smb2: Smb2Stats,
    /// SMB Direct, iWARP and InfiniBand/RoCE counters.
    pub rdma: RdmaStats,
    /// What limits the result, as records (crate::findings).
    pub findings: Vec<Finding>,
    /// The findings' sentences, in the same order.
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
            reorder_overflow_gaps: s.overflow_gaps,
            reordered_late_bytes: s.late_bytes,
            reordered_late_segments: s.late_segments,
            keepalive_segments: s.keepalives,
            mirror_duplicate_frames,
            peak_buffered_bytes: s.peak_buffered_bytes,
            flows,
        }
    }
}

/// Every anomaly name the engine can raise (the keys of the JSON `"anomalies"` object), from
/// the stages' `Anomaly` enums and the record parsers' error types, by stage.
pub fn all_anomaly_names() -> impl Iterator<Item = &'static str> {
    fn names<A: crate::anomaly::AnomalyKind>(all: &'static [A]) -> impl Iterator<Item = &'static str> {
        all.iter().map(|a| a.name())
    }
    names(crate::capture::Anomaly::ALL)
        .chain(names(crate::wire::Anomaly::ALL))
        .chain(names(crate::tcp::Anomaly::ALL))
        .chain(names(crate::smb2::Anomaly::ALL))
        .chain(crate::smb2::anomaly::record_errors().into_iter().map(|e| e.name()))
        .chain(names(crate::smb2::xca::XcaError::ALL))
        .chain(names(crate::smbdirect::Anomaly::ALL))
        .chain(crate::smbdirect::anomaly::record_errors().into_iter().map(|e| e.name()))
        .chain(names(crate::rdma::Anomaly::ALL))
        .chain(crate::rdma::anomaly::record_error_names())
        .chain(names(crate::dedupe::Anomaly::ALL))
}

