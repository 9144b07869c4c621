//! The run state every stream stage is lent, defined under the stages so dependencies run one
//! way (frame/anomaly/accounting/payload/context → wire → tcp → smb2 → smbdirect → rdma →
//! pipeline). The stages' own state types (`SmbState`, `RdmaState`) and the payload sink (the
//! dedupe index) are type parameters: this module knows none of them; `pipeline::Shared` names
//! the concrete run state.

use crate::accounting::Accounting;
use crate::anomaly::Anomalies;
use crate::payload::send::SendRecord;

/// Where payload sends and completions go (the dedupe index in the pipeline, a recorder in tests).
pub trait PayloadSink {
    fn send(&mut self, rec: SendRecord);
    /// The request `message_id` on `conn` got its response: no more sends belong to it.
    fn complete(&mut self, conn: u64, message_id: u64, ts_ns: u64);
}

/// State shared by every stream consumer of a run: the counters and byte accounting every stage
/// writes, the SMB2 session state `Smb`, the payload sink `D` and the RDMA transports' state `R`.
pub struct Shared<Smb, D, R> {
    pub anomalies: Anomalies,
    pub accounting: Accounting,
    pub smb: Smb,
    pub dedupe: D,
    /// RoCE queue pairs, iWARP connections and SMB Direct connections.
    pub rdma: R,
}

/// Disjoint borrows of a `Shared` lent to the SMB2 and SMB Direct stages (all but the RDMA
/// state, which the RDMA transports hold alongside).
pub struct Parts<'a, Smb> {
    pub anomalies: &'a mut Anomalies,
    pub accounting: &'a mut Accounting,
    pub smb: &'a mut Smb,
    pub sink: &'a mut dyn PayloadSink,
}

impl<Smb, D: PayloadSink, R> Shared<Smb, D, R> {
    /// The one borrow split: the parts and the RDMA state, disjoint.
    pub fn split(&mut self) -> (Parts<'_, Smb>, &mut R) {
        let Shared { anomalies, accounting, smb, dedupe, rdma } = self;
        (Parts { anomalies, accounting, smb, sink: dedupe }, rdma)
    }

    /// The parts alone.
    pub fn parts(&mut self) -> Parts<'_, Smb> {
        self.split().0
    }
}
