//! VXLAN (RFC 7348): an Ethernet frame in UDP to port 4789, as a virtual tap or a cloud
//! mirror session delivers it. An 8-byte header: flags (I set: the VNI is valid), 24 reserved
//! bits, the 24-bit VXLAN network identifier, 8 reserved bits.

use super::DecodeError;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const FLAGS: usize = 0;
    pub const VNI: Field = 4..7;
    pub const PAYLOAD: usize = 8;
}

pub const HEADER_LEN: usize = field::PAYLOAD;
/// The IANA port (RFC 7348 §5).
pub const PORT: u16 = 4789;
/// Linux's port before IANA assigned one, still its default for a `vxlan` device made
/// without `dstport` (and Flannel's).
pub const PORT_LINUX_LEGACY: u16 = 8472;

/// A UDP destination port VXLAN is looked for on.
pub fn is_port(port: u16) -> bool {
    port == PORT || port == PORT_LINUX_LEGACY
}
/// The I flag: the VNI is valid. RFC 7348 §5: set in every VXLAN packet.
const F_VNI: u8 = 0x08;

#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap a buffer holding the header with the I flag set; anything else sent to port 4789
    /// is refused as not VXLAN (`vxlan.bad_flags`).
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        if !p.vni_valid() {
            return Err(DecodeError::Malformed("vxlan.bad_flags"));
        }
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), DecodeError> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(DecodeError::Truncated("vxlan.truncated"));
        }
        Ok(())
    }
    pub fn vni_valid(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & F_VNI != 0
    }
    pub fn vni(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VNI];
        u32::from_be_bytes([0, b[0], b[1], b[2]])
    }
    /// The encapsulated Ethernet frame.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub vni: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, DecodeError> {
        p.check_len()?;
        Ok(Repr { vni: p.vni() })
    }

    /// Write the header into the first `HEADER_LEN` bytes of `p`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        let b = p.buffer.as_mut();
        b[..HEADER_LEN].fill(0);
        b[field::FLAGS] = F_VNI;
        b[field::VNI].copy_from_slice(&self.vni.to_be_bytes()[1..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header as the Linux kernel sent it (`ip link add type vxlan id 42 dstport 4789`,
    /// captured on the underlay here, 2026-11-29).
    static HEADER: [u8; 8] = [0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a, 0x00];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&HEADER[..]).unwrap();
        assert_eq!((p.vni(), p.payload().len()), (42, 0));
    }

    #[test]
    fn construct() {
        let mut buf = [0xffu8; 8];
        Repr { vni: 42 }.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, HEADER);
    }

    #[test]
    fn parse_and_emit() {
        let r = Repr::parse(&Packet::new_checked(&HEADER[..]).unwrap()).unwrap();
        let mut buf = [0u8; 8];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, HEADER);
    }

    #[test]
    fn damage_is_named() {
        assert_eq!(Packet::new_checked(&HEADER[..7]).unwrap_err(), DecodeError::Truncated("vxlan.truncated"));
        assert_eq!(Packet::new_checked(&[0u8; 8][..]).unwrap_err(), DecodeError::Malformed("vxlan.bad_flags"));
    }
}
