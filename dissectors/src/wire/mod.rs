//! Wire formats below SMB: one file per protocol, smoltcp-style zero-copy views
//! (`Packet<T: AsRef<[u8]>>` with a private `mod field` of byte ranges, a checked constructor,
//! one accessor per field) plus a `Repr` with `parse` and `emit`.
//!
//! `decode` walks a captured frame from its link layer down to the transport payload.

pub mod ethernet;
pub mod ipv4;
pub mod ipv6;
pub mod sll;
pub mod tcp;
pub mod udp;

use std::net::IpAddr;

/// Why a frame could not be decoded down to its transport payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer ends before a header does (anomaly name in `anomaly()`).
    Truncated(&'static str),
    /// A header field is impossible (bad version, header length, total length...).
    Malformed(&'static str),
    /// A link type smbwire does not decode.
    UnsupportedLinkType(u32),
}

impl DecodeError {
    /// Stable anomaly name for counting.
    pub fn anomaly(&self) -> &'static str {
        match self {
            DecodeError::Truncated(n) => n,
            DecodeError::Malformed(n) => n,
            DecodeError::UnsupportedLinkType(_) => "link.unsupported_linktype",
        }
    }
}

/// A TCP segment as found in a frame.
#[derive(Debug, Clone, Copy)]
pub struct TcpSegment<'a> {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    /// TCP flags byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10).
    pub flags: u8,
    /// Captured payload bytes (may be shorter than `declared_len` when snaplen cut the frame).
    pub payload: &'a [u8],
    /// Payload length as declared by the IP total length.
    pub declared_len: u32,
}

#[derive(Debug, Clone, Copy)]
pub struct UdpDatagram<'a> {
    pub src_port: u16,
    pub dst_port: u16,
    pub payload: &'a [u8],
    pub declared_len: u32,
}

#[derive(Debug, Clone, Copy)]
pub enum Transport<'a> {
    Tcp(TcpSegment<'a>),
    Udp(UdpDatagram<'a>),
    /// RoCEv1: EtherType 0x8915; `data` starts at the GRH.
    RoceV1(&'a [u8]),
    /// Any other IP protocol or EtherType.
    Other,
}

/// A frame decoded down to its transport.
#[derive(Debug, Clone, Copy)]
pub struct Decoded<'a> {
    /// Network-layer source and destination (for RoCEv1, the GRH GIDs as IPv6).
    pub src: IpAddr,
    pub dst: IpAddr,
    pub transport: Transport<'a>,
    /// Bytes of the frame that are link/IP/transport headers (and link trailer/padding):
    /// `header_bytes + transport payload captured bytes == frame captured bytes`.
    pub header_bytes: usize,
    /// Fingerprint of the IP and transport headers (excluding TTL/hop limit and the IP
    /// checksum) and payload length: two frames with the same signature in the same flow
    /// within a short time are one frame seen twice by a mirror port.
    pub dup_signature: u64,
}

/// Decode a frame of the given link type down to its transport payload.
/// Handles Ethernet (802.1Q and QinQ tags), Linux SLL and SLL2, raw IP, BSD NULL, IPv4, IPv6.
pub fn decode(linktype: u32, data: &[u8]) -> Result<Decoded<'_>, DecodeError> {
    let _ = data;
    Err(DecodeError::UnsupportedLinkType(linktype))
}
