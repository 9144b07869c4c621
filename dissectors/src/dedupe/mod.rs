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
//! - `cold`: what of a live send only its evidence needs, as a byte stream.
//! - `attribution`: the rules that decide duplicate kind and class.
//! - `evidence`: duplicated payloads with the frames of each send (JSON lines, top list).
//! - `figures`: the per-(edge, class) figures and the serialisable report.
//! - `series`: the same figures per time interval (`--interval`), bounded.
//!
//! The rules and the JSON fields are documented in docs/attribution.md.

pub mod anomaly;
pub mod attribution;
mod cold;
pub mod evidence;
pub mod figures;
pub mod index;
mod postable;
mod ring;
pub mod series;
pub mod topology;

pub use anomaly::Anomaly;

pub use attribution::Class;
pub use index::{Dedupe, DedupeReport};
pub use topology::Topology;

pub use crate::payload::send::{SendKind, SendRecord, Transport};

use crate::context::PayloadSink;
use crate::ledger::Event;

impl PayloadSink for Dedupe {
    fn send(&mut self, rec: SendRecord) {
        Dedupe::send(self, rec)
    }
    fn complete(&mut self, conn: u64, message_id: u64, ts_ns: u64) {
        Dedupe::complete(self, conn, message_id, ts_ns)
    }
}

/// Feeds recorded events (a send ledger, `crate::ledger`) to an ordered stage, in order:
/// `Dedupe::finish` then gives the figures of the analysis that recorded them, under the
/// stage's own topology and window.
pub fn replay(events: impl IntoIterator<Item = Event>, stage: &mut Dedupe) {
    for e in events {
        match e {
            Event::Send(s) => stage.send(*s),
            Event::Complete { conn, message_id, ts_ns } => stage.complete(conn, message_id, ts_ns),
            Event::Advance { ts_ns } => stage.advance(ts_ns),
        }
    }
}

/// Accepted windows (`--window`): 1 us to one day, as the series interval; a shorter one
/// would round to 0 ns.
pub const MIN_WINDOW_NS: u64 = 1_000;
pub const MAX_WINDOW_NS: u64 = 86_400_000_000_000;

/// Configuration of the index.
#[derive(Clone, Debug)]
pub struct DedupeConfig {
    pub window_ns: u64,
    /// How many top duplicated payloads the report keeps.
    pub top_n: usize,
    /// Bound on blocks held in the window (all blocks of all live sends). Past it the oldest
    /// sends leave early (anomaly `dedupe.live_block_cap`): the window shrinks, memory does not grow.
    pub max_live_blocks: usize,
    /// Interval of the result's `series` (`--interval`; `series::DEFAULT_INTERVAL_NS`).
    pub series_interval_ns: u64,
    /// Bound on the index's memory (`--max-index-memory`, bytes; `None`: only the window and
    /// `max_live_blocks` bound it). Past it the oldest sends leave early (anomaly
    /// `dedupe.index_memory_cap`), as for `max_live_blocks`.
    pub max_index_bytes: Option<u64>,
    /// Bound on node-to-node edges (each holds its figures, about 800 bytes, for the run):
    /// sends of further node pairs count on `other` → `other` (anomaly `dedupe.edge_cap`).
    pub max_edges: usize,
}

impl Default for DedupeConfig {
    fn default() -> Self {
        DedupeConfig {
            window_ns: 60_000_000_000,
            top_n: 10,
            max_live_blocks: index::DEFAULT_MAX_LIVE_BLOCKS,
            series_interval_ns: series::DEFAULT_INTERVAL_NS,
            max_index_bytes: None,
            max_edges: index::DEFAULT_MAX_EDGES,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
