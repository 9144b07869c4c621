//! NetBIOS framing (MS-SMB2 §2.1) and resynchronisation: the 4-byte session header, the
//! ProtocolId that decides what the message is (SMB2, TRANSFORM, COMPRESSION_TRANSFORM, SMB1),
//! and, once framing is lost (bad header, gap), the scan for the next NetBIOS + SMB2 header.

use super::{Smb2Stream, State, CARRY, COMPRESSED_PREFIX, PATTERN_LEN};

/// Largest MaxRead/Write/TransactSize servers offer (Windows Server 2016 and later, Samba's
/// default: 8 MiB); the bound on a message before its connection's NEGOTIATE was seen.
pub const UNNEGOTIATED_MAX_SIZE: u32 = 8 << 20;
/// A negotiated size below this is not taken as a bound (a server may offer little and
/// still send a larger IOCTL or QUERY_DIRECTORY response within MaxTransactSize).
const MIN_BELIEVED_SIZE: u32 = 1 << 20;
/// Room beyond the size for headers, the other elements of a compound, a transform header.
pub const MESSAGE_SLACK: u32 = 1 << 20;
use crate::accounting::cat;
use crate::smb2::handle::ChainCtx;
use crate::smb2::netbios;
use crate::smb2::records::{self as rec, command, protocol_id, HeaderRepr, HEADER_LEN};
use crate::smb2::{Anomaly, Parts};
use crate::frame::FrameCtx;

impl Smb2Stream {
    pub(super) fn on_netbios_header(&mut self, p: &mut Parts) {
        if self.unconfirmed.is_some() {
            self.held_message_ended(p);
            self.refute_if_wrong_direction(p);
        }
        match netbios::Repr::parse(&self.small[..4]) {
            Err(_) => self.lose_framing(Anomaly::NetbiosBadType, p),
            Ok(r) if !r.control_length_fits() => self.lose_framing(Anomaly::NetbiosBadLength, p),
            Ok(r) if !r.is_session_message() => {
                // Session request/response, keepalive: transport metadata (and a header
                // where the held message said its successor starts).
                self.confirm_held(p);
                p.accounting.add(cat::SMB_METADATA, 4);
                self.small_len = 0;
                self.msg_left = r.length;
                self.state = State::Skip(cat::SMB_METADATA);
                if self.msg_left == 0 {
                    self.end_of_message();
                }
            }
            Ok(r) if r.length < 4 => self.lose_framing(Anomaly::NetbiosBadLength, p),
            // A length is believed only when it fits what the connection negotiated (or, before
            // a NEGOTIATE was seen, what any server offers): one forged header must not swallow
            // the messages that follow it.
            Ok(r) if r.length > self.max_message_len(p) => self.lose_framing(Anomaly::NetbiosLengthImplausible, p),
            Ok(r) => {
                self.msg_left = r.length;
                self.state = State::ProtocolId;
            }
        }
    }

    /// The longest NetBIOS length believed on this connection: the negotiated maximum
    /// (MaxTransactSize, MaxReadSize, MaxWriteSize) or, with no NEGOTIATE seen,
    /// `UNNEGOTIATED_MAX_SIZE`, plus `MESSAGE_SLACK` for headers, compounding and transforms.
    pub(super) fn max_message_len(&self, p: &Parts) -> u32 {
        let size = p.smb.conn(self.conn).map_or(UNNEGOTIATED_MAX_SIZE, |c| c.max_size.max(MIN_BELIEVED_SIZE));
        size.saturating_add(MESSAGE_SLACK).min(netbios::MAX_LENGTH)
    }

    pub(super) fn on_protocol_id(&mut self, p: &mut Parts) {
        let hl = self.hdr_len();
        let mut id = [0u8; 4];
        id.copy_from_slice(&self.small[hl..hl + 4]);
        if matches!(id, protocol_id::SMB2 | protocol_id::TRANSFORM | protocol_id::COMPRESSION_TRANSFORM) {
            self.storage = true;
        }
        if matches!(id, protocol_id::SMB2 | protocol_id::TRANSFORM | protocol_id::COMPRESSION_TRANSFORM | protocol_id::SMB1) {
            self.confirm_held(p);
        }
        match id {
            protocol_id::SMB2 => {
                self.hold_if_unconfirmed(p);
                p.accounting.add(cat::SMB_METADATA, (hl + 4) as u64);
                self.small_len = 0;
                self.chain = ChainCtx::default();
                self.start_element(&id);
            }
            protocol_id::TRANSFORM => {
                p.accounting.add(cat::SMB_METADATA, hl as u64);
                p.smb.stats.encrypted_messages += 1;
                self.small_len = 0;
                if self.can_decrypt && p.smb.crypt.active() {
                    // Buffer the TRANSFORM header to look the session's keys up.
                    self.start_crypt(&id, p);
                    return;
                }
                p.accounting.add(cat::SMB_ENCRYPTED, 4);
                p.smb.stats.encrypted_without_key += 1;
                self.state = State::Skip(cat::SMB_ENCRYPTED);
            }
            protocol_id::COMPRESSION_TRANSFORM => {
                // Its sends come from the message it decompresses to: held as a plain one's.
                if self.can_decompress {
                    self.hold_if_unconfirmed(p);
                }
                p.accounting.add(cat::SMB_METADATA, hl as u64);
                p.smb.stats.compressed_messages += 1;
                self.small_len = 0;
                if self.can_decompress {
                    self.start_comp(&id, p);
                    return;
                }
                // Compressed inside a decompressed message: not decompressed again.
                p.smb.stats.decompress_failed += 1;
                p.accounting.add(cat::SMB_COMPRESSED, 4);
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

    pub(super) fn on_compressed_prefix(&mut self, p: &mut Parts) {
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

    pub(super) fn end_of_message(&mut self) {
        self.state = if self.framed { State::NbHeader } else { State::Idle };
        self.small_len = 0;
        self.hdr = None;
        self.chain_next = false;
        self.buf.clear();
        // An idle stream keeps no large buffer (a flow is counted at `FLOW_STATE_ESTIMATE`).
        if self.buf.capacity() > 16 * 1024 {
            self.buf = Vec::new();
        }
    }

    /// The bytes held in `small` were not a valid NetBIOS/SMB2 start: drop the first byte
    /// (unparsed) and rescan the others.
    pub(super) fn lose_framing(&mut self, anomaly: Anomaly, p: &mut Parts) {
        // Bytes already counted as the held message were not one.
        self.refute_held(p);
        self.confirmed = false;
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

    pub(super) fn resync_scan(&mut self, input: &[u8], ctx: &FrameCtx, p: &mut Parts) -> usize {
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
}
