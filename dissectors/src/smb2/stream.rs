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
//!
//! This file holds the machine's state, the input loop, gaps and close; by responsibility:
//! - `framing`: NetBIOS header, ProtocolId, compressed prefix, resynchronisation;
//! - `compound`: the compound walk, element heads, data regions (through `records`), the handler;
//! - `payload`: streaming a data region into the hasher, the send.

mod compound;
mod confirm;
mod decompress;
mod decrypt;
mod framing;
mod payload;

use super::handle::ChainCtx;
use super::netbios;
use super::records::HeaderRepr;
use super::state::SmbState;
use super::{Anomaly, Parts};
use crate::accounting::cat;
use crate::context::{PayloadSink, Shared};
use crate::frame::FrameCtx;
use crate::payload::send::Transport;
use crate::tcp::StreamConsumer;
use payload::PayloadCtx;
use std::net::IpAddr;

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
    /// Buffering a whole compressed message (already accounted) into `crypt`, to decompress it.
    Comp(usize),
    /// Buffering an encrypted message (TRANSFORM header, then the ciphertext) up to `need`
    /// bytes into `crypt`, to decrypt it (`--keys`).
    Crypt(usize),
    /// Framing lost: scanning for a NetBIOS + SMB2 header.
    Resync,
    /// Unframed mode between messages.
    Idle,
}

/// One direction of an SMB2 connection.
pub struct Smb2Stream {
    conn: u64,
    to_server: bool,
    src: (IpAddr, u16),
    dst: (IpAddr, u16),
    /// IP protocol of the connection (6 TCP); 0 when `src`/`dst` hold no ports (RoCE QPNs).
    ip_proto: u8,
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
    /// The data region being hashed; boxed, so an idle stream stays small (the hasher is ~2 KiB).
    payload: Option<Box<PayloadCtx>>,
    /// Resync window carried between chunks (not yet accounted).
    carry: [u8; CARRY],
    /// The server's address was given to the SMB2 state (`SmbState::note_server`).
    server_noted: bool,
    carry_len: usize,
    /// A valid SMB2/3 start (ProtocolId after a believed NetBIOS header) was seen.
    storage: bool,
    /// How sends of this stream crossed the wire (an inner stream keeps its outer's).
    transport: Transport,
    /// Encrypted messages may be decrypted here (not in a stream fed with decrypted bytes).
    can_decrypt: bool,
    /// Compressed messages may be decompressed here (not in a stream fed with decompressed bytes).
    can_decompress: bool,
    /// The encrypted or compressed message being buffered, with the frames that carried it.
    crypt: Option<Box<decrypt::CryptBuf>>,
    /// Decrypted messages go through this unframed stream (made on first use).
    inner: Option<Box<Smb2Stream>>,
    /// Decompressed messages go through this one.
    unzipped: Option<Box<Smb2Stream>>,
    /// Unframed mode: the plaintext of the last message decrypted or decompressed, for the
    /// SMB Direct stage to find RDMA descriptors in (`take_opened`).
    opened: Option<Vec<u8>>,
    /// Keep `opened` (streams of SMB Direct connections and their inner streams).
    keep_opened: bool,
    /// A message of this (framed) stream was confirmed by the header after it (`confirm`):
    /// false at the start and after every resynchronisation.
    confirmed: bool,
    /// The message held until the next header confirms it.
    unconfirmed: Option<Box<confirm::Unconfirmed>>,
    /// `to_server` follows from the ports (exactly one end is an SMB port), so a held
    /// message's request/response flag can be checked against it (`confirm`).
    direction_known: bool,
}

impl Smb2Stream {
    /// A TCP direction: NetBIOS-framed messages.
    pub fn new(conn_id: u64, to_server: bool, src: (IpAddr, u16), dst: (IpAddr, u16)) -> Self {
        Smb2Stream {
            conn: conn_id,
            to_server,
            src,
            dst,
            ip_proto: crate::community::PROTO_TCP,
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
            server_noted: false,
            storage: false,
            transport: Transport::Tcp,
            can_decrypt: true,
            can_decompress: true,
            crypt: None,
            inner: None,
            unzipped: None,
            opened: None,
            keep_opened: false,
            confirmed: false,
            unconfirmed: None,
            direction_known: true,
        }
    }

    /// Both ends are SMB ports: which one is the server is a guess (the first frame's
    /// direction), not checked against the messages' flags.
    pub fn with_direction_unknown(mut self) -> Self {
        self.direction_known = false;
        self
    }

    /// Whole SMB2 messages without NetBIOS framing (SMB Direct reassembled messages):
    /// each `data()` call must be exactly one message. Sends are marked `Transport::SmbDirect`.
    /// `ip_proto`: 6 when `src`/`dst` are TCP endpoints (iWARP), 0 when they hold no ports.
    pub fn new_unframed(conn_id: u64, to_server: bool, src: (IpAddr, u16), dst: (IpAddr, u16), ip_proto: u8) -> Self {
        let mut s = Smb2Stream::new(conn_id, to_server, src, dst);
        s.ip_proto = ip_proto;
        s.framed = false;
        s.state = State::Idle;
        s.transport = Transport::SmbDirect;
        s.keep_opened = true;
        s
    }

    /// The stream decrypted or decompressed messages of this one go through: unframed, same
    /// connection, direction and transport; no decryption of its own, and no decompression
    /// when it is fed decompressed bytes (nesting is at most decrypt → decompress).
    fn inner_stream(&self, can_decrypt: bool, can_decompress: bool) -> Smb2Stream {
        let mut s = Smb2Stream::new_unframed(self.conn, self.to_server, self.src, self.dst, self.ip_proto);
        s.transport = self.transport;
        s.can_decrypt = can_decrypt;
        s.can_decompress = can_decompress;
        s.keep_opened = self.keep_opened;
        s.direction_known = self.direction_known;
        s
    }

    pub fn conn_id(&self) -> u64 {
        self.conn
    }
    pub fn to_server(&self) -> bool {
        self.to_server
    }

    /// Unframed mode: the innermost plaintext of the message just fed when it was encrypted
    /// or compressed (decrypted, then decompressed), else `None`. SMB Direct reads the RDMA
    /// descriptors of WRITE/READ requests from it.
    pub fn take_opened(&mut self) -> Option<Vec<u8>> {
        let mine = self.opened.take()?;
        let deeper = self.inner.as_mut().and_then(|s| s.take_opened());
        let unzipped = self.unzipped.as_mut().and_then(|s| s.opened.take());
        Some(deeper.or(unzipped).unwrap_or(mine))
    }

    /// Feeds one whole message (unframed mode) — same as `data()`, named for SMB Direct.
    pub fn on_message(&mut self, msg: &[u8], ctx: &FrameCtx, p: &mut Parts) {
        self.rebase_held(p);
        self.feed_message(msg, ctx, p);
        self.tally_held(p);
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
        self.feed_message_pieces(msg, &[(0, *ctx)], p)
    }

    /// One whole message (unframed mode) whose bytes came in several frames: `pieces` holds
    /// (offset in `msg`, frame) in increasing offsets, the first at 0.
    fn feed_message_pieces(&mut self, msg: &[u8], pieces: &[(usize, FrameCtx)], p: &mut Parts) {
        let Some(&(_, last_ctx)) = pieces.last() else { return };
        let ctx = &last_ctx;
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
        for (i, (start, pctx)) in pieces.iter().enumerate() {
            let end = pieces.get(i + 1).map_or(msg.len(), |n| n.0).min(msg.len());
            if *start < end {
                self.feed(&msg[*start..end], pctx, p);
            }
        }
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
            State::Payload(remaining) => self.payload_bytes(remaining, input, ctx, p),
            State::Crypt(need) => self.crypt_bytes(need, input, ctx, p),
            State::Comp(need) => self.comp_bytes(need, input, ctx, p),
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

    // ---------------------------------------------------------------- gaps, close

    /// Drops whatever message is in progress (payload incomplete), accounting held bytes.
    fn abandon(&mut self, ctx: &FrameCtx, p: &mut Parts) {
        if let Some(pl) = self.payload.as_mut() {
            pl.hasher = None;
            self.finish_payload(ctx, p);
        }
        self.payload = None;
        if let Some(cb) = self.crypt.take() {
            // Never complete: it stays encrypted / compressed.
            cb.release(p);
            p.accounting.add(cb.lost_as, cb.bytes.len() as u64);
        }
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
        if self.unconfirmed.is_some() && missing > u64::from(self.msg_left) {
            // The bytes that would confirm the held message are lost: undecided, handed on.
            self.release_held(p);
        }
        let to_resync = |s: &mut Self, p: &mut Parts| {
            s.abandon(ctx, p);
            s.confirmed = false;
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
            State::Crypt(_) => {
                p.anomalies.raise(Anomaly::GapInMessage);
                if let Some(cb) = self.crypt.take() {
                    cb.release(p);
                    p.accounting.add(cat::SMB_ENCRYPTED, cb.bytes.len() as u64);
                }
                self.msg_left -= missing as u32;
                self.state = State::Skip(cat::SMB_ENCRYPTED);
                if self.msg_left == 0 {
                    self.end_of_message();
                }
            }
            State::Comp(_) => {
                if let Some(cb) = self.crypt.take() {
                    cb.release(p);
                    p.accounting.add(cat::SMB_COMPRESSED, cb.bytes.len() as u64);
                }
                self.msg_left -= missing as u32;
                self.state = State::Skip(cat::SMB_COMPRESSED);
                if self.msg_left == 0 {
                    self.end_of_message();
                }
            }
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
        self.rebase_held(p);
        self.gap_inner(missing, ctx, p);
        self.tally_held(p);
    }

    /// End of the stream (`StreamConsumer::close` with the parts lent).
    pub fn on_close(&mut self, ctx: &FrameCtx, p: &mut Parts) {
        // No header follows: a held message is undecided, handed on.
        self.release_held(p);
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
        self.on_message(bytes, ctx, &mut shared.parts());
    }

    fn gap(&mut self, missing: u64, ctx: &FrameCtx, shared: &mut Shared<SmbState, D, R>) {
        self.on_gap(missing, ctx, &mut shared.parts());
    }

    fn close(&mut self, ctx: &FrameCtx, shared: &mut Shared<SmbState, D, R>) {
        self.on_close(ctx, &mut shared.parts());
    }

    fn carries_storage(&self) -> bool {
        self.storage
    }
}

#[cfg(test)]
mod tests;
