//! IP over InfiniBand encapsulation header (RFC 4391 §6): 2 bytes of EtherType, 2 reserved
//! bytes (zero), then the IP (or ARP) packet. LINKTYPE_IPOIB (242) frames start with it, and
//! so does the payload of the IB Sends (UD, or RC in connected mode, RFC 4755) that carry IPoIB.

use super::DecodeError;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const TYPE: Field = 0..2;
    pub const RESERVED: Field = 2..4;
}

pub const HEADER_LEN: usize = field::RESERVED.end;

/// Zero-copy view of an IPoIB encapsulation header and its payload.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(DecodeError::Truncated("ipoib.truncated"));
        }
        Ok(Packet { buffer })
    }
    pub fn ethertype(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::TYPE];
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn reserved(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::RESERVED];
        u16::from_be_bytes([b[0], b[1]])
    }
}

/// The meaning of the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub ethertype: u16,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr { ethertype: p.ethertype() }
    }
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.ethertype.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
    }
}

/// Whether an IB Send payload is an IPoIB packet: an IPv4, IPv6 or ARP EtherType and zero
/// reserved bytes (the way to tell, since the BTH does not name its upper layer).
pub fn looks_like_ipoib(payload: &[u8]) -> bool {
    use super::ethernet::ethertype;
    let Ok(p) = Packet::new_checked(payload) else { return false };
    p.reserved() == 0 && matches!(p.ethertype(), ethertype::IPV4 | ethertype::IPV6 | ethertype::ARP)
}

#[cfg(test)]
mod tests {
    use super::*;

    // rdma-infiniband-erf-ipoib.pcap frame 10: the IPoIB header of an ICMP echo over RC.
    static HDR: [u8; 4] = [0x08, 0x00, 0x00, 0x00];

    #[test]
    fn deconstruct_and_construct() {
        let p = Packet::new_checked(&HDR[..]).unwrap();
        assert_eq!((p.ethertype(), p.reserved()), (0x0800, 0));
        let mut out = Vec::new();
        Repr::parse(&p).emit(&mut out);
        assert_eq!(out, HDR);
        assert!(looks_like_ipoib(&HDR));
        assert!(!looks_like_ipoib(&[0x08, 0x00, 0x00, 0x01]));
        assert!(!looks_like_ipoib(&[0x89, 0x15, 0x00, 0x00]));
        assert_eq!(Packet::new_checked(&HDR[..3]).unwrap_err(), DecodeError::Truncated("ipoib.truncated"));
    }
}
