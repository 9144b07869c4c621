//! RoCE: InfiniBand reliable-connected transport packets over Ethernet, each ending in the
//! invariant CRC. RoCEv2 (IBTA vol. 1 annex A17) carries them in UDP (destination port 4791)
//! over IPv4; RoCEv1 (annex A16) puts the IB Global Route Header straight after Ethernet
//! (EtherType 0x8915), with IPv4-mapped GIDs (::ffff:a.b.c.d) as source and destination.
//! Native InfiniBand (`Infiniband`) puts the Local Route Header (IBA local, LIDs from the low
//! 16 bits of the ends' IPv4 addresses) before the BTH and the VCRC after the ICRC, each packet
//! an ERF InfiniBand record (LINKTYPE_ERF, as ibdump writes; tshark 4 reads no
//! LINKTYPE_INFINIBAND file).
//! Everything from the BTH on is the same for all three.
//!
//! Per connection: the RDMA CM exchange on QP1 (`smbwire_dissectors::rdma::cm`), then RC traffic between two QPs.
//! Sends and RDMA Writes are cut at the path MTU into FIRST/MIDDLE/LAST (or ONLY)
//! packets with consecutive PSNs, the last one asking for an ACK (BTH A bit), which the
//! responder returns (opcode 0x11, AETH with its MSN). An RDMA Read Request (RETH) takes as
//! many PSNs as its response has packets; the response packets carry those PSNs, AETH on
//! FIRST/LAST/ONLY (IBTA vol. 1 §9.7.5.1.5, table of packet headers per opcode).
//!
//! Loss (data packets only, RDMA Write and RDMA Read Response): in `Retransmit` mode the
//! packet is first missing and appears `RETRANSMIT_LAG` packets later with the same PSN
//! and bytes (a simplification of go-back-N: the packets after it are not resent); in
//! `Drop` mode it never appears. Capture noise besides loss: a `retransmit` fraction of
//! data packets is sent a second time `RETRANSMIT_LAG` packets later (same PSN and bytes),
//! and a `reorder` fraction is swapped with the packet after it.

use super::data::SplitMix64;
use super::frames::GrhFields;
use super::frames::{Endpoint, FrameBuilder};
use super::pcap::Tap;
use super::rdma::{RdmaLink, RdmaTruth};
use super::smbdirect::BufferDescriptor;
use super::tcp::{Impairments, LossMode};
use super::{ConnId, Host, Side};
use smbwire_dissectors::rdma::cm::{self, End};
use smbwire_dissectors::rdma::ib::{
    self, icrc_rocev1, icrc_rocev2, opcode, Aeth, Bth, Deth, Ieth, Reth, AETH_LEN, BTH_LEN, DETH_LEN,
    ICRC_LEN, PSN_MASK,
};
use std::io::{self, Write};

pub const ROCEV2_PORT: u16 = smbwire_dissectors::pipeline::ROCE_V2_PORT;
/// The SMB Direct port in the RDMA CM port space (PROTOCOL-NOTES §1).
pub const SMBDIRECT_PORT: u16 = 445;

/// IPv4 DSCP 26 with ECT(0): a lossless RoCE traffic class as commonly configured.
const DSCP_ECN: u8 = (26 << 2) | 0b10;
/// RoCEv1 GRH: the same DSCP (ECN is an IP notion, RoCEv1 has no ECN marking) and a hop
/// limit as Linux RDMA CM sets for RoCE paths (64).
const GRH_TRAFFIC_CLASS: u8 = 26 << 2;
const GRH_HOP_LIMIT: u8 = 64;
const RETRANSMIT_LAG: usize = 3;

/// The BTH of an RC or UD packet as this link sends it: MigReq set (the migrated state, as RC
/// QPs normally are), the default P_Key, no solicited event; PadCnt pads `len` payload bytes
/// to 4.
fn bth(opcode: u8, dest_qp: u32, psn: u32, ack_req: bool, len: usize) -> Bth {
    Bth {
        opcode,
        solicited_event: false,
        mig_req: true,
        pad_count: ((4 - len % 4) % 4) as u8,
        p_key: ib::DEFAULT_P_KEY,
        dest_qp,
        ack_req,
        psn,
    }
}

/// The LID of an end: the low 16 bits of its address, kept in the unicast range.
fn lid_of(e: &Endpoint) -> u16 {
    lid_of_ip(e.ip)
}

/// The LID the InfiniBand transport gives the node with address `ip`.
pub fn lid_of_ip(ip: std::net::IpAddr) -> u16 {
    let low = match ip {
        std::net::IpAddr::V4(a) => u16::from_be_bytes([a.octets()[2], a.octets()[3]]),
        std::net::IpAddr::V6(a) => a.segments()[7],
    };
    (low & 0xbfff).max(1)
}

/// One native InfiniBand packet (LRH, `body` = BTH onwards with its pad, ICRC, VCRC) as an ERF
/// InfiniBand record, padded to 8 bytes, through the engine's emitters.
fn infiniband_record(now_ns: u64, slid: u16, dlid: u16, body: &[&[u8]]) -> Vec<u8> {
    use smbwire_dissectors::wire::{erf, infiniband as ibl};
    let n: usize = body.iter().map(|b| b.len()).sum();
    let mut pkt = vec![0u8; ibl::LRH_LEN];
    ibl::Lrh {
        vl: 0,
        sl: 0,
        lnh: ibl::lnh::IBA_LOCAL,
        dlid,
        slid,
        pkt_len: ((ibl::LRH_LEN + n + ICRC_LEN) / 4) as u16,
    }
    .emit(&mut ibl::Packet::new_unchecked(&mut pkt[..]));
    for b in body {
        pkt.extend_from_slice(b);
    }
    let crc = ib::icrc_infiniband(&pkt);
    pkt.extend_from_slice(&crc.to_le_bytes());
    let v = ibl::vcrc(&pkt);
    pkt.extend_from_slice(&v.to_le_bytes());
    let rlen = (erf::HEADER_LEN + pkt.len()).div_ceil(8) * 8;
    let mut rec = Vec::with_capacity(rlen);
    erf::Repr {
        timestamp: erf::timestamp_from_ns(now_ns),
        rtype: erf::rtype::INFINIBAND,
        flags: erf::flags::VLEN,
        lctr: 0,
        wlen: pkt.len() as u16,
        extensions: &[],
    }
    .emit(rlen as u16, &mut rec);
    rec.extend_from_slice(&pkt);
    rec.resize(rlen, 0);
    rec
}

/// Which RoCE encapsulation a `RoceLink` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoceVersion {
    /// Annex A16: Ethernet / GRH / BTH.
    V1,
    /// Annex A17: Ethernet / IPv4 / UDP 4791 / BTH.
    V2,
    /// Native InfiniBand: ERF record / LRH / BTH ... ICRC / VCRC.
    Infiniband,
}

impl RoceVersion {
    pub fn name(self) -> &'static str {
        match self {
            RoceVersion::V1 => "rocev1",
            RoceVersion::V2 => "rocev2",
            RoceVersion::Infiniband => "infiniband",
        }
    }
}

struct Qp {
    qpn: u32,
    /// Next PSN this QP sends as a requester.
    psn: u32,
    /// Requests this QP completed as a responder (AETH MSN).
    msn: u32,
    udp_port: u16,
}

struct Connection {
    hosts: [usize; 2],
    ends: [Endpoint; 2],
    qp: [Qp; 2],
    cm: [End; 2],
}

/// A packet waiting to be resent (loss repair): headers and a payload range.
struct Resend {
    due: usize,
    from: usize,
    headers: Vec<u8>,
    start: usize,
    end: usize,
}

pub struct RoceLink {
    version: RoceVersion,
    mtu: usize,
    imp: Impairments,
    rng: SplitMix64,
    ip_id: Vec<u16>,
    conns: Vec<Connection>,
    next_cm_port: u16,
    /// Next PSN per host on its QP1 (UD).
    gsi_psn: Vec<u32>,
    frames: FrameBuilder,
    headers: Vec<u8>,
    pub stats: RdmaTruth,
    /// Packets now being sent belong to another upper layer (tallied in `other_ulp_bytes`).
    other_ulp: bool,
    /// SMB Direct Sends set the BTH Solicited Event bit on their last (or only) packet.
    pub solicited_event: bool,
}

/// UDP source port for a QP: the RoCEv2 entropy field, 0xC000 + a hash of the QPN
/// (annex A17.4.2 recommends a flow-based value in the dynamic range).
fn entropy_port(qpn: u32) -> u16 {
    let h = qpn.wrapping_mul(0x9E37_79B1);
    0xc000 | ((h >> 18) as u16 & 0x3fff)
}

impl RoceLink {
    /// `imp.retransmit` and `imp.reorder` apply to RDMA data packets as `imp.loss` does.
    pub fn new(
        version: RoceVersion,
        mtu: u64,
        imp: Impairments,
        rng: SplitMix64,
        hosts: &[Host],
    ) -> Self {
        RoceLink {
            version,
            mtu: mtu as usize,
            imp,
            rng,
            ip_id: (0..hosts.len()).map(|h| 0x2000 * (h as u16 + 1)).collect(),
            conns: Vec::new(),
            next_cm_port: 49152,
            gsi_psn: vec![0; hosts.len()],
            frames: FrameBuilder::default(),
            headers: Vec::new(),
            stats: RdmaTruth {
                transport: version.name().into(),
                mtu,
                ..Default::default()
            },
            other_ulp: false,
            solicited_event: false,
        }
    }

    /// One RC connection of another upper layer (NVMe-oF-like) from `client` to `server`,
    /// its CM REQ naming `port`: the CM exchange, a 64-byte command capsule, 4 KiB of data
    /// pushed by RDMA Write, a 16-byte completion, a second command and completion, then
    /// disconnect. Payload bytes are arbitrary (not SMB Direct).
    pub fn other_ulp<W: Write>(&mut self, tap: &mut Tap<W>, client: &Host, server: &Host, port: u16) -> io::Result<()> {
        let conn = self.connect_port(tap, client, server, port)?;
        self.stats.connections -= 1;
        self.stats.other_ulp_connections += 1;
        self.other_ulp = true;
        let data: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        for k in 0..2u8 {
            let mut cmd = [0u8; 64];
            cmd[0] = 0x02; // an NVMe Read opcode, command id k
            cmd[2] = k;
            RdmaLink::<W>::post_send(self, tap, conn, Side::Client, &cmd, None)?;
            let desc = BufferDescriptor { offset: 0x7000_0000 + u64::from(k) * 0x1000, token: 0x4420, length: 4096 };
            RdmaLink::<W>::rdma_write(self, tap, conn, &desc, &data)?;
            let mut cqe = [0u8; 16];
            cqe[12] = k;
            RdmaLink::<W>::post_send(self, tap, conn, Side::Server, &cqe, None)?;
        }
        self.other_ulp = false;
        // The RDMA Writes above are not SMB Direct's.
        self.stats.rdma_writes -= 2;
        self.stats.rdma_write_bytes -= 2 * data.len() as u64;
        RdmaLink::<W>::close(self, tap, conn)
    }

    /// Emit one RoCE packet from `src_host`/`src` to `dst` with headers `hdr` (BTH first)
    /// and `payload` (padded to 4 bytes here, as BTH PadCnt says). `src.port` is the flow's
    /// entropy: the UDP source port on RoCEv2, the GRH FlowLabel on RoCEv1.
    #[allow(clippy::too_many_arguments)]
    fn packet<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        src_host: usize,
        src: Endpoint,
        dst: Endpoint,
        hdr: &[u8],
        payload: &[u8],
    ) -> io::Result<()> {
        let pad = [0u8; 3];
        let npad = (4 - payload.len() % 4) % 4;
        let ip_at = super::frames::ETHERNET_HEADER_LEN;
        if self.version == RoceVersion::Infiniband {
            let rec = infiniband_record(tap.now_ns(), lid_of(&src), lid_of(&dst), &[hdr, payload, &pad[..npad]]);
            self.stats.opcode(hdr[0]);
            if self.other_ulp && hdr[0] != opcode::ACKNOWLEDGE {
                self.stats.other_ulp_bytes += (hdr.len() + payload.len() + npad + ICRC_LEN) as u64;
            }
            return tap.emit(&rec);
        }
        if self.version == RoceVersion::V1 {
            let grh = GrhFields {
                traffic_class: GRH_TRAFFIC_CLASS,
                flow_label: u32::from(src.port),
                hop_limit: GRH_HOP_LIMIT,
            };
            let frame =
                self.frames
                    .roce_v1_frame(&src, &dst, grh, &[hdr, payload, &pad[..npad]], ICRC_LEN);
            let len = usize::from(u16::from_be_bytes([frame[ip_at + 4], frame[ip_at + 5]]));
            let end = ip_at + ib::GRH_LEN + len;
            let crc = icrc_rocev1(&frame[ip_at..end - ICRC_LEN]);
            frame[end - ICRC_LEN..end].copy_from_slice(&crc.to_le_bytes());
            self.stats.opcode(hdr[0]);
            if self.other_ulp && hdr[0] != opcode::ACKNOWLEDGE {
                self.stats.other_ulp_bytes += (hdr.len() + payload.len() + npad + ICRC_LEN) as u64;
            }
            return tap.emit(frame);
        }
        let ip_id = self.ip_id[src_host];
        self.ip_id[src_host] = ip_id.wrapping_add(1);
        let frame = self.frames.udp_frame(
            &src,
            &dst,
            ip_id,
            DSCP_ECN,
            &[hdr, payload, &pad[..npad]],
            ICRC_LEN,
        );
        // The IP packet's length: IPv4's total length, or IPv6's header and payload length.
        let total = if frame[ip_at] >> 4 == 6 {
            ib::GRH_LEN + usize::from(u16::from_be_bytes([frame[ip_at + 4], frame[ip_at + 5]]))
        } else {
            usize::from(u16::from_be_bytes([frame[ip_at + 2], frame[ip_at + 3]]))
        };
        let end = ip_at + total;
        let crc = icrc_rocev2(&frame[ip_at..end - ICRC_LEN]);
        frame[end - ICRC_LEN..end].copy_from_slice(&crc.to_le_bytes());
        self.stats.opcode(hdr[0]);
        if self.other_ulp && hdr[0] != opcode::ACKNOWLEDGE {
            self.stats.other_ulp_bytes += (hdr.len() + payload.len() + npad + ICRC_LEN) as u64;
        }
        tap.emit(frame)
    }

    fn ends(&self, conn: ConnId, from: usize) -> (usize, Endpoint, Endpoint) {
        let c = &self.conns[conn];
        let mut src = c.ends[from];
        let mut dst = c.ends[1 - from];
        src.port = c.qp[from].udp_port;
        dst.port = ROCEV2_PORT;
        (c.hosts[from], src, dst)
    }

    fn rc_packet<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: usize,
        payload: &[u8],
    ) -> io::Result<()> {
        let (h, src, dst) = self.ends(conn, from);
        let hdr = std::mem::take(&mut self.headers);
        let r = self.packet(tap, h, src, dst, &hdr, payload);
        self.headers = hdr;
        r
    }

    /// BTH for the next packet `from` sends on `conn` (consumes a PSN).
    fn next_bth(&mut self, conn: ConnId, from: usize, opcode: u8, len: usize, ack_req: bool, solicited: bool) {
        let c = &mut self.conns[conn];
        let psn = c.qp[from].psn;
        c.qp[from].psn = (psn + 1) & PSN_MASK;
        self.headers.clear();
        Bth {
            solicited_event: solicited,
            ..bth(opcode, c.qp[1 - from].qpn, psn, ack_req, len)
        }
        .emit(&mut self.headers);
    }

    /// The responder `from` acknowledges everything up to `psn` of its peer.
    fn ack<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: usize,
        psn: u32,
    ) -> io::Result<()> {
        tap.idle(1_000);
        let c = &self.conns[conn];
        let (dest_qp, msn) = (c.qp[1 - from].qpn, c.qp[from].msn);
        self.headers.clear();
        bth(opcode::ACKNOWLEDGE, dest_qp, psn, false, 0).emit(&mut self.headers);
        Aeth {
            syndrome: Aeth::ACK_NO_CREDIT_INFO,
            msn,
        }
        .emit(&mut self.headers);
        self.stats.acks += 1;
        self.rc_packet(tap, conn, from, &[])
    }

    fn cm_mad<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: usize,
        mad: &[u8; cm::MAD_LEN],
    ) -> io::Result<()> {
        let c = &self.conns[conn];
        let (host, mut src, mut dst) = (c.hosts[from], c.ends[from], c.ends[1 - from]);
        src.port = entropy_port(1) ^ (host as u16);
        dst.port = ROCEV2_PORT;
        let psn = self.gsi_psn[host];
        self.gsi_psn[host] = (psn + 1) & PSN_MASK;
        let mut hdr = Vec::with_capacity(BTH_LEN + DETH_LEN);
        bth(opcode::UD_SEND_ONLY, ib::QP1, psn, false, 0).emit(&mut hdr);
        Deth {
            q_key: ib::GSI_Q_KEY,
            src_qp: ib::QP1,
        }
        .emit(&mut hdr);
        let attr = u16::from_be_bytes([mad[16], mad[17]]);
        *self
            .stats
            .cm
            .entry(cm::attribute::name(attr).to_string())
            .or_default() += 1;
        self.packet(tap, host, src, dst, &hdr, mad)?;
        tap.idle(10_000);
        Ok(())
    }

    /// Whether an event of probability `p` happens (no draw when `p` is 0, so captures
    /// without that noise stay as they were).
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.unit() < p
    }

    /// Packets of one data-carrying message (RDMA Write or Read Response) from `from`:
    /// `plan` gives per packet its headers (already built) and payload range. Lost
    /// packets are handled per the loss mode; retransmitted and reordered ones as the
    /// module header says.
    fn data_packets<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: usize,
        plan: Vec<(Vec<u8>, usize, usize)>,
        data: &[u8],
    ) -> io::Result<()> {
        let mut pending: Vec<Resend> = Vec::new();
        let n = plan.len();
        for (k, (hdr, s, e)) in plan.into_iter().enumerate() {
            if self.chance(self.imp.loss) {
                if self.imp.loss_mode == LossMode::Drop {
                    self.stats.dropped_packets += 1;
                    self.stats.dropped_bytes += (e - s) as u64;
                    self.stats.opcode(hdr[0]);
                } else {
                    self.stats.lost_packets += 1;
                    self.stats.opcode(hdr[0]); // the resend is not counted
                    pending.push(Resend {
                        due: k + RETRANSMIT_LAG,
                        from,
                        headers: hdr,
                        start: s,
                        end: e,
                    });
                }
            } else if k + 1 < n
                && !pending.iter().any(|r| r.due == k)
                && self.chance(self.imp.reorder)
            {
                // Sent after the next packet (flushed at k + 1, once that one is out); not
                // when a packet is already waiting for this one, which would undo the swap.
                self.stats.reordered_pairs += 1;
                self.stats.opcode(hdr[0]);
                pending.push(Resend {
                    due: k + 1,
                    from,
                    headers: hdr,
                    start: s,
                    end: e,
                });
            } else {
                let again = self.chance(self.imp.retransmit);
                if again {
                    self.stats.retransmitted_packets += 1;
                    pending.push(Resend {
                        due: k + RETRANSMIT_LAG,
                        from,
                        headers: hdr.clone(),
                        start: s,
                        end: e,
                    });
                }
                self.headers = hdr;
                self.rc_packet(tap, conn, from, &data[s..e])?;
            }
            while let Some(i) = pending.iter().position(|r| r.due <= k) {
                let r = pending.remove(i);
                self.resend(tap, conn, r, data)?;
            }
        }
        for r in pending {
            self.resend(tap, conn, r, data)?;
        }
        Ok(())
    }

    fn resend<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        r: Resend,
        data: &[u8],
    ) -> io::Result<()> {
        let (h, src, dst) = self.ends(conn, r.from);
        let before = self.stats.opcodes.clone();
        self.packet(tap, h, src, dst, &r.headers, &data[r.start..r.end])?;
        self.stats.opcodes = before; // counted when first sent
        Ok(())
    }

    /// Number of packets for `len` bytes at the path MTU (a zero-length message is one).
    fn npackets(&self, len: usize) -> usize {
        len.div_ceil(self.mtu).max(1)
    }
}

impl RoceLink {
    /// A connection to `port` on `server` (the CM REQ's service ID names it).
    fn connect_port<W: Write>(&mut self, tap: &mut Tap<W>, client: &Host, server: &Host, service_port: u16) -> io::Result<ConnId> {
        let id = self.conns.len();
        let mut qp = || {
            let qpn = (self.rng.next_u64() as u32 & 0x00ff_fff0) | 0x100;
            let psn = self.rng.next_u64() as u32 & PSN_MASK;
            (qpn, psn)
        };
        let (cq, cpsn) = qp();
        let (sq, spsn) = qp();
        let port = self.next_cm_port;
        self.next_cm_port = self.next_cm_port.checked_add(1).unwrap_or(49152);
        let end = |h: &Host, qpn: u32, psn: u32, comm: u32, port: u16| End {
            comm_id: comm,
            qpn,
            start_psn: psn,
            guid: cm::guid_from_mac(h.mac),
            ip: h.ip,
            port,
        };
        let (ccomm, scomm) = (self.rng.next_u64() as u32, self.rng.next_u64() as u32);
        let tid = self.rng.next_u64();
        let cm = [
            end(client, cq, cpsn, ccomm, port),
            end(server, sq, spsn, scomm, service_port),
        ];
        let ep = |h: &Host| Endpoint {
            mac: h.mac,
            ip: h.ip,
            port: 0,
        };
        self.conns.push(Connection {
            hosts: [client.index, server.index],
            ends: [ep(client), ep(server)],
            qp: [
                Qp {
                    qpn: cq,
                    psn: cpsn,
                    msn: 0,
                    udp_port: entropy_port(cq),
                },
                Qp {
                    qpn: sq,
                    psn: spsn,
                    msn: 0,
                    udp_port: entropy_port(sq),
                },
            ],
            cm,
        });
        self.stats.connections += 1;
        let req = cm::connect_request(tid, &cm[0], &cm[1], self.mtu as u64);
        self.cm_mad(tap, id, 0, &req)?;
        let rep = cm::connect_reply(tid, &cm[1], &cm[0]);
        self.cm_mad(tap, id, 1, &rep)?;
        let rtu = cm::ready_to_use(tid, &cm[0], &cm[1]);
        self.cm_mad(tap, id, 0, &rtu)?;
        Ok(id)
    }
}

impl<W: Write> RdmaLink<W> for RoceLink {
    fn connect(&mut self, tap: &mut Tap<W>, client: &Host, server: &Host) -> io::Result<ConnId> {
        self.connect_port(tap, client, server, SMBDIRECT_PORT)
    }

    fn post_send(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: Side,
        msg: &[u8],
        invalidate: Option<u32>,
    ) -> io::Result<()> {
        let f = from as usize;
        let n = self.npackets(msg.len());
        let mut last_psn = 0;
        for i in 0..n {
            let (s, e) = (i * self.mtu, ((i + 1) * self.mtu).min(msg.len()));
            let last = i + 1 == n;
            let op = match (n == 1, i == 0, last, invalidate.is_some()) {
                (true, _, _, false) => opcode::SEND_ONLY,
                (true, _, _, true) => opcode::SEND_ONLY_WITH_INVALIDATE,
                (false, true, _, _) => opcode::SEND_FIRST,
                (false, _, true, false) => opcode::SEND_LAST,
                (false, _, true, true) => opcode::SEND_LAST_WITH_INVALIDATE,
                _ => opcode::SEND_MIDDLE,
            };
            last_psn = self.conns[conn].qp[f].psn;
            // IBTA §9.2.1: SE is meaningful only on the last packet of a Send.
            let solicited = last && self.solicited_event && !self.other_ulp;
            self.next_bth(conn, f, op, e - s, last, solicited);
            if solicited {
                self.stats.solicited_events += 1;
            }
            if let (true, Some(key)) = (last, invalidate) {
                Ieth { r_key: key }.emit(&mut self.headers);
            }
            self.rc_packet(tap, conn, f, &msg[s..e])?;
        }
        let c = &mut self.conns[conn];
        c.qp[1 - f].msn = (c.qp[1 - f].msn + 1) & PSN_MASK;
        self.ack(tap, conn, 1 - f, last_psn)
    }

    fn rdma_read(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        remote: &BufferDescriptor,
        data: &[u8],
    ) -> io::Result<()> {
        let (server, client) = (Side::Server as usize, Side::Client as usize);
        let n = self.npackets(data.len());
        let first_psn = self.conns[conn].qp[server].psn;
        self.next_bth(conn, server, opcode::RDMA_READ_REQUEST, 0, true, false);
        Reth {
            va: remote.offset,
            r_key: remote.token,
            dma_length: data.len() as u32,
        }
        .emit(&mut self.headers);
        self.rc_packet(tap, conn, server, &[])?;
        // The request reserves one PSN per response packet (§9.7.1).
        let c = &mut self.conns[conn];
        c.qp[server].psn = (first_psn + n as u32) & PSN_MASK;
        c.qp[client].msn = (c.qp[client].msn + 1) & PSN_MASK;
        let (dest_qp, msn) = (c.qp[server].qpn, c.qp[client].msn);
        tap.idle(2_000);
        let mut plan = Vec::with_capacity(n);
        for i in 0..n {
            let (s, e) = (i * self.mtu, ((i + 1) * self.mtu).min(data.len()));
            let op = match (n == 1, i == 0, i + 1 == n) {
                (true, _, _) => opcode::RDMA_READ_RESPONSE_ONLY,
                (false, true, _) => opcode::RDMA_READ_RESPONSE_FIRST,
                (false, _, true) => opcode::RDMA_READ_RESPONSE_LAST,
                _ => opcode::RDMA_READ_RESPONSE_MIDDLE,
            };
            let mut h = Vec::with_capacity(BTH_LEN + AETH_LEN);
            bth(op, dest_qp, (first_psn + i as u32) & PSN_MASK, false, e - s).emit(&mut h);
            if op != opcode::RDMA_READ_RESPONSE_MIDDLE {
                Aeth {
                    syndrome: Aeth::ACK_NO_CREDIT_INFO,
                    msn,
                }
                .emit(&mut h);
            }
            plan.push((h, s, e));
        }
        self.data_packets(tap, conn, client, plan, data)?;
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
        let (server, client) = (Side::Server as usize, Side::Client as usize);
        let n = self.npackets(data.len());
        let mut plan = Vec::with_capacity(n);
        let mut last_psn = 0;
        for i in 0..n {
            let (s, e) = (i * self.mtu, ((i + 1) * self.mtu).min(data.len()));
            let op = match (n == 1, i == 0, i + 1 == n) {
                (true, _, _) => opcode::RDMA_WRITE_ONLY,
                (false, true, _) => opcode::RDMA_WRITE_FIRST,
                (false, _, true) => opcode::RDMA_WRITE_LAST,
                _ => opcode::RDMA_WRITE_MIDDLE,
            };
            last_psn = self.conns[conn].qp[server].psn;
            self.next_bth(conn, server, op, e - s, i + 1 == n, false);
            let mut h = std::mem::take(&mut self.headers);
            if op == opcode::RDMA_WRITE_ONLY || op == opcode::RDMA_WRITE_FIRST {
                Reth {
                    va: remote.offset,
                    r_key: remote.token,
                    dma_length: data.len() as u32,
                }
                .emit(&mut h);
            }
            plan.push((h, s, e));
        }
        self.data_packets(tap, conn, server, plan, data)?;
        let c = &mut self.conns[conn];
        c.qp[client].msn = (c.qp[client].msn + 1) & PSN_MASK;
        self.ack(tap, conn, client, last_psn)?;
        self.stats.rdma_writes += 1;
        self.stats.rdma_write_bytes += data.len() as u64;
        Ok(())
    }

    fn close(&mut self, tap: &mut Tap<W>, conn: ConnId) -> io::Result<()> {
        let tid = self.rng.next_u64();
        let cm = self.conns[conn].cm;
        let dreq = cm::disconnect_request(tid, &cm[0], &cm[1]);
        self.cm_mad(tap, conn, 0, &dreq)?;
        let drep = cm::disconnect_reply(tid, &cm[1], &cm[0]);
        self.cm_mad(tap, conn, 1, &drep)
    }

    fn stats(&mut self) -> &mut RdmaTruth {
        &mut self.stats
    }
}
