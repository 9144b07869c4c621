//! UDP header (RFC 768).

use super::{checksum as csum, ipv4::protocol, DecodeError};
use std::net::IpAddr;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// UDP checksum over the pseudo header and `datagram` (header + payload) with the checksum
/// field taken as zero. A computed 0 is sent as 0xffff (RFC 768: 0 means "no checksum").
pub fn checksum(src: IpAddr, dst: IpAddr, datagram: &[u8]) -> u16 {
    let ph = csum::pseudo_header(src, dst, protocol::UDP, datagram.len() as u32);
    let before = csum::sum(datagram.get(..field::CHECKSUM.start).unwrap_or(datagram));
    let after = csum::sum(datagram.get(field::CHECKSUM.end..).unwrap_or(&[]));
    match !csum::combine(&[ph, before, after]) {
        0 => 0xffff,
        c => c,
    }
}

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

    /// Wrap a buffer holding the 8-byte header with a length field of at least 8. The
    /// payload may be shorter than the length field says (snaplen).
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), DecodeError> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(DecodeError::Truncated("udp.truncated"));
        }
        if usize::from(self.len()) < HEADER_LEN {
            return Err(DecodeError::Malformed("udp.bad_length"));
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn src_port(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::SRC_PORT])
    }
    pub fn dst_port(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::DST_PORT])
    }
    /// Length of header + payload (the UDP "Length" field).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::LENGTH])
    }
    pub fn checksum(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CHECKSUM])
    }
    /// Captured payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = usize::from(self.len()).min(b.len());
        &b[HEADER_LEN..end]
    }
    /// Verify against the pseudo header (buffer = whole datagram). 0 means "not computed".
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        let c = self.checksum();
        c == 0 || checksum(src, dst, &self.buffer.as_ref()[..usize::from(self.len()).min(self.buffer.as_ref().len())]) == c
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_dst_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
    /// Compute and store the checksum; the buffer must be the whole datagram.
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        let c = checksum(src, dst, self.buffer.as_ref());
        self.set_checksum(c);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    pub src_port: u16,
    pub dst_port: u16,
    pub payload: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parse a checked datagram; the payload is the captured part up to the length field.
    pub fn parse(p: &Packet<&'a [u8]>) -> Result<Repr<'a>, DecodeError> {
        p.check_len()?;
        let b: &'a [u8] = p.buffer;
        let end = usize::from(p.len()).min(b.len());
        Ok(Repr { src_port: p.src_port(), dst_port: p.dst_port(), payload: &b[HEADER_LEN..end] })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    /// Write the datagram with a correct checksum; the packet must be exactly `buffer_len()`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>, src: IpAddr, dst: IpAddr) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(self.buffer_len() as u16);
        p.set_checksum(0);
        p.payload_mut()[..self.payload.len()].copy_from_slice(self.payload);
        p.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // smb311-ms-fasod-example1.pcapng frame 69: mDNS over IPv6, checksum 0x0455 (good per tshark).
    static DATAGRAM: [u8; 37] = [
        0x14, 0xe9, 0x14, 0xe9, 0x00, 0x25, 0x04, 0x55, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x05, 0x53, 0x55, 0x54, 0x30, 0x31, 0x05, 0x6c, 0x6f, 0x63, 0x61, 0x6c,
        0x00, 0x00, 0x01, 0x00, 0x01,
    ];

    fn src() -> IpAddr {
        "fe80::b00c:699:2acb:8e78".parse().unwrap()
    }
    fn dst() -> IpAddr {
        "ff02::fb".parse().unwrap()
    }
    fn repr() -> Repr<'static> {
        Repr { src_port: 5353, dst_port: 5353, payload: &DATAGRAM[8..] }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!(p.src_port(), 5353);
        assert_eq!(p.dst_port(), 5353);
        assert_eq!(p.len(), 37);
        assert_eq!(p.checksum(), 0x0455);
        assert_eq!(p.payload(), &DATAGRAM[8..]);
        assert!(p.verify_checksum(src(), dst()));
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 37];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_src_port(5353);
        p.set_dst_port(5353);
        p.set_len(37);
        p.payload_mut().copy_from_slice(&DATAGRAM[8..]);
        p.fill_checksum(src(), dst());
        assert_eq!(buf, DATAGRAM);
    }

    #[test]
    fn parse() {
        let p = Packet::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0u8; 37];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]), src(), dst());
        assert_eq!(buf, DATAGRAM);
    }

    #[test]
    fn refuses_bad_headers() {
        assert_eq!(Packet::new_checked(&DATAGRAM[..7]).unwrap_err(), DecodeError::Truncated("udp.truncated"));
        let mut b = DATAGRAM;
        b[5] = 7;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), DecodeError::Malformed("udp.bad_length"));
        // Captured less than declared: the payload is what was captured.
        let p = Packet::new_checked(&DATAGRAM[..20]).unwrap();
        assert_eq!(p.payload(), &DATAGRAM[8..20]);
    }
}
