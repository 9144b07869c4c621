//! Cisco MetaData (CMD): the header Cisco TrustSec inline tagging puts into a frame to carry
//! its Security Group Tag (SGT), EtherType 0x8909. A mirror port of a link that tags in line
//! delivers the storage frames with it, between the MAC addresses (after any VLAN tag) and
//! the EtherType of what is carried; GRE tunnels between TrustSec devices carry it too
//! (GRE protocol type 0x8909).
//!
//! Cisco publishes no specification of the header; this follows the layout Cisco's
//! configuration guides draw and tshark decodes (checked in the tests against tshark's
//! reading of tcpdump's GRE capture and of frames made for the test): 8 bytes, a version
//! (1), a length (1), an option word (0x0001: the SGT option), the 16-bit SGT and the
//! EtherType of what follows. In Ethernet the EtherType comes last; in GRE first (the GRE
//! protocol type says CMD, the header's first word says what CMD carries). Only that form
//! (version 1, length 1) is walked: anything else is refused by name (`cmd.unsupported`),
//! so a frame is never read at a guessed offset.

use super::DecodeError;

/// The EtherType (and GRE protocol type) of the header (`SMBWIRE_ETH_P_CMD` in
/// bpf/smbwire.h, which the kernel program walks too).
pub const ETHERTYPE: u16 = crate::abi::u16_of(crate::abi::SMBWIRE_ETH_P_CMD);
/// The header after its EtherType, and in GRE after the GRE header (`SMBWIRE_CMD_LEN`).
pub const HEADER_LEN: usize = crate::abi::u32_of(crate::abi::SMBWIRE_CMD_LEN) as usize;
const VERSION: u8 = 1;
const LENGTH: u8 = 1;

/// Where the fields are: in Ethernet (after the 0x8909 EtherType), and in GRE.
mod field {
    pub type Field = core::ops::Range<usize>;
    pub const ETH_VERSION: usize = 0;
    pub const ETH_LENGTH: usize = 1;
    pub const ETH_SGT: Field = 4..6;
    pub const ETH_NEXT: Field = 6..8;
    pub const GRE_NEXT: Field = 0..2;
    pub const GRE_VERSION: usize = 2;
    pub const GRE_LENGTH: usize = 3;
    pub const GRE_SGT: Field = 6..8;
}

/// Where the header sits, which orders its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// After the MAC addresses (and VLAN tags) of an Ethernet frame.
    Ethernet,
    /// After a GRE header whose protocol type is 0x8909.
    Gre,
}

/// The header's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub sgt: u16,
    /// The EtherType of what follows the header.
    pub next: u16,
}

fn be16(b: &[u8], f: field::Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}

impl Repr {
    /// Read the header at the start of `data`.
    pub fn parse(data: &[u8], at: Placement) -> Result<Repr, DecodeError> {
        let h = data.get(..HEADER_LEN).ok_or(DecodeError::Truncated("cmd.truncated"))?;
        let (version, length, sgt, next) = match at {
            Placement::Ethernet => (h[field::ETH_VERSION], h[field::ETH_LENGTH], field::ETH_SGT, field::ETH_NEXT),
            Placement::Gre => (h[field::GRE_VERSION], h[field::GRE_LENGTH], field::GRE_SGT, field::GRE_NEXT),
        };
        if version != VERSION || length != LENGTH {
            return Err(DecodeError::Malformed("cmd.unsupported"));
        }
        Ok(Repr { sgt: be16(h, sgt), next: be16(h, next) })
    }

    /// Write the header into the first `HEADER_LEN` bytes of `out` (the SGT option word
    /// 0x0001, as tagging switches write it).
    pub fn emit(&self, out: &mut [u8], at: Placement) {
        let h = &mut out[..HEADER_LEN];
        let (sgt, next) = (self.sgt.to_be_bytes(), self.next.to_be_bytes());
        match at {
            Placement::Ethernet => {
                h.copy_from_slice(&[VERSION, LENGTH, 0, 1, sgt[0], sgt[1], next[0], next[1]]);
            }
            Placement::Gre => {
                h.copy_from_slice(&[next[0], next[1], VERSION, LENGTH, 0, 1, sgt[0], sgt[1]]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_placements_round_trip() {
        for at in [Placement::Ethernet, Placement::Gre] {
            let r = Repr { sgt: 0x1234, next: 0x0800 };
            let mut b = [0u8; HEADER_LEN + 2];
            r.emit(&mut b, at);
            assert_eq!(Repr::parse(&b, at), Ok(r));
        }
    }

    #[test]
    fn the_gre_header_of_tcpdumps_capture() {
        // captures/tunnels/various_gre.pcap, frame 25: after the GRE header (key 0x28), tshark
        // reads type 0x0800, version 1, length 1, options 0x0001, SGT 0, then IPv4.
        let b = [0x08, 0x00, 0x01, 0x01, 0x00, 0x01, 0x00, 0x00, 0x45];
        assert_eq!(Repr::parse(&b, Placement::Gre), Ok(Repr { sgt: 0, next: 0x0800 }));
        // Read as the Ethernet form, the same bytes are version 8: refused, not guessed.
        assert_eq!(Repr::parse(&b, Placement::Ethernet), Err(DecodeError::Malformed("cmd.unsupported")));
    }

    #[test]
    fn cut_or_unknown_forms_are_refused() {
        let good = [1, 1, 0, 1, 0, 5, 0x86, 0xdd];
        assert_eq!(Repr::parse(&good, Placement::Ethernet), Ok(Repr { sgt: 5, next: 0x86dd }));
        for n in 0..HEADER_LEN {
            assert_eq!(Repr::parse(&good[..n], Placement::Ethernet), Err(DecodeError::Truncated("cmd.truncated")));
        }
        for (i, v) in [(0, 2u8), (1, 2)] {
            let mut b = good;
            b[i] = v;
            assert_eq!(Repr::parse(&b, Placement::Ethernet), Err(DecodeError::Malformed("cmd.unsupported")));
        }
    }
}
