//! Payload linking: the SMB2 WRITE/READ request that carries SMB_DIRECT_BUFFER_DESCRIPTOR_V1
//! entries (MS-SMBD §2.2.3.1) registers a `Transfer`; RDMA data addressed to one of its
//! descriptors (Token = R_Key/STag, Offset = VA/TO) is placed at its position in the payload
//! (descriptors concatenated in order, MS-SMBD §3.1.4.5), hashed in order with the same
//! `PayloadHasher` as the TCP path, and becomes one `SendRecord` (`Transport::Rdma`).
//!
//! Data may arrive out of order (it is held, bounded), twice (counted once, the copy is
//! `rdma_retransmitted`), before its request (held as an orphan, bounded) or never (the
//! transfer ends incomplete: reported, not hashed).

use crate::accounting::cat;
use crate::payload::send::{SendKind, SendRecord, Transport};
use crate::frame::{FrameCtx, FrameRef};
use crate::context::send_finished;
use crate::payload::hash::PayloadHasher;
use crate::payload::PayloadDigest;
use crate::smb2::records::BufferDescriptorV1;
use crate::smb2::Parts;
use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;

use super::Counters;

/// Sender and receiver (address, port) of RDMA data and the connection's IP protocol (ports 0
/// and protocol 0 when the connection has no IP port pair: RoCE).
pub type Ends = ((IpAddr, u16), (IpAddr, u16), u8);
use super::Anomaly;

/// Transfers kept per connection; the oldest is ended (incomplete) past this.
pub const MAX_TRANSFERS: usize = 256;
/// Out-of-order bytes held per transfer, each held piece charged its bytes and its entry
/// (`HELD_ENTRY`), so one-byte pieces cannot hold 50 bytes of map per byte.
pub const MAX_HELD_PER_TRANSFER: usize = 8 << 20;
/// The same over all transfers of a connection (`MAX_TRANSFERS` x `MAX_HELD_PER_TRANSFER`
/// would be 2 GiB).
pub const MAX_HELD_PER_CONNECTION: usize = 32 << 20;
/// What one held piece costs beside its bytes: its key and `Vec` in the ordered map, and
/// about as much again of the map's node.
const HELD_ENTRY: usize = 2 * std::mem::size_of::<(u64, Vec<u8>)>();
/// Orphan data (no request yet) held per connection, each orphan charged its bytes and its
/// record.
pub const MAX_ORPHAN_BYTES: usize = 4 << 20;
/// What one orphan costs beside its bytes.
const ORPHAN_RECORD: usize = std::mem::size_of::<Orphan>();
/// Payload length accepted from descriptors (MaxReadWriteSize is at most a few MiB).
pub const MAX_TRANSFER_LEN: u64 = 64 << 20;

/// What the SMB2 request said.
#[derive(Debug, Clone)]
pub struct Request {
    pub message_id: u64,
    pub kind: SendKind,
    pub session_id: u64,
    pub tree_id: u32,
    pub file_id: [u8; 16],
    pub offset: u64,
    pub share: Option<Arc<str>>,
    pub file_name: Option<Arc<str>>,
    pub descriptors: Vec<BufferDescriptorV1>,
    /// Frame of the SMB Direct Send that completed the request message (a WRITE's header frame).
    pub frame: Option<FrameRef>,
}

struct Transfer {
    req: Request,
    /// Payload position of each descriptor's first byte.
    starts: Vec<u64>,
    total: u64,
    /// Bytes hashed so far (contiguous from 0).
    next: u64,
    hasher: Option<PayloadHasher>,
    held: BTreeMap<u64, Vec<u8>>,
    /// What `held` is charged: its bytes and `HELD_ENTRY` per piece.
    held_bytes: usize,
    first: Option<(FrameRef, u64, Ends)>,
    last_frame: FrameRef,
    /// Frame that carried the SMB2 header of the payload's message: the WRITE request's Send,
    /// or the READ response's Send (known only once the response is seen).
    header: Option<FrameRef>,
    /// READ: the response was seen. A READ transfer is handed over at its response (which
    /// follows the RDMA Writes, MS-SMB2 §3.3.5.12), so its evidence names the response frame.
    responded: bool,
}

impl Transfer {
    /// Every byte is in and nothing more is awaited (a READ also waits for its response).
    fn done(&self) -> bool {
        self.next >= self.total && (self.req.kind == SendKind::Write || self.responded)
    }
}

struct Orphan {
    token: u32,
    va: u64,
    bytes: Vec<u8>,
    ctx: FrameCtx,
    ends: Ends,
}

/// The transfers of one SMB Direct connection.
#[derive(Default)]
pub struct Linker {
    transfers: VecDeque<Transfer>,
    orphans: VecDeque<Orphan>,
    orphan_bytes: usize,
}

impl Linker {
    /// Did a request still open register buffer `token`?
    pub fn knows(&self, token: u32) -> bool {
        self.transfers.iter().any(|t| t.req.descriptors.iter().any(|d| d.token == token))
    }

    /// A WRITE/READ request with RDMA descriptors.
    pub fn register(&mut self, conn: u64, req: Request, p: &mut Parts, c: &mut Counters) {
        let mut starts = Vec::with_capacity(req.descriptors.len());
        let mut total = 0u64;
        for d in &req.descriptors {
            starts.push(total);
            total += u64::from(d.length);
        }
        if total > MAX_TRANSFER_LEN {
            p.anomalies.raise(Anomaly::RdmaTransferTooLong);
            return;
        }
        if self.transfers.iter().any(|t| t.req.message_id == req.message_id) {
            p.anomalies.raise(Anomaly::RdmaDuplicateTransfer);
            return;
        }
        if self.transfers.len() >= MAX_TRANSFERS {
            if let Some(t) = self.transfers.pop_front() {
                if t.next >= t.total && t.hasher.is_some() {
                    // A READ whose response was never seen: its data is whole all the same.
                    Self::finish(conn, t, p, c);
                } else {
                    p.anomalies.raise(Anomaly::RdmaTransferEvicted);
                    Self::end_incomplete(t, c, p);
                }
            }
        }
        let header = if req.kind == SendKind::Write { req.frame } else { None };
        self.transfers.push_back(Transfer {
            header,
            responded: false,
            req,
            starts,
            total,
            next: 0,
            hasher: Some(PayloadHasher::with_len_hint(total)),
            held: BTreeMap::new(),
            held_bytes: 0,
            first: None,
            last_frame: FrameRef::default(),
        });
        // Data that came before the request.
        let orphans: Vec<Orphan> = self.orphans.drain(..).collect();
        self.orphan_bytes = 0;
        for o in orphans {
            self.data(conn, o.token, o.va, &o.bytes, &o.ctx, o.ends, p, c);
        }
        self.try_finish_back(conn, p, c);
    }

    /// RDMA data for (token, va). Accounts the bytes (now, or when an orphan is resolved).
    #[allow(clippy::too_many_arguments)]
    pub fn data(&mut self, conn: u64, token: u32, va: u64, bytes: &[u8], ctx: &FrameCtx, ends: Ends, p: &mut Parts, c: &mut Counters) {
        if bytes.is_empty() {
            return;
        }
        let found = self.transfers.iter().position(|t| {
            t.req.descriptors.iter().any(|d| d.token == token && va >= d.offset && va < d.offset + u64::from(d.length))
        });
        let Some(i) = found else {
            let charge = bytes.len() + ORPHAN_RECORD;
            if self.orphan_bytes + charge <= MAX_ORPHAN_BYTES {
                self.orphan_bytes += charge;
                self.orphans.push_back(Orphan { token, va, bytes: bytes.to_vec(), ctx: *ctx, ends });
            } else {
                p.anomalies.raise(Anomaly::RdmaUnlinkedData);
                c.unlinked_bytes += bytes.len() as u64;
                p.accounting.add(cat::RDMA_UNLINKED, bytes.len() as u64);
            }
            return;
        };
        let t = &self.transfers[i];
        // Place across descriptors: a packet never spans two registrations, but clip anyway.
        let (di, d) = match t.req.descriptors.iter().enumerate().find(|(_, d)| d.token == token && va >= d.offset && va < d.offset + u64::from(d.length)) {
            Some(x) => x,
            None => return,
        };
        let within = va - d.offset;
        let room = u64::from(d.length) - within;
        let (inside, beyond) = bytes.split_at((bytes.len() as u64).min(room) as usize);
        if !beyond.is_empty() {
            p.anomalies.raise(Anomaly::RdmaDataBeyondDescriptor);
            c.unlinked_bytes += beyond.len() as u64;
            p.accounting.add(cat::RDMA_UNLINKED, beyond.len() as u64);
        }
        let pos = t.starts[di] + within;
        // Data ahead of the next byte is held, within the connection's bound too: what all its
        // transfers hold (summed only then, off the in-order path).
        let conn_held = if pos > t.next { self.transfers.iter().map(|t| t.held_bytes).sum() } else { 0 };
        let t = &mut self.transfers[i];
        if t.first.is_none() {
            t.first = Some((ctx.frame, ctx.ts_ns, ends));
        }
        t.last_frame = ctx.frame;
        Self::place(t, conn_held, pos, inside, p, c);
        if t.done() {
            let t = self.transfers.remove(i).expect("index in range");
            Self::finish(conn, t, p, c);
        }
    }

    /// `conn_held`: what the connection's transfers hold (for `MAX_HELD_PER_CONNECTION`).
    fn place(t: &mut Transfer, conn_held: usize, pos: u64, bytes: &[u8], p: &mut Parts, c: &mut Counters) {
        let end = pos + bytes.len() as u64;
        if end <= t.next {
            c.retransmitted_bytes += bytes.len() as u64;
            p.accounting.add(cat::RDMA_RETRANSMITTED, bytes.len() as u64);
            return;
        }
        let (pos, bytes) = if pos < t.next {
            let dup = (t.next - pos) as usize;
            c.retransmitted_bytes += dup as u64;
            p.accounting.add(cat::RDMA_RETRANSMITTED, dup as u64);
            (t.next, &bytes[dup..])
        } else {
            (pos, bytes)
        };
        if pos > t.next {
            if t.held.contains_key(&pos) {
                c.retransmitted_bytes += bytes.len() as u64;
                p.accounting.add(cat::RDMA_RETRANSMITTED, bytes.len() as u64);
                return;
            }
            p.accounting.add(cat::RDMA_PAYLOAD, bytes.len() as u64);
            let charge = bytes.len() + HELD_ENTRY;
            if t.held_bytes + charge > MAX_HELD_PER_TRANSFER || conn_held + charge > MAX_HELD_PER_CONNECTION {
                p.anomalies.raise(Anomaly::RdmaReorderBufferFull);
                t.hasher = None;
                return;
            }
            t.held_bytes += charge;
            t.held.insert(pos, bytes.to_vec());
            return;
        }
        p.accounting.add(cat::RDMA_PAYLOAD, bytes.len() as u64);
        if let Some(h) = t.hasher.as_mut() {
            h.update(bytes);
        }
        t.next += bytes.len() as u64;
        // Drain held pieces that are now contiguous; overlaps were accounted when held.
        while let Some((&hp, _)) = t.held.first_key_value() {
            if hp > t.next {
                break;
            }
            let (hp, v) = t.held.pop_first().expect("non-empty");
            t.held_bytes -= v.len() + HELD_ENTRY;
            let skip = (t.next - hp) as usize;
            if skip < v.len() {
                if let Some(h) = t.hasher.as_mut() {
                    h.update(&v[skip..]);
                }
                t.next += (v.len() - skip) as u64;
            }
        }
    }

    /// The READ response (carried by `frame`) said how many bytes were written
    /// (DataRemaining); the transfer ends at that length.
    pub fn read_response(&mut self, conn: u64, message_id: u64, data_remaining: u32, frame: FrameRef, p: &mut Parts, c: &mut Counters) {
        if let Some(i) = self.transfers.iter().position(|t| t.req.message_id == message_id && t.req.kind == SendKind::Read) {
            let t = &mut self.transfers[i];
            t.total = t.total.min(u64::from(data_remaining));
            t.responded = true;
            t.header = Some(frame);
            if t.done() {
                let t = self.transfers.remove(i).expect("index in range");
                Self::finish(conn, t, p, c);
            }
        }
    }

    fn try_finish_back(&mut self, conn: u64, p: &mut Parts, c: &mut Counters) {
        if self.transfers.back().is_some_and(|t| t.done() && t.first.is_some()) {
            let t = self.transfers.pop_back().expect("non-empty");
            Self::finish(conn, t, p, c);
        }
    }

    fn finish(conn: u64, t: Transfer, p: &mut Parts, c: &mut Counters) {
        let Some(hasher) = t.hasher else {
            return Self::end_incomplete(Transfer { hasher: None, ..t }, c, p);
        };
        let Some((first_frame, ts_ns, ((src, src_port), (dst, dst_port), ip_proto))) = t.first else {
            // A zero-length transfer (READ at end of file): nothing moved.
            return;
        };
        let len = hasher.len();
        let finished = hasher.finish_deferred();
        c.linked_transfers += 1;
        c.linked_bytes += len;
        p.smb.stats.payloads_sent += 1;
        p.smb.stats.payload_bytes_sent += len;
        let r = t.req;
        p.smb.hand_over(p.sink);
        send_finished(p.sink, finished, SendRecord {
            conn,
            message_id: r.message_id,
            kind: r.kind,
            transport: Transport::Rdma,
            src,
            dst,
            src_port,
            dst_port,
            ip_proto,
            session_id: r.session_id,
            tree_id: r.tree_id,
            file_id: r.file_id,
            share: r.share,
            file_name: r.file_name,
            offset: r.offset,
            first_frame,
            last_frame: t.last_frame,
            header_frame: t.header,
            ts_ns,
            digest: PayloadDigest::default(),
        });
    }

    fn end_incomplete(t: Transfer, c: &mut Counters, p: &mut Parts) {
        if t.first.is_none() && t.total > 0 {
            // Nothing of it was captured.
            c.unseen_transfers += 1;
            return;
        }
        if t.total == 0 {
            return;
        }
        p.anomalies.raise(Anomaly::RdmaPayloadIncomplete);
        c.incomplete_transfers += 1;
        p.smb.stats.payload_incomplete += 1;
        p.smb.stats.payload_incomplete_bytes += t.total;
    }

    /// End of the connection: open transfers end, incomplete or complete; orphans are unlinked.
    pub fn close(&mut self, conn: u64, p: &mut Parts, c: &mut Counters) {
        while let Some(t) = self.transfers.pop_front() {
            if t.next >= t.total && t.hasher.is_some() {
                Self::finish(conn, t, p, c);
            } else {
                Self::end_incomplete(t, c, p);
            }
        }
        for o in self.orphans.drain(..) {
            c.unlinked_bytes += o.bytes.len() as u64;
            p.accounting.add(cat::RDMA_UNLINKED, o.bytes.len() as u64);
        }
        if self.orphan_bytes > 0 {
            p.anomalies.raise(Anomaly::RdmaUnlinkedData);
        }
        self.orphan_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::Accounting;
    use crate::anomaly::Anomalies;
    use crate::smb2::state::SmbState;
    use crate::smb2::PayloadSink;
    use std::net::Ipv4Addr;

    struct Null;
    impl PayloadSink for Null {
        fn send(&mut self, _: SendRecord) {}
        fn complete(&mut self, _: u64, _: u64, _: u64) {}
    }

    const ENDS: Ends = ((IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 0), (IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)), 0), 0);

    struct Rig {
        l: Linker,
        smb: SmbState,
        an: Anomalies,
        acct: Accounting,
        c: Counters,
        frames: u64,
    }

    impl Rig {
        fn new() -> Self {
            Rig { l: Linker::default(), smb: SmbState::new(), an: Anomalies::default(), acct: Accounting::default(), c: Counters::default(), frames: 0 }
        }

        /// A WRITE request (MessageId `id`) of one descriptor: `len` bytes at (token `id`, VA 0).
        fn register(&mut self, id: u64, len: u32) {
            let req = Request {
                message_id: id,
                kind: SendKind::Write,
                session_id: 1,
                tree_id: 1,
                file_id: [0; 16],
                offset: 0,
                share: None,
                file_name: None,
                descriptors: vec![BufferDescriptorV1 { offset: 0, token: id as u32, length: len }],
                frame: None,
            };
            let mut sink = Null;
            let mut p = Parts { anomalies: &mut self.an, accounting: &mut self.acct, smb: &mut self.smb, sink: &mut sink };
            self.l.register(7, req, &mut p, &mut self.c);
        }

        fn data(&mut self, token: u32, va: u64, bytes: &[u8]) {
            self.frames += 1;
            let ctx = FrameCtx { frame: FrameRef { file: 0, number: self.frames }, ts_ns: self.frames, seq: 0 };
            let mut sink = Null;
            let mut p = Parts { anomalies: &mut self.an, accounting: &mut self.acct, smb: &mut self.smb, sink: &mut sink };
            self.l.data(7, token, va, bytes, &ctx, ENDS, &mut p, &mut self.c);
        }

        fn held(&self) -> usize {
            self.l.transfers.iter().map(|t| t.held_bytes).sum()
        }
    }

    /// Eight transfers whose first bytes never come, each sent 7 MiB after them: the
    /// connection holds at most `MAX_HELD_PER_CONNECTION` (not 8 x 7 MiB), the rest ends the
    /// transfers' hashing (`rdma.reorder_buffer_full`); every byte is accounted.
    #[test]
    fn held_data_is_bounded_per_connection() {
        let mut r = Rig::new();
        let chunk = vec![0x3c; 64 << 10];
        let mut fed = 0u64;
        for id in 1..=8u64 {
            r.register(id, 8 << 20);
            for k in 0..112u64 {
                r.data(id as u32, 4096 + k * chunk.len() as u64, &chunk);
                fed += chunk.len() as u64;
                assert!(r.held() <= MAX_HELD_PER_CONNECTION, "transfer {id}: {} held", r.held());
            }
        }
        assert!(r.held() > MAX_HELD_PER_CONNECTION - (1 << 20), "the bound is reached: {}", r.held());
        assert!(r.an.get("rdma.reorder_buffer_full") > 0);
        assert_eq!(r.acct.total(), fed);
        let held_pieces: usize = r.l.transfers.iter().map(|t| t.held.values().map(|v| v.len() + HELD_ENTRY).sum::<usize>()).sum();
        assert_eq!(held_pieces, r.held(), "the charge is what the maps hold");
    }

    /// One-byte pieces ahead of the next byte are charged their entry: a transfer holds at
    /// most `MAX_HELD_PER_TRANSFER / (1 + HELD_ENTRY)` of them, not eight million.
    #[test]
    fn tiny_held_pieces_are_charged_their_entry() {
        let mut r = Rig::new();
        r.register(1, 8 << 20);
        let bound = MAX_HELD_PER_TRANSFER / (1 + HELD_ENTRY);
        for k in 0..(bound as u64 + 100) {
            r.data(1, 2 + 2 * k, &[9]);
        }
        assert_eq!(r.l.transfers[0].held.len(), bound, "entry charge {HELD_ENTRY}");
        assert_eq!(r.an.get("rdma.reorder_buffer_full"), 100);
    }

    /// One-byte orphans (data before any request) are charged their record: at most
    /// `MAX_ORPHAN_BYTES / (1 + ORPHAN_RECORD)` of them, the rest unlinked at once.
    #[test]
    fn tiny_orphans_are_charged_their_record() {
        let mut r = Rig::new();
        let bound = MAX_ORPHAN_BYTES / (1 + ORPHAN_RECORD);
        for k in 0..(bound as u64 + 100) {
            r.data(99, k, &[9]);
        }
        assert_eq!(r.l.orphans.len(), bound, "record size {ORPHAN_RECORD}");
        assert_eq!(r.c.unlinked_bytes, 100);
        assert_eq!(r.an.get("rdma.unlinked_data"), 100);
    }

    /// Descriptors adding up to more than `MAX_TRANSFER_LEN` register nothing
    /// (`rdma.transfer_too_long`); past `MAX_TRANSFERS` open transfers the oldest is ended
    /// (`rdma.transfer_evicted`).
    #[test]
    fn transfers_are_bounded_in_length_and_number() {
        let mut r = Rig::new();
        r.register(1, u32::MAX);
        assert_eq!((r.l.transfers.len(), r.an.get("rdma.transfer_too_long")), (0, 1));
        for id in 1..=(MAX_TRANSFERS as u64 + 3) {
            r.register(id, 4096);
        }
        assert_eq!(r.l.transfers.len(), MAX_TRANSFERS);
        assert_eq!(r.an.get("rdma.transfer_evicted"), 3);
        assert_eq!(r.l.transfers.front().unwrap().req.message_id, 4);
    }
}
