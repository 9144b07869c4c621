//! Evidence of duplicated payloads: which sends (frames, session, file, offset) carried the
//! same whole payload within the window. Written as JSON lines when a payload's last send
//! leaves the window, and kept as a bounded top-N list for the report. Digests only, never
//! payload bytes.

use super::attribution::Class;
use super::{SendKind, Transport};
use crate::anomaly::Anomalies;
use serde::{Serialize, Serializer};
use std::cmp::Reverse;
use super::postable::{fold_mul, PosTable};
use super::ring::Chunked;
use std::collections::BinaryHeap;
use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;
use super::Anomaly;

/// Sends listed per duplicated payload (the count goes on in `sends_total`).
pub const MAX_SENDS_PER_PAYLOAD: usize = 1000;
/// Bound on send entries held across all open payloads.
pub const MAX_STORED_SENDS: usize = 4_000_000;
/// Sends listed per payload in a live snapshot's `top_duplicates` (`sends_total` counts them
/// all; the final result lists up to `MAX_SENDS_PER_PAYLOAD`). A payload sent again and again
/// never leaves a live window, so its list grows to `MAX_SENDS_PER_PAYLOAD`: copying and
/// serialising all of it every second made each snapshot grow with the run (issue 12).
pub const SNAPSHOT_SENDS_PER_PAYLOAD: usize = 16;

/// Whole-payload identity: digest and length.
pub type PayloadKey = ([u8; 32], u64);

/// One send of a duplicated payload, as written in evidence and `top_duplicates`.
#[derive(Clone, Debug, Serialize)]
pub struct SendEvidence {
    /// Capture file index (order of the input files).
    pub file: u16,
    /// First and last frame numbers that carried the payload.
    pub frames: [u64; 2],
    /// Frame of the SMB2 header, when it is known and differs from the first payload frame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_frame: Option<u64>,
    /// Time of the first payload byte, seconds since the epoch.
    pub time: f64,
    pub time_ns: u64,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Ports of the sender and receiver on the connection (null when it has none: RoCE).
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
    /// Community ID v1 of the connection (seed 0; `crate::community`), null without ports.
    pub community_id: Option<crate::community::CommunityId>,
    #[serde(serialize_with = "arc_str")]
    pub src_node: Arc<str>,
    #[serde(serialize_with = "arc_str")]
    pub dst_node: Arc<str>,
    pub kind: SendKind,
    #[serde(serialize_with = "hex_u64")]
    pub session: u64,
    pub tree: u32,
    #[serde(serialize_with = "hex_bytes")]
    pub file_id: [u8; 16],
    #[serde(serialize_with = "opt_arc_str")]
    pub file_name: Option<Arc<str>>,
    #[serde(serialize_with = "opt_arc_str")]
    pub share: Option<Arc<str>>,
    /// Null when not known (`UNKNOWN_OFFSET`: a READ response without its request).
    #[serde(serialize_with = "offset_or_null")]
    pub offset: u64,
    pub transport: Transport,
    pub conn: u64,
    pub message_id: u64,
    /// Its class and what most of its non-trivial bytes were, decided when it left the window
    /// (absent in a live snapshot for a send still in it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<Class>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dup_kind: Option<SendDupKind>,
    /// Ordinal among the payload's sends (0-based; set by `Evidence::on_send`).
    #[serde(skip)]
    pub n: u64,
}

/// What most of a send's non-trivial bytes were when it left the window (ties: the later in
/// this order); `trivial` when it had none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SendDupKind {
    Unique,
    PerCopy,
    Repeated,
    Trivial,
}

impl SendDupKind {
    /// The kind with the most bytes of (unique, per-copy, repeated).
    pub fn of(unique: u64, per_copy: u64, repeated: u64) -> SendDupKind {
        if unique + per_copy + repeated == 0 {
            return SendDupKind::Trivial;
        }
        let mut best = (unique, SendDupKind::Unique);
        for c in [(repeated, SendDupKind::Repeated), (per_copy, SendDupKind::PerCopy)] {
            if c.0 >= best.0 {
                best = c;
            }
        }
        best.1
    }
}

/// A payload sent at least twice within the window.
#[derive(Clone, Debug, Serialize)]
pub struct DuplicatePayload {
    /// Payload digest (hash.rs construction), 64 hex digits.
    #[serde(serialize_with = "hex_bytes")]
    pub digest: [u8; 32],
    /// Payload length in bytes.
    pub size: u64,
    pub sends_total: u64,
    /// Non-trivial bytes of the payload × (sends_total − 1): what the repeats cost.
    pub duplicate_bytes: u64,
    /// The first `MAX_SENDS_PER_PAYLOAD` sends in time order.
    pub sends: Vec<SendEvidence>,
}

impl DuplicatePayload {
    /// Everything but the list of sends.
    fn clone_head(&self) -> DuplicatePayload {
        DuplicatePayload { sends: Vec::new(), ..*self }
    }
}

/// One send of an open payload: the per-send fields of `SendEvidence`; what it shares with
/// other sends of its connection and file is in `Contexts` (64 bytes instead of 248). Stored
/// here only once the send left the window before its payload closed; while it is in the
/// window the index's send record holds the same fields (`LiveSend::stored`).
#[derive(Clone, Copy)]
pub(super) struct StoredSend {
    pub frames: [u64; 2],
    /// `NO_FRAME`: none.
    pub header_frame: u64,
    pub time_ns: u64,
    pub offset: u64,
    pub message_id: u64,
    /// Ordinal among the payload's sends (set when it leaves the window).
    pub n: u64,
    /// Its `SendContext` (`Evidence::intern`).
    pub ctx: u32,
    pub file: u16,
    pub class: Option<Class>,
    pub dup_kind: Option<SendDupKind>,
}

/// `StoredSend::header_frame` when the header came in the first payload frame (or is not known).
pub(super) const NO_FRAME: u64 = u64::MAX;

/// The fields of `SendEvidence` a connection's sends to one file share. Interned by content
/// (not by the identity of its strings: a ledger's replay has a string per row, and the
/// index's figures must not depend on where the sends came from).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct SendContext {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
    pub community_id: Option<crate::community::CommunityId>,
    pub src_node: Arc<str>,
    pub dst_node: Arc<str>,
    pub kind: SendKind,
    pub session: u64,
    pub tree: u32,
    pub file_id: [u8; 16],
    pub file_name: Option<Arc<str>>,
    pub share: Option<Arc<str>>,
    pub transport: Transport,
    pub conn: u64,
}

/// Interned `SendContext`s with the number of sends using each (in the window, or stored
/// after they left it).
#[derive(Default)]
struct Contexts {
    ids: crate::fasthash::FastMap<SendContext, u32>,
    slots: Vec<Option<(SendContext, u64)>>,
    free: Vec<u32>,
}

impl Contexts {
    fn intern(&mut self, c: SendContext) -> u32 {
        if let Some(&id) = self.ids.get(&c) {
            if let Some((_, refs)) = self.slots[id as usize].as_mut() {
                *refs += 1;
            }
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some((c.clone(), 1));
                id
            }
            None => {
                self.slots.push(Some((c.clone(), 1)));
                (self.slots.len() - 1) as u32
            }
        };
        self.ids.insert(c, id);
        id
    }

    fn get(&self, id: u32) -> &SendContext {
        &self.slots[id as usize].as_ref().expect("a send's context is interned").0
    }

    fn release(&mut self, id: u32) {
        let slot = &mut self.slots[id as usize];
        let Some((c, refs)) = slot.as_mut() else { return };
        *refs -= 1;
        if *refs == 0 {
            self.ids.remove(c);
            *slot = None;
            self.free.push(id);
        }
    }

    fn len(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
fn split(ev: SendEvidence) -> (SendContext, StoredSend) {
    let c = SendContext {
        src: ev.src,
        dst: ev.dst,
        src_port: ev.src_port,
        dst_port: ev.dst_port,
        community_id: ev.community_id,
        src_node: ev.src_node,
        dst_node: ev.dst_node,
        kind: ev.kind,
        session: ev.session,
        tree: ev.tree,
        file_id: ev.file_id,
        file_name: ev.file_name,
        share: ev.share,
        transport: ev.transport,
        conn: ev.conn,
    };
    let s = StoredSend {
        frames: ev.frames,
        header_frame: ev.header_frame.unwrap_or(u64::MAX),
        time_ns: ev.time_ns,
        offset: ev.offset,
        message_id: ev.message_id,
        n: ev.n,
        ctx: 0,
        file: ev.file,
        class: ev.class,
        dup_kind: ev.dup_kind,
    };
    (c, s)
}

fn join(c: &SendContext, s: &StoredSend) -> SendEvidence {
    SendEvidence {
        file: s.file,
        frames: s.frames,
        header_frame: (s.header_frame != NO_FRAME).then_some(s.header_frame),
        time: s.time_ns as f64 / 1e9,
        time_ns: s.time_ns,
        src: c.src,
        dst: c.dst,
        src_port: c.src_port,
        dst_port: c.dst_port,
        community_id: c.community_id,
        src_node: c.src_node.clone(),
        dst_node: c.dst_node.clone(),
        kind: c.kind,
        session: c.session,
        tree: c.tree,
        file_id: c.file_id,
        file_name: c.file_name.clone(),
        share: c.share.clone(),
        offset: s.offset,
        transport: c.transport,
        conn: c.conn,
        message_id: s.message_id,
        class: s.class,
        dup_kind: s.dup_kind,
        n: s.n,
    }
}

/// A payload with a send in the window (a slot of `Evidence::open`; one with no send in the
/// window, `live() == 0`, is a free slot).
/// A send's own evidence stays in the index's send table while it is in the window; only the
/// sends that left while their payload stayed open are stored here. On 4 KiB I/O, where every
/// block is a send and most payloads are sent once, nothing is stored at all; the sends
/// stored for a payload are in `Evidence::departed`, by its id.
///
/// 64 bytes, packed to 4-byte alignment (80 unpacked with a list pointer): on 4 KiB I/O a
/// payload sent twice, as every nested-mirror write is, opens one for every two sends.
/// Its fields are read by value (a reference to a packed `u64` is not allowed).
#[derive(Clone, Copy)]
#[repr(C, packed(4))]
struct Open {
    digest: [u8; 32],
    len: u64,
    nontrivial_len: u64,
    sends_total: u64,
    /// Sends of it in the window (fewer than 2^31: `index::MAX_LIVE_SENDS`).
    live: u32,
    /// Low 32 bits of the index's sequence number at or before its first send in the window:
    /// the sequence number of the send that opened it, then past each of its sends that
    /// leaves (they leave in order). A snapshot finds its sends in the window from there
    /// (`first_live`) rather than looking at every send.
    first_live: u32,
}

const _: () = assert!(std::mem::size_of::<Open>() == 64);

/// A free `Open` slot.
const NO_OPEN: Open = Open { digest: [0; 32], len: 0, nontrivial_len: 0, sends_total: 0, live: 0, first_live: 0 };

/// An `Evidence::departed` entry: its key, list and control byte (hashbrown).
const DEPARTED_ENTRY_BYTES: usize = 4 + std::mem::size_of::<Vec<StoredSend>>() + 1;

/// The entries a hashbrown table sized for `n` holds (its capacity when no removed entry left
/// a tombstone): the smallest power-of-two slot count, at least 4, that keeps it at most 7/8
/// full (3 of 4 and 7 of 8 slots below 16), as it grows by doubling.
pub(super) fn table_room(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let slots = if n < 4 {
        4
    } else if n < 8 {
        8
    } else {
        (n * 8).div_ceil(7).next_power_of_two()
    };
    if slots < 8 {
        slots - 1
    } else {
        slots / 8 * 7
    }
}

/// No payload: an empty one is not tracked.
pub(super) const NO_PAYLOAD: u32 = u32::MAX;

/// Lookup hash of an open payload. Its digest is BLAKE3 output: its first 8 bytes suffice.
#[inline]
fn payload_hash(digest: &[u8; 32], len: u64) -> u64 {
    let d = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
    fold_mul(d ^ len.wrapping_mul(0x9E37_79B9_7F4A_7C15), 0xa076_1d64_78bd_642f)
}

/// Top-list entry ordered by duplicate bytes, then digest and size, then the time of its
/// first send (a payload can leave the window and come back: a total order keeps the list
/// the same whichever way it is built).
struct Ranked(DuplicatePayload);

impl Ranked {
    #[allow(clippy::type_complexity)]
    fn key(&self) -> (u64, Reverse<[u8; 32]>, Reverse<u64>, Reverse<u64>, u64) {
        (
            self.0.duplicate_bytes,
            Reverse(self.0.digest),
            Reverse(self.0.size),
            Reverse(self.0.sends.first().map_or(u64::MAX, |s| s.time_ns)),
            self.0.sends_total,
        )
    }
}
impl PartialEq for Ranked {
    fn eq(&self, o: &Self) -> bool {
        self.key() == o.key()
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ranked {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.key().cmp(&o.key())
    }
}

/// One entry of a live snapshot's top list: the payload, with the sends that already left
/// the window, and its open id when sends of it are still in the window (the index adds
/// those: their evidence is in its send table).
pub(super) struct SnapshotEntry {
    pub open: Option<u32>,
    pub payload: DuplicatePayload,
}

pub struct Evidence {
    writer: Option<Box<dyn Write + Send>>,
    /// Open payloads by id (free slots have no live send, and are listed in `free`), in
    /// chunks of 1024 (72 KiB).
    open: Chunked<Open, 10>,
    free: Vec<u32>,
    /// Open payload ids by digest and length (`payload_hash`).
    lookup: PosTable,
    /// Sends of an open payload that left the window while it stayed open (at most
    /// `MAX_SENDS_PER_PAYLOAD`), by its id; none for most.
    departed: crate::fasthash::FastMap<u32, Vec<StoredSend>>,
    /// The entries `departed` has room for as it grew and shrank (`table_room`), counted
    /// here rather than read from the map: the map's own capacity also moves with where its
    /// removed entries fell (a tombstone or a free slot), which its per-map random seed
    /// decides, so the index's size estimate would differ from run to run.
    departed_room: usize,
    contexts: Contexts,
    /// Sends stored for open payloads (those that left the window before their payload).
    stored_sends: usize,
    /// Room the open payloads' lists of stored sends hold (their capacities).
    stored_capacity: usize,
    top_n: usize,
    /// Min-heap of the best `top_n` so far.
    top: BinaryHeap<Reverse<Ranked>>,
    /// Payloads closed with at least two sends (each a line of the evidence file).
    closed_duplicated: u64,
    pub written: u64,
    /// The evidence file's first write error: writing stops there (the file is not put in
    /// place, `outputs::StagedWriter`) and the run ends with it (`finish`).
    write_error: Option<String>,
}

impl Open {
    /// Sends of it in the window.
    fn live(&self) -> u64 {
        u64::from(self.live)
    }
}

impl Evidence {
    pub fn new(writer: Option<Box<dyn Write + Send>>, top_n: usize) -> Self {
        Evidence {
            writer,
            open: Chunked::default(),
            free: Vec::new(),
            lookup: PosTable::new(),
            departed: Default::default(),
            departed_room: 0,
            contexts: Contexts::default(),
            stored_sends: 0,
            stored_capacity: 0,
            top_n,
            top: BinaryHeap::new(),
            closed_duplicated: 0,
            write_error: None,
            written: 0,
        }
    }

    /// How many duplicated payloads there are (closed, and open ones already sent twice):
    /// the length of the evidence file once every payload closed, of which `top_duplicates`
    /// keeps the first `top_n`.
    pub fn duplicated_payloads(&self) -> u64 {
        self.closed_duplicated + self.open.iter().filter(|o| o.live() > 0 && o.sends_total >= 2).count() as u64
    }

    /// The context a live send's evidence refers to (released when the send is: `on_leave`).
    pub(super) fn intern(&mut self, c: SendContext) -> u32 {
        self.contexts.intern(c)
    }

    /// Another send of `key`, when the payload is open: its id (see `on_send`).
    pub(super) fn on_send_if_open(&mut self, key: &PayloadKey) -> Option<u32> {
        let hash = payload_hash(&key.0, key.1);
        let open = &self.open;
        let &mut id = self.lookup.find_mut(hash, |id| {
            let o = open[id as usize];
            o.digest == key.0 && { o.len } == key.1
        })?;
        let o = &mut self.open[id as usize];
        o.sends_total += 1;
        o.live += 1;
        Some(id)
    }

    /// A send that was never part of an open payload left the window (a payload sent once
    /// and not opened: `Dedupe`'s single-block payloads): its context goes.
    pub(super) fn release(&mut self, ctx: u32) {
        self.contexts.release(ctx);
    }

    /// A send of `key` entered the window as the index's send `seq`: its payload's open id,
    /// `NO_PAYLOAD` for an empty payload (not tracked). Sends of one payload in the window
    /// share its id.
    pub(super) fn on_send(&mut self, key: &PayloadKey, nontrivial_len: u64, seq: u64) -> u32 {
        if key.1 == 0 {
            return NO_PAYLOAD;
        }
        if let Some(id) = self.on_send_if_open(key) {
            return id;
        }
        let hash = payload_hash(&key.0, key.1);
        let entry = Open {
            digest: key.0,
            len: key.1,
            nontrivial_len,
            sends_total: 1,
            live: 1,
            first_live: seq as u32,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.open[id as usize] = entry;
                id
            }
            None => {
                self.open.push(entry);
                (self.open.len() - 1) as u32
            }
        };
        let open = &self.open;
        self.lookup.insert_unique(
            hash,
            id,
            |id| {
                let o = open[id as usize];
                payload_hash(&o.digest, o.len)
            },
            |id| crate::hint::prefetch_one(&open[id as usize]),
        );
        id
    }

    /// A send of open payload `id` left the window with its verdict; `s` is its evidence
    /// (its context reference passes here; a send of `NO_PAYLOAD` has none). When it was the
    /// payload's last send in the window, the payload is closed. Sends of one payload leave
    /// in the order they came (the window is a queue), so the n-th to leave is its n-th send.
    pub(super) fn on_leave(&mut self, id: u32, seq: u64, mut s: StoredSend, verdict: (Class, SendDupKind), anomalies: &mut Anomalies) {
        if id == NO_PAYLOAD {
            // An empty payload's send has no context (`Dedupe::send` interns none).
            return;
        }
        let o = &mut self.open[id as usize];
        s.n = o.sends_total - o.live();
        o.live -= 1;
        o.first_live = (seq as u32).wrapping_add(1);
        s.class = Some(verdict.0);
        s.dup_kind = Some(verdict.1);
        let listed = self.departed.get(&id).map_or(0, |d| d.len());
        if o.live() > 0 {
            // Its payload stays open: another send of it is in the window.
            if listed < MAX_SENDS_PER_PAYLOAD && self.stored_sends < MAX_STORED_SENDS {
                if listed == 0 && self.departed.len() + 1 > self.departed_room {
                    self.departed_room = table_room(self.departed.len() + 1);
                }
                let d = self.departed.entry(id).or_default();
                let before = d.capacity();
                if d.len() == before && before < 4 {
                    // Most duplicated payloads have a few sends: room one at a time.
                    d.reserve_exact(1);
                }
                d.push(s);
                self.stored_capacity += d.capacity() - before;
                self.stored_sends += 1;
            } else {
                if listed < MAX_SENDS_PER_PAYLOAD {
                    anomalies.raise(Anomaly::EvidenceCap);
                }
                self.contexts.release(s.ctx);
            }
            return;
        }
        // The payload closes.
        let o = std::mem::replace(&mut self.open[id as usize], NO_OPEN);
        self.lookup.remove(payload_hash(&o.digest, o.len), |v| v == id);
        self.free.push(id);
        let mut stored = self.departed.remove(&id).unwrap_or_default();
        if self.departed_room > 1024 && self.departed.len() < self.departed_room / 8 {
            // After a burst of payloads open across the window's end: give the room back.
            self.departed.shrink_to(self.departed.len() * 2);
            self.departed_room = table_room(self.departed.len() * 2);
        }
        self.stored_sends -= stored.len();
        self.stored_capacity -= stored.capacity();
        if stored.len() < MAX_SENDS_PER_PAYLOAD {
            stored.push(s);
        } else {
            self.contexts.release(s.ctx);
        }
        let sends: Vec<SendEvidence> = if o.sends_total < 2 {
            Vec::new()
        } else {
            stored.iter().map(|s| join(self.contexts.get(s.ctx), s)).collect()
        };
        for s in &stored {
            self.contexts.release(s.ctx);
        }
        if o.sends_total < 2 {
            return;
        }
        self.closed_duplicated += 1;
        let dup = DuplicatePayload {
            digest: o.digest,
            size: o.len,
            sends_total: o.sends_total,
            duplicate_bytes: o.nontrivial_len.saturating_mul(o.sends_total - 1),
            sends,
        };
        if let Some(w) = self.writer.as_mut() {
            let r = serde_json::to_writer(&mut *w, &dup).map_err(|e| e.to_string()).and_then(|()| w.write_all(b"\n").map_err(|e| e.to_string()));
            match r {
                Ok(()) => self.written += 1,
                Err(e) => {
                    anomalies.raise(Anomaly::EvidenceWriteError);
                    self.write_error = Some(e);
                    // Dropped: its temporary file goes; nothing more is tried.
                    self.writer = None;
                }
            }
        }
        self.offer_top(dup);
    }

    fn offer_top(&mut self, dup: DuplicatePayload) {
        if self.top_n == 0 {
            return;
        }
        let entry = Ranked(dup);
        if self.top.len() >= self.top_n {
            match self.top.peek() {
                Some(Reverse(worst)) if entry > *worst => {
                    self.top.pop();
                }
                _ => return,
            }
        }
        self.top.push(Reverse(entry));
    }

    /// The top list `finish` would give if every open payload closed now, without changing
    /// anything and without writing evidence lines. Only the winners are copied, each with its
    /// first `SNAPSHOT_SENDS_PER_PAYLOAD` sends of those that left the window; the caller
    /// adds the ones still in it (`SnapshotEntry::open`), then ranks them (`rank_snapshot`).
    pub(super) fn snapshot_top(&self) -> Vec<SnapshotEntry> {
        // (duplicate bytes, Reverse(digest), Reverse(size)) ranks as `Ranked::key`.
        type OpenRank = (u64, Reverse<[u8; 32]>, Reverse<u64>);
        if self.top_n == 0 {
            return Vec::new();
        }
        // The best `top_n` open payloads, kept in a heap whose root is the worst of them: a
        // pass over the open payloads that compares most of them on their duplicate bytes
        // alone, the rest on their digest (sorting them all was most of a snapshot's time on 4 KiB writes).
        let mut best: BinaryHeap<Reverse<(OpenRank, u32)>> = BinaryHeap::with_capacity(self.top_n + 1);
        for (id, o) in self.open.iter().enumerate() {
            if o.live() == 0 || o.sends_total < 2 {
                continue;
            }
            let dup = o.nontrivial_len.saturating_mul(o.sends_total - 1);
            if best.len() == self.top_n {
                let Some(Reverse((worst, _))) = best.peek() else { break };
                // Payloads of one size sent as often tie on duplicate bytes: the digest decides.
                if dup < worst.0 || (dup == worst.0 && (Reverse(o.digest), Reverse(o.len)) <= (worst.1, worst.2)) {
                    continue;
                }
            }
            best.push(Reverse(((dup, Reverse(o.digest), Reverse(o.len)), id as u32)));
            if best.len() > self.top_n {
                best.pop();
            }
        }
        let mut open: Vec<(OpenRank, u32)> = best.into_iter().map(|Reverse(e)| e).collect();
        open.sort_by_key(|&(rank, _)| Reverse(rank));
        let first = |sends: &[SendEvidence]| sends[..sends.len().min(SNAPSHOT_SENDS_PER_PAYLOAD)].to_vec();
        let mut out: Vec<(Option<u32>, Ranked)> = self
            .top
            .iter()
            .map(|Reverse(r)| (None, Ranked(DuplicatePayload { sends: first(&r.0.sends), ..r.0.clone_head() })))
            .collect();
        for ((dup, _, _), id) in open {
            let o = self.open[id as usize];
            let departed = self.departed.get(&id).map_or(&[][..], |d| &d[..]);
            out.push((
                Some(id),
                Ranked(DuplicatePayload {
                    digest: o.digest,
                    size: o.len,
                    sends_total: o.sends_total,
                    duplicate_bytes: dup,
                    sends: departed
                        .iter()
                        .take(SNAPSHOT_SENDS_PER_PAYLOAD)
                        .map(|s| join(self.contexts.get(s.ctx), s))
                        .collect(),
                }),
            ));
        }
        out.into_iter().map(|(open, r)| SnapshotEntry { open, payload: r.0 }).collect()
    }

    /// The top list of a snapshot, once the caller added the sends still in the window to
    /// `snapshot_top`'s entries: ranked as `finish` ranks, the first `top_n`.
    pub(super) fn rank_snapshot(&self, entries: Vec<SnapshotEntry>) -> Vec<DuplicatePayload> {
        let mut out: Vec<Ranked> = entries.into_iter().map(|e| Ranked(e.payload)).collect();
        out.sort_by(|a, b| b.cmp(a));
        out.truncate(self.top_n);
        out.into_iter().map(|r| r.0).collect()
    }

    /// Open payload `id`'s sends in the window: how many, and the low 32 bits of a sequence
    /// number at or before the first of them (`Open::first_live`).
    pub(super) fn live_sends_of(&self, id: u32) -> (u64, u32) {
        let o = self.open[id as usize];
        (o.live(), o.first_live)
    }

    /// The evidence of a send still in the window (a live snapshot).
    pub(super) fn live_send(&self, s: &StoredSend) -> SendEvidence {
        join(self.contexts.get(s.ctx), s)
    }

    /// Payloads with a send in the window, and send entries stored for them.
    pub fn open_counts(&self) -> (usize, usize) {
        (self.open.len() - self.free.len(), self.stored_sends)
    }

    /// What the open payloads hold, from lengths rather than capacities (what
    /// `max_index_bytes` bounds): their slots and lookup entries, the sends stored for them
    /// and their shared contexts (the contexts' table as hashbrown sizes it: 8/7 buckets per
    /// entry, a control byte each).
    pub fn held_bytes(&self) -> u64 {
        let (open, _) = self.open_counts();
        (open * std::mem::size_of::<Open>() + self.departed.len() * DEPARTED_ENTRY_BYTES) as u64
            + self.lookup.held_bytes()
            + self.stored_bytes_of(self.stored_sends)
    }

    /// `stored_bytes` with the room the send lists hold rather than what they hold, and
    /// the open payloads' slots and lookup table as allocated.
    pub fn allocated_bytes(&self) -> u64 {
        self.stored_bytes_of(self.stored_capacity)
            + (self.open.capacity() * std::mem::size_of::<Open>()) as u64
            + (self.departed_room * DEPARTED_ENTRY_BYTES) as u64
            + self.lookup.bytes()
    }

    fn stored_bytes_of(&self, sends: usize) -> u64 {
        let contexts = self.contexts.len() as u64;
        (sends * std::mem::size_of::<StoredSend>()) as u64
            + contexts * std::mem::size_of::<Option<(SendContext, u64)>>() as u64
            + contexts * 8 / 7 * (std::mem::size_of::<(SendContext, u32)>() as u64 + 1)
    }

    /// The top list, most duplicate bytes first, and the evidence file's write error if one
    /// happened (then the file is not there). Call after every send has left.
    pub fn finish(mut self, anomalies: &mut Anomalies) -> (Vec<DuplicatePayload>, Option<String>) {
        if let Some(w) = self.writer.as_mut() {
            if let Err(e) = w.flush() {
                anomalies.raise(Anomaly::EvidenceWriteError);
                self.write_error = Some(e.to_string());
            }
        }
        let mut out: Vec<Ranked> = self.top.drain().map(|Reverse(r)| r).collect();
        out.sort_by(|a, b| b.cmp(a));
        (out.into_iter().map(|r| r.0).collect(), self.write_error.take())
    }
}

// `Arc<str>` needs serde's "rc" feature; these keep the crate's serde features as they are.
fn arc_str<S: Serializer>(v: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(v)
}

fn opt_arc_str<S: Serializer>(v: &Option<Arc<str>>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_some(&**v),
        None => s.serialize_none(),
    }
}

fn offset_or_null<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    match *v {
        crate::payload::send::UNKNOWN_OFFSET => s.serialize_none(),
        v => s.serialize_some(&v),
    }
}

fn hex_u64<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("0x{v:016x}"))
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

fn hex_bytes<S: Serializer, const N: usize>(v: &[u8; N], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_send_is_a_quarter_of_its_evidence() {
        assert!(std::mem::size_of::<StoredSend>() <= 64, "{}", std::mem::size_of::<StoredSend>());
        assert!(std::mem::size_of::<SendEvidence>() >= 4 * std::mem::size_of::<StoredSend>() - 16);
    }

    fn send(conn: u64, message_id: u64, file_name: &Arc<str>, node: &Arc<str>) -> SendEvidence {
        SendEvidence {
            file: 1,
            frames: [message_id * 3 + 1, message_id * 3 + 2],
            header_frame: message_id.is_multiple_of(2).then_some(message_id * 3),
            time: message_id as f64 / 1e9,
            time_ns: message_id,
            src: "198.18.0.1".parse().unwrap(),
            dst: "198.18.0.2".parse().unwrap(),
            src_port: Some(49152),
            dst_port: Some(445),
            community_id: None,
            src_node: node.clone(),
            dst_node: node.clone(),
            kind: SendKind::Write,
            session: 7,
            tree: 1,
            file_id: [3; 16],
            file_name: Some(file_name.clone()),
            share: None,
            offset: message_id * 4096,
            transport: Transport::Tcp,
            conn,
            message_id,
            class: None,
            dup_kind: None,
            n: 0,
        }
    }

    #[test]
    fn sends_share_their_context_and_come_back_whole() {
        let mut ev = Evidence::new(None, 10);
        let mut an = Anomalies::default();
        let (name, node): (Arc<str>, Arc<str>) = ("a.vhdx".into(), "n1".into());
        // Payload 1 sent twice (message 1 and 2), payload 2 once, on two connections.
        let sends = [(1, 1, ([1; 32], 4096)), (2, 2, ([1; 32], 4096)), (1, 3, ([2; 32], 4096))];
        let mut live = Vec::new();
        for &(conn, m, key) in &sends {
            let id = ev.on_send(&key, 4096, 0);
            let (c, mut stored) = split(send(conn, m, &name, &node));
            stored.ctx = ev.intern(c);
            live.push((id, stored));
        }
        assert_eq!(live[0].0, live[1].0, "one id for one payload");
        assert_ne!(live[0].0, live[2].0);
        assert_eq!(ev.contexts.len(), 2, "one context per connection");
        assert_eq!(ev.open_counts(), (2, 0), "nothing stored while the sends are in the window");
        assert_eq!(ev.duplicated_payloads(), 1);
        ev.on_leave(live[0].0, 0, live[0].1, (Class::Client, SendDupKind::PerCopy), &mut an);
        assert_eq!(ev.open_counts(), (2, 1), "a send that left before its payload is stored");
        for &(id, stored) in &live[1..] {
            ev.on_leave(id, 0, stored, (Class::Client, SendDupKind::PerCopy), &mut an);
        }
        assert_eq!(ev.open_counts(), (0, 0));
        assert_eq!(ev.contexts.len(), 0, "released with the payloads");
        assert_eq!(ev.contexts.free.len(), 2);
        assert_eq!(ev.duplicated_payloads(), 1);
        let (top, error) = ev.finish(&mut an);
        assert!(error.is_none());
        assert_eq!(top.len(), 1);
        let got = serde_json::to_value(&top[0].sends).unwrap();
        let mut want = vec![send(1, 1, &name, &node), send(2, 2, &name, &node)];
        for w in &mut want {
            w.class = Some(Class::Client);
            w.dup_kind = Some(SendDupKind::PerCopy);
        }
        assert_eq!(got, serde_json::to_value(&want).unwrap());
    }

    /// A payload's id is reused once it closed; a payload that closed and comes back is a
    /// new open payload (and a second line of evidence).
    #[test]
    fn closed_payloads_free_their_slot() {
        let mut ev = Evidence::new(None, 10);
        let mut an = Anomalies::default();
        let (name, node): (Arc<str>, Arc<str>) = ("a.vhdx".into(), "n1".into());
        for round in 0..3u64 {
            let mut live = Vec::new();
            for m in 0..4u64 {
                let key = ([(m % 2) as u8 + 1; 32], 4096);
                let id = ev.on_send(&key, 4096, 0);
                let (c, mut stored) = split(send(1, round * 10 + m, &name, &node));
                stored.ctx = ev.intern(c);
                live.push((id, stored));
            }
            assert_eq!(ev.open_counts().0, 2);
            for (id, stored) in live {
                ev.on_leave(id, 0, stored, (Class::Client, SendDupKind::PerCopy), &mut an);
            }
            assert_eq!(ev.open_counts(), (0, 0));
        }
        assert_eq!(ev.open.len(), 2, "slots reused");
        assert_eq!(ev.duplicated_payloads(), 6);
        assert_eq!(ev.contexts.len(), 0);
    }

    /// Sends that left the window before their payload closed are kept by the payload's id
    /// (`departed`), come back first and in order, numbered by when they left, and the room a
    /// burst of them took goes once their payloads closed.
    #[test]
    fn departed_sends_come_back_in_order_and_their_room_goes() {
        const N: u64 = 5000;
        let mut ev = Evidence::new(None, N as usize);
        let mut an = Anomalies::default();
        let (name, node): (Arc<str>, Arc<str>) = ("a.vhdx".into(), "n1".into());
        let key = |p: u64| {
            let mut d = [0u8; 32];
            d[..8].copy_from_slice(&(p + 1).to_le_bytes());
            (d, 4096)
        };
        // Each payload sent three times; the first two leave while the third is in the window.
        let mut live = Vec::new();
        for p in 0..N {
            for k in 0..3 {
                let id = ev.on_send(&key(p), 4096, 0);
                let (c, mut stored) = split(send(1, p * 3 + k, &name, &node));
                stored.ctx = ev.intern(c);
                live.push((id, stored));
            }
        }
        for (id, stored) in live.iter().filter(|(_, s)| s.message_id % 3 != 2) {
            ev.on_leave(*id, 0, *stored, (Class::Client, SendDupKind::PerCopy), &mut an);
        }
        assert_eq!(ev.open_counts(), (N as usize, 2 * N as usize));
        assert_eq!(ev.departed.len(), N as usize);
        let peak = ev.departed.capacity();
        assert_eq!(ev.departed_room, table_room(N as usize));
        assert!(ev.departed_room >= N as usize && ev.departed_room <= peak);
        assert!(ev.allocated_bytes() >= (ev.departed_room * DEPARTED_ENTRY_BYTES) as u64);
        for (id, stored) in live.iter().filter(|(_, s)| s.message_id % 3 == 2) {
            ev.on_leave(*id, 0, *stored, (Class::Client, SendDupKind::PerCopy), &mut an);
        }
        assert_eq!(ev.open_counts(), (0, 0));
        assert!(ev.departed.is_empty());
        assert!(ev.departed.capacity() < peak / 4, "{} of {peak}", ev.departed.capacity());
        assert!(ev.departed_room < peak / 4, "{} of {peak}", ev.departed_room);
        assert_eq!(ev.contexts.len(), 0);
        let (top, _) = ev.finish(&mut an);
        assert_eq!(top.len(), N as usize);
        for d in &top {
            assert_eq!(d.sends_total, 3);
            let first = d.sends[0].message_id;
            assert_eq!(d.sends.iter().map(|s| (s.message_id - first, s.n)).collect::<Vec<_>>(), [(0, 0), (1, 1), (2, 2)]);
        }
    }

    /// hashbrown's capacity for a table grown to `n` entries, which `table_room` counts.
    #[test]
    fn table_room_is_what_a_grown_table_holds() {
        for n in [0usize, 1, 3, 4, 7, 8, 14, 15, 28, 29, 100, 1000, 5000, 70_000] {
            let mut m: std::collections::HashMap<u32, u8, crate::fasthash::FastState> = Default::default();
            for k in 0..n as u32 {
                m.insert(k, 0);
            }
            assert_eq!(table_room(n), m.capacity(), "{n}");
        }
    }

    /// The estimate of the evidence's memory is the same however the departed map's seed
    /// places its entries: payloads kept open across the window's end, closed in a scattered
    /// order, on maps of many seeds (before `departed_room`, the estimate moved by an entry's
    /// bytes with the seed: fuzz/differential.py, 2026-12-06).
    #[test]
    fn the_evidence_memory_estimate_does_not_depend_on_the_map_seed() {
        let (name, node): (Arc<str>, Arc<str>) = ("a.vhdx".into(), "n1".into());
        let mut seen = std::collections::BTreeSet::new();
        let mut peaks = std::collections::BTreeSet::new();
        for _ in 0..24 {
            let mut ev = Evidence::new(None, 10);
            let mut an = Anomalies::default();
            let mut live = Vec::new();
            let mut peak = 0u64;
            for p in 0..300u64 {
                let mut d = [0u8; 32];
                d[..8].copy_from_slice(&(p + 1).to_le_bytes());
                for k in 0..2 {
                    let id = ev.on_send(&(d, 4096), 4096, 0);
                    let (c, mut stored) = split(send(1, p * 2 + k, &name, &node));
                    stored.ctx = ev.intern(c);
                    live.push((id, stored));
                }
                // The first send of each leaves at once; the second of every earlier third
                // payload, in a scattered order, closes it.
                let (id, stored) = live[(p * 2) as usize];
                ev.on_leave(id, 0, stored, (Class::Client, SendDupKind::PerCopy), &mut an);
                if p % 3 == 2 {
                    for q in [p - 2, p] {
                        let (id, stored) = live[(q * 2 + 1) as usize];
                        ev.on_leave(id, 0, stored, (Class::Client, SendDupKind::PerCopy), &mut an);
                    }
                }
                peak = peak.max(ev.allocated_bytes());
            }
            seen.insert(ev.allocated_bytes());
            peaks.insert(peak);
        }
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(peaks.len(), 1, "{peaks:?}");
    }

    /// A writer that takes `room` bytes, then fails as a full disk does.
    struct Full {
        room: usize,
        tries: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }
    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if self.room == 0 {
                return Err(std::io::Error::from_raw_os_error(28));
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The evidence file's first write error stops the writing (one anomaly, no more tries:
    /// a full disk was tried, and counted, once per duplicated payload) and `finish` gives it,
    /// for the run to fail with.
    #[test]
    fn a_write_error_stops_the_evidence_and_is_handed_on() {
        let tries = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut ev = Evidence::new(Some(Box::new(Full { room: 300, tries: tries.clone() })), 10);
        let mut an = Anomalies::default();
        let (name, node): (Arc<str>, Arc<str>) = ("a.vhdx".into(), "n1".into());
        for round in 0..20u64 {
            let mut live = Vec::new();
            for m in 0..2u64 {
                let id = ev.on_send(&([round as u8; 32], 4096), 4096, 0);
                let (c, mut stored) = split(send(1, round * 10 + m, &name, &node));
                stored.ctx = ev.intern(c);
                live.push((id, stored));
            }
            for (id, stored) in live {
                ev.on_leave(id, 0, stored, (Class::Client, SendDupKind::PerCopy), &mut an);
            }
        }
        assert_eq!(ev.duplicated_payloads(), 20);
        let after = tries.load(std::sync::atomic::Ordering::Relaxed);
        let (top, error) = ev.finish(&mut an);
        assert_eq!(top.len(), 10, "the figures and the top list are kept");
        assert!(error.is_some_and(|e| e.contains("No space left on device")));
        assert_eq!(an.iter().map(|(_, n)| n).sum::<u64>(), 1, "counted once");
        assert_eq!(tries.load(std::sync::atomic::Ordering::Relaxed), after, "nothing tried after the error");
    }
}
