//! Per-direction streaming SMB2 parser, the hot path.
//!
//! Input is one direction of a TCP connection in order, in chunks of any size, with explicit
//! gaps. The machine walks NetBIOS header → ProtocolId → compound elements (NextCommand).
//! Only small parts are buffered: each element's 64-byte header and the part of its body the
//! handler needs (capped at `MESSAGE_CAP`). WRITE request data and READ response data go from
//! the input chunks straight into a `PayloadHasher` and, when complete, become a `SendRecord`.
//!
//! Accounting: every byte given to `data()` is added to exactly one category, at the moment
//! its meaning is decided:
//! - NetBIOS headers, SMB2 headers, command bodies, padding, SMB1 → `SMB_METADATA`;
//! - the data region of WRITE requests / READ responses (DataOffset, Length) → `SMB_PAYLOAD`,
//!   also when a gap made the payload incomplete;
//! - messages behind 0xFD 'SMB' → `SMB_ENCRYPTED`, behind 0xFC 'SMB' → `SMB_COMPRESSED`
//!   (their 4-byte NetBIOS header is metadata);
//! - bytes skipped while resynchronising, and the rest of a message whose structure was lost
//!   (bad header, gap inside an unparsed header) → `SMB_UNPARSED`.
//!
//! `new_unframed` builds the same machine for transports that deliver whole SMB2 messages
//! without NetBIOS framing (SMB Direct): each `data()` call is exactly one message.

use super::handle::{handle, ChainCtx, PayloadMeta};
use super::netbios;
use super::records::{self as rec, command, protocol_id, HeaderRepr, HEADER_LEN};
use super::state::SmbState;
use super::Parts;
use crate::accounting::cat;
use crate::context::{PayloadSink, Shared};
use crate::frame::{FrameCtx, FrameRef};
use crate::payload::hash::PayloadHasher;
use crate::payload::send::{SendKind, SendRecord, Transport};
use crate::tcp::StreamConsumer;
use std::net::IpAddr;
use super::Anomaly;

/// Most bytes of one non-payload message buffered for parsing; the rest is skipped.
pub const MESSAGE_CAP: usize = 64 * 1024;
/// Resync pattern: NetBIOS header (4) + ProtocolId (4) + StructureSize (2).
const PATTERN_LEN: usize = 10;
/// Bytes kept between chunks while scanning for the pattern.
const CARRY: usize = PATTERN_LEN - 1;
/// Bytes of a compressed message buffered to look at its uncompressed SMB2 header.
const COMPRESSED_PREFIX: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Buffering the 64-byte header.
    Header,
    /// WRITE request / READ response: buffering the fixed part to learn DataOffset/Length.
    Fixed,
    /// Buffering up to DataOffset; the payload follows.
    DataHead,
    /// Buffering the body (capped) of a message without payload.
    Whole,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Collecting the 4-byte NetBIOS header into `small`.
    NbHeader,
    /// Collecting the 4-byte ProtocolId into `small`.
    ProtocolId,
    /// The rest of the message (`msg_left`) goes to a category.
    Skip(&'static str),
    /// Buffering the prefix of a compressed message.
    CompressedHead(usize),
    /// Buffering an element's head into `buf` up to `need` bytes.
    Head(Phase, usize),
    /// Streaming `remaining` payload bytes into the hasher.
    Payload(u32),
    /// The rest of the element (`elem_left`) goes to a category.
    Tail(&'static str),
    /// Framing lost: scanning for a NetBIOS + SMB2 header.
    Resync,
    /// Unframed mode between messages.
    Idle,
}

struct PayloadCtx {
    kind: SendKind,
    meta: PayloadMeta,
    /// None once bytes were lost.
    hasher: Option<PayloadHasher>,
    length: u32,
    first_frame: FrameRef,
    last_frame: FrameRef,
    ts_ns: u64,
    /// Completion to signal after the send (READ response).
    completes: Option<u64>,
}

/// One direction of an SMB2 connection.
pub struct Smb2Stream {
    conn: u64,
    to_server: bool,
    src: (IpAddr, u16),
    dst: (IpAddr, u16),
    framed: bool,
    state: State,
    /// NetBIOS header and ProtocolId awaiting a decision (not yet accounted).
    small: [u8; 8],
    small_len: usize,
    /// Bytes of the current message not yet received.
    msg_left: u32,
    /// Bytes of the current element not yet received.
    elem_left: u32,
    /// Another element follows the current one (valid NextCommand).
    chain_next: bool,
    /// The current element's header, once parsed.
    hdr: Option<HeaderRepr>,
    buf: Vec<u8>,
    chain: ChainCtx,
    payload: Option<PayloadCtx>,
    /// Resync window carried between chunks (not yet accounted).
    carry: [u8; CARRY],
    carry_len: usize,
}

impl Smb2Stream {
    /// A TCP direction: NetBIOS-framed messages.
    pub fn new(conn_id: u64, to_server: bool, src: (IpAddr, u16), dst: (IpAddr, u16)) -> Self {
        Smb2Stream {
            conn: conn_id,
            to_server,
            src,
            dst,
            framed: true,
            state: State::NbHeader,
            small: [0; 8],
            small_len: 0,
            msg_left: 0,
            elem_left: 0,
            chain_next: false,
            hdr: None,
            buf: Vec::new(),
            chain: ChainCtx::default(),
            payload: None,
            carry: [0; CARRY],
            carry_len: 0,
        }
    }

    /// Whole SMB2 messages without NetBIOS framing (SMB Direct reassembled messages):
    /// each `data()` call must be exactly one message. Sends are marked `Transport::SmbDirect`.
    pub fn new_unframed(conn_id: u64, to_server: bool, src: (IpAddr, u16), dst: (IpAddr, u16)) -> Self {
        let mut s = Smb2Stream::new(conn_id, to_server, src, dst);
        s.framed = false;
        s.state = State::Idle;
        s
    }

    pub fn conn_id(&self) -> u64 {
        self.conn
    }
    pub fn to_server(&self) -> bool {
        self.to_server
    }

    /// Feeds one whole message (unframed mode) — same as `data()`, named for SMB Direct.
    pub fn on_message(&mut self, msg: &[u8], ctx: &FrameCtx, p: &mut Parts) {
        self.feed_message(msg, ctx, p)
    }

    fn hdr_len(&self) -> usize {
        if self.framed {
            netbios::HEADER_LEN
        } else {
            0
        }
    }

    // ---------------------------------------------------------------- input

    fn feed(&mut self, mut input: &[u8], ctx: &FrameCtx, p: &mut Parts) {
        while !input.is_empty() {
            let n = self.step(input, ctx, p);
            input = &input[n..];
        }
    }

    fn feed_message(&mut self, msg: &[u8], ctx: &FrameCtx, p: &mut Parts) {
        if self.framed {
            return self.feed(msg, ctx, p);
        }
        if self.state != State::Idle {
            // The previous message ended inside a buffered part (cannot happen for whole
            // messages; defensive).
            p.anomalies.raise(Anomaly::UnframedStateReset);
            self.abandon(ctx, p);
        }
        if msg.is_empty() {
            return;
        }
        if msg.len() > netbios::MAX_LENGTH as usize {
            p.anomalies.raise(Anomaly::MessageTooLong);
            p.accounting.add(cat::SMB_UNPARSED, msg.len() as u64);
            return;
        }
        self.msg_left = msg.len() as u32;
        self.state = State::ProtocolId;
        self.feed(msg, ctx, p);
        if self.state != State::Idle {
            p.anomalies.raise(Anomaly::UnframedMessageTruncated);
            self.abandon(ctx, p);
        }
    }

    /// Consumes a prefix of `input` according to the state; returns bytes consumed.
    /// May return 0 only after changing state to one that consumes.
    fn step(&mut self, input: &[u8], ctx: &FrameCtx, p: &mut Parts) -> usize {
        match self.state {
            State::Idle => {
                // Unframed data outside `feed_message` (cannot happen through the API).
                p.accounting.add(cat::SMB_UNPARSED, input.len() as u64);
                input.len()
            }
            State::NbHeader => {
                let n = (4 - self.small_len).min(input.len());
                self.small[self.small_len..self.small_len + n].copy_from_slice(&input[..n]);
                self.small_len += n;
                if self.small_len == 4 {
                    self.on_netbios_header(p);
                }
                n
            }
            State::ProtocolId => {
                let want = self.hdr_len() + 4;
                let n = (want - self.small_len).min(input.len()).min(self.msg_left as usize);
                self.small[self.small_len..self.small_len + n].copy_from_slice(&input[..n]);
                self.small_len += n;
                self.msg_left -= n as u32;
                if self.small_len == want {
                    self.on_protocol_id(p);
                }
                n
            }
            State::Skip(category) => {
                let n = (self.msg_left as usize).min(input.len());
                p.accounting.add(category, n as u64);
                self.msg_left -= n as u32;
                if self.msg_left == 0 {
                    self.end_of_message();
                }
                n
            }
            State::CompressedHead(need) => {
                let n = (need - self.buf.len()).min(input.len());
                self.buf.extend_from_slice(&input[..n]);
                p.accounting.add(cat::SMB_COMPRESSED, n as u64);
                self.msg_left -= n as u32;
                if self.buf.len() == need {
                    self.on_compressed_prefix(p);
                    self.state = State::Skip(cat::SMB_COMPRESSED);
                    if self.msg_left == 0 {
                        self.end_of_message();
                    }
                }
                n
            }
            State::Head(phase, need) => {
                let n = (need - self.buf.len()).min(input.len());
                self.buf.extend_from_slice(&input[..n]);
                p.accounting.add(cat::SMB_METADATA, n as u64);
                self.eat(n);
                if self.buf.len() == need {
                    self.on_head(phase, ctx, p);
                }
                n
            }
            State::Payload(remaining) => {
                let n = (remaining as usize).min(input.len());
                if let Some(pl) = self.payload.as_mut() {
                    if let Some(h) = pl.hasher.as_mut() {
                        h.update(&input[..n]);
                    }
                    pl.last_frame = ctx.frame;
                }
                p.accounting.add(cat::SMB_PAYLOAD, n as u64);
                self.eat(n);
                let left = remaining - n as u32;
                self.state = State::Payload(left);
                if left == 0 {
                    self.finish_payload(ctx, p);
                }
                n
            }
            State::Tail(category) => {
                let n = (self.elem_left as usize).min(input.len());
                p.accounting.add(category, n as u64);
                self.eat(n);
                if self.elem_left == 0 {
                    self.end_of_element(p);
                }
                n
            }
            State::Resync => self.resync_scan(input, ctx, p),
        }
    }

    fn eat(&mut self, n: usize) {
        self.msg_left -= n as u32;
        self.elem_left -= n as u32;
    }

    // ---------------------------------------------------------------- framing

    fn on_netbios_header(&mut self, p: &mut Parts) {
        match netbios::Repr::parse(&self.small[..4]) {
            Err(_) => self.lose_framing(Anomaly::NetbiosBadType, p),
            Ok(r) if !r.is_session_message() => {
                // Session request/response, keepalive: transport metadata.
                p.accounting.add(cat::SMB_METADATA, 4);
                self.small_len = 0;
                self.msg_left = r.length;
                self.state = State::Skip(cat::SMB_METADATA);
                if self.msg_left == 0 {
                    self.end_of_message();
                }
            }
            Ok(r) if r.length < 4 => self.lose_framing(Anomaly::NetbiosBadLength, p),
            Ok(r) => {
                self.msg_left = r.length;
                self.state = State::ProtocolId;
            }
        }
    }

    fn on_protocol_id(&mut self, p: &mut Parts) {
        let hl = self.hdr_len();
        let mut id = [0u8; 4];
        id.copy_from_slice(&self.small[hl..hl + 4]);
        match id {
            protocol_id::SMB2 => {
                p.accounting.add(cat::SMB_METADATA, (hl + 4) as u64);
                self.small_len = 0;
                self.chain = ChainCtx::default();
                self.start_element(&id);
            }
            protocol_id::TRANSFORM => {
                p.accounting.add(cat::SMB_METADATA, hl as u64);
                p.accounting.add(cat::SMB_ENCRYPTED, 4);
                p.smb.stats.encrypted_messages += 1;
                self.small_len = 0;
                self.state = State::Skip(cat::SMB_ENCRYPTED);
            }
            protocol_id::COMPRESSION_TRANSFORM => {
                p.accounting.add(cat::SMB_METADATA, hl as u64);
                p.accounting.add(cat::SMB_COMPRESSED, 4);
                p.smb.stats.compressed_messages += 1;
                self.small_len = 0;
                self.buf.clear();
                self.buf.extend_from_slice(&id);
                let need = (4 + self.msg_left as usize).min(COMPRESSED_PREFIX);
                self.state = State::CompressedHead(need);
                if need == 4 {
                    self.on_compressed_prefix(p);
                    self.state = State::Skip(cat::SMB_COMPRESSED);
                }
            }
            protocol_id::SMB1 => {
                p.accounting.add(cat::SMB_METADATA, (hl + 4) as u64);
                p.smb.stats.smb1_messages += 1;
                self.small_len = 0;
                self.state = State::Skip(cat::SMB_METADATA);
            }
            _ if self.framed => {
                // Restore the message length consumed so far; resync rescans these bytes.
                self.lose_framing(Anomaly::UnknownProtocolId, p);
                return;
            }
            _ => {
                p.anomalies.raise(Anomaly::UnknownProtocolId);
                p.accounting.add(cat::SMB_UNPARSED, self.small_len as u64);
                self.small_len = 0;
                self.state = State::Skip(cat::SMB_UNPARSED);
            }
        }
        if self.msg_left == 0 && matches!(self.state, State::Skip(_)) {
            self.end_of_message();
        }
    }

    /// Starts an element whose first bytes (`first`) were already received and accounted.
    fn start_element(&mut self, first: &[u8]) {
        self.buf.clear();
        if self.buf.capacity() > 16 * 1024 {
            self.buf.shrink_to(4096);
        }
        self.buf.extend_from_slice(first);
        self.elem_left = self.msg_left;
        self.hdr = None;
        self.chain_next = false;
        let need = (first.len() + self.elem_left as usize).min(HEADER_LEN);
        self.state = State::Head(Phase::Header, need);
        // `need == buf.len()` only for a message shorter than 64 bytes with nothing left.
        if need == self.buf.len() {
            self.state = State::Tail(cat::SMB_UNPARSED);
        }
    }

    fn end_of_element(&mut self, p: &mut Parts) {
        self.hdr = None;
        if self.msg_left == 0 {
            self.end_of_message();
        } else if self.chain_next {
            self.start_element(&[]);
        } else {
            p.anomalies.raise(Anomaly::TrailingBytes);
            self.state = State::Skip(cat::SMB_UNPARSED);
        }
    }

    fn end_of_message(&mut self) {
        self.state = if self.framed { State::NbHeader } else { State::Idle };
        self.small_len = 0;
        self.hdr = None;
        self.chain_next = false;
        self.buf.clear();
    }

    /// The bytes held in `small` were not a valid NetBIOS/SMB2 start: drop the first byte
    /// (unparsed) and rescan the others.
    fn lose_framing(&mut self, anomaly: Anomaly, p: &mut Parts) {
        p.anomalies.raise(anomaly);
        p.smb.stats.resyncs += 1;
        let held = self.small_len;
        if held > 0 {
            p.accounting.add(cat::SMB_UNPARSED, 1);
        }
        // carry ≥ 7 bytes: holds everything but the dropped byte.
        self.carry_len = held.saturating_sub(1);
        if held > 1 {
            let (src, dst) = (&self.small[1..held], &mut self.carry[..held - 1]);
            dst.copy_from_slice(src);
        }
        self.small_len = 0;
        self.msg_left = 0;
        self.state = State::Resync;
    }

    // ---------------------------------------------------------------- elements

    fn on_head(&mut self, phase: Phase, ctx: &FrameCtx, p: &mut Parts) {
        match phase {
            Phase::Header => self.on_header(ctx, p),
            Phase::Fixed => self.on_fixed(ctx, p),
            Phase::DataHead => self.on_data_head(ctx, p),
            Phase::Whole => self.on_whole(ctx, p),
        }
    }

    fn on_header(&mut self, ctx: &FrameCtx, p: &mut Parts) {
        let h = match HeaderRepr::parse(&self.buf) {
            Ok(h) => h,
            Err(e) => {
                if self.buf.len() < HEADER_LEN {
                    p.anomalies.raise(Anomaly::TruncatedHeader);
                } else {
                    p.anomalies.raise(e);
                }
                // Element boundaries are unknown: the rest of the message is unparsed.
                self.chain_next = false;
                self.elem_left = self.msg_left;
                self.state = State::Tail(cat::SMB_UNPARSED);
                if self.elem_left == 0 {
                    self.end_of_element(p);
                }
                return;
            }
        };
        // Element length (§3.2.4.1.4): NextCommand, 8-byte aligned, within the message.
        let avail = HEADER_LEN as u32 + self.elem_left;
        let nc = h.next_command;
        let elem_len = if nc == 0 {
            avail
        } else if nc % 8 == 0 && nc as usize >= HEADER_LEN && nc < avail {
            self.chain_next = true;
            nc
        } else {
            p.anomalies.raise(Anomaly::BadNextCommand);
            avail
        };
        self.elem_left = elem_len - HEADER_LEN as u32;
        let resp = h.is_response();
        let data_fixed = match (h.command, resp) {
            (command::WRITE, false) => Some(rec::WriteRequest::FIXED_LEN),
            (command::READ, true) if !h.is_interim() => Some(rec::ReadResponse::FIXED_LEN),
            _ => None,
        };
        self.hdr = Some(h);
        let (phase, want) = match data_fixed {
            Some(f) => (Phase::Fixed, HEADER_LEN + f),
            None => (Phase::Whole, HEADER_LEN + rec::body_needed(h.command, resp).unwrap_or(MESSAGE_CAP)),
        };
        self.head_until(phase, want, ctx, p);
    }

    /// Buffers the element up to `want` bytes (bounded by the element and the cap).
    fn head_until(&mut self, phase: Phase, want: usize, ctx: &FrameCtx, p: &mut Parts) {
        let elem_len = self.buf.len() + self.elem_left as usize;
        let need = want.min(elem_len).min(MESSAGE_CAP);
        if need <= self.buf.len() {
            self.on_head(phase, ctx, p);
        } else {
            self.state = State::Head(phase, need);
        }
    }

    fn on_fixed(&mut self, ctx: &FrameCtx, p: &mut Parts) {
        let Some(h) = self.hdr else { return self.on_whole(ctx, p) };
        let elem_len = self.buf.len() + self.elem_left as usize;
        let write = h.command == command::WRITE;
        let fixed = HEADER_LEN + if write { rec::WriteRequest::FIXED_LEN } else { rec::ReadResponse::FIXED_LEN };
        // Data region from the fixed part; a body that is not a data-bearing body (error
        // response, truncated element) falls through to the generic handling.
        let region = if self.buf.len() < fixed || rec::u16_at(&self.buf, HEADER_LEN) != Ok(if write { 49 } else { 17 }) {
            None
        } else if write {
            Some((rec::u16_at(&self.buf, HEADER_LEN + 2).unwrap_or(0) as usize, rec::u32_at(&self.buf, HEADER_LEN + 4).unwrap_or(0)))
        } else {
            Some((self.buf[HEADER_LEN + 2] as usize, rec::u32_at(&self.buf, HEADER_LEN + 4).unwrap_or(0)))
        };
        match region {
            Some((off, len)) if len > 0 => {
                let end = off as u64 + len as u64;
                if off < fixed || end > elem_len as u64 || off > MESSAGE_CAP {
                    p.anomalies.raise(if write { Anomaly::WriteBadDataOffset } else { Anomaly::ReadBadDataOffset });
                    // Treat as metadata: parse what the fixed part says, no payload.
                    self.payload = None;
                    self.process(ctx, p, false);
                    self.state = State::Tail(cat::SMB_METADATA);
                    if self.elem_left == 0 {
                        self.end_of_element(p);
                    }
                } else {
                    self.head_until(Phase::DataHead, off, ctx, p);
                }
            }
            _ => {
                // No inline data (RDMA channel, zero length, error body): buffer like any
                // other message so channel info can be parsed.
                let want = if write { MESSAGE_CAP } else { HEADER_LEN + rec::ReadResponse::FIXED_LEN };
                self.head_until(Phase::Whole, want, ctx, p)
            }
        }
    }

    fn on_data_head(&mut self, ctx: &FrameCtx, p: &mut Parts) {
        self.process(ctx, p, true);
        if self.hdr.is_none() {
            return;
        }
        // WRITE Length and READ DataLength both sit at body offset 4.
        let length = rec::u32_at(&self.buf, HEADER_LEN + 4).unwrap_or(0);
        if self.payload.is_some() {
            self.state = State::Payload(length);
        } else {
            // The handler refused the message (parse error): the data is not hashed.
            self.state = State::Tail(cat::SMB_METADATA);
            if self.elem_left == 0 {
                self.end_of_element(p);
            }
        }
    }

    fn on_whole(&mut self, ctx: &FrameCtx, p: &mut Parts) {
        let elem_len = self.buf.len() + self.elem_left as usize;
        if elem_len > MESSAGE_CAP && self.buf.len() == MESSAGE_CAP {
            p.anomalies.raise(Anomaly::MessageOverCap);
        }
        self.process(ctx, p, false);
        self.state = State::Tail(cat::SMB_METADATA);
        if self.elem_left == 0 {
            self.end_of_element(p);
        }
    }

    /// Runs the handler on the buffered head; with `data`, prepares the payload send.
    fn process(&mut self, ctx: &FrameCtx, p: &mut Parts, data: bool) {
        let Some(h) = self.hdr else { return };
        let act = handle(self.conn, &h, &self.buf, &mut self.chain, p.smb, p.anomalies);
        let completes = act.completes;
        match (data, act.payload) {
            (true, Some(meta)) => {
                let length = rec::u32_at(&self.buf, HEADER_LEN + 4).unwrap_or(0);
                let kind = if h.command == command::WRITE { SendKind::Write } else { SendKind::Read };
                self.payload = Some(PayloadCtx {
                    kind,
                    meta,
                    hasher: Some(PayloadHasher::with_len_hint(length as u64)),
                    length,
                    first_frame: ctx.frame,
                    last_frame: ctx.frame,
                    ts_ns: ctx.ts_ns,
                    completes,
                });
            }
            _ => {
                self.payload = None;
                if let Some(mid) = completes {
                    p.sink.complete(self.conn, mid, ctx.ts_ns);
                }
            }
        }
    }

    fn finish_payload(&mut self, ctx: &FrameCtx, p: &mut Parts) {
        if let Some(pl) = self.payload.take() {
            match pl.hasher {
                Some(hasher) => {
                    let digest = hasher.finish();
                    p.smb.stats.payloads_sent += 1;
                    p.smb.stats.payload_bytes_sent += pl.length as u64;
                    let m = pl.meta;
                    p.sink.send(SendRecord {
                        conn: self.conn,
                        message_id: m.message_id,
                        kind: pl.kind,
                        transport: if self.framed { Transport::Tcp } else { Transport::SmbDirect },
                        src: self.src.0,
                        dst: self.dst.0,
                        session_id: m.session_id,
                        tree_id: m.tree_id,
                        file_id: m.file_id,
                        share: m.share,
                        file_name: m.file_name,
                        offset: m.offset,
                        first_frame: pl.first_frame,
                        last_frame: pl.last_frame,
                        // Inline payload follows its header in the same message.
                        header_frame: None,
                        ts_ns: pl.ts_ns,
                        digest,
                    });
                }
                None => {
                    p.anomalies.raise(Anomaly::PayloadIncomplete);
                    p.smb.stats.payload_incomplete += 1;
                    p.smb.stats.payload_incomplete_bytes += pl.length as u64;
                }
            }
            if let Some(mid) = pl.completes {
                p.sink.complete(self.conn, mid, ctx.ts_ns);
            }
        }
        self.state = State::Tail(cat::SMB_METADATA);
        if self.elem_left == 0 {
            self.end_of_element(p);
        }
    }

    fn on_compressed_prefix(&mut self, p: &mut Parts) {
        // The original SMB2 header is visible when the sender left it uncompressed
        // (§3.1.4.4: "Offset" bytes / a leading NONE payload); count it like tshark does.
        let t = match rec::CompressionTransform::parse(&self.buf) {
            Ok(t) => t,
            Err(e) => {
                p.anomalies.raise(e);
                return;
            }
        };
        let prefix = t.uncompressed_prefix(&self.buf);
        if let Ok(h) = HeaderRepr::parse(prefix) {
            p.smb.count_command(h.command, h.is_response());
            match (h.command, h.is_response()) {
                (command::READ, true) => {
                    p.smb.stats.read_resp_pdus += 1;
                    if let (0, Ok(r)) = (h.status, rec::ReadResponse::parse(prefix)) {
                        p.smb.stats.read_bytes += r.data_length as u64;
                    }
                }
                (command::WRITE, false) => {
                    if let Ok(w) = rec::WriteRequest::parse(prefix) {
                        p.smb.stats.write_req_pdus += 1;
                        p.smb.stats.write_bytes += w.length as u64;
                    }
                }
                _ => {}
            }
        }
        self.buf.clear();
    }

    // ---------------------------------------------------------------- resync

    /// Is a plausible message start at `w[0..]`? `None` = not enough bytes to decide.
    fn candidate(w: &[u8]) -> Option<bool> {
        if w.len() < 8 {
            return None;
        }
        if w[0] != 0 || w[5..8] != *b"SMB" {
            return Some(false);
        }
        let len = u32::from_be_bytes([0, w[1], w[2], w[3]]);
        match w[4] {
            0xFE => {
                if w.len() < PATTERN_LEN {
                    return None;
                }
                Some(len >= HEADER_LEN as u32 && u16::from_le_bytes([w[8], w[9]]) == 64)
            }
            0xFD => Some(len >= rec::TransformHeader::LEN as u32),
            0xFC => Some(len >= 12),
            _ => Some(false),
        }
    }

    fn resync_scan(&mut self, input: &[u8], ctx: &FrameCtx, p: &mut Parts) -> usize {
        // Positions starting inside the carry: look at carry ++ head of input.
        if self.carry_len > 0 {
            let mut w = [0u8; CARRY + PATTERN_LEN];
            let cl = self.carry_len;
            w[..cl].copy_from_slice(&self.carry[..cl]);
            let extra = input.len().min(PATTERN_LEN);
            w[cl..cl + extra].copy_from_slice(&input[..extra]);
            let total = cl + extra;
            for i in 0..cl {
                match Self::candidate(&w[i..total]) {
                    Some(true) => {
                        p.accounting.add(cat::SMB_UNPARSED, i as u64);
                        let held: Vec<u8> = self.carry[i..cl].to_vec();
                        self.carry_len = 0;
                        self.state = State::NbHeader;
                        self.feed(&held, ctx, p);
                        return 0;
                    }
                    Some(false) => {}
                    None => {
                        // Undecided: keep carry[i..] plus all of input (input is shorter
                        // than a pattern here), wait for more.
                        p.accounting.add(cat::SMB_UNPARSED, i as u64);
                        let mut nw = [0u8; CARRY + PATTERN_LEN];
                        let keep = total - i;
                        nw[..keep].copy_from_slice(&w[i..total]);
                        debug_assert!(keep <= CARRY);
                        let keep = keep.min(CARRY);
                        self.carry[..keep].copy_from_slice(&nw[..keep]);
                        self.carry_len = keep;
                        return extra;
                    }
                }
            }
            p.accounting.add(cat::SMB_UNPARSED, cl as u64);
            self.carry_len = 0;
        }
        // Positions inside input.
        let mut i = 0;
        while i < input.len() {
            match Self::candidate(&input[i..]) {
                Some(true) => {
                    p.accounting.add(cat::SMB_UNPARSED, i as u64);
                    self.state = State::NbHeader;
                    return i;
                }
                Some(false) => i += 1,
                None => break,
            }
        }
        p.accounting.add(cat::SMB_UNPARSED, i as u64);
        let keep = input.len() - i;
        self.carry[..keep].copy_from_slice(&input[i..]);
        self.carry_len = keep;
        input.len()
    }

    // ---------------------------------------------------------------- gaps, close

    /// Drops whatever message is in progress (payload incomplete), accounting held bytes.
    fn abandon(&mut self, ctx: &FrameCtx, p: &mut Parts) {
        if let Some(pl) = self.payload.as_mut() {
            pl.hasher = None;
            self.finish_payload(ctx, p);
        }
        self.payload = None;
        p.accounting.add(cat::SMB_UNPARSED, (self.small_len + self.carry_len) as u64);
        self.small_len = 0;
        self.carry_len = 0;
        self.msg_left = 0;
        self.elem_left = 0;
        self.end_of_message();
    }

    fn gap_inner(&mut self, missing: u64, ctx: &FrameCtx, p: &mut Parts) {
        if missing == 0 {
            return;
        }
        if !self.framed {
            p.anomalies.raise(Anomaly::Gap);
            self.abandon(ctx, p);
            return;
        }
        let to_resync = |s: &mut Self, p: &mut Parts| {
            s.abandon(ctx, p);
            p.anomalies.raise(Anomaly::GapResync);
            p.smb.stats.resyncs += 1;
            s.state = State::Resync;
        };
        match self.state {
            State::Idle => {}
            State::Resync => {
                p.accounting.add(cat::SMB_UNPARSED, self.carry_len as u64);
                self.carry_len = 0;
            }
            State::NbHeader | State::ProtocolId => to_resync(self, p),
            _ if missing > self.msg_left as u64 => to_resync(self, p),
            State::Skip(_) | State::CompressedHead(_) => {
                self.msg_left -= missing as u32;
                if matches!(self.state, State::CompressedHead(_)) {
                    self.buf.clear();
                    self.state = State::Skip(cat::SMB_COMPRESSED);
                }
                if self.msg_left == 0 {
                    self.end_of_message();
                }
            }
            State::Head(_, _) if self.hdr.is_none() => {
                p.anomalies.raise(Anomaly::GapInMessage);
                self.msg_left -= missing as u32;
                self.state = State::Skip(cat::SMB_UNPARSED);
                if self.msg_left == 0 {
                    self.end_of_message();
                }
            }
            State::Payload(remaining) => {
                if let Some(pl) = self.payload.as_mut() {
                    pl.hasher = None;
                }
                let m = (missing as u32).min(remaining);
                self.eat(m as usize);
                self.state = State::Payload(remaining - m);
                if remaining == m {
                    self.finish_payload(ctx, p);
                    self.gap_inner(missing - m as u64, ctx, p);
                }
            }
            State::Head(_, _) | State::Tail(_) => {
                if matches!(self.state, State::Head(..)) {
                    p.anomalies.raise(Anomaly::GapInMessage);
                }
                if missing <= self.elem_left as u64 {
                    self.eat(missing as usize);
                    self.state = State::Tail(cat::SMB_UNPARSED);
                    if self.elem_left == 0 {
                        self.end_of_element(p);
                    }
                } else {
                    // The next element's header is lost: skip the rest of the message.
                    p.anomalies.raise(Anomaly::GapInMessage);
                    self.msg_left -= missing as u32;
                    self.state = State::Skip(cat::SMB_UNPARSED);
                    if self.msg_left == 0 {
                        self.end_of_message();
                    }
                }
            }
        }
    }
}

impl Smb2Stream {
    /// A gap in the input (`StreamConsumer::gap` with the parts lent).
    pub fn on_gap(&mut self, missing: u64, ctx: &FrameCtx, p: &mut Parts) {
        self.gap_inner(missing, ctx, p);
    }

    /// End of the stream (`StreamConsumer::close` with the parts lent).
    pub fn on_close(&mut self, ctx: &FrameCtx, p: &mut Parts) {
        let mid_message = !matches!(self.state, State::NbHeader | State::Idle | State::Resync) || self.small_len > 0;
        if mid_message {
            p.anomalies.raise(Anomaly::StreamEndedMidMessage);
        }
        self.abandon(ctx, p);
        self.state = if self.framed { State::NbHeader } else { State::Idle };
    }
}

impl<D: PayloadSink, R> StreamConsumer<Shared<SmbState, D, R>> for Smb2Stream {
    fn data(&mut self, bytes: &[u8], ctx: &FrameCtx, shared: &mut Shared<SmbState, D, R>) {
        self.feed_message(bytes, ctx, &mut shared.parts());
    }

    fn gap(&mut self, missing: u64, ctx: &FrameCtx, shared: &mut Shared<SmbState, D, R>) {
        self.on_gap(missing, ctx, &mut shared.parts());
    }

    fn close(&mut self, ctx: &FrameCtx, shared: &mut Shared<SmbState, D, R>) {
        self.on_close(ctx, &mut shared.parts());
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
