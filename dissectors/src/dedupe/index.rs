//! The sliding-window block index and send table.
use super::topology::Topology;
use super::{DedupeConfig, SendRecord};

pub struct Dedupe {}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct DedupeReport {}

impl Dedupe {
    pub fn new(_cfg: DedupeConfig, _topo: Topology, _evidence: Option<Box<dyn std::io::Write + Send>>) -> Self {
        Dedupe {}
    }
    pub fn send(&mut self, _s: SendRecord) {}
    pub fn complete(&mut self, _conn: u64, _message_id: u64, _ts_ns: u64) {}
    pub fn advance(&mut self, _now_ns: u64) {}
    pub fn finish(self) -> DedupeReport {
        DedupeReport::default()
    }
}
