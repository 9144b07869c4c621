//! Ethernet II / IPv4 or IPv6 / TCP frames for the synthesizer, emitted through the
//! `smbwire_dissectors::wire` views (`ethernet::Repr`, `ipv4::Repr`, `ipv6::Repr`, `tcp::Repr`),
//! which also fill the checksums.

use smbwire_dissectors::rdma::{cm, ib};
use smbwire_dissectors::wire::{erspan, ethernet, geneve, gre, ipv4, ipv6, tcp, udp, vxlan};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const ETHERNET_HEADER_LEN: usize = ethernet::HEADER_LEN;
pub const IPV4_HEADER_LEN: usize = ipv4::HEADER_LEN;
pub const TCP_HEADER_LEN: usize = tcp::HEADER_LEN;
/// Ethernet + IPv4 + TCP without options.
pub const HEADERS_LEN: usize = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + TCP_HEADER_LEN;
/// Minimum Ethernet frame without FCS (IEEE 802.3 clause 3.2.8): shorter frames are padded.
const MIN_FRAME_LEN: usize = 60;
/// Windows' default IPv4 TTL.
const TTL: u8 = 128;

pub use tcp::flags;

/// One end of a TCP connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub mac: [u8; 6],
    pub ip: IpAddr,
    pub port: u16,
}

/// The TCP header fields the synthesizer varies.
#[derive(Clone, Copy, Debug)]
pub struct TcpFields<'a> {
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    /// Options, already padded to a multiple of 4 bytes.
    pub options: &'a [u8],
}

/// Builds frames into reusable buffers (no allocation per frame).
#[derive(Default)]
pub struct FrameBuilder {
    frame: Vec<u8>,
    payload: Vec<u8>,
}

/// An untagged Ethernet II header from `src` to `dst`.
fn eth_header(src: &Endpoint, dst: &Endpoint, ethertype: u16) -> ethernet::Repr {
    ethernet::Repr {
        src_addr: ethernet::Address(src.mac),
        dst_addr: ethernet::Address(dst.mac),
        tags: [None, None],
        ethertype,
    }
}

/// Sizes `frame` for an Ethernet II / IPv4 (or IPv6, by the addresses) frame from `src` to
/// `dst` carrying `l4_len` bytes of protocol `next_header` (padded to the minimum frame
/// length) and writes the two headers, the IPv4 checksum filled in (IPv6: `ip_id` unused,
/// `dscp_ecn` is the Traffic Class, no flow label). Returns where the layer-4 header goes and
/// the frame's length before padding.
fn eth_ip(
    frame: &mut Vec<u8>,
    src: &Endpoint,
    dst: &Endpoint,
    next_header: u8,
    l4_len: usize,
    ip_id: u16,
    dscp_ecn: u8,
) -> (usize, usize) {
    let v4 = match (src.ip, dst.ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Some(ipv4::Repr {
            src_addr: s,
            dst_addr: d,
            next_header,
            payload_len: l4_len,
            hop_limit: TTL,
            ident: ip_id,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            dscp_ecn,
        }),
        _ => None,
    };
    let v6 = ipv6::Repr {
        src_addr: v6(src.ip),
        dst_addr: v6(dst.ip),
        next_header,
        payload_len: l4_len,
        hop_limit: TTL,
        traffic_class: dscp_ecn,
        flow_label: 0,
    };
    let (ethertype, ip_len) = match &v4 {
        Some(ip) => (ethernet::ethertype::IPV4, ip.buffer_len()),
        None => (ethernet::ethertype::IPV6, v6.buffer_len()),
    };
    let eth = eth_header(src, dst, ethertype);
    let ip_at = eth.header_len();
    let l4_at = ip_at + ip_len;
    let len = l4_at + l4_len;
    frame.clear();
    frame.resize(len.max(MIN_FRAME_LEN), 0);
    eth.emit(&mut ethernet::Packet::new_unchecked(&mut frame[..]));
    match v4 {
        Some(ip) => ip.emit(&mut ipv4::Packet::new_unchecked(&mut frame[ip_at..len])),
        None => v6.emit(&mut ipv6::Packet::new_unchecked(&mut frame[ip_at..len])),
    }
    (l4_at, len)
}

/// `ip` as IPv6 (an IPv4 address in its IPv4-mapped form).
fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

impl FrameBuilder {
    /// The concatenated `parts` followed by `trailer_len` zero bytes, in the reused buffer.
    fn stage_payload(&mut self, parts: &[&[u8]], trailer_len: usize) {
        self.payload.clear();
        for p in parts {
            self.payload.extend_from_slice(p);
        }
        self.payload.resize(self.payload.len() + trailer_len, 0);
    }

    /// One Ethernet/IPv4/TCP frame from `src` to `dst` whose TCP payload is the
    /// concatenation of `payload` parts, with both checksums filled in.
    pub fn tcp_frame(
        &mut self,
        src: &Endpoint,
        dst: &Endpoint,
        ip_id: u16,
        t: &TcpFields,
        payload: &[&[u8]],
    ) -> &[u8] {
        self.stage_payload(payload, 0);
        let seg = tcp::Repr {
            src_port: src.port,
            dst_port: dst.port,
            seq_number: t.seq,
            ack_number: t.ack,
            flags: t.flags,
            window_len: t.window,
            urgent_at: 0,
            options: t.options,
            payload: &self.payload,
        };
        let (tcp_at, len) = eth_ip(&mut self.frame, src, dst, ipv4::protocol::TCP, seg.buffer_len(), ip_id, 0);
        seg.emit(
            &mut tcp::Packet::new_unchecked(&mut self.frame[tcp_at..len]),
            src.ip,
            dst.ip,
        );
        &self.frame
    }

    /// One Ethernet/IPv4 (or IPv6) /UDP frame whose UDP payload is the concatenation of `payload`
    /// parts followed by `trailer_len` zero bytes the caller fills in afterwards (the
    /// RoCEv2 ICRC). The UDP checksum is 0, "not computed" (RFC 768), as RoCEv2 senders
    /// send it (annex A17.4.2 leaves it to the sender; the ICRC protects the packet).
    /// Returns the frame (its IP header after the Ethernet header).
    #[allow(clippy::too_many_arguments)]
    pub fn udp_frame(
        &mut self,
        src: &Endpoint,
        dst: &Endpoint,
        ip_id: u16,
        dscp_ecn: u8,
        payload: &[&[u8]],
        trailer_len: usize,
    ) -> &mut [u8] {
        self.stage_payload(payload, trailer_len);
        let dgram = udp::Repr {
            src_port: src.port,
            dst_port: dst.port,
            payload: &self.payload,
        };
        let (udp_at, len) = eth_ip(&mut self.frame, src, dst, ipv4::protocol::UDP, dgram.buffer_len(), ip_id, dscp_ecn);
        let mut u = udp::Packet::new_unchecked(&mut self.frame[udp_at..len]);
        dgram.emit(&mut u, src.ip, dst.ip);
        u.set_checksum(0);
        &mut self.frame[..]
    }

    /// One RoCEv1 frame (IBTA vol. 1 annex A16): Ethernet with EtherType 0x8915, then the
    /// GRH, then the concatenation of `payload` parts (BTH onwards) followed by
    /// `trailer_len` zero bytes the caller fills in afterwards (the ICRC). The GIDs are the
    /// IPv4-mapped IPv6 addresses of the two ends (::ffff:a.b.c.d), the GID form RoCE
    /// adapters give an IPv4-configured port. Returns the whole frame; the GRH starts at
    /// `ETHERNET_HEADER_LEN`, and is `ib::GRH_LEN` bytes long.
    pub fn roce_v1_frame(
        &mut self,
        src: &Endpoint,
        dst: &Endpoint,
        grh: GrhFields,
        payload: &[&[u8]],
        trailer_len: usize,
    ) -> &mut [u8] {
        self.stage_payload(payload, trailer_len);
        let gid = |ip: IpAddr| Ipv6Addr::from(cm::ip_gid(ip));
        let hdr = ipv6::Repr {
            src_addr: gid(src.ip),
            dst_addr: gid(dst.ip),
            next_header: ib::GRH_NEXT_HEADER_BTH,
            payload_len: self.payload.len(),
            hop_limit: grh.hop_limit,
            traffic_class: grh.traffic_class,
            flow_label: grh.flow_label,
        };
        let eth = eth_header(src, dst, ethernet::ethertype::ROCE_V1);
        let grh_at = eth.header_len();
        let body_at = grh_at + hdr.buffer_len();
        let len = body_at + self.payload.len();
        self.frame.clear();
        self.frame.resize(len.max(MIN_FRAME_LEN), 0);
        eth.emit(&mut ethernet::Packet::new_unchecked(&mut self.frame[..]));
        hdr.emit(&mut ipv6::Packet::new_unchecked(
            &mut self.frame[grh_at..len],
        ));
        self.frame[body_at..len].copy_from_slice(&self.payload);
        &mut self.frame[..]
    }
}

/// The GRH fields the RoCEv1 synthesizer varies (the ones the ICRC does not cover).
#[derive(Clone, Copy, Debug)]
pub struct GrhFields {
    pub traffic_class: u8,
    pub flow_label: u32,
    pub hop_limit: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Straightforward RFC 1071 over 16-bit words, to check the fast path against.
    fn reference_sum(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for c in data.chunks(2) {
            acc += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
        while acc >> 16 != 0 {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn checksums_verify_to_zero() {
        let a = Endpoint {
            mac: [2, 0, 0, 0, 0, 1],
            ip: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
            port: 50000,
        };
        let b = Endpoint {
            mac: [2, 0, 0, 0, 0, 2],
            ip: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
            port: 445,
        };
        let mut fb = FrameBuilder::default();
        let t = TcpFields {
            seq: 1,
            ack: 2,
            flags: flags::ACK | flags::PSH,
            window: 100,
            options: &[],
        };
        let buf = fb
            .tcp_frame(&a, &b, 77, &t, &[b"hello", b" world!"])
            .to_vec();
        assert_eq!(buf.len(), HEADERS_LEN + 12);
        let ip = &buf[14..34];
        assert_eq!(reference_sum(ip), 0xffff);
        let seg = &buf[34..];
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&v6(a.ip).octets()[12..]);
        pseudo.extend_from_slice(&v6(b.ip).octets()[12..]);
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&(seg.len() as u16).to_be_bytes());
        pseudo.extend_from_slice(seg);
        assert_eq!(reference_sum(&pseudo), 0xffff);
        assert_eq!(&buf[54..], b"hello world!");
    }

    #[test]
    fn ipv6_frames_carry_a_checksummed_segment() {
        let end = |last: u16, port: u16| Endpoint {
            mac: [2, 0, 0, 0, 0, last as u8],
            ip: IpAddr::V6(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, last)),
            port,
        };
        let (a, b) = (end(1, 50000), end(2, 445));
        let mut fb = FrameBuilder::default();
        let t = TcpFields { seq: 1, ack: 2, flags: flags::ACK | flags::PSH, window: 100, options: &[] };
        let buf = fb.tcp_frame(&a, &b, 77, &t, &[b"hello"]).to_vec();
        assert_eq!(u16::from_be_bytes([buf[12], buf[13]]), ethernet::ethertype::IPV6);
        assert_eq!(buf[14] >> 4, 6);
        assert_eq!(u16::from_be_bytes([buf[18], buf[19]]) as usize, TCP_HEADER_LEN + 5); // payload length
        assert_eq!(buf[20], 6); // next header: TCP
        let seg = &buf[54..];
        // RFC 8200 §8.1 pseudo-header: addresses, upper-layer length (32 bits), next header.
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&buf[22..54]);
        pseudo.extend_from_slice(&(seg.len() as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, 6]);
        pseudo.extend_from_slice(seg);
        assert_eq!(reference_sum(&pseudo), 0xffff);
        assert_eq!(&seg[TCP_HEADER_LEN..], b"hello");
    }

    #[test]
    fn short_frames_are_padded() {
        let a = Endpoint {
            mac: [2; 6],
            ip: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
            port: 1,
        };
        let mut fb = FrameBuilder::default();
        let t = TcpFields {
            seq: 0,
            ack: 0,
            flags: flags::ACK,
            window: 1,
            options: &[],
        };
        let buf = fb.tcp_frame(&a, &a, 0, &t, &[]).to_vec();
        assert_eq!(buf.len(), 60);
        assert_eq!(u16::from_be_bytes([buf[16], buf[17]]), 40); // IP total length excludes padding
    }
}

/// The 802.1Q/802.1ad tags a mirror port on a trunk delivers the frames with (`Spec::vlan`).
/// SMB Direct over RoCE runs in a tagged VLAN: priority flow control, which lossless RoCE
/// needs, is signalled by the tag's priority (Microsoft's guidance for SMB Direct: priority 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Vlan {
    /// Untagged.
    #[default]
    None,
    /// One customer tag (0x8100): VLAN 100, priority 3.
    Dot1q,
    /// A service tag (0x88a8, VLAN 200) around the customer tag (802.1ad, "QinQ").
    Qinq,
}

impl Vlan {
    pub fn from_name(name: &str) -> Result<Vlan, String> {
        Ok(match name {
            "none" => Vlan::None,
            "dot1q" => Vlan::Dot1q,
            "qinq" => Vlan::Qinq,
            other => return Err(format!("unknown vlan {other:?} (\"none\", \"dot1q\" or \"qinq\")")),
        })
    }

    /// The tags, outermost first.
    pub fn tags(self) -> [Option<ethernet::VlanTag>; 2] {
        let c = ethernet::VlanTag { tpid: ethernet::ethertype::VLAN, pcp: 3, dei: false, vid: 100 };
        let s = ethernet::VlanTag { tpid: ethernet::ethertype::QINQ, pcp: 3, dei: false, vid: 200 };
        match self {
            Vlan::None => [None, None],
            Vlan::Dot1q => [Some(c), None],
            Vlan::Qinq => [Some(s), Some(c)],
        }
    }
}

/// `frame` (an untagged Ethernet II frame) with `tags` put in after its addresses, written
/// into `out` through the engine's Ethernet encoder.
pub fn tag_frame(out: &mut Vec<u8>, frame: &[u8], tags: [Option<ethernet::VlanTag>; 2]) {
    let untagged = ethernet::Packet::new_unchecked(frame);
    let eth = ethernet::Repr {
        src_addr: untagged.src_addr(),
        dst_addr: untagged.dst_addr(),
        tags,
        ethertype: untagged.ethertype(),
    };
    let at = eth.header_len();
    out.clear();
    out.resize(at + frame.len() - ETHERNET_HEADER_LEN, 0);
    eth.emit(&mut ethernet::Packet::new_unchecked(&mut out[..]));
    out[at..].copy_from_slice(&frame[ETHERNET_HEADER_LEN..]);
}

/// How a remote mirror session delivers the frames to the capture point (`Spec::encap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Encap {
    /// As they were: a local mirror port.
    #[default]
    None,
    /// GRE, transparent Ethernet bridging (Linux `gretap`).
    Gretap,
    /// ERSPAN type I: GRE without a sequence number, no ERSPAN header.
    Erspan1,
    Erspan2,
    Erspan3,
    /// VXLAN, UDP port 4789.
    Vxlan,
    /// GENEVE, UDP port 6081, carrying Ethernet, with one option (as OVN adds its own).
    Geneve,
}

impl Encap {
    pub fn from_name(name: &str) -> Result<Encap, String> {
        Ok(match name {
            "none" => Encap::None,
            "gretap" => Encap::Gretap,
            "erspan1" => Encap::Erspan1,
            "erspan2" => Encap::Erspan2,
            "erspan3" => Encap::Erspan3,
            "vxlan" => Encap::Vxlan,
            "geneve" => Encap::Geneve,
            other => {
                return Err(format!(
                    "unknown encap {other:?} (\"none\", \"gretap\", \"erspan1\", \"erspan2\", \"erspan3\", \"vxlan\" or \"geneve\")"
                ))
            }
        })
    }
}

/// The remote mirror session's tunnel: wraps each mirrored frame in Ethernet / IPv4 (from
/// 198.19.0.1, the switch, to 198.19.0.2, the collector) and the session's headers, all
/// written through the engine's encoders.
pub struct Tunnel {
    kind: Encap,
    /// GRE sequence number (ERSPAN II and III), IPv4 identification.
    seq: u32,
    frame: Vec<u8>,
}

/// ERSPAN session ID and VXLAN network identifier of the synthetic session.
const SESSION: u16 = 42;

impl Tunnel {
    pub fn new(kind: Encap) -> Option<Tunnel> {
        (kind != Encap::None).then(|| Tunnel { kind, seq: 0, frame: Vec::new() })
    }

    /// `inner` as the collector captures it.
    pub fn wrap(&mut self, inner: &[u8], ts_ns: u64) -> &[u8] {
        let switch = Endpoint { mac: [0x02, 0, 0xc6, 0x13, 0, 1], ip: IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)), port: 49152 };
        let collector = Endpoint { mac: [0x02, 0, 0xc6, 0x13, 0, 2], ip: IpAddr::V4(Ipv4Addr::new(198, 19, 0, 2)), port: vxlan::PORT };
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        if self.kind == Encap::Vxlan {
            let mut header = [0u8; vxlan::HEADER_LEN];
            vxlan::Repr { vni: u32::from(SESSION) }.emit(&mut vxlan::Packet::new_unchecked(&mut header[..]));
            let mut b = FrameBuilder { frame: std::mem::take(&mut self.frame), payload: Vec::new() };
            b.udp_frame(&switch, &collector, seq as u16, 0, &[&header, inner], 0);
            self.frame = b.frame;
            return &self.frame;
        }
        if self.kind == Encap::Geneve {
            // One option: class 0x0102 (OVN's), type 0x01, one word of data (the sequence).
            let mut option = [0x01, 0x02, 0x01, 0x01, 0, 0, 0, 0];
            option[4..].copy_from_slice(&seq.to_be_bytes());
            let g = geneve::Repr { protocol: gre::protocol::TEB, vni: u32::from(SESSION), oam: false, critical: false, options: &option };
            let mut header = [0u8; geneve::HEADER_LEN + 8];
            g.emit(&mut geneve::Packet::new_unchecked(&mut header[..]));
            let to = Endpoint { port: geneve::PORT, ..collector };
            let mut b = FrameBuilder { frame: std::mem::take(&mut self.frame), payload: Vec::new() };
            b.udp_frame(&switch, &to, seq as u16, 0, &[&header, inner], 0);
            self.frame = b.frame;
            return &self.frame;
        }
        let (protocol, sequence, erspan) = match self.kind {
            Encap::Gretap => (gre::protocol::TEB, None, None),
            Encap::Erspan1 => (gre::protocol::ERSPAN_II, None, None),
            Encap::Erspan2 => (gre::protocol::ERSPAN_II, Some(seq), Some(erspan::VERSION_II)),
            _ => (gre::protocol::ERSPAN_III, Some(seq), Some(erspan::VERSION_III)),
        };
        let g = gre::Repr { protocol, key: None, sequence };
        let e = erspan.map(|version| erspan::Repr {
            version,
            vlan: 0,
            cos: 0,
            truncated: false,
            session_id: SESSION,
            index: 1,
            // Type III: microseconds (granularity 0 is 100 us in the draft; the value only
            // needs to be one a decoder reads past).
            timestamp: (ts_ns / 1_000) as u32,
            frame_type: erspan::FRAME_ETHERNET,
        });
        let e_len = e.map_or(0, |e| e.header_len());
        let l4_len = g.header_len() + e_len + inner.len();
        let (at, len) = eth_ip(&mut self.frame, &switch, &collector, ipv4::protocol::GRE, l4_len, seq as u16, 0);
        g.emit(&mut gre::Packet::new_unchecked(&mut self.frame[at..len]));
        let at = at + g.header_len();
        if let Some(e) = e {
            e.emit(&mut erspan::Packet::new_unchecked(&mut self.frame[at..len]));
        }
        self.frame[at + e_len..len].copy_from_slice(inner);
        &self.frame
    }
}
