//! Ethernet II (IEEE 802.3 clause 3.2) with IEEE 802.1Q customer tags and 802.1ad service
//! tags (QinQ). A tag is 4 bytes (TPID, TCI) inserted before the EtherType. Cisco MetaData
//! (TrustSec's in-line SGT, `cmd`), 8 bytes after its own EtherType, is walked like a tag.

use super::DecodeError;

/// EtherType values smbwire looks at (IEEE registry).
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    /// IEEE 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    pub const IPV6: u16 = 0x86dd;
    /// IEEE 802.1ad service tag (outer tag of QinQ).
    pub const QINQ: u16 = 0x88a8;
    /// Pre-standard QinQ outer tag still emitted by some switches.
    pub const QINQ_LEGACY: u16 = 0x9100;
    /// RoCEv1 (InfiniBand over Ethernet): a GRH follows the Ethernet header (IBTA Annex A16).
    pub const ROCE_V1: u16 = 0x8915;

    /// Is this a VLAN tag protocol identifier?
    pub fn is_tag(t: u16) -> bool {
        matches!(t, VLAN | QINQ | QINQ_LEGACY)
    }
}

/// A six-octet MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Address(pub [u8; 6]);

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const DESTINATION: Field = 0..6;
    pub const SOURCE: Field = 6..12;
    /// The EtherType, or the first tag's TPID when the frame is tagged.
    pub const ETHERTYPE: Field = 12..14;
    pub const PAYLOAD: usize = 14;

    // Within one 4-byte VLAN tag that follows a TPID.
    pub const TAG_TCI: Field = 0..2;
    pub const TAG_NEXT_TYPE: Field = 2..4;
}

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD;
/// Length of one 802.1Q / 802.1ad tag.
pub const TAG_LEN: usize = 4;
/// Tags beyond this depth are refused as malformed (QinQ uses two; allow some slack).
pub const MAX_TAGS: usize = 4;

/// Follow 802.1Q / 802.1ad tags and Cisco MetaData headers: `ty` is the type field read
/// just before `off`. Returns the first EtherType that is neither and the offset of what
/// follows it. At most `MAX_TAGS` of them.
pub fn skip_tags(data: &[u8], mut ty: u16, mut off: usize) -> Result<(u16, usize), DecodeError> {
    let mut depth = 0;
    while ethertype::is_tag(ty) || ty == super::cmd::ETHERTYPE {
        if depth == MAX_TAGS {
            return Err(DecodeError::Malformed("ethernet.too_many_vlan_tags"));
        }
        if ty == super::cmd::ETHERTYPE {
            let rest = data.get(off..).unwrap_or_default();
            ty = super::cmd::Repr::parse(rest, super::cmd::Placement::Ethernet)?.next;
            off += super::cmd::HEADER_LEN;
        } else {
            let tag = data.get(off..off + TAG_LEN).ok_or(DecodeError::Truncated("ethernet.vlan_truncated"))?;
            ty = u16::from_be_bytes([tag[field::TAG_NEXT_TYPE][0], tag[field::TAG_NEXT_TYPE][1]]);
            off += TAG_LEN;
        }
        depth += 1;
    }
    Ok((ty, off))
}

/// A read-only or read-write view of an Ethernet II frame (without tags walked).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap a buffer, refusing one shorter than the untagged header.
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), DecodeError> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(DecodeError::Truncated("ethernet.truncated"));
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn dst_addr(&self) -> Address {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        Address(a)
    }

    pub fn src_addr(&self) -> Address {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        Address(a)
    }

    /// The type field at offset 12: the EtherType of an untagged frame, else the outer TPID.
    pub fn ethertype(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::ETHERTYPE];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Walk any VLAN tags: returns the inner EtherType and the offset of the payload.
    pub fn inner(&self) -> Result<(u16, usize), DecodeError> {
        skip_tags(self.buffer.as_ref(), self.ethertype(), HEADER_LEN)
    }

    /// Bytes after the untagged header (tags included).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_dst_addr(&mut self, a: Address) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&a.0);
    }
    pub fn set_src_addr(&mut self, a: Address) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&a.0);
    }
    pub fn set_ethertype(&mut self, t: u16) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&t.to_be_bytes());
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// One 802.1Q / 802.1ad tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag {
    /// Tag protocol identifier: `ethertype::VLAN` (C-tag) or `ethertype::QINQ` (S-tag).
    pub tpid: u16,
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    fn tci(&self) -> u16 {
        (u16::from(self.pcp & 7) << 13) | (u16::from(self.dei) << 12) | (self.vid & 0x0fff)
    }
    fn from_tci(tpid: u16, tci: u16) -> Self {
        VlanTag { tpid, pcp: (tci >> 13) as u8, dei: tci & 0x1000 != 0, vid: tci & 0x0fff }
    }
}

/// The meaning of an Ethernet II header: addresses, up to two tags (outermost first), EtherType.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_addr: Address,
    pub dst_addr: Address,
    pub tags: [Option<VlanTag>; 2],
    pub ethertype: u16,
}

impl Repr {
    /// Parse the header and at most two tags (a third tag is refused as malformed here;
    /// `decode` walks up to `MAX_TAGS`).
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, DecodeError> {
        packet.check_len()?;
        let data = packet.buffer.as_ref();
        let mut tags = [None, None];
        let mut ty = packet.ethertype();
        let mut off = HEADER_LEN;
        for slot in tags.iter_mut() {
            if !ethertype::is_tag(ty) {
                break;
            }
            let tag = data.get(off..off + TAG_LEN).ok_or(DecodeError::Truncated("ethernet.vlan_truncated"))?;
            let tci = u16::from_be_bytes([tag[field::TAG_TCI][0], tag[field::TAG_TCI][1]]);
            *slot = Some(VlanTag::from_tci(ty, tci));
            ty = u16::from_be_bytes([tag[field::TAG_NEXT_TYPE][0], tag[field::TAG_NEXT_TYPE][1]]);
            off += TAG_LEN;
        }
        if ethertype::is_tag(ty) {
            return Err(DecodeError::Malformed("ethernet.too_many_vlan_tags"));
        }
        Ok(Repr { src_addr: packet.src_addr(), dst_addr: packet.dst_addr(), tags, ethertype: ty })
    }

    /// Header length including tags.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + TAG_LEN * self.tags.iter().flatten().count()
    }

    /// Write the header (and tags) into the start of `packet`, which must hold at least
    /// `header_len()` bytes (panics otherwise: an emitter bug, not hostile input).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_dst_addr(self.dst_addr);
        packet.set_src_addr(self.src_addr);
        let buf = packet.buffer.as_mut();
        let mut off = field::ETHERTYPE.start;
        for tag in self.tags.iter().flatten() {
            buf[off..off + 2].copy_from_slice(&tag.tpid.to_be_bytes());
            buf[off + 2..off + 4].copy_from_slice(&tag.tci().to_be_bytes());
            off += TAG_LEN;
        }
        buf[off..off + 2].copy_from_slice(&self.ethertype.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // smb311-negotiate-contexts-zeek.pcap frame 1: Ethernet II, IPv4/TCP (first 14 bytes + IP start).
    static FRAME: [u8; 18] = [
        0x00, 0x25, 0x90, 0x60, 0xff, 0x9c, 0x04, 0x92, 0x26, 0x48, 0xa5, 0xdd, 0x08, 0x00, 0x45, 0x00,
        0x00, 0x34,
    ];

    fn repr() -> Repr {
        Repr {
            dst_addr: Address([0x00, 0x25, 0x90, 0x60, 0xff, 0x9c]),
            src_addr: Address([0x04, 0x92, 0x26, 0x48, 0xa5, 0xdd]),
            tags: [None, None],
            ethertype: ethertype::IPV4,
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&FRAME[..]).unwrap();
        assert_eq!(p.dst_addr(), Address([0x00, 0x25, 0x90, 0x60, 0xff, 0x9c]));
        assert_eq!(p.src_addr(), Address([0x04, 0x92, 0x26, 0x48, 0xa5, 0xdd]));
        assert_eq!(p.ethertype(), ethertype::IPV4);
        assert_eq!(p.inner().unwrap(), (ethertype::IPV4, 14));
        assert_eq!(p.payload(), &[0x45, 0x00, 0x00, 0x34]);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 18];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_dst_addr(Address([0x00, 0x25, 0x90, 0x60, 0xff, 0x9c]));
        p.set_src_addr(Address([0x04, 0x92, 0x26, 0x48, 0xa5, 0xdd]));
        p.set_ethertype(ethertype::IPV4);
        p.payload_mut().copy_from_slice(&[0x45, 0x00, 0x00, 0x34]);
        assert_eq!(buf, FRAME);
    }

    #[test]
    fn parse() {
        let p = Packet::new_checked(&FRAME[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0u8; 14];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..], &FRAME[..14]);
    }

    #[test]
    fn qinq_roundtrip() {
        let mut r = repr();
        r.tags = [
            Some(VlanTag { tpid: ethertype::QINQ, pcp: 5, dei: true, vid: 100 }),
            Some(VlanTag { tpid: ethertype::VLAN, pcp: 0, dei: false, vid: 4094 }),
        ];
        let mut buf = vec![0u8; r.header_len()];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[12..22], &[0x88, 0xa8, 0xb0, 0x64, 0x81, 0x00, 0x0f, 0xfe, 0x08, 0x00]);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), r);
        assert_eq!(p.inner().unwrap(), (ethertype::IPV4, 22));
    }

    #[test]
    fn refuses_truncation() {
        assert_eq!(Packet::new_checked(&FRAME[..13]).unwrap_err(), DecodeError::Truncated("ethernet.truncated"));
        // A VLAN TPID with no room for its tag.
        let mut b = FRAME[..16].to_vec();
        b[12] = 0x81;
        b[13] = 0x00;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.inner().unwrap_err(), DecodeError::Truncated("ethernet.vlan_truncated"));
        assert!(Repr::parse(&p).is_err());
    }

    #[test]
    fn refuses_endless_tags() {
        let mut b = FRAME[..14].to_vec();
        b[12] = 0x81;
        b[13] = 0x00;
        for _ in 0..10 {
            b.extend_from_slice(&[0x00, 0x01, 0x81, 0x00]);
        }
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.inner().unwrap_err(), DecodeError::Malformed("ethernet.too_many_vlan_tags"));
    }
}
