//! Generic Routing Encapsulation (RFC 2784, with the key and sequence number of RFC 2890):
//! how a remote mirror port (ERSPAN, `gretap`) or an IP tunnel carries the frames smbwire
//! analyses. A 4-byte base header (C, K, S flags, version, protocol type), then the optional
//! checksum (+ reserved), key and sequence number words, in that order, each 4 bytes.

use super::DecodeError;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const FLAGS: usize = 0;
    pub const VERSION: usize = 1;
    pub const PROTOCOL: Field = 2..4;
    pub const OPTIONS: usize = 4;
}

/// The base header's length; the optional words follow it.
pub const BASE_LEN: usize = field::OPTIONS;

/// Flag bits of the first byte (RFC 2784 §2.1, RFC 2890 §2).
const F_CHECKSUM: u8 = 0x80;
/// Source routing (RFC 1701 only; deprecated by RFC 2784): a header smbwire does not follow.
const F_ROUTING: u8 = 0x40;
const F_KEY: u8 = 0x20;
const F_SEQUENCE: u8 = 0x10;

/// Protocol types (EtherTypes) that carry what smbwire follows.
pub mod protocol {
    /// Transparent Ethernet Bridging: a whole Ethernet frame (`gretap`).
    pub const TEB: u16 = 0x6558;
    /// ERSPAN type II (with a sequence number) or type I (without one, and without an ERSPAN
    /// header).
    pub const ERSPAN_II: u16 = 0x88be;
    /// ERSPAN type III.
    pub const ERSPAN_III: u16 = 0x22eb;
    /// Cisco MetaData (`wire::cmd`), then what its header names: IP or Ethernet.
    pub const CISCO_METADATA: u16 = super::super::cmd::ETHERTYPE;
    pub const IPV4: u16 = 0x0800;
    pub const IPV6: u16 = 0x86dd;
}

#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap a buffer holding the base header and the optional words its flags announce.
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), DecodeError> {
        let b = self.buffer.as_ref();
        if b.len() < BASE_LEN || b.len() < self.header_len() {
            return Err(DecodeError::Truncated("gre.truncated"));
        }
        Ok(())
    }

    fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    pub fn has_checksum(&self) -> bool {
        self.flags() & F_CHECKSUM != 0
    }
    pub fn has_routing(&self) -> bool {
        self.flags() & F_ROUTING != 0
    }
    pub fn has_key(&self) -> bool {
        self.flags() & F_KEY != 0
    }
    pub fn has_sequence(&self) -> bool {
        self.flags() & F_SEQUENCE != 0
    }
    /// 0 for GRE; 1 is the enhanced GRE of PPTP (RFC 2637), which smbwire does not follow.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION] & 0x07
    }
    pub fn protocol(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::PROTOCOL];
        u16::from_be_bytes([b[0], b[1]])
    }
    /// Base header plus the optional words (routing, when set, is not counted: such a packet
    /// is not followed).
    pub fn header_len(&self) -> usize {
        BASE_LEN + 4 * (usize::from(self.has_checksum()) + usize::from(self.has_key()) + usize::from(self.has_sequence()))
    }
    fn word(&self, index: usize) -> u32 {
        let b = &self.buffer.as_ref()[field::OPTIONS + 4 * index..field::OPTIONS + 4 * index + 4];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    pub fn key(&self) -> Option<u32> {
        self.has_key().then(|| self.word(usize::from(self.has_checksum())))
    }
    pub fn sequence(&self) -> Option<u32> {
        self.has_sequence().then(|| self.word(usize::from(self.has_checksum()) + usize::from(self.has_key())))
    }
    /// What follows the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_word(&mut self, index: usize, v: u32) {
        self.buffer.as_mut()[field::OPTIONS + 4 * index..field::OPTIONS + 4 * index + 4].copy_from_slice(&v.to_be_bytes());
    }
}

/// A GRE header as smbwire reads and writes it: no checksum, no routing, version 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub protocol: u16,
    pub key: Option<u32>,
    pub sequence: Option<u32>,
}

impl Repr {
    /// Parse a checked header. A version other than 0 or a routing header is refused
    /// (`gre.unsupported`): what follows cannot be found.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, DecodeError> {
        p.check_len()?;
        if p.version() != 0 || p.has_routing() {
            return Err(DecodeError::Malformed("gre.unsupported"));
        }
        Ok(Repr { protocol: p.protocol(), key: p.key(), sequence: p.sequence() })
    }

    pub fn header_len(&self) -> usize {
        BASE_LEN + 4 * (usize::from(self.key.is_some()) + usize::from(self.sequence.is_some()))
    }

    /// Write the header into the first `header_len()` bytes of `p`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        let b = p.buffer.as_mut();
        b[field::FLAGS] = if self.key.is_some() { F_KEY } else { 0 } | if self.sequence.is_some() { F_SEQUENCE } else { 0 };
        b[field::VERSION] = 0;
        b[field::PROTOCOL].copy_from_slice(&self.protocol.to_be_bytes());
        let mut i = 0;
        if let Some(k) = self.key {
            p.set_word(i, k);
            i += 1;
        }
        if let Some(s) = self.sequence {
            p.set_word(i, s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ERSPAN type II's GRE header as draft-foschiano-erspan-03 §4.1 lays it out: only S
    /// set, protocol 0x88be, sequence number 3.
    static ERSPAN_GRE: [u8; 8] = [0x10, 0x00, 0x88, 0xbe, 0x00, 0x00, 0x00, 0x03];
    /// `gretap` with a key (RFC 2890 §2.1): K set, protocol 0x6558, key 42.
    static GRETAP_KEYED: [u8; 8] = [0x20, 0x00, 0x65, 0x58, 0x00, 0x00, 0x00, 0x2a];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&ERSPAN_GRE[..]).unwrap();
        assert_eq!((p.version(), p.protocol(), p.header_len()), (0, protocol::ERSPAN_II, 8));
        assert_eq!((p.key(), p.sequence()), (None, Some(3)));
        let p = Packet::new_checked(&GRETAP_KEYED[..]).unwrap();
        assert_eq!((p.protocol(), p.key(), p.sequence()), (protocol::TEB, Some(42), None));
        assert!(p.payload().is_empty());
    }

    #[test]
    fn construct() {
        let mut buf = [0xffu8; 8];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        Repr { protocol: protocol::ERSPAN_II, key: None, sequence: Some(3) }.emit(&mut p);
        assert_eq!(buf, ERSPAN_GRE);
    }

    #[test]
    fn parse_and_emit() {
        for bytes in [&ERSPAN_GRE, &GRETAP_KEYED] {
            let r = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
            let mut buf = vec![0u8; r.header_len()];
            r.emit(&mut Packet::new_unchecked(&mut buf[..]));
            assert_eq!(&buf[..], &bytes[..]);
        }
        // Key and sequence together, and a checksum word before them.
        let both = Repr { protocol: protocol::TEB, key: Some(7), sequence: Some(9) };
        let mut buf = vec![0u8; both.header_len()];
        both.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap(), both);
        let with_checksum = [0xb0, 0, 0x65, 0x58, 0xab, 0xcd, 0, 0, 0, 0, 0, 7, 0, 0, 0, 9];
        let p = Packet::new_checked(&with_checksum[..]).unwrap();
        assert_eq!((p.header_len(), p.key(), p.sequence()), (16, Some(7), Some(9)));
    }

    #[test]
    fn truncated_and_unsupported_are_named() {
        assert_eq!(Packet::new_checked(&ERSPAN_GRE[..3]).unwrap_err(), DecodeError::Truncated("gre.truncated"));
        assert_eq!(Packet::new_checked(&ERSPAN_GRE[..6]).unwrap_err(), DecodeError::Truncated("gre.truncated"));
        let pptp = [0x30, 0x81, 0x88, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(Repr::parse(&Packet::new_checked(&pptp[..]).unwrap()), Err(DecodeError::Malformed("gre.unsupported")));
        let routed = [0x40, 0, 0x08, 0];
        assert_eq!(Repr::parse(&Packet::new_checked(&routed[..]).unwrap()), Err(DecodeError::Malformed("gre.unsupported")));
    }
}
