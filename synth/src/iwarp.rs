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
use smbwire_dissectors::rdma::ddp::{self, opcode, queue, Buffer, UNTAGGED_HEADER_LEN};
use smbwire_dissectors::rdma::mpa;
use std::io::{self, Write};

/// IANA "smbdirect": SMB Direct over iWARP (MS-SMBD §1.9).
pub const SMBDIRECT_IWARP_PORT: u16 = 5445;
/// Private data Windows Server 2012 sends in its MPA frames (8 bytes, as in the shared
/// sample smbdirect-iwarp-win2012-smb300.pcap; its meaning is not publicly documented).
const PRIVATE_REQUEST: [u8; 8] = [0, 0, 0, 0x10, 0, 0, 0, 0];
const PRIVATE_REPLY: [u8; 8] = [0, 0, 0, 0, 0, 0, 0, 0x10];

/// MPA Request or Reply frame (RFC 5044 §7.1), revision 1.
fn mpa_frame(reply: bool, markers: bool, crc: bool, private: &[u8]) -> Vec<u8> {
    mpa::Frame {
        reply,
        markers,
        crc,
        rejected: false,
        revision: mpa::REVISION_1,
        private_data_len: private.len() as u16,
    }
    .emit(private)
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
                mpa::MARKER_LEN * (mss / mpa::MARKER_INTERVAL as usize + 2)
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
    /// marker is due (so that no marker falls between two FPDUs), except that a Read Request
    /// or a Terminate is never split for it: they are one DDP segment (a Read Request split
    /// in two is malformed to Wireshark and `iwarp.ddp_truncated` to smbwire, which both read
    /// its 28-byte body from one segment); the next FPDU then starts with the marker
    /// (`mpa::emit_fpdu_into`).
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
            Message::Untagged { .. } => ddp::UNTAGGED_HEADER_LEN,
            Message::Tagged { .. } => ddp::TAGGED_HEADER_LEN,
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
                && matches!(kind, Message::Tagged { .. } | Message::Untagged { qn: queue::SEND, .. })
                && mpa::fpdu_end(pos as u64, hlen + take, true).is_multiple_of(mpa::MARKER_INTERVAL)
            {
                take -= 4;
            }
            let last = off + take == data.len();
            let (op, buffer) = match kind {
                Message::Untagged { opcode, qn, inval } => (
                    opcode,
                    Buffer::Untagged {
                        qn,
                        msn,
                        mo: off as u32,
                        inval_stag: inval,
                    },
                ),
                Message::Tagged { opcode, stag, to } => (
                    opcode,
                    Buffer::Tagged {
                        stag,
                        to: to + off as u64,
                    },
                ),
            };
            hdr.clear();
            ddp::emit_header(&mut hdr, op, last, buffer);
            self.stats.opcode(op);
            let start = buf.len();
            self.conns[conn].pos[f] = mpa::emit_fpdu_into(
                &mut buf,
                pos as u64,
                &[&hdr, &data[off..off + take]],
                self.markers,
                self.crc,
            ) as usize;
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
        let req = mpa_frame(false, self.markers, self.crc, pq);
        self.tcp
            .send_segments(tap, tcp, Side::Client, &[&req], &[(0, req.len(), false)])?;
        tap.idle(20_000);
        let rep = mpa_frame(true, self.markers, self.crc, pr);
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
            (Some(k), true) => (opcode::SEND_WITH_SE_AND_INVALIDATE, k),
            (None, false) => (opcode::SEND, 0),
            (None, true) => (opcode::SEND_WITH_SE, 0),
        };
        if self.solicited_event {
            self.stats.solicited_events += 1;
        }
        let kind = Message::Untagged {
            opcode: op,
            qn: queue::SEND,
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
        let rr = ddp::ReadRequest {
            sink_stag,
            sink_to,
            size: data.len() as u32,
            src_stag: remote.token,
            src_to: remote.offset,
        }
        .emit();
        let kind = Message::Untagged {
            opcode: opcode::READ_REQUEST,
            qn: queue::READ_REQUEST,
            inval: 0,
        };
        self.message(tap, conn, Side::Server, kind, &rr, false)?;
        tap.idle(2_000);
        let kind = Message::Tagged {
            opcode: opcode::READ_RESPONSE,
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
            opcode: opcode::WRITE,
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
            // RFC 5040 §5.1: Terminate goes on DDP queue 2. Its Terminate Control says DDP
            // layer, Tagged Buffer Error, Invalid STag (RFC 6580 registry 0x1/0x1/0x00), with
            // no copies of the offending headers (Hdrct 0).
            let kind = Message::Untagged { opcode: opcode::TERMINATE, qn: queue::TERMINATE, inval: 0 };
            let control = ddp::TerminateControl { layer: 1, etype: 1, error_code: 0, hdrct: 0 };
            self.message(tap, conn, Side::Server, kind, &control.emit(), false)?;
            self.stats.terminates += 1;
        }
        let tcp = self.conns[conn].tcp;
        self.tcp.close(tap, tcp)
    }

    fn stats(&mut self) -> &mut RdmaTruth {
        &mut self.stats
    }
}
