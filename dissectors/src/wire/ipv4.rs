//! IPv4 header (RFC 791 §3.1).

use super::{checksum as csum, DecodeError};
use std::net::Ipv4Addr;

/// IP protocol numbers (IANA) smbwire looks at.
pub mod protocol {
    pub const HOP_BY_HOP: u8 = 0;
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const IPV6_ROUTING: u8 = 43;
    pub const IPV6_FRAGMENT: u8 = 44;
    /// Generic Routing Encapsulation (RFC 2784).
    pub const GRE: u8 = 47;
    pub const ESP: u8 = 50;
    pub const AH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const IPV6_NO_NEXT: u8 = 59;
    pub const IPV6_DEST_OPTS: u8 = 60;
}

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
}

/// Length of a header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// Checksum of an IPv4 header (RFC 791: complement of the one's-complement sum with the
/// checksum field taken as zero). Returns the value to store in the checksum field.
pub fn checksum(header: &[u8]) -> u16 {
    let before = csum::sum(header.get(..field::CHECKSUM.start).unwrap_or(header));
    let after = csum::sum(header.get(field::CHECKSUM.end..).unwrap_or(&[]));
    !csum::combine(&[before, after])
}

/// A view of an IPv4 packet. The buffer may be shorter than the total length (snaplen):
/// `payload()` then returns the captured part only.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap a buffer whose header is complete and consistent. A payload shorter than the
    /// total length is accepted (snaplen); a total length of 0 (TSO capture) too.
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), DecodeError> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(DecodeError::Truncated("ipv4.truncated"));
        }
        if self.version() != 4 {
            return Err(DecodeError::Malformed("ipv4.bad_version"));
        }
        let hl = usize::from(self.header_len());
        if hl < HEADER_LEN {
            return Err(DecodeError::Malformed("ipv4.bad_header_length"));
        }
        if len < hl {
            return Err(DecodeError::Truncated("ipv4.truncated"));
        }
        let tl = usize::from(self.total_len());
        if tl != 0 && tl < hl {
            return Err(DecodeError::Malformed("ipv4.bad_total_length"));
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }
    pub fn total_len(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::LENGTH])
    }
    pub fn ident(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::IDENT])
    }
    pub fn dont_frag(&self) -> bool {
        be16(&self.buffer.as_ref()[field::FLG_OFF]) & 0x4000 != 0
    }
    pub fn more_frags(&self) -> bool {
        be16(&self.buffer.as_ref()[field::FLG_OFF]) & 0x2000 != 0
    }
    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (be16(&self.buffer.as_ref()[field::FLG_OFF]) & 0x1fff) << 3
    }
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    pub fn checksum(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CHECKSUM])
    }
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// Does the header checksum verify? (Often false on the sending host: checksum offload.)
    pub fn verify_checksum(&self) -> bool {
        let h = &self.buffer.as_ref()[..usize::from(self.header_len())];
        csum::sum(h) == 0xffff
    }
    /// End of the IP packet within the buffer: the total length, or the buffer end when
    /// the capture is shorter (snaplen) or the total length is 0 (TSO).
    pub fn end(&self) -> usize {
        let len = self.buffer.as_ref().len();
        match usize::from(self.total_len()) {
            0 => len,
            tl => tl.min(len),
        }
    }
    /// Captured payload, without link padding after the total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[usize::from(self.header_len())..self.end()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_version_and_header_len(&mut self, header_len: u8) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) & 0x0f);
    }
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = v;
    }
    pub fn set_total_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_ident(&mut self, v: u16) {
        self.buffer.as_mut()[field::IDENT].copy_from_slice(&v.to_be_bytes());
    }
    /// Flags and offset (offset in bytes, multiple of 8).
    pub fn set_flags_and_offset(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let v = (u16::from(dont_frag) << 14) | (u16::from(more_frags) << 13) | ((offset >> 3) & 0x1fff);
        self.buffer.as_mut()[field::FLG_OFF].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }
    /// Compute and store the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = usize::from(self.header_len());
        let c = checksum(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = usize::from(self.header_len());
        &mut self.buffer.as_mut()[hl..]
    }
}

/// The meaning of an IPv4 header (options are skipped on parse and never emitted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_addr: Ipv4Addr,
    pub dst_addr: Ipv4Addr,
    pub next_header: u8,
    /// Payload length declared by the total length.
    pub payload_len: usize,
    pub hop_limit: u8,
    pub ident: u16,
    pub dont_frag: bool,
    pub more_frags: bool,
    /// Fragment offset in bytes.
    pub frag_offset: u16,
    /// DSCP (high 6 bits) and ECN (low 2 bits).
    pub dscp_ecn: u8,
}

impl Repr {
    /// Parse a checked header. The checksum is not verified (capture hosts offload it);
    /// use `Packet::verify_checksum` when that matters.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, DecodeError> {
        p.check_len()?;
        let hl = usize::from(p.header_len());
        let payload_len = match usize::from(p.total_len()) {
            0 => p.buffer.as_ref().len() - hl,
            tl => tl - hl,
        };
        Ok(Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len,
            hop_limit: p.hop_limit(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset: p.frag_offset(),
            dscp_ecn: p.buffer.as_ref()[field::DSCP_ECN],
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write a 20-byte header with a correct checksum. `packet` must hold at least
    /// `HEADER_LEN` bytes; `payload_len` must fit in the 16-bit total length.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_version_and_header_len(HEADER_LEN as u8);
        p.set_dscp_ecn(self.dscp_ecn);
        p.set_total_len((HEADER_LEN + self.payload_len) as u16);
        p.set_ident(self.ident);
        p.set_flags_and_offset(self.dont_frag, self.more_frags, self.frag_offset);
        p.set_hop_limit(self.hop_limit);
        p.set_next_header(self.next_header);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        p.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // smb311-negotiate-contexts-zeek.pcap frame 1, IPv4 header (checksum good per tshark) and
    // the first 4 TCP bytes.
    static PACKET: [u8; 24] = [
        0x45, 0x00, 0x00, 0x34, 0x86, 0x26, 0x40, 0x00, 0x40, 0x06, 0x30, 0xdf, 0xc0, 0xa8, 0x01, 0x59,
        0xc0, 0xa8, 0x01, 0x15, 0xa6, 0x66, 0x01, 0xbd,
    ];

    fn repr() -> Repr {
        Repr {
            src_addr: Ipv4Addr::new(192, 168, 1, 89),
            dst_addr: Ipv4Addr::new(192, 168, 1, 21),
            next_header: protocol::TCP,
            payload_len: 32,
            hop_limit: 64,
            ident: 0x8626,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            dscp_ecn: 0,
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 52);
        assert_eq!(p.ident(), 0x8626);
        assert!(p.dont_frag() && !p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.next_header(), protocol::TCP);
        assert_eq!(p.checksum(), 0x30df);
        assert!(p.verify_checksum());
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 1, 89));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 1, 21));
        // Captured 24 of 52 bytes: the payload is the captured part.
        assert_eq!(p.payload(), &[0xa6, 0x66, 0x01, 0xbd]);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 24];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_version_and_header_len(20);
        p.set_dscp_ecn(0);
        p.set_total_len(52);
        p.set_ident(0x8626);
        p.set_flags_and_offset(true, false, 0);
        p.set_hop_limit(64);
        p.set_next_header(protocol::TCP);
        p.set_src_addr(Ipv4Addr::new(192, 168, 1, 89));
        p.set_dst_addr(Ipv4Addr::new(192, 168, 1, 21));
        p.fill_checksum();
        p.payload_mut().copy_from_slice(&[0xa6, 0x66, 0x01, 0xbd]);
        assert_eq!(buf, PACKET);
    }

    #[test]
    fn parse() {
        assert_eq!(Repr::parse(&Packet::new_checked(&PACKET[..]).unwrap()).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0u8; 20];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..], &PACKET[..20]);
    }

    #[test]
    fn checksum_fn_matches_capture() {
        assert_eq!(checksum(&PACKET[..20]), 0x30df);
    }

    #[test]
    fn padding_after_total_length_is_not_payload() {
        let mut b = PACKET.to_vec();
        b[3] = 22; // total length 22: two payload bytes, the rest is link padding
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload(), &[0xa6, 0x66]);
        assert_eq!(p.end(), 22);
    }

    #[test]
    fn refuses_bad_headers() {
        assert_eq!(Packet::new_checked(&PACKET[..19]).unwrap_err(), DecodeError::Truncated("ipv4.truncated"));
        let mut b = PACKET;
        b[0] = 0x65;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), DecodeError::Malformed("ipv4.bad_version"));
        b[0] = 0x44;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), DecodeError::Malformed("ipv4.bad_header_length"));
        b[0] = 0x46; // 24-byte header: fits exactly
        assert!(Packet::new_checked(&b[..]).is_ok());
        b[0] = 0x47; // 28-byte header in a 24-byte buffer
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), DecodeError::Truncated("ipv4.truncated"));
        let mut b = PACKET;
        b[3] = 10; // total length below the header length
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), DecodeError::Malformed("ipv4.bad_total_length"));
    }
}
