//! The compound walk (MS-SMB2 §3.2.4.1.4): each element's header, its length from NextCommand,
//! how much of its body to buffer (the fixed part of a WRITE request / READ response, whose data
//! region `records::data_region` gives, or the body the handler needs), and the handler call.

use super::{Phase, Smb2Stream, State, MESSAGE_CAP};
use super::payload::PayloadCtx;
use crate::accounting::cat;
use crate::frame::FrameCtx;
use crate::payload::send::SendKind;
use crate::smb2::handle::handle;
use crate::smb2::records::{self as rec, command, HeaderRepr, HEADER_LEN};
use crate::smb2::{Anomaly, Parts};

impl Smb2Stream {
    /// Starts an element whose first bytes (`first`) were already received and accounted.
    pub(super) fn start_element(&mut self, first: &[u8]) {
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

    pub(super) fn end_of_element(&mut self, p: &mut Parts) {
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

    pub(super) fn on_head(&mut self, phase: Phase, ctx: &FrameCtx, p: &mut Parts) {
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
                // Element boundaries are unknown.
                return self.rest_of_message_unparsed(p);
            }
        };
        if self.direction_known && h.is_response() == self.to_server && self.held_in_wrong_direction() {
            // Not decoded: a response image in a WRITE's data must not set connection,
            // session or file state.
            return self.rest_of_message_unparsed(p);
        }
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
        // WRITE requests and READ responses (not an interim one) carry a data region.
        let data_fixed = rec::data_fixed_len(h.command, resp).filter(|_| !h.is_interim());
        self.hdr = Some(h);
        let (phase, want) = match data_fixed {
            Some(f) => (Phase::Fixed, f),
            // With --keys, NEGOTIATE and SESSION_SETUP are buffered whole for the preauth hash.
            None if p.smb.crypt.active() && matches!(h.command, command::NEGOTIATE | command::SESSION_SETUP) => (Phase::Whole, MESSAGE_CAP),
            None => (Phase::Whole, HEADER_LEN + rec::body_needed(h.command, resp).unwrap_or(MESSAGE_CAP)),
        };
        self.head_until(phase, want, ctx, p);
    }

    /// The element's header is buffered and the rest of the message is read as unparsed.
    fn rest_of_message_unparsed(&mut self, p: &mut Parts) {
        self.chain_next = false;
        self.elem_left = self.msg_left;
        self.state = State::Tail(cat::SMB_UNPARSED);
        if self.elem_left == 0 {
            self.end_of_element(p);
        }
    }

    /// Buffers the element up to `want` bytes (bounded by the element and the cap).
    pub(super) fn head_until(&mut self, phase: Phase, want: usize, ctx: &FrameCtx, p: &mut Parts) {
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
        let fixed = rec::data_fixed_len(h.command, h.is_response()).unwrap_or(HEADER_LEN);
        // A body that is not a data-bearing body (error response, truncated element) has no
        // region and falls through to the generic handling.
        match rec::data_region(&self.buf, h.command, h.is_response()) {
            Some(rec::DataRegion { offset: off, length: len }) if len > 0 => {
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
        let Some(h) = self.hdr else { return };
        let length = rec::data_region(&self.buf, h.command, h.is_response()).map_or(0, |r| r.length);
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
    pub(super) fn process(&mut self, ctx: &FrameCtx, p: &mut Parts, data: bool) {
        let Some(h) = self.hdr else { return };
        if !self.server_noted {
            self.server_noted = true;
            let server = if self.to_server { self.dst.0 } else { self.src.0 };
            p.smb.note_server(self.conn, server, p.anomalies);
        }
        if p.smb.crypt.active() && self.elem_left == 0 {
            // The whole element is in `buf` (preauth integrity hash, §3.2.5.2, §3.3.5.5).
            match h.command {
                command::NEGOTIATE => p.smb.preauth_negotiate(self.conn, h.is_response(), &self.buf),
                command::SESSION_SETUP => {
                    p.smb.preauth_session_setup(self.conn, h.message_id, h.session_id, h.is_response(), h.status, &self.buf)
                }
                _ => {}
            }
        }
        let act = handle(self.conn, &h, &self.buf, &mut self.chain, p.smb, p.anomalies, data);
        let completes = act.completes;
        match (data, act.payload) {
            (true, Some(meta)) => {
                let length = rec::data_region(&self.buf, h.command, h.is_response()).map_or(0, |r| r.length);
                let kind = if h.command == command::WRITE { SendKind::Write } else { SendKind::Read };
                self.payload = Some(Box::new(PayloadCtx::new(kind, meta, length, ctx, completes)));
            }
            _ => {
                self.payload = None;
                if let Some(mid) = completes {
                    self.emit_complete(mid, ctx.ts_ns, p);
                }
            }
        }
    }
}
