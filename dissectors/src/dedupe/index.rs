//! The sliding-window block index and send table.
//!
//! Sends stay in the table (with their block lists) for one window, because redirection is
//! decided by what the receiver sends later. A send is folded into the per-(edge, class)
//! figures when it leaves the window (`advance`) or at `finish`, and every map entry that
//! points at it is dropped then: memory is bounded by what crossed within one window, and
//! additionally by `DedupeConfig::max_live_blocks`.
//!
//! Layout (about 30-45 bytes per live block): every live block, in send order, is one
//! 21-byte record in a ring (`blocks`: its 16-byte digest, a 4-byte link, flags) addressed by
//! a running block position; a send holds the position of its first block. The three lookup
//! tables (per edge, global, per receiver) hold only 4-byte positions: their keys (digest,
//! edge, receiver) are read back from the ring and the send, so a digest is stored once.
//! They grow a few entries per insert (`postable`), so no send stalls the stage on a rehash.
//!
//! Per live send (what dominates on 4 KiB I/O, where every block is a send): a 32-byte
//! record in the send table with what the index decides with (`LiveSend`: its window time
//! from its group's base, `TimeBases`, its MessageId in 32 bits; a value too wide for its
//! field kept whole beside it, `Wide`); the send's
//! evidence fields, which only its leaving the window reads, as differences from the
//! previous send's in a byte stream (`cold`);
//! a 5-byte slot in `messages`; and either its payload's evidence entry (`Evidence`, shared by
//! the payload's sends) or, for a one-block payload no other send in the window carries, a
//! 5-byte slot in `singles`. The send table, the block ring and the stream grow in chunks
//! (`ring`).

use super::cold::{Cold, ColdLog};
use super::attribution::{block_class, dup_kind, Class, DecidedBy, DupKind, Ends, Repeated};
use super::evidence::{Evidence, PayloadKey, SendContext, SendDupKind, StoredSend, NO_FRAME, NO_PAYLOAD};
use super::figures::{DecidedBytes, EdgeReport, Figures, IndexStats, Totals};
use super::series::Series;
use super::topology::{NodeIdx, Topology};
use super::{DedupeConfig, SendKind, SendRecord};
use crate::anomaly::Anomalies;
use crate::ledger::{Event, LedgerError, LedgerWriter};
use crate::fasthash::FastMap;
use crate::payload::BLOCK_SIZE;
use super::postable::{fold_mul, PosTable};
use super::ring::Ring;
use std::sync::Arc;
use super::Anomaly;

pub use super::figures::DedupeReport;

const F_TRIVIAL: u8 = 1;
const F_GLOBAL_UNIQUE: u8 = 2;
const F_FORWARDED: u8 = 4;
/// Two bits: `DupKind` (0 unique, 1 per-copy, 2 repeated content).
const F_DUP_SHIFT: u8 = 3;
/// This (WRITE) block's sender had received it in a WRITE within the window: it writes it on.
const F_FORWARD_OF: u8 = 32;

/// One live block: 21 bytes, no padding (every field is bytes).
#[derive(Clone, Copy)]
struct LiveBlock {
    hash: [u8; 16],
    /// Positions back to the previous WRITE instance of this block into the same receiver
    /// not yet marked forwarded (0: none).
    prev_inbound: [u8; 4],
    flags: u8,
}

impl LiveBlock {
    fn new(hash: [u8; 16], trivial: bool) -> Self {
        LiveBlock { hash, prev_inbound: [0; 4], flags: if trivial { F_TRIVIAL } else { 0 } }
    }
    fn trivial(&self) -> bool {
        self.flags & F_TRIVIAL != 0
    }
    fn global_unique(&self) -> bool {
        self.flags & F_GLOBAL_UNIQUE != 0
    }
    /// The receiver of this (WRITE) block wrote it on to another node within the window.
    fn forwarded(&self) -> bool {
        self.flags & F_FORWARDED != 0
    }
    /// The sender of this (WRITE) block received it in a WRITE earlier within the window.
    fn forward_of(&self) -> bool {
        self.flags & F_FORWARD_OF != 0
    }
    fn dup(&self) -> DupKind {
        match (self.flags >> F_DUP_SHIFT) & 3 {
            0 => DupKind::Unique,
            1 => DupKind::PerCopy,
            _ => DupKind::RepeatedContent,
        }
    }
    fn set_dup(&mut self, d: DupKind) {
        let v = match d {
            DupKind::Unique => 0,
            DupKind::PerCopy => 1,
            DupKind::RepeatedContent => 2,
        };
        self.flags = (self.flags & !(3 << F_DUP_SHIFT)) | (v << F_DUP_SHIFT);
    }
    fn prev_inbound(&self) -> u32 {
        u32::from_le_bytes(self.prev_inbound)
    }
}

/// A send in the window: what the index decides with. 32 bytes: on 4 KiB I/O every block is
/// a send, so this is most of a live block's cost; what only its evidence needs (frames, own
/// capture time, offset, context, file) is in `Dedupe::cold`. Its window time is kept in 32
/// bits from its group's base (`TimeBases`), the response time from its window time, the
/// MessageId in 32 bits; each of them, or a connection number past 2^31, when it does not
/// fit, is kept whole in `Dedupe::wide` by the send's sequence number, and the compact field
/// says so.
#[derive(Clone, Copy)]
struct LiveSend {
    /// Its MessageId (`WIDE_U32`: in `wide`).
    message_id: u32,
    /// Time used for the window (capture time, never earlier than the previous send's), from
    /// its group's base in `Dedupe::bases` (`WIDE_U32`: in `wide`).
    ts: u32,
    /// Its connection's number in the report (`pack_conn`; `WIDE_U32`: in `wide`).
    conn: u32,
    /// When its response was seen, from `ts_ns` (`NOT_COMPLETED`: not yet; `WIDE_I32`: in
    /// `wide`).
    completed: i32,
    /// Position of its first block in the ring (low 32 bits: `full_pos`), and the last
    /// one's length (the others are `BLOCK_SIZE`: blocks are aligned to the payload's start).
    /// Its blocks run to the next send's first one (the ring's end for the newest send):
    /// the block count is not kept (`span_of`).
    first_pos: u32,
    edge: u32,
    /// Its payload's open id in `Evidence` (`NO_PAYLOAD` when empty, `SINGLE` for a one-block
    /// payload no other send in the window carries): sends in the window with the same
    /// payload have the same open id.
    payload: u32,
    last_len: u16,
    /// Its kind, ends and rule (`pack_flags`).
    flags: u8,
}

const _: () = assert!(std::mem::size_of::<LiveSend>() == 32);

/// Values of live sends too wide for their `LiveSend` fields, by sequence number.
#[derive(Clone, Copy, Default)]
struct Wide {
    conn: u64,
    completed_ns: u64,
    message_id: u64,
    ts_ns: u64,
}

/// Sends per group of `TimeBases`.
const TIME_GROUP_SHIFT: u32 = 10;

/// The window time of the first send of each group of `2^TIME_GROUP_SHIFT` consecutive
/// sequence numbers with a live send: a live send's time is kept from its group's (8 bytes per
/// 1024 sends). Sends arrive in window-time order, so no send is earlier than its group's base.
#[derive(Default)]
struct TimeBases {
    /// Group number (sequence number >> `TIME_GROUP_SHIFT`) of `bases[0]`.
    first: u64,
    bases: std::collections::VecDeque<u64>,
}

impl TimeBases {
    /// The compact time of a new send `seq` at `ts_ns` (sequence numbers come one by one).
    fn push(&mut self, seq: u64, ts_ns: u64) -> u32 {
        let group = seq >> TIME_GROUP_SHIFT;
        if self.bases.is_empty() {
            self.first = group;
        }
        if group >= self.first + self.bases.len() as u64 {
            self.bases.push_back(ts_ns);
        }
        self.compact(seq, ts_ns)
    }

    fn base(&self, seq: u64) -> u64 {
        self.bases[((seq >> TIME_GROUP_SHIFT) - self.first) as usize]
    }

    /// `ts_ns` from `seq`'s base in 32 bits, `WIDE_U32` when it does not fit.
    fn compact(&self, seq: u64, ts_ns: u64) -> u32 {
        ts_ns.checked_sub(self.base(seq)).map_or(WIDE_U32, compact_u32)
    }

    /// The window time of live send `seq` (`e`); `wide` is its entry in `Dedupe::wide`.
    #[inline]
    fn time(&self, e: &LiveSend, seq: u64, wide: impl FnOnce() -> Wide) -> u64 {
        match e.ts {
            WIDE_U32 => wide().ts_ns,
            d => self.base(seq) + u64::from(d),
        }
    }

    /// The live sends now start at `front_seq` (none live: `None`).
    fn drop_before(&mut self, front_seq: Option<u64>) {
        match front_seq {
            None => self.bases.clear(),
            Some(seq) => {
                while self.first < seq >> TIME_GROUP_SHIFT && !self.bases.is_empty() {
                    self.bases.pop_front();
                    self.first += 1;
                }
            }
        }
    }

    fn bytes(&self) -> u64 {
        (self.bases.capacity() * 8) as u64
    }

    fn held_bytes(&self) -> u64 {
        (self.bases.len() * 8) as u64
    }
}

/// A compact field whose value is in `Dedupe::wide`.
const WIDE_U32: u32 = u32::MAX;
const WIDE_I32: i32 = i32::MIN;
/// `LiveSend::completed` before the response is seen. Compared as "completed after the
/// later send started", it says the same as no completion (no later send starts after it).
const NOT_COMPLETED: i32 = i32::MAX;
/// A `Dedupe::wide` entry: its key, value and control byte.
const WIDE_ENTRY_BYTES: usize = 8 + std::mem::size_of::<Wide>() + 1;

/// `v` in a compact unsigned field: `WIDE_U32` when it does not fit or would read as it.
fn compact_u32(v: u64) -> u32 {
    u32::try_from(v).ok().filter(|&c| c != WIDE_U32).unwrap_or(WIDE_U32)
}

/// Memory of `Dedupe::wide` once it has held `peak` entries: the slots of the table that
/// many entries need (it does not shrink). Its allocation is not read: the map is seeded per
/// process, and when it grows or rehashes over removed entries depends on where keys fall,
/// so the figure would differ from run to run.
fn wide_bytes(peak: usize) -> u64 {
    let slots = match peak {
        0 => 0,
        1..=3 => 4,
        4..=7 => 8,
        n => (n * 8 / 7).next_power_of_two(),
    };
    (slots * WIDE_ENTRY_BYTES) as u64
}

/// `value - base` in a compact signed field: `WIDE_I32` when it does not fit or would read
/// as one of the field's reserved values (`WIDE_I32`, `NOT_COMPLETED`).
fn rel_i32(value: u64, base: u64) -> i32 {
    i32::try_from(i128::from(value) - i128::from(base)).ok().filter(|&d| d != WIDE_I32 && d != NOT_COMPLETED).unwrap_or(WIDE_I32)
}

/// A connection number (`Dedupe::conn_number`: 1, 2, ... and `ROCE_CONN_BASE` + 1, 2, ...)
/// in 31 bits and a flag; `None` for one past them (numbers given after the cap).
fn pack_conn(conn: u64) -> Option<u32> {
    use crate::payload::send::ROCE_CONN_BASE;
    let (n, rdma) = match conn.checked_sub(ROCE_CONN_BASE) {
        Some(n) => (n, 1u32 << 31),
        None => (conn, 0),
    };
    u32::try_from(n).ok().filter(|&n| n < (1 << 31) - 1).map(|n| n | rdma)
}

fn unpack_conn(v: u32) -> u64 {
    let n = u64::from(v & ((1 << 31) - 1));
    if v >> 31 == 1 {
        crate::payload::send::ROCE_CONN_BASE + n
    } else {
        n
    }
}

/// Kind (bit 0: READ), ends (bits 1-3), rule (bits 4-6: 0 none, else its class index + 1).
fn pack_flags(kind: SendKind, ends: Ends, rule: Option<Class>) -> u8 {
    u8::from(kind == SendKind::Read)
        | u8::from(ends.src_member) << 1
        | u8::from(ends.dst_member) << 2
        | u8::from(ends.known) << 3
        | rule.map_or(0, |c| c.index() as u8 + 1) << 4
}

/// Chunks of the send table (1024 sends, 48 KiB) and of the block ring (4096 blocks, 84 KiB):
/// a small window holds little, and a large one grows a chunk at a time (`Ring`).
const SEND_CHUNK_SHIFT: u32 = 10;
const BLOCK_CHUNK_SHIFT: u32 = 12;

/// `LiveSend::payload` of a one-block payload that no other send in the window carries: no
/// evidence entry is opened for it (most 4 KiB payloads are sent once); `Dedupe::singles`
/// finds it when a second send comes, which opens one for both.
const SINGLE: u32 = NO_PAYLOAD - 1;

/// `Dedupe::singles` hash of a one-block payload: its block's digest (BLAKE3 output: the
/// first 8 bytes suffice) and length. Equal digests and lengths are one payload (the payload
/// digest is a function of its one block's).
#[inline]
fn h_single(hash: &[u8; 16], len: u32) -> u64 {
    fold_mul(u64::from_le_bytes(hash[..8].try_into().unwrap()) ^ u64::from(len).wrapping_mul(HK1), HK2)
}

/// The `singles` key of a live `SINGLE` send: its one block's digest (in the ring, whose
/// front is at position `front`) and length.
#[inline]
fn single_key(e: &LiveSend, ring: &Ring<LiveBlock, BLOCK_CHUNK_SHIFT>, front: u64) -> ([u8; 16], u32) {
    (ring[(full_pos(front, e.first_pos) - front) as usize].hash, u32::from(e.last_len))
}

/// Live sends at most: `messages` holds 32-bit sequence numbers.
const MAX_LIVE_SENDS: usize = 1 << 31;

impl LiveSend {
    fn kind(&self) -> SendKind {
        if self.flags & 1 == 1 {
            SendKind::Read
        } else {
            SendKind::Write
        }
    }

    fn ends(&self) -> Ends {
        let f = self.flags;
        Ends { src_member: f & 2 != 0, dst_member: f & 4 != 0, known: f & 8 != 0 }
    }

    fn rule(&self) -> Option<Class> {
        match (self.flags >> 4) & 7 {
            0 => None,
            i => Some(Class::ALL[i as usize - 1]),
        }
    }

    /// Its connection number; `wide` is the send's entry in `Dedupe::wide` (read only when
    /// a field says so).
    fn conn(&self, wide: impl FnOnce() -> Wide) -> u64 {
        match self.conn {
            WIDE_U32 => wide().conn,
            v => unpack_conn(v),
        }
    }

    /// Its MessageId; `wide` as for `conn`.
    fn message_id(&self, wide: impl FnOnce() -> Wide) -> u64 {
        match self.message_id {
            WIDE_U32 => wide().message_id,
            v => u64::from(v),
        }
    }

    /// When its response was seen, its own window time being `own_ns`.
    fn completed_ns(&self, own_ns: u64, wide: impl FnOnce() -> Wide) -> Option<u64> {
        match self.completed {
            NOT_COMPLETED => None,
            WIDE_I32 => Some(wide().completed_ns),
            d => Some(own_ns.wrapping_add_signed(i64::from(d))),
        }
    }

    /// Was it still outstanding at `ts_ns`, its own window time being `own_ns`?
    fn outstanding_at(&self, own_ns: u64, ts_ns: u64, wide: impl FnOnce() -> Wide) -> bool {
        self.completed_ns(own_ns, wide).is_none_or(|c| c > ts_ns)
    }

    /// Its evidence, with its fields from `Dedupe::cold`, its window time `own_ns` and its
    /// MessageId.
    fn stored(&self, cold: &Cold, own_ns: u64, message_id: u64) -> StoredSend {
        StoredSend {
            frames: [cold.frame, cold.last_frame],
            header_frame: cold.header_frame.unwrap_or(NO_FRAME),
            time_ns: own_ns - cold.time_back,
            offset: cold.offset,
            message_id,
            n: 0,
            ctx: cold.ctx,
            file: cold.file,
            class: None,
            dup_kind: None,
        }
    }

    /// Has it a field kept in `Dedupe::wide`?
    fn has_wide(&self) -> bool {
        self.conn == WIDE_U32 || self.completed == WIDE_I32 || self.message_id == WIDE_U32 || self.ts == WIDE_U32
    }

    /// Length of its block `i` of `n`.
    fn block_len(&self, i: usize, n: usize) -> u64 {
        if i + 1 == n {
            self.last_len as u64
        } else {
            BLOCK_SIZE as u64
        }
    }
}

/// The `Dedupe::wide` entry of live send `seq` (one of whose fields says it has one).
fn wide_of(wide: &FastMap<u64, Wide>, seq: u64) -> Wide {
    let w = wide.get(&seq).copied();
    debug_assert!(w.is_some(), "send {seq} has a wide field");
    w.unwrap_or_default()
}

/// A 32-bit table entry back to the block's running position: live positions span less than
/// 2^32 (`MAX_LIVE_BLOCKS_LIMIT`), so the low 32 bits identify one.
#[inline]
fn full_pos(front_pos: u64, p: u32) -> u64 {
    front_pos + u64::from(p.wrapping_sub(front_pos as u32))
}

/// First block position and block count of live send `i`, the live blocks starting at
/// `front` and numbering `live`: its blocks run to the next send's first (to the ring's end
/// for the newest, whose blocks may still be coming).
#[inline]
fn span_of(sends: &Ring<LiveSend, SEND_CHUNK_SHIFT>, front: u64, live: usize, i: usize) -> (u64, u32) {
    let first = full_pos(front, sends[i].first_pos);
    let end = sends.get(i + 1).map_or(front + live as u64, |next| full_pos(front, next.first_pos));
    (first, (end - first) as u32)
}

/// The blocks of live send `i`, the ring starting at position `front` (`Dedupe::send_blocks`,
/// for callers holding the index's fields apart).
fn blocks_of<'a>(sends: &Ring<LiveSend, SEND_CHUNK_SHIFT>, blocks: &'a Ring<LiveBlock, BLOCK_CHUNK_SHIFT>, front: u64, i: usize) -> impl ExactSizeIterator<Item = &'a LiveBlock> + 'a {
    let (first, n) = span_of(sends, front, blocks.len(), i);
    let start = (first - front) as usize;
    blocks.range(start, start + n as usize)
}

/// Index in `sends` of the send holding block position `pos` (which must be live), the live
/// blocks starting at `front` and numbering `live`.
#[inline]
fn send_at(sends: &Ring<LiveSend, SEND_CHUNK_SHIFT>, front: u64, live: usize, pos: u64) -> usize {
    locate(sends.len(), |i| span_of(sends, front, live, i), front, live, pos)
}

/// Start loading the send record `send_at` reads first for block position `pos` (its first
/// interpolation guess): a growing table's moves look up the send of every entry they move
/// (its edge or receiver is part of the key), a cache miss each after the block's own.
#[inline]
fn prefetch_send_at(sends: &Ring<LiveSend, SEND_CHUNK_SHIFT>, front: u64, live: usize, pos: u64) {
    let n = sends.len() as u64;
    if n == 0 || live == 0 || pos < front {
        return;
    }
    let off = pos - front;
    let i = off.checked_mul(n).map_or(n - 1, |x| x / live as u64).min(n - 1);
    if let Some(s) = sends.get(i as usize) {
        crate::hint::prefetch_one(s);
    }
}

/// Of `n` consecutive spans (first position, length) starting at `front` and covering `live`
/// positions, the one holding `pos`. Interpolation first: the span where `pos` would be if
/// the spans between the bounds known so far were all as long, then the bounds narrowed to
/// that span's side. Sends of one I/O size are found at the first or second try (the second
/// when the newest send is still being filled; 4 KiB random I/O: one block each), mixed
/// sizes in a few (a bisection over the send table was 8% of the ordered stage on 4 KiB I/O,
/// and most of moving a grown table's entries, each a cache miss per step); bisection after
/// `INTERPOLATE` tries.
#[inline]
fn locate(n: usize, span: impl Fn(usize) -> (u64, u32), front: u64, live: usize, pos: u64) -> usize {
    const INTERPOLATE: u32 = 4;
    let (mut lo, mut hi) = (0usize, n);
    let (mut lo_pos, mut hi_pos) = (front, front + live as u64);
    for _ in 0..INTERPOLATE {
        if lo >= hi || pos < lo_pos || pos >= hi_pos {
            break;
        }
        // In 64 bits (a 128-bit division is a library call): positions and counts are
        // below 2^32, so the product fits.
        let (off, width, count) = (pos - lo_pos, hi_pos - lo_pos, (hi - lo) as u64);
        let step = match off.checked_mul(count) {
            Some(x) => x / width,
            None => (off as u128 * count as u128 / width as u128) as u64,
        };
        let guess = lo + step.min(count - 1) as usize;
        let (first, len) = span(guess);
        if pos < first {
            (hi, hi_pos) = (guess, first);
        } else if pos >= first + u64::from(len) {
            (lo, lo_pos) = (guess + 1, first + u64::from(len));
        } else {
            return guess;
        }
    }
    let ends_before = |i: usize| {
        let (first, len) = span(i);
        first + u64::from(len) <= pos
    };
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ends_before(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Default bound on node-to-node edges (`DedupeConfig::max_edges`).
pub const DEFAULT_MAX_EDGES: usize = 65_536;

const HK0: u64 = 0xa076_1d64_78bd_642f;
const HK1: u64 = 0xe703_7ed1_a0b4_28db;
const HK2: u64 = 0x8ebc_6af0_9c88_c6e3;

/// Table hashes. Block digests are BLAKE3 output (uniform, not steerable without a
/// preimage), so their first 8 bytes suffice; the edge / receiver is mixed in.
#[inline]
fn h_global(h: &[u8; 16]) -> u64 {
    fold_mul(u64::from_le_bytes(h[..8].try_into().unwrap()) ^ HK2, HK0)
}
#[inline]
fn h_edge(edge: u32, h: &[u8; 16]) -> u64 {
    fold_mul(u64::from_le_bytes(h[..8].try_into().unwrap()) ^ u64::from(edge).wrapping_add(1).wrapping_mul(HK1), HK0)
}
#[inline]
fn h_node(node: NodeIdx, h: &[u8; 16]) -> u64 {
    fold_mul(u64::from_le_bytes(h[..8].try_into().unwrap()) ^ u64::from(node.0).wrapping_add(1).wrapping_mul(HK2), HK1)
}

/// How many blocks ahead the index starts loading the table slots a block will need: the
/// tables are larger than the caches, and each block's lookups would otherwise wait on
/// memory one after the other.
const PREFETCH_BLOCKS: usize = 8;

/// Largest accepted live-block bound: table entries are 32-bit positions.
pub const MAX_LIVE_BLOCKS_LIMIT: usize = 1 << 31;

#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
struct ClassAcc {
    figures: Figures,
    decided: DecidedBytes,
    /// Of `figures.payload_bytes`: bytes of sends still in the window whose class can still
    /// change (a WRITE whose receiver may yet forward it). Only snapshots have any.
    pending: u64,
}

impl ClassAcc {
    fn add(&mut self, o: &ClassAcc) {
        self.figures.add(&o.figures);
        self.decided.add(&o.decided);
        self.pending += o.pending;
    }

    fn sub(&mut self, o: &ClassAcc) {
        self.figures.sub(&o.figures);
        self.decided.sub(&o.decided);
        self.pending -= o.pending;
    }
}

struct EdgeState {
    src: NodeIdx,
    dst: NodeIdx,
    /// Payload of the edge's latest send.
    last_payload: Option<PayloadKey>,
    /// Sequence number of the first send of the edge's latest run of sends of one payload:
    /// an earlier send of that payload on the edge at or after it had only that payload
    /// between it and now.
    run_seq: u64,
    acc: [ClassAcc; Class::COUNT],
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
    sends: Ring<LiveSend, SEND_CHUNK_SHIFT>,
    /// What does not fit the compact fields of a live send, by its sequence number (`Wide`).
    wide: FastMap<u64, Wide>,
    /// Most entries `wide` has held at once (its memory figure: `wide_bytes`).
    wide_peak: usize,
    /// The base each live send's window time is kept from.
    bases: TimeBases,
    /// The evidence fields of the live sends, in the order of `sends`.
    cold: ColdLog,
    /// Every block of every live send, in order; `blocks[0]` is at position `front_pos`.
    blocks: Ring<LiveBlock, BLOCK_CHUNK_SHIFT>,
    front_pos: u64,
    /// (conn, MessageId, kind) → its live send's sequence number (low 32 bits; the key is
    /// read back from the send). Keys are chosen by whoever sends the traffic, so the hash
    /// is seeded per process (`msg_key`).
    messages: PosTable,
    msg_key: crate::fasthash::FastState,
    /// One-block payloads sent once in the window (`SINGLE`) → that send's sequence number
    /// (low 32 bits; the key, block digest and length, read back from the send and the ring).
    singles: PosTable,
    edge_ids: FastMap<(NodeIdx, NodeIdx), u32>,
    edges: Vec<EdgeState>,
    /// (edge, block digest) → position of the latest block instance on that edge.
    edge_blocks: PosTable,
    /// Block digest → position of the latest instance on any edge.
    global_blocks: PosTable,
    /// (receiver, block digest) → latest WRITE instance into that node not yet marked forwarded.
    inbound: PosTable,
    globally_unique_bytes: u64,
    stats: IndexStats,
    anomalies: Anomalies,
    evidence: Evidence,
    /// Folded figures per time interval (the result's `series`).
    series: Series,
    /// Every event this stage receives, recorded for `smbwire attribute` (`--ledger`).
    ledger: Option<LedgerTap>,
    /// Connection numbers of the report: the stages name a connection by its opening frame's
    /// run-wide number (`FrameCtx::seq`); here connections are numbered 1, 2, ... (RDMA ones
    /// from `ROCE_CONN_BASE`) in the order their first send arrives, the same for one
    /// pipeline, `--threads` and a ledger replay.
    /// With each, its Community ID (the same for every send of a connection, either way):
    /// worked out once, not per send.
    conn_numbers: FastMap<u64, (u64, Option<crate::community::CommunityId>)>,
    next_conn_number: [u64; 2],
    /// The live sends' provisional figures, kept from the first snapshot on (`snapshot`).
    live_figures: Option<LiveFigures>,
}

/// The sum of every live send's provisional figures (`send_figures`), kept up to date once a
/// snapshot asked for it, so a live view every second does not walk the window: a send adds
/// its figures when it comes and takes them out when it leaves; one whose blocks forwarding
/// marks (the only change to a live send's figures) has its figures taken out and is listed
/// in `changed`, and the next snapshot adds them back as they are then. Offline runs never
/// snapshot and pay nothing. Before it, a snapshot summed every live send: about 370 ns a
/// send on 4 KiB I/O, 12 ns a block on 1 MiB writes, every second in the capture thread.
#[derive(Default)]
struct LiveFigures {
    /// Per edge (as `edges`), per class.
    acc: Vec<[ClassAcc; Class::COUNT]>,
    globally_unique: u64,
    /// Sequence numbers of live sends whose figures are out of `acc` until the next snapshot.
    changed: crate::fasthash::FastSet<u64>,
}

impl LiveFigures {
    fn add(&mut self, edge: u32, (part, unique): &([ClassAcc; Class::COUNT], u64)) {
        let e = edge as usize;
        if self.acc.len() <= e {
            self.acc.resize(e + 1, [ClassAcc::default(); Class::COUNT]);
        }
        for (total, p) in self.acc[e].iter_mut().zip(part.iter()) {
            total.add(p);
        }
        self.globally_unique += unique;
    }

    fn sub(&mut self, edge: u32, (part, unique): &([ClassAcc; Class::COUNT], u64)) {
        for (total, p) in self.acc[edge as usize].iter_mut().zip(part.iter()) {
            total.sub(p);
        }
        self.globally_unique -= unique;
    }

    /// Send `seq` (at `i` in `sends`) is about to change: its figures come out until the
    /// next snapshot (once, however often it changes before then).
    fn take_out(&mut self, sends: &Ring<LiveSend, SEND_CHUNK_SHIFT>, blocks: &Ring<LiveBlock, BLOCK_CHUNK_SHIFT>, front_pos: u64, i: usize, seq: u64) {
        if self.changed.insert(seq) {
            self.sub(sends[i].edge, &send_figures(&sends[i], blocks_of(sends, blocks, front_pos, i)));
        }
    }
}

/// Connections numbered at most (about 40 MiB of map); later ones keep their stage id, moved
/// past every number given (anomaly `dedupe.connection_numbers_capped`).
const MAX_CONN_NUMBERS: usize = 1 << 20;

impl Dedupe {
    pub fn new(
        cfg: DedupeConfig,
        topo: Topology,
        evidence: Option<Box<dyn std::io::Write + Send>>,
    ) -> Self {
        let mut cfg = cfg;
        cfg.max_live_blocks = cfg.max_live_blocks.min(MAX_LIVE_BLOCKS_LIMIT);
        let stats = IndexStats {
            window_seconds: cfg.window_ns as f64 / 1e9,
            max_live_blocks: cfg.max_live_blocks as u64,
            max_index_bytes: cfg.max_index_bytes,
            ..Default::default()
        };
        Dedupe {
            evidence: Evidence::new(evidence, cfg.top_n),
            series: Series::new(cfg.series_interval_ns),
            cfg,
            topo,
            node_names: Vec::new(),
            clock_ns: 0,
            next_seq: 0,
            sends: Ring::new(),
            wide: Default::default(),
            wide_peak: 0,
            bases: TimeBases::default(),
            cold: ColdLog::default(),
            blocks: Ring::new(),
            front_pos: 0,
            // On 4 KiB I/O about one entry per block too: turns with the block tables below.
            messages: PosTable::staggered(1),
            msg_key: Default::default(),
            singles: PosTable::staggered(2),
            edge_ids: Default::default(),
            edges: Vec::new(),
            // One entry per new block each: they take turns to grow (`postable`).
            edge_blocks: PosTable::staggered(1),
            global_blocks: PosTable::new(),
            inbound: PosTable::staggered(2),
            globally_unique_bytes: 0,
            stats,
            anomalies: Anomalies::default(),
            ledger: None,
            conn_numbers: Default::default(),
            next_conn_number: [0; 2],
            live_figures: None,
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

    /// Is a ledger being recorded (`record_ledger`)?
    pub fn recording_ledger(&self) -> bool {
        self.ledger.is_some()
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
        self.blocks.len()
    }

    /// The report's number of the connection of `s` (see `conn_numbers`), given on first
    /// use, and the connection's Community ID.
    fn conn_number(&mut self, s: &SendRecord) -> (u64, Option<crate::community::CommunityId>) {
        use crate::payload::send::ROCE_CONN_BASE;
        if let Some(n) = self.conn_numbers.get(&s.conn) {
            return *n;
        }
        let community = match s.ip_proto {
            0 => None,
            proto => crate::community::CommunityId::v1(0, s.src, s.src_port, s.dst, s.dst_port, proto),
        };
        let conn = s.conn;
        let rdma = usize::from(conn >= ROCE_CONN_BASE);
        let base = if rdma == 1 { ROCE_CONN_BASE } else { 0 };
        if self.conn_numbers.len() >= MAX_CONN_NUMBERS {
            self.anomalies.raise(Anomaly::ConnectionNumbersCapped);
            return (base + (1 << 39) + (conn - base), community);
        }
        self.next_conn_number[rdma] += 1;
        let n = (base + self.next_conn_number[rdma], community);
        self.conn_numbers.insert(conn, n);
        n
    }

    pub fn send(&mut self, mut s: SendRecord) {
        self.send_ref(&mut s)
    }

    /// `send`, the record lent: the caller frees it (`--threads` hands it back to the worker
    /// that made it, `parallel::Spent`). Sets its `conn` to the report's connection number.
    pub fn send_ref(&mut self, s: &mut SendRecord) {
        let (conn, community_id) = self.conn_number(s);
        s.conn = conn;
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
            self.anomalies.raise(Anomaly::SendOutOfOrder);
        }
        let ts_ns = s.ts_ns.max(self.clock_ns);
        // The message table is larger than the caches: its slot loads while the window moves.
        let msg = msg_hash(&self.msg_key, s.conn, s.message_id, s.kind);
        self.messages.prefetch(msg);
        self.advance(ts_ns);

        let front_seq = self.next_seq - self.sends.len() as u64;
        if self.live_message(msg, s.conn, s.message_id, s.kind, front_seq).is_some() {
            self.anomalies.raise(Anomaly::RepeatedMessage);
            return;
        }

        let (mut src, mut dst) = (self.topo.node_of(s.src), self.topo.node_of(s.dst));
        if self.edges.len() >= self.cfg.max_edges && !self.edge_ids.contains_key(&(src, dst)) {
            // Hostile traffic between many spoofed addresses must not grow the run's edges.
            self.anomalies.raise(Anomaly::EdgeCap);
            let other = self.topo.overflow_node();
            (src, dst) = (other, other);
        }
        self.sync_node_names();
        let edge = self.edge_id(src, dst);
        let ends = Ends {
            src_member: self.topo.node(src).member,
            dst_member: self.topo.node(dst).member,
            known: self.topo.membership_known(),
        };
        let rule = self
            .topo
            .rule_class(s.share.as_deref(), s.file_name.as_deref());
        let payload_key: PayloadKey = (s.digest.digest, s.digest.len);
        let seq = self.next_seq;
        let run_seq = {
            let e = &mut self.edges[edge as usize];
            if e.last_payload != Some(payload_key) {
                e.run_seq = seq;
                e.last_payload = Some(payload_key);
            }
            e.run_seq
        };

        let nontrivial_len: u64 = s
            .digest
            .blocks
            .iter()
            .filter(|b| !b.trivial)
            .map(|b| b.len as u64)
            .sum();
        let single = match s.digest.blocks.as_slice() {
            [b] if payload_key.1 > 0 => Some((b.hash, b.len, h_single(&b.hash, b.len))),
            _ => None,
        };
        let payload = match single {
            None => self.evidence.on_send(&payload_key, nontrivial_len, seq),
            Some((hash, len, h)) => match self.evidence.on_send_if_open(&payload_key) {
                Some(id) => id,
                None => {
                    // Its first send in the window, if any, opens the payload now.
                    let Dedupe { sends, blocks, singles, front_pos, .. } = &mut *self;
                    let (front, ring) = (*front_pos, &*blocks);
                    let earlier = singles.remove(h, |v| single_key(&sends[seq_index(front_seq, v)], ring, front) == (hash, len));
                    match earlier {
                        Some(v) => {
                            let i = seq_index(front_seq, v);
                            let first = self.evidence.on_send(&payload_key, nontrivial_len, front_seq + i as u64);
                            self.sends[i].payload = first;
                            self.evidence.on_send(&payload_key, nontrivial_len, seq)
                        }
                        None => SINGLE,
                    }
                }
            },
        };
        let ctx = if payload == NO_PAYLOAD {
            0
        } else {
            self.evidence.intern(SendContext {
                src: s.src,
                dst: s.dst,
                src_port: (s.ip_proto != 0).then_some(s.src_port),
                dst_port: (s.ip_proto != 0).then_some(s.dst_port),
                community_id,
                src_node: self.node_names[src.0 as usize].clone(),
                dst_node: self.node_names[dst.0 as usize].clone(),
                kind: s.kind,
                session: s.session_id,
                tree: s.tree_id,
                file_id: s.file_id,
                file_name: s.file_name.clone(),
                share: s.share.clone(),
                transport: s.transport,
                conn: s.conn,
            })
        };

        // The send goes in first, so positions of its own blocks resolve to it while its
        // blocks are indexed (a block repeated within one payload).
        let first_pos = self.front_pos + self.blocks.len() as u64;
        let live = LiveSend {
            message_id: compact_u32(s.message_id),
            ts: self.bases.push(seq, ts_ns),
            conn: pack_conn(s.conn).unwrap_or(WIDE_U32),
            completed: NOT_COMPLETED,
            first_pos: first_pos as u32,
            edge,
            payload,
            last_len: s.digest.blocks.last().map_or(0, |b| b.len as u16),
            flags: pack_flags(s.kind, ends, rule),
        };
        if live.has_wide() {
            self.wide.insert(seq, Wide { conn: s.conn, completed_ns: 0, message_id: s.message_id, ts_ns });
            self.wide_peak = self.wide_peak.max(self.wide.len());
        }
        self.sends.push_back(live);
        self.cold.push(&Cold {
            frame: s.first_frame.number,
            last_frame: s.last_frame.number,
            header_frame,
            time_back: ts_ns - s.ts_ns,
            offset: s.offset,
            ctx,
            file: s.first_frame.file,
        });
        let Dedupe { sends, blocks, front_pos, edge_blocks, global_blocks, inbound, edges, wide, bases, live_figures, .. } = self;
        let front = *front_pos;
        let is_write = s.kind == SendKind::Write;
        let prefetch = |b: &crate::payload::BlockDigest, g: &PosTable, e: &PosTable, inb: &PosTable| {
            if !b.trivial {
                g.prefetch(h_global(&b.hash));
                e.prefetch(h_edge(edge, &b.hash));
                if is_write {
                    inb.prefetch(h_node(dst, &b.hash));
                    if src != dst {
                        inb.prefetch(h_node(src, &b.hash));
                    }
                }
            }
        };
        for b in s.digest.blocks.iter().take(PREFETCH_BLOCKS) {
            prefetch(b, global_blocks, edge_blocks, inbound);
        }
        for (i, b) in s.digest.blocks.iter().enumerate() {
            if let Some(ahead) = s.digest.blocks.get(i + PREFETCH_BLOCKS) {
                prefetch(ahead, global_blocks, edge_blocks, inbound);
            }
            let pos = front + blocks.len() as u64;
            blocks.push_back(LiveBlock::new(b.hash, b.trivial));
            if b.trivial {
                // Equal-byte blocks collide everywhere by nature; never index them.
                continue;
            }
            let hash = b.hash;
            let p32 = pos as u32;
            let mut flags = 0u8;
            let mut dup = DupKind::Unique;
            let mut prev_inbound = 0u32;
            // Global: first instance on any edge within the window?
            let ring = &*blocks;
            let at = |p: u32| &ring[(full_pos(front, p) - front) as usize];
            // A growth's moves in the per-edge and per-receiver tables read each moved entry's
            // block and its send (the key's edge or receiver).
            let moved_with_send = |p: u32| {
                crate::hint::prefetch_one(at(p));
                prefetch_send_at(sends, front, ring.len(), full_pos(front, p));
            };
            match global_blocks.find_mut(h_global(&hash), |p| at(p).hash == hash) {
                Some(e) => *e = p32,
                None => {
                    flags |= F_GLOBAL_UNIQUE;
                    global_blocks.insert_unique(h_global(&hash), p32, |p| h_global(&at(p).hash), |p| crate::hint::prefetch_one(at(p)));
                }
            }
            // Per edge: the latest earlier instance on this edge says what kind of duplicate.
            let edge_of = |p: u32| sends[send_at(sends, front, ring.len(), full_pos(front, p))].edge;
            let prev = match edge_blocks.find_mut(h_edge(edge, &hash), |p| at(p).hash == hash && edge_of(p) == edge) {
                Some(e) => Some(full_pos(front, std::mem::replace(e, p32))),
                None => {
                    edge_blocks.insert_unique(h_edge(edge, &hash), p32, |p| h_edge(edge_of(p), &at(p).hash), moved_with_send);
                    None
                }
            };
            // Another copy of a block this sender already wrote on is written on too (the
            // second replica of a forwarded write).
            let mut forward_of = s.kind == SendKind::Write
                && prev.is_some_and(|p| blocks.get((p - front) as usize).is_some_and(|b| b.forward_of()));
            if let Some(prev) = prev {
                let i = send_at(sends, front, blocks.len(), prev);
                let e = &sends[i];
                let repeated = if prev >= first_pos {
                    Repeated { same_send: true, same_payload: true, outstanding: true, consecutive: true }
                } else {
                    Repeated {
                        same_send: false,
                        same_payload: payload != SINGLE && e.payload == payload,
                        outstanding: {
                            let seq = front_seq + i as u64;
                            e.outstanding_at(bases.time(e, seq, || wide_of(wide, seq)), s.ts_ns, || wide_of(wide, seq))
                        },
                        consecutive: front_seq + i as u64 >= run_seq,
                    }
                };
                dup = dup_kind(&repeated);
            }
            let dst_of = |p: u32| edges[sends[send_at(sends, front, ring.len(), full_pos(front, p))].edge as usize].dst;
            let mut head = None;
            if s.kind == SendKind::Write && src != dst {
                // `src` writes the block on: every earlier WRITE of it into `src` was forwarded.
                if let Some(p) = inbound.remove(h_node(src, &hash), |p| at(p).hash == hash && dst_of(p) == src) {
                    head = Some(full_pos(front, p));
                }
            }
            if s.kind == SendKind::Write {
                match inbound.find_mut(h_node(dst, &hash), |p| at(p).hash == hash && dst_of(p) == dst) {
                    Some(e) => {
                        let old = full_pos(front, std::mem::replace(e, p32));
                        prev_inbound = u32::try_from(pos - old).unwrap_or(0);
                    }
                    None => {
                        inbound.insert_unique(h_node(dst, &hash), p32, |p| h_node(dst_of(p), &at(p).hash), moved_with_send);
                    }
                }
            }
            if let Some(head) = head {
                mark_forwarded(blocks, front, head, live_figures.as_mut().map(|lf| (lf, &*sends, front_seq)));
                forward_of = true;
            }
            if forward_of {
                flags |= F_FORWARD_OF;
            }
            let lb = blocks.back_mut().expect("pushed above");
            lb.flags |= flags;
            lb.set_dup(dup);
            lb.prev_inbound = prev_inbound.to_le_bytes();
        }
        if let Some(lf) = self.live_figures.as_mut() {
            let i = self.sends.len() - 1;
            lf.add(edge, &send_figures(&self.sends[i], blocks_of(&self.sends, &self.blocks, self.front_pos, i)));
        }

        {
            let Dedupe { sends, messages, msg_key, wide, .. } = self;
            let key_of = |v: u32| {
                let i = seq_index(front_seq, v);
                let e = &sends[i];
                let w = || wide_of(wide, front_seq + i as u64);
                msg_hash(msg_key, e.conn(w), e.message_id(w), e.kind())
            };
            messages.insert_unique(msg, seq as u32, key_of, |v| crate::hint::prefetch_one(&sends[seq_index(front_seq, v)]));
        }
        if let (SINGLE, Some((_, _, h))) = (payload, single) {
            let Dedupe { sends, blocks, singles, front_pos, .. } = self;
            let (front, ring) = (*front_pos, &*blocks);
            let key_of = |v: u32| {
                let (hash, len) = single_key(&sends[seq_index(front_seq, v)], ring, front);
                h_single(&hash, len)
            };
            singles.insert_unique(h, seq as u32, key_of, |v| crate::hint::prefetch_one(&sends[seq_index(front_seq, v)]));
        }
        self.next_seq += 1;

        self.note_peaks();
        while (self.blocks.len() > self.cfg.max_live_blocks || self.sends.len() >= MAX_LIVE_SENDS) && self.sends.len() > 1 {
            self.anomalies.raise(Anomaly::LiveBlockCap);
            self.stats.early_expiries += 1;
            self.fold_early();
        }
        if let Some(max) = self.cfg.max_index_bytes {
            while self.sends.len() > 1 && self.held_bytes() > max {
                self.anomalies.raise(Anomaly::IndexMemoryCap);
                self.stats.memory_early_expiries += 1;
                self.fold_early();
            }
        }
    }

    /// Fold the oldest send before its window ended (a bound was reached), noting how long
    /// it stayed: the effective window.
    fn fold_early(&mut self) {
        if let Some(front) = self.front_time() {
            let stayed = (self.clock_ns - front) as f64 / 1e9;
            let s = &mut self.stats.shortest_window_seconds;
            *s = Some(s.map_or(stayed, |m| m.min(stayed)));
        }
        self.fold_front();
    }

    /// The response to (conn, MessageId) was seen at `ts_ns`: its send is no longer outstanding.
    pub fn complete(&mut self, conn: u64, message_id: u64, ts_ns: u64) {
        // A connection without a send has nothing to complete.
        let Some(&(conn, _)) = self.conn_numbers.get(&conn) else { return };
        if let Some(tap) = self.ledger.as_mut() {
            tap.push(&Event::Complete { conn, message_id, ts_ns });
        }
        let front_seq = self.next_seq - self.sends.len() as u64;
        // Both kinds' slots load together (the table is larger than the caches).
        let hashes = [SendKind::Write, SendKind::Read].map(|kind| (kind, msg_hash(&self.msg_key, conn, message_id, kind)));
        for (_, h) in hashes {
            self.messages.prefetch(h);
        }
        for (kind, h) in hashes {
            let Some(i) = self.live_message(h, conn, message_id, kind, front_seq) else { continue };
            let seq = front_seq + i as u64;
            let own = self.bases.time(&self.sends[i], seq, || wide_of(&self.wide, seq));
            let send = &mut self.sends[i];
            if send.completed == NOT_COMPLETED {
                send.completed = rel_i32(ts_ns, own);
                if send.completed == WIDE_I32 {
                    // Its other fields are compact unless it has an entry already.
                    self.wide.entry(seq).or_default().completed_ns = ts_ns;
                    self.wide_peak = self.wide_peak.max(self.wide.len());
                }
            }
        }
    }

    /// Index in `sends` of the live send of (conn, MessageId, kind), if any; `hash` is the
    /// key's (`msg_hash`).
    fn live_message(&self, hash: u64, conn: u64, message_id: u64, kind: SendKind, front_seq: u64) -> Option<usize> {
        let (sends, wide) = (&self.sends, &self.wide);
        let packed = pack_conn(conn).unwrap_or(WIDE_U32);
        let packed_id = compact_u32(message_id);
        self.messages
            .find(hash, |v| {
                let i = seq_index(front_seq, v);
                let e = &sends[i];
                e.conn == packed
                    && e.message_id == packed_id
                    && e.kind() == kind
                    && (packed != WIDE_U32 || wide_of(wide, front_seq + i as u64).conn == conn)
                    && (packed_id != WIDE_U32 || wide_of(wide, front_seq + i as u64).message_id == message_id)
            })
            .map(|v| seq_index(front_seq, v))
    }

    /// Time moved to `now_ns`: fold every send that is now older than the window.
    pub fn advance(&mut self, now_ns: u64) {
        if let Some(tap) = self.ledger.as_mut() {
            tap.push(&Event::Advance { ts_ns: now_ns });
        }
        self.clock_ns = self.clock_ns.max(now_ns);
        while let Some(front) = self.front_time() {
            if self.clock_ns - front <= self.cfg.window_ns {
                break;
            }
            self.fold_front();
        }
    }

    /// The window time of the oldest live send.
    fn front_time(&self) -> Option<u64> {
        let front = self.sends.front()?;
        let seq = self.next_seq - self.sends.len() as u64;
        Some(self.bases.time(front, seq, || wide_of(&self.wide, seq)))
    }

    pub fn finish(mut self) -> DedupeReport {
        self.live_figures = None;
        while !self.sends.is_empty() {
            self.fold_front_keeping(false);
        }
        let other = self.topo.overflow_lookups();
        self.anomalies.raise_n(Anomaly::AutoNodeCap, other);
        self.stats.other_node_lookups = other;
        let evidence = std::mem::replace(&mut self.evidence, Evidence::new(None, 0));
        let duplicated = evidence.duplicated_payloads();
        let (top_duplicates, evidence_error) = evidence.finish(&mut self.anomalies);
        let acc: Vec<[ClassAcc; Class::COUNT]> = self.edges.iter().map(|e| e.acc).collect();
        let mut r = self.report(&acc, self.globally_unique_bytes, (duplicated, top_duplicates), &self.anomalies, &self.stats);
        r.evidence_error = evidence_error;
        r.series = Some(self.series.report(|e| {
            let e = &self.edges[e as usize];
            (self.topo.node(e.src).name.clone(), self.topo.node(e.dst).name.clone())
        }));
        r
    }

    /// The report as `finish` would give it now, without changing anything: folded figures
    /// plus every send still in the window counted with what is known of it so far (a WRITE
    /// block whose receiver forwards it later moves from its class to redirection then).
    /// At the end of the input it equals `finish`, apart from `pending_bytes` (sends still in
    /// the window have provisional classes; `finish` decides them) and `series`, which only
    /// `finish` gives.
    /// The first snapshot sums every live send's figures; from then on they are kept as
    /// sends come, change and leave (`LiveFigures`), and a snapshot adds back only those that
    /// changed since the last one. Nothing it changes shows in any result.
    pub fn snapshot(&mut self) -> DedupeReport {
        let lf = match self.live_figures.take() {
            None => self.walked_live_figures(),
            Some(mut lf) => {
                let front_seq = self.next_seq - self.sends.len() as u64;
                for seq in std::mem::take(&mut lf.changed) {
                    let i = (seq - front_seq) as usize;
                    lf.add(self.sends[i].edge, &send_figures(&self.sends[i], self.send_blocks(i)));
                }
                lf
            }
        };
        #[cfg(debug_assertions)]
        self.assert_kept(&lf);
        let mut acc: Vec<[ClassAcc; Class::COUNT]> = self.edges.iter().map(|e| e.acc).collect();
        for (total, live) in acc.iter_mut().zip(lf.acc.iter()) {
            for (t, p) in total.iter_mut().zip(live.iter()) {
                t.add(p);
            }
        }
        let globally_unique = self.globally_unique_bytes + lf.globally_unique;
        self.live_figures = Some(lf);
        let mut anomalies = self.anomalies.clone();
        let mut stats = self.stats.clone();
        let other = self.topo.overflow_lookups();
        anomalies.raise_n(Anomaly::AutoNodeCap, other);
        stats.other_node_lookups = other;
        let mut entries = self.evidence.snapshot_top();
        // Sends still in the window, in the order they came, after those that left; each with
        // the verdict folding it now would give.
        let wanted: FastMap<u32, usize> = entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.open.map(|id| (id, i)))
            .collect();
        if !wanted.is_empty() {
            // Each payload's first sends in the window, found from where its sends start
            // (`Evidence::live_sends_of`): (position in the window, entry), in window order.
            let front_seq = self.next_seq - self.sends.len() as u64;
            let mut found: Vec<(usize, usize)> = Vec::new();
            for (&id, &i) in &wanted {
                let (live, first) = self.evidence.live_sends_of(id);
                // After those that left, up to `SNAPSHOT_SENDS_PER_PAYLOAD` in all.
                let room = super::evidence::SNAPSHOT_SENDS_PER_PAYLOAD.saturating_sub(entries[i].payload.sends.len());
                let mut want = live.min(room as u64);
                let from = (first.wrapping_sub(front_seq as u32) as i32).max(0) as usize;
                for k in from..self.sends.len() {
                    if want == 0 {
                        break;
                    }
                    if self.sends[k].payload == id {
                        found.push((k, i));
                        want -= 1;
                    }
                }
            }
            found.sort_unstable();
            let at: Vec<usize> = found.iter().map(|&(k, _)| k).collect();
            for (&(k, i), cold) in found.iter().zip(self.cold.get_sorted(&at)) {
                let live = &self.sends[k];
                let (part, _) = send_figures(live, self.send_blocks(k));
                let (class, dup) = send_verdict(&part);
                let seq = front_seq + k as u64;
                let wide = || wide_of(&self.wide, seq);
                let mut s = self.evidence.live_send(&live.stored(&cold, self.bases.time(live, seq, wide), live.message_id(wide)));
                s.class = Some(class);
                s.dup_kind = Some(dup);
                entries[i].payload.sends.push(s);
            }
        }
        let top_duplicates = (self.evidence.duplicated_payloads(), self.evidence.rank_snapshot(entries));
        self.report(&acc, globally_unique, top_duplicates, &anomalies, &stats)
    }

    /// Kept live figures `lf`, with none changed since they were settled, are those summed
    /// from the window (debug builds check at every snapshot).
    #[cfg(debug_assertions)]
    fn assert_kept(&self, lf: &LiveFigures) {
        assert!(lf.changed.is_empty());
        let walked = self.walked_live_figures();
        let n = walked.acc.len();
        assert!(lf.acc.len() >= n, "kept live figures cover {} edges, the window {n}", lf.acc.len());
        assert_eq!(&lf.acc[..n], &walked.acc[..], "kept live figures differ from the window's");
        assert!(lf.acc[n..].iter().flatten().all(|a| *a == ClassAcc::default()), "kept live figures of edges without a live send");
        assert_eq!(lf.globally_unique, walked.globally_unique);
    }

    /// Are live figures being kept (a snapshot was taken)? For tests.
    #[cfg(test)]
    pub(super) fn keeps_live_figures(&self) -> bool {
        self.live_figures.is_some()
    }

    /// Every live send's figures, summed from the window.
    fn walked_live_figures(&self) -> LiveFigures {
        let mut lf = LiveFigures::default();
        for (i, send) in self.sends.iter().enumerate() {
            lf.add(send.edge, &send_figures(send, self.send_blocks(i)));
        }
        lf
    }

    fn report(
        &self,
        acc: &[[ClassAcc; Class::COUNT]],
        globally_unique_bytes: u64,
        (duplicated_payloads, top_duplicates): (u64, Vec<super::evidence::DuplicatePayload>),
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
                    pending_bytes: acc.pending,
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
            membership: self.topo.membership(),
            nodes: self.topo.nodes().to_vec(),
            duplicated_payloads,
            top_duplicates,
            index: stats.clone(),
            series: None,
            anomalies: anomalies
                .iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            evidence_error: None,
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
            run_seq: 0,
            acc: [ClassAcc::default(); Class::COUNT],
        });
        self.edge_ids.insert((src, dst), id);
        id
    }

    /// The blocks of live send `i` (an exact-size iterator: its length is their count).
    fn send_blocks(&self, i: usize) -> impl ExactSizeIterator<Item = &LiveBlock> + '_ {
        blocks_of(&self.sends, &self.blocks, self.front_pos, i)
    }

    /// Fold the oldest send into the figures and drop everything that points at it.
    fn fold_front(&mut self) {
        self.fold_front_keeping(true);
    }

    /// `fold_front`; at the end of the input (`tables` false) the lookup tables keep the
    /// send's entries: no send comes to look them up, and the tables go with the index.
    /// Their removals, three random probes per block, were most of the fold that ends a run
    /// (every send still in the window), which no second thread shortens: 1 GiB of 1 MiB
    /// writes, 21 ms with them, 3 ms without (perf samples, 2026-11-27).
    fn fold_front_keeping(&mut self, tables: bool) {
        let Some(send) = self.sends.front() else {
            return;
        };
        debug_assert_eq!(send.first_pos, self.front_pos as u32);
        let n = span_of(&self.sends, self.front_pos, self.blocks.len(), 0).1 as usize;
        let (acc, globally_unique) = send_figures(send, self.send_blocks(0));
        let seq = self.next_seq - self.sends.len() as u64;
        if let Some(lf) = self.live_figures.as_mut() {
            // Out already when it changed since the last snapshot.
            if !lf.changed.remove(&seq) {
                lf.sub(send.edge, &(acc, globally_unique));
            }
        }
        let send = self.sends.pop_front().expect("front exists");
        let cold = self.cold.pop_front();
        let wide = if send.has_wide() { self.wide.remove(&seq).unwrap_or_default() } else { Wide::default() };
        let ts_ns = self.bases.time(&send, seq, || wide);
        self.bases.drop_before((!self.sends.is_empty()).then_some(seq + 1));
        self.globally_unique_bytes += globally_unique;
        let dst = self.edges[send.edge as usize].dst;
        let prefetch = |b: &LiveBlock, t: &Self| {
            if !b.trivial() {
                t.edge_blocks.prefetch(h_edge(send.edge, &b.hash));
                t.global_blocks.prefetch(h_global(&b.hash));
                t.inbound.prefetch(h_node(dst, &b.hash));
            }
        };
        let removals = if tables { n } else { 0 };
        for b in self.blocks.range(0, removals.min(PREFETCH_BLOCKS)) {
            prefetch(b, self);
        }
        for i in 0..removals {
            if let Some(ahead) = self.blocks.get(i + PREFETCH_BLOCKS).filter(|_| i + PREFETCH_BLOCKS < n) {
                prefetch(ahead, self);
            }
            let b = self.blocks[i];
            if b.trivial() {
                continue;
            }
            // Entries pointing at this instance go; entries for later instances stay.
            let p32 = send.first_pos.wrapping_add(i as u32);
            self.edge_blocks.remove(h_edge(send.edge, &b.hash), |p| p == p32);
            self.global_blocks.remove(h_global(&b.hash), |p| p == p32);
            self.inbound.remove(h_node(dst, &b.hash), |p| p == p32);
        }
        // A payload sent once in the window: its `singles` slot (read from its blocks, before
        // they go).
        let single_slot = (send.payload == SINGLE && tables).then(|| {
            let (hash, len) = single_key(&send, &self.blocks, self.front_pos);
            h_single(&hash, len)
        });
        self.blocks.drop_front(n);
        self.front_pos += n as u64;

        let edge = &mut self.edges[send.edge as usize];
        for (total, part) in edge.acc.iter_mut().zip(acc.iter()) {
            total.figures.add(&part.figures);
            total.decided.add(&part.decided);
        }
        for (class, part) in Class::ALL.iter().zip(acc.iter()) {
            self.series.add(ts_ns, send.edge, *class, &part.figures);
        }

        if tables {
            self.messages.remove(msg_hash(&self.msg_key, send.conn(|| wide), send.message_id(|| wide), send.kind()), |v| v == seq as u32);
        }
        if let Some(h) = single_slot {
            self.singles.remove(h, |v| v == seq as u32);
        }
        if send.payload == SINGLE {
            // No evidence: only its context goes.
            self.evidence.release(cold.ctx);
        } else {
            let verdict = send_verdict(&acc);
            self.evidence.on_leave(send.payload, seq, send.stored(&cold, ts_ns, send.message_id(|| wide)), verdict, &mut self.anomalies);
        }
    }

    fn note_peaks(&mut self) {
        let (block_bytes, send_bytes) = self.bytes_estimate_parts();
        let bytes = block_bytes + send_bytes;
        let s = &mut self.stats;
        s.peak_live_sends = s.peak_live_sends.max(self.sends.len() as u64);
        if self.blocks.len() as u64 > s.peak_live_blocks {
            s.peak_live_blocks = self.blocks.len() as u64;
            s.bytes_per_live_block = bytes as f64 / self.blocks.len() as f64;
            s.block_bytes_per_live_block = block_bytes as f64 / self.blocks.len() as f64;
            s.send_bytes_per_live_send = send_bytes as f64 / self.sends.len().max(1) as f64;
        }
        s.peak_bytes_estimate = s.peak_bytes_estimate.max(bytes);
    }

    /// Memory the window's contents take (what `max_index_bytes` bounds): like
    /// `bytes_estimate`, from the structures' lengths rather than their capacities, so it
    /// shrinks as sends leave. The lookup tables grow by doubling, so the allocations'
    /// total (`bytes_estimate_parts`) stays within about twice this.
    pub(super) fn held_bytes(&self) -> u64 {
        (self.sends.len() * std::mem::size_of::<LiveSend>()) as u64
            + self.cold.len_bytes() as u64
            + (self.blocks.len() * std::mem::size_of::<LiveBlock>()) as u64
            + self.messages.held_bytes()
            + self.singles.held_bytes()
            + self.edge_blocks.held_bytes()
            + self.global_blocks.held_bytes()
            + self.inbound.held_bytes()
            + self.evidence.held_bytes()
            + (self.wide.len() * WIDE_ENTRY_BYTES) as u64
            + self.bases.held_bytes()
    }

    /// Memory held by the window, from the structures' capacities (not their lengths), in
    /// two parts: the blocks (their ring and the three block tables: 5 bytes per slot, both
    /// slot arrays while one grows into the other, `PosTable`), and the sends (the send
    /// table, the message and single-payload tables, the evidence of open payloads).
    /// Strings shared with the SMB state are not counted. `messages` is seeded per process
    /// (`msg_key`), so when it grows depends on where its keys fall: its size is taken as the
    /// table its length needs, so the figure is the same in every run.
    fn bytes_estimate_parts(&self) -> (u64, u64) {
        let blocks = (self.blocks.capacity() * std::mem::size_of::<LiveBlock>()) as u64
            + self.edge_blocks.bytes()
            + self.global_blocks.bytes()
            + self.inbound.bytes();
        let sends = (self.sends.capacity() * std::mem::size_of::<LiveSend>()) as u64
            + self.cold.capacity_bytes() as u64
            + PosTable::bytes_for_len(self.messages.len())
            + self.singles.bytes()
            + self.evidence.allocated_bytes()
            + wide_bytes(self.wide_peak)
            + self.bases.bytes();
        (blocks, sends)
    }
}

/// A folded send's class (the one its `sends` count went to) and what most of its non-trivial
/// bytes were, for its evidence entry.
fn send_verdict(acc: &[ClassAcc; Class::COUNT]) -> (Class, SendDupKind) {
    let class = Class::ALL.into_iter().find(|c| acc[c.index()].figures.sends > 0).unwrap_or(Class::Client);
    let (mut u, mut p, mut r) = (0, 0, 0);
    for a in acc {
        u += a.figures.unique_bytes;
        p += a.figures.per_copy_duplicate_bytes;
        r += a.figures.repeated_content_bytes;
    }
    (class, SendDupKind::of(u, p, r))
}

/// A send's figures per class (what folding it adds to its edge) and its globally unique
/// bytes, from what is known of its blocks now.
fn send_figures<'a>(send: &LiveSend, blocks: impl ExactSizeIterator<Item = &'a LiveBlock>) -> ([ClassAcc; Class::COUNT], u64) {
    let n = blocks.len();
    let mut acc = [ClassAcc::default(); Class::COUNT];
    let mut trivial_bytes = 0u64;
    let mut globally_unique = 0u64;
    // A WRITE block no rule decides and that forwarding could still turn into redirection
    // (while the send is in the window) has a provisional class.
    let may_change = send.kind() == SendKind::Write
        && send.rule().is_none()
        && (!send.ends().known || (send.ends().src_member && send.ends().dst_member));
    let mut all_pending = may_change;
    for (i, b) in blocks.enumerate() {
        let len = send.block_len(i, n);
        if b.trivial() {
            trivial_bytes += len;
            continue;
        }
        let (class, by) = block_class(send.kind(), send.ends(), send.rule(), b.forwarded(), b.forward_of());
        let a = &mut acc[class.index()];
        if may_change && !b.forwarded() {
            a.pending += len;
        } else {
            all_pending = false;
        }
        a.figures.payload_bytes += len;
        a.figures.nontrivial_bytes += len;
        match b.dup() {
            DupKind::Unique => a.figures.unique_bytes += len,
            DupKind::PerCopy => a.figures.per_copy_duplicate_bytes += len,
            DupKind::RepeatedContent => a.figures.repeated_content_bytes += len,
        }
        a.decided.add_bytes(by, len);
        if b.global_unique() {
            globally_unique += len;
        }
    }
    // The send itself and its trivial bytes go to the class that got most of its
    // non-trivial bytes (the unforwarded class on a tie or when there are none).
    let (base, base_by) = block_class(send.kind(), send.ends(), send.rule(), false, false);
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
    if all_pending {
        a.pending += trivial_bytes;
    }
    a.figures.payload_bytes += trivial_bytes;
    a.figures.trivial_bytes += trivial_bytes;
    a.decided.add_bytes(main_by, trivial_bytes);
    (acc, globally_unique)
}

/// What `mark_forwarded` needs to keep live figures: them, the send table and the sequence
/// number of its front.
type Live<'a> = (&'a mut LiveFigures, &'a Ring<LiveSend, SEND_CHUNK_SHIFT>, u64);

/// Mark a chain of WRITE block instances (newest first, from position `head`) as forwarded,
/// stopping at the window's edge or at an instance already marked. With `live` (kept live
/// figures, the send table, the front's sequence number), the send of each block marked
/// takes its figures out first (`LiveFigures::take_out`): on meeting its first block of the
/// chain, which is its newest, so before any of its blocks changed. The send being indexed
/// (the newest) adds its figures once its blocks are done; none of its blocks is in a chain.
/// A block's send is found by position (`send_at`), tried first against the last one found.
fn mark_forwarded(blocks: &mut Ring<LiveBlock, BLOCK_CHUNK_SHIFT>, front_pos: u64, head: u64, mut live: Option<Live<'_>>) {
    let mut cur = head;
    let mut last: Option<(usize, u64, u64)> = None;
    while cur >= front_pos {
        let at = (cur - front_pos) as usize;
        match blocks.get(at) {
            Some(b) if !b.forwarded() => {}
            _ => break,
        }
        if let Some((lf, sends, front_seq)) = live.as_mut() {
            let i = match last {
                Some((i, first, end)) if (first..end).contains(&cur) => i,
                _ => {
                    let i = send_at(sends, front_pos, blocks.len(), cur);
                    let (first, n) = span_of(sends, front_pos, blocks.len(), i);
                    last = Some((i, first, first + u64::from(n)));
                    i
                }
            };
            if i + 1 < sends.len() {
                lf.take_out(sends, blocks, front_pos, i, *front_seq + i as u64);
            }
        }
        let block = &mut blocks[at];
        block.flags |= F_FORWARDED;
        match block.prev_inbound() {
            0 => break,
            d => cur = match cur.checked_sub(u64::from(d)) {
                Some(c) => c,
                None => break,
            },
        }
    }
}

fn kind_slot(kind: SendKind) -> usize {
    match kind {
        SendKind::Write => 0,
        SendKind::Read => 1,
    }
}

/// Index in `sends` of the live send with sequence number `seq` (its low 32 bits: live sends
/// number fewer than `MAX_LIVE_SENDS`), the front one having `front_seq`.
#[inline]
fn seq_index(front_seq: u64, seq: u32) -> usize {
    seq.wrapping_sub(front_seq as u32) as usize
}

/// Hash of a message's key in `messages`.
#[inline]
fn msg_hash(state: &crate::fasthash::FastState, conn: u64, message_id: u64, kind: SendKind) -> u64 {
    use std::hash::BuildHasher;
    state.hash_one((conn, message_id, kind_slot(kind) as u8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::send::ROCE_CONN_BASE;

    /// `locate` finds every position's span, whatever the span lengths (one size, mixed,
    /// empty spans, the last one shorter).
    #[test]
    fn locate_finds_the_span_of_every_position() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mixed: Vec<u32> = (0..3000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                [0, 1, 1, 16, 256, 256, 2][(x % 7) as usize]
            })
            .collect();
        let mut filling = vec![256u32; 4000];
        filling.push(17);
        for lens in [vec![1u32; 50], vec![256; 7], vec![1, 256, 1, 1, 3, 0, 256, 2, 1, 0, 1], vec![5], mixed, filling] {
            let front = 1_000_000u64;
            let mut spans = Vec::new();
            let mut p = front;
            for l in &lens {
                spans.push((p, *l));
                p += u64::from(*l);
            }
            let live = (p - front) as usize;
            for pos in front..p {
                let i = locate(spans.len(), |i| spans[i], front, live, pos);
                let (first, len) = spans[i];
                assert!(first <= pos && pos < first + u64::from(len), "{lens:?}: {pos} in span {i} {:?}", spans[i]);
            }
        }
    }

    /// Sends of one size, the newest still being filled (as while a send's blocks are
    /// indexed): every position's send in at most two looks, not a bisection's dozen.
    #[test]
    fn locate_finds_sends_of_one_size_at_once() {
        let front = 7u64 << 32;
        let mut spans: Vec<(u64, u32)> = (0..4000u64).map(|i| (front + i * 256, 256)).collect();
        spans.push((front + 4000 * 256, 17));
        let live = 4000 * 256 + 17;
        let mut worst = 0;
        for pos in front..front + live as u64 {
            let looks = std::cell::Cell::new(0);
            let i = locate(spans.len(), |i| {
                looks.set(looks.get() + 1);
                spans[i]
            }, front, live, pos);
            assert!(spans[i].0 <= pos && pos < spans[i].0 + u64::from(spans[i].1));
            worst = worst.max(looks.get());
        }
        assert!(worst <= 2, "{worst} looks");
    }

    /// Connection numbers round-trip through 32 bits up to 2^31 - 2 of each kind; past
    /// them (numbers given after `MAX_CONN_NUMBERS`) they are kept whole (`Wide`).
    #[test]
    fn connection_numbers_pack_into_32_bits_or_are_kept_whole() {
        for conn in [0, 1, 7, (1 << 20) + 3, (1 << 31) - 2, ROCE_CONN_BASE + 1, ROCE_CONN_BASE + (1 << 31) - 2] {
            let v = pack_conn(conn).unwrap_or_else(|| panic!("{conn} packs"));
            assert_ne!(v, WIDE_U32);
            assert_eq!(unpack_conn(v), conn);
        }
        for conn in [(1 << 31) - 1, 1 << 39, ROCE_CONN_BASE - 1, ROCE_CONN_BASE + (1 << 31) - 1, ROCE_CONN_BASE + (1 << 39) + 5, u64::MAX] {
            assert_eq!(pack_conn(conn), None, "{conn}");
        }
    }

    #[test]
    fn flags_round_trip() {
        for kind in [SendKind::Write, SendKind::Read] {
            for bits in 0..8u8 {
                let ends = Ends { src_member: bits & 1 != 0, dst_member: bits & 2 != 0, known: bits & 4 != 0 };
                for rule in std::iter::once(None).chain(Class::ALL.into_iter().map(Some)) {
                    let s = LiveSend {
                        message_id: 0,
                        ts: 0,
                        conn: 0,
                        completed: NOT_COMPLETED,
                        first_pos: 0,
                        edge: 0,
                        payload: 0,
                        last_len: 0,
                        flags: pack_flags(kind, ends, rule),
                    };
                    assert_eq!((s.kind(), s.ends(), s.rule()), (kind, ends, rule));
                }
            }
        }
    }

    /// A send's blocks run to the next send's first block (to the ring's end for the newest,
    /// `span_of`): every live send spans its payload's block count, with empty payloads
    /// between, and every live block position resolves to its send.
    #[test]
    fn a_send_spans_its_own_blocks() {
        let lens = [0usize, 4096, 3 * 4096 + 17, 0, 0, 1, 8192, 5000, 0];
        let mut d = Dedupe::new(DedupeConfig::default(), Topology::default(), None);
        for (i, &len) in lens.iter().enumerate() {
            let bytes: Vec<u8> = (0..len).map(|j| (j * 31 + i * 7 + j / 4096) as u8).collect();
            d.send(crate::dedupe::tests::rec(SendKind::Write, 1, 2, 1, i as u64 + 1, i as u64, &bytes));
        }
        assert_eq!(d.sends.len(), lens.len());
        let mut pos = d.front_pos;
        for (i, &len) in lens.iter().enumerate() {
            let (first, n) = span_of(&d.sends, d.front_pos, d.blocks.len(), i);
            assert_eq!((first, n as usize), (pos, len.div_ceil(BLOCK_SIZE)), "send {i}");
            assert_eq!(d.send_blocks(i).len(), n as usize);
            for p in first..first + u64::from(n) {
                assert_eq!(send_at(&d.sends, d.front_pos, d.blocks.len(), p), i, "position {p}");
            }
            pos += u64::from(n);
        }
        assert_eq!(pos, d.front_pos + d.blocks.len() as u64);
        // The oldest leaves with its blocks; the others keep theirs.
        d.fold_front();
        d.fold_front();
        assert_eq!(span_of(&d.sends, d.front_pos, d.blocks.len(), 0), (d.front_pos, 4));
        assert_eq!(d.blocks.len(), 4 + 1 + 2 + 2);
    }
}
