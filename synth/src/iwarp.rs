//! iWARP: RDMAP (RFC 5040) over DDP (RFC 5041) over MPA (RFC 5044) over TCP port 5445
//! (IANA "smbdirect", MS-SMBD §1.9).
//!
//! After the TCP handshake the client sends the MPA Request frame and the server the MPA
//! Reply (RFC 5044 §7.1: 16-byte key, flags M (markers) and C (CRC), revision 1, private
//! data). Then every DDP segment travels in one FPDU (ULPDU_Length, the segment, pad to a
//! 4-byte boundary, CRC32c or zero when CRC is off; the CRC goes least significant byte first,
//! as iSCSI sends the same CRC (RFC 3720 §12.1) and as Windows' FPDUs in the shared sample
//! show), one FPDU per TCP segment, sized so that
//! it fits the MSS. With markers, a 4-byte marker (16 reserved bits, FPDUPTR) sits at
//! every 512th octet of each direction's FPDU stream, counted from its first FPDU; FPDUPTR
//! is the distance back to the start of the FPDU it falls in (RFC 5044 §5).
//!
//! DDP: untagged segments (Send on queue 0, RDMA Read Request on queue 1, MSN from 1 per
//! queue, MO = offset in the message) and tagged segments (RDMA Write and Read Response:
//! STag and tagged offset). The RDMAP control byte (RV 01, opcode) is DDP's RsvdULP byte.

use super::data::SplitMix64;
use super::pcap::Tap;
use super::rdma::{RdmaLink, RdmaTruth};
use super::smbdirect::BufferDescriptor;
use super::tcp::{Impairments, TcpLink};
use super::{ConnId, Host, Side};
use std::io::{self, Write};

/// IANA "smbdirect": SMB Direct over iWARP (MS-SMBD §1.9).
pub const SMBDIRECT_IWARP_PORT: u16 = 5445;
pub const MPA_REQUEST_KEY: &[u8; 16] = b"MPA ID Req Frame";
pub const MPA_REPLY_KEY: &[u8; 16] = b"MPA ID Rep Frame";
const MPA_FLAG_MARKERS: u8 = 0x80;
const MPA_FLAG_CRC: u8 = 0x40;
const MPA_REVISION: u8 = 1;
const MARKER_INTERVAL: usize = 512;
/// Private data Windows Server 2012 sends in its MPA frames (8 bytes, as in the shared
/// sample smbdirect-iwarp-win2012-smb300.pcap; its meaning is not publicly documented).
const PRIVATE_REQUEST: [u8; 8] = [0, 0, 0, 0x10, 0, 0, 0, 0];
const PRIVATE_REPLY: [u8; 8] = [0, 0, 0, 0, 0, 0, 0, 0x10];

/// RDMAP opcodes (RFC 5040 §4.3).
pub mod opcode {
    pub const RDMA_WRITE: u8 = 0;
    pub const RDMA_READ_REQUEST: u8 = 1;
    pub const RDMA_READ_RESPONSE: u8 = 2;
    pub const SEND: u8 = 3;
    pub const SEND_WITH_INVALIDATE: u8 = 4;
    pub const SEND_WITH_SOLICITED_EVENT: u8 = 5;
    pub const SEND_WITH_SOLICITED_EVENT_AND_INVALIDATE: u8 = 6;
}
/// DDP queue numbers for RDMAP (RFC 5040 §5.1).
const QN_SEND: u32 = 0;
const QN_READ_REQUEST: u32 = 1;
/// RFC 5040 §5.1: Terminate messages go on DDP queue 2.
const QN_TERMINATE: u32 = 2;
/// RDMAP Terminate (RFC 5040 §5.2.1.6): opcode 7; its header is 4 bytes of
/// layer/type/code and flags, here "remote operation error, catastrophic", and no copies
/// of the offending headers.
const OPCODE_TERMINATE: u8 = 7;
/// DDP control (RFC 5041 §4.2): Tagged, Last, DDP version 1.
const DDP_TAGGED: u8 = 0x80;
const DDP_LAST: u8 = 0x40;
const DDP_VERSION: u8 = 0x01;
/// RDMAP control (RFC 5040 §4.2): RDMAP version 1 in the top two bits.
const RDMAP_VERSION: u8 = 0x40;
pub const UNTAGGED_HEADER_LEN: usize = 18;
pub const TAGGED_HEADER_LEN: usize = 14;
/// Read Request payload: sink STag, sink TO, size, source STag, source TO (RFC 5040 §4.4).
pub const READ_REQUEST_LEN: usize = 28;

/// The DDP/RDMAP header of one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DdpHeader {
    Untagged {
        opcode: u8,
        last: bool,
        invalidate_stag: u32,
        qn: u32,
        msn: u32,
        mo: u32,
    },
    Tagged {
        opcode: u8,
        last: bool,
        stag: u32,
        to: u64,
    },
}

impl DdpHeader {
    pub fn emit(&self, b: &mut Vec<u8>) {
        match *self {
            DdpHeader::Untagged {
                opcode,
                last,
                invalidate_stag,
                qn,
                msn,
                mo,
            } => {
                b.push(if last { DDP_LAST } else { 0 } | DDP_VERSION);
                b.push(RDMAP_VERSION | opcode);
                b.extend_from_slice(&invalidate_stag.to_be_bytes());
                b.extend_from_slice(&qn.to_be_bytes());
                b.extend_from_slice(&msn.to_be_bytes());
                b.extend_from_slice(&mo.to_be_bytes());
            }
            DdpHeader::Tagged {
                opcode,
                last,
                stag,
                to,
            } => {
                b.push(DDP_TAGGED | if last { DDP_LAST } else { 0 } | DDP_VERSION);
                b.push(RDMAP_VERSION | opcode);
                b.extend_from_slice(&stag.to_be_bytes());
                b.extend_from_slice(&to.to_be_bytes());
            }
        }
    }

    fn opcode(&self) -> u8 {
        match *self {
            DdpHeader::Untagged { opcode, .. } | DdpHeader::Tagged { opcode, .. } => opcode,
        }
    }
}

/// MPA Request or Reply frame (RFC 5044 §7.1).
pub fn mpa_frame(key: &[u8; 16], markers: bool, crc: bool, private: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + private.len());
    b.extend_from_slice(key);
    b.push(if markers { MPA_FLAG_MARKERS } else { 0 } | if crc { MPA_FLAG_CRC } else { 0 });
    b.push(MPA_REVISION);
    b.extend_from_slice(&(private.len() as u16).to_be_bytes());
    b.extend_from_slice(private);
    b
}

/// One FPDU holding `ulpdu`, placed at FPDU-stream position `pos` (for markers), appended
/// to `out`; returns the new stream position. The CRC covers everything before it,
/// markers included (RFC 5044 §4.1, §5).
pub fn fpdu(out: &mut Vec<u8>, pos: usize, ulpdu: &[&[u8]], markers: bool, crc: bool) -> usize {
    let len: usize = ulpdu.iter().map(|p| p.len()).sum();
    let pad = (4 - (2 + len) % 4) % 4;
    let start = out.len();
    let mut at = pos;
    let mut crc_at = [0usize; 4];
    {
        let mut put = |out: &mut Vec<u8>, bytes: &[u8]| {
            for &b in bytes {
                if markers && at.is_multiple_of(MARKER_INTERVAL) {
                    let ptr = (at - pos) as u16;
                    out.extend_from_slice(&[0, 0, (ptr >> 8) as u8, ptr as u8]);
                    at += 4;
                }
                out.push(b);
                at += 1;
            }
        };
        put(out, &(len as u16).to_be_bytes());
        for p in ulpdu {
            put(out, p);
        }
        put(out, &[0u8; 3][..pad]);
        for slot in crc_at.iter_mut() {
            put(out, &[0]);
            *slot = out.len() - 1;
        }
    }
    // A marker due right after the CRC ends this FPDU's TCP segment, so that the next
    // segment starts with an FPDU header (RFC 5044 §6 FPDU alignment); it points back
    // to this FPDU.
    if markers && at.is_multiple_of(MARKER_INTERVAL) {
        let ptr = (at - pos) as u16;
        out.extend_from_slice(&[0, 0, (ptr >> 8) as u8, ptr as u8]);
        at += 4;
    }
    if crc {
        let mut c = super::crc::Crc::crc32c();
        c.update(&out[start..crc_at[0]]);
        for (i, v) in crc_at.iter().zip(c.finish().to_le_bytes()) {
            out[*i] = v;
        }
    }
    at
}

/// Where an FPDU with a `ulpdu_len`-byte ULPDU placed at stream position `pos` ends,
/// markers included (the same walk as `fpdu`, without the bytes).
pub fn fpdu_end(pos: usize, ulpdu_len: usize, markers: bool) -> usize {
    let mut remaining = 2 + ulpdu_len + (4 - (2 + ulpdu_len) % 4) % 4 + 4;
    if !markers {
        return pos + remaining;
    }
    let mut at = pos;
    while remaining > 0 {
        if at.is_multiple_of(MARKER_INTERVAL) {
            at += 4;
        }
        let next = (at / MARKER_INTERVAL + 1) * MARKER_INTERVAL;
        let step = remaining.min(next - at);
        at += step;
        remaining -= step;
    }
    at
}

struct Connection {
    tcp: ConnId,
    /// FPDU-stream position per direction (markers).
    pos: [usize; 2],
    /// Next MSN per direction for queues 0 (Send) and 1 (Read Request) (RFC 5041 §5.1: from 1).
    msn: [[u32; 3]; 2],
}

pub struct IwarpLink {
    pub tcp: TcpLink,
    mss: usize,
    markers: bool,
    crc: bool,
    private_data: bool,
    /// Largest ULPDU (DDP segment) per FPDU.
    max_ulpdu: usize,
    rng: SplitMix64,
    conns: Vec<Connection>,
    next_sink: u64,
    buf: Vec<u8>,
    pub stats: RdmaTruth,
    /// The server ends every connection with an RDMAP Terminate before closing TCP.
    pub terminate: bool,
    /// Sends use the Solicited Event opcodes (5, and 6 in place of 4).
    pub solicited_event: bool,
}

impl IwarpLink {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mss: usize,
        imp: Impairments,
        markers: bool,
        crc: bool,
        private_data: bool,
        tcp_rng: SplitMix64,
        rng: SplitMix64,
        hosts: usize,
    ) -> Self {
        // FPDU = 2 + ULPDU + pad (≤ 3) + 4, plus up to 4 markers within an MSS.
        let overhead = 2
            + 4
            + if markers {
                4 * (mss / MARKER_INTERVAL + 2)
            } else {
                0
            };
        let max_ulpdu = (mss - overhead) & !3;
        IwarpLink {
            tcp: TcpLink::new(imp, tcp_rng, hosts),
            mss,
            markers,
            crc,
            private_data,
            max_ulpdu,
            rng,
            conns: Vec::new(),
            next_sink: 0,
            buf: Vec::new(),
            stats: RdmaTruth {
                transport: "iwarp".into(),
                mtu: max_ulpdu as u64,
                mpa_crc: Some(crc),
                mpa_markers: Some(markers),
                ..Default::default()
            },
            terminate: false,
            solicited_event: false,
        }
    }

    /// Send one RDMAP message of `data` from `from` as DDP segments, one FPDU and one TCP
    /// segment each; `is_data` marks segments that may be lost. Segments are as large as
    /// `max_ulpdu` allows, 4 bytes shorter when the FPDU would otherwise end exactly where a
    /// marker is due (so that no marker falls between two FPDUs).
    fn message<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: Side,
        kind: Message,
        data: &[u8],
        is_data: bool,
    ) -> io::Result<()> {
        let f = from as usize;
        let hlen = match kind {
            Message::Untagged { .. } => UNTAGGED_HEADER_LEN,
            Message::Tagged { .. } => TAGGED_HEADER_LEN,
        };
        let msn = if let Message::Untagged { qn, .. } = kind {
            let slot = &mut self.conns[conn].msn[f][qn as usize];
            let m = *slot;
            *slot = m.wrapping_add(1);
            m
        } else {
            0
        };
        let cap = self.max_ulpdu - hlen;
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let mut ranges = Vec::new();
        let mut hdr = Vec::with_capacity(UNTAGGED_HEADER_LEN);
        let mut off = 0;
        loop {
            let pos = self.conns[conn].pos[f];
            let mut take = cap.min(data.len() - off);
            if self.markers
                && take > 4
                && fpdu_end(pos, hlen + take, true).is_multiple_of(MARKER_INTERVAL)
            {
                take -= 4;
            }
            let last = off + take == data.len();
            let h = match kind {
                Message::Untagged { opcode, qn, inval } => DdpHeader::Untagged {
                    opcode,
                    last,
                    invalidate_stag: inval,
                    qn,
                    msn,
                    mo: off as u32,
                },
                Message::Tagged { opcode, stag, to } => DdpHeader::Tagged {
                    opcode,
                    last,
                    stag,
                    to: to + off as u64,
                },
            };
            hdr.clear();
            h.emit(&mut hdr);
            self.stats.opcode(h.opcode());
            let start = buf.len();
            self.conns[conn].pos[f] = fpdu(
                &mut buf,
                pos,
                &[&hdr, &data[off..off + take]],
                self.markers,
                self.crc,
            );
            ranges.push((start, buf.len(), is_data));
            off += take;
            if last {
                break;
            }
        }
        let tcp = self.conns[conn].tcp;
        let r = self.tcp.send_segments(tap, tcp, from, &[&buf], &ranges);
        self.buf = buf;
        r
    }
}

/// The DDP placement of one RDMAP message.
#[derive(Clone, Copy)]
enum Message {
    Untagged { opcode: u8, qn: u32, inval: u32 },
    Tagged { opcode: u8, stag: u32, to: u64 },
}

impl<W: Write> RdmaLink<W> for IwarpLink {
    fn connect(&mut self, tap: &mut Tap<W>, client: &Host, server: &Host) -> io::Result<ConnId> {
        let tcp = self
            .tcp
            .open(tap, client, server, SMBDIRECT_IWARP_PORT, self.mss)?;
        let id = self.conns.len();
        self.conns.push(Connection {
            tcp,
            pos: [0, 0],
            msn: [[1, 1, 1], [1, 1, 1]],
        });
        self.stats.connections += 1;
        let (pq, pr): (&[u8], &[u8]) = if self.private_data {
            (&PRIVATE_REQUEST, &PRIVATE_REPLY)
        } else {
            (&[], &[])
        };
        let req = mpa_frame(MPA_REQUEST_KEY, self.markers, self.crc, pq);
        self.tcp
            .send_segments(tap, tcp, Side::Client, &[&req], &[(0, req.len(), false)])?;
        tap.idle(20_000);
        let rep = mpa_frame(MPA_REPLY_KEY, self.markers, self.crc, pr);
        self.tcp
            .send_segments(tap, tcp, Side::Server, &[&rep], &[(0, rep.len(), false)])?;
        tap.idle(20_000);
        Ok(id)
    }

    fn post_send(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: Side,
        msg: &[u8],
        invalidate: Option<u32>,
    ) -> io::Result<()> {
        let (op, inval) = match (invalidate, self.solicited_event) {
            (Some(k), false) => (opcode::SEND_WITH_INVALIDATE, k),
            (Some(k), true) => (opcode::SEND_WITH_SOLICITED_EVENT_AND_INVALIDATE, k),
            (None, false) => (opcode::SEND, 0),
            (None, true) => (opcode::SEND_WITH_SOLICITED_EVENT, 0),
        };
        if self.solicited_event {
            self.stats.solicited_events += 1;
        }
        let kind = Message::Untagged {
            opcode: op,
            qn: QN_SEND,
            inval,
        };
        self.message(tap, conn, from, kind, msg, false)
    }

    fn rdma_read(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        remote: &BufferDescriptor,
        data: &[u8],
    ) -> io::Result<()> {
        // The server's sink buffer for this read.
        let sink_stag = (self.rng.next_u64() as u32) | 1;
        let sink_to = 0xffff_b000_0000_0000u64 + (self.next_sink << 24);
        self.next_sink += 1;
        let mut rr = Vec::with_capacity(READ_REQUEST_LEN);
        rr.extend_from_slice(&sink_stag.to_be_bytes());
        rr.extend_from_slice(&sink_to.to_be_bytes());
        rr.extend_from_slice(&(data.len() as u32).to_be_bytes());
        rr.extend_from_slice(&remote.token.to_be_bytes());
        rr.extend_from_slice(&remote.offset.to_be_bytes());
        let kind = Message::Untagged {
            opcode: opcode::RDMA_READ_REQUEST,
            qn: QN_READ_REQUEST,
            inval: 0,
        };
        self.message(tap, conn, Side::Server, kind, &rr, false)?;
        tap.idle(2_000);
        let kind = Message::Tagged {
            opcode: opcode::RDMA_READ_RESPONSE,
            stag: sink_stag,
            to: sink_to,
        };
        self.message(tap, conn, Side::Client, kind, data, true)?;
        self.stats.rdma_reads += 1;
        self.stats.rdma_read_bytes += data.len() as u64;
        Ok(())
    }

    fn rdma_write(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        remote: &BufferDescriptor,
        data: &[u8],
    ) -> io::Result<()> {
        let kind = Message::Tagged {
            opcode: opcode::RDMA_WRITE,
            stag: remote.token,
            to: remote.offset,
        };
        self.message(tap, conn, Side::Server, kind, data, true)?;
        self.stats.rdma_writes += 1;
        self.stats.rdma_write_bytes += data.len() as u64;
        Ok(())
    }

    fn close(&mut self, tap: &mut Tap<W>, conn: ConnId) -> io::Result<()> {
        if self.terminate {
            let kind = Message::Untagged { opcode: OPCODE_TERMINATE, qn: QN_TERMINATE, inval: 0 };
            self.message(tap, conn, Side::Server, kind, &[0x11, 0x00, 0x00, 0x00], false)?;
            self.stats.terminates += 1;
        }
        let tcp = self.conns[conn].tcp;
        self.tcp.close(tap, tcp)
    }

    fn stats(&mut self) -> &mut RdmaTruth {
        &mut self.stats
    }
}
