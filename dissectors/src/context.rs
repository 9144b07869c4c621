//! The run state every stream stage is lent, defined under the stages so dependencies run one
//! way (frame/anomaly/accounting/payload/context → wire → tcp → smb2 → smbdirect → rdma →
//! pipeline). The stages' own state types (`SmbState`, `RdmaState`) and the payload sink (the
//! dedupe index) are type parameters: this module knows none of them; `pipeline::Shared` names
//! the concrete run state.

use crate::accounting::Accounting;
use crate::anomaly::Anomalies;
use crate::payload::hash::{Finished, PendingDigest};
use crate::payload::send::SendRecord;
use std::sync::Arc;

/// Where payload sends and completions go (the dedupe index in the pipeline, a worker's
/// recorder under `--threads`, a recorder in tests).
pub trait PayloadSink {
    fn send(&mut self, rec: SendRecord);
    /// A send whose digest other workers are still completing (`PayloadHasher::finish_deferred`):
    /// `rec.digest` is set when it settles. A sink that needs the digest now settles it here;
    /// a `--threads` worker's recorder hands it on, and the ordered stage settles it.
    fn send_pending(&mut self, mut rec: SendRecord, digest: PendingDigest) {
        rec.digest = digest.settle();
        self.send(rec);
    }
    /// The request `message_id` on `conn` got its response: no more sends belong to it.
    fn complete(&mut self, conn: u64, message_id: u64, ts_ns: u64);
    /// What the sends and completions that follow come from (a frame, a flow closed by a
    /// sweep or at the end): `--threads` merges its workers' events by these marks into the
    /// order one pipeline emits them. The dedupe index ignores them.
    fn mark(&mut self, _mark: Mark) {}
    /// Names bound and unbound since the last call, in order (only when the SMB2 state keeps
    /// a journal, as a `--threads` worker's does).
    fn names(&mut self, _ops: Vec<NameOp>) {}
}

/// Hand `rec` to `sink` with its digest, `finished` (which replaces `rec.digest`): at once when
/// it is complete, else as a pending send (`PayloadSink::send_pending`).
pub fn send_finished(sink: &mut dyn PayloadSink, finished: Finished, mut rec: SendRecord) {
    match finished {
        Finished::Ready(d) => {
            rec.digest = d;
            sink.send(rec);
        }
        Finished::Pending(p) => sink.send_pending(rec, p),
    }
}

/// A send handed on pending (`PayloadSink::send_pending`), with its digest complete.
pub(crate) fn settled(mut rec: Box<SendRecord>, pending: Option<Box<PendingDigest>>) -> Box<SendRecord> {
    if let Some(digest) = pending {
        rec.digest = digest.settle();
    }
    rec
}

/// A change of what a send is named by (`SmbState::share`, `SmbState::file_name`), kept by
/// a `--threads` worker for the ordered stage.
#[derive(Debug, Clone, PartialEq)]
pub enum NameOp {
    /// Connection `0`'s server has this address (`SmbState::note_server`).
    Server(u64, std::net::IpAddr),
    /// Connection `0`'s NEGOTIATE response named this ServerGuid.
    ServerGuid(u64, [u8; 16]),
    /// On connection `0`, (SessionId, TreeId) connected to this share, or disconnected (`None`).
    Tree(u64, u64, u32, Option<Arc<str>>),
    /// On connection `0`, FileId opened with this name, or closed (`None`).
    File(u64, [u8; 16], Option<Arc<str>>),
    /// On connection `0`, SessionId `1` was established (`2`: as a channel binding). Sessions
    /// are per server and span connections: the ordered stage counts them as one pipeline.
    Session(u64, u64, bool),
    /// On connection `0`, SessionId `1` logged off.
    Logoff(u64, u64),
    /// The payload of (connection `0`, MessageId `1`, a READ when `2`) was named here with
    /// (SessionId, TreeId, FileId) `3`..`5`, or file name `6` when no map has one (a name from
    /// the same compound): the ordered stage names it from every connection's names as they
    /// are at this point.
    Lookup(u64, u64, bool, u64, u32, [u8; 16], Option<Arc<str>>),
    /// A message of connection `0`'s direction to the server when `1` (else to the client),
    /// found where framing was not known, is held (`smb2::stream::confirm`): the name changes
    /// between `Open` and `Pause` are its own, and `Refute` takes them back as its worker
    /// does (`SmbState::undo_held`).
    Hold(u64, bool, HoldStep),
}

/// The steps of a held message in a journal (`NameOp::Hold`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldStep {
    /// Its worker starts reading it (again).
    Open = 0,
    /// Its worker stops reading it for now (the chunk ends; or its last byte was read).
    Pause = 1,
    /// Confirmed, or undecided (a gap, the stream's end): what it changed stays.
    Keep = 2,
    /// Not a message: what it changed is undone.
    Refute = 3,
}

impl HoldStep {
    pub fn from_code(c: i32) -> Option<HoldStep> {
        [HoldStep::Open, HoldStep::Pause, HoldStep::Keep, HoldStep::Refute].into_iter().find(|s| *s as i32 == c)
    }
}

impl NameOp {
    /// The connection whose names it changes.
    pub fn conn(&self) -> u64 {
        match self {
            NameOp::Server(c, _)
            | NameOp::ServerGuid(c, _)
            | NameOp::Tree(c, ..)
            | NameOp::File(c, ..)
            | NameOp::Session(c, ..)
            | NameOp::Logoff(c, _)
            | NameOp::Lookup(c, ..)
            | NameOp::Hold(c, ..) => *c,
        }
    }
}

/// The origin of a sink's next events: `phase`, then two numbers ordered within it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mark {
    pub phase: u8,
    pub a: u64,
    pub b: u64,
}

/// The phases of `Mark`, in the order a pipeline runs them at a sweep and at the end.
pub mod phase {
    /// Processing frame `a` (its run-wide number); `b` 0.
    pub const FRAME: u8 = 0;
    /// A sweep closing idle TCP flows (then iWARP flows found by their MPA frame):
    /// `a` last seen, `b` flow id.
    pub const EXPIRE_TCP: u8 = 1;
    pub const EXPIRE_MPA: u8 = 2;
    /// The end of input closing every TCP flow, then every MPA flow (`a`, `b` as above), then
    /// every SMB Direct connection (`a` its id).
    pub const FINISH_TCP: u8 = 3;
    pub const FINISH_MPA: u8 = 4;
    pub const FINISH_RDMA: u8 = 5;
}

/// The mark after every close of a sweep (what a sweep records after its closes is under it).
pub const SWEEP_END: Mark = Mark { phase: phase::EXPIRE_MPA, a: u64::MAX, b: u64::MAX };

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
