//! The flow table: TCP connections keyed by their address/port pair, with idle expiry.
//!
//! A flow is keyed by its normalised 4-tuple (the two endpoints in ascending order), so both
//! directions land on the same entry. Directions are numbered from the flow's *first* segment:
//! direction 0 carries bytes from that segment's sender to its receiver, direction 1 the reverse.
//! Each direction has its own [`Reassembler`] and consumer.
//!
//! The consumers come from the caller's `make(flow_id, sender, receiver)`, called once, with the
//! sender and receiver of the flow's first segment; it returns `(consumer for direction 0,
//! consumer for direction 1)`, or `None` for a flow smbwire does not analyse (its frames then get
//! [`FlowOutcome::Ignored`] until the flow ends, and `make` is not asked again).
//!
//! Mirror ports can show one frame twice. Each direction remembers the duplicate signatures of
//! its last few frames; a frame whose signature matches one seen within a short window is a
//! copy and is not processed at all ([`FlowOutcome::MirrorDuplicate`]).
//!
//! A direction closes (its buffer flushed, its consumer's `close` called) when every byte up to
//! its FIN has been delivered; a RST closes both. Closed flows stay in the table until idle, so
//! late retransmissions and ACKs are recognised rather than starting a flow; a new SYN on the
//! same 4-tuple starts a new flow (port reuse).
//!
//! Memory is bounded by: a maximum number of flows (the least recently seen is closed and
//! evicted, anomaly `tcp.flow_table_full`), idle expiry, each direction's buffer limits, and a
//! cap on bytes buffered across all flows (the largest buffers have their holes declared lost,
//! anomaly `tcp.global_buffer_cap`).

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, VecDeque};
use crate::fasthash::FastMap;
use std::net::IpAddr;

use super::reassembly::{ReassemblyConfig, Reassembler, SegmentOutcome};
use super::{Chunk, ReassemblyStats, StreamConsumer};
use crate::anomaly::Anomalies;
use crate::frame::FrameCtx;
use crate::wire::TcpSegment;
use super::Anomaly;

/// TCP header flags (RFC 9293 §3.1).
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

/// An address and port.
pub type Endpoint = (IpAddr, u16);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowConfig {
    /// A flow with no frame for this long is flushed, closed and forgotten.
    pub idle_timeout_ns: u64,
    /// Flows tracked at once; beyond it the least recently seen is evicted.
    pub max_flows: usize,
    /// Per-direction buffer limits.
    pub reassembly: ReassemblyConfig,
    /// Out-of-order bytes held across all flows.
    pub max_total_buffered_bytes: usize,
    /// Duplicate signatures remembered per direction (0 disables mirror-duplicate detection).
    pub dup_window_entries: usize,
    /// Two frames with the same signature further apart than this are not mirror copies.
    pub dup_window_ns: u64,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            idle_timeout_ns: 120_000_000_000,
            max_flows: 100_000,
            reassembly: ReassemblyConfig::default(),
            max_total_buffered_bytes: 256 << 20,
            dup_window_entries: 64,
            dup_window_ns: 50_000_000,
        }
    }
}

/// What became of one segment. The caller accounts the frame's payload bytes from it:
/// `MirrorDuplicate` → the whole frame is `cat::MIRROR_DUPLICATE`; `Ignored` → the payload is
/// `cat::OTHER_PROTOCOLS`; `Stream` → see [`SegmentOutcome`] (`delivered` and `buffered` bytes are
/// accounted by the consumer when it receives them, `retransmitted` → `cat::RETRANSMITTED`,
/// `dropped` → `cat::TCP_UNDELIVERED`, `late` → `cat::TCP_REORDERED_LATE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowOutcome {
    /// A mirror-port copy of a frame seen moments before: nothing was processed.
    MirrorDuplicate,
    /// The flow is not analysed (`make` returned `None`).
    Ignored { flow_id: u64 },
    /// The segment went through reassembly. `dir` is 0 when it travels like the flow's first
    /// segment, 1 when it travels the other way.
    Stream { flow_id: u64, dir: u8, seg: SegmentOutcome },
}

/// The two endpoints in ascending order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct FlowKey(Endpoint, Endpoint);

impl FlowKey {
    fn new(a: Endpoint, b: Endpoint) -> Self {
        if a <= b {
            FlowKey(a, b)
        } else {
            FlowKey(b, a)
        }
    }
}

/// Buckets of `Half::sig_counts`: with 64 signatures remembered, about 22% of the buckets
/// hold one, so about 4 in 5 new frames are known new without a scan.
const SIG_BUCKET_BITS: u32 = 8;
const SIG_BUCKETS: usize = 1 << SIG_BUCKET_BITS;
/// Signatures a direction holds when its bucket counts are made (fewer scan quickly, and a
/// capture of many short flows does not pay 256 bytes for each direction).
const SIG_FILTER_FROM: usize = 16;

/// A signature's bucket: its top bits after a multiply (the signature is a hash already;
/// the multiply keeps buckets spread whatever bits of it vary).
#[inline]
fn sig_bucket(sig: u64) -> usize {
    (sig.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SIG_BUCKET_BITS)) as usize
}

/// One direction of a flow.
struct Half<C> {
    reasm: Reassembler,
    /// `None` once closed (or for an ignored flow).
    consumer: Option<C>,
    /// Capture times of recent frames, oldest first, and their duplicate signatures (apart,
    /// so signatures are compared as one array).
    recent: VecDeque<u64>,
    recent_sigs: VecDeque<u64>,
    /// How many of `recent_sigs` fall in each `sig_bucket`: a signature whose bucket is empty
    /// (nearly every frame's) was not seen, without a scan. Made when a direction first holds
    /// `SIG_FILTER_FROM` signatures (a busy one), with at most 255 remembered.
    sig_counts: Option<Box<[u8; SIG_BUCKETS]>>,
    syn_seq: Option<u32>,
    seen_payload: bool,
    /// FIN or RST seen.
    ended: bool,
}

impl<C> Half<C> {
    fn new(cfg: ReassemblyConfig, consumer: Option<C>) -> Self {
        Half {
            reasm: Reassembler::new(cfg),
            consumer,
            recent: VecDeque::new(),
            recent_sigs: VecDeque::new(),
            sig_counts: None,
            syn_seq: None,
            seen_payload: false,
            ended: false,
        }
    }

    /// Forget the oldest remembered frame.
    fn forget_oldest(&mut self) {
        self.recent.pop_front();
        if let (Some(s), Some(c)) = (self.recent_sigs.pop_front(), &mut self.sig_counts) {
            c[sig_bucket(s)] -= 1;
        }
    }

    /// Is this frame a mirror copy of a recent one? If not, remember it.
    fn is_mirror_copy(&mut self, sig: u64, ts_ns: u64, cfg: &FlowConfig) -> bool {
        if cfg.dup_window_entries == 0 {
            return false;
        }
        while self.recent.front().is_some_and(|&t| t.saturating_add(cfg.dup_window_ns) < ts_ns) {
            self.forget_oldest();
        }
        // Times are compared only for an equal signature. Without the bucket counts the
        // signatures are compared branch-free, several per instruction: an early-exit scan of
        // (signature, time) pairs over 64 entries was 5% of a `--threads 2` run on MSS 1448
        // frames, where nearly every frame is new; the branch-free scan was still 4% of a
        // `--threads 1` run.
        let maybe = match &self.sig_counts {
            Some(c) => c[sig_bucket(sig)] != 0,
            None => {
                let (a, b) = self.recent_sigs.as_slices();
                let seen = |found: bool, &s: &u64| found | (s == sig);
                a.iter().fold(false, seen) | b.iter().fold(false, seen)
            }
        };
        if maybe {
            let w = cfg.dup_window_ns;
            if self.recent_sigs.iter().zip(&self.recent).any(|(&s, &t)| s == sig && t.abs_diff(ts_ns) <= w) {
                return true;
            }
        }
        if self.recent.len() >= cfg.dup_window_entries {
            self.forget_oldest();
        }
        self.recent.push_back(ts_ns);
        self.recent_sigs.push_back(sig);
        match &mut self.sig_counts {
            Some(c) => c[sig_bucket(sig)] += 1,
            None if self.recent_sigs.len() >= SIG_FILTER_FROM && cfg.dup_window_entries <= usize::from(u8::MAX) => {
                let mut c = Box::new([0u8; SIG_BUCKETS]);
                for &s in &self.recent_sigs {
                    c[sig_bucket(s)] += 1;
                }
                self.sig_counts = Some(c);
            }
            None => {}
        }
        false
    }
}

struct Flow<C> {
    id: u64,
    /// A direction has carried storage traffic (`StreamConsumer::carries_storage`): evicted
    /// only when no other flow can be.
    storage: bool,
    /// Sender of the flow's first segment (direction 0 leaves from it).
    first_src: Endpoint,
    last_seen_ns: u64,
    /// The time of this flow's entry in `FlowTable::by_age` (at most `last_seen_ns`).
    age_key_ns: u64,
    last_ctx: FrameCtx,
    ignored: bool,
    halves: [Half<C>; 2],
}

impl<C> Flow<C> {
    /// RFC 9293 §3.5: a SYN opens a connection. A SYN (without ACK) on this 4-tuple is a new
    /// connection unless it repeats the SYN already seen in that direction.
    fn replaced_by_syn(&self, dir: usize, seq: u32) -> bool {
        let h = &self.halves[dir];
        if h.syn_seq == Some(seq) {
            return false;
        }
        h.syn_seq.is_some() || h.seen_payload || self.halves.iter().any(|h| h.ended)
    }
}

/// How many of the least recently seen flows eviction looks through for one that never
/// carried storage traffic.
const EVICTION_SCAN: usize = 4096;

pub struct FlowTable<C> {
    cfg: FlowConfig,
    /// Boxed: the table's free buckets then cost a pointer, not a whole flow (~1 KiB).
    flows: FastMap<FlowKey, Box<Flow<C>>>,
    /// (time, flow id) → key, one entry per flow, least recently seen first: eviction and
    /// idle order. An entry is updated lazily: its time (the flow's `age_key_ns`) may be older
    /// than the flow's `last_seen_ns`, and is brought up to date when it reaches the front
    /// (`fresh_front`); an entry's time never exceeds the flow's, so the first fresh entry is
    /// the least recently seen flow. No ordered-map work on a frame of a known flow.
    by_age: BTreeMap<(u64, u64), FlowKey>,
    next_id: u64,
    total_buffered: usize,
    stats: ReassemblyStats,
    anomalies: Anomalies,
}

/// Hand a chunk to a consumer.
fn feed<S, C: StreamConsumer<S>>(consumer: &mut C, chunk: Chunk<'_>, ctx: &FrameCtx, shared: &mut S) {
    match chunk {
        Chunk::Data(b) => consumer.data(b, ctx, shared),
        Chunk::Gap(n) => consumer.gap(n, ctx, shared),
    }
}

/// Flush a direction's buffer into its consumer and close it (no-op when already closed).
fn close_half<S, C: StreamConsumer<S>>(
    half: &mut Half<C>,
    ctx: &FrameCtx,
    stats: &mut ReassemblyStats,
    total_buffered: &mut usize,
    shared: &mut S,
) {
    let held = half.reasm.buffered_bytes();
    match half.consumer.take() {
        Some(mut c) => {
            half.reasm.flush(stats, &mut |chunk, cx| feed(&mut c, chunk, cx, shared));
            c.close(ctx, shared);
        }
        None => half.reasm.flush(stats, &mut |_, _| {}),
    }
    *total_buffered -= held;
}

impl<C> FlowTable<C> {
    pub fn new(cfg: FlowConfig) -> Self {
        FlowTable {
            cfg,
            flows: FastMap::default(),
            by_age: BTreeMap::new(),
            next_id: 0,
            total_buffered: 0,
            stats: ReassemblyStats::default(),
            anomalies: Anomalies::default(),
        }
    }

    /// Reassembly counters summed over every flow seen so far.
    pub fn stats(&self) -> ReassemblyStats {
        self.stats
    }

    /// Anomalies raised by the table (`tcp.flow_table_full`, `tcp.global_buffer_cap`,
    /// `tcp.undeliverable_data`); the caller merges them into its own.
    pub fn anomalies(&self) -> &Anomalies {
        &self.anomalies
    }

    /// Flows currently in the table (open, closed-but-remembered, and ignored).
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Out-of-order bytes held across all flows.
    pub fn buffered_bytes(&self) -> usize {
        self.total_buffered
    }

    /// Feed one TCP segment sent from `src` to `dst`. See the module doc for `make` and the
    /// direction numbering.
    #[allow(clippy::too_many_arguments)]
    pub fn segment<S>(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        seg: &TcpSegment<'_>,
        dup_signature: u64,
        ctx: &FrameCtx,
        shared: &mut S,
        make: &mut dyn FnMut(u64, Endpoint, Endpoint) -> Option<(C, C)>,
    ) -> FlowOutcome
    where
        C: StreamConsumer<S>,
    {
        let from = (src, seg.src_port);
        let to = (dst, seg.dst_port);
        let key = FlowKey::new(from, to);

        if seg.flags & (SYN | ACK) == SYN {
            let reused = self.flows.get(&key).is_some_and(|f| f.replaced_by_syn(usize::from(f.first_src != from), seg.seq));
            if reused {
                self.remove(key, shared);
            }
        }
        if !self.flows.contains_key(&key) {
            while self.flows.len() >= self.cfg.max_flows.max(1) {
                // The least recently seen flow that never carried storage traffic, among the
                // oldest `EVICTION_SCAN`; only when all of those did, the oldest of them.
                let Some(victim) = self.eviction_victim() else { break };
                self.anomalies.raise(Anomaly::FlowTableFull);
                if self.flows.get(&victim).is_some_and(|f| f.storage) {
                    self.anomalies.raise(Anomaly::StorageFlowEvicted);
                }
                self.remove(victim, shared);
            }
        }
        let flow = match self.flows.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => {
                // The run-wide number of the opening frame (`FrameCtx::seq`): flows of
                // several tables or `--threads` workers then order by creation as one table's.
                // Unit tests give no frame numbers: a counter then.
                let id = if ctx.seq != 0 { ctx.seq } else { self.next_id };
                self.next_id += 1;
                let (c0, c1, ignored) = match make(id, from, to) {
                    Some((c0, c1)) => (Some(c0), Some(c1), false),
                    None => (None, None, true),
                };
                let r = self.cfg.reassembly;
                self.by_age.insert((ctx.ts_ns, id), key);
                v.insert(Box::new(Flow {
                    id,
                    storage: false,
                    first_src: from,
                    last_seen_ns: ctx.ts_ns,
                    age_key_ns: ctx.ts_ns,
                    last_ctx: *ctx,
                    ignored,
                    halves: [Half::new(r, c0), Half::new(r, c1)],
                }))
            }
        };

        // Timestamps of merged captures can step back a little: keep the latest.
        // (`by_age` catches up in `fresh_front`.)
        flow.last_seen_ns = flow.last_seen_ns.max(ctx.ts_ns);
        flow.last_ctx = *ctx;

        let dir = usize::from(flow.first_src != from);
        let flow_id = flow.id;
        let half = &mut flow.halves[dir];
        if half.is_mirror_copy(dup_signature, ctx.ts_ns, &self.cfg) {
            self.stats.mirror_duplicate_frames += 1;
            return FlowOutcome::MirrorDuplicate;
        }
        if seg.flags & SYN != 0 && half.syn_seq.is_none() {
            half.syn_seq = Some(seg.seq);
        }
        half.seen_payload |= seg.declared_len > 0 || !seg.payload.is_empty();
        if seg.flags & FIN != 0 {
            half.ended = true;
        }
        if seg.flags & RST != 0 {
            flow.halves.iter_mut().for_each(|h| h.ended = true);
        }
        if flow.ignored {
            return FlowOutcome::Ignored { flow_id };
        }

        let stats = &mut self.stats;
        let total = &mut self.total_buffered;
        let out = if seg.flags & RST != 0 {
            // RFC 9293 §3.5.3: data carried by a RST is diagnostic, not part of the stream.
            let captured = seg.payload.len() as u64;
            stats.segments += 1;
            stats.dropped_bytes += captured;
            for h in flow.halves.iter_mut() {
                close_half(h, ctx, stats, total, shared);
            }
            let declared = u64::from(seg.declared_len).max(captured);
            SegmentOutcome { dropped: captured, missing: declared - captured, ..SegmentOutcome::default() }
        } else {
            let half = &mut flow.halves[dir];
            let held = half.reasm.buffered_bytes();
            let overflows = stats.overflow_gaps;
            let out = match half.consumer.as_mut() {
                Some(c) => half.reasm.segment(seg.seq, seg.flags, seg.payload, seg.declared_len, ctx, stats, &mut |chunk, cx| {
                    feed(c, chunk, cx, shared)
                }),
                None => half.reasm.segment(seg.seq, seg.flags, seg.payload, seg.declared_len, ctx, stats, &mut |_, _| {}),
            };
            *total = *total + half.reasm.buffered_bytes() - held;
            if half.reasm.is_finished() {
                close_half(half, ctx, stats, total, shared);
            }
            self.anomalies.raise_n(Anomaly::ReorderBeyondBuffer, stats.overflow_gaps - overflows);
            out
        };
        if !flow.storage {
            flow.storage = flow.halves.iter().any(|h| h.consumer.as_ref().is_some_and(|c| c.carries_storage()));
        }
        if out.dropped > 0 {
            self.anomalies.raise(Anomaly::UndeliverableData);
        }
        self.stats.peak_buffered_bytes = self.stats.peak_buffered_bytes.max(self.total_buffered as u64);
        self.enforce_global_cap(ctx, shared);
        FlowOutcome::Stream { flow_id, dir: dir as u8, seg: out }
    }

    /// Declare holes lost in the largest buffers until the total is within the global cap.
    fn enforce_global_cap<S>(&mut self, ctx: &FrameCtx, shared: &mut S)
    where
        C: StreamConsumer<S>,
    {
        while self.total_buffered > self.cfg.max_total_buffered_bytes {
            // The largest buffer; on a tie the least recently seen flow's (then direction 0).
            let mut largest: Option<(usize, (u64, u64), FlowKey, usize)> = None;
            for (key, f) in self.flows.iter() {
                let age = (f.last_seen_ns, f.id);
                for (d, h) in f.halves.iter().enumerate() {
                    let n = h.reasm.buffered_bytes();
                    let better = match largest {
                        None => n > 0,
                        Some((ln, lage, _, ld)) => n > ln || (n == ln && (age, d) < (lage, ld)),
                    };
                    if better {
                        largest = Some((n, age, *key, d));
                    }
                }
            }
            let largest = largest.map(|(n, _, key, d)| (n, key, d));
            let Some((n, key, d)) = largest else { break };
            let Some(flow) = self.flows.get_mut(&key) else { break };
            self.anomalies.raise(Anomaly::GlobalBufferCap);
            let half = &mut flow.halves[d];
            let stats = &mut self.stats;
            match half.consumer.as_mut() {
                Some(c) => half.reasm.give_up_holes(stats, &mut |chunk, cx| feed(c, chunk, cx, shared)),
                None => half.reasm.give_up_holes(stats, &mut |_, _| {}),
            }
            self.total_buffered -= n;
            if half.reasm.is_finished() {
                close_half(half, ctx, stats, &mut self.total_buffered, shared);
            }
        }
    }

    /// Flush and close both directions of a flow (as of its last frame) and forget it.
    fn remove<S>(&mut self, key: FlowKey, shared: &mut S)
    where
        C: StreamConsumer<S>,
    {
        let Some(mut flow) = self.flows.remove(&key) else { return };
        self.by_age.remove(&(flow.age_key_ns, flow.id));
        let ctx = flow.last_ctx;
        for h in flow.halves.iter_mut() {
            close_half(h, &ctx, &mut self.stats, &mut self.total_buffered, shared);
        }
    }

    /// The least recently seen flow's `by_age` entry, after bringing stale entries at the
    /// front up to date (each moves to its flow's `last_seen_ns`).
    fn fresh_front(&mut self) -> Option<((u64, u64), FlowKey)> {
        loop {
            let (&(at, id), &key) = self.by_age.first_key_value()?;
            let Some(flow) = self.flows.get_mut(&key) else {
                // Never happens (one entry per flow); dropping it keeps the loop finite.
                self.by_age.pop_first();
                continue;
            };
            if flow.last_seen_ns == at {
                return Some(((at, id), key));
            }
            self.by_age.pop_first();
            flow.age_key_ns = flow.last_seen_ns;
            self.by_age.insert((flow.last_seen_ns, id), key);
        }
    }

    /// The flow to evict from a full table: the least recently seen one that never carried
    /// storage traffic among the `EVICTION_SCAN` least recently seen, else the least recently
    /// seen. The entries looked at are taken off in age order (fresh) and put back.
    fn eviction_victim(&mut self) -> Option<FlowKey> {
        let mut looked: Vec<((u64, u64), FlowKey)> = Vec::new();
        let mut found = None;
        while looked.len() < EVICTION_SCAN {
            let Some((age, key)) = self.fresh_front() else { break };
            self.by_age.pop_first();
            looked.push((age, key));
            if self.flows.get(&key).is_some_and(|f| !f.storage) {
                found = Some(key);
                break;
            }
        }
        let oldest = looked.first().map(|&(_, k)| k);
        for (age, key) in looked {
            self.by_age.insert(age, key);
        }
        found.or(oldest)
    }

    /// Flush, close and forget every flow with no frame for the idle timeout before `now_ns`.
    pub fn expire_idle<S>(&mut self, now_ns: u64, shared: &mut S)
    where
        C: StreamConsumer<S>,
    {
        self.expire_idle_marked(now_ns, shared, &mut |_, _| {})
    }

    /// `expire_idle`, calling `before(shared, (last seen, flow id))` before each flow is
    /// closed: the order key of what its close emits (`--threads` merges the closes of
    /// several workers' tables in this order, the order of one table).
    pub fn expire_idle_marked<S>(&mut self, now_ns: u64, shared: &mut S, before: &mut dyn FnMut(&mut S, (u64, u64)))
    where
        C: StreamConsumer<S>,
    {
        while let Some(((seen, id), key)) = self.fresh_front() {
            if seen.saturating_add(self.cfg.idle_timeout_ns) >= now_ns {
                break;
            }
            before(shared, (seen, id));
            self.remove(key, shared);
        }
    }

    /// End of input: flush, close and forget every flow, least recently seen first.
    pub fn finish<S>(&mut self, shared: &mut S)
    where
        C: StreamConsumer<S>,
    {
        self.finish_marked(shared, &mut |_, _| {})
    }

    /// `finish`, with `before` as in `expire_idle_marked`.
    pub fn finish_marked<S>(&mut self, shared: &mut S, before: &mut dyn FnMut(&mut S, (u64, u64)))
    where
        C: StreamConsumer<S>,
    {
        while let Some((age, key)) = self.fresh_front() {
            before(shared, age);
            self.remove(key, shared);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameRef;
    use proptest::prelude::*;
    use std::cell::RefCell;
    use std::net::Ipv4Addr;
    use std::rc::Rc;

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Ev {
        Data(Vec<u8>),
        Gap(u64),
        Close,
    }

    type Log = Rc<RefCell<Vec<(u64, u8, Ev)>>>;

    /// Records what one direction receives, tagged with its flow id and direction.
    struct Rec {
        flow: u64,
        dir: u8,
        log: Log,
        /// Saw data starting like an SMB2 header.
        storage: bool,
    }

    impl StreamConsumer<()> for Rec {
        fn data(&mut self, bytes: &[u8], _: &FrameCtx, _: &mut ()) {
            self.storage |= bytes.starts_with(b"\xfeSMB");
            self.log.borrow_mut().push((self.flow, self.dir, Ev::Data(bytes.to_vec())));
        }
        fn carries_storage(&self) -> bool {
            self.storage
        }
        fn gap(&mut self, missing: u64, _: &FrameCtx, _: &mut ()) {
            self.log.borrow_mut().push((self.flow, self.dir, Ev::Gap(missing)));
        }
        fn close(&mut self, _: &FrameCtx, _: &mut ()) {
            self.log.borrow_mut().push((self.flow, self.dir, Ev::Close));
        }
    }

    const CLIENT: u8 = 10;
    const SERVER: u8 = 20;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(198, 18, 0, last))
    }

    /// A table with a recording `make` that ignores flows to port 80.
    struct Rig {
        t: FlowTable<Rec>,
        log: Log,
        made: Vec<(u64, Endpoint, Endpoint)>,
        frame: u64,
    }

    impl Rig {
        fn new(cfg: FlowConfig) -> Self {
            Rig { t: FlowTable::new(cfg), log: Log::default(), made: vec![], frame: 0 }
        }
        /// Send a segment at `ms` milliseconds; the dup signature is (sig).
        #[allow(clippy::too_many_arguments)]
        fn send(&mut self, from: (u8, u16), to: (u8, u16), seq: u32, flags: u8, payload: &[u8], sig: u64, ms: u64) -> FlowOutcome {
            self.frame += 1;
            let seg = TcpSegment { src_port: from.1, dst_port: to.1, seq, ack: 0, flags, payload, declared_len: payload.len() as u32 };
            let ctx = FrameCtx { frame: FrameRef { file: 0, number: self.frame }, ts_ns: ms * 1_000_000, seq: 0 };
            let (log, made) = (&self.log, &mut self.made);
            self.t.segment(ip(from.0), ip(to.0), &seg, sig, &ctx, &mut (), &mut |id, a, b| {
                made.push((id, a, b));
                if b.1 == 80 {
                    return None;
                }
                Some((Rec { flow: id, dir: 0, log: log.clone(), storage: false }, Rec { flow: id, dir: 1, log: log.clone(), storage: false }))
            })
        }
        fn events(&self, flow: u64, dir: u8) -> Vec<Ev> {
            self.log.borrow().iter().filter(|e| e.0 == flow && e.1 == dir).map(|e| e.2.clone()).collect()
        }
        fn data(&self, flow: u64, dir: u8) -> Vec<u8> {
            self.events(flow, dir).into_iter().flat_map(|e| if let Ev::Data(b) = e { b } else { vec![] }).collect()
        }
    }

    const C: (u8, u16) = (CLIENT, 50000);
    const S: (u8, u16) = (SERVER, 445);

    fn stream(out: FlowOutcome) -> (u64, u8, SegmentOutcome) {
        match out {
            FlowOutcome::Stream { flow_id, dir, seg } => (flow_id, dir, seg),
            other => panic!("expected a stream outcome, got {other:?}"),
        }
    }

    #[test]
    fn both_directions_share_a_flow_numbered_from_its_first_segment() {
        let mut r = Rig::new(FlowConfig::default());
        // First segment seen goes server → client (capture started mid-connection).
        assert_eq!(stream(r.send(S, C, 900, ACK, b"resp", 1, 0)).1, 0);
        assert_eq!(stream(r.send(C, S, 100, ACK, b"req", 2, 1)).1, 1);
        assert_eq!(stream(r.send(S, C, 904, ACK, b"onse", 3, 2)).1, 0);
        assert_eq!(r.made, vec![(0, (ip(SERVER), 445), (ip(CLIENT), 50000))]);
        assert_eq!(r.data(0, 0), b"response");
        assert_eq!(r.data(0, 1), b"req");
        assert_eq!(r.t.len(), 1);
        r.t.finish(&mut ());
        assert_eq!(r.events(0, 0).last(), Some(&Ev::Close));
        assert_eq!(r.events(0, 1).last(), Some(&Ev::Close));
        assert!(r.t.is_empty());
    }

    #[test]
    fn mirror_copies_are_dropped_within_the_window() {
        let mut r = Rig::new(FlowConfig::default());
        r.send(C, S, 0, SYN, b"", 7, 0);
        r.send(C, S, 1, ACK, b"abc", 8, 1);
        assert_eq!(r.send(C, S, 1, ACK, b"abc", 8, 2), FlowOutcome::MirrorDuplicate);
        assert_eq!(r.send(C, S, 0, SYN, b"", 7, 3), FlowOutcome::MirrorDuplicate);
        // A pure ACK seen twice is a copy too; the other direction has its own memory.
        r.send(S, C, 500, ACK, b"", 9, 4);
        assert_eq!(r.send(S, C, 500, ACK, b"", 9, 4), FlowOutcome::MirrorDuplicate);
        // The same frame long after is a retransmission, not a copy.
        let (_, _, seg) = stream(r.send(C, S, 1, ACK, b"abc", 8, 500));
        assert_eq!(seg.retransmitted, 3);
        // Merged captures can step back in time: still too far apart to be a copy.
        assert_eq!(stream(r.send(C, S, 1, ACK, b"abc", 8, 100)).2.retransmitted, 3);
        assert_eq!(r.t.stats().mirror_duplicate_frames, 3);
        assert_eq!(r.data(0, 0), b"abc");
    }

    #[test]
    fn mirror_memory_holds_only_the_last_entries() {
        let cfg = FlowConfig { dup_window_entries: 2, ..FlowConfig::default() };
        let mut r = Rig::new(cfg);
        r.send(C, S, 1, ACK, b"a", 1, 0);
        r.send(C, S, 2, ACK, b"b", 2, 0);
        r.send(C, S, 3, ACK, b"c", 3, 0);
        // Signature 1 was pushed out: processed (a retransmission), not a mirror copy.
        assert_eq!(stream(r.send(C, S, 1, ACK, b"a", 1, 0)).2.retransmitted, 1);
        assert_eq!(r.send(C, S, 3, ACK, b"c", 3, 0), FlowOutcome::MirrorDuplicate);
    }

    #[test]
    fn rst_closes_both_directions_and_drops_its_payload() {
        let mut r = Rig::new(FlowConfig::default());
        r.send(C, S, 0, SYN, b"", 1, 0);
        r.send(S, C, 70, SYN | ACK, b"", 2, 0);
        r.send(C, S, 1, ACK, b"ab", 3, 0);
        r.send(C, S, 5, ACK, b"ef", 4, 0); // held: hole at offsets 2..4
        r.send(S, C, 71, ACK, b"xy", 5, 0);
        let (_, dir, seg) = stream(r.send(S, C, 73, RST, b"reason", 6, 1));
        assert_eq!(dir, 1);
        assert_eq!(seg.dropped, 6);
        assert_eq!(r.events(0, 0), [Ev::Data(b"ab".to_vec()), Ev::Gap(2), Ev::Data(b"ef".to_vec()), Ev::Close]);
        assert_eq!(r.events(0, 1), [Ev::Data(b"xy".to_vec()), Ev::Close]);
        assert_eq!(r.t.buffered_bytes(), 0);
        // Late data after the RST: not delivered; no new flow.
        assert_eq!(stream(r.send(C, S, 7, ACK, b"gh", 7, 2)).2.dropped, 2);
        assert_eq!(r.made.len(), 1);
        assert!(r.t.anomalies().get("tcp.undeliverable_data") >= 1);
    }

    #[test]
    fn fin_closes_its_direction_once_the_stream_before_it_is_complete() {
        let mut r = Rig::new(FlowConfig::default());
        r.send(C, S, 0, SYN, b"", 1, 0);
        r.send(C, S, 4, ACK | FIN, b"def", 2, 0);
        assert!(!r.events(0, 0).contains(&Ev::Close));
        r.send(C, S, 1, ACK, b"abc", 3, 0);
        assert_eq!(r.events(0, 0), [Ev::Data(b"abc".to_vec()), Ev::Data(b"def".to_vec()), Ev::Close]);
        // The other direction stays open; a retransmitted FIN changes nothing.
        r.send(S, C, 10, ACK, b"more", 4, 0);
        r.send(C, S, 4, ACK | FIN, b"def", 5, 0);
        assert_eq!(r.data(0, 1), b"more");
        r.t.finish(&mut ());
        assert_eq!(r.events(0, 0).iter().filter(|e| **e == Ev::Close).count(), 1);
        assert_eq!(r.events(0, 1).last(), Some(&Ev::Close));
    }

    #[test]
    fn a_new_syn_on_a_finished_tuple_starts_a_new_flow() {
        let mut r = Rig::new(FlowConfig::default());
        r.send(C, S, 0, SYN, b"", 1, 0);
        r.send(C, S, 1, ACK | FIN, b"one", 2, 0);
        r.send(S, C, 50, ACK | FIN, b"", 3, 0);
        r.send(C, S, 0, SYN, b"", 1, 0); // mirror copy of the first SYN: not a new flow
        assert_eq!(r.made.len(), 1);
        r.send(C, S, 9000, SYN, b"", 4, 100);
        r.send(C, S, 9001, ACK, b"two", 5, 100);
        assert_eq!(r.made.iter().map(|m| m.0).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(r.data(0, 0), b"one");
        assert_eq!(r.data(1, 0), b"two");
        // A retransmitted SYN of the new connection stays in it.
        r.send(C, S, 9000, SYN, b"", 6, 200);
        assert_eq!(r.made.len(), 2);
    }

    #[test]
    fn a_syn_with_a_new_isn_replaces_an_open_flow() {
        let mut r = Rig::new(FlowConfig::default());
        r.send(C, S, 10, ACK, b"old", 1, 0); // mid-connection, never closed
        r.send(C, S, 77, SYN, b"", 2, 1);
        assert_eq!(r.events(0, 0), [Ev::Data(b"old".to_vec()), Ev::Close]);
        assert_eq!(r.made.len(), 2);
    }

    #[test]
    fn ignored_flows_are_not_reassembled_and_make_is_asked_once() {
        let mut r = Rig::new(FlowConfig::default());
        let web = (SERVER, 80);
        assert_eq!(r.send(C, web, 1, ACK, b"GET /", 1, 0), FlowOutcome::Ignored { flow_id: 0 });
        assert_eq!(r.send(web, C, 1, ACK, b"200", 2, 0), FlowOutcome::Ignored { flow_id: 0 });
        assert_eq!(r.send(web, C, 1, ACK, b"200", 2, 0), FlowOutcome::MirrorDuplicate);
        assert_eq!(r.made.len(), 1);
        assert!(r.log.borrow().is_empty());
        assert_eq!(r.t.stats().segments, 0);
    }

    #[test]
    fn full_table_evicts_the_least_recently_seen_flow() {
        let mut r = Rig::new(FlowConfig { max_flows: 2, ..FlowConfig::default() });
        let (c1, c2, c3) = ((1, 1000), (2, 1000), (3, 1000));
        r.send(c1, S, 1, ACK, b"a", 1, 0);
        r.send(c2, S, 1, ACK, b"b", 2, 1);
        r.send(c1, S, 2, ACK, b"a", 3, 2); // c1 now more recent than c2
        r.send(c3, S, 1, ACK, b"c", 4, 3);
        assert_eq!(r.t.anomalies().get("tcp.flow_table_full"), 1);
        assert_eq!(r.events(1, 0).last(), Some(&Ev::Close));
        assert!(!r.events(0, 0).contains(&Ev::Close));
        assert_eq!(r.t.len(), 2);
    }

    /// A flood of new flows evicts flows that never carried storage traffic, not an older
    /// storage connection; only a table full of storage flows gives one up (counted).
    #[test]
    fn eviction_spares_storage_flows() {
        let mut r = Rig::new(FlowConfig { max_flows: 3, ..FlowConfig::default() });
        let storage = (1, 50000);
        r.send(storage, (SERVER, 445), 1, ACK, b"\xfeSMB first", 1, 0);
        for i in 0..100u16 {
            r.send((2, 1000 + i), (SERVER, 445), 7, ACK, b"x", 100 + u64::from(i), 1 + u64::from(i));
        }
        r.send(storage, (SERVER, 445), 11, ACK, b" second", 999, 200);
        let id = r.made[0].0;
        assert_eq!(r.events(id, 0), [Ev::Data(b"\xfeSMB first".to_vec()), Ev::Data(b" second".to_vec())]);
        assert_eq!(r.t.anomalies().get("tcp.flow_table_full"), 98);
        assert_eq!(r.t.anomalies().get("tcp.storage_flow_evicted"), 0);
        // Three storage flows fill the table: a fourth flow evicts the oldest of them.
        let mut r = Rig::new(FlowConfig { max_flows: 3, ..FlowConfig::default() });
        for i in 0..4u16 {
            r.send((3, 2000 + i), (SERVER, 445), 1, ACK, b"\xfeSMB", 10 + u64::from(i), u64::from(i));
        }
        assert_eq!(r.t.anomalies().get("tcp.storage_flow_evicted"), 1);
        assert_eq!(r.events(r.made[0].0, 0).last(), Some(&Ev::Close));
    }

    #[test]
    fn idle_flows_expire() {
        let mut r = Rig::new(FlowConfig { idle_timeout_ns: 10_000_000_000, ..FlowConfig::default() });
        r.send(C, S, 1, ACK, b"a", 1, 0);
        r.send(C, S, 3, ACK, b"c", 2, 1); // held
        r.send((1, 1), S, 1, ACK, b"z", 3, 9_000);
        r.t.expire_idle(10_000_000_000, &mut ());
        assert_eq!(r.t.len(), 2);
        r.t.expire_idle(10_001_000_001, &mut ());
        assert_eq!(r.t.len(), 1);
        assert_eq!(r.events(0, 0), [Ev::Data(b"a".to_vec()), Ev::Gap(1), Ev::Data(b"c".to_vec()), Ev::Close]);
        assert_eq!(r.events(1, 0), [Ev::Data(b"z".to_vec())]); // still open
        assert_eq!(r.t.buffered_bytes(), 0);
    }

    #[test]
    fn global_cap_declares_holes_lost_in_the_largest_buffer() {
        let mut r = Rig::new(FlowConfig { max_total_buffered_bytes: 10, ..FlowConfig::default() });
        let (c1, c2) = ((1, 1000), (2, 1000));
        r.send(c1, S, 1, ACK, b"a", 1, 0);
        r.send(c2, S, 1, ACK, b"a", 2, 0);
        r.send(c1, S, 3, ACK, b"cc", 3, 0); // c1 holds 2
        r.send(c2, S, 3, ACK, b"cccccc", 4, 0); // c2 holds 6
        assert_eq!(r.t.buffered_bytes(), 8);
        r.send(c1, S, 6, ACK, b"fff", 5, 0); // 11 > 10: c2 (largest) gives up its hole
        assert_eq!(r.t.anomalies().get("tcp.global_buffer_cap"), 1);
        assert_eq!(r.events(1, 0), [Ev::Data(b"a".to_vec()), Ev::Gap(1), Ev::Data(b"cccccc".to_vec())]);
        assert_eq!(r.t.buffered_bytes(), 5);
        assert_eq!(r.t.stats().peak_buffered_bytes, 11);
    }

    /// The mirror-copy rule as stated (`FlowConfig::dup_window_*`), by a plain list: a frame is
    /// a copy when a remembered frame has its signature and lies within the window of it;
    /// otherwise it is remembered, the oldest forgotten past `entries`, and frames older than
    /// the window are forgotten before each decision.
    fn mirror_model(frames: &[(u64, u64)], entries: usize, window: u64) -> Vec<bool> {
        let mut recent: Vec<(u64, u64)> = Vec::new();
        let mut out = Vec::new();
        for &(sig, t) in frames {
            while recent.first().is_some_and(|&(_, t0)| t0.saturating_add(window) < t) {
                recent.remove(0);
            }
            let copy = recent.iter().any(|&(s, t0)| s == sig && t0.abs_diff(t) <= window);
            if !copy {
                if recent.len() >= entries {
                    recent.remove(0);
                }
                recent.push((sig, t));
            }
            out.push(copy);
        }
        out
    }

    /// The bucket counts (`Half::sig_counts`) decide as the scan does: frames over few
    /// signatures (so buckets collide and copies recur), times that step back and forth.
    #[test]
    fn mirror_copy_bucket_counts_decide_as_the_rule_says() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // (entries, window, distinct signatures, bucket counts made: a direction held 16 at once)
        for (entries, window, sigs, counted) in [
            (64, 50_000, 300, true),
            (64, 50_000, 2000, true),
            (20, 1_000_000, 40, true),
            (255, 1_000_000, 600, true),
            (300, 1_000_000, 600, false),
            (64, 5_000, 50, false),
            (8, 50_000, 30, false),
        ] {
            let cfg = FlowConfig { dup_window_entries: entries, dup_window_ns: window, ..FlowConfig::default() };
            let mut h: Half<()> = Half::new(ReassemblyConfig::default(), None);
            let mut t = 1_000_000u64;
            let mut frames = Vec::new();
            for _ in 0..20_000 {
                t = (t + next() % 3_000).saturating_sub(next() % 400);
                // Signatures of one bucket as often as not: multiples of a spread of the bucket bits.
                let k = next() % sigs;
                let sig = if k % 2 == 0 { k << 40 } else { k.wrapping_mul(0x9e37_79b9_7f4a_7c15) };
                frames.push((sig, t));
            }
            let got: Vec<bool> = frames.iter().map(|&(s, t)| h.is_mirror_copy(s, t, &cfg)).collect();
            assert_eq!(got, mirror_model(&frames, entries, window), "entries {entries}, window {window}");
            let copies = got.iter().filter(|&&c| c).count();
            assert!(copies > 100, "copies recur: {copies}, entries {entries}, window {window}");
            assert_eq!(h.sig_counts.is_some(), counted, "entries {entries}, window {window}");
            if let Some(c) = &h.sig_counts {
                let mut want = [0u8; SIG_BUCKETS];
                h.recent_sigs.iter().for_each(|&s| want[sig_bucket(s)] += 1);
                assert_eq!(c[..], want[..], "counts follow the remembered signatures");
            }
        }
    }

    /// What the caller accounts, per the `FlowOutcome` contract.
    #[derive(Default)]
    struct Tally {
        captured: u64,
        mirror: u64,
        ignored: u64,
        retransmitted: u64,
        dropped: u64,
        late: u64,
        keepalive: u64,
        delivered_or_buffered: u64,
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Across flows, mirror copies, ignored flows, RSTs, evictions, idle expiry and the global
        /// cap, every captured payload byte is accounted exactly once, and consumers receive as
        /// Data exactly the delivered + buffered bytes.
        #[test]
        fn prop_flow_table_accounts_every_payload_byte_once(
            frames in proptest::collection::vec(
                (0u8..4, any::<bool>(), 0u32..2000, 0u8..0x20, 0usize..300, 0u8..8, 0u64..3),
                1..150),
            max_flows in 1usize..4,
            global_cap in 0usize..2000,
        ) {
            let cfg = FlowConfig {
                max_flows,
                max_total_buffered_bytes: global_cap,
                reassembly: ReassemblyConfig { max_buffered_bytes: 1500, max_segments: 8 },
                idle_timeout_ns: 5_000_000,
                ..FlowConfig::default()
            };
            let mut r = Rig::new(cfg);
            let mut tally = Tally::default();
            let bytes = vec![0xa5u8; 300];
            let mut ms = 0;
            let mut last_sig = 0;
            for (client, reverse, seq, flags, len, mirror, step) in frames {
                ms += step;
                let cl = (client, 1000 + u16::from(client));
                let sv = if client == 3 { (SERVER, 80) } else { S };
                let (from, to) = if reverse { (sv, cl) } else { (cl, sv) };
                // Mirror copies reuse the previous signature; others get a fresh one.
                let sig = if mirror == 0 { last_sig } else { last_sig + 1 };
                last_sig = sig;
                let out = r.send(from, to, seq, flags, &bytes[..len], sig, ms);
                tally.captured += len as u64;
                match out {
                    FlowOutcome::MirrorDuplicate => tally.mirror += len as u64,
                    FlowOutcome::Ignored { .. } => tally.ignored += len as u64,
                    FlowOutcome::Stream { seg, .. } => {
                        prop_assert_eq!(seg.captured(), len as u64);
                        tally.retransmitted += seg.retransmitted;
                        tally.dropped += seg.dropped;
                        tally.late += seg.late;
                        tally.keepalive += seg.keepalive;
                        tally.delivered_or_buffered += seg.delivered + seg.buffered;
                    }
                }
                prop_assert!(r.t.buffered_bytes() <= global_cap);
                if step == 2 {
                    r.t.expire_idle(ms * 1_000_000, &mut ());
                }
            }
            r.t.finish(&mut ());
            prop_assert!(r.t.is_empty());
            prop_assert_eq!(r.t.buffered_bytes(), 0);
            let data: u64 = r.log.borrow().iter().map(|e| if let Ev::Data(b) = &e.2 { b.len() as u64 } else { 0 }).sum();
            prop_assert_eq!(data, tally.delivered_or_buffered);
            prop_assert_eq!(tally.captured, tally.mirror + tally.ignored + tally.retransmitted + tally.dropped + tally.late + tally.keepalive + data);
            // Every consumer that was made is closed exactly once.
            let log = r.log.borrow();
            for (id, _, b) in &r.made {
                if b.1 == 80 { continue; }
                for dir in 0..2u8 {
                    let closes = log.iter().filter(|e| e.0 == *id && e.1 == dir && e.2 == Ev::Close).count();
                    prop_assert_eq!(closes, 1, "flow {} dir {}", id, dir);
                }
            }
        }
    }
}
