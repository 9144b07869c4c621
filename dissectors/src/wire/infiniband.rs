//! Native InfiniBand link layer (IBTA vol. 1 §7.7 LRH, §8.3 GRH, §7.8.2 VCRC): a packet is the
//! 8-byte Local Route Header, a Global Route Header when LNH says so (40 bytes, IPv6-shaped,
//! `wire::ipv6` reads it), the transport (BTH onwards, `rdma::ib`) up to and including the
//! ICRC, then the 2-byte Variant CRC. LRH `PktLen` counts 4-byte words from the first LRH byte
//! to the last ICRC byte, so the VCRC is outside it.
//!
//! LINKTYPE_INFINIBAND (247) frames start at the LRH; ERF records of type InfiniBand
//! (`wire::erf`) carry the same bytes.

use super::DecodeError;
use std::net::{Ipv6Addr, IpAddr};

mod field {
    pub type Field = core::ops::Range<usize>;
    /// VL (high nibble), LVer (low nibble).
    pub const VL_LVER: usize = 0;
    /// SL (high nibble), 2 reserved bits, LNH (low 2 bits).
    pub const SL_LNH: usize = 1;
    pub const DLID: Field = 2..4;
    /// 5 reserved bits, PktLen (11 bits).
    pub const PKT_LEN: Field = 4..6;
    pub const SLID: Field = 6..8;
}

pub const LRH_LEN: usize = field::SLID.end;
pub const GRH_LEN: usize = super::ipv6::HEADER_LEN;
pub const VCRC_LEN: usize = 2;
/// GRH NxtHdr for an IBA transport header (BTH) (IBTA vol. 1 §8.3.1).
pub const GRH_NEXT_HEADER_BTH: u8 = 0x1b;

/// Link Next Header (LRH LNH, IBTA vol. 1 §7.7.3).
pub mod lnh {
    /// Raw: a raw header follows (no IBA transport).
    pub const RAW: u8 = 0b00;
    /// IP non-IBA transport: a raw IPv6 packet follows.
    pub const IP_NON_IBA: u8 = 0b01;
    /// IBA local: BTH follows the LRH.
    pub const IBA_LOCAL: u8 = 0b10;
    /// IBA global: GRH, then BTH.
    pub const IBA_GLOBAL: u8 = 0b11;
}

/// Zero-copy view of a Local Route Header and what follows it.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        if buffer.as_ref().len() < LRH_LEN {
            return Err(DecodeError::Truncated("infiniband.truncated"));
        }
        Ok(Packet { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn vl(&self) -> u8 {
        self.b()[field::VL_LVER] >> 4
    }
    pub fn lver(&self) -> u8 {
        self.b()[field::VL_LVER] & 0x0f
    }
    pub fn sl(&self) -> u8 {
        self.b()[field::SL_LNH] >> 4
    }
    pub fn lnh(&self) -> u8 {
        self.b()[field::SL_LNH] & 0x03
    }
    pub fn dlid(&self) -> u16 {
        u16::from_be_bytes([self.b()[field::DLID.start], self.b()[field::DLID.start + 1]])
    }
    /// Packet length in 4-byte words, LRH through ICRC.
    pub fn pkt_len(&self) -> u16 {
        u16::from_be_bytes([self.b()[field::PKT_LEN.start], self.b()[field::PKT_LEN.start + 1]]) & 0x07ff
    }
    pub fn slid(&self) -> u16 {
        u16::from_be_bytes([self.b()[field::SLID.start], self.b()[field::SLID.start + 1]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
}

/// The meaning of a Local Route Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lrh {
    pub vl: u8,
    pub sl: u8,
    pub lnh: u8,
    pub dlid: u16,
    pub slid: u16,
    /// 4-byte words from the LRH through the ICRC.
    pub pkt_len: u16,
}

impl Lrh {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Lrh {
        Lrh { vl: p.vl(), sl: p.sl(), lnh: p.lnh(), dlid: p.dlid(), slid: p.slid(), pkt_len: p.pkt_len() }
    }
    /// Writes the 8 bytes (LVer 0, reserved bits 0).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        let b = p.bm();
        b[field::VL_LVER] = self.vl << 4;
        b[field::SL_LNH] = (self.sl << 4) | (self.lnh & 0x03);
        b[field::DLID].copy_from_slice(&self.dlid.to_be_bytes());
        b[field::PKT_LEN].copy_from_slice(&(self.pkt_len & 0x07ff).to_be_bytes());
        b[field::SLID].copy_from_slice(&self.slid.to_be_bytes());
    }
}

/// CRC-16 of the VCRC (IBTA vol. 1 §7.8.2): polynomial 0x100B, seed 0xFFFF, bit-reflected,
/// complemented; sent least significant byte first (checked against ibdump's packets in
/// rdma-infiniband-erf-ipoib.pcap).
pub const VCRC_ALGORITHM: crc::Algorithm<u16> = crc::Algorithm {
    width: 16,
    poly: 0x100b,
    init: 0xffff,
    refin: true,
    refout: true,
    xorout: 0xffff,
    check: 0x0a3d,
    residue: 0x0000,
};
static VCRC: crc::Crc<u16> = crc::Crc::<u16>::new(&VCRC_ALGORITHM);

/// The VCRC of `packet` (LRH through ICRC).
pub fn vcrc(packet: &[u8]) -> u16 {
    VCRC.checksum(packet)
}

/// The address a packet without GRH is known by: its LID, written as the IPv6 address
/// fe80::ffff:0:LID (LIDs are 16 bits; no port GID has this interface ID form).
pub fn lid_addr(lid: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xffff, 0, lid))
}

/// An IB packet split at the transport: source and destination (GIDs from the GRH, else LIDs
/// as `lid_addr`), the transport bytes (BTH through ICRC, as PktLen says, cut at the end of the
/// buffer), and the bytes before and after them (LRH, GRH; VCRC and anything after).
#[derive(Debug, Clone, Copy)]
pub struct Split<'a> {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub lnh: u8,
    pub transport: &'a [u8],
    /// LRH (+ GRH) length: where `transport` starts.
    pub header_len: usize,
}

/// Splits an IB packet (LRH first). A Raw or IP-non-IBA packet gives an empty transport.
pub fn split(data: &[u8]) -> Result<Split<'_>, DecodeError> {
    let p = Packet::new_checked(data)?;
    let lrh = Lrh::parse(&p);
    let end = (usize::from(lrh.pkt_len) * 4).min(data.len());
    if end < LRH_LEN {
        return Err(DecodeError::Malformed("infiniband.bad_packet_length"));
    }
    let (mut src, mut dst) = (lid_addr(lrh.slid), lid_addr(lrh.dlid));
    let header_len = match lrh.lnh {
        lnh::IBA_LOCAL => LRH_LEN,
        lnh::IBA_GLOBAL => {
            let grh = super::ipv6::Packet::new_checked(&data[LRH_LEN..end]).map_err(|e| match e {
                DecodeError::Truncated(_) => DecodeError::Truncated("infiniband.grh_truncated"),
                _ => DecodeError::Malformed("infiniband.bad_grh_version"),
            })?;
            if grh.next_header() != GRH_NEXT_HEADER_BTH {
                return Ok(Split { src, dst, lnh: lrh.lnh, transport: &[], header_len: data.len() });
            }
            src = IpAddr::V6(grh.src_addr());
            dst = IpAddr::V6(grh.dst_addr());
            LRH_LEN + GRH_LEN
        }
        _ => return Ok(Split { src, dst, lnh: lrh.lnh, transport: &[], header_len: data.len() }),
    };
    Ok(Split { src, dst, lnh: lrh.lnh, transport: &data[header_len..end.max(header_len)], header_len })
}

#[cfg(test)]
mod tests {
    use super::*;

    // rdma-infiniband-erf-ipoib.pcap frame 11: LRH (IBA local), BTH (RC Acknowledge), AETH,
    // ICRC, VCRC; 30 bytes.
    static ACK: [u8; 30] = [
        0x00, 0x02, 0x00, 0x04, 0x00, 0x07, 0x00, 0x01, 0x11, 0x40, 0xff, 0xff, 0x00, 0x87, 0x04, 0x08,
        0x00, 0xd4, 0x0a, 0x55, 0x1f, 0x00, 0x00, 0x01, 0xa8, 0x03, 0x55, 0x50, 0x30, 0x81,
    ];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&ACK[..]).unwrap();
        assert_eq!((p.vl(), p.lver(), p.sl(), p.lnh()), (0, 0, 0, lnh::IBA_LOCAL));
        assert_eq!((p.dlid(), p.slid(), p.pkt_len()), (4, 1, 7));
        assert_eq!(usize::from(p.pkt_len()) * 4 + VCRC_LEN, ACK.len());
    }

    #[test]
    fn construct() {
        let lrh = Lrh { vl: 0, sl: 0, lnh: lnh::IBA_LOCAL, dlid: 4, slid: 1, pkt_len: 7 };
        let mut b = [0u8; LRH_LEN];
        lrh.emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(b, ACK[..LRH_LEN]);
        assert_eq!(Lrh::parse(&Packet::new_unchecked(&ACK[..])), lrh);
    }

    #[test]
    fn vcrc_matches_the_capture() {
        let n = ACK.len() - VCRC_LEN;
        assert_eq!(vcrc(&ACK[..n]).to_le_bytes(), ACK[n..]);
        assert_eq!(VCRC.checksum(b"123456789"), VCRC_ALGORITHM.check);
    }

    #[test]
    fn split_local_and_short() {
        let s = split(&ACK).unwrap();
        assert_eq!((s.src, s.dst, s.header_len), (lid_addr(1), lid_addr(4), LRH_LEN));
        assert_eq!(s.transport, &ACK[8..28]);
        assert_eq!(split(&ACK[..5]).unwrap_err(), DecodeError::Truncated("infiniband.truncated"));
        // Cut by the capture: the transport ends at the buffer.
        assert_eq!(split(&ACK[..20]).unwrap().transport, &ACK[8..20]);
        let mut bad = ACK;
        bad[5] = 1; // PktLen 1 word: shorter than the LRH
        assert_eq!(split(&bad).unwrap_err(), DecodeError::Malformed("infiniband.bad_packet_length"));
        // LNH raw: no transport.
        let mut raw = ACK;
        raw[1] = 0;
        assert!(split(&raw).unwrap().transport.is_empty());
    }
}
