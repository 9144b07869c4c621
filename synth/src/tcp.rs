//! SMB2 over TCP (MS-SMB2 §2.1 "Direct TCP transport": a 4-byte header, zero then a
//! 24-bit big-endian length, before each message) on one TCP connection per channel.
//!
//! Sequence and acknowledgment numbers are exact: three-way handshake, MSS segmentation,
//! a delayed ACK every `ACK_EVERY` data segments and at the end of each message, FIN close.
//! Impairments as a capture would show them: a fraction of data segments is reordered
//! (swapped with the next one) and a fraction is sent again a few segments later with the
//! same sequence number and payload and a new IP ID (a real retransmission).
//!
//! `TcpLink` is the connection engine (handshake, segments, ACKs, impairments, close);
//! `TcpTransport` frames SMB2 messages on it for Direct TCP, and `iwarp` frames MPA FPDUs
//! on it. With `loss`, a fraction of the segments the caller marks as data is missing
//! from the capture: resent later (`LossMode::Retransmit`, the network lost it before the
//! capture point) or never seen (`LossMode::Drop`, the capture lost it).

use super::data::SplitMix64;
use super::frames::{flags, Endpoint, FrameBuilder, TcpFields};
use super::pcap::Tap;
use super::{ConnId, Host, Side, Transport};
use smbwire_dissectors::smb2::netbios;
use smbwire_dissectors::wire::tcp::TcpOption;
use std::io::{self, Write};

/// The receiver acknowledges every second full segment (RFC 9293 §3.8.6.3 delayed ACK).
const ACK_EVERY: usize = 2;
/// A retransmitted segment appears this many segments after the original.
const RETRANSMIT_LAG: usize = 3;
/// Window scale shift offered in SYN (RFC 7323 §2.2) and the scaled window used after it.
const WINDOW_SHIFT: u8 = 8;
const WINDOW: u16 = 8192; // 8192 << 8 = 2 MiB
const SYN_WINDOW: u16 = 65535;
/// First ephemeral port (IANA dynamic range, as Windows uses).
const EPHEMERAL_BASE: u16 = 49152;
pub const SMB_PORT: u16 = 445;
/// NetBIOS-style length is 24 bits (MS-SMB2 §2.1).
pub const MAX_MESSAGE_LEN: usize = netbios::MAX_LENGTH as usize;

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// What happens to a lost data segment or packet (spec `loss_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossMode {
    /// Not in the capture at first; the sender resends it later (same sequence number or
    /// PSN, same bytes), so the payload is complete.
    Retransmit,
    /// Never in the capture: the decoder must report a gap.
    Drop,
}

#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct TcpStats {
    pub connections: u64,
    /// Data-carrying segments, each counted once.
    pub data_segments: u64,
    /// Data segments sent a second time.
    pub retransmitted_segments: u64,
    /// Pairs of adjacent data segments sent in swapped order.
    pub reordered_pairs: u64,
    /// Data segments missing from the capture at their first sending, resent later.
    #[serde(skip_serializing_if = "is_zero")]
    pub lost_segments: u64,
    /// Data segments never in the capture, and their bytes.
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_segments: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_bytes: u64,
}

struct Connection {
    ends: [Endpoint; 2],
    hosts: [usize; 2],
    /// Next sequence number each side will send.
    snd_nxt: [u32; 2],
}

/// Impairments applied to the data segments of a `TcpLink`.
#[derive(Clone, Copy, Debug)]
pub struct Impairments {
    pub retransmit: f64,
    pub reorder: f64,
    pub loss: f64,
    pub loss_mode: LossMode,
}

/// TCP connections between hosts, with exact sequence numbers and ACKs.
pub struct TcpLink {
    imp: Impairments,
    rng: SplitMix64,
    /// Next IPv4 Identification per host (RFC 6864: per source, any order).
    ip_id: Vec<u16>,
    conns: Vec<Connection>,
    next_port: u16,
    frames: FrameBuilder,
    pub stats: TcpStats,
}

impl TcpLink {
    pub fn new(imp: Impairments, rng: SplitMix64, hosts: usize) -> Self {
        TcpLink {
            imp,
            rng,
            ip_id: (0..hosts).map(|h| 0x1000 * (h as u16 + 1)).collect(),
            conns: Vec::new(),
            next_port: EPHEMERAL_BASE,
            frames: FrameBuilder::default(),
            stats: TcpStats::default(),
        }
    }

    fn next_ip_id(&mut self, host: usize) -> u16 {
        let id = self.ip_id[host];
        self.ip_id[host] = id.wrapping_add(1);
        id
    }

    /// Emit one segment from side `from` of `conn`.
    fn segment<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: usize,
        tcp: TcpFields,
        payload: &[&[u8]],
    ) -> io::Result<()> {
        let host = self.conns[conn].hosts[from];
        let ip_id = self.next_ip_id(host);
        let c = &self.conns[conn];
        let frame = self
            .frames
            .tcp_frame(&c.ends[from], &c.ends[1 - from], ip_id, &tcp, payload);
        tap.emit(frame)
    }

    fn pure_ack<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: usize,
        ack: u32,
    ) -> io::Result<()> {
        let seq = self.conns[conn].snd_nxt[from];
        let t = TcpFields {
            seq,
            ack,
            flags: flags::ACK,
            window: WINDOW,
            options: &[],
        };
        self.segment(tap, conn, from, t, &[])
    }

    /// Three-way handshake from `client` (next ephemeral port) to `server_port`.
    pub fn open<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        client: &Host,
        server: &Host,
        server_port: u16,
        mss: usize,
    ) -> io::Result<ConnId> {
        let port = self.next_port;
        self.next_port = self.next_port.checked_add(1).unwrap_or(EPHEMERAL_BASE);
        let isn = [self.rng.next_u64() as u32, self.rng.next_u64() as u32];
        let id = self.conns.len();
        self.conns.push(Connection {
            ends: [
                Endpoint {
                    mac: client.mac,
                    ip: client.ip,
                    port,
                },
                Endpoint {
                    mac: server.mac,
                    ip: server.ip,
                    port: server_port,
                },
            ],
            hosts: [client.index, server.index],
            snd_nxt: [isn[0].wrapping_add(1), isn[1].wrapping_add(1)],
        });
        self.stats.connections += 1;
        // SYN options (RFC 9293 §3.2, RFC 7323 §2.2): MSS, NOP, window scale.
        let mut opts = Vec::with_capacity(8);
        for o in [
            TcpOption::MaxSegmentSize(mss as u16),
            TcpOption::NoOperation,
            TcpOption::WindowScale(WINDOW_SHIFT),
        ] {
            o.emit(&mut opts);
        }
        let syn = TcpFields {
            seq: isn[0],
            ack: 0,
            flags: flags::SYN,
            window: SYN_WINDOW,
            options: &opts,
        };
        self.segment(tap, id, 0, syn, &[])?;
        tap.idle(30_000);
        let syn_ack = TcpFields {
            seq: isn[1],
            ack: isn[0].wrapping_add(1),
            flags: flags::SYN | flags::ACK,
            window: SYN_WINDOW,
            options: &opts,
        };
        self.segment(tap, id, 1, syn_ack, &[])?;
        tap.idle(30_000);
        self.pure_ack(tap, id, 0, isn[1].wrapping_add(1))?;
        Ok(id)
    }

    /// The client's ephemeral port of `conn`.
    pub fn client_port(&self, conn: ConnId) -> u16 {
        self.conns[conn].ends[0].port
    }

    /// Send the bytes `msg` (the concatenation of its parts) from side `from`, one segment
    /// per range `(start, end, is_data)`; the ranges tile `msg` in order. Only ranges with
    /// `is_data` may be lost. The receiver ACKs every `ACK_EVERY` segments and at the end.
    pub fn send_segments<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: Side,
        msg: &[&[u8]],
        ranges: &[(usize, usize, bool)],
    ) -> io::Result<()> {
        let s = from as usize;
        let r = 1 - s;
        let total = ranges.last().map_or(0, |x| x.1);
        let nseg = ranges.len();

        let mut order: Vec<usize> = (0..nseg).collect();
        let mut i = 0;
        while i + 1 < nseg {
            if self.imp.reorder > 0.0 && self.rng.unit() < self.imp.reorder {
                order.swap(i, i + 1);
                self.stats.reordered_pairs += 1;
                i += 2;
            } else {
                i += 1;
            }
        }

        let base = self.conns[conn].snd_nxt[s];
        let peer = self.conns[conn].snd_nxt[r];
        let mut rx = Reassembly {
            contiguous: 0,
            held: Vec::new(),
        };
        let mut acked = 0usize;
        let mut unacked = 0usize;
        // (due after k segments, segment, a loss being repaired)
        let mut resend: Vec<(usize, usize, bool)> = Vec::new();
        for (k, &seg) in order.iter().enumerate() {
            let (start, end, is_data) = ranges[seg];
            let lost = is_data && self.imp.loss > 0.0 && self.rng.unit() < self.imp.loss;
            self.stats.data_segments += 1;
            if lost && self.imp.loss_mode == LossMode::Drop {
                // Delivered, but the capture missed it.
                self.stats.dropped_segments += 1;
                self.stats.dropped_bytes += (end - start) as u64;
                rx.receive(start, end);
            } else if lost {
                self.stats.lost_segments += 1;
                resend.push((k + RETRANSMIT_LAG, seg, true));
            } else {
                let t = self.data_fields(base, peer, start, end, total);
                self.segment(tap, conn, s, t, &slice_parts(msg, start, end))?;
                if self.imp.retransmit > 0.0 && self.rng.unit() < self.imp.retransmit {
                    resend.push((k + RETRANSMIT_LAG, seg, false));
                }
                rx.receive(start, end);
            }
            unacked += 1;
            if unacked >= ACK_EVERY {
                self.pure_ack(tap, conn, r, base.wrapping_add(rx.contiguous as u32))?;
                acked = rx.contiguous;
                unacked = 0;
            }
            while let Some(pos) = resend.iter().position(|&(due, _, _)| due <= k) {
                let (_, seg, repair) = resend.remove(pos);
                self.resend(tap, conn, s, msg, ranges[seg], total, base, peer, repair)?;
                if repair {
                    rx.receive(ranges[seg].0, ranges[seg].1);
                }
            }
        }
        for (_, seg, repair) in std::mem::take(&mut resend) {
            self.resend(tap, conn, s, msg, ranges[seg], total, base, peer, repair)?;
            if repair {
                rx.receive(ranges[seg].0, ranges[seg].1);
            }
        }
        if acked < total {
            self.pure_ack(tap, conn, r, base.wrapping_add(total as u32))?;
        }
        self.conns[conn].snd_nxt[s] = base.wrapping_add(total as u32);
        Ok(())
    }

    fn data_fields(
        &self,
        base: u32,
        peer: u32,
        start: usize,
        end: usize,
        total: usize,
    ) -> TcpFields<'static> {
        let push = if end == total { flags::PSH } else { 0 };
        TcpFields {
            seq: base.wrapping_add(start as u32),
            ack: peer,
            flags: flags::ACK | push,
            window: WINDOW,
            options: &[],
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn resend<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        s: usize,
        msg: &[&[u8]],
        range: (usize, usize, bool),
        total: usize,
        base: u32,
        peer: u32,
        repair: bool,
    ) -> io::Result<()> {
        let (start, end, _) = range;
        let t = self.data_fields(base, peer, start, end, total);
        if !repair {
            self.stats.retransmitted_segments += 1;
        }
        self.segment(tap, conn, s, t, &slice_parts(msg, start, end))
    }

    /// FIN from the client, FIN from the server, last ACK.
    pub fn close<W: Write>(&mut self, tap: &mut Tap<W>, conn: ConnId) -> io::Result<()> {
        let [c, sv] = self.conns[conn].snd_nxt;
        let fin = |seq, ack| TcpFields {
            seq,
            ack,
            flags: flags::FIN | flags::ACK,
            window: WINDOW,
            options: &[],
        };
        self.segment(tap, conn, 0, fin(c, sv), &[])?;
        self.conns[conn].snd_nxt[0] = c.wrapping_add(1);
        tap.idle(30_000);
        self.segment(tap, conn, 1, fin(sv, c.wrapping_add(1)), &[])?;
        self.conns[conn].snd_nxt[1] = sv.wrapping_add(1);
        tap.idle(30_000);
        self.pure_ack(tap, conn, 0, sv.wrapping_add(1))
    }
}

/// The parts of `msg` that fall in `[start, end)`.
fn slice_parts<'a>(msg: &[&'a [u8]], start: usize, end: usize) -> Vec<&'a [u8]> {
    let mut out = Vec::with_capacity(msg.len());
    let mut base = 0;
    for part in msg {
        let (lo, hi) = (base, base + part.len());
        let (s, e) = (start.max(lo), end.min(hi));
        if s < e {
            out.push(&part[s - lo..e - lo]);
        }
        base = hi;
    }
    out
}

/// What the receiver has of the message: the contiguous prefix plus out-of-order ranges.
struct Reassembly {
    contiguous: usize,
    held: Vec<(usize, usize)>,
}

impl Reassembly {
    fn receive(&mut self, start: usize, end: usize) {
        if start > self.contiguous {
            self.held.push((start, end));
            return;
        }
        self.contiguous = self.contiguous.max(end);
        while let Some(i) = self.held.iter().position(|&(s, _)| s <= self.contiguous) {
            let (_, e) = self.held.swap_remove(i);
            self.contiguous = self.contiguous.max(e);
        }
    }
}

/// SMB2 over Direct TCP: each message behind a 4-byte length, cut at the MSS.
pub struct TcpTransport {
    mss: usize,
    pub link: TcpLink,
}

impl TcpTransport {
    pub fn new(mss: usize, retransmit: f64, reorder: f64, rng: SplitMix64, hosts: usize) -> Self {
        let imp = Impairments {
            retransmit,
            reorder,
            loss: 0.0,
            loss_mode: LossMode::Retransmit,
        };
        TcpTransport {
            mss,
            link: TcpLink::new(imp, rng, hosts),
        }
    }
}

impl<W: Write> Transport<W> for TcpTransport {
    fn connect(&mut self, tap: &mut Tap<W>, client: &Host, server: &Host) -> io::Result<ConnId> {
        self.link.open(tap, client, server, SMB_PORT, self.mss)
    }

    fn send(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: Side,
        head: &[u8],
        data: &[u8],
    ) -> io::Result<()> {
        let smb_len = head.len() + data.len();
        if smb_len > MAX_MESSAGE_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "SMB2 message longer than 2^24-1",
            ));
        }
        let mut nbss = [0u8; netbios::HEADER_LEN];
        netbios::Repr {
            kind: netbios::kind::SESSION_MESSAGE,
            length: smb_len as u32,
        }
        .emit(&mut nbss);
        let total = netbios::HEADER_LEN + smb_len;
        let ranges: Vec<(usize, usize, bool)> = (0..total.div_ceil(self.mss))
            .map(|i| (i * self.mss, ((i + 1) * self.mss).min(total), true))
            .collect();
        self.link
            .send_segments(tap, conn, from, &[&nbss, head, data], &ranges)
    }

    fn close(&mut self, tap: &mut Tap<W>, conn: ConnId) -> io::Result<()> {
        self.link.close(tap, conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_range() {
        let msg: [&[u8]; 3] = [b"abcd", b"efg", b"hijklmn"];
        let p = slice_parts(&msg, 2, 9);
        assert_eq!(p, [&b"cd"[..], &b"efg"[..], &b"hi"[..]]);
        let p = slice_parts(&msg, 8, 14);
        assert_eq!(p, [&b"ijklmn"[..]]);
    }

    #[test]
    fn reassembly_tracks_contiguous_prefix() {
        let mut r = Reassembly {
            contiguous: 0,
            held: Vec::new(),
        };
        r.receive(10, 20);
        assert_eq!(r.contiguous, 0);
        r.receive(0, 10);
        assert_eq!(r.contiguous, 20);
        r.receive(5, 10); // old data
        assert_eq!(r.contiguous, 20);
    }
}
