//! GENEVE (RFC 8926): a frame in UDP to port 6081, as Open vSwitch and OVN overlays, and cloud
//! traffic mirroring behind a gateway load balancer, deliver it. An 8-byte header (version,
//! options length in 4-byte words, the O and C flags, the protocol type of the payload, the
//! 24-bit virtual network identifier), then the options, then the payload: Ethernet (protocol
//! type 0x6558, as GRE's transparent Ethernet bridging) or an IP packet (0x0800, 0x86DD).
//! smbwire skips the options (RFC 8926 §3.5: a transit device that does not process them
//! passes the packet on; a passive observer reads the payload the same way).

use super::DecodeError;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const VER_OPT_LEN: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PROTOCOL: Field = 2..4;
    pub const VNI: Field = 4..7;
    pub const OPTIONS: usize = 8;
}

/// The fixed header; the options follow it.
pub const HEADER_LEN: usize = field::OPTIONS;
/// The IANA port (RFC 8926 §3.3).
pub const PORT: u16 = 6081;
/// The only version RFC 8926 defines.
pub const VERSION: u8 = 0;
/// The O flag: a control (OAM) packet, not a data packet.
const F_OAM: u8 = 0x80;
/// The C flag: critical options are present.
const F_CRITICAL: u8 = 0x40;

#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap a buffer holding a version 0 header and all of its options; a version RFC 8926
    /// does not define is refused (`geneve.bad_version`).
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        let p = Self::new_unchecked(buffer);
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(DecodeError::Truncated("geneve.truncated"));
        }
        if p.version() != VERSION {
            return Err(DecodeError::Malformed("geneve.bad_version"));
        }
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), DecodeError> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < self.header_len() {
            return Err(DecodeError::Truncated("geneve.truncated"));
        }
        Ok(())
    }
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_OPT_LEN] >> 6
    }
    /// Bytes of options (the field counts 4-byte words: at most 252).
    pub fn options_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_OPT_LEN] & 0x3f) * 4
    }
    /// The fixed header and the options: where the payload starts.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options_len()
    }
    pub fn oam(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & F_OAM != 0
    }
    pub fn critical(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & F_CRITICAL != 0
    }
    /// The payload's EtherType.
    pub fn protocol(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::PROTOCOL];
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn vni(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VNI];
        u32::from_be_bytes([0, b[0], b[1], b[2]])
    }
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }
    /// The encapsulated frame or packet.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    pub protocol: u16,
    pub vni: u32,
    pub oam: bool,
    pub critical: bool,
    /// The options, as they are on the wire (a multiple of 4 bytes, at most 252).
    pub options: &'a [u8],
}

impl<'a> Repr<'a> {
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&'a T>) -> Result<Repr<'a>, DecodeError> {
        p.check_len()?;
        let b: &'a [u8] = p.buffer.as_ref();
        Ok(Repr {
            protocol: p.protocol(),
            vni: p.vni(),
            oam: p.oam(),
            critical: p.critical(),
            options: &b[HEADER_LEN..p.header_len()],
        })
    }

    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }

    /// Write the header and the options into the first `header_len()` bytes of `p`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        debug_assert!(self.options.len().is_multiple_of(4) && self.options.len() <= 252);
        let b = p.buffer.as_mut();
        b[..HEADER_LEN].fill(0);
        b[field::VER_OPT_LEN] = (VERSION << 6) | (self.options.len() / 4) as u8;
        b[field::FLAGS] = if self.oam { F_OAM } else { 0 } | if self.critical { F_CRITICAL } else { 0 };
        b[field::PROTOCOL].copy_from_slice(&self.protocol.to_be_bytes());
        b[field::VNI].copy_from_slice(&self.vni.to_be_bytes()[1..]);
        b[HEADER_LEN..HEADER_LEN + self.options.len()].copy_from_slice(self.options);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8926 §3.4: version 0, one 8-byte option (class 0x0102, type 0x80: critical,
    /// length 1 word, 4 bytes of data), the C flag, Ethernet (0x6558), VNI 0x00002a.
    static PACKET: [u8; 18] = [
        0x02, 0x40, 0x65, 0x58, 0x00, 0x00, 0x2a, 0x00, //
        0x01, 0x02, 0x80, 0x01, 0xde, 0xad, 0xbe, 0xef, //
        0xaa, 0xbb, // the payload's first bytes
    ];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!((p.version(), p.options_len(), p.header_len()), (0, 8, 16));
        assert_eq!((p.oam(), p.critical(), p.protocol(), p.vni()), (false, true, 0x6558, 42));
        assert_eq!(p.options(), &PACKET[8..16]);
        assert_eq!(p.payload(), &[0xaa, 0xbb]);
    }

    #[test]
    fn construct() {
        let mut buf = [0xffu8; 16];
        let r = Repr { protocol: 0x6558, vni: 42, oam: false, critical: true, options: &PACKET[8..16] };
        assert_eq!(r.header_len(), 16);
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, PACKET[..16]);
    }

    #[test]
    fn parse_and_emit() {
        let r = Repr::parse(&Packet::new_checked(&PACKET[..]).unwrap()).unwrap();
        let mut buf = [0u8; 16];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, PACKET[..16]);
        // No options: the payload follows the fixed header.
        let bare = Repr { protocol: 0x0800, vni: 7, oam: true, critical: false, options: &[] };
        let mut buf = [0u8; 8];
        bare.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap(), bare);
    }

    #[test]
    fn damage_is_named() {
        assert_eq!(Packet::new_checked(&PACKET[..7]).unwrap_err(), DecodeError::Truncated("geneve.truncated"));
        // The options run past the datagram.
        assert_eq!(Packet::new_checked(&PACKET[..12]).unwrap_err(), DecodeError::Truncated("geneve.truncated"));
        let mut v1 = PACKET;
        v1[0] |= 0x40;
        assert_eq!(Packet::new_checked(&v1[..]).unwrap_err(), DecodeError::Malformed("geneve.bad_version"));
    }
}
