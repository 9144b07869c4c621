//! Linux "cooked" capture headers: LINKTYPE_LINUX_SLL (16 bytes) and LINKTYPE_LINUX_SLL2
//! (20 bytes), as documented on tcpdump.org (linktypes/LINKTYPE_LINUX_SLL.html, _SLL2.html).
//! The protocol field holds an EtherType when the ARPHRD type is an Ethernet-like device.

use super::DecodeError;

mod field {
    pub type Field = core::ops::Range<usize>;
    // SLL (v1)
    pub const PACKET_TYPE: Field = 0..2;
    pub const ARPHRD: Field = 2..4;
    pub const ADDR_LEN: Field = 4..6;
    pub const ADDR: Field = 6..14;
    pub const PROTOCOL: Field = 14..16;
    // SLL2
    pub const V2_PROTOCOL: Field = 0..2;
    pub const V2_RESERVED: Field = 2..4;
    pub const V2_IF_INDEX: Field = 4..8;
    pub const V2_ARPHRD: Field = 8..10;
    pub const V2_PACKET_TYPE: usize = 10;
    pub const V2_ADDR_LEN: usize = 11;
    pub const V2_ADDR: Field = 12..20;
}

pub const HEADER_LEN: usize = field::PROTOCOL.end;
pub const V2_HEADER_LEN: usize = field::V2_ADDR.end;

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// Which cooked header a buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    pub fn header_len(self) -> usize {
        match self {
            Version::V1 => HEADER_LEN,
            Version::V2 => V2_HEADER_LEN,
        }
    }
}

/// A view of an SLL or SLL2 header followed by its payload.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
    version: Version,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T, version: Version) -> Self {
        Packet { buffer, version }
    }

    pub fn new_checked(buffer: T, version: Version) -> Result<Self, DecodeError> {
        let p = Self::new_unchecked(buffer, version);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), DecodeError> {
        if self.buffer.as_ref().len() < self.version.header_len() {
            return Err(DecodeError::Truncated(match self.version {
                Version::V1 => "sll.truncated",
                Version::V2 => "sll2.truncated",
            }));
        }
        Ok(())
    }

    pub fn version(&self) -> Version {
        self.version
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Packet type (0 to us, 1 broadcast, 2 multicast, 3 to another host, 4 sent by us).
    pub fn packet_type(&self) -> u16 {
        let b = self.buffer.as_ref();
        match self.version {
            Version::V1 => be16(&b[field::PACKET_TYPE]),
            Version::V2 => u16::from(b[field::V2_PACKET_TYPE]),
        }
    }
    /// ARPHRD_ device type (1 = Ethernet).
    pub fn arphrd_type(&self) -> u16 {
        let b = self.buffer.as_ref();
        be16(&b[match self.version {
            Version::V1 => field::ARPHRD,
            Version::V2 => field::V2_ARPHRD,
        }])
    }
    /// Link-layer address length as declared (may exceed the 8 bytes stored).
    pub fn addr_len(&self) -> u16 {
        let b = self.buffer.as_ref();
        match self.version {
            Version::V1 => be16(&b[field::ADDR_LEN]),
            Version::V2 => u16::from(b[field::V2_ADDR_LEN]),
        }
    }
    /// The stored link-layer address bytes (at most 8).
    pub fn addr(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let r = match self.version {
            Version::V1 => field::ADDR,
            Version::V2 => field::V2_ADDR,
        };
        &b[r.start..r.start + usize::from(self.addr_len()).min(8)]
    }
    /// Interface index (SLL2 only; 0 for SLL).
    pub fn if_index(&self) -> u32 {
        match self.version {
            Version::V1 => 0,
            Version::V2 => {
                let b = &self.buffer.as_ref()[field::V2_IF_INDEX];
                u32::from_be_bytes([b[0], b[1], b[2], b[3]])
            }
        }
    }
    /// Protocol: an EtherType for Ethernet-like devices.
    pub fn protocol(&self) -> u16 {
        let b = self.buffer.as_ref();
        be16(&b[match self.version {
            Version::V1 => field::PROTOCOL,
            Version::V2 => field::V2_PROTOCOL,
        }])
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.version.header_len()..]
    }
}

/// The meaning of a cooked header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub version: Version,
    pub packet_type: u16,
    pub arphrd_type: u16,
    pub addr_len: u16,
    /// Address bytes, zero-padded to 8.
    pub addr: [u8; 8],
    pub if_index: u32,
    pub protocol: u16,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, DecodeError> {
        p.check_len()?;
        let mut addr = [0u8; 8];
        let a = p.addr();
        addr[..a.len()].copy_from_slice(a);
        Ok(Repr {
            version: p.version,
            packet_type: p.packet_type(),
            arphrd_type: p.arphrd_type(),
            addr_len: p.addr_len(),
            addr,
            if_index: p.if_index(),
            protocol: p.protocol(),
        })
    }

    pub fn header_len(&self) -> usize {
        self.version.header_len()
    }

    /// Write the header into the first `header_len()` bytes of `buf` (panics if shorter).
    pub fn emit(&self, buf: &mut [u8]) {
        match self.version {
            Version::V1 => {
                buf[field::PACKET_TYPE].copy_from_slice(&self.packet_type.to_be_bytes());
                buf[field::ARPHRD].copy_from_slice(&self.arphrd_type.to_be_bytes());
                buf[field::ADDR_LEN].copy_from_slice(&self.addr_len.to_be_bytes());
                buf[field::ADDR].copy_from_slice(&self.addr);
                buf[field::PROTOCOL].copy_from_slice(&self.protocol.to_be_bytes());
            }
            Version::V2 => {
                buf[field::V2_PROTOCOL].copy_from_slice(&self.protocol.to_be_bytes());
                buf[field::V2_RESERVED].copy_from_slice(&[0, 0]);
                buf[field::V2_IF_INDEX].copy_from_slice(&self.if_index.to_be_bytes());
                buf[field::V2_ARPHRD].copy_from_slice(&self.arphrd_type.to_be_bytes());
                buf[field::V2_PACKET_TYPE] = self.packet_type as u8;
                buf[field::V2_ADDR_LEN] = self.addr_len as u8;
                buf[field::V2_ADDR].copy_from_slice(&self.addr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // smb311-compress-lz77-lz77huff-lznt1.pcap frame 1: SLL header, then the IPv4 version byte.
    static SLL: [u8; 17] = [
        0x00, 0x03, 0x00, 0x01, 0x00, 0x06, 0x52, 0x54, 0x00, 0xfe, 0x72, 0x85, 0x00, 0x00, 0x08, 0x00, 0x45,
    ];
    // The same header rewritten as SLL2 on interface 2 (field layout per LINKTYPE_LINUX_SLL2).
    static SLL2: [u8; 21] = [
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x01, 0x03, 0x06, 0x52, 0x54, 0x00, 0xfe,
        0x72, 0x85, 0x00, 0x00, 0x45,
    ];

    fn repr(version: Version, if_index: u32) -> Repr {
        Repr {
            version,
            packet_type: 3,
            arphrd_type: 1,
            addr_len: 6,
            addr: [0x52, 0x54, 0x00, 0xfe, 0x72, 0x85, 0, 0],
            if_index,
            protocol: 0x0800,
        }
    }

    #[test]
    fn deconstruct() {
        for (buf, v) in [(&SLL[..], Version::V1), (&SLL2[..], Version::V2)] {
            let p = Packet::new_checked(buf, v).unwrap();
            assert_eq!(p.packet_type(), 3);
            assert_eq!(p.arphrd_type(), 1);
            assert_eq!(p.addr_len(), 6);
            assert_eq!(p.addr(), &[0x52, 0x54, 0x00, 0xfe, 0x72, 0x85]);
            assert_eq!(p.protocol(), 0x0800);
            assert_eq!(p.payload(), &[0x45]);
        }
        assert_eq!(Packet::new_checked(&SLL2[..], Version::V2).unwrap().if_index(), 2);
    }

    #[test]
    fn construct_and_emit() {
        let mut b1 = [0u8; 16];
        repr(Version::V1, 0).emit(&mut b1);
        assert_eq!(&b1[..], &SLL[..16]);
        let mut b2 = [0u8; 20];
        repr(Version::V2, 2).emit(&mut b2);
        assert_eq!(&b2[..], &SLL2[..20]);
    }

    #[test]
    fn parse() {
        assert_eq!(Repr::parse(&Packet::new_checked(&SLL[..], Version::V1).unwrap()).unwrap(), repr(Version::V1, 0));
        assert_eq!(Repr::parse(&Packet::new_checked(&SLL2[..], Version::V2).unwrap()).unwrap(), repr(Version::V2, 2));
    }

    #[test]
    fn refuses_truncation() {
        assert_eq!(Packet::new_checked(&SLL[..15], Version::V1).unwrap_err(), DecodeError::Truncated("sll.truncated"));
        assert_eq!(Packet::new_checked(&SLL2[..19], Version::V2).unwrap_err(), DecodeError::Truncated("sll2.truncated"));
        // An address length above 8 does not read past the address field.
        let mut b = SLL;
        b[5] = 200;
        assert_eq!(Packet::new_checked(&b[..], Version::V1).unwrap().addr().len(), 8);
    }
}
