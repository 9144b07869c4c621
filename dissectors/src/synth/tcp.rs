//! SMB2 over TCP (MS-SMB2 §2.1 "Direct TCP transport": a 4-byte header, zero then a
//! 24-bit big-endian length, before each message) on one TCP connection per channel.
//!
//! Sequence and acknowledgment numbers are exact: three-way handshake, MSS segmentation,
//! a delayed ACK every `ACK_EVERY` data segments and at the end of each message, FIN close.
//! Impairments as a capture would show them: a fraction of data segments is reordered
//! (swapped with the next one) and a fraction is sent again a few segments later with the
//! same sequence number and payload and a new IP ID (a real retransmission).

use super::data::SplitMix64;
use super::frames::{flags, Endpoint, FrameBuilder, TcpFields};
use super::pcap::Tap;
use super::{ConnId, Host, Side, Transport};
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
pub const MAX_MESSAGE_LEN: usize = (1 << 24) - 1;

#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct TcpStats {
    pub connections: u64,
    /// Data-carrying segments, each counted once.
    pub data_segments: u64,
    /// Data segments sent a second time.
    pub retransmitted_segments: u64,
    /// Pairs of adjacent data segments sent in swapped order.
    pub reordered_pairs: u64,
}

struct Connection {
    ends: [Endpoint; 2],
    hosts: [usize; 2],
    /// Next sequence number each side will send.
    snd_nxt: [u32; 2],
}

pub struct TcpTransport {
    mss: usize,
    retransmit: f64,
    reorder: f64,
    rng: SplitMix64,
    /// Next IPv4 Identification per host (RFC 6864: per source, any order).
    ip_id: Vec<u16>,
    conns: Vec<Connection>,
    next_port: u16,
    frames: FrameBuilder,
    pub stats: TcpStats,
}

impl TcpTransport {
    pub fn new(mss: usize, retransmit: f64, reorder: f64, rng: SplitMix64, hosts: usize) -> Self {
        TcpTransport {
            mss,
            retransmit,
            reorder,
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
}

/// The parts of `msg` (a message in up to three slices) that fall in `[start, end)`.
fn slice_parts<'a>(msg: &[&'a [u8]; 3], start: usize, end: usize) -> [&'a [u8]; 3] {
    let mut out: [&[u8]; 3] = [&[], &[], &[]];
    let mut base = 0;
    for (i, part) in msg.iter().enumerate() {
        let (lo, hi) = (base, base + part.len());
        let (s, e) = (start.max(lo), end.min(hi));
        if s < e {
            out[i] = &part[s - lo..e - lo];
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

impl<W: Write> Transport<W> for TcpTransport {
    fn connect(&mut self, tap: &mut Tap<W>, client: &Host, server: &Host) -> io::Result<ConnId> {
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
                    port: SMB_PORT,
                },
            ],
            hosts: [client.index, server.index],
            snd_nxt: [isn[0].wrapping_add(1), isn[1].wrapping_add(1)],
        });
        self.stats.connections += 1;
        // SYN options (RFC 9293 §3.2, RFC 7323 §2.2): MSS, NOP, window scale.
        let m = (self.mss as u16).to_be_bytes();
        let opts = [2, 4, m[0], m[1], 1, 3, 3, WINDOW_SHIFT];
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

    fn send(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: Side,
        head: &[u8],
        data: &[u8],
    ) -> io::Result<()> {
        let s = from as usize;
        let r = 1 - s;
        let smb_len = head.len() + data.len();
        if smb_len > MAX_MESSAGE_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "SMB2 message longer than 2^24-1",
            ));
        }
        let l = (smb_len as u32).to_be_bytes();
        let nbss = [0, l[1], l[2], l[3]];
        let msg: [&[u8]; 3] = [&nbss, head, data];
        let total = 4 + smb_len;
        let nseg = total.div_ceil(self.mss);

        let mut order: Vec<usize> = (0..nseg).collect();
        let mut i = 0;
        while i + 1 < nseg {
            if self.reorder > 0.0 && self.rng.unit() < self.reorder {
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
        let mut retransmits: Vec<(usize, usize)> = Vec::new(); // (due after k segments, segment)
        for (k, &seg) in order.iter().enumerate() {
            let (start, end) = (seg * self.mss, ((seg + 1) * self.mss).min(total));
            let push = if end == total { flags::PSH } else { 0 };
            let t = TcpFields {
                seq: base.wrapping_add(start as u32),
                ack: peer,
                flags: flags::ACK | push,
                window: WINDOW,
                options: &[],
            };
            self.segment(tap, conn, s, t, &slice_parts(&msg, start, end))?;
            self.stats.data_segments += 1;
            if self.retransmit > 0.0 && self.rng.unit() < self.retransmit {
                retransmits.push((k + RETRANSMIT_LAG, seg));
            }
            rx.receive(start, end);
            unacked += 1;
            if unacked >= ACK_EVERY {
                self.pure_ack(tap, conn, r, base.wrapping_add(rx.contiguous as u32))?;
                acked = rx.contiguous;
                unacked = 0;
            }
            while let Some(pos) = retransmits.iter().position(|&(due, _)| due <= k) {
                let (_, seg) = retransmits.remove(pos);
                self.retransmit_segment(tap, conn, s, &msg, seg, total, base, peer)?;
            }
        }
        for (_, seg) in std::mem::take(&mut retransmits) {
            self.retransmit_segment(tap, conn, s, &msg, seg, total, base, peer)?;
        }
        if acked < total {
            self.pure_ack(tap, conn, r, base.wrapping_add(total as u32))?;
        }
        self.conns[conn].snd_nxt[s] = base.wrapping_add(total as u32);
        Ok(())
    }

    fn close(&mut self, tap: &mut Tap<W>, conn: ConnId) -> io::Result<()> {
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

impl TcpTransport {
    #[allow(clippy::too_many_arguments)]
    fn retransmit_segment<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        s: usize,
        msg: &[&[u8]; 3],
        seg: usize,
        total: usize,
        base: u32,
        peer: u32,
    ) -> io::Result<()> {
        let (start, end) = (seg * self.mss, ((seg + 1) * self.mss).min(total));
        let push = if end == total { flags::PSH } else { 0 };
        let t = TcpFields {
            seq: base.wrapping_add(start as u32),
            ack: peer,
            flags: flags::ACK | push,
            window: WINDOW,
            options: &[],
        };
        self.stats.retransmitted_segments += 1;
        self.segment(tap, conn, s, t, &slice_parts(msg, start, end))
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
        assert_eq!(p, [&b""[..], &b""[..], &b"ijklmn"[..]]);
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
