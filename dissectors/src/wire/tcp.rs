//! TCP header (RFC 9293 §3.1).

use super::{checksum as csum, ipv4::protocol, DecodeError};
use std::net::IpAddr;

/// Control bits (RFC 9293 §3.1).
pub mod flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ_NUM: Field = 4..8;
    pub const ACK_NUM: Field = 8..12;
    /// Data offset (high nibble of byte 12) and the control bits (byte 13).
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WIN_SIZE: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
}

pub const HEADER_LEN: usize = field::URGENT.end;
/// Largest header: data offset 15 words.
pub const MAX_HEADER_LEN: usize = 60;

/// TCP checksum over the pseudo header and `segment` (header + payload), with the
/// checksum field taken as zero. Returns the value to store.
pub fn checksum(src: IpAddr, dst: IpAddr, segment: &[u8]) -> u16 {
    let ph = csum::pseudo_header(src, dst, protocol::TCP, segment.len() as u32);
    let before = csum::sum(segment.get(..field::CHECKSUM.start).unwrap_or(segment));
    let after = csum::sum(segment.get(field::CHECKSUM.end..).unwrap_or(&[]));
    !csum::combine(&[ph, before, after])
}

#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap a buffer holding the whole TCP header (options included).
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), DecodeError> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(DecodeError::Truncated("tcp.truncated"));
        }
        let hl = usize::from(self.header_len());
        if hl < HEADER_LEN {
            return Err(DecodeError::Malformed("tcp.bad_header_length"));
        }
        if len < hl {
            return Err(DecodeError::Truncated("tcp.truncated"));
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
    pub fn seq_number(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::SEQ_NUM])
    }
    pub fn ack_number(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::ACK_NUM])
    }
    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::DATA_OFF] >> 4) * 4
    }
    /// The eight control bits (see `flags`).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }
    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }
    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }
    pub fn ack(&self) -> bool {
        self.flags() & flags::ACK != 0
    }
    pub fn window_len(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::WIN_SIZE])
    }
    pub fn checksum(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CHECKSUM])
    }
    pub fn urgent_at(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::URGENT])
    }
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.header_len())]
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[usize::from(self.header_len())..]
    }
    /// Verify against the pseudo header; the buffer must be the whole segment.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        checksum(src, dst, self.buffer.as_ref()) == self.checksum()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_dst_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_seq_number(&mut self, v: u32) {
        self.buffer.as_mut()[field::SEQ_NUM].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_ack_number(&mut self, v: u32) {
        self.buffer.as_mut()[field::ACK_NUM].copy_from_slice(&v.to_be_bytes());
    }
    /// Header length in bytes (multiple of 4, 20..=60).
    pub fn set_header_len(&mut self, len: u8) {
        self.buffer.as_mut()[field::DATA_OFF] = (len / 4) << 4;
    }
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    pub fn set_window_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::WIN_SIZE].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_urgent_at(&mut self, v: u16) {
        self.buffer.as_mut()[field::URGENT].copy_from_slice(&v.to_be_bytes());
    }
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = usize::from(self.header_len());
        &mut self.buffer.as_mut()[HEADER_LEN..hl]
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = usize::from(self.header_len());
        &mut self.buffer.as_mut()[hl..]
    }
    /// Compute and store the checksum; the buffer must be the whole segment.
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        let c = checksum(src, dst, self.buffer.as_ref());
        self.set_checksum(c);
    }
}

/// The meaning of a TCP segment. Options are carried raw (already padded to 4 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq_number: u32,
    pub ack_number: u32,
    pub flags: u8,
    pub window_len: u16,
    pub urgent_at: u16,
    /// Raw option bytes; length must be a multiple of 4 and at most 40.
    pub options: &'a [u8],
    pub payload: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parse a checked segment (checksum not verified: capture hosts offload it).
    pub fn parse(p: &Packet<&'a [u8]>) -> Result<Repr<'a>, DecodeError> {
        p.check_len()?;
        let data: &'a [u8] = p.buffer;
        let hl = usize::from(p.header_len());
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq_number: p.seq_number(),
            ack_number: p.ack_number(),
            flags: p.flags(),
            window_len: p.window_len(),
            urgent_at: p.urgent_at(),
            options: &data[HEADER_LEN..hl],
            payload: &data[hl..],
        })
    }

    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }

    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len()
    }

    /// Write header, options and payload with a correct checksum for `src`/`dst`. The
    /// packet must be exactly `buffer_len()` bytes (the checksum covers the whole buffer).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>, src: IpAddr, dst: IpAddr) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq_number(self.seq_number);
        p.set_ack_number(self.ack_number);
        p.set_header_len(self.header_len() as u8);
        p.set_flags(self.flags);
        p.set_window_len(self.window_len);
        p.set_checksum(0);
        p.set_urgent_at(self.urgent_at);
        p.options_mut().copy_from_slice(self.options);
        p.payload_mut()[..self.payload.len()].copy_from_slice(self.payload);
        p.fill_checksum(src, dst);
    }
}

/// TCP option kinds (RFC 9293 §3.2; RFC 7323 §2.2, §3.2; RFC 2018).
pub mod option_kind {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WINDOW_SCALE: u8 = 3;
    pub const SACK_PERMITTED: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMPS: u8 = 8;
}

/// One TCP option, as the options field lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpOption<'a> {
    EndOfList,
    NoOperation,
    MaxSegmentSize(u16),
    WindowScale(u8),
    SackPermitted,
    /// Any other kind: its data (after kind and length).
    Unknown { kind: u8, data: &'a [u8] },
}

impl<'a> TcpOption<'a> {
    /// The option at the start of `b` and the bytes it takes.
    pub fn parse(b: &'a [u8]) -> Result<(TcpOption<'a>, usize), DecodeError> {
        let bad = DecodeError::Malformed("tcp.bad_option");
        match *b.first().ok_or(bad)? {
            option_kind::END => return Ok((TcpOption::EndOfList, 1)),
            option_kind::NOP => return Ok((TcpOption::NoOperation, 1)),
            _ => {}
        }
        let len = usize::from(*b.get(1).ok_or(bad)?);
        let data = b.get(2..len.max(2)).filter(|_| len >= 2).ok_or(bad)?;
        let opt = match (b[0], data.len()) {
            (option_kind::MSS, 2) => TcpOption::MaxSegmentSize(u16::from_be_bytes([data[0], data[1]])),
            (option_kind::WINDOW_SCALE, 1) => TcpOption::WindowScale(data[0]),
            (option_kind::SACK_PERMITTED, 0) => TcpOption::SackPermitted,
            (option_kind::MSS | option_kind::WINDOW_SCALE | option_kind::SACK_PERMITTED, _) => return Err(bad),
            (kind, _) => TcpOption::Unknown { kind, data },
        };
        Ok((opt, len))
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        match *self {
            TcpOption::EndOfList => out.push(option_kind::END),
            TcpOption::NoOperation => out.push(option_kind::NOP),
            TcpOption::MaxSegmentSize(m) => {
                out.extend_from_slice(&[option_kind::MSS, 4]);
                out.extend_from_slice(&m.to_be_bytes());
            }
            TcpOption::WindowScale(s) => out.extend_from_slice(&[option_kind::WINDOW_SCALE, 3, s]),
            TcpOption::SackPermitted => out.extend_from_slice(&[option_kind::SACK_PERMITTED, 2]),
            TcpOption::Unknown { kind, data } => {
                out.extend_from_slice(&[kind, (2 + data.len()) as u8]);
                out.extend_from_slice(data);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SYN options Windows sends (MSS 1460, NOP, window scale 8) parse back to what was
    /// emitted; a truncated or mis-sized option is refused.
    #[test]
    fn options_round_trip() {
        let opts = [TcpOption::MaxSegmentSize(1460), TcpOption::NoOperation, TcpOption::WindowScale(8)];
        let mut b = Vec::new();
        for o in &opts {
            o.emit(&mut b);
        }
        assert_eq!(b, [2, 4, 0x05, 0xb4, 1, 3, 3, 8]);
        let mut at = 0;
        let mut back = Vec::new();
        while at < b.len() {
            let (o, n) = TcpOption::parse(&b[at..]).unwrap();
            back.push(o);
            at += n;
        }
        assert_eq!(back, opts);
        assert!(TcpOption::parse(&[2, 4, 5]).is_err());
        assert!(TcpOption::parse(&[3, 4, 8, 0]).is_err());
        assert!(TcpOption::parse(&[9, 1]).is_err());
        assert_eq!(TcpOption::parse(&[30, 3, 7]).unwrap(), (TcpOption::Unknown { kind: 30, data: &[7] }, 3));
    }

    use std::net::Ipv4Addr;

    // smb311-negotiate-contexts-zeek.pcap frame 1: 192.168.1.89:42598 → 192.168.1.21:445,
    // ACK with a timestamps option, checksum 0x3b00 (good per tshark).
    static SEGMENT: [u8; 32] = [
        0xa6, 0x66, 0x01, 0xbd, 0x47, 0x27, 0x5d, 0x14, 0x1f, 0x9e, 0xd9, 0x82, 0x80, 0x10, 0x01, 0xf5,
        0x3b, 0x00, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a, 0x28, 0xf9, 0x97, 0xa9, 0xda, 0x8b, 0xd5, 0x5a,
    ];
    static OPTIONS: [u8; 12] = [0x01, 0x01, 0x08, 0x0a, 0x28, 0xf9, 0x97, 0xa9, 0xda, 0x8b, 0xd5, 0x5a];

    fn src() -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 168, 1, 89))
    }
    fn dst() -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 168, 1, 21))
    }

    fn repr() -> Repr<'static> {
        Repr {
            src_port: 42598,
            dst_port: 445,
            seq_number: 0x47275d14,
            ack_number: 0x1f9ed982,
            flags: flags::ACK,
            window_len: 501,
            urgent_at: 0,
            options: &OPTIONS,
            payload: &[],
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&SEGMENT[..]).unwrap();
        assert_eq!(p.src_port(), 42598);
        assert_eq!(p.dst_port(), 445);
        assert_eq!(p.seq_number(), 0x47275d14);
        assert_eq!(p.ack_number(), 0x1f9ed982);
        assert_eq!(p.header_len(), 32);
        assert!(p.ack() && !p.syn() && !p.fin() && !p.rst());
        assert_eq!(p.window_len(), 501);
        assert_eq!(p.checksum(), 0x3b00);
        assert_eq!(p.urgent_at(), 0);
        assert_eq!(p.options(), &OPTIONS);
        assert!(p.payload().is_empty());
        assert!(p.verify_checksum(src(), dst()));
        assert!(!p.verify_checksum(dst(), IpAddr::V4(Ipv4Addr::new(192, 168, 1, 22))));
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 32];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_src_port(42598);
        p.set_dst_port(445);
        p.set_seq_number(0x47275d14);
        p.set_ack_number(0x1f9ed982);
        p.set_header_len(32);
        p.set_flags(flags::ACK);
        p.set_window_len(501);
        p.set_urgent_at(0);
        p.options_mut().copy_from_slice(&OPTIONS);
        p.fill_checksum(src(), dst());
        assert_eq!(buf, SEGMENT);
    }

    #[test]
    fn parse() {
        let p = Packet::new_checked(&SEGMENT[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0u8; 32];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]), src(), dst());
        assert_eq!(buf, SEGMENT);
    }

    #[test]
    fn emit_with_payload_verifies_over_ipv6() {
        let s: IpAddr = "2001:db8::1".parse().unwrap();
        let d: IpAddr = "2001:db8::2".parse().unwrap();
        let mut r = repr();
        r.payload = b"odd";
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]), s, d);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum(s, d));
        assert_eq!(p.payload(), b"odd");
        // Independent check: the one's-complement sum over pseudo header + segment is 0xffff.
        let ph = csum::pseudo_header(s, d, protocol::TCP, buf.len() as u32);
        assert_eq!(csum::combine(&[ph, csum::sum(&buf)]), 0xffff);
    }

    #[test]
    fn refuses_bad_headers() {
        assert_eq!(Packet::new_checked(&SEGMENT[..19]).unwrap_err(), DecodeError::Truncated("tcp.truncated"));
        assert_eq!(Packet::new_checked(&SEGMENT[..31]).unwrap_err(), DecodeError::Truncated("tcp.truncated"));
        let mut b = SEGMENT;
        b[12] = 0x40;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), DecodeError::Malformed("tcp.bad_header_length"));
    }
}
