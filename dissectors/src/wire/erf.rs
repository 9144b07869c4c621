//! Endace Extensible Record Format records as LINKTYPE_ERF (197) frames (tcpdump.org
//! LINKTYPE_ERF; Endace "ERF Types Reference Guide"): a 16-byte header, optional 8-byte
//! extension headers, then the record's packet.
//!
//! Header: timestamp (8 bytes, little-endian 32.32 fixed point), type (bit 7: an extension
//! header follows), flags (bits 0-1 interface, bit 2 varying length, bit 3 truncated, bit 4
//! RX error, bit 5 DS error), rlen (record length, header included, big-endian), lctr (loss
//! counter, or colour on colour types), wlen (the packet's length on the wire). Each extension
//! header's first byte again has bit 7 set when another one follows. Ethernet types put a
//! 2-byte pad (offset, pad) before the frame. A record is `rlen` bytes; the packet is the
//! first `wlen` of what follows the headers (the rest is padding to 8 bytes).

use super::DecodeError;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const TIMESTAMP: Field = 0..8;
    pub const TYPE: usize = 8;
    pub const FLAGS: usize = 9;
    pub const RLEN: Field = 10..12;
    pub const LCTR: Field = 12..14;
    pub const WLEN: Field = 14..16;
}

pub const HEADER_LEN: usize = field::WLEN.end;
pub const EXT_HEADER_LEN: usize = 8;
/// The pad Ethernet record types put before the frame.
pub const ETH_PAD_LEN: usize = 2;
/// Bit 7 of the type and of each extension header type: another extension header follows.
const MORE_EXT: u8 = 0x80;
/// At most this many extension headers are walked (the chain is one bit per header).
const MAX_EXT_HEADERS: usize = 16;

/// ERF record types smbwire knows (ERF Types Reference Guide).
pub mod rtype {
    pub const ETH: u8 = 2;
    pub const COLOR_ETH: u8 = 11;
    pub const DSM_COLOR_ETH: u8 = 16;
    pub const COLOR_HASH_ETH: u8 = 20;
    pub const INFINIBAND: u8 = 21;
    pub const IPV4: u8 = 22;
    pub const IPV6: u8 = 23;
    /// Padding records (no packet).
    pub const PAD: u8 = 48;
}

pub mod flags {
    pub const VLEN: u8 = 0x04;
    pub const TRUNCATED: u8 = 0x08;
    pub const RX_ERROR: u8 = 0x10;
    pub const DS_ERROR: u8 = 0x20;
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// Zero-copy view of an ERF record.
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
            return Err(DecodeError::Truncated("erf.truncated"));
        }
        Ok(Packet { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// 32.32 fixed-point seconds since 1970.
    pub fn timestamp(&self) -> u64 {
        u64::from_le_bytes(self.b()[field::TIMESTAMP].try_into().expect("8 bytes"))
    }
    /// The record type without the extension bit.
    pub fn rtype(&self) -> u8 {
        self.b()[field::TYPE] & !MORE_EXT
    }
    pub fn has_extension(&self) -> bool {
        self.b()[field::TYPE] & MORE_EXT != 0
    }
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }
    pub fn rlen(&self) -> u16 {
        be16(&self.b()[field::RLEN])
    }
    pub fn lctr(&self) -> u16 {
        be16(&self.b()[field::LCTR])
    }
    pub fn wlen(&self) -> u16 {
        be16(&self.b()[field::WLEN])
    }
    /// Bytes of extension headers after the fixed header.
    pub fn extension_len(&self) -> Result<usize, DecodeError> {
        if !self.has_extension() {
            return Ok(0);
        }
        let b = self.b();
        let mut n = 0;
        loop {
            let at = HEADER_LEN + n * EXT_HEADER_LEN;
            let Some(h) = b.get(at..at + EXT_HEADER_LEN) else {
                return Err(DecodeError::Truncated("erf.extension_truncated"));
            };
            n += 1;
            if h[0] & MORE_EXT == 0 {
                return Ok(n * EXT_HEADER_LEN);
            }
            if n == MAX_EXT_HEADERS {
                return Err(DecodeError::Malformed("erf.too_many_extension_headers"));
            }
        }
    }
}

/// The meaning of an ERF record header (extension headers are written as given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr<'a> {
    pub timestamp: u64,
    pub rtype: u8,
    pub flags: u8,
    pub lctr: u16,
    pub wlen: u16,
    /// Extension headers, 8 bytes each (their "more" bits as given).
    pub extensions: &'a [u8],
}

impl<'a> Repr<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Repr<'a>, DecodeError> {
        let p = Packet::new_checked(b)?;
        let ext = p.extension_len()?;
        Ok(Repr {
            timestamp: p.timestamp(),
            rtype: p.rtype(),
            flags: p.flags(),
            lctr: p.lctr(),
            wlen: p.wlen(),
            extensions: &b[HEADER_LEN..HEADER_LEN + ext],
        })
    }
    /// Bytes between the start of the record and the packet (header, extensions, Ethernet pad).
    pub fn packet_offset(&self) -> usize {
        HEADER_LEN + self.extensions.len() + if is_ethernet(self.rtype) { ETH_PAD_LEN } else { 0 }
    }
    /// Appends the header and extension headers; `rlen` = the record length they head, the
    /// caller appends the Ethernet pad (if any), the packet and the record's padding.
    pub fn emit(&self, rlen: u16, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.timestamp.to_le_bytes());
        out.push(self.rtype | if self.extensions.is_empty() { 0 } else { MORE_EXT });
        out.push(self.flags);
        out.extend_from_slice(&rlen.to_be_bytes());
        out.extend_from_slice(&self.lctr.to_be_bytes());
        out.extend_from_slice(&self.wlen.to_be_bytes());
        out.extend_from_slice(self.extensions);
    }
}

/// Ethernet record types (a 2-byte pad precedes the frame).
pub fn is_ethernet(rtype: u8) -> bool {
    matches!(rtype, rtype::ETH | rtype::COLOR_ETH | rtype::DSM_COLOR_ETH | rtype::COLOR_HASH_ETH)
}

/// ERF timestamp (32.32 fixed point) from nanoseconds since 1970.
pub fn timestamp_from_ns(ns: u64) -> u64 {
    let secs = ns / 1_000_000_000;
    let frac = ((u128::from(ns % 1_000_000_000) << 32) / 1_000_000_000) as u64;
    (secs << 32) | frac
}

/// A record split: its type, flags and the packet bytes (captured part of `wlen`, within
/// `rlen` and the buffer).
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub rtype: u8,
    pub flags: u8,
    pub packet: &'a [u8],
    /// Where `packet` starts in the record.
    pub offset: usize,
}

pub fn record(data: &[u8]) -> Result<Record<'_>, DecodeError> {
    let r = Repr::parse(data)?;
    let off = r.packet_offset();
    let rlen = usize::from(Packet::new_unchecked(data).rlen());
    if rlen < off {
        return Err(DecodeError::Malformed("erf.bad_record_length"));
    }
    let end = data.len().min(rlen).min(off + usize::from(r.wlen)).max(off.min(data.len()));
    let start = off.min(end);
    Ok(Record { rtype: r.rtype, flags: r.flags, packet: &data[start..end], offset: start })
}

#[cfg(test)]
mod tests {
    use super::*;

    // rdma-infiniband-erf-ipoib.pcap frame 11's ERF header: type 21 (InfiniBand), flags 0x04
    // (varying length), rlen 48, lctr 0, wlen 30.
    static HDR: [u8; 16] = [0xe0, 0xed, 0x30, 0xae, 0xf8, 0x41, 0x2b, 0x48, 0x15, 0x04, 0x00, 0x30, 0x00, 0x00, 0x00, 0x1e];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&HDR[..]).unwrap();
        assert_eq!((p.rtype(), p.has_extension(), p.flags()), (rtype::INFINIBAND, false, flags::VLEN));
        assert_eq!((p.rlen(), p.lctr(), p.wlen()), (48, 0, 30));
        assert_eq!(p.timestamp() >> 32, 0x482b_41f8);
    }

    #[test]
    fn construct() {
        let r = Repr::parse(&HDR).unwrap();
        let mut out = Vec::new();
        r.emit(48, &mut out);
        assert_eq!(out, HDR);
    }

    #[test]
    fn record_bounds_and_extensions() {
        let mut rec = HDR.to_vec();
        rec.extend_from_slice(&[0xaa; 30]);
        rec.extend_from_slice(&[0; 2]); // padding to rlen 48
        let r = record(&rec).unwrap();
        assert_eq!((r.offset, r.packet.len()), (16, 30));
        // Cut by the capture.
        assert_eq!(record(&rec[..20]).unwrap().packet.len(), 4);
        // Two extension headers, then an Ethernet record with its pad.
        let ext = [0x81, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0];
        let e = Repr { timestamp: 1, rtype: rtype::ETH, flags: 0, lctr: 0, wlen: 4, extensions: &ext };
        let mut out = Vec::new();
        e.emit(16 + 16 + 2 + 4 + 2, &mut out);
        out.extend_from_slice(&[0, 0, 1, 2, 3, 4, 0, 0]);
        let r = record(&out).unwrap();
        assert_eq!((r.rtype, r.offset, r.packet), (rtype::ETH, 34, &[1u8, 2, 3, 4][..]));
        assert_eq!(record(&out[..20]).unwrap_err(), DecodeError::Truncated("erf.extension_truncated"));
        let mut long = out.clone();
        long[10..12].copy_from_slice(&8u16.to_be_bytes());
        assert_eq!(record(&long).unwrap_err(), DecodeError::Malformed("erf.bad_record_length"));
        let mut chain = HDR.to_vec();
        chain[8] |= 0x80;
        chain.extend(std::iter::repeat_n(0x80u8, 8 * 20));
        assert_eq!(record(&chain).unwrap_err(), DecodeError::Malformed("erf.too_many_extension_headers"));
    }

    #[test]
    fn timestamp_conversion() {
        assert_eq!(timestamp_from_ns(1_500_000_000), (1 << 32) | (1 << 31));
    }
}
