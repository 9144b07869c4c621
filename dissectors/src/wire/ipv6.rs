//! IPv6 fixed header (RFC 8200 §3) and the walk over extension headers (RFC 8200 §4).

use super::ipv4::protocol;
use super::DecodeError;
use std::net::Ipv6Addr;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
}

pub const HEADER_LEN: usize = field::DST_ADDR.end;
/// More extension headers than this is treated as malformed (a loop guard; RFC 8200 §4.1
/// recommends each appear at most once or twice).
pub const MAX_EXTENSION_HEADERS: usize = 8;

#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn addr(b: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(b);
    Ipv6Addr::from(a)
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap a buffer holding at least the 40-byte fixed header of version 6. The payload
    /// may be shorter than the payload length (snaplen).
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), DecodeError> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(DecodeError::Truncated("ipv6.truncated"));
        }
        if self.version() != 6 {
            return Err(DecodeError::Malformed("ipv6.bad_version"));
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }
    pub fn traffic_class(&self) -> u8 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        (b[0] << 4) | (b[1] >> 4)
    }
    pub fn flow_label(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([0, b[1] & 0x0f, b[2], b[3]])
    }
    pub fn payload_len(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::LENGTH])
    }
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    pub fn src_addr(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[field::SRC_ADDR])
    }
    pub fn dst_addr(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[field::DST_ADDR])
    }
    /// End of the packet within the buffer: 40 + payload length, or the buffer end when
    /// the capture is shorter, or when the payload length is 0 (jumbogram / TSO capture).
    pub fn end(&self) -> usize {
        let len = self.buffer.as_ref().len();
        match usize::from(self.payload_len()) {
            0 => len,
            pl => (HEADER_LEN + pl).min(len),
        }
    }
    /// Captured payload (extension headers included), without link padding.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.end()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let v = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
    }
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// Where the upper-layer header starts after the extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpperLayer {
    /// Protocol number of the upper layer (TCP 6, UDP 17, ICMPv6 58, No Next Header 59...).
    pub next_header: u8,
    /// Offset of the upper-layer header from the start of `payload`.
    pub offset: usize,
    /// Fragment header seen: `(fragment offset in bytes, more fragments)`.
    pub fragment: Option<(u16, bool)>,
}

/// Skip hop-by-hop, routing, fragment, destination options and AH headers (RFC 8200 §4.3-4.6,
/// RFC 4302 §2.2 for AH's length in 4-octet units). ESP and unknown headers end the walk;
/// a non-first fragment ends it too (what follows is not an upper-layer header).
pub fn skip_extension_headers(mut next_header: u8, payload: &[u8]) -> Result<UpperLayer, DecodeError> {
    let mut offset = 0usize;
    let mut fragment = None;
    for _ in 0..=MAX_EXTENSION_HEADERS {
        let len = match next_header {
            protocol::HOP_BY_HOP | protocol::IPV6_ROUTING | protocol::IPV6_DEST_OPTS => {
                let h = payload.get(offset..offset + 2).ok_or(DecodeError::Truncated("ipv6.extension_truncated"))?;
                (usize::from(h[1]) + 1) * 8
            }
            protocol::IPV6_FRAGMENT => {
                let h = payload.get(offset..offset + 8).ok_or(DecodeError::Truncated("ipv6.extension_truncated"))?;
                let off_m = be16(&h[2..4]);
                fragment = Some((off_m & 0xfff8, off_m & 1 != 0));
                8
            }
            protocol::AH => {
                let h = payload.get(offset..offset + 2).ok_or(DecodeError::Truncated("ipv6.extension_truncated"))?;
                (usize::from(h[1]) + 2) * 4
            }
            _ => return Ok(UpperLayer { next_header, offset, fragment }),
        };
        if payload.len() < offset + len {
            return Err(DecodeError::Truncated("ipv6.extension_truncated"));
        }
        next_header = payload[offset];
        offset += len;
        if let Some((frag_off, _)) = fragment {
            if frag_off != 0 {
                return Ok(UpperLayer { next_header, offset, fragment });
            }
        }
    }
    Err(DecodeError::Malformed("ipv6.too_many_extension_headers"))
}

/// The meaning of an IPv6 fixed header (extension headers are not represented).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_addr: Ipv6Addr,
    pub dst_addr: Ipv6Addr,
    pub next_header: u8,
    pub payload_len: usize,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, DecodeError> {
        p.check_len()?;
        Ok(Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: usize::from(p.payload_len()),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the 40-byte header; `payload_len` must fit 16 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_version_tc_flow(self.traffic_class, self.flow_label);
        p.set_payload_len(self.payload_len as u16);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // smb311-ms-fasod-example1.pcapng frame 69: IPv6 header of an mDNS datagram, then the
    // first 4 UDP bytes.
    static PACKET: [u8; 44] = [
        0x60, 0x0d, 0xd8, 0x80, 0x00, 0x25, 0x11, 0x01, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0xb0, 0x0c, 0x06, 0x99, 0x2a, 0xcb, 0x8e, 0x78, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xfb, 0x14, 0xe9, 0x14, 0xe9,
    ];

    // rdma-rocev2-rc-send.pcap frame 1: hop-by-hop options (router alert) before ICMPv6.
    static HOPOPTS: [u8; 52] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x24, 0x00, 0x01, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x71, 0x91, 0x1f, 0x2d, 0x83, 0x9a, 0x20, 0x7c, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x16, 0x3a, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00,
        0x8f, 0x00, 0x1b, 0x1e,
    ];

    fn src() -> Ipv6Addr {
        "fe80::b00c:699:2acb:8e78".parse().unwrap()
    }

    fn repr() -> Repr {
        Repr {
            src_addr: src(),
            dst_addr: "ff02::fb".parse().unwrap(),
            next_header: protocol::UDP,
            payload_len: 37,
            hop_limit: 1,
            traffic_class: 0,
            flow_label: 0x0dd880,
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0);
        assert_eq!(p.flow_label(), 0x0dd880);
        assert_eq!(p.payload_len(), 37);
        assert_eq!(p.next_header(), protocol::UDP);
        assert_eq!(p.hop_limit(), 1);
        assert_eq!(p.src_addr(), src());
        assert_eq!(p.dst_addr(), "ff02::fb".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &[0x14, 0xe9, 0x14, 0xe9]);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 44];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_version_tc_flow(0, 0x0dd880);
        p.set_payload_len(37);
        p.set_next_header(protocol::UDP);
        p.set_hop_limit(1);
        p.set_src_addr(src());
        p.set_dst_addr("ff02::fb".parse().unwrap());
        p.payload_mut().copy_from_slice(&[0x14, 0xe9, 0x14, 0xe9]);
        assert_eq!(buf, PACKET);
    }

    #[test]
    fn parse() {
        assert_eq!(Repr::parse(&Packet::new_checked(&PACKET[..]).unwrap()).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0u8; 40];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..], &PACKET[..40]);
    }

    #[test]
    fn hop_by_hop_is_skipped() {
        let p = Packet::new_checked(&HOPOPTS[..]).unwrap();
        let up = skip_extension_headers(p.next_header(), p.payload()).unwrap();
        assert_eq!(up, UpperLayer { next_header: protocol::ICMPV6, offset: 8, fragment: None });
    }

    #[test]
    fn fragments() {
        // Fragment header (next = TCP), offset 0 with M set, then offset 1448.
        let first = [protocol::TCP, 0, 0x00, 0x01, 0, 0, 0, 1, 0xaa];
        let up = skip_extension_headers(protocol::IPV6_FRAGMENT, &first).unwrap();
        assert_eq!(up, UpperLayer { next_header: protocol::TCP, offset: 8, fragment: Some((0, true)) });
        let later = [protocol::TCP, 0, 0x05, 0xa8, 0, 0, 0, 1, 0xaa];
        let up = skip_extension_headers(protocol::IPV6_FRAGMENT, &later).unwrap();
        assert_eq!(up.fragment, Some((1448, false)));
    }

    #[test]
    fn refuses_bad_headers() {
        assert_eq!(Packet::new_checked(&PACKET[..39]).unwrap_err(), DecodeError::Truncated("ipv6.truncated"));
        let mut b = PACKET;
        b[0] = 0x40;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), DecodeError::Malformed("ipv6.bad_version"));
        // Hop-by-hop claiming 16 bytes with 8 present.
        let mut h = HOPOPTS;
        h[41] = 1;
        let p = Packet::new_checked(&h[..48]).unwrap();
        assert_eq!(
            skip_extension_headers(p.next_header(), p.payload()).unwrap_err(),
            DecodeError::Truncated("ipv6.extension_truncated")
        );
        // A chain of destination-options headers pointing at each other.
        let chain = [protocol::IPV6_DEST_OPTS, 0, 0, 0, 0, 0, 0, 0].repeat(20);
        assert_eq!(
            skip_extension_headers(protocol::IPV6_DEST_OPTS, &chain).unwrap_err(),
            DecodeError::Malformed("ipv6.too_many_extension_headers")
        );
    }
}
