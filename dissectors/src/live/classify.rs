//! Which frames are storage traffic: the user-space twin of `classify()` in
//! bpf/smbwire.bpf.c (keep the two in step). Used by the AF_PACKET backend.
//!
//! Storage traffic: TCP with either port in the configured set (445, 5445, ...), UDP to
//! 4791 (RoCEv2), EtherType 0x8915 (RoCEv1); over Ethernet with up to two 802.1Q/802.1ad
//! tags, IPv4 or IPv6 (with hop-by-hop, routing, destination-options and fragment headers).
//! Non-first IP fragments carry no ports and never match.

use super::flows::{family, FlowKey, PROTO_BTH};
use super::{ETHERTYPE_ROCEV1, ROCEV2_UDP_PORT};

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
/// RFC 8200 4.1 extension headers that may precede TCP/UDP.
const NEXTHDR_HOP: u8 = 0;
const NEXTHDR_ROUTING: u8 = 43;
const NEXTHDR_FRAGMENT: u8 = 44;
const NEXTHDR_DEST: u8 = 60;
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
}

/// `classify`, plus the header length.
pub fn inspect(frame: &[u8], tcp_ports: &[u16]) -> Inspection {
    let mut header_len = 0;
    let key = match_frame(frame, tcp_ports, &mut header_len);
    Inspection { key, header_len }
}

fn match_frame(frame: &[u8], tcp_ports: &[u16], header_len: &mut usize) -> Option<FlowKey> {
    let mut off = 14;
    let mut ethertype = be16(frame, 12)?;
    for _ in 0..2 {
        if ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
            ethertype = be16(frame, off + 2)?;
            off += 4;
        }
    }
    let mut key = FlowKey::default();
    let mut l4;
    match ethertype {
        ETHERTYPE_ROCEV1 => {
            // GRH (IPv6 layout): SGID at 8, DGID at 24.
            key.saddr = slice16(frame, off + 8, 16)?;
            key.daddr = slice16(frame, off + 24, 16)?;
            key.family = family::ROCEV1;
            key.proto = PROTO_BTH;
            return Some(key);
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
        *header_len = off + usize::from(doff) * 4;
        tcp_ports.contains(&key.sport) || tcp_ports.contains(&key.dport)
    } else {
        *header_len = off + 8;
        key.dport == ROCEV2_UDP_PORT
    };
    matched.then_some(key)
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
        assert_eq!(inspect(&f, PORTS).header_len, 14 + 20 + 20);
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
}
