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
use crate::payload::hash::PayloadHasher;
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
/// Out-of-order bytes held per transfer.
pub const MAX_HELD_PER_TRANSFER: usize = 8 << 20;
/// Orphan data (no request yet) held per connection.
pub const MAX_ORPHAN_BYTES: usize = 4 << 20;
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
            if self.orphan_bytes + bytes.len() <= MAX_ORPHAN_BYTES {
                self.orphan_bytes += bytes.len();
                self.orphans.push_back(Orphan { token, va, bytes: bytes.to_vec(), ctx: *ctx, ends });
            } else {
                p.anomalies.raise(Anomaly::RdmaUnlinkedData);
                c.unlinked_bytes += bytes.len() as u64;
                p.accounting.add(cat::RDMA_UNLINKED, bytes.len() as u64);
            }
            return;
        };
        let t = &mut self.transfers[i];
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
        if t.first.is_none() {
            t.first = Some((ctx.frame, ctx.ts_ns, ends));
        }
        t.last_frame = ctx.frame;
        Self::place(t, pos, inside, p, c);
        if t.done() {
            let t = self.transfers.remove(i).expect("index in range");
            Self::finish(conn, t, p, c);
        }
    }

    fn place(t: &mut Transfer, pos: u64, bytes: &[u8], p: &mut Parts, c: &mut Counters) {
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
            if t.held_bytes + bytes.len() > MAX_HELD_PER_TRANSFER {
                p.anomalies.raise(Anomaly::RdmaReorderBufferFull);
                t.hasher = None;
                return;
            }
            t.held_bytes += bytes.len();
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
            t.held_bytes -= v.len();
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
        let digest = hasher.finish();
        c.linked_transfers += 1;
        c.linked_bytes += digest.len;
        p.smb.stats.payloads_sent += 1;
        p.smb.stats.payload_bytes_sent += digest.len;
        let r = t.req;
        p.sink.send(SendRecord {
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
            digest,
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
