//! Payload: a WRITE request's or READ response's data region streamed into the hasher as it
//! arrives (never buffered), and the send handed to the payload sink when it is complete.

use super::{Smb2Stream, State};
use crate::accounting::cat;
use crate::frame::{FrameCtx, FrameRef};
use crate::payload::hash::PayloadHasher;
use crate::payload::PayloadDigest;
use crate::payload::send::{SendKind, SendRecord};
use crate::smb2::handle::PayloadMeta;
use crate::smb2::{Anomaly, Parts};

/// The payload being streamed.
pub(super) struct PayloadCtx {
    pub(super) kind: SendKind,
    pub(super) meta: PayloadMeta,
    /// None once bytes were lost.
    pub(super) hasher: Option<PayloadHasher>,
    pub(super) length: u32,
    pub(super) first_frame: FrameRef,
    pub(super) last_frame: FrameRef,
    pub(super) ts_ns: u64,
    /// Completion to signal after the send (READ response).
    pub(super) completes: Option<u64>,
}

impl PayloadCtx {
    pub(super) fn new(kind: SendKind, meta: PayloadMeta, length: u32, ctx: &FrameCtx, completes: Option<u64>) -> PayloadCtx {
        PayloadCtx {
            kind,
            meta,
            hasher: Some(PayloadHasher::with_len_hint(u64::from(length))),
            length,
            first_frame: ctx.frame,
            last_frame: ctx.frame,
            ts_ns: ctx.ts_ns,
            completes,
        }
    }
}

impl Smb2Stream {
    /// Streams up to `remaining` payload bytes of `input` into the hasher; returns bytes consumed.
    pub(super) fn payload_bytes(&mut self, remaining: u32, input: &[u8], ctx: &FrameCtx, p: &mut Parts) -> usize {
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

    pub(super) fn finish_payload(&mut self, ctx: &FrameCtx, p: &mut Parts) {
        if let Some(pl) = self.payload.take() {
            match pl.hasher {
                Some(hasher) => {
                    let finished = hasher.finish_deferred();
                    let m = pl.meta;
                    let rec = SendRecord {
                        conn: self.conn,
                        message_id: m.message_id,
                        kind: pl.kind,
                        transport: self.transport,
                        src: self.src.0,
                        dst: self.dst.0,
                        src_port: if self.ip_proto != 0 { self.src.1 } else { 0 },
                        dst_port: if self.ip_proto != 0 { self.dst.1 } else { 0 },
                        ip_proto: self.ip_proto,
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
                        digest: PayloadDigest::default(),
                    };
                    self.emit_send(finished, rec, pl.length, p);
                }
                None => {
                    p.anomalies.raise(Anomaly::PayloadIncomplete);
                    p.smb.stats.payload_incomplete += 1;
                    p.smb.stats.payload_incomplete_bytes += pl.length as u64;
                }
            }
            if let Some(mid) = pl.completes {
                self.emit_complete(mid, ctx.ts_ns, p);
            }
        }
        // The last element of a message ends with its data (MS-SMB2 §2.2.21, §2.2.20: the
        // buffer is the end of the message; at most alignment padding follows). A NetBIOS
        // length reaching further is not believed: resynchronise on what follows instead of
        // swallowing it (a forged length would otherwise hide the messages after it).
        if self.framed && !self.chain_next && self.elem_left > TRAILING_PAD_MAX {
            // Where its successor starts is not believed, so nothing can confirm a held
            // message: undecided, handed on (as a framed stream's message is).
            self.release_held(p);
            self.confirmed = false;
            p.anomalies.raise(Anomaly::NetbiosLengthBeyondMessage);
            p.smb.stats.resyncs += 1;
            self.msg_left = 0;
            self.elem_left = 0;
            self.hdr = None;
            self.small_len = 0;
            self.buf.clear();
            self.state = State::Resync;
            return;
        }
        self.state = State::Tail(cat::SMB_METADATA);
        if self.elem_left == 0 {
            self.end_of_element(p);
        }
    }
}

/// Padding believed after the data of a message's last element (8-byte alignment).
const TRAILING_PAD_MAX: u32 = 7;
