//! Per-direction TCP reassembly with an in-order fast path and a bounded out-of-order buffer.
//!
//! Sequence numbers are 32 bits and wrap (RFC 9293 §3.4), so every byte is given a 64-bit
//! *stream offset* instead: offset 0 is the byte after the SYN (the SYN occupies one sequence
//! number, RFC 9293 §3.4), or, when the capture starts mid-connection, the first payload byte
//! seen. A segment's offset is found from its signed 32-bit distance to the next expected
//! sequence number, which is valid while the segment lies within 2^31 of it.
//!
//! Byte accounting contract: every captured payload byte given to [`Reassembler::segment`] is
//! reported in exactly one field of the returned [`SegmentOutcome`]:
//! - `delivered`: handed to the consumer as `Chunk::Data` during this call, straight from the frame;
//! - `buffered`: copied into the out-of-order buffer; it reaches the consumer as `Chunk::Data`
//!   exactly once, later in this call or in a later `segment`/`force_gaps`/`flush` (buffered bytes
//!   are never discarded: when limits are hit the *hole* before them is declared lost instead);
//! - `retransmitted`: a copy of bytes already delivered, or already held in the buffer (the first
//!   copy wins);
//! - `late`: bytes of a hole the buffer gave up on (its limits were reached while they were
//!   missing, so they were declared lost and the stream moved on), arriving afterwards:
//!   reordering beyond the buffer, neither lost nor sent twice. They leave `gap_bytes` for
//!   `late_bytes` in the statistics;
//! - `dropped`: cannot belong to the stream (before its first byte, more than a maximum window
//!   ahead, or after the stream was closed).
//!
//! Hence, once `flush` has run: sum of `Chunk::Data` lengths == sum of `delivered + buffered`.

use std::collections::BTreeMap;

use super::{Chunk, ReassemblyStats};
use crate::frame::FrameCtx;

/// TCP header flags (RFC 9293 §3.1).
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;

/// Given-up holes remembered per direction (16 bytes each, allocated as needed, freed with
/// the flow) to recognise their bytes arriving late; beyond it the oldest is forgotten (its
/// late bytes then count as retransmitted).
const MAX_GIVEN_UP: usize = 1024;

/// RFC 7323 §2.3: the largest window a TCP can advertise is 2^30 bytes, so a segment starting
/// further ahead than this of the next expected byte cannot be part of the stream.
const MAX_AHEAD: u64 = 1 << 30;

/// Limits of one direction's out-of-order buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReassemblyConfig {
    /// Payload bytes held out of order before the earliest hole is declared lost.
    pub max_buffered_bytes: usize,
    /// Held segments before the earliest hole is declared lost.
    pub max_segments: usize,
}

impl Default for ReassemblyConfig {
    fn default() -> Self {
        ReassemblyConfig { max_buffered_bytes: 4 << 20, max_segments: 4096 }
    }
}

/// How one segment's payload bytes were used (see the module doc for the contract).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SegmentOutcome {
    /// Captured bytes delivered in order straight from this frame.
    pub delivered: u64,
    /// Captured bytes copied into the out-of-order buffer (delivered exactly once, maybe later).
    pub buffered: u64,
    /// Captured bytes that were already delivered or already buffered.
    pub retransmitted: u64,
    /// Captured bytes that cannot belong to the stream.
    pub dropped: u64,
    /// Captured bytes of a hole declared lost by the buffer's limits, arriving after it.
    pub late: u64,
    /// The garbage octet of a keep-alive (RFC 1122 §4.2.3.6: SEG.SEQ = SND.NXT - 1, at most
    /// one octet): transport overhead, not stream data and not a retransmission.
    pub keepalive: u64,
    /// Bytes the segment declares but the capture does not hold (snaplen truncation). Not
    /// captured bytes, so not part of the accounting; they surface as `Chunk::Gap` if new.
    pub missing: u64,
}

impl SegmentOutcome {
    /// Captured payload bytes of the segment (the sum of the four accounting fields).
    pub fn captured(&self) -> u64 {
        self.delivered + self.buffered + self.retransmitted + self.dropped + self.late + self.keepalive
    }
}

/// One out-of-order piece: `data` followed by `tail_gap` bytes the capture did not hold.
struct Held {
    data: Vec<u8>,
    tail_gap: u64,
    ctx: FrameCtx,
}

impl Held {
    fn len(&self) -> u64 {
        self.data.len() as u64 + self.tail_gap
    }
}

/// Reassembly state of one direction of a TCP connection.
pub struct Reassembler {
    cfg: ReassemblyConfig,
    /// Offset 0 has been tied to a sequence number (SYN seen, or first payload seen).
    started: bool,
    /// `flush` ran: nothing more will be delivered.
    closed: bool,
    /// Stream offset of the next byte to deliver.
    next_off: u64,
    /// Sequence number of the byte at `next_off`.
    next_seq: u32,
    /// Initial sequence number, when the SYN was seen.
    isn: Option<u32>,
    /// Stream offset of the FIN (one past the last data byte), when seen.
    fin_off: Option<u64>,
    /// Out-of-order pieces by stream offset; never overlapping, each starting after `next_off`.
    held: BTreeMap<u64, Held>,
    held_bytes: usize,
    last_ctx: FrameCtx,
    /// Holes [start, end) declared lost because the buffer's limits were reached, not yet
    /// arrived (oldest first, at most `MAX_GIVEN_UP`).
    given_up: Vec<(u64, u64)>,
}

/// A contiguous part of the current segment that is new to the stream.
struct Piece<'p> {
    at: u64,
    data: &'p [u8],
    tail_gap: u64,
}

impl Reassembler {
    pub fn new(cfg: ReassemblyConfig) -> Self {
        Reassembler {
            cfg,
            started: false,
            closed: false,
            next_off: 0,
            next_seq: 0,
            isn: None,
            fin_off: None,
            held: BTreeMap::new(),
            held_bytes: 0,
            last_ctx: FrameCtx::default(),
            given_up: Vec::new(),
        }
    }

    /// Payload bytes currently held out of order.
    pub fn buffered_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Stream offset of the next byte to be delivered (bytes delivered or declared missing so far).
    pub fn next_offset(&self) -> u64 {
        self.next_off
    }

    /// The SYN's sequence number, if the SYN of this direction was seen.
    pub fn isn(&self) -> Option<u32> {
        self.isn
    }

    pub fn is_started(&self) -> bool {
        self.started
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// A FIN was seen and every byte before it has been delivered (or declared missing).
    pub fn is_finished(&self) -> bool {
        self.started && self.held.is_empty() && self.fin_off.is_some_and(|f| self.next_off >= f)
    }

    /// Signed distance (in bytes of stream offset) of `seq` from the next expected byte.
    fn offset_of(&self, seq: u32) -> i64 {
        self.next_off as i64 + i64::from(seq.wrapping_sub(self.next_seq) as i32)
    }

    /// Feed one segment. `payload` is what the capture holds; `declared_len` is the payload
    /// length the IP header declares (if smaller than `payload.len()`, the captured length is used).
    #[allow(clippy::too_many_arguments)]
    pub fn segment(
        &mut self,
        seq: u32,
        flags: u8,
        payload: &[u8],
        declared_len: u32,
        ctx: &FrameCtx,
        stats: &mut ReassemblyStats,
        deliver: &mut dyn FnMut(Chunk<'_>, &FrameCtx),
    ) -> SegmentOutcome {
        stats.segments += 1;
        self.last_ctx = *ctx;
        let captured = payload.len() as u64;
        let declared = u64::from(declared_len).max(captured);
        let mut out = SegmentOutcome { missing: declared - captured, ..SegmentOutcome::default() };
        let syn = flags & SYN != 0;
        let data_seq = if syn { seq.wrapping_add(1) } else { seq };

        if !self.started {
            if self.closed {
                out.dropped = captured;
                stats.dropped_bytes += captured;
                return out;
            }
            if syn {
                self.isn = Some(seq);
            } else if declared == 0 {
                // A pure ACK does not fix the stream start: its sequence number may be a
                // keepalive's SND.NXT-1 (RFC 1122 §4.2.3.6).
                return out;
            }
            self.started = true;
            self.next_seq = data_seq;
            self.next_off = 0;
        }

        let start = self.offset_of(data_seq);
        if !syn && declared <= 1 && self.next_off > 0 && start == self.next_off as i64 - 1 && flags & FIN == 0 {
            // A keep-alive probe (RFC 1122 §4.2.3.6), with or without its garbage octet.
            stats.keepalives += 1;
            out.keepalive = captured;
            return out;
        }
        if start > (self.next_off + MAX_AHEAD) as i64 {
            out.dropped = captured;
            stats.dropped_bytes += captured;
            return out;
        }
        let end = start + declared as i64;
        let cap_end = start + captured as i64;
        // Captured bytes of the segment within [p, q).
        let cap_len = |p: i64, q: i64| (q.min(cap_end) - p).max(0) as u64;
        if flags & FIN != 0 && end >= 0 && self.fin_off.is_none() {
            self.fin_off = Some(end as u64);
        }

        let mut cur = start;
        if cur < 0 {
            let q = end.min(0);
            out.dropped += cap_len(cur, q);
            cur = q;
        }
        let next = self.next_off as i64;
        if cur < next {
            let q = end.min(next);
            let late = self.take_given_up(cur as u64, q as u64, cap_end.max(0) as u64);
            out.late += late;
            out.retransmitted += cap_len(cur, q) - late;
            cur = q;
        }
        if cur < end && self.closed {
            out.dropped += cap_len(cur, end);
            cur = end;
        }

        // Walk [cur, end) across the held pieces: gaps between them are new, the rest are copies.
        let mut any_held = false;
        while cur < end {
            let c = cur as u64;
            let e = end as u64;
            // In order with nothing held (the usual case): no ordered-map lookups.
            let next_piece = if self.held.is_empty() {
                None
            } else {
                let covering = self
                    .held
                    .range(..=c)
                    .next_back()
                    .map(|(k, h)| (*k, *k + h.len()))
                    .filter(|&(_, ke)| ke > c);
                covering.or_else(|| self.held.range(c..).next().map(|(k, h)| (*k, *k + h.len())))
            };
            let (new_to, dup_to) = match next_piece {
                Some((ks, ke)) if ks < e => (ks.max(c), Some(ke.min(e))),
                _ => (e, None),
            };
            if new_to > c {
                let (p, q) = (c as i64, new_to as i64);
                let data_to = q.min(cap_end).max(p);
                let piece = Piece {
                    at: c,
                    data: payload.get((p - start) as usize..(data_to - start) as usize).unwrap_or(&[]),
                    tail_gap: (q - data_to) as u64,
                };
                let n = piece.data.len() as u64;
                if self.place(piece, ctx, stats, deliver) {
                    out.delivered += n;
                } else {
                    out.buffered += n;
                    any_held = true;
                }
            }
            cur = new_to as i64;
            if let Some(q) = dup_to {
                // Overlaps a held piece: the first copy wins.
                out.retransmitted += cap_len(cur, q as i64);
                cur = q as i64;
            }
        }
        self.drain(stats, deliver);

        if any_held {
            stats.out_of_order_segments += 1;
        }
        if out.retransmitted > 0 {
            stats.retransmitted_segments += 1;
            stats.retransmitted_bytes += out.retransmitted;
        }
        if out.late > 0 {
            stats.late_segments += 1;
            stats.late_bytes += out.late;
            stats.gap_bytes = stats.gap_bytes.saturating_sub(out.late);
        }
        stats.dropped_bytes += out.dropped;
        while self.held_bytes > self.cfg.max_buffered_bytes || self.held.len() > self.cfg.max_segments {
            stats.overflow_gaps += 1;
            self.release_first_hole(true, stats, deliver);
        }
        stats.peak_buffered_bytes = stats.peak_buffered_bytes.max(self.held_bytes as u64);
        out
    }

    /// Deliver `piece` now if it is next in order (returns true), else hold a copy of it.
    fn place(
        &mut self,
        piece: Piece<'_>,
        ctx: &FrameCtx,
        stats: &mut ReassemblyStats,
        deliver: &mut dyn FnMut(Chunk<'_>, &FrameCtx),
    ) -> bool {
        if piece.at == self.next_off {
            if !piece.data.is_empty() {
                deliver(Chunk::Data(piece.data), ctx);
                self.advance(piece.data.len() as u64);
            }
            if piece.tail_gap > 0 {
                self.gap(piece.tail_gap, ctx, stats, deliver);
            }
            true
        } else {
            self.held_bytes += piece.data.len();
            self.held.insert(piece.at, Held { data: piece.data.to_vec(), tail_gap: piece.tail_gap, ctx: *ctx });
            false
        }
    }

    fn advance(&mut self, n: u64) {
        self.next_off += n;
        // Sequence space is modulo 2^32: truncating the length is the intended arithmetic.
        self.next_seq = self.next_seq.wrapping_add(n as u32);
    }

    fn gap(&mut self, n: u64, ctx: &FrameCtx, stats: &mut ReassemblyStats, deliver: &mut dyn FnMut(Chunk<'_>, &FrameCtx)) {
        stats.gaps += 1;
        stats.gap_bytes += n;
        deliver(Chunk::Gap(n), ctx);
        self.advance(n);
    }

    /// Deliver held pieces while the first one starts at the next expected byte.
    fn drain(&mut self, stats: &mut ReassemblyStats, deliver: &mut dyn FnMut(Chunk<'_>, &FrameCtx)) {
        while let Some(entry) = self.held.first_entry() {
            if *entry.key() != self.next_off {
                debug_assert!(*entry.key() > self.next_off, "held piece behind the stream");
                break;
            }
            let h = entry.remove();
            self.held_bytes -= h.data.len();
            if !h.data.is_empty() {
                deliver(Chunk::Data(&h.data), &h.ctx);
                self.advance(h.data.len() as u64);
            }
            if h.tail_gap > 0 {
                self.gap(h.tail_gap, &h.ctx, stats, deliver);
            }
        }
    }

    /// Declare the hole before the first held piece lost, then deliver what becomes contiguous.
    /// `given_up`: because of the buffer's limits (its bytes may still arrive, late).
    fn release_first_hole(&mut self, given_up: bool, stats: &mut ReassemblyStats, deliver: &mut dyn FnMut(Chunk<'_>, &FrameCtx)) {
        let Some((&at, h)) = self.held.first_key_value() else { return };
        if at > self.next_off {
            let ctx = h.ctx;
            if given_up {
                if self.given_up.len() == MAX_GIVEN_UP {
                    self.given_up.remove(0);
                }
                self.given_up.push((self.next_off, at));
            }
            self.gap(at - self.next_off, &ctx, stats, deliver);
        }
        self.drain(stats, deliver);
    }

    /// Captured bytes of [p, q) (captured up to `cap_end`) that fall in given-up holes; those
    /// parts of the holes are forgotten (a second copy is a retransmission).
    fn take_given_up(&mut self, p: u64, q: u64, cap_end: u64) -> u64 {
        if self.given_up.is_empty() {
            return 0;
        }
        let q_cap = q.min(cap_end);
        let mut late = 0;
        let mut keep = Vec::with_capacity(self.given_up.len());
        for &(a, b) in &self.given_up {
            let (s, e) = (a.max(p), b.min(q));
            if s >= e {
                keep.push((a, b));
                continue;
            }
            late += q_cap.min(e).saturating_sub(s);
            if a < s {
                keep.push((a, s));
            }
            if e < b {
                keep.push((e, b));
            }
        }
        keep.truncate(MAX_GIVEN_UP);
        self.given_up = keep;
        late
    }

    /// Declare every hole lost and deliver everything held; the stream stays open.
    pub fn force_gaps(&mut self, stats: &mut ReassemblyStats, deliver: &mut dyn FnMut(Chunk<'_>, &FrameCtx)) {
        while !self.held.is_empty() {
            self.release_first_hole(false, stats, deliver);
        }
    }

    /// Like `force_gaps`, because a buffer limit (all flows together) was reached: the holes'
    /// bytes may still arrive, and are then `late`, not retransmitted.
    pub fn give_up_holes(&mut self, stats: &mut ReassemblyStats, deliver: &mut dyn FnMut(Chunk<'_>, &FrameCtx)) {
        while !self.held.is_empty() {
            stats.overflow_gaps += 1;
            self.release_first_hole(true, stats, deliver);
        }
    }

    /// End of stream: declare holes lost, deliver everything held, report the bytes missing
    /// before a FIN seen, and close (later bytes are `dropped` or `retransmitted`). Idempotent.
    pub fn flush(&mut self, stats: &mut ReassemblyStats, deliver: &mut dyn FnMut(Chunk<'_>, &FrameCtx)) {
        if self.closed {
            return;
        }
        self.force_gaps(stats, deliver);
        if let Some(f) = self.fin_off {
            if self.started && f > self.next_off {
                let ctx = self.last_ctx;
                self.gap(f - self.next_off, &ctx, stats, deliver);
            }
        }
        // `given_up` is kept: a stream that finished because its buffer gave holes up (a FIN
        // reached past them) still sees their bytes arrive late; it goes with the flow.
        self.closed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameRef;
    use proptest::prelude::*;

    const ACK: u8 = 0x10;

    fn ctx(n: u64) -> FrameCtx {
        FrameCtx { frame: FrameRef { file: 0, number: n }, ts_ns: n * 1_000, seq: 0 }
    }

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Got {
        /// Bytes and the frame number they were delivered with.
        Data(Vec<u8>, u64),
        Gap(u64),
    }

    /// A reassembler with a recording consumer.
    struct Rig {
        r: Reassembler,
        stats: ReassemblyStats,
        got: Vec<Got>,
        /// Address of each delivered Data slice (to prove the fast path does not copy).
        ptrs: Vec<*const u8>,
        frame: u64,
        outs: Vec<SegmentOutcome>,
        captured: u64,
    }

    impl Rig {
        fn new() -> Self {
            Rig::with(ReassemblyConfig::default())
        }
        fn with(cfg: ReassemblyConfig) -> Self {
            Rig { r: Reassembler::new(cfg), stats: ReassemblyStats::default(), got: vec![], ptrs: vec![], frame: 0, outs: vec![], captured: 0 }
        }
        fn seg_trunc(&mut self, seq: u32, flags: u8, payload: &[u8], declared: u32) -> SegmentOutcome {
            self.frame += 1;
            let (got, ptrs) = (&mut self.got, &mut self.ptrs);
            let out = self.r.segment(seq, flags, payload, declared, &ctx(self.frame), &mut self.stats, &mut |c, cx| match c {
                Chunk::Data(b) => {
                    ptrs.push(b.as_ptr());
                    got.push(Got::Data(b.to_vec(), cx.frame.number))
                }
                Chunk::Gap(n) => got.push(Got::Gap(n)),
            });
            assert_eq!(out.captured(), payload.len() as u64, "every captured byte reported once: {out:?}");
            self.captured += payload.len() as u64;
            self.outs.push(out);
            out
        }
        fn seg(&mut self, seq: u32, flags: u8, payload: &[u8]) -> SegmentOutcome {
            self.seg_trunc(seq, flags, payload, payload.len() as u32)
        }
        fn flush(&mut self) {
            let got = &mut self.got;
            self.r.flush(&mut self.stats, &mut |c, cx| match c {
                Chunk::Data(b) => got.push(Got::Data(b.to_vec(), cx.frame.number)),
                Chunk::Gap(n) => got.push(Got::Gap(n)),
            });
        }
        fn data(&self) -> Vec<u8> {
            self.got.iter().flat_map(|g| if let Got::Data(b, _) = g { b.clone() } else { vec![] }).collect()
        }
        fn shape(&self) -> Vec<String> {
            self.got
                .iter()
                .map(|g| match g {
                    Got::Data(b, f) => format!("D{}@{}", b.len(), f),
                    Got::Gap(n) => format!("G{n}"),
                })
                .collect()
        }
        /// After a flush: Data delivered == delivered + buffered, and nothing is left held.
        fn check_accounting(&self) {
            let data = self.data().len() as u64;
            let sum = |f: fn(&SegmentOutcome) -> u64| self.outs.iter().map(f).sum::<u64>();
            assert_eq!(data, sum(|o| o.delivered) + sum(|o| o.buffered));
            assert_eq!(self.captured, sum(|o| o.captured()));
            assert_eq!(self.stats.retransmitted_bytes, sum(|o| o.retransmitted));
            assert_eq!(self.stats.dropped_bytes, sum(|o| o.dropped));
            let gaps: u64 = self.got.iter().map(|g| if let Got::Gap(n) = g { *n } else { 0 }).sum();
            // Holes the buffer gave up on whose bytes came later left `gap_bytes` for `late_bytes`.
            assert_eq!(self.stats.gap_bytes + self.stats.late_bytes, gaps);
            assert_eq!(self.stats.late_bytes, sum(|o| o.late));
            assert_eq!(self.r.buffered_bytes(), 0);
        }
    }

    #[test]
    fn in_order_is_delivered_straight_from_the_frame() {
        let mut r = Rig::new();
        r.seg(1000, SYN, b"");
        let a = b"hello".to_vec();
        let b = b"world".to_vec();
        assert_eq!(r.seg(1001, ACK, &a), SegmentOutcome { delivered: 5, ..Default::default() });
        r.seg(1006, ACK, &b);
        assert_eq!(r.ptrs, vec![a.as_ptr(), b.as_ptr()]);
        assert_eq!(r.data(), b"helloworld");
        assert_eq!(r.r.isn(), Some(1000));
        assert_eq!(r.r.next_offset(), 10);
        r.flush();
        r.check_accounting();
        assert_eq!(r.stats.segments, 3);
        assert_eq!(r.stats.gaps, 0);
    }

    #[test]
    fn out_of_order_waits_for_the_hole_and_keeps_its_frame() {
        let mut r = Rig::new();
        r.seg(0, SYN, b"");
        assert_eq!(r.seg(6, ACK, b"world"), SegmentOutcome { buffered: 5, ..Default::default() });
        assert_eq!(r.seg(11, ACK, b"!"), SegmentOutcome { buffered: 1, ..Default::default() });
        assert!(r.got.is_empty());
        assert_eq!(r.r.buffered_bytes(), 6);
        assert_eq!(r.seg(1, ACK, b"hello"), SegmentOutcome { delivered: 5, ..Default::default() });
        assert_eq!(r.shape(), ["D5@4", "D5@2", "D1@3"]);
        assert_eq!(r.data(), b"helloworld!");
        assert_eq!(r.stats.out_of_order_segments, 2);
        assert_eq!(r.stats.peak_buffered_bytes, 6);
        r.flush();
        r.check_accounting();
    }

    #[test]
    fn retransmission_is_counted_not_delivered() {
        let mut r = Rig::new();
        r.seg(100, ACK, b"abcdef");
        let out = r.seg(100, ACK, b"abcdef");
        assert_eq!(out, SegmentOutcome { retransmitted: 6, ..Default::default() });
        assert_eq!(r.data(), b"abcdef");
        assert_eq!(r.stats.retransmitted_bytes, 6);
        assert_eq!(r.stats.retransmitted_segments, 1);
        r.flush();
        r.check_accounting();
    }

    #[test]
    fn partial_overlap_delivers_only_the_new_tail() {
        let mut r = Rig::new();
        r.seg(100, ACK, b"abcdef");
        let out = r.seg(103, ACK, b"defghi");
        assert_eq!(out, SegmentOutcome { delivered: 3, retransmitted: 3, ..Default::default() });
        assert_eq!(r.data(), b"abcdefghi");
        r.flush();
        r.check_accounting();
    }

    #[test]
    fn overlapping_held_segments_keep_the_first_copy() {
        let mut r = Rig::new();
        r.seg(0, SYN, b"");
        r.seg(11, ACK, b"AAAAAAAAAA"); // offsets 10..20
        let out = r.seg(6, ACK, &[b'B'; 20]); // offsets 5..25
        assert_eq!(out, SegmentOutcome { buffered: 10, retransmitted: 10, ..Default::default() });
        r.seg(1, ACK, b"ccccc"); // offsets 0..5
        assert_eq!(r.data(), b"cccccBBBBBAAAAAAAAAABBBBB");
        r.flush();
        r.check_accounting();
    }

    #[test]
    fn in_order_segment_overlapping_held_data_keeps_the_held_copy() {
        let mut r = Rig::new();
        r.seg(0, SYN, b"");
        r.seg(5, ACK, b"XYZ"); // offsets 4..7
        let out = r.seg(1, ACK, b"abcdefghi"); // offsets 0..9
        assert_eq!(out, SegmentOutcome { delivered: 4, buffered: 2, retransmitted: 3, ..Default::default() });
        assert_eq!(r.data(), b"abcdXYZhi");
        r.flush();
        r.check_accounting();
    }

    #[test]
    fn sequence_numbers_wrap_around_2_pow_32() {
        let mut r = Rig::new();
        let isn = u32::MAX - 3;
        r.seg(isn, SYN, b""); // data starts at u32::MAX - 2
        r.seg(isn.wrapping_add(9), ACK, b"89ab"); // offsets 8..12, seq wrapped
        r.seg(isn.wrapping_add(1), ACK, b"0123"); // offsets 0..4, before the wrap
        r.seg(isn.wrapping_add(5), ACK, b"4567"); // crosses the wrap
        r.seg(isn.wrapping_add(1), ACK, b"01"); // old retransmission across the wrap
        assert_eq!(r.data(), b"0123456789ab");
        assert_eq!(r.stats.retransmitted_bytes, 2);
        r.flush();
        r.check_accounting();
    }

    #[test]
    fn long_stream_keeps_offsets_past_4_gib() {
        let mut r = Rig::new();
        r.seg(7, SYN, b"");
        // Sequence numbers cycle past 2^32 twice in 1 MiB steps (payload kept small: truncated).
        let step = 1u32 << 20;
        let mut seq = 8u32;
        for _ in 0..(9 * 1024) {
            r.seg_trunc(seq, ACK, b"x", step);
            seq = seq.wrapping_add(step);
        }
        assert_eq!(r.r.next_offset(), 9 * 1024 * u64::from(step));
        assert_eq!(r.stats.gap_bytes, 9 * 1024 * u64::from(step - 1));
        r.flush();
        r.check_accounting();
    }

    #[test]
    fn syn_takes_one_sequence_number() {
        let mut r = Rig::new();
        r.seg(5000, SYN, b"");
        r.seg(5000, SYN, b""); // retransmitted SYN: nothing to deliver
        let out = r.seg(5000, ACK, b"zab"); // first byte sits on the SYN's number
        assert_eq!(out, SegmentOutcome { delivered: 2, dropped: 1, ..Default::default() });
        assert_eq!(r.data(), b"ab");
        r.flush();
        r.check_accounting();
    }

    #[test]
    fn syn_with_data_starts_after_the_syn() {
        let mut r = Rig::new();
        r.seg(41, SYN, b"fast");
        r.seg(46, ACK, b"open");
        assert_eq!(r.data(), b"fastopen");
    }

    #[test]
    fn capture_starting_mid_connection_starts_at_the_first_payload() {
        let mut r = Rig::new();
        assert_eq!(r.seg(7000, ACK, b""), SegmentOutcome::default()); // pure ACK: no start
        assert!(!r.r.is_started());
        r.seg(8000, ACK, b"mid");
        r.seg(7990, ACK, b"0123456789abc"); // 10 bytes from before the capture, 3 retransmitted
        r.seg(8003, ACK, b"dle");
        assert_eq!(r.data(), b"middle");
        let out = r.outs[2];
        assert_eq!(out, SegmentOutcome { retransmitted: 3, dropped: 10, ..Default::default() });
        r.flush();
        r.check_accounting();
    }

    #[test]
    fn snaplen_truncated_in_order_segment_gives_a_gap_at_once() {
        let mut r = Rig::new();
        r.seg(0, SYN, b"");
        let out = r.seg_trunc(1, ACK, b"head", 100);
        assert_eq!(out, SegmentOutcome { delivered: 4, missing: 96, ..Default::default() });
        assert_eq!(r.shape(), ["D4@2", "G96"]);
        r.seg(101, ACK, b"next");
        assert_eq!(r.shape(), ["D4@2", "G96", "D4@3"]);
        assert_eq!(r.stats.gap_bytes, 96);
        r.flush();
        r.check_accounting();
    }

    #[test]
    fn snaplen_truncated_held_segment_gives_its_gap_in_place() {
        let mut r = Rig::new();
        r.seg(0, SYN, b"");
        r.seg(111, ACK, b"tail"); // offsets 110..114
        r.seg_trunc(11, ACK, b"trunc", 100); // offsets 10..110, 5 captured
        r.seg(1, ACK, b"0123456789");
        assert_eq!(r.shape(), ["D10@4", "D5@3", "G95", "D4@2"]);
        // A later full copy of the truncated range changes nothing: the first copy won.
        let full = vec![b'F'; 100];
        assert_eq!(r.seg(11, ACK, &full).retransmitted, 100);
        r.flush();
        r.check_accounting();
    }

    #[test]
    fn lost_segment_becomes_a_gap_on_flush() {
        let mut r = Rig::new();
        r.seg(0, SYN, b"");
        r.seg(1, ACK, b"0123456789");
        r.seg(21, ACK | FIN, b"klmnopqrst");
        assert_eq!(r.shape(), ["D10@2"]);
        assert!(!r.r.is_finished());
        r.flush();
        assert_eq!(r.shape(), ["D10@2", "G10", "D10@3"]);
        assert_eq!((r.stats.gaps, r.stats.gap_bytes), (1, 10));
        assert!(r.r.is_closed());
        // After the close: old bytes are retransmissions, new bytes are dropped.
        assert_eq!(r.seg(11, ACK, b"abcdefghij").retransmitted, 10);
        assert_eq!(r.seg(31, ACK, b"uv").dropped, 2);
        r.flush();
        r.check_accounting();
    }

    #[test]
    fn lost_tail_before_a_fin_becomes_a_gap_on_flush() {
        let mut r = Rig::new();
        r.seg(0, SYN, b"");
        r.seg(1, ACK, b"abc");
        r.seg(14, ACK | FIN, b""); // FIN at offset 13: bytes 3..13 never seen
        r.flush();
        assert_eq!(r.shape(), ["D3@2", "G10"]);
        r.check_accounting();
    }

    #[test]
    fn fin_finishes_once_every_byte_before_it_is_delivered() {
        let mut r = Rig::new();
        r.seg(0, SYN, b"");
        r.seg(4, ACK | FIN, b"def");
        assert!(!r.r.is_finished());
        r.seg(1, ACK, b"abc");
        assert!(r.r.is_finished());
        assert_eq!(r.data(), b"abcdef");
    }

    #[test]
    fn byte_limit_declares_the_first_hole_lost() {
        let mut r = Rig::with(ReassemblyConfig { max_buffered_bytes: 8, max_segments: 100 });
        r.seg(0, SYN, b"");
        r.seg(1, ACK, b"ab");
        r.seg(5, ACK, b"efgh"); // offsets 4..8, hole 2..4
        r.seg(11, ACK, b"klmn"); // offsets 10..14, 8 bytes held: at the limit
        assert_eq!(r.shape(), ["D2@2"]);
        r.seg(16, ACK, b"p"); // 9 bytes held: the first hole goes
        assert_eq!(r.shape(), ["D2@2", "G2", "D4@3"]);
        assert_eq!(r.stats.overflow_gaps, 1);
        assert_eq!(r.r.buffered_bytes(), 5);
        r.seg(9, ACK, b"ij"); // fills 8..10: delivered with what follows
        assert_eq!(r.shape(), ["D2@2", "G2", "D4@3", "D2@6", "D4@4"]);
        r.flush();
        assert_eq!(r.shape(), ["D2@2", "G2", "D4@3", "D2@6", "D4@4", "G1", "D1@5"]);
        r.check_accounting();
    }

    #[test]
    fn segment_limit_declares_the_first_hole_lost() {
        let mut r = Rig::with(ReassemblyConfig { max_buffered_bytes: 1 << 20, max_segments: 2 });
        r.seg(0, SYN, b"");
        r.seg(3, ACK, b"b");
        r.seg(5, ACK, b"d");
        r.seg(7, ACK, b"f");
        assert_eq!(r.shape(), ["G2", "D1@2"]);
        r.flush();
        r.check_accounting();
    }

    #[test]
    fn segment_beyond_the_largest_window_is_dropped() {
        let mut r = Rig::new();
        r.seg(0, SYN, b"");
        let out = r.seg(1 + (1 << 30) + 1, ACK, b"far");
        assert_eq!(out, SegmentOutcome { dropped: 3, ..Default::default() });
        assert_eq!(r.r.buffered_bytes(), 0);
        r.flush();
        assert!(r.got.is_empty());
        r.check_accounting();
    }

    /// Tiny deterministic generator for the property tests' choices.
    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            if n == 0 {
                0
            } else {
                self.next() % n
            }
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    /// A segment to feed: stream range, captured length, flags.
    #[derive(Debug, Clone, Copy)]
    struct Cut {
        off: usize,
        len: usize,
        captured: usize,
        flags: u8,
    }

    /// Cut `len` bytes into segments, add duplicates and re-cut retransmissions, reorder with
    /// bounded displacement, lose `loss`% (never the FIN) and truncate `trunc`% of them.
    fn schedule(len: usize, rng: &mut XorShift, loss: u64, trunc: u64, midstream: bool) -> Vec<Cut> {
        let mut cuts = vec![];
        let mut off = 0;
        while off < len {
            let n = (1 + rng.below(300) as usize).min(len - off);
            cuts.push(Cut { off, len: n, captured: n, flags: ACK });
            off += n;
        }
        if let Some(last) = cuts.last_mut() {
            last.flags |= FIN;
        }
        let mut all = vec![];
        for c in &cuts {
            all.push(*c);
            if rng.chance(20) {
                all.push(*c);
            }
            if rng.chance(20) {
                let a = rng.below(len as u64) as usize;
                let n = (1 + rng.below(600) as usize).min(len - a);
                all.push(Cut { off: a, len: n, captured: n, flags: ACK });
            }
        }
        let mut keyed: Vec<(u64, Cut)> = all.into_iter().enumerate().map(|(i, c)| (i as u64 * 4 + rng.below(24), c)).collect();
        keyed.sort_by_key(|k| k.0);
        let mut order: Vec<Cut> = keyed.into_iter().map(|k| k.1).collect();
        order.retain(|c| c.flags & FIN != 0 || !rng.chance(loss));
        for c in order.iter_mut() {
            if rng.chance(trunc) {
                c.captured = rng.below(c.len as u64) as usize;
            }
        }
        if midstream {
            // The first segment seen defines offset 0; make it the one that really starts there.
            if let Some(i) = order.iter().position(|c| c.off == 0 && c.captured > 0) {
                let first = order.remove(i);
                order.insert(0, first);
            } else {
                order.insert(0, Cut { off: 0, len: 1.min(len), captured: 1.min(len), flags: ACK });
            }
        }
        order
    }

    /// Feed a schedule; returns the rig after a flush.
    fn run(stream: &[u8], isn: u32, syn: bool, order: &[Cut], cfg: ReassemblyConfig) -> Rig {
        let mut r = Rig::with(cfg);
        let base = if syn {
            r.seg(isn, SYN, b"");
            isn.wrapping_add(1)
        } else {
            isn
        };
        for c in order {
            let seq = base.wrapping_add(c.off as u32);
            r.seg_trunc(seq, c.flags, &stream[c.off..c.off + c.captured], c.len as u32);
        }
        r.flush();
        r
    }

    fn isn_strategy() -> impl Strategy<Value = u32> {
        prop_oneof![any::<u32>(), (u32::MAX - 6000)..=u32::MAX]
    }

    /// A keep-alive (SND.NXT-1 with zero or one garbage octet) is neither data nor a
    /// retransmission, as tshark's tcp.analysis.keep_alive; a longer old segment still is.
    #[test]
    fn keepalives_are_not_retransmissions() {
        let mut r = Rig::new();
        r.seg(1000, SYN, b"");
        r.seg(1001, ACK, b"hello");
        assert_eq!(r.seg(1005, ACK, b"\0"), SegmentOutcome { keepalive: 1, ..Default::default() });
        assert_eq!(r.seg(1005, ACK, b""), SegmentOutcome::default());
        assert_eq!(r.seg(1004, ACK, b"lo"), SegmentOutcome { retransmitted: 2, ..Default::default() });
        r.seg(1006, ACK, b"!");
        assert_eq!(r.data(), b"hello!");
        assert_eq!((r.stats.keepalives, r.stats.retransmitted_bytes), (2, 2));
    }

    /// `n` segments of `len` bytes after a SYN at `isn`, fed in `order` (indexes).
    fn feed_order(r: &mut Rig, isn: u32, len: usize, order: &[usize]) -> Vec<u8> {
        let n = order.len();
        let stream: Vec<u8> = (0..n * len).map(|i| (i * 7 % 251) as u8).collect();
        r.seg(isn, SYN, b"");
        for &k in order {
            let at = isn.wrapping_add(1).wrapping_add((k * len) as u32);
            r.seg(at, ACK, &stream[k * len..(k + 1) * len]);
        }
        r.flush();
        stream
    }

    fn shuffled(n: usize, seed: u64) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        let mut x = seed | 1;
        for i in (1..n).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.swap(i, (x % (i as u64 + 1)) as usize);
        }
        v
    }

    /// Reordering within the buffer loses nothing; beyond it, the holes the buffer gives up
    /// are gaps, and their bytes arriving afterwards are `late` (not retransmitted, and no
    /// longer counted as missing): never a gap and a retransmission for the same bytes.
    #[test]
    fn reordering_within_and_beyond_the_buffer() {
        let (n, len) = (400usize, 100usize);
        let reversed: Vec<usize> = (0..n).rev().collect();
        for (name, order) in [("reversed", reversed), ("shuffled", shuffled(n, 42))] {
            // Within: the buffer holds the whole flow.
            let mut r = Rig::with(ReassemblyConfig { max_buffered_bytes: n * len, max_segments: n });
            let stream = feed_order(&mut r, 1000, len, &order);
            assert_eq!(r.data(), stream, "{name}");
            assert_eq!((r.stats.gaps, r.stats.gap_bytes, r.stats.retransmitted_bytes, r.stats.late_bytes), (0, 0, 0, 0), "{name}");
            r.check_accounting();
            // Beyond: a buffer of a tenth of the flow.
            let mut r = Rig::with(ReassemblyConfig { max_buffered_bytes: n * len / 10, max_segments: n });
            feed_order(&mut r, 1000, len, &order);
            let delivered = r.data().len() as u64;
            let late: u64 = r.outs.iter().map(|o| o.late).sum();
            assert!(r.stats.overflow_gaps > 0, "{name}");
            assert_eq!(r.stats.retransmitted_bytes, 0, "{name}: nothing was sent twice");
            assert_eq!(r.stats.late_bytes, late, "{name}");
            assert_eq!(delivered + late, (n * len) as u64, "{name}: every byte delivered or late");
            // What is still counted missing is exactly what never arrived in time or late.
            assert_eq!(r.stats.gap_bytes, 0, "{name}: every given-up byte arrived later");
            r.check_accounting();
        }
        // Late bytes, then the same bytes again: the second copy is retransmitted.
        let mut r = Rig::with(ReassemblyConfig { max_buffered_bytes: 8, max_segments: 100 });
        r.seg(1000, SYN, b"");
        r.seg(1011, ACK, b"bbbbbbbbbb"); // held: 10 > 8, hole [0, 10) given up
        assert_eq!(r.stats.overflow_gaps, 1);
        assert_eq!(r.seg(1001, ACK, b"aaaaaaaaaa"), SegmentOutcome { late: 10, ..Default::default() });
        assert_eq!(r.seg(1001, ACK, b"aaaaaaaaaa"), SegmentOutcome { retransmitted: 10, ..Default::default() });
        assert_eq!((r.stats.gap_bytes, r.stats.late_bytes, r.stats.retransmitted_bytes), (0, 10, 10));
        // The FIN rides the last segment, which arrives first: giving the hole up reaches the
        // FIN and finishes the stream; the hole's bytes arriving after that are still late.
        let mut r = Rig::with(ReassemblyConfig { max_buffered_bytes: 8, max_segments: 100 });
        r.seg(1000, SYN, b"");
        r.seg(1011, ACK | FIN, b"bbbbbbbbbb");
        assert!(r.r.is_finished());
        r.flush();
        assert_eq!(r.seg(1001, ACK, b"aaaaaaaaaa"), SegmentOutcome { late: 10, ..Default::default() });
        assert_eq!((r.stats.gap_bytes, r.stats.late_bytes, r.stats.retransmitted_bytes), (0, 10, 0));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Reordered, duplicated, retransmitted (re-cut) segments rebuild the stream exactly.
        #[test]
        fn prop_reorder_duplicate_retransmit_rebuilds_the_stream(
            stream in proptest::collection::vec(any::<u8>(), 1..5000),
            isn in isn_strategy(),
            syn in any::<bool>(),
            seed in 1u64..,
        ) {
            let mut rng = XorShift(seed);
            let order = schedule(stream.len(), &mut rng, 0, 0, !syn);
            let r = run(&stream, isn, syn, &order, ReassemblyConfig::default());
            prop_assert!(r.got.iter().all(|g| matches!(g, Got::Data(..))), "unexpected gap: {:?}", r.shape());
            prop_assert_eq!(r.data(), stream);
            prop_assert_eq!(r.stats.dropped_bytes, 0);
            r.check_accounting();
        }

        /// With loss and snaplen truncation every delivered byte is at its offset, gaps only
        /// cover bytes never captured (when nothing was truncated), and Data + Gap == stream length.
        #[test]
        fn prop_loss_gives_gaps_at_the_right_places(
            stream in proptest::collection::vec(any::<u8>(), 1..5000),
            isn in isn_strategy(),
            syn in any::<bool>(),
            trunc in prop_oneof![Just(0u64), 1u64..40],
            seed in 1u64..,
        ) {
            let mut rng = XorShift(seed);
            let order = schedule(stream.len(), &mut rng, 15, trunc, !syn);
            let r = run(&stream, isn, syn, &order, ReassemblyConfig::default());
            let mut received = vec![false; stream.len()];
            for c in &order {
                received[c.off..c.off + c.captured].iter_mut().for_each(|b| *b = true);
            }
            let mut pos = 0usize;
            for g in &r.got {
                match g {
                    Got::Data(b, _) => {
                        prop_assert_eq!(&stream[pos..pos + b.len()], &b[..]);
                        pos += b.len();
                    }
                    Got::Gap(n) => {
                        let n = *n as usize;
                        prop_assert!(pos + n <= stream.len());
                        if trunc == 0 {
                            prop_assert!(!received[pos..pos + n].iter().any(|&b| b), "gap over received bytes");
                        }
                        pos += n;
                    }
                }
            }
            prop_assert_eq!(pos, stream.len());
            r.check_accounting();
        }

        /// Hostile input (random sequence numbers, flags, lengths, tiny buffers, flushes midway):
        /// every captured byte is reported exactly once, and Data delivered == delivered + buffered.
        #[test]
        fn prop_every_captured_byte_is_reported_exactly_once(
            segs in proptest::collection::vec(
                (any::<bool>(), 0u32..3000, any::<u32>(), 0u8..0x20, 0usize..400, 0u32..200, 0u8..50),
                1..80),
            isn in isn_strategy(),
            max_bytes in 0usize..3000,
            max_segments in 0usize..20,
        ) {
            let mut r = Rig::with(ReassemblyConfig { max_buffered_bytes: max_bytes, max_segments });
            let bytes = vec![0x5a; 400];
            for (near, rel, far, flags, len, extra, flush) in segs {
                let seq = if near { isn.wrapping_add(rel) } else { far };
                r.seg_trunc(seq, flags, &bytes[..len], len as u32 + extra);
                prop_assert!(r.r.buffered_bytes() <= max_bytes);
                if flush == 0 {
                    r.flush();
                }
            }
            r.flush();
            r.check_accounting();
        }
    }
}
