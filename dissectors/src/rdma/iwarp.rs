//! iWARP on TCP: one direction of an MPA connection (RFC 5044) as a TCP stream consumer.
//!
//! The stream starts with the MPA Request (initiator) or Reply (responder) frame; FPDUs follow.
//! Markers (when the peer's frame asked for them) are removed by stream position; the CRC is
//! checked when negotiated (C in the Request or Reply), or, when neither frame was seen, when
//! non-zero. Some senders place markers every 512 octets of the stream *without* the FPDUs'
//! CRC fields when no CRC was negotiated (they still send the 4 zero octets) and write FPDUPTR
//! least significant byte first: at the first marker that tells the two apart, the bytes at
//! each position are checked (reserved 0, FPDUPTR = octets back to the FPDU start, in either
//! byte order) and this direction follows the one that holds a marker
//! (`iwarp.markers_without_crc_field` when it is the second); each FPDU's DDP segment is decoded (`ddp`) and:
//! untagged Sends (QN 0) are reassembled into messages for SMB Direct, RDMA Read Requests
//! (QN 1) are remembered so Read Responses (tagged to the Sink STag) can be mapped back to the
//! Source STag/TO (= the SMB2 buffer descriptor's Token/Offset), RDMA Writes are tagged with the
//! descriptor's Token/Offset directly. After a gap, framing is found again from the next marker
//! or, without markers, by scanning for a plausible FPDU whose CRC (when present) verifies.
//! A direction seen without its MPA frame (a capture started mid-stream) does not know whether
//! markers are in use, nor where. It is read at once as having none (so that its Read Requests
//! are known before the other direction's Read Responses), an FPDU whose CRC then fails being
//! taken for lost framing, not decoded; meanwhile a copy of its first 32 KiB is searched for a
//! phase at which FPDUs, walked from the one a marker points back to, meet a marker every 512
//! octets whose FPDUPTR points back to its own FPDU's start, and verify their CRCs
//! (`find_marker_phase`). Once one is found the direction is framed with markers from its next
//! marker on; after 32 KiB without one it has none.
//!
//! Accounting: Request/Reply frames → `rdma_cm`; markers, length, pad, CRC and DDP/RDMAP
//! headers → `rdma_headers`; bytes that could not be framed → `rdma_unparsed`; Send payloads of
//! SMB Direct → `smbdirect`; of another upper layer → `rdma_other_ulp`; tagged data → linker.

use super::ddp::{self, Buffer, Segment};
use super::mpa;
use crate::accounting::cat;
use crate::frame::FrameCtx;
use crate::context::PayloadSink;
use crate::smb2::SmbState;
use crate::smbdirect::{looks_like_smbdirect, SmbdConn, MAX_FRAGMENTED_SIZE};
use crate::tcp::StreamConsumer;
use std::net::IpAddr;
use super::Anomaly;

/// The run state an iWARP stream is lent (the pipeline's, or a test harness's payload sink `D`).
type Shared<D> = crate::context::Shared<SmbState, D, super::RdmaState>;

/// Bytes scanned for a frame start after a gap before older ones are given up.
const SCAN_LIMIT: usize = 128 * 1024;
/// Read Requests remembered per connection.
const MAX_READS: usize = 128;
/// Bytes of a direction seen mid-stream searched for markers before it is taken to have none.
const MARKER_SEARCH: usize = 32 * 1024;
/// Markers a phase's walk must meet, each FPDUPTR right, before the phase is believed: the
/// first is where the walk starts (its FPDUPTR right by construction), so the others are the
/// evidence (a wrong phase meets a right FPDUPTR once in 2^16), about 1.5 KiB of the direction.
const MARKERS_MET: usize = 3;
/// Phases walked per search for markers, and octets of probe between searches.
const PHASE_WALKS: usize = 32;
const PROBE_STEP: usize = 2048;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the first bytes: an MPA frame, or FPDUs of a connection already running.
    Start,
    /// Collecting the Request/Reply frame (`buf`).
    Frame,
    Fpdu,
    Resync,
}

pub struct IwarpStream {
    conn: u64,
    side: usize,
    ends: [(IpAddr, u16); 2],
    /// SMB Direct on this connection: Some(true) by port, decided by the first Send otherwise.
    smbd: Option<bool>,
    state: State,
    /// Stream position relative to the marker base (first octet after the MPA frame).
    pos: u64,
    markers: Option<bool>,
    crc: bool,
    /// The CRC flags were seen in a Request or Reply (else a non-zero CRC field is checked).
    crc_negotiated: bool,
    /// Marker position counter: `pos` without the CRC fields of the FPDUs so far.
    mpos: u64,
    /// Markers are placed by `mpos` (Some(true)) or by `pos` as RFC 5044 says (Some(false));
    /// None until a marker tells them apart.
    markers_skip_crc: Option<bool>,
    buf: Vec<u8>,
    /// Current FPDU: bytes as on the wire (markers included) and without markers.
    raw: Vec<u8>,
    logical: Vec<u8>,
    crc_raw_len: usize,
    /// Send message being assembled from DDP segments (MSN, bytes).
    send: Option<(u32, Vec<u8>)>,
    /// Resync: stream position of `buf[0]`.
    scan_pos: u64,
    /// Bytes of this direction's stream known to be missing before framing was found.
    closed: bool,
    /// An MPA Request/Reply was accepted: this direction carries iWARP.
    storage: bool,
    /// Seen mid-stream, read as without markers while `probe` (a copy of its first octets, up
    /// to `MARKER_SEARCH`, from stream position `probe_pos`) is searched for them.
    probing: bool,
    probe: Vec<u8>,
    probe_pos: u64,
}

impl IwarpStream {
    /// `side` 0 is the TCP initiator. `smbd`: the connection is on an SMB Direct port.
    pub fn new(conn: u64, side: usize, ends: [(IpAddr, u16); 2], smbd: bool) -> Self {
        IwarpStream {
            conn,
            side,
            ends,
            smbd: smbd.then_some(true),
            state: State::Start,
            pos: 0,
            markers: None,
            crc: false,
            crc_negotiated: false,
            mpos: 0,
            markers_skip_crc: None,
            buf: Vec::new(),
            raw: Vec::new(),
            logical: Vec::new(),
            crc_raw_len: 0,
            send: None,
            scan_pos: 0,
            closed: false,
            storage: false,
            probing: false,
            probe: Vec::new(),
            probe_pos: 0,
        }
    }

    fn feed<D: PayloadSink>(&mut self, mut input: &[u8], ctx: &FrameCtx, sh: &mut Shared<D>) {
        while !input.is_empty() {
            let n = match self.state {
                State::Start => {
                    if mpa::Frame::parse(&input[..input.len().min(mpa::KEY_LEN)]).is_some() {
                        self.state = State::Frame;
                    } else {
                        // Mid-stream: read as without markers while they are looked for (`probe`).
                        sh.anomalies.raise(Anomaly::IwarpNoMpaFrame);
                        self.markers = Some(false);
                        self.probing = true;
                        self.probe.extend_from_slice(&input[..input.len().min(MARKER_SEARCH)]);
                        self.probe_pos = 0;
                        self.enter_resync(0);
                    }
                    0
                }
                State::Frame => self.frame_bytes(input, sh),
                State::Fpdu => self.fpdu_bytes(input, ctx, sh),
                State::Resync => self.resync_bytes(input, ctx, sh),
            };
            input = &input[n..];
        }
    }

    fn frame_bytes<D: PayloadSink>(&mut self, input: &[u8], sh: &mut Shared<D>) -> usize {
        let want = match mpa::Frame::parse(&self.buf) {
            Some(Ok(f)) => f.len().min(mpa::FRAME_HEADER_LEN + mpa::MAX_PRIVATE_DATA),
            _ => mpa::FRAME_HEADER_LEN,
        };
        let n = (want - self.buf.len()).min(input.len());
        self.buf.extend_from_slice(&input[..n]);
        match mpa::Frame::parse(&self.buf) {
            None => {
                // Not MPA after all: give up framing this direction.
                sh.anomalies.raise(Anomaly::IwarpBadMpaFrame);
                sh.accounting.add(cat::RDMA_UNPARSED, self.buf.len() as u64);
                self.buf.clear();
                self.markers = Some(false);
                self.enter_resync(0);
            }
            Some(Ok(f)) if self.buf.len() >= f.len().min(mpa::FRAME_HEADER_LEN + mpa::MAX_PRIVATE_DATA) => {
                if f.private_data_len as usize > mpa::MAX_PRIVATE_DATA {
                    sh.anomalies.raise(Anomaly::IwarpMpaPrivateDataTooLong);
                }
                self.storage = true;
                if f.reply {
                    sh.rdma.stats.iwarp.mpa_replies += 1;
                    if f.rejected {
                        sh.anomalies.raise(Anomaly::IwarpMpaRejected);
                    }
                } else {
                    sh.rdma.stats.iwarp.mpa_requests += 1;
                }
                sh.accounting.add(cat::RDMA_CM, self.buf.len() as u64);
                sh.rdma.mpa.entry(self.conn).or_default()[self.side] = Some(f);
                self.buf.clear();
                self.pos = 0;
                self.mpos = 0;
                self.state = State::Fpdu;
            }
            _ => {}
        }
        n
    }

    /// Markers and CRC of this direction, decided at its first FPDU byte (the peer's frame
    /// was seen by then).
    fn flags<D: PayloadSink>(&mut self, sh: &Shared<D>) -> bool {
        if let Some(m) = self.markers {
            return m;
        }
        let frames = sh.rdma.mpa.get(&self.conn).copied().unwrap_or_default();
        let peer = frames[1 - self.side];
        let mine = frames[self.side];
        let m = peer.is_some_and(|f| f.markers);
        self.crc = peer.is_some_and(|f| f.crc) || mine.is_some_and(|f| f.crc);
        self.crc_negotiated = peer.is_some() || mine.is_some();
        self.markers = Some(m);
        m
    }

    fn fpdu_bytes<D: PayloadSink>(&mut self, input: &[u8], ctx: &FrameCtx, sh: &mut Shared<D>) -> usize {
        let markers = self.flags(sh);
        if markers && self.markers_skip_crc.is_none() {
            self.decide_marker_counting(input, sh);
        }
        let mp = if self.markers_skip_crc == Some(true) { self.mpos } else { self.pos };
        let m = mp % mpa::MARKER_INTERVAL;
        if markers && m < mpa::MARKER_LEN as u64 {
            let n = ((mpa::MARKER_LEN as u64 - m) as usize).min(input.len());
            if m == 0 {
                sh.rdma.stats.iwarp.markers += 1;
            }
            self.raw.extend_from_slice(&input[..n]);
            sh.accounting.add(cat::RDMA_HEADERS, n as u64);
            self.pos += n as u64;
            self.mpos += n as u64;
            return n;
        }
        let need = if self.logical.len() >= 2 {
            mpa::fpdu_len(usize::from(u16::from_be_bytes([self.logical[0], self.logical[1]])))
        } else {
            2
        };
        let mut n = (need - self.logical.len()).min(input.len());
        if need > 2 && self.logical.len() < need - mpa::CRC_LEN {
            // Stop where the CRC field starts: the CRC covers the raw bytes before it.
            n = n.min(need - mpa::CRC_LEN - self.logical.len());
        }
        if markers {
            n = n.min((mpa::MARKER_INTERVAL - m) as usize);
        }
        if need > 2 && self.logical.len() + mpa::CRC_LEN == need {
            // The first CRC octet: the CRC covers every octet before it, a marker that fell
            // just before the CRC field included (RFC 5044 §6.1; tshark agrees).
            self.crc_raw_len = self.raw.len();
        }
        let crc_bytes = need > 2 && self.logical.len() + mpa::CRC_LEN >= need;
        self.raw.extend_from_slice(&input[..n]);
        self.logical.extend_from_slice(&input[..n]);
        self.pos += n as u64;
        if !crc_bytes {
            self.mpos += n as u64;
        }
        if self.logical.len() == need && need > 2 {
            self.on_fpdu(ctx, sh);
        }
        n
    }

    /// At a marker position of one counting that is not one of the other (the stream inside an
    /// FPDU, after at least one CRC field), with both positions in `input`: the counting whose
    /// position holds a marker pointing back to this FPDU's start wins. Undecided otherwise
    /// (RFC 5044's counting applies meanwhile).
    fn decide_marker_counting<D: PayloadSink>(&mut self, input: &[u8], sh: &mut Shared<D>) {
        let delta = (self.pos - self.mpos) % mpa::MARKER_INTERVAL;
        if self.logical.is_empty() || delta == 0 {
            return;
        }
        let back = self.raw.len() as u64;
        let is_marker = |at: u64| -> Option<bool> {
            let at = at as usize;
            let b = input.get(at..at + mpa::MARKER_LEN)?;
            let ptr = back + at as u64;
            Some(b[..2] == [0, 0] && (u64::from(u16::from_be_bytes([b[2], b[3]])) == ptr || u64::from(u16::from_le_bytes([b[2], b[3]])) == ptr))
        };
        // The RFC position is `pos`'s next multiple of 512; the other is `delta` octets later.
        let to_rfc = (mpa::MARKER_INTERVAL - self.pos % mpa::MARKER_INTERVAL) % mpa::MARKER_INTERVAL;
        if to_rfc != 0 {
            return;
        }
        match (is_marker(0), is_marker(delta)) {
            (Some(true), _) => self.markers_skip_crc = Some(false),
            (Some(false), Some(true)) => {
                self.markers_skip_crc = Some(true);
                sh.anomalies.raise(Anomaly::IwarpMarkersWithoutCrcField);
            }
            _ => {}
        }
    }

    fn on_fpdu<D: PayloadSink>(&mut self, ctx: &FrameCtx, sh: &mut Shared<D>) {
        let logical = std::mem::take(&mut self.logical);
        let raw = std::mem::take(&mut self.raw);
        let l = usize::from(u16::from_be_bytes([logical[0], logical[1]]));
        sh.rdma.stats.iwarp.mpa_fpdus += 1;
        let crc_field = &logical[logical.len() - mpa::CRC_LEN..];
        if self.crc || (!self.crc_negotiated && crc_field != [0; 4]) {
            let want = mpa::crc32c(&raw[..self.crc_raw_len.min(raw.len())]).to_le_bytes();
            if want == crc_field {
                // Neither MPA frame seen: a CRC that verifies says this direction has them, so a
                // zero CRC field from now on is a wrong one, not "no CRC" (mid-stream, an FPDU
                // read without its markers otherwise passes when the octets read as its CRC are 0).
                self.crc = true;
            }
            if want != crc_field && self.probing {
                // Read without markers while they are looked for: an FPDU that holds one fails
                // its CRC. Not decoded, as lost (a message it belonged to is incomplete):
                // framing is looked for again from here.
                sh.rdma.stats.iwarp.mpa_fpdus -= 1;
                self.raw = raw;
                self.logical = logical;
                self.drop_partial(sh);
                self.enter_resync(self.pos);
                return;
            }
            if want != crc_field {
                sh.rdma.stats.iwarp.crc_errors += 1;
                sh.anomalies.raise(Anomaly::IwarpCrcError);
            }
        }
        let ulpdu = &logical[2..2 + l];
        let framing = (logical.len() - l) as u64;
        sh.accounting.add(cat::RDMA_HEADERS, framing);
        self.on_segment(ulpdu, ctx, sh);
        self.raw = raw;
        self.raw.clear();
        self.logical = logical;
        self.logical.clear();
    }

    fn on_segment<D: PayloadSink>(&mut self, ulpdu: &[u8], ctx: &FrameCtx, sh: &mut Shared<D>) {
        let seg = match Segment::parse(ulpdu) {
            Ok(s) => s,
            Err(e) => {
                sh.anomalies.raise(e);
                sh.accounting.add(cat::RDMA_UNPARSED, ulpdu.len() as u64);
                return;
            }
        };
        super::count_opcode(&mut sh.rdma.stats.iwarp.opcodes, seg.opcode, true);
        sh.accounting.add(cat::RDMA_HEADERS, seg.header_len as u64);
        let payload = seg.payload;
        let (conn_id, side, ends) = (self.conn, self.side, self.ends);
        match (seg.opcode, seg.buffer) {
            (op, Buffer::Untagged { qn: 0, msn, mo, .. }) if ddp::opcode::is_send(op) => {
                let msg: Option<Vec<u8>> = match self.send.take() {
                    None if mo == 0 && seg.last => None,
                    None if mo == 0 => {
                        self.send = Some((msn, payload.to_vec()));
                        return;
                    }
                    Some((m, mut buf)) if m == msn && mo as usize == buf.len() && buf.len() + payload.len() <= MAX_FRAGMENTED_SIZE => {
                        buf.extend_from_slice(payload);
                        if !seg.last {
                            self.send = Some((m, buf));
                            return;
                        }
                        Some(buf)
                    }
                    other => {
                        sh.anomalies.raise(Anomaly::IwarpSendSegmentLost);
                        let held = other.map(|(_, b)| b.len()).unwrap_or(0);
                        sh.accounting.add(cat::SMB_UNPARSED, (held + payload.len()) as u64);
                        let (mut p, rdma) = sh.split();
                        if let Some(c) = rdma.conns.get_mut(&conn_id) {
                            c.lost(side, &mut p);
                        }
                        return;
                    }
                };
                let msg: &[u8] = msg.as_deref().unwrap_or(payload);
                if self.smbd.is_none() {
                    self.smbd = Some(looks_like_smbdirect(msg));
                }
                if self.smbd != Some(true) {
                    sh.accounting.add(cat::RDMA_OTHER_ULP, msg.len() as u64);
                    return;
                }
                let (mut p, rdma) = sh.split();
                let c = rdma.conns.entry(conn_id).or_insert_with(|| {
                    rdma.stats.smbdirect_connections += 1;
                    SmbdConn::new(conn_id, ends, None).over_tcp()
                });
                c.on_send(side, msg, ctx, &mut p, &mut rdma.stats);
            }
            (ddp::opcode::READ_REQUEST, Buffer::Untagged { qn: 1, .. }) => {
                sh.accounting.add(cat::RDMA_HEADERS, payload.len() as u64);
                match ddp::ReadRequest::parse(payload) {
                    Ok(r) => {
                        let list = sh.rdma.iwarp_reads.entry(conn_id).or_default();
                        if list.len() >= MAX_READS {
                            list.pop_front();
                        }
                        list.push_back(r);
                    }
                    Err(e) => sh.anomalies.raise(e),
                }
            }
            (ddp::opcode::WRITE, Buffer::Tagged { stag, to }) => self.tagged(stag, to, payload, ctx, sh),
            (ddp::opcode::READ_RESPONSE, Buffer::Tagged { stag, to }) => {
                let mapped = sh.rdma.iwarp_reads.get(&conn_id).and_then(|l| {
                    l.iter()
                        .rev()
                        .find(|r| r.sink_stag == stag && to >= r.sink_to && to - r.sink_to < u64::from(r.size))
                        .map(|r| (r.src_stag, r.src_to + (to - r.sink_to)))
                });
                match mapped {
                    Some((token, va)) => self.tagged(token, va, payload, ctx, sh),
                    None if self.smbd == Some(true) => {
                        sh.anomalies.raise(Anomaly::IwarpReadResponseWithoutRequest);
                        sh.rdma.stats.unlinked_bytes += payload.len() as u64;
                        sh.accounting.add(cat::RDMA_UNLINKED, payload.len() as u64);
                    }
                    None => sh.accounting.add(cat::RDMA_OTHER_ULP, payload.len() as u64),
                }
            }
            (ddp::opcode::TERMINATE, _) => {
                // RDMAP Terminate (RFC 5040 §5.2.1.6): the peer tore the stream down with an error.
                sh.rdma.stats.iwarp.terminates += 1;
                sh.anomalies.raise(Anomaly::IwarpTerminate);
                sh.accounting.add(cat::RDMA_HEADERS, payload.len() as u64);
            }
            _ => sh.accounting.add(cat::RDMA_HEADERS, payload.len() as u64),
        }
    }

    fn tagged<D: PayloadSink>(&mut self, token: u32, va: u64, payload: &[u8], ctx: &FrameCtx, sh: &mut Shared<D>) {
        if self.smbd != Some(true) {
            sh.accounting.add(cat::RDMA_OTHER_ULP, payload.len() as u64);
            return;
        }
        let (conn_id, side, ends) = (self.conn, self.side, self.ends);
        let (mut p, rdma) = sh.split();
        let c = rdma.conns.entry(conn_id).or_insert_with(|| {
            rdma.stats.smbdirect_connections += 1;
            SmbdConn::new(conn_id, ends, None).over_tcp()
        });
        c.rdma_data(side, token, va, payload, ctx, &mut p, &mut rdma.stats);
    }

    fn enter_resync(&mut self, pos: u64) {
        self.state = State::Resync;
        self.scan_pos = pos;
        self.buf.clear();
        self.raw.clear();
        self.logical.clear();
    }

    /// Is an FPDU at `b[0..]`? None = need more bytes.
    fn candidate(b: &[u8]) -> Option<bool> {
        if b.len() < 2 + ddp::TAGGED_HEADER_LEN {
            return None;
        }
        let l = usize::from(u16::from_be_bytes([b[0], b[1]]));
        if l < ddp::TAGGED_HEADER_LEN {
            return Some(false);
        }
        let head = &b[2..(2 + l).min(b.len())];
        match Segment::parse(&head[..head.len().min(ddp::UNTAGGED_HEADER_LEN)]) {
            Ok(_) | Err(ddp::Error::Truncated) => {}
            Err(_) => return Some(false),
        }
        let total = mpa::fpdu_len(l);
        if b.len() < total {
            return None;
        }
        if Segment::parse(&b[2..2 + l]).is_err() {
            return Some(false);
        }
        let crc = &b[total - mpa::CRC_LEN..total];
        Some(crc == [0; 4] || mpa::crc32c(&b[..total - mpa::CRC_LEN]).to_le_bytes() == crc)
    }

    /// Mid-stream, markers not known: a phase `φ` (0..512) of `buf` at which the FPDUs, walked
    /// from the one a marker's FPDUPTR points back to, meet markers at the octets `φ + 512k`
    /// that all have reserved 0 and FPDUPTR = octets back to the start of their FPDU,
    /// `MARKERS_MET` of them, and whose DDP headers parse and CRCs (when not zero) verify
    /// (`walk_with_markers`). Returns the phase and where the walk started. The CRC alone does
    /// not tell a phase from a wrong one (it covers the markers as sent, wherever they are);
    /// the FPDUPTRs do: a wrong phase meets the right values once in 2^16 per marker.
    ///
    /// At most `PHASE_WALKS` phases are walked per search (hostile input could make every
    /// phase look like one, each walk a CRC over the probe).
    fn find_marker_phase(buf: &[u8]) -> Option<(usize, usize)> {
        let interval = mpa::MARKER_INTERVAL as usize;
        let reserved_zero = |at: usize| buf.get(at..at + mpa::MARKER_LEN).is_some_and(|b| b[..2] == [0, 0]);
        let mut walks = 0;
        (0..interval).find_map(|phase| {
            // Every position of the phase in `buf` holds a marker's reserved 0: the right phase's
            // do, a wrong one's seldom (a few at most in a stream of headers).
            let positions = (phase..buf.len().saturating_sub(mpa::MARKER_LEN - 1)).step_by(interval);
            if walks >= PHASE_WALKS || positions.len() < MARKERS_MET || !positions.clone().all(reserved_zero) {
                return None;
            }
            // The first marker that points back to an FPDU start inside `buf`.
            let (m, ptr) = (phase..buf.len()).step_by(interval).take_while(|&m| reserved_zero(m)).find_map(|m| {
                let ptr = usize::from(u16::from_be_bytes([buf[m + 2], buf[m + 3]]));
                (ptr > 0 && ptr <= m).then_some((m, ptr))
            })?;
            walks += 1;
            let (fpdus, markers) = Self::walk_with_markers(buf, m - ptr, phase)?;
            (fpdus > 0 && markers >= MARKERS_MET).then_some((phase, m - ptr))
        })
    }

    /// Walks the FPDUs from `buf[start]` with markers at the octets `phase + 512k`: how many
    /// FPDUs it completed and how many markers it met before `buf` ended; None when a marker
    /// does not hold reserved 0 and FPDUPTR = octets back to its FPDU's start (0 for one due
    /// where its FPDU starts, `mpa::emit_fpdu_into`), or an FPDU's DDP header does not parse
    /// or its non-zero CRC does not verify (RFC 5044 §6.1: the CRC covers the octets before
    /// the CRC field as sent, a marker just before it included; zero: no CRC in use).
    fn walk_with_markers(buf: &[u8], start: usize, phase: usize) -> Option<(usize, usize)> {
        let interval = mpa::MARKER_INTERVAL as usize;
        let (mut f, mut fpdus, mut markers) = (start, 0, 0);
        let mut logical = Vec::new();
        loop {
            let (mut j, mut need, mut crc_at) = (f, 2usize, None);
            logical.clear();
            while logical.len() < need {
                if j >= buf.len() {
                    return Some((fpdus, markers));
                }
                if j >= phase && (j - phase).is_multiple_of(interval) {
                    let Some(m) = buf.get(j..j + mpa::MARKER_LEN) else { return Some((fpdus, markers)) };
                    if m[..2] != [0, 0] || usize::from(u16::from_be_bytes([m[2], m[3]])) != j - f {
                        return None;
                    }
                    markers += 1;
                    j += mpa::MARKER_LEN;
                    continue;
                }
                if need > 2 && logical.len() == need - mpa::CRC_LEN {
                    crc_at = Some(j);
                }
                logical.push(buf[j]);
                j += 1;
                if logical.len() == 2 {
                    let l = usize::from(u16::from_be_bytes([logical[0], logical[1]]));
                    if l < ddp::TAGGED_HEADER_LEN {
                        return None;
                    }
                    need = mpa::fpdu_len(l);
                }
            }
            let l = usize::from(u16::from_be_bytes([logical[0], logical[1]]));
            let crc = &logical[need - mpa::CRC_LEN..];
            // A zero CRC field: no CRC in use (the FPDUPTRs are then the evidence).
            if Segment::parse(&logical[2..2 + l]).is_err() || (crc != [0; 4] && mpa::crc32c(&buf[f..crc_at?]).to_le_bytes() != crc) {
                return None;
            }
            fpdus += 1;
            f = j;
        }
    }

    fn resync_bytes<D: PayloadSink>(&mut self, input: &[u8], ctx: &FrameCtx, sh: &mut Shared<D>) -> usize {
        let take = input.len().min(SCAN_LIMIT);
        self.buf.extend_from_slice(&input[..take]);
        let markers = self.markers == Some(true);
        let mut i = 0;
        let mut found = None;
        while i < self.buf.len() {
            let pos = self.scan_pos + i as u64;
            if markers {
                // The next marker says where its FPDU starts.
                let to_marker = ((mpa::MARKER_INTERVAL - pos % mpa::MARKER_INTERVAL) % mpa::MARKER_INTERVAL) as usize;
                let at = i + to_marker;
                if at + mpa::MARKER_LEN > self.buf.len() {
                    break;
                }
                let ptr = u64::from(u16::from_be_bytes([self.buf[at + 2], self.buf[at + 3]]));
                let marker_pos = self.scan_pos + at as u64;
                if let Some(start) = marker_pos.checked_sub(ptr).filter(|s| *s >= self.scan_pos) {
                    found = Some((start - self.scan_pos) as usize);
                    break;
                }
                i = at + mpa::MARKER_LEN;
                continue;
            }
            match Self::candidate(&self.buf[i..]) {
                Some(true) => {
                    found = Some(i);
                    break;
                }
                Some(false) => i += 1,
                None => break,
            }
        }
        match found {
            Some(start) => self.found_fpdu(start, ctx, sh),
            None => {
                // Keep what may still hold a frame start; the rest is unparsed.
                let drop = if self.buf.len() > SCAN_LIMIT { self.buf.len() - SCAN_LIMIT } else { i.min(self.buf.len()) };
                sh.accounting.add(cat::RDMA_UNPARSED, drop as u64);
                self.buf.drain(..drop);
                self.scan_pos += drop as u64;
            }
        }
        take
    }

    /// Mid-stream, while markers are looked for: `bytes` (new octets of the stream) join the
    /// probe; a phase found there frames the direction with markers from its next marker on
    /// (what it is in the middle of is dropped); `MARKER_SEARCH` octets without one end the
    /// search (no markers).
    fn probe_bytes<D: PayloadSink>(&mut self, bytes: &[u8], sh: &mut Shared<D>) {
        let (before, room) = (self.probe.len(), MARKER_SEARCH.saturating_sub(self.probe.len()));
        self.probe.extend_from_slice(&bytes[..bytes.len().min(room)]);
        let full = self.probe.len() >= MARKER_SEARCH;
        if self.probe.len() / PROBE_STEP == before / PROBE_STEP && !full {
            return;
        }
        match Self::find_marker_phase(&self.probe) {
            Some((phase, _)) => {
                self.probing = false;
                // Number the stream so its markers fall where positions are multiples of 512.
                let interval = mpa::MARKER_INTERVAL;
                let shift = (interval - (self.probe_pos + phase as u64) % interval) % interval;
                self.markers = Some(true);
                self.markers_skip_crc = None;
                if self.state == State::Fpdu && self.logical.is_empty() && self.raw.is_empty() {
                    // Between two FPDUs: the next one is framed with markers.
                    self.pos += shift;
                    self.mpos = self.pos;
                } else {
                    let at = match self.state {
                        State::Resync => self.scan_pos + self.buf.len() as u64,
                        _ => self.pos,
                    };
                    self.drop_partial(sh);
                    self.enter_resync(at + shift);
                    self.mpos = at + shift;
                }
            }
            None if full => self.probing = false,
            None => return,
        }
        self.probe = Vec::new();
    }

    /// Framing found at `buf[start]`: what precedes it is unparsed, the rest is fed as FPDUs.
    fn found_fpdu<D: PayloadSink>(&mut self, start: usize, ctx: &FrameCtx, sh: &mut Shared<D>) {
        sh.accounting.add(cat::RDMA_UNPARSED, start as u64);
        sh.rdma.stats.iwarp.resyncs += 1;
        let rest = self.buf.split_off(start);
        self.buf.clear();
        self.pos = self.scan_pos + start as u64;
        self.state = State::Fpdu;
        self.feed(&rest, ctx, sh);
    }

    fn drop_partial<D: PayloadSink>(&mut self, sh: &mut Shared<D>) {
        // Markers inside `raw` were accounted as they passed; logical bytes were not.
        sh.accounting.add(cat::RDMA_UNPARSED, (self.logical.len() + self.buf.len()) as u64);
        if let Some((_, b)) = self.send.take() {
            sh.accounting.add(cat::SMB_UNPARSED, b.len() as u64);
        }
        let (mut p, rdma) = sh.split();
        if let Some(c) = rdma.conns.get_mut(&self.conn) {
            c.lost(self.side, &mut p);
        }
        self.raw.clear();
        self.logical.clear();
        self.buf.clear();
    }
}

impl<D: PayloadSink> StreamConsumer<Shared<D>> for IwarpStream {
    fn data(&mut self, bytes: &[u8], ctx: &FrameCtx, sh: &mut Shared<D>) {
        if self.closed {
            // The direction has ended (its partial FPDU was dropped at the close): what comes
            // after is no continuation of it, so it is not framed, only accounted.
            sh.anomalies.raise(Anomaly::IwarpDataAfterClose);
            sh.accounting.add(cat::RDMA_UNPARSED, bytes.len() as u64);
            return;
        }
        if self.probing {
            self.probe_bytes(bytes, sh);
        }
        self.feed(bytes, ctx, sh);
    }

    fn gap(&mut self, missing: u64, _ctx: &FrameCtx, sh: &mut Shared<D>) {
        if missing == 0 {
            return;
        }
        sh.rdma.stats.gaps += 1;
        sh.anomalies.raise(Anomaly::IwarpGap);
        let pos = match self.state {
            State::Resync => self.scan_pos + self.buf.len() as u64,
            _ => self.pos,
        };
        self.drop_partial(sh);
        if self.markers.is_none() {
            self.markers = Some(false);
        }
        if self.probing {
            // The probe holds contiguous octets: it starts again after the gap.
            self.probe.clear();
            self.probe_pos = pos + missing;
        }
        self.enter_resync(pos + missing);
    }

    fn carries_storage(&self) -> bool {
        self.storage
    }

    fn close(&mut self, ctx: &FrameCtx, sh: &mut Shared<D>) {
        self.probe = Vec::new();
        if !self.logical.is_empty() || !self.buf.is_empty() {
            sh.anomalies.raise(Anomaly::IwarpStreamEndedMidFpdu);
        }
        self.drop_partial(sh);
        if self.closed {
            return;
        }
        self.closed = true;
        let both = {
            let n = sh.rdma.iwarp_closed.entry(self.conn).or_insert(0);
            *n += 1;
            *n >= 2
        };
        if both {
            sh.rdma.iwarp_closed.remove(&self.conn);
            sh.rdma.mpa.remove(&self.conn);
            sh.rdma.iwarp_reads.remove(&self.conn);
            let (mut p, rdma) = sh.split();
            if let Some(mut c) = rdma.conns.remove(&self.conn) {
                c.close(ctx, &mut p, &mut rdma.stats);
            }
        }
    }
}

#[cfg(test)]
mod tests;
