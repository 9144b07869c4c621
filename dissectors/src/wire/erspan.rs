//! ERSPAN (draft-foschiano-erspan-03): the header a switch's remote mirror session puts
//! between GRE (`gre::protocol::ERSPAN_II` / `ERSPAN_III`) and the mirrored frame. Type II
//! (version field 1) is 8 bytes; type III (version field 2) is 12, and 8 more when its O flag
//! announces a platform-specific subheader. Type I has no header at all (GRE without a
//! sequence number, protocol 0x88be): `gre` callers handle it.

use super::DecodeError;

mod field {
    pub type Field = core::ops::Range<usize>;
    /// Version (4 bits) and the mirrored frame's VLAN (12 bits).
    pub const VER_VLAN: Field = 0..2;
    /// COS (3), encapsulation type / BSO (2), truncated flag (1), session ID (10).
    pub const COS_SESSION: Field = 2..4;
    /// Type II: reserved (12), index (20). Type III: timestamp.
    pub const WORD2: Field = 4..8;
    /// Type III: security group tag.
    pub const SGT: Field = 8..10;
    /// Type III: P (1), frame type (5), hardware ID (6), D (1), granularity (2), O (1).
    pub const P_FT_HW_D_GRA_O: Field = 10..12;
}

pub const TYPE_II_LEN: usize = 8;
pub const TYPE_III_LEN: usize = 12;
/// Type III's optional platform-specific subheader.
pub const SUBHEADER_LEN: usize = 8;

/// Version field values.
pub const VERSION_II: u8 = 1;
pub const VERSION_III: u8 = 2;

/// Type III frame types: what follows the header.
pub const FRAME_ETHERNET: u8 = 0;
pub const FRAME_IP: u8 = 2;

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

    /// Wrap a buffer holding a whole type II or III header (with its subheader).
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), DecodeError> {
        let len = self.buffer.as_ref().len();
        if len < field::VER_VLAN.end {
            return Err(DecodeError::Truncated("erspan.truncated"));
        }
        match self.version() {
            VERSION_II if len >= TYPE_II_LEN => Ok(()),
            VERSION_III if len >= TYPE_III_LEN && len >= self.header_len() => Ok(()),
            VERSION_II | VERSION_III => Err(DecodeError::Truncated("erspan.truncated")),
            _ => Err(DecodeError::Malformed("erspan.bad_version")),
        }
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_VLAN.start] >> 4
    }
    /// The mirrored frame's VLAN (0 when it had none).
    pub fn vlan(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::VER_VLAN]) & 0x0fff
    }
    pub fn cos(&self) -> u8 {
        self.buffer.as_ref()[field::COS_SESSION.start] >> 5
    }
    /// The mirrored frame was cut to fit the tunnel's MTU (then its payload is incomplete).
    pub fn truncated(&self) -> bool {
        self.buffer.as_ref()[field::COS_SESSION.start] & 0x04 != 0
    }
    pub fn session_id(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::COS_SESSION]) & 0x03ff
    }
    /// Type II: the port index (20 bits).
    pub fn index(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::WORD2];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x000f_ffff
    }
    /// Type III: the timestamp (units by the granularity field).
    pub fn timestamp(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::WORD2];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    fn type_iii_flags(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::P_FT_HW_D_GRA_O])
    }
    /// Type III: what follows (`FRAME_ETHERNET`, `FRAME_IP`); type II carries Ethernet.
    pub fn frame_type(&self) -> u8 {
        if self.version() == VERSION_III {
            ((self.type_iii_flags() >> 10) & 0x1f) as u8
        } else {
            FRAME_ETHERNET
        }
    }
    /// Type III: a platform-specific subheader follows.
    pub fn has_subheader(&self) -> bool {
        self.version() == VERSION_III && self.type_iii_flags() & 1 != 0
    }
    pub fn header_len(&self) -> usize {
        match self.version() {
            VERSION_III => TYPE_III_LEN + if self.has_subheader() { SUBHEADER_LEN } else { 0 },
            _ => TYPE_II_LEN,
        }
    }
    /// The mirrored frame.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// An ERSPAN header's meaning. `timestamp` and `frame_type` are type III's (None for II);
/// `index` is type II's. Type III subheaders are read past, never written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub version: u8,
    pub vlan: u16,
    pub cos: u8,
    pub truncated: bool,
    pub session_id: u16,
    pub index: u32,
    pub timestamp: u32,
    pub frame_type: u8,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, DecodeError> {
        p.check_len()?;
        let iii = p.version() == VERSION_III;
        Ok(Repr {
            version: p.version(),
            vlan: p.vlan(),
            cos: p.cos(),
            truncated: p.truncated(),
            session_id: p.session_id(),
            index: if iii { 0 } else { p.index() },
            timestamp: if iii { p.timestamp() } else { 0 },
            frame_type: p.frame_type(),
        })
    }

    pub fn header_len(&self) -> usize {
        if self.version == VERSION_III {
            TYPE_III_LEN
        } else {
            TYPE_II_LEN
        }
    }

    /// Write the header into the first `header_len()` bytes of `p`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        let b = p.buffer.as_mut();
        b[field::VER_VLAN].copy_from_slice(&((u16::from(self.version) << 12) | (self.vlan & 0x0fff)).to_be_bytes());
        let cos = (u16::from(self.cos & 7) << 13) | (u16::from(self.truncated) << 10) | (self.session_id & 0x03ff);
        b[field::COS_SESSION].copy_from_slice(&cos.to_be_bytes());
        if self.version == VERSION_III {
            b[field::WORD2].copy_from_slice(&self.timestamp.to_be_bytes());
            b[field::SGT].copy_from_slice(&[0, 0]);
            b[field::P_FT_HW_D_GRA_O].copy_from_slice(&(u16::from(self.frame_type & 0x1f) << 10).to_be_bytes());
        } else {
            b[field::WORD2].copy_from_slice(&(self.index & 0x000f_ffff).to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Type II laid out as draft-foschiano-erspan-03 §4.1 shows it (the layout Linux's
    /// `include/net/erspan.h` documents for `ip link add type erspan erspan_ver 1 erspan 123`,
    /// key 1; this machine's kernel has no GRE to capture one from): version 1, VLAN 0,
    /// COS 0, session 1, index 123.
    static TYPE_II: [u8; 8] = [0x10, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x7b];
    /// Type III (draft §4.2): version 2, session 2, a timestamp, frame type Ethernet,
    /// hardware ID 31, D set (egress), granularity 3 (IEEE 1588), no subheader.
    static TYPE_III: [u8; 12] = [0x20, 0x00, 0x00, 0x02, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x01, 0xfe];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&TYPE_II[..]).unwrap();
        assert_eq!((p.version(), p.vlan(), p.session_id(), p.index(), p.header_len()), (1, 0, 1, 123, 8));
        assert_eq!((p.frame_type(), p.truncated()), (FRAME_ETHERNET, false));
        let p = Packet::new_checked(&TYPE_III[..]).unwrap();
        assert_eq!((p.version(), p.session_id(), p.timestamp(), p.header_len()), (2, 2, 0x1234_5678, 12));
        assert_eq!((p.frame_type(), p.has_subheader()), (FRAME_ETHERNET, false));
    }

    #[test]
    fn construct() {
        let mut buf = [0xffu8; 8];
        let r = Repr { version: VERSION_II, vlan: 0, cos: 0, truncated: false, session_id: 1, index: 123, timestamp: 0, frame_type: 0 };
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, TYPE_II);
    }

    #[test]
    fn parse_and_emit() {
        let r = Repr::parse(&Packet::new_checked(&TYPE_II[..]).unwrap()).unwrap();
        let mut buf = vec![0u8; r.header_len()];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..], &TYPE_II[..]);
        let r = Repr::parse(&Packet::new_checked(&TYPE_III[..]).unwrap()).unwrap();
        assert_eq!((r.timestamp, r.frame_type, r.session_id), (0x1234_5678, FRAME_ETHERNET, 2));
        let mut buf = vec![0u8; r.header_len()];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn subheader_ip_frames_and_damage() {
        let mut with_sub = TYPE_III.to_vec();
        with_sub[11] |= 1; // O
        with_sub[10] = (with_sub[10] & 0x83) | (FRAME_IP << 2);
        assert_eq!(Packet::new_checked(&with_sub[..]).unwrap_err(), DecodeError::Truncated("erspan.truncated"));
        with_sub.extend_from_slice(&[0; 8]);
        with_sub.push(0x45);
        let p = Packet::new_checked(&with_sub[..]).unwrap();
        assert_eq!((p.header_len(), p.frame_type(), p.payload()), (20, FRAME_IP, &[0x45][..]));
        assert_eq!(Packet::new_checked(&TYPE_II[..7]).unwrap_err(), DecodeError::Truncated("erspan.truncated"));
        assert_eq!(Packet::new_checked(&[0x30u8, 0, 0, 0, 0, 0, 0, 0][..]).unwrap_err(), DecodeError::Malformed("erspan.bad_version"));
    }
}
