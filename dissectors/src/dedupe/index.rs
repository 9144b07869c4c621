//! The sliding-window block index and send table.
//!
//! Sends stay in the table (with their block lists) for one window, because redirection is
//! decided by what the receiver sends later. A send is folded into the per-(edge, class)
//! figures when it leaves the window (`advance`) or at `finish`, and every map entry that
//! points at it is dropped then: memory is bounded by what crossed within one window, and
//! additionally by `DedupeConfig::max_live_blocks`.

use super::attribution::{block_class, dup_kind, Class, DecidedBy, DupKind, Repeated};
use super::evidence::{Evidence, PayloadKey, SendEvidence};
use super::figures::{DecidedBytes, EdgeReport, Figures, IndexStats, Totals};
use super::topology::{NodeIdx, Topology};
use super::{DedupeConfig, SendKind, SendRecord};
use crate::anomaly::Anomalies;
use crate::ledger::{Event, LedgerError, LedgerWriter};
use crate::fasthash::{DigestMap, FastMap};
use std::collections::VecDeque;
use std::sync::Arc;

pub use super::figures::DedupeReport;

/// A block instance: send sequence number and block index in that send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BlockRef {
    seq: u64,
    idx: u32,
}

impl BlockRef {
    const NONE: BlockRef = BlockRef {
        seq: u64::MAX,
        idx: 0,
    };
}

struct LiveBlock {
    hash: [u8; 16],
    len: u32,
    trivial: bool,
    dup: DupKind,
    /// First time on any edge within the window.
    global_unique: bool,
    /// The receiver of this (WRITE) block wrote it on to another node within the window.
    forwarded: bool,
    /// Previous WRITE instance of this block into the same receiver not yet marked
    /// forwarded (`BlockRef::NONE` at the start of the chain).
    prev_inbound: BlockRef,
}

struct LiveSend {
    conn: u64,
    message_id: u64,
    kind: SendKind,
    /// Time used for the window (capture time, never earlier than the previous send's).
    ts_ns: u64,
    edge: u32,
    dst: NodeIdx,
    src_member: bool,
    dst_member: bool,
    rule: Option<Class>,
    payload: PayloadKey,
    /// Edge payload epoch when the send happened (see `EdgeState::epoch`).
    epoch: u64,
    completed_ns: Option<u64>,
    blocks: Vec<LiveBlock>,
}

#[derive(Default, Clone, Copy)]
struct ClassAcc {
    figures: Figures,
    decided: DecidedBytes,
}

struct EdgeState {
    src: NodeIdx,
    dst: NodeIdx,
    /// Payload of the edge's latest send.
    last_payload: Option<PayloadKey>,
    /// Incremented whenever a send carries a different payload than the edge's previous
    /// send: two sends with equal epochs and equal payloads had only that payload between them.
    epoch: u64,
    acc: [ClassAcc; 4],
}

/// The ledger being written; after the first error nothing more is written (the error is
/// reported when the ledger is taken).
struct LedgerTap {
    writer: LedgerWriter,
    error: Option<LedgerError>,
    /// Capture time of the frame being processed (`Dedupe::note_time`): when each event
    /// reached this stage, so ledgers of several captures merge in the order one analysis
    /// of all of them would have produced.
    now_ns: u64,
}

impl LedgerTap {
    fn push(&mut self, e: &Event) {
        if self.error.is_none() {
            if let Err(err) = self.writer.push(self.now_ns, e) {
                self.error = Some(err);
            }
        }
    }
}

/// Default bound on live blocks (all blocks of all sends in the window).
pub const DEFAULT_MAX_LIVE_BLOCKS: usize = 16 * 1024 * 1024;

pub struct Dedupe {
    cfg: DedupeConfig,
    topo: Topology,
    node_names: Vec<Arc<str>>,
    clock_ns: u64,
    /// Sequence number the next accepted send gets; the front of `sends` has
    /// `next_seq - sends.len()`.
    next_seq: u64,
    sends: VecDeque<LiveSend>,
    /// (conn, MessageId) → live send per kind (Write, Read).
    messages: FastMap<(u64, u64), [Option<u64>; 2]>,
    edge_ids: FastMap<(NodeIdx, NodeIdx), u32>,
    edges: Vec<EdgeState>,
    /// (edge, block hash) → latest send that carried the block on that edge.
    edge_blocks: DigestMap<(u32, [u8; 16]), u64>,
    /// Block hash → latest send that carried it on any edge.
    global_blocks: DigestMap<[u8; 16], u64>,
    /// (receiver, block hash) → latest WRITE instance into that node not yet marked forwarded.
    inbound: DigestMap<(NodeIdx, [u8; 16]), BlockRef>,
    live_blocks: usize,
    globally_unique_bytes: u64,
    stats: IndexStats,
    anomalies: Anomalies,
    evidence: Evidence,
    /// Every event this stage receives, recorded for `smbwire attribute` (`--ledger`).
    ledger: Option<LedgerTap>,
}

impl Dedupe {
    pub fn new(
        cfg: DedupeConfig,
        topo: Topology,
        evidence: Option<Box<dyn std::io::Write + Send>>,
    ) -> Self {
        let stats = IndexStats {
            window_seconds: cfg.window_ns as f64 / 1e9,
            max_live_blocks: cfg.max_live_blocks as u64,
            ..Default::default()
        };
        Dedupe {
            evidence: Evidence::new(evidence, cfg.top_n),
            cfg,
            topo,
            node_names: Vec::new(),
            clock_ns: 0,
            next_seq: 0,
            sends: VecDeque::new(),
            messages: Default::default(),
            edge_ids: Default::default(),
            edges: Vec::new(),
            edge_blocks: Default::default(),
            global_blocks: Default::default(),
            inbound: Default::default(),
            live_blocks: 0,
            globally_unique_bytes: 0,
            stats,
            anomalies: Anomalies::default(),
            ledger: None,
        }
    }

    /// Record every event from now on (send, complete, window sweep) into `w`.
    pub fn record_ledger(&mut self, w: LedgerWriter) {
        self.ledger = Some(LedgerTap { writer: w, error: None, now_ns: 0 });
    }

    /// The capture time of the frame being processed, recorded with each ledger event
    /// (`crate::ledger::AT_END` for the end-of-input flush). Nothing when no ledger is recorded.
    #[inline]
    pub fn note_time(&mut self, ts_ns: u64) {
        if let Some(tap) = self.ledger.as_mut() {
            tap.now_ns = ts_ns;
        }
    }

    /// The ledger being recorded, with the first write error if any.
    pub fn take_ledger(&mut self) -> Option<(LedgerWriter, Option<LedgerError>)> {
        self.ledger.take().map(|t| (t.writer, t.error))
    }

    /// Anomalies raised so far (`dedupe.*`); also copied into the report.
    pub fn anomalies(&self) -> &Anomalies {
        &self.anomalies
    }

    pub fn live_sends(&self) -> usize {
        self.sends.len()
    }

    pub fn live_blocks(&self) -> usize {
        self.live_blocks
    }

    pub fn send(&mut self, s: SendRecord) {
        if let Some(tap) = self.ledger.as_mut() {
            tap.push(&Event::Send(Box::new(s.clone())));
        }
        let header_frame = s
            .header_frame
            .filter(|h| h.file == s.first_frame.file && *h != s.first_frame)
            .map(|h| h.number);
        if s.ts_ns < self.clock_ns {
            // Sends are handed over when their last byte is seen, so one that started
            // earlier can arrive after a later one; windows use the running clock.
            self.anomalies.raise("dedupe.send_out_of_order");
        }
        let ts_ns = s.ts_ns.max(self.clock_ns);
        self.advance(ts_ns);

        let kind_slot = kind_slot(s.kind);
        let msg = (s.conn, s.message_id);
        if self
            .messages
            .get(&msg)
            .is_some_and(|k| k[kind_slot].is_some())
        {
            self.anomalies.raise("dedupe.repeated_message");
            return;
        }

        let src = self.topo.node_of(s.src);
        let dst = self.topo.node_of(s.dst);
        self.sync_node_names();
        let edge = self.edge_id(src, dst);
        let src_member = self.topo.node(src).member;
        let dst_member = self.topo.node(dst).member;
        let rule = self
            .topo
            .rule_class(s.share.as_deref(), s.file_name.as_deref());
        let payload: PayloadKey = (s.digest.digest, s.digest.len);
        let epoch = {
            let e = &mut self.edges[edge as usize];
            if e.last_payload != Some(payload) {
                e.epoch += 1;
                e.last_payload = Some(payload);
            }
            e.epoch
        };
        let seq = self.next_seq;
        let front_seq = seq - self.sends.len() as u64;

        let nontrivial_len: u64 = s
            .digest
            .blocks
            .iter()
            .filter(|b| !b.trivial)
            .map(|b| b.len as u64)
            .sum();
        let ev = SendEvidence {
            file: s.first_frame.file,
            frames: [s.first_frame.number, s.last_frame.number],
            header_frame,
            time: s.ts_ns as f64 / 1e9,
            time_ns: s.ts_ns,
            src: s.src,
            dst: s.dst,
            src_node: self.node_names[src.0 as usize].clone(),
            dst_node: self.node_names[dst.0 as usize].clone(),
            kind: s.kind,
            session: s.session_id,
            tree: s.tree_id,
            file_id: s.file_id,
            file_name: s.file_name.clone(),
            share: s.share.clone(),
            offset: s.offset,
            transport: s.transport,
            conn: s.conn,
            message_id: s.message_id,
        };
        self.evidence
            .on_send(payload, nontrivial_len, ev, &mut self.anomalies);

        let mut blocks = Vec::with_capacity(s.digest.blocks.len());
        for (i, b) in s.digest.blocks.iter().enumerate() {
            let mut lb = LiveBlock {
                hash: b.hash,
                len: b.len,
                trivial: b.trivial,
                dup: DupKind::Unique,
                global_unique: false,
                forwarded: false,
                prev_inbound: BlockRef::NONE,
            };
            if b.trivial {
                // Equal-byte blocks collide everywhere by nature; never index them.
                blocks.push(lb);
                continue;
            }
            lb.global_unique = self.global_blocks.insert(b.hash, seq).is_none();
            if let Some(prev) = self.edge_blocks.insert((edge, b.hash), seq) {
                let repeated = if prev == seq {
                    Some(Repeated {
                        same_send: true,
                        same_payload: true,
                        outstanding: true,
                        consecutive: true,
                    })
                } else {
                    // Entries are dropped with their send, so `prev` is live; `get` keeps a
                    // broken invariant from becoming a panic (the block then counts as unique).
                    prev.checked_sub(front_seq)
                        .and_then(|i| self.sends.get(i as usize))
                        .map(|e| Repeated {
                            same_send: false,
                            same_payload: e.payload == payload,
                            outstanding: e.completed_ns.is_none_or(|c| c > s.ts_ns),
                            consecutive: e.epoch == epoch,
                        })
                };
                if let Some(repeated) = repeated {
                    lb.dup = dup_kind(&repeated);
                }
            }
            if s.kind == SendKind::Write && src != dst {
                // `src` writes the block on: every earlier WRITE of it into `src` was forwarded.
                if let Some(head) = self.inbound.remove(&(src, b.hash)) {
                    mark_forwarded(&mut self.sends, front_seq, head);
                }
            }
            if s.kind == SendKind::Write {
                let me = BlockRef { seq, idx: i as u32 };
                lb.prev_inbound = self
                    .inbound
                    .insert((dst, b.hash), me)
                    .unwrap_or(BlockRef::NONE);
            }
            blocks.push(lb);
        }

        self.live_blocks += blocks.len();
        self.sends.push_back(LiveSend {
            conn: s.conn,
            message_id: s.message_id,
            kind: s.kind,
            ts_ns,
            edge,
            dst,
            src_member,
            dst_member,
            rule,
            payload,
            epoch,
            completed_ns: None,
            blocks,
        });
        self.messages.entry(msg).or_insert([None, None])[kind_slot] = Some(seq);
        self.next_seq += 1;

        self.note_peaks();
        while self.live_blocks > self.cfg.max_live_blocks && self.sends.len() > 1 {
            self.anomalies.raise("dedupe.live_block_cap");
            self.stats.early_expiries += 1;
            self.fold_front();
        }
    }

    /// The response to (conn, MessageId) was seen at `ts_ns`: its send is no longer outstanding.
    pub fn complete(&mut self, conn: u64, message_id: u64, ts_ns: u64) {
        if let Some(tap) = self.ledger.as_mut() {
            tap.push(&Event::Complete { conn, message_id, ts_ns });
        }
        let Some(slots) = self.messages.get(&(conn, message_id)) else {
            return;
        };
        let front_seq = self.next_seq - self.sends.len() as u64;
        for seq in slots.iter().flatten() {
            if let Some(send) = seq
                .checked_sub(front_seq)
                .and_then(|i| self.sends.get_mut(i as usize))
            {
                send.completed_ns.get_or_insert(ts_ns);
            }
        }
    }

    /// Time moved to `now_ns`: fold every send that is now older than the window.
    pub fn advance(&mut self, now_ns: u64) {
        if let Some(tap) = self.ledger.as_mut() {
            tap.push(&Event::Advance { ts_ns: now_ns });
        }
        self.clock_ns = self.clock_ns.max(now_ns);
        while let Some(front) = self.sends.front() {
            if self.clock_ns - front.ts_ns <= self.cfg.window_ns {
                break;
            }
            self.fold_front();
        }
    }

    pub fn finish(mut self) -> DedupeReport {
        while !self.sends.is_empty() {
            self.fold_front();
        }
        let other = self.topo.overflow_lookups();
        self.anomalies.raise_n("dedupe.auto_node_cap", other);
        self.stats.other_node_lookups = other;
        let evidence = std::mem::replace(&mut self.evidence, Evidence::new(None, 0));
        let top_duplicates = evidence.finish(&mut self.anomalies);
        let acc: Vec<[ClassAcc; 4]> = self.edges.iter().map(|e| e.acc).collect();
        self.report(&acc, self.globally_unique_bytes, top_duplicates, &self.anomalies, &self.stats)
    }

    /// The report as `finish` would give it now, without changing anything: folded figures
    /// plus every send still in the window counted with what is known of it so far (a WRITE
    /// block whose receiver forwards it later moves from its class to redirection then).
    /// At the end of the input it equals `finish`.
    pub fn snapshot(&self) -> DedupeReport {
        let mut acc: Vec<[ClassAcc; 4]> = self.edges.iter().map(|e| e.acc).collect();
        let mut globally_unique = self.globally_unique_bytes;
        for send in &self.sends {
            let (part, unique) = send_figures(send);
            globally_unique += unique;
            for (total, p) in acc[send.edge as usize].iter_mut().zip(part.iter()) {
                total.figures.add(&p.figures);
                total.decided.add(&p.decided);
            }
        }
        let mut anomalies = self.anomalies.clone();
        let mut stats = self.stats.clone();
        let other = self.topo.overflow_lookups();
        anomalies.raise_n("dedupe.auto_node_cap", other);
        stats.other_node_lookups = other;
        let top_duplicates = self.evidence.snapshot_top();
        self.report(&acc, globally_unique, top_duplicates, &anomalies, &stats)
    }

    fn report(
        &self,
        acc: &[[ClassAcc; 4]],
        globally_unique_bytes: u64,
        top_duplicates: Vec<super::evidence::DuplicatePayload>,
        anomalies: &Anomalies,
        stats: &IndexStats,
    ) -> DedupeReport {
        let mut edges = Vec::new();
        let mut totals = Totals {
            globally_unique_bytes,
            ..Default::default()
        };
        for (e, e_acc) in self.edges.iter().zip(acc.iter()) {
            for class in Class::ALL {
                let acc = &e_acc[class.index()];
                if acc.figures.is_empty() {
                    continue;
                }
                totals.figures.add(&acc.figures);
                totals.decided_by.add(&acc.decided);
                edges.push(EdgeReport {
                    src: self.topo.node(e.src).name.clone(),
                    dst: self.topo.node(e.dst).name.clone(),
                    class,
                    figures: acc.figures,
                    dup_ratio: acc.figures.dup_ratio(),
                    decided_by: acc.decided,
                });
            }
        }
        edges.sort_by(|a, b| {
            b.figures
                .payload_bytes
                .cmp(&a.figures.payload_bytes)
                .then_with(|| (&a.src, &a.dst, a.class).cmp(&(&b.src, &b.dst, b.class)))
        });
        totals.dup_ratio = totals.figures.dup_ratio();
        totals.amplification = match (
            totals.figures.nontrivial_bytes,
            totals.globally_unique_bytes,
        ) {
            (_, 0) => 1.0,
            (n, u) => n as f64 / u as f64,
        };
        DedupeReport {
            edges,
            totals,
            nodes: self.topo.nodes().to_vec(),
            top_duplicates,
            index: stats.clone(),
            anomalies: anomalies
                .iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        }
    }

    fn sync_node_names(&mut self) {
        while self.node_names.len() < self.topo.nodes().len() {
            let name: Arc<str> = self.topo.nodes()[self.node_names.len()]
                .name
                .as_str()
                .into();
            self.node_names.push(name);
        }
    }

    fn edge_id(&mut self, src: NodeIdx, dst: NodeIdx) -> u32 {
        if let Some(&id) = self.edge_ids.get(&(src, dst)) {
            return id;
        }
        let id = self.edges.len() as u32;
        self.edges.push(EdgeState {
            src,
            dst,
            last_payload: None,
            epoch: 0,
            acc: [ClassAcc::default(); 4],
        });
        self.edge_ids.insert((src, dst), id);
        id
    }

    /// Fold the oldest send into the figures and drop everything that points at it.
    fn fold_front(&mut self) {
        let Some(send) = self.sends.pop_front() else {
            return;
        };
        let seq = self.next_seq - self.sends.len() as u64 - 1;
        self.live_blocks -= send.blocks.len();

        let (acc, globally_unique) = send_figures(&send);
        self.globally_unique_bytes += globally_unique;
        for b in send.blocks.iter().filter(|b| !b.trivial) {
            if self.edge_blocks.get(&(send.edge, b.hash)) == Some(&seq) {
                self.edge_blocks.remove(&(send.edge, b.hash));
            }
            if self.global_blocks.get(&b.hash) == Some(&seq) {
                self.global_blocks.remove(&b.hash);
            }
            if self
                .inbound
                .get(&(send.dst, b.hash))
                .is_some_and(|r| r.seq == seq)
            {
                self.inbound.remove(&(send.dst, b.hash));
            }
        }

        let edge = &mut self.edges[send.edge as usize];
        for (total, part) in edge.acc.iter_mut().zip(acc.iter()) {
            total.figures.add(&part.figures);
            total.decided.add(&part.decided);
        }

        let msg = (send.conn, send.message_id);
        if let Some(slots) = self.messages.get_mut(&msg) {
            let slot = &mut slots[kind_slot(send.kind)];
            if *slot == Some(seq) {
                *slot = None;
            }
            if slots.iter().all(Option::is_none) {
                self.messages.remove(&msg);
            }
        }
        self.evidence.on_leave(&send.payload, &mut self.anomalies);
    }

    fn note_peaks(&mut self) {
        let bytes = self.bytes_estimate();
        let s = &mut self.stats;
        s.peak_live_sends = s.peak_live_sends.max(self.sends.len() as u64);
        s.peak_live_blocks = s.peak_live_blocks.max(self.live_blocks as u64);
        s.peak_bytes_estimate = s.peak_bytes_estimate.max(bytes);
    }

    /// Rough memory held by the window: structures times their sizes, hash maps with
    /// their control byte and a 7/8 load factor. Strings shared with the SMB state are not counted.
    fn bytes_estimate(&self) -> u64 {
        fn map<K, V>(len: usize) -> u64 {
            (len as u64) * (std::mem::size_of::<(K, V)>() as u64 + 1) * 8 / 7
        }
        let (open_payloads, stored_sends) = self.evidence.open_counts();
        (self.sends.len() * std::mem::size_of::<LiveSend>()) as u64
            + (self.live_blocks * std::mem::size_of::<LiveBlock>()) as u64
            + map::<(u64, u64), [Option<u64>; 2]>(self.messages.len())
            + map::<(u32, [u8; 16]), u64>(self.edge_blocks.len())
            + map::<[u8; 16], u64>(self.global_blocks.len())
            + map::<(NodeIdx, [u8; 16]), BlockRef>(self.inbound.len())
            + map::<PayloadKey, [u64; 6]>(open_payloads)
            + (stored_sends * std::mem::size_of::<SendEvidence>()) as u64
    }
}

/// A send's figures per class (what folding it adds to its edge) and its globally unique
/// bytes, from what is known of its blocks now.
fn send_figures(send: &LiveSend) -> ([ClassAcc; 4], u64) {
    let mut acc = [ClassAcc::default(); 4];
    let mut trivial_bytes = 0u64;
    let mut globally_unique = 0u64;
    for b in &send.blocks {
        let len = b.len as u64;
        if b.trivial {
            trivial_bytes += len;
            continue;
        }
        let (class, by) = block_class(
            send.kind,
            send.src_member,
            send.dst_member,
            send.rule,
            b.forwarded,
        );
        let a = &mut acc[class.index()];
        a.figures.payload_bytes += len;
        a.figures.nontrivial_bytes += len;
        match b.dup {
            DupKind::Unique => a.figures.unique_bytes += len,
            DupKind::PerCopy => a.figures.per_copy_duplicate_bytes += len,
            DupKind::RepeatedContent => a.figures.repeated_content_bytes += len,
        }
        a.decided.add_bytes(by, len);
        if b.global_unique {
            globally_unique += len;
        }
    }
    // The send itself and its trivial bytes go to the class that got most of its
    // non-trivial bytes (the unforwarded class on a tie or when there are none).
    let (base, base_by) = block_class(
        send.kind,
        send.src_member,
        send.dst_member,
        send.rule,
        false,
    );
    let mut main = base;
    for class in Class::ALL {
        if acc[class.index()].figures.nontrivial_bytes > acc[main.index()].figures.nontrivial_bytes
        {
            main = class;
        }
    }
    let main_by = if main == base {
        base_by
    } else {
        DecidedBy::Forwarded
    };
    let a = &mut acc[main.index()];
    a.figures.sends += 1;
    a.figures.payload_bytes += trivial_bytes;
    a.figures.trivial_bytes += trivial_bytes;
    a.decided.add_bytes(main_by, trivial_bytes);
    (acc, globally_unique)
}

/// Mark a chain of WRITE block instances (newest first) as forwarded, stopping at the
/// window's edge or at an instance already marked.
fn mark_forwarded(sends: &mut VecDeque<LiveSend>, front_seq: u64, head: BlockRef) {
    let mut cur = head;
    while cur != BlockRef::NONE && cur.seq >= front_seq {
        let Some(send) = sends.get_mut((cur.seq - front_seq) as usize) else {
            break;
        };
        let Some(block) = send.blocks.get_mut(cur.idx as usize) else {
            break;
        };
        if block.forwarded {
            break;
        }
        block.forwarded = true;
        cur = block.prev_inbound;
    }
}

fn kind_slot(kind: SendKind) -> usize {
    match kind {
        SendKind::Write => 0,
        SendKind::Read => 1,
    }
}
