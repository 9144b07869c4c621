//! The figures the index produces and the serialisable report (JSON shape documented in
//! docs/attribution.md).

use super::attribution::{Class, DecidedBy};
use super::evidence::DuplicatePayload;
use super::series::SeriesReport;
use super::topology::Node;
use serde::Serialize;
use std::collections::BTreeMap;

/// Byte and send counts of one (edge, class), or summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Figures {
    /// All payload bytes, trivial blocks included.
    pub payload_bytes: u64,
    /// Bytes of non-trivial blocks.
    pub nontrivial_bytes: u64,
    /// Non-trivial bytes that had not crossed this edge within the window.
    pub unique_bytes: u64,
    /// Sends (each send is counted once, in the class that got most of its bytes).
    pub sends: u64,
    pub trivial_bytes: u64,
    pub per_copy_duplicate_bytes: u64,
    pub repeated_content_bytes: u64,
}

impl Figures {
    pub fn add(&mut self, o: &Figures) {
        self.payload_bytes += o.payload_bytes;
        self.nontrivial_bytes += o.nontrivial_bytes;
        self.unique_bytes += o.unique_bytes;
        self.sends += o.sends;
        self.trivial_bytes += o.trivial_bytes;
        self.per_copy_duplicate_bytes += o.per_copy_duplicate_bytes;
        self.repeated_content_bytes += o.repeated_content_bytes;
    }

    /// Takes out what `add` put in (a live send's provisional figures: `Dedupe::snapshot`).
    pub fn sub(&mut self, o: &Figures) {
        self.payload_bytes -= o.payload_bytes;
        self.nontrivial_bytes -= o.nontrivial_bytes;
        self.unique_bytes -= o.unique_bytes;
        self.sends -= o.sends;
        self.trivial_bytes -= o.trivial_bytes;
        self.per_copy_duplicate_bytes -= o.per_copy_duplicate_bytes;
        self.repeated_content_bytes -= o.repeated_content_bytes;
    }

    pub fn is_empty(&self) -> bool {
        self.payload_bytes == 0 && self.sends == 0
    }

    /// nontrivial_bytes / unique_bytes. 1.0 when nothing non-trivial crossed; `None` (JSON
    /// null) when non-trivial bytes crossed but none of them was first on the edge — they all
    /// repeat bytes counted as unique under another class of the same edge.
    pub fn dup_ratio(&self) -> Option<f64> {
        match (self.nontrivial_bytes, self.unique_bytes) {
            (0, 0) => Some(1.0),
            (_, 0) => None,
            (n, u) => Some(n as f64 / u as f64),
        }
    }
}

/// Payload bytes (trivial included) by the rule that decided their class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DecidedBytes {
    pub inference: u64,
    pub rule: u64,
    pub forwarded: u64,
}

impl DecidedBytes {
    pub fn add_bytes(&mut self, by: DecidedBy, bytes: u64) {
        match by {
            DecidedBy::Inference => self.inference += bytes,
            DecidedBy::Rule => self.rule += bytes,
            DecidedBy::Forwarded => self.forwarded += bytes,
        }
    }

    pub fn add(&mut self, o: &DecidedBytes) {
        self.inference += o.inference;
        self.rule += o.rule;
        self.forwarded += o.forwarded;
    }

    /// Takes out what `add` put in.
    pub fn sub(&mut self, o: &DecidedBytes) {
        self.inference -= o.inference;
        self.rule -= o.rule;
        self.forwarded -= o.forwarded;
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct EdgeReport {
    /// Node names.
    pub src: String,
    pub dst: String,
    pub class: Class,
    #[serde(flatten)]
    pub figures: Figures,
    pub dup_ratio: Option<f64>,
    pub decided_by: DecidedBytes,
    /// Live snapshots only: of `payload_bytes`, bytes of WRITEs still in the window whose
    /// class may still change (their receiver may yet forward them: redirection). Absent
    /// (0) in a final result, where every class is decided.
    #[serde(skip_serializing_if = "is_zero")]
    pub pending_bytes: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[derive(Clone, Debug, Serialize)]
pub struct Totals {
    #[serde(flatten)]
    pub figures: Figures,
    pub dup_ratio: Option<f64>,
    pub decided_by: DecidedBytes,
    /// Non-trivial bytes whose block had not crossed any edge within the window.
    pub globally_unique_bytes: u64,
    /// nontrivial_bytes / globally_unique_bytes (1.0 when both are 0).
    pub amplification: f64,
}

impl Default for Totals {
    fn default() -> Self {
        Totals {
            figures: Figures::default(),
            dup_ratio: Some(1.0),
            decided_by: DecidedBytes::default(),
            globally_unique_bytes: 0,
            amplification: 1.0,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct IndexStats {
    pub window_seconds: f64,
    pub peak_live_sends: u64,
    pub peak_live_blocks: u64,
    /// Approximate peak memory of the index, sends, block maps and evidence (bytes).
    pub peak_bytes_estimate: u64,
    /// The index's memory per live block when the live blocks peaked (bytes; 0 when none).
    pub bytes_per_live_block: f64,
    /// Of that memory, the blocks' part (their ring and lookup tables) per live block.
    pub block_bytes_per_live_block: f64,
    /// And the sends' part (send table, message table, evidence) per live send then.
    pub send_bytes_per_live_send: f64,
    /// Configured bound on live blocks.
    pub max_live_blocks: u64,
    /// Sends folded before their window ended because the live-block bound was reached.
    pub early_expiries: u64,
    /// Address lookups that went to the `other` node because of the automatic node cap.
    pub other_node_lookups: u64,
    /// Configured bound on the index's memory (`--max-index-memory`), when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_index_bytes: Option<u64>,
    /// Sends folded before their window ended because the memory bound was reached.
    pub memory_early_expiries: u64,
    /// Shortest time a send stayed in the index when it left early (either bound): the
    /// effective window at its shortest (seconds; absent when no send left early).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shortest_window_seconds: Option<f64>,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct DedupeReport {
    /// One entry per (edge, class) that carried bytes or sends; by payload_bytes, largest first.
    pub edges: Vec<EdgeReport>,
    pub totals: Totals,
    /// Where node membership comes from: `topology` (the file lists nodes), `assumed`
    /// (`--assume-members`) or `unknown` (no topology: classes come from the wire only).
    pub membership: &'static str,
    pub nodes: Vec<Node>,
    /// Payloads sent more than once within the window (each an evidence line); the first
    /// `--top` of them by duplicate bytes are `top_duplicates`.
    pub duplicated_payloads: u64,
    pub top_duplicates: Vec<DuplicatePayload>,
    pub index: IndexStats,
    /// The edge figures per time interval (`Dedupe::finish` only; a live snapshot has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<SeriesReport>,
    /// Anomalies raised by the index (`dedupe.*`), by name; merged into the result's
    /// top-level `anomalies` by the pipeline, so not serialised here.
    #[serde(skip_serializing)]
    pub anomalies: BTreeMap<String, u64>,
    /// The evidence file could not be written (its first error): the run fails with it
    /// (`pipeline::evidence_failed`), as a ledger that cannot be written does.
    #[serde(skip)]
    pub evidence_error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dup_ratio_definition() {
        let f = |n, u| Figures {
            nontrivial_bytes: n,
            unique_bytes: u,
            ..Default::default()
        };
        assert_eq!(f(0, 0).dup_ratio(), Some(1.0));
        assert_eq!(f(4096, 0).dup_ratio(), None);
        assert_eq!(f(8192, 4096).dup_ratio(), Some(2.0));
    }
}
