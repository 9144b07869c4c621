//! SMB Direct (MS-SMBD) over any RDMA transport: the messages (`records`), one connection's
//! state (`SmbdConn`: negotiate, credits, fragment reassembly into whole SMB2 messages handed to
//! an unframed `Smb2Stream` per direction) and payload linking (`link`).
//!
//! The transports (`rdma::roce`, `rdma::iwarp`) hand every complete Send message to
//! `SmbdConn::on_send` and every byte of RDMA Read Response / RDMA Write data to
//! `SmbdConn::rdma_data`. SMB2 WRITE/READ requests with Channel RDMA_V1(_INVALIDATE) are looked
//! at here, before the SMB2 layer sees them, to register their buffer descriptors.
//!
//! Accounting: negotiate messages and data transfer headers/padding → `smbdirect_control`;
//! fragment data → the SMB2 layer once the message is whole, `smb_unparsed` when it never is.

pub mod anomaly;
pub mod link;
pub mod records;
pub mod stats;

pub use anomaly::Anomaly;

pub use stats::RdmaStats as Counters;

use crate::accounting::cat;
use crate::payload::send::SendKind;
use crate::frame::FrameCtx;
use crate::smb2::records::{self as rec, channel, command, HeaderRepr, HEADER_LEN};
use crate::smb2::{Parts, Smb2Stream};
use records::{DataTransfer, NegotiateRequest, NegotiateResponse};
use std::net::IpAddr;

/// Largest reassembled message accepted (MaxFragmentedSize is 1 MiB in practice).
pub const MAX_FRAGMENTED_SIZE: usize = 1 << 20;

/// Does this first packet of a Send of several packets (RoCE/InfiniBand FIRST: the start of the
/// message, the rest to come) look like SMB Direct? A Data Transfer header whose data, at an
/// 8-byte aligned DataOffset inside `prefix`, starts with an SMB2 ProtocolId; its DataLength
/// may run past `prefix`. (A WRITE request with many buffer descriptors does not fit a 256-byte
/// path MTU: mid-connection, its queue pair was otherwise never adopted.)
pub fn starts_like_smbdirect(prefix: &[u8]) -> bool {
    let u32_at = |at: usize| prefix.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let (Some(offset), Some(length)) = (u32_at(12), u32_at(16)) else { return false };
    let at = offset as usize;
    length >= 4
        && at >= DataTransfer::HEADER_LEN
        && offset % 8 == 0
        && prefix.get(at..at + 4).is_some_and(|id| id == rec::protocol_id::SMB2 || id == rec::protocol_id::TRANSFORM)
}

/// Does this Send payload look like SMB Direct? (Used to adopt a queue pair seen mid-connection.)
pub fn looks_like_smbdirect(msg: &[u8]) -> bool {
    if NegotiateRequest::parse(msg).is_some() || NegotiateResponse::parse(msg).is_some() {
        return true;
    }
    match DataTransfer::parse(msg) {
        Ok(d) if d.data_length >= 4 && d.data_offset % 8 == 0 => {
            let data = d.data(msg);
            data.len() >= 4 && (data[..4] == rec::protocol_id::SMB2 || data[..4] == rec::protocol_id::TRANSFORM)
        }
        _ => false,
    }
}

struct Direction {
    /// Sender and receiver (address, port or QPN) of this direction.
    src: (IpAddr, u16),
    dst: (IpAddr, u16),
    reassembly: Vec<u8>,
    smb2: Option<Smb2Stream>,
    negotiate_seen: bool,
    data_seen: bool,
}

/// One SMB Direct connection (an iWARP TCP connection or an RC queue pair pair).
pub struct SmbdConn {
    pub id: u64,
    /// Index of the side that sent the SMB Direct Negotiate Request, when seen.
    client: Option<usize>,
    dirs: [Direction; 2],
    /// IP protocol of the connection: 6 (iWARP, the ends are TCP endpoints), 0 (RoCE: the ends'
    /// "ports" are QPNs, named only).
    ip_proto: u8,
    pub linker: link::Linker,
}

impl SmbdConn {
    /// `ends[i]` is side i (address and port, or QPN truncated to 16 bits for naming only).
    pub fn new(id: u64, ends: [(IpAddr, u16); 2], client: Option<usize>) -> Self {
        let dir = |from: usize| Direction {
            src: ends[from],
            dst: ends[1 - from],
            reassembly: Vec::new(),
            smb2: None,
            negotiate_seen: false,
            data_seen: false,
        };
        SmbdConn { id, client, dirs: [dir(0), dir(1)], ip_proto: 0, linker: link::Linker::default() }
    }

    /// The ends are TCP endpoints (iWARP): sends carry their ports and a Community ID.
    pub fn over_tcp(mut self) -> Self {
        self.ip_proto = crate::community::PROTO_TCP;
        self
    }

    pub fn side_addr(&self, side: usize) -> IpAddr {
        self.dirs[side & 1].src.0
    }

    /// One whole Send message from side `from`.
    pub fn on_send(&mut self, from: usize, msg: &[u8], ctx: &FrameCtx, p: &mut Parts, c: &mut Counters) {
        let from = from & 1;
        let d = &mut self.dirs[from];
        if !d.data_seen {
            if let Some(n) = NegotiateRequest::parse(msg) {
                d.negotiate_seen = true;
                c.smbdirect.negotiate_requests += 1;
                c.smbdirect.credits_requested += u64::from(n.credits_requested);
                self.client.get_or_insert(from);
                p.accounting.add(cat::SMBDIRECT_CONTROL, msg.len() as u64);
                return;
            }
            if let Some(n) = NegotiateResponse::parse(msg) {
                d.negotiate_seen = true;
                c.smbdirect.negotiate_responses += 1;
                c.smbdirect.credits_requested += u64::from(n.credits_requested);
                c.smbdirect.credits_granted += u64::from(n.credits_granted);
                if n.status != 0 {
                    p.anomalies.raise(Anomaly::NegotiateFailed);
                }
                self.client.get_or_insert(1 - from);
                p.accounting.add(cat::SMBDIRECT_CONTROL, msg.len() as u64);
                return;
            }
        }
        let t = match DataTransfer::parse(msg) {
            Ok(t) => t,
            Err(e) => {
                p.anomalies.raise(e);
                p.accounting.add(cat::SMBDIRECT_CONTROL, msg.len() as u64);
                return;
            }
        };
        d.data_seen = true;
        c.smbdirect.data_messages += 1;
        c.smbdirect.data_length_sum += u64::from(t.data_length);
        c.smbdirect.credits_requested += u64::from(t.credits_requested);
        c.smbdirect.credits_granted += u64::from(t.credits_granted);
        if t.credits_requested == 0 {
            p.anomalies.raise(Anomaly::ZeroCreditsRequested);
        }
        if t.data_length > 0 && t.data_offset % 8 != 0 {
            p.anomalies.raise(Anomaly::UnalignedDataOffset);
        }
        let data = t.data(msg);
        p.accounting.add(cat::SMBDIRECT_CONTROL, (msg.len() - data.len()) as u64);
        if data.is_empty() {
            return;
        }
        let remaining = t.remaining_data_length as usize;
        if !d.reassembly.is_empty() || remaining > 0 {
            if d.reassembly.len() + data.len() + remaining > MAX_FRAGMENTED_SIZE {
                p.anomalies.raise(Anomaly::FragmentedTooLarge);
                p.accounting.add(cat::SMB_UNPARSED, (d.reassembly.len() + data.len()) as u64);
                d.reassembly = Vec::new();
                return;
            }
            d.reassembly.extend_from_slice(data);
            if remaining > 0 {
                return;
            }
            let whole = std::mem::take(&mut d.reassembly);
            self.deliver(from, &whole, ctx, p, c);
        } else {
            self.deliver(from, data, ctx, p, c);
        }
    }

    /// The queue pair receiving side `from`'s messages of this connection and the one
    /// receiving side `their_from`'s of `other` change places (`rdma::roce::repair`): so do
    /// the fragments reassembled towards each.
    pub fn swap_inbound(&mut self, from: usize, other: &mut SmbdConn, their_from: usize) {
        std::mem::swap(&mut self.dirs[from & 1].reassembly, &mut other.dirs[their_from & 1].reassembly);
    }

    /// Bytes of this direction's Send messages were lost: a message being reassembled is broken.
    pub fn lost(&mut self, from: usize, p: &mut Parts) {
        let d = &mut self.dirs[from & 1];
        if !d.reassembly.is_empty() {
            p.anomalies.raise(Anomaly::FragmentLost);
            p.accounting.add(cat::SMB_UNPARSED, d.reassembly.len() as u64);
            d.reassembly = Vec::new();
        }
    }

    /// RDMA data (Read Response or Write) for the buffer (token, va), sent by side `from`.
    #[allow(clippy::too_many_arguments)]
    pub fn rdma_data(&mut self, from: usize, token: u32, va: u64, bytes: &[u8], ctx: &FrameCtx, p: &mut Parts, c: &mut Counters) {
        let (mut src, mut dst) = (self.dirs[from & 1].src, self.dirs[from & 1].dst);
        if self.ip_proto == 0 {
            (src.1, dst.1) = (0, 0);
        }
        self.linker.data(self.id, token, va, bytes, ctx, (src, dst, self.ip_proto), p, c);
    }

    fn deliver(&mut self, from: usize, msg: &[u8], ctx: &FrameCtx, p: &mut Parts, c: &mut Counters) {
        self.inspect(msg, ctx, p, c);
        let id = self.id;
        let client = self.client;
        let ip_proto = self.ip_proto;
        let d = &mut self.dirs[from];
        if d.smb2.is_none() {
            // Direction of the SMB2 layer: from the negotiate, else from the first header.
            let to_server = match client {
                Some(cl) => cl == from,
                None => HeaderRepr::parse(msg).map(|h| !h.is_response()).unwrap_or(true),
            };
            d.smb2 = Some(Smb2Stream::new_unframed(id, to_server, d.src, d.dst, ip_proto));
        }
        let opened = d.smb2.as_mut().and_then(|s| {
            s.on_message(msg, ctx, p);
            s.take_opened()
        });
        // An encrypted or compressed message: its RDMA descriptors are in the plaintext.
        if let Some(plain) = opened {
            self.inspect(&plain, ctx, p, c);
        }
    }

    /// Registers RDMA descriptors of WRITE/READ requests and ends READ transfers at their
    /// response, walking the compound chain (MS-SMB2 §3.2.4.1.4).
    fn inspect(&mut self, msg: &[u8], ctx: &FrameCtx, p: &mut Parts, c: &mut Counters) {
        let mut off = 0usize;
        let mut prev_file: Option<[u8; 16]> = None;
        for _ in 0..64 {
            let Some(elem) = msg.get(off..) else { break };
            let Ok(h) = HeaderRepr::parse(elem) else { break };
            let end = if h.next_command == 0 { elem.len() } else { (h.next_command as usize).min(elem.len()) };
            let e = &elem[..end];
            let resolve = |fid: [u8; 16]| if fid == [0xff; 16] { prev_file.unwrap_or(fid) } else { fid };
            match (h.command, h.is_response()) {
                (command::WRITE, false) => {
                    if let Ok(w) = rec::WriteRequest::parse(e) {
                        let file_id = resolve(w.file_id);
                        prev_file = Some(file_id);
                        if (w.channel == channel::RDMA_V1 || w.channel == channel::RDMA_V1_INVALIDATE) && !w.write_channel_info.is_empty() {
                            self.register(h, SendKind::Write, file_id, w.offset, w.write_channel_info, ctx, p, c);
                        }
                    }
                }
                (command::READ, false) => {
                    if let Ok(r) = rec::ReadRequest::parse(e) {
                        let file_id = resolve(r.file_id);
                        prev_file = Some(file_id);
                        if (r.channel == channel::RDMA_V1 || r.channel == channel::RDMA_V1_INVALIDATE) && !r.read_channel_info.is_empty() {
                            self.register(h, SendKind::Read, file_id, r.offset, r.read_channel_info, ctx, p, c);
                        }
                    }
                }
                (command::READ, true) if !h.is_interim() => {
                    let remaining = if h.status == 0 { rec::ReadResponse::parse(e).map(|r| r.data_remaining).unwrap_or(0) } else { 0 };
                    self.linker.read_response(self.id, h.message_id, remaining, ctx.frame, p, c);
                }
                _ => {}
            }
            if h.next_command == 0 || (h.next_command as usize) < HEADER_LEN {
                break;
            }
            off += h.next_command as usize;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn register(
        &mut self,
        h: HeaderRepr,
        kind: SendKind,
        file_id: [u8; 16],
        offset: u64,
        descriptors: Vec<rec::BufferDescriptorV1>,
        ctx: &FrameCtx,
        p: &mut Parts,
        c: &mut Counters,
    ) {
        let tree_id = h.tree_id.unwrap_or(0);
        let read = kind == SendKind::Read;
        let (share, file_name) = p.smb.payload_names(self.id, h.message_id, read, h.session_id, tree_id, &file_id, None);
        let req = link::Request {
            message_id: h.message_id,
            kind,
            session_id: h.session_id,
            tree_id,
            file_id,
            offset,
            share,
            file_name,
            descriptors,
            frame: Some(ctx.frame),
        };
        self.linker.register(self.id, req, p, c);
    }

    /// End of the connection.
    pub fn close(&mut self, ctx: &FrameCtx, p: &mut Parts, c: &mut Counters) {
        for from in 0..2 {
            self.lost(from, p);
            if let Some(s) = self.dirs[from].smb2.as_mut() {
                s.on_close(ctx, p);
            }
        }
        self.linker.close(self.id, p, c);
    }
}

#[cfg(test)]
mod tests;
