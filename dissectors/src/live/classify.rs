//! Which frames are storage traffic: the user-space twin of `classify()` in
//! bpf/smbwire.bpf.c (keep the two in step). Used by the AF_PACKET backend.
//!
//! Storage traffic: TCP with either port in the configured set (445, 5445, ...), UDP to
//! 4791 (RoCEv2), EtherType 0x8915 (RoCEv1); over Ethernet with up to three 802.1Q/802.1ad
//! tags and Cisco MetaData headers (TrustSec's in-line SGT), IPv4 or IPv6 (with hop-by-hop,
//! routing, destination-options and fragment headers). Non-first IP fragments carry no ports
//! and never match. A remote mirror session's tunnel (GRE carrying Ethernet or IP: gretap,
//! ERSPAN I-III, either after Cisco MetaData; VXLAN, UDP to 4789 or 8472; GENEVE, UDP to
//! 6081) is looked into, two deep as `analyze` opens them (ERSPAN carried across a VXLAN
//! fabric): the innermost frame decides, and its flow is the flow.

use super::flows::{family, FlowKey, PROTO_BTH};
use super::{ETHERTYPE_ROCEV1, ROCEV2_UDP_PORT};

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
use crate::wire::cmd;
const ETHERTYPE_CMD: u16 = cmd::ETHERTYPE;
/// Tags and Cisco MetaData headers walked after the MACs, as the kernel program walks them.
const MAX_L2_TAGS: usize = crate::abi::u32_of(crate::abi::SMBWIRE_MAX_L2_TAGS) as usize;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_GRE: u8 = crate::wire::ipv4::protocol::GRE;
use crate::wire::gre::protocol::{ERSPAN_II as GRE_P_ERSPAN_II, ERSPAN_III as GRE_P_ERSPAN_III, TEB as GRE_P_TEB};
/// RFC 8200 4.1 extension headers that may precede TCP/UDP.
const NEXTHDR_HOP: u8 = 0;
const NEXTHDR_ROUTING: u8 = 43;
const NEXTHDR_FRAGMENT: u8 = 44;
const NEXTHDR_DEST: u8 = 60;
/// Tunnels looked into, one inside the other: as many as `wire::decode` opens (the kernel
/// program's `classify` opens as many).
const MAX_TUNNELS: u8 = crate::wire::MAX_TUNNEL_DEPTH;
/// The kernel program walks at most this many IPv6 extension headers.
const MAX_EXT_HEADERS: usize = 4;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn slice16(b: &[u8], at: usize, n: usize) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    out[..n].copy_from_slice(b.get(at..at + n)?);
    Some(out)
}

/// Returns the flow key when `frame` (Ethernet, VLAN tags in the data) is storage traffic.
pub fn classify(frame: &[u8], tcp_ports: &[u16]) -> Option<FlowKey> {
    inspect(frame, tcp_ports).key
}

/// What `inspect` learned about a frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inspection {
    /// The flow, when the frame is storage traffic.
    pub key: Option<FlowKey>,
    /// Length of the Ethernet..TCP/UDP headers when TCP or UDP was reached, else 0: what
    /// every segment of a GRO/GSO frame repeats on the wire.
    pub header_len: usize,
    /// Where a TCP segment of storage traffic lies in its direction's sequence space.
    pub tcp: Option<TcpSpan>,
}

/// A TCP segment's place in its direction's sequence space (RFC 9293 3.4): it starts at
/// `seq` and occupies `len` sequence numbers (its payload, by the IP header's length, so
/// whatever the capture cut off, plus one each for SYN and FIN).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSpan {
    pub seq: u32,
    pub len: u32,
}

impl TcpSpan {
    /// The sequence number after the segment.
    pub fn end(&self) -> u32 {
        self.seq.wrapping_add(self.len)
    }
}

/// Where the headers end, and a TCP segment's span (`match_at` fills them in).
#[derive(Default)]
struct Layout {
    header_len: usize,
    tcp: Option<TcpSpan>,
}

/// `classify`, plus the header length and a TCP segment's span.
pub fn inspect(frame: &[u8], tcp_ports: &[u16]) -> Inspection {
    let mut layout = Layout::default();
    let mut found = match_frame(frame, 0, None, tcp_ports, &mut layout);
    // Two tunnels deep, as `wire::decode` opens them; a third is not storage traffic.
    for _ in 0..MAX_TUNNELS {
        let Found::Tunnel(at, ethertype) = found else { break };
        layout = Layout::default();
        found = match_frame(frame, at, ethertype, tcp_ports, &mut layout);
    }
    let key = match found {
        Found::Storage(key) => Some(key),
        _ => None,
    };
    Inspection { key, header_len: layout.header_len, tcp: key.and(layout.tcp) }
}

/// What `match_frame` found.
enum Found {
    Storage(FlowKey),
    /// A tunnel: its inner frame's offset, and its EtherType when it starts at IP.
    Tunnel(usize, Option<u16>),
    Nothing,
}

/// The EtherType of the IP packet at `off`, by its version.
fn ip_ethertype(frame: &[u8], off: usize) -> Option<u16> {
    match *frame.get(off)? >> 4 {
        4 => Some(ETHERTYPE_IPV4),
        6 => Some(ETHERTYPE_IPV6),
        _ => None,
    }
}

/// The tunnel in the IP payload at `off` (protocol `l4`), as `tunnel_at` in the kernel program.
fn tunnel_at(frame: &[u8], l4: u8, off: usize) -> Option<(usize, Option<u16>)> {
    if l4 == PROTO_UDP {
        let port = be16(frame, off + 2)?;
        if port == crate::wire::geneve::PORT {
            // Version 0; the frame after the options: Ethernet, or IP by its version.
            let h = frame.get(off + 8..off + 12)?;
            if h[0] >> 6 != crate::wire::geneve::VERSION {
                return None;
            }
            let inner = off + 16 + usize::from(h[0] & 0x3f) * 4;
            return match u16::from_be_bytes([h[2], h[3]]) {
                GRE_P_TEB => Some((inner, None)),
                ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Some((inner, Some(ip_ethertype(frame, inner)?))),
                _ => None,
            };
        }
        if !crate::wire::vxlan::is_port(port) || *frame.get(off + 8)? & 0x08 == 0 {
            return None;
        }
        return Some((off + 16, None));
    }
    if l4 != PROTO_GRE {
        return None;
    }
    let g = frame.get(off..off + 4)?;
    if g[1] & 7 != 0 || g[0] & 0x40 != 0 {
        return None;
    }
    let words = usize::from(g[0] & 0x80 != 0) + usize::from(g[0] & 0x20 != 0) + usize::from(g[0] & 0x10 != 0);
    let inner = off + 4 + 4 * words;
    match u16::from_be_bytes([g[2], g[3]]) {
        GRE_P_TEB => Some((inner, None)),
        GRE_P_ERSPAN_II if g[0] & 0x10 == 0 => Some((inner, None)),
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Some((inner, Some(ip_ethertype(frame, inner)?))),
        GRE_P_ERSPAN_II => (*frame.get(inner)? >> 4 == 1).then_some((inner + 8, None)),
        ETHERTYPE_CMD => {
            let next = cmd::Repr::parse(frame.get(inner..)?, cmd::Placement::Gre).ok()?.next;
            let at = inner + cmd::HEADER_LEN;
            match next {
                GRE_P_TEB => Some((at, None)),
                ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Some((at, Some(ip_ethertype(frame, at)?))),
                _ => None,
            }
        }
        GRE_P_ERSPAN_III => {
            let e = frame.get(inner..inner + 12)?;
            if e[0] >> 4 != 2 {
                return None;
            }
            let at = inner + 12 + if e[11] & 1 != 0 { 8 } else { 0 };
            match (e[10] >> 2) & 0x1f {
                0 => Some((at, None)),
                2 => Some((at, Some(ip_ethertype(frame, at)?))),
                _ => None,
            }
        }
        _ => None,
    }
}

fn match_frame(frame: &[u8], base: usize, ip_type: Option<u16>, tcp_ports: &[u16], layout: &mut Layout) -> Found {
    match match_at(frame, base, ip_type, tcp_ports, layout) {
        Some(found) => found,
        None => Found::Nothing,
    }
}

fn match_at(frame: &[u8], base: usize, ip_type: Option<u16>, tcp_ports: &[u16], layout: &mut Layout) -> Option<Found> {
    let (mut off, mut ethertype) = match ip_type {
        Some(t) => (base, t),
        None => (base + 14, be16(frame, base + 12)?),
    };
    for _ in 0..MAX_L2_TAGS {
        if ip_type.is_some() {
            break;
        }
        if ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
            ethertype = be16(frame, off + 2)?;
            off += 4;
        } else if ethertype == ETHERTYPE_CMD {
            ethertype = cmd::Repr::parse(frame.get(off..)?, cmd::Placement::Ethernet).ok()?.next;
            off += cmd::HEADER_LEN;
        }
    }
    let mut key = FlowKey::default();
    let mut l4;
    // Where the IP packet ends by its header (None: a length of 0, as a GSO/GRO frame
    // larger than 64 KiB carries; the frame's end then).
    let ip_end;
    match ethertype {
        ETHERTYPE_ROCEV1 => {
            // GRH (IPv6 layout): SGID at 8, DGID at 24.
            key.saddr = slice16(frame, off + 8, 16)?;
            key.daddr = slice16(frame, off + 24, 16)?;
            key.family = family::ROCEV1;
            key.proto = PROTO_BTH;
            return Some(Found::Storage(key));
        }
        ETHERTYPE_IPV4 => {
            let vihl = *frame.get(off)?;
            if vihl >> 4 != 4 || vihl & 0xf < 5 {
                return None;
            }
            if be16(frame, off + 6)? & 0x1fff != 0 {
                return None;
            }
            l4 = *frame.get(off + 9)?;
            ip_end = Some(be16(frame, off + 2)?).filter(|&n| n != 0).map(|n| off + usize::from(n));
            key.saddr = slice16(frame, off + 12, 4)?;
            key.daddr = slice16(frame, off + 16, 4)?;
            key.family = family::IPV4;
            off += usize::from(vihl & 0xf) * 4;
        }
        ETHERTYPE_IPV6 => {
            if *frame.get(off)? >> 4 != 6 {
                return None;
            }
            l4 = *frame.get(off + 6)?;
            ip_end = Some(be16(frame, off + 4)?).filter(|&n| n != 0).map(|n| off + 40 + usize::from(n));
            key.saddr = slice16(frame, off + 8, 16)?;
            key.daddr = slice16(frame, off + 24, 16)?;
            key.family = family::IPV6;
            off += 40;
            for _ in 0..MAX_EXT_HEADERS {
                match l4 {
                    NEXTHDR_FRAGMENT => {
                        if be16(frame, off + 2)? & 0xfff8 != 0 {
                            return None;
                        }
                        l4 = *frame.get(off)?;
                        off += 8;
                    }
                    NEXTHDR_HOP | NEXTHDR_ROUTING | NEXTHDR_DEST => {
                        let next = *frame.get(off)?;
                        off += (usize::from(*frame.get(off + 1)?) + 1) * 8;
                        l4 = next;
                    }
                    _ => break,
                }
            }
        }
        _ => return None,
    }
    if let Some((at, ip_type)) = tunnel_at(frame, l4, off) {
        return Some(Found::Tunnel(at, ip_type));
    }
    if l4 != PROTO_TCP && l4 != PROTO_UDP {
        return None;
    }
    key.sport = be16(frame, off)?;
    key.dport = be16(frame, off + 2)?;
    key.proto = l4;
    let matched = if l4 == PROTO_TCP {
        let doff = *frame.get(off + 12)? >> 4;
        if doff < 5 {
            return None; // RFC 9293 3.1: Data Offset counts at least the 5 fixed words
        }
        layout.header_len = off + usize::from(doff) * 4;
        // What the kernel program matches ends at the data offset: a frame cut before the
        // flags still matches, with no span.
        layout.tcp = frame.get(off..off + 14).map(|h| {
            let tcp = crate::wire::tcp::Packet::new_unchecked(h);
            let payload = ip_end.unwrap_or(frame.len()).saturating_sub(layout.header_len) as u32;
            TcpSpan { seq: tcp.seq_number(), len: payload + u32::from(tcp.syn()) + u32::from(tcp.fin()) }
        });
        tcp_ports.contains(&key.sport) || tcp_ports.contains(&key.dport)
    } else {
        layout.header_len = off + 8;
        key.dport == ROCEV2_UDP_PORT
    };
    matched.then_some(Found::Storage(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORTS: &[u16] = &[445, 5445];

    fn eth(ethertype: u16) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }

    fn ipv4(proto: u8, frag: u16, sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0x45, 0, 0, 40, 0, 1];
        f.extend_from_slice(&frag.to_be_bytes());
        f.extend_from_slice(&[64, proto, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2]);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0, 0, 0, 0, 0, 0, 0]);
        f
    }

    fn ipv6(next: u8, ext: &[u8], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0x60, 0, 0, 0, 0, 20, next, 64];
        f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        f.extend_from_slice(ext);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0, 0, 0, 0, 0, 0, 0]);
        f
    }

    #[test]
    fn tcp_445_either_direction() {
        let mut f = eth(0x0800);
        f.extend(ipv4(6, 0x4000, 50000, 445));
        let k = classify(&f, PORTS).unwrap();
        assert_eq!(k.to_string(), "198.18.0.1:50000 > 198.18.0.2:445 tcp");
        let mut r = eth(0x0800);
        r.extend(ipv4(6, 0, 445, 50000));
        assert!(classify(&r, PORTS).is_some());
        let mut other = eth(0x0800);
        other.extend(ipv4(6, 0, 50000, 8080));
        assert!(classify(&other, PORTS).is_none());
        assert!(classify(&other, &[8080]).is_some());
    }

    #[test]
    fn rocev2_only_to_4791() {
        let mut f = eth(0x0800);
        f.extend(ipv4(17, 0, 49152, 4791));
        assert_eq!(
            classify(&f, PORTS).unwrap().to_string(),
            "198.18.0.1:49152 > 198.18.0.2:4791 rocev2"
        );
        let mut r = eth(0x0800);
        r.extend(ipv4(17, 0, 4791, 49152));
        assert!(classify(&r, PORTS).is_none());
    }

    #[test]
    fn non_first_fragment_never_matches() {
        let mut f = eth(0x0800);
        f.extend(ipv4(6, 0x0010, 50000, 445));
        assert!(classify(&f, PORTS).is_none());
    }

    #[test]
    fn qinq_and_ipv6_with_extension_headers() {
        let mut f = eth(0x88a8);
        f.extend_from_slice(&[0, 10, 0x81, 0x00, 0, 20, 0x86, 0xdd]);
        // Hop-by-hop (8 bytes) then a first fragment (offset 0) then TCP.
        let ext = [44, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 1, 0, 0, 0, 7];
        f.extend(ipv6(0, &ext, 50000, 5445));
        let k = classify(&f, PORTS).unwrap();
        assert_eq!(k.family, family::IPV6);
        assert_eq!(k.dport, 5445);
        assert_eq!(
            k.to_string(),
            "[2001:db8::1]:50000 > [2001:db8::2]:5445 tcp"
        );
    }

    #[test]
    fn rocev1_keys_on_gids() {
        let mut f = eth(0x8915);
        let mut grh = vec![0x60, 0, 0, 0, 0, 12, 0x1b, 1];
        grh.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        grh.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        f.extend(grh);
        assert_eq!(
            classify(&f, PORTS).unwrap().to_string(),
            "fe80::1 > fe80::2 rocev1"
        );
    }

    #[test]
    fn truncated_and_garbage_frames_do_not_match() {
        let mut f = eth(0x0800);
        f.extend(ipv4(6, 0, 50000, 445));
        for n in 0..47 {
            assert!(classify(&f[..n], PORTS).is_none(), "prefix {n}");
        }
        assert!(classify(&f[..47], PORTS).is_some());
        assert_eq!(inspect(&f[..47], PORTS).tcp, None, "no flags: no span");
        assert_eq!(inspect(&f, PORTS).header_len, 14 + 20 + 20);
        assert_eq!(inspect(&f, PORTS).tcp, Some(TcpSpan { seq: 0, len: 0 }));
        // IPv6 extension header whose length points past the end.
        let mut g = eth(0x86dd);
        g.extend(ipv6(60, &[6, 255], 1, 445));
        assert!(classify(&g, PORTS).is_none());
        let mut bad_doff = eth(0x0800);
        bad_doff.extend(ipv4(6, 0, 50000, 445));
        bad_doff[46] = 0x40;
        assert!(classify(&bad_doff, PORTS).is_none());
        let mut bad_ihl = eth(0x0800);
        bad_ihl.extend(ipv4(6, 0, 50000, 445));
        bad_ihl[14] = 0x44;
        assert!(classify(&bad_ihl, PORTS).is_none());
    }

    /// A segment's span: its payload by the IP header's length (not what was captured of
    /// it), plus SYN and FIN; the frame's end when the length is 0 (a GSO frame over 64 KiB).
    #[test]
    fn tcp_span_counts_payload_by_ip_length_and_syn_fin() {
        let seg = |ip: Vec<u8>, flags: u8, extra: usize| {
            let mut f = eth(if ip[0] >> 4 == 4 { 0x0800 } else { 0x86dd });
            f.extend(ip);
            let at = f.len() - 20;
            f[at + 4..at + 8].copy_from_slice(&0xffff_fff0u32.to_be_bytes());
            f[at + 13] = flags;
            f.resize(f.len() + extra, 0);
            f
        };
        let mut v4 = ipv4(6, 0, 50000, 445);
        v4[2..4].copy_from_slice(&(40u16 + 1448).to_be_bytes());
        // Cut to 100 bytes of payload by a snap length: the span is the wire's.
        let span = inspect(&seg(v4.clone(), 0x10, 100), PORTS).tcp.unwrap();
        assert_eq!((span.seq, span.len, span.end()), (0xffff_fff0, 1448, 1448 - 16));
        assert_eq!(inspect(&seg(v4.clone(), 0x11, 100), PORTS).tcp.unwrap().len, 1449, "FIN");
        v4[2..4].copy_from_slice(&40u16.to_be_bytes());
        assert_eq!(inspect(&seg(v4.clone(), 0x12, 0), PORTS).tcp.unwrap().len, 1, "SYN");
        v4[2..4].copy_from_slice(&0u16.to_be_bytes());
        assert_eq!(inspect(&seg(v4, 0x10, 300), PORTS).tcp.unwrap().len, 300, "length 0: to the frame's end");
        let mut v6 = ipv6(6, &[], 50000, 445);
        v6[4..6].copy_from_slice(&(20u16 + 8948).to_be_bytes());
        assert_eq!(inspect(&seg(v6, 0x18, 0), PORTS).tcp.unwrap().len, 8948);
        // Not storage traffic: no span.
        let other = seg(ipv4(6, 0, 50000, 8080), 0x10, 10);
        assert_eq!(inspect(&other, PORTS).tcp, None);
    }

    /// Cisco MetaData (TrustSec's in-line SGT) after the MACs, alone, after a VLAN tag or
    /// after QinQ (three headers, as many as the kernel program walks); a fourth, or a form
    /// other than version 1 length 1, is not looked past.
    #[test]
    fn cisco_metadata_is_walked_like_a_tag() {
        let cmd = |next: u16| {
            let mut h = vec![0x89, 0x09, 1, 1, 0, 1, 0, 17];
            h.extend_from_slice(&next.to_be_bytes());
            h
        };
        let want = "198.18.0.1:50000 > 198.18.0.2:445 tcp";
        let mut alone = eth(0x8909);
        alone.extend_from_slice(&cmd(0x0800)[2..]);
        alone.extend(ipv4(6, 0x4000, 50000, 445));
        assert_eq!(classify(&alone, PORTS).unwrap().to_string(), want);
        assert_eq!(inspect(&alone, PORTS).header_len, 14 + 8 + 20 + 20);
        let mut vlan = eth(0x8100);
        vlan.extend_from_slice(&[0, 10]);
        vlan.extend(cmd(0x0800));
        vlan.extend(ipv4(6, 0x4000, 50000, 445));
        assert_eq!(classify(&vlan, PORTS).unwrap().to_string(), want);
        let mut qinq = eth(0x88a8);
        qinq.extend_from_slice(&[0, 10, 0x81, 0x00, 0, 20]);
        qinq.extend(cmd(0x0800));
        qinq.extend(ipv4(6, 0x4000, 50000, 445));
        assert_eq!(classify(&qinq, PORTS).unwrap().to_string(), want);
        let mut four = eth(0x88a8);
        four.extend_from_slice(&[0, 10, 0x81, 0x00, 0, 20]);
        four.extend(cmd(0x8909));
        four.extend_from_slice(&cmd(0x0800)[2..]);
        four.extend(ipv4(6, 0x4000, 50000, 445));
        assert!(classify(&four, PORTS).is_none());
        let mut v2 = alone.clone();
        v2[14] = 2;
        assert!(classify(&v2, PORTS).is_none());
        for n in 14..22 {
            assert!(classify(&alone[..n], PORTS).is_none(), "prefix {n}");
        }
        // In GRE: the EtherType first, then version 1, length 1, option, SGT.
        let mut inner = eth(0x0800);
        inner.extend(ipv4(6, 0x4000, 50000, 445));
        let gre_cmd = |next: u16| {
            let mut h = vec![0, 0, 0x89, 0x09];
            h.extend_from_slice(&next.to_be_bytes());
            h.extend_from_slice(&[1, 1, 0, 1, 0, 17]);
            h
        };
        let f = tunnelled(47, &gre_cmd(0x6558), &inner);
        let i = inspect(&f, PORTS);
        assert_eq!(i.key.unwrap().to_string(), want);
        assert_eq!(i.header_len, 14 + 20 + 12 + 14 + 20 + 20);
        assert_eq!(classify(&tunnelled(47, &gre_cmd(0x0800), &inner[14..]), PORTS).unwrap().to_string(), want);
        assert!(classify(&tunnelled(47, &gre_cmd(0x8847), &inner[14..]), PORTS).is_none());
        // An ERSPAN II session copying a link that tags in line.
        let erspan2 = [0x10, 0, 0x88, 0xbe, 0, 0, 0, 1, 0x10, 0, 0, 42, 0, 0, 0, 1];
        assert_eq!(classify(&tunnelled(47, &erspan2, &alone), PORTS).unwrap().to_string(), want);
        let mut bad = gre_cmd(0x0800);
        bad[6] = 2;
        assert!(classify(&tunnelled(47, &bad, &inner[14..]), PORTS).is_none());
    }

    /// `inner` (an Ethernet frame, or an IP packet) inside outer Ethernet / IPv4 / `tunnel`.
    fn tunnelled(proto: u8, tunnel: &[u8], inner: &[u8]) -> Vec<u8> {
        let mut f = eth(0x0800);
        f.extend_from_slice(&[0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0, 198, 19, 0, 1, 198, 19, 0, 2]);
        f.extend_from_slice(tunnel);
        f.extend_from_slice(inner);
        f
    }

    #[test]
    fn tunnels_are_looked_into_two_deep() {
        let mut inner = eth(0x0800);
        inner.extend(ipv4(6, 0x4000, 50000, 445));
        let want = "198.18.0.1:50000 > 198.18.0.2:445 tcp";
        let gretap = [0, 0, 0x65, 0x58];
        let erspan2 = [0x10, 0, 0x88, 0xbe, 0, 0, 0, 1, 0x10, 0, 0, 42, 0, 0, 0, 1];
        let erspan1 = [0, 0, 0x88, 0xbe];
        let vxlan = [0xc0, 0, 0x12, 0xb5, 0, 0, 0, 0, 0x08, 0, 0, 0, 0, 0, 42, 0];
        let mut vxlan_legacy = vxlan;
        vxlan_legacy[2..4].copy_from_slice(&8472u16.to_be_bytes());
        // GENEVE with one option (8 bytes), carrying Ethernet.
        let geneve = [0xc0, 0, 0x17, 0xc1, 0, 0, 0, 0, 0x02, 0, 0x65, 0x58, 0, 0, 42, 0, 1, 2, 1, 1, 0, 0, 0, 7];
        for (proto, tunnel) in [(47u8, &gretap[..]), (47, &erspan2[..]), (47, &erspan1[..]), (17, &vxlan[..]), (17, &vxlan_legacy[..]), (17, &geneve[..])] {
            let f = tunnelled(proto, tunnel, &inner);
            let i = inspect(&f, PORTS);
            assert_eq!(i.key.unwrap().to_string(), want, "{tunnel:?}");
            assert_eq!(i.header_len, 14 + 20 + tunnel.len() + 14 + 20 + 20, "{tunnel:?}");
        }
        // ERSPAN III carrying the IP packet itself (frame type 2), GRE carrying IPv4.
        let erspan3_ip = [0x10, 0, 0x22, 0xeb, 0, 0, 0, 1, 0x20, 0, 0, 42, 0, 0, 0, 5, 0, 0, 2 << 2, 0];
        let ip = ipv4(6, 0x4000, 50000, 445);
        assert_eq!(classify(&tunnelled(47, &erspan3_ip, &ip), PORTS).unwrap().to_string(), want);
        assert_eq!(classify(&tunnelled(47, &[0x20, 0, 8, 0, 0, 0, 0, 9], &ip), PORTS).unwrap().to_string(), want);
        // GENEVE carrying IPv4 without options; another GENEVE version, or a payload of
        // another protocol, is not looked into.
        let geneve_ip = [0xc0, 0, 0x17, 0xc1, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 42, 0];
        assert_eq!(classify(&tunnelled(17, &geneve_ip, &ip), PORTS).unwrap().to_string(), want);
        let mut v1 = geneve_ip;
        v1[8] = 0x40;
        assert!(classify(&tunnelled(17, &v1, &ip), PORTS).is_none());
        let mut mpls = geneve_ip;
        mpls[10..12].copy_from_slice(&[0x88, 0x47]);
        assert!(classify(&tunnelled(17, &mpls, &ip), PORTS).is_none());
        // Not storage inside, a GRE not followed (MPLS, version 1).
        let mut other = eth(0x0800);
        other.extend(ipv4(6, 0x4000, 50000, 8080));
        assert!(classify(&tunnelled(47, &gretap, &other), PORTS).is_none());
        assert!(classify(&tunnelled(47, &[0, 0, 0x88, 0x47], &inner), PORTS).is_none());
        assert!(classify(&tunnelled(47, &[0x30, 1, 0x88, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0], &inner), PORTS).is_none());
        // ERSPAN II inside VXLAN (a mirror session across an overlay) is looked into, with the
        // headers of both; a third tunnel is not.
        let twice = tunnelled(17, &vxlan, &tunnelled(47, &erspan2, &inner));
        let i = inspect(&twice, PORTS);
        assert_eq!(i.key.unwrap().to_string(), want);
        assert_eq!(i.header_len, 14 + 20 + vxlan.len() + 14 + 20 + erspan2.len() + 14 + 20 + 20);
        assert_eq!(classify(&tunnelled(47, &gretap, &tunnelled(47, &gretap, &inner)), PORTS).unwrap().to_string(), want);
        let thrice = tunnelled(47, &gretap, &tunnelled(17, &vxlan, &tunnelled(47, &erspan2, &inner)));
        assert!(classify(&thrice, PORTS).is_none());
        let mut other_twice = tunnelled(17, &vxlan, &tunnelled(47, &gretap, &other));
        assert!(classify(&other_twice, PORTS).is_none());
        other_twice.truncate(14 + 20 + vxlan.len() + 14 + 20 + 2);
        assert!(classify(&other_twice, PORTS).is_none());
    }
}
