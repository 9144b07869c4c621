//! Wire formats below SMB: one file per protocol, smoltcp-style zero-copy views
//! (`Packet<T: AsRef<[u8]>>` with a private `mod field` of byte ranges, a checked constructor,
//! one accessor per field) plus a `Repr` with `parse` and `emit`.
//!
//! `decode` walks a captured frame from its link layer down to the transport payload.

pub mod anomaly;
pub mod checksum;
pub mod cmd;
pub mod erf;
pub mod erspan;
pub mod ethernet;
pub mod geneve;
pub mod gre;
pub mod infiniband;
pub mod ipoib;
pub mod ipv4;
pub mod ipv6;
pub mod linktype;
pub mod sll;
pub mod tcp;
pub mod udp;
pub mod vxlan;

pub use anomaly::Anomaly;

/// Frames for tests, built with the emitters.
#[cfg(test)]
pub mod testutil {
    use super::{ethernet, ipv4, tcp};
    use std::net::{IpAddr, Ipv4Addr};

    /// One end of a TCP connection: address, port, MAC address.
    pub type End = (Ipv4Addr, u16, ethernet::Address);

    /// An Ethernet/IPv4/TCP frame from `src` to `dst`: (sequence, acknowledgement) numbers,
    /// TCP flags, IP identification.
    pub fn tcp_v4_frame(src: End, dst: End, (seq, ack): (u32, u32), flags: u8, ident: u16, payload: &[u8]) -> Vec<u8> {
        let seg = tcp::Repr {
            src_port: src.1,
            dst_port: dst.1,
            seq_number: seq,
            ack_number: ack,
            flags,
            window_len: 65535,
            urgent_at: 0,
            options: &[],
            payload,
        };
        let ip = ipv4::Repr {
            src_addr: src.0,
            dst_addr: dst.0,
            next_header: ipv4::protocol::TCP,
            payload_len: seg.buffer_len(),
            hop_limit: 64,
            ident,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            dscp_ecn: 0,
        };
        let eth = ethernet::Repr { src_addr: src.2, dst_addr: dst.2, tags: [None, None], ethertype: ethernet::ethertype::IPV4 };
        let l4 = ethernet::HEADER_LEN + ipv4::HEADER_LEN;
        let mut buf = vec![0u8; l4 + seg.buffer_len()];
        eth.emit(&mut ethernet::Packet::new_unchecked(&mut buf[..]));
        ip.emit(&mut ipv4::Packet::new_unchecked(&mut buf[ethernet::HEADER_LEN..]));
        seg.emit(&mut tcp::Packet::new_unchecked(&mut buf[l4..]), IpAddr::V4(src.0), IpAddr::V4(dst.0));
        buf
    }
}

use std::net::{IpAddr, Ipv4Addr};

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
    /// RoCEv1: EtherType 0x8915; `data` starts at the GRH and ends where the GRH payload
    /// length says (or at the end of the capture when that is shorter). It includes the
    /// ICRC; `header_bytes` counts the Ethernet header and any bytes after the GRH payload.
    RoceV1(&'a [u8]),
    /// Native InfiniBand (LINKTYPE_INFINIBAND, ERF InfiniBand records): the transport from the
    /// BTH through the ICRC (as LRH PktLen says, cut at the end of the capture). The LRH, GRH
    /// and VCRC are `header_bytes`; `src`/`dst` are the GRH GIDs, else the LIDs as
    /// `infiniband::lid_addr`. Whether the Send inside carries IPoIB is the caller's question.
    Infiniband(&'a [u8]),
    /// Any other IP protocol or EtherType, or an IP fragment that is not the first.
    /// `header_bytes` is then the whole frame.
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
    /// What `dup_signature` hashes, kept so only the callers that need it pay for it (the
    /// `--threads` reader decodes every frame only to find its connection).
    sig: SigParts<'a>,
    /// Something odd but decodable (fragment, TSO zero length...): a stable anomaly name the
    /// caller should raise once for this frame.
    pub anomaly: Option<Anomaly>,
    /// The remote mirror session or tunnel the frame was decoded from inside, if any.
    pub tunnel: Option<Tunnelling>,
}

/// The kinds of tunnel `decode` opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tunnel {
    /// GRE carrying Ethernet (transparent Ethernet bridging: Linux `gretap`, NVGRE).
    Gretap,
    /// ERSPAN type I (GRE 0x88be without a sequence number, no ERSPAN header).
    Erspan1,
    /// ERSPAN type II (GRE 0x88be, 8-byte ERSPAN header).
    Erspan2,
    /// ERSPAN type III (GRE 0x22eb, 12-byte header and optional subheader).
    Erspan3,
    /// GRE carrying IPv4 or IPv6 (an IP tunnel).
    GreIp,
    /// VXLAN (UDP 4789 or 8472).
    Vxlan,
    /// GENEVE (UDP 6081), carrying Ethernet or IP.
    Geneve,
}

impl Tunnel {
    /// Every kind, in the order the docs list them.
    pub const ALL: [Tunnel; 7] =
        [Tunnel::Gretap, Tunnel::Erspan1, Tunnel::Erspan2, Tunnel::Erspan3, Tunnel::GreIp, Tunnel::Vxlan, Tunnel::Geneve];

    /// How a network engineer names it (the report, the HTML page and the live view).
    pub fn label(self) -> &'static str {
        match self {
            Tunnel::Gretap => "GRE (Ethernet, gretap)",
            Tunnel::Erspan1 => "ERSPAN type I",
            Tunnel::Erspan2 => "ERSPAN type II",
            Tunnel::Erspan3 => "ERSPAN type III",
            Tunnel::GreIp => "GRE (IP)",
            Tunnel::Vxlan => "VXLAN",
            Tunnel::Geneve => "GENEVE",
        }
    }

    /// The name the result uses.
    pub fn name(self) -> &'static str {
        match self {
            Tunnel::Gretap => "gretap",
            Tunnel::Erspan1 => "erspan1",
            Tunnel::Erspan2 => "erspan2",
            Tunnel::Erspan3 => "erspan3",
            Tunnel::GreIp => "gre_ip",
            Tunnel::Vxlan => "vxlan",
            Tunnel::Geneve => "geneve",
        }
    }
}

/// How a frame arrived: the outermost tunnel, the one inside it (two are opened at most), and
/// the bytes around the innermost frame (outer link, IP, GRE/UDP, ERSPAN/VXLAN headers of every
/// layer, and the outer frame's trailer; part of `header_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tunnelling {
    pub outer: Tunnel,
    pub inner: Option<Tunnel>,
    pub bytes: u32,
}

impl Tunnelling {
    /// The result's key: the outer kind, then the inner one after a `+` (`vxlan+erspan2`).
    pub fn key(&self) -> String {
        match self.inner {
            Some(i) => format!("{}+{}", self.outer.name(), i.name()),
            None => self.outer.name().to_string(),
        }
    }
}

/// What follows the link layer.
#[derive(Clone, Copy)]
enum Network {
    Ipv4,
    Ipv6,
    RoceV1,
    /// A non-IP EtherType, unknown BSD address family, or 802.3 length field.
    Other,
}

fn network_of_ethertype(ty: u16) -> Network {
    match ty {
        ethernet::ethertype::IPV4 => Network::Ipv4,
        ethernet::ethertype::IPV6 => Network::Ipv6,
        ethernet::ethertype::ROCE_V1 => Network::RoceV1,
        _ => Network::Other,
    }
}

/// BSD loopback address family values for IPv6 (NetBSD/OpenBSD 24, FreeBSD 28, macOS 30).
const BSD_AF_INET: u32 = 2;
const BSD_AF_INET6: [u32; 3] = [24, 28, 30];

/// Walk the link-layer header: which network protocol, and where it starts.
fn link(lt: u32, data: &[u8]) -> Result<(Network, usize), DecodeError> {
    match lt {
        linktype::ETHERNET => {
            let eth = ethernet::Packet::new_checked(data)?;
            let (ty, off) = eth.inner()?;
            Ok((network_of_ethertype(ty), off))
        }
        linktype::LINUX_SLL | linktype::LINUX_SLL2 => {
            let v = if lt == linktype::LINUX_SLL { sll::Version::V1 } else { sll::Version::V2 };
            let p = sll::Packet::new_checked(data, v)?;
            let (ty, off) = ethernet::skip_tags(data, p.protocol(), v.header_len())?;
            Ok((network_of_ethertype(ty), off))
        }
        linktype::RAW => match data.first().map(|b| b >> 4) {
            None => Err(DecodeError::Truncated("raw.truncated")),
            Some(4) => Ok((Network::Ipv4, 0)),
            Some(6) => Ok((Network::Ipv6, 0)),
            Some(_) => Err(DecodeError::Malformed("raw.bad_version")),
        },
        linktype::IPV4 => Ok((Network::Ipv4, 0)),
        linktype::IPV6 => Ok((Network::Ipv6, 0)),
        linktype::IPOIB => {
            let p = ipoib::Packet::new_checked(data)?;
            Ok((network_of_ethertype(p.ethertype()), ipoib::HEADER_LEN))
        }
        linktype::NULL => {
            // The family is in the capturing host's byte order, which the file does not record.
            let b: [u8; 4] = data.get(..4).and_then(|b| b.try_into().ok()).ok_or(DecodeError::Truncated("null.truncated"))?;
            let (le, be) = (u32::from_le_bytes(b), u32::from_be_bytes(b));
            let net = if le == BSD_AF_INET || be == BSD_AF_INET {
                Network::Ipv4
            } else if BSD_AF_INET6.contains(&le) || BSD_AF_INET6.contains(&be) {
                Network::Ipv6
            } else {
                Network::Other
            };
            Ok((net, 4))
        }
        _ => Err(DecodeError::UnsupportedLinkType(lt)),
    }
}

/// A fast non-cryptographic hash for frame fingerprints: 8 bytes at a time through a folded
/// 64x64->128-bit multiply (the mixing step of wyhash/foldhash), about ten times fewer
/// dependent multiplies than byte-wise FNV-1a. Not seeded: signatures only need to be stable
/// within one run.
#[derive(Clone, Copy, Debug)]
struct Fnv(u64);

const FP_K0: u64 = 0xa076_1d64_78bd_642f;
const FP_K1: u64 = 0xe703_7ed1_a0b4_28db;

#[inline]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

impl Fnv {
    fn new() -> Self {
        Fnv(0x243f_6a88_85a3_08d3)
    }
    #[inline]
    fn bytes(mut self, data: &[u8]) -> Self {
        let mut chunks = data.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().unwrap());
            self.0 = fold_mul(self.0 ^ w, FP_K0);
        }
        let rest = chunks.remainder();
        let mut tail = [0u8; 8];
        tail[..rest.len()].copy_from_slice(rest);
        // The length keeps "ab" + "" apart from "a" + "b".
        self.0 = fold_mul(self.0 ^ u64::from_le_bytes(tail), FP_K1 ^ data.len() as u64);
        self
    }
    fn finish(self) -> u64 {
        fold_mul(self.0, FP_K0)
    }
}

/// The parts of a duplicate signature (see `signature`).
#[derive(Debug, Clone, Copy)]
struct SigParts<'a> {
    net: Fnv,
    header: SigHeader<'a>,
    declared: u32,
    payload: &'a [u8],
}

#[derive(Debug, Clone, Copy)]
enum SigHeader<'a> {
    Bytes(&'a [u8]),
    Protocol(u8),
}

impl<'a> SigParts<'a> {
    fn new(net: Fnv, header: SigHeader<'a>, declared: u32, payload: &'a [u8]) -> Self {
        SigParts { net, header, declared, payload }
    }
}

impl Decoded<'_> {
    /// Fingerprint of the IP and transport headers (excluding TTL/hop limit and the IP
    /// checksum) and payload length: two frames with the same signature in the same flow
    /// within a short time are one frame seen twice by a mirror port.
    pub fn dup_signature(&self) -> u64 {
        let p = &self.sig;
        match p.header {
            SigHeader::Bytes(h) => signature(p.net, h, p.declared, p.payload),
            SigHeader::Protocol(proto) => signature(p.net, &[proto], p.declared, p.payload),
        }
    }
}

/// Payload bytes that enter the duplicate signature.
pub const DUP_SIGNATURE_PAYLOAD_BYTES: usize = 64;

/// Fingerprint: network header without the per-hop fields, transport header, declared
/// payload length, and the first payload bytes.
fn signature(net_header: Fnv, transport_header: &[u8], declared_len: u32, payload: &[u8]) -> u64 {
    net_header
        .bytes(transport_header)
        .bytes(&declared_len.to_le_bytes())
        .bytes(&payload[..payload.len().min(DUP_SIGNATURE_PAYLOAD_BYTES)])
        .finish()
}

/// A network header's addresses, the bytes after it (captured, without link padding), the
/// declared length of those bytes, and the hash of the header without TTL/checksum.
struct NetLayer<'a> {
    src: IpAddr,
    dst: IpAddr,
    protocol: u8,
    payload: &'a [u8],
    declared: usize,
    hash: Fnv,
    /// Set when this is a fragment whose transport header is elsewhere.
    later_fragment: bool,
    anomaly: Option<Anomaly>,
}

fn ipv4_layer(data: &[u8]) -> Result<NetLayer<'_>, DecodeError> {
    let ip = ipv4::Packet::new_checked(data)?;
    let hl = usize::from(ip.header_len());
    let mut anomaly = None;
    let declared = match usize::from(ip.total_len()) {
        0 => {
            // Captured on the sender before segmentation offload filled the length in.
            anomaly = Some(Anomaly::Ipv4ZeroTotalLength);
            data.len() - hl
        }
        tl => tl - hl,
    };
    let later_fragment = ip.frag_offset() != 0;
    if later_fragment {
        anomaly = Some(Anomaly::Ipv4NonFirstFragment);
    } else if ip.more_frags() {
        anomaly = Some(Anomaly::Ipv4Fragment);
    }
    // Header without TTL (byte 8) and checksum (bytes 10..12).
    let hash = Fnv::new().bytes(&data[..8]).bytes(&data[9..10]).bytes(&data[12..hl]);
    let end = ip.end();
    Ok(NetLayer {
        src: IpAddr::V4(ip.src_addr()),
        dst: IpAddr::V4(ip.dst_addr()),
        protocol: ip.next_header(),
        payload: &data[hl..end],
        declared,
        hash,
        later_fragment,
        anomaly,
    })
}

fn ipv6_layer(data: &[u8]) -> Result<NetLayer<'_>, DecodeError> {
    let ip = ipv6::Packet::new_checked(data)?;
    let mut anomaly = None;
    let payload = &data[ipv6::HEADER_LEN..ip.end()];
    let upper = ipv6::skip_extension_headers(ip.next_header(), payload)?;
    let declared = match usize::from(ip.payload_len()) {
        // Jumbogram (RFC 2675) or a TSO capture: the captured bytes are all we know.
        0 => {
            anomaly = Some(Anomaly::Ipv6ZeroPayloadLength);
            payload.len()
        }
        pl => pl,
    };
    let declared = declared.checked_sub(upper.offset).ok_or(DecodeError::Malformed("ipv6.bad_payload_length"))?;
    let mut later_fragment = false;
    if let Some((off, more)) = upper.fragment {
        if off != 0 {
            later_fragment = true;
            anomaly = Some(Anomaly::Ipv6NonFirstFragment);
        } else if more {
            anomaly = Some(Anomaly::Ipv6Fragment);
        }
    }
    // Fixed header without hop limit (byte 7), plus the extension headers.
    let hash = Fnv::new().bytes(&data[..7]).bytes(&data[8..ipv6::HEADER_LEN]).bytes(&payload[..upper.offset]);
    Ok(NetLayer {
        src: IpAddr::V6(ip.src_addr()),
        dst: IpAddr::V6(ip.dst_addr()),
        protocol: upper.next_header,
        payload: &payload[upper.offset..],
        declared,
        hash,
        later_fragment,
        anomaly,
    })
}

/// Decode a frame of the given link type down to its transport payload.
/// Handles Ethernet (802.1Q and QinQ tags), Linux SLL and SLL2, raw IP, BSD NULL, IPv4, IPv6,
/// and RoCEv1 (EtherType 0x8915, stopped at the GRH).
///
/// `header_bytes` accounting: for Tcp/Udp, `header_bytes + payload.len() == data.len()`
/// (link header, IP and extension headers, transport header, link padding/trailer after the
/// IP length). For `RoceV1(d)`, `header_bytes + d.len() == data.len()`. For `Other`,
/// `header_bytes == data.len()`. Non-IP frames decode to `Other` with unspecified
/// (0.0.0.0) addresses.
pub fn decode<'a>(linktype: u32, data: &'a [u8]) -> Result<Decoded<'a>, DecodeError> {
    decode_at(linktype, data, 0)
}

/// Tunnels followed inside one another at most (ERSPAN inside VXLAN is two); deeper ones are
/// `Other`, so a crafted frame cannot make the decoder recurse without end. The kernel
/// program looks as deep (`SMBWIRE_MAX_TUNNELS`, bpf/smbwire.h).
pub(crate) const MAX_TUNNEL_DEPTH: u8 = crate::abi::u8_of(crate::abi::SMBWIRE_MAX_TUNNELS);

/// A frame carried inside a tunnel: how to decode it, and a remark on it.
struct Tunnelled<'a> {
    kind: Tunnel,
    linktype: u32,
    frame: &'a [u8],
    anomaly: Option<Anomaly>,
}

/// What a remote mirror session or tunnel carries in this IP payload: the frame inside GRE
/// (`gretap`, ERSPAN types I-III, GRE over IP; Ethernet or IP after a Cisco MetaData header)
/// or VXLAN (UDP port 4789, or Linux's 8472). `Ok(None)` for
/// anything else, and for GRE or VXLAN carrying what smbwire does not follow (a GRE version
/// or protocol type of its own: PPTP, MPLS, NSH); `Err` when the tunnel's header is cut or
/// impossible.
fn tunnelled<'a>(layer: &NetLayer<'a>) -> Result<Option<Tunnelled<'a>>, DecodeError> {
    let bytes: &'a [u8] = layer.payload;
    match layer.protocol {
        ipv4::protocol::GRE => {
            let p = gre::Packet::new_checked(bytes)?;
            let Ok(g) = gre::Repr::parse(&p) else { return Ok(None) };
            let inner: &'a [u8] = &bytes[p.header_len()..];
            let (kind, linktype, frame, anomaly) = match g.protocol {
                gre::protocol::TEB => (Tunnel::Gretap, linktype::ETHERNET, inner, None),
                gre::protocol::IPV4 | gre::protocol::IPV6 => (Tunnel::GreIp, linktype::RAW, inner, None),
                // TrustSec between its devices: the SGT header, then IP or Ethernet.
                gre::protocol::CISCO_METADATA => {
                    let c = cmd::Repr::parse(inner, cmd::Placement::Gre)?;
                    let frame: &'a [u8] = &inner[cmd::HEADER_LEN..];
                    match c.next {
                        gre::protocol::TEB => (Tunnel::Gretap, linktype::ETHERNET, frame, None),
                        gre::protocol::IPV4 | gre::protocol::IPV6 => (Tunnel::GreIp, linktype::RAW, frame, None),
                        _ => return Ok(None),
                    }
                }
                // Type I: no ERSPAN header, no sequence number.
                gre::protocol::ERSPAN_II if g.sequence.is_none() => (Tunnel::Erspan1, linktype::ETHERNET, inner, None),
                gre::protocol::ERSPAN_II | gre::protocol::ERSPAN_III => {
                    let e = erspan::Packet::new_checked(inner)?;
                    let linktype = match e.frame_type() {
                        erspan::FRAME_ETHERNET => linktype::ETHERNET,
                        erspan::FRAME_IP => linktype::RAW,
                        _ => return Ok(None),
                    };
                    let kind = if g.protocol == gre::protocol::ERSPAN_II { Tunnel::Erspan2 } else { Tunnel::Erspan3 };
                    (kind, linktype, &inner[e.header_len()..], e.truncated().then_some(Anomaly::ErspanTruncatedFrame))
                }
                _ => return Ok(None),
            };
            Ok(Some(Tunnelled { kind, linktype, frame, anomaly }))
        }
        ipv4::protocol::UDP => {
            let Ok(dg) = udp::Packet::new_checked(bytes) else { return Ok(None) };
            let port = dg.dst_port();
            if !vxlan::is_port(port) && port != geneve::PORT {
                return Ok(None);
            }
            let end = usize::from(dg.len()).min(bytes.len());
            let datagram: &'a [u8] = &bytes[udp::HEADER_LEN..end];
            if port == geneve::PORT {
                // Anything else sent to the port (another version, a cut header) is plain UDP,
                // and so is a payload other than Ethernet or IP.
                let Ok(g) = geneve::Packet::new_checked(datagram) else { return Ok(None) };
                let linktype = match g.protocol() {
                    gre::protocol::TEB => linktype::ETHERNET,
                    gre::protocol::IPV4 | gre::protocol::IPV6 => linktype::RAW,
                    _ => return Ok(None),
                };
                return Ok(Some(Tunnelled { kind: Tunnel::Geneve, linktype, frame: &datagram[g.header_len()..], anomaly: None }));
            }
            // Anything else sent to the port is plain UDP.
            if vxlan::Packet::new_checked(datagram).is_err() {
                return Ok(None);
            }
            Ok(Some(Tunnelled { kind: Tunnel::Vxlan, linktype: linktype::ETHERNET, frame: &datagram[vxlan::HEADER_LEN..], anomaly: None }))
        }
        _ => Ok(None),
    }
}

fn decode_at<'a>(linktype: u32, data: &'a [u8], depth: u8) -> Result<Decoded<'a>, DecodeError> {
    match linktype {
        linktype::ERF => return decode_erf(data),
        linktype::INFINIBAND => return decode_infiniband(data),
        _ => {}
    }
    let (net, off) = link(linktype, data)?;
    let rest = &data[off..];
    let layer = match net {
        Network::Ipv4 => ipv4_layer(rest)?,
        Network::Ipv6 => ipv6_layer(rest)?,
        Network::RoceV1 => return decode_roce_v1(data, off),
        Network::Other => {
            let unspecified = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
            let hash = Fnv::new().bytes(&data[..off]);
            return Ok(Decoded {
                src: unspecified,
                dst: unspecified,
                transport: Transport::Other,
                header_bytes: data.len(),
                sig: SigParts::new(hash, SigHeader::Bytes(&[]), rest.len() as u32, rest),
                anomaly: None,
                tunnel: None,
            });
        }
    };
    let other = |layer: &NetLayer<'a>| Decoded {
        src: layer.src,
        dst: layer.dst,
        transport: Transport::Other,
        header_bytes: data.len(),
        sig: SigParts::new(layer.hash, SigHeader::Protocol(layer.protocol), layer.declared as u32, layer.payload),
        anomaly: layer.anomaly,
        tunnel: None,
    };
    if layer.later_fragment {
        return Ok(other(&layer));
    }
    if depth < MAX_TUNNEL_DEPTH {
        if let Some(t) = tunnelled(&layer)? {
            // The inner frame decoded as if captured alone; the tunnel's headers (and the
            // outer frame's trailer) join its header bytes.
            let mut inner = decode_at(t.linktype, t.frame, depth + 1)?;
            let around = data.len() - t.frame.len();
            inner.header_bytes += around;
            // `decode_at` opens at most two, so the one inside has none inside it.
            inner.tunnel = Some(Tunnelling {
                outer: t.kind,
                inner: inner.tunnel.map(|i| i.outer),
                bytes: around as u32 + inner.tunnel.map_or(0, |i| i.bytes),
            });
            inner.anomaly = inner.anomaly.or(t.anomaly).or(layer.anomaly);
            return Ok(inner);
        }
    }
    let (transport, header, payload) = match layer.protocol {
        ipv4::protocol::TCP => {
            let seg = tcp::Packet::new_checked(layer.payload).map_err(|e| tcp_error_for(e, &layer))?;
            let hl = usize::from(seg.header_len());
            let declared = layer.declared.checked_sub(hl).ok_or(DecodeError::Malformed("tcp.bad_header_length"))?;
            let payload: &[u8] = &layer.payload[hl..];
            let t = Transport::Tcp(TcpSegment {
                src_port: seg.src_port(),
                dst_port: seg.dst_port(),
                seq: seg.seq_number(),
                ack: seg.ack_number(),
                flags: seg.flags(),
                payload,
                declared_len: declared as u32,
            });
            (t, &layer.payload[..hl], payload)
        }
        ipv4::protocol::UDP => {
            let dg = udp::Packet::new_checked(layer.payload)?;
            let len = usize::from(dg.len());
            if len > layer.declared {
                return Err(DecodeError::Malformed("udp.bad_length"));
            }
            let payload: &[u8] = &layer.payload[udp::HEADER_LEN..len.min(layer.payload.len())];
            let t = Transport::Udp(UdpDatagram {
                src_port: dg.src_port(),
                dst_port: dg.dst_port(),
                payload,
                declared_len: (len - udp::HEADER_LEN) as u32,
            });
            (t, &layer.payload[..udp::HEADER_LEN], payload)
        }
        _ => return Ok(other(&layer)),
    };
    let declared = match transport {
        Transport::Tcp(t) => t.declared_len,
        Transport::Udp(u) => u.declared_len,
        _ => 0,
    };
    Ok(Decoded {
        src: layer.src,
        dst: layer.dst,
        transport,
        header_bytes: data.len() - payload.len(),
        sig: SigParts::new(layer.hash, SigHeader::Bytes(header), declared, payload),
        anomaly: layer.anomaly,
        tunnel: None,
    })
}

/// A TCP header cut by the end of a complete IP packet is malformed, not truncated.
fn tcp_error_for(e: DecodeError, layer: &NetLayer<'_>) -> DecodeError {
    match e {
        DecodeError::Truncated(_) if layer.payload.len() >= layer.declared => DecodeError::Malformed("tcp.bad_header_length"),
        e => e,
    }
}

/// RoCEv1 (IBTA Annex A16): the GRH (IPv6-shaped, 40 bytes) directly follows Ethernet.
fn decode_roce_v1(data: &[u8], off: usize) -> Result<Decoded<'_>, DecodeError> {
    let grh = ipv6::Packet::new_checked(&data[off..]).map_err(|e| match e {
        DecodeError::Truncated(_) => DecodeError::Truncated("roce.grh_truncated"),
        _ => DecodeError::Malformed("roce.bad_grh_version"),
    })?;
    let end = off + (ipv6::HEADER_LEN + usize::from(grh.payload_len())).min(data.len() - off);
    let roce = &data[off..end];
    let hash = Fnv::new().bytes(&roce[..7]).bytes(&roce[8..ipv6::HEADER_LEN]);
    let after = &roce[ipv6::HEADER_LEN..];
    Ok(Decoded {
        src: IpAddr::V6(grh.src_addr()),
        dst: IpAddr::V6(grh.dst_addr()),
        transport: Transport::RoceV1(roce),
        header_bytes: data.len() - roce.len(),
        sig: SigParts::new(hash, SigHeader::Bytes(&[]), u32::from(grh.payload_len()), after),
        anomaly: None,
        tunnel: None,
    })
}

/// An ERF record (LINKTYPE_ERF): the packet inside decoded as its record type says, the ERF
/// headers, Ethernet pad and record padding counted as header bytes. Record types other than
/// Ethernet, InfiniBand, IPv4 and IPv6 decode to `Other` with `erf.unsupported_record_type`
/// (padding records without it).
fn decode_erf(data: &[u8]) -> Result<Decoded<'_>, DecodeError> {
    let rec = erf::record(data)?;
    let inner = match rec.rtype {
        t if erf::is_ethernet(t) => linktype::ETHERNET,
        erf::rtype::INFINIBAND => linktype::INFINIBAND,
        erf::rtype::IPV4 => linktype::IPV4,
        erf::rtype::IPV6 => linktype::IPV6,
        t => {
            let unspecified = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
            let hash = Fnv::new().bytes(&data[..rec.offset.min(erf::HEADER_LEN)]);
            return Ok(Decoded {
                src: unspecified,
                dst: unspecified,
                transport: Transport::Other,
                header_bytes: data.len(),
                sig: SigParts::new(hash, SigHeader::Bytes(&[]), rec.packet.len() as u32, rec.packet),
                anomaly: (t != erf::rtype::PAD).then_some(Anomaly::ErfUnsupportedRecordType),
                tunnel: None,
            });
        }
    };
    let mut d = decode(inner, rec.packet)?;
    d.header_bytes += data.len() - rec.packet.len();
    if d.anomaly.is_none() && rec.flags & (erf::flags::RX_ERROR | erf::flags::DS_ERROR) != 0 {
        d.anomaly = Some(Anomaly::ErfRxError);
    }
    Ok(d)
}

/// A native InfiniBand packet from its LRH: stopped at the BTH (`Transport::Infiniband`), or
/// `Other` when the LRH says no IBA transport follows (raw packets).
fn decode_infiniband(data: &[u8]) -> Result<Decoded<'_>, DecodeError> {
    let s = infiniband::split(data)?;
    // LRH without VL (byte 0, changed per link), GRH without HopLmt (byte 7).
    let mut hash = Fnv::new().bytes(&data[1..infiniband::LRH_LEN]);
    if s.header_len == infiniband::LRH_LEN + infiniband::GRH_LEN {
        let g = &data[infiniband::LRH_LEN..s.header_len];
        hash = hash.bytes(&g[..7]).bytes(&g[8..]);
    }
    let transport = if s.transport.is_empty() { Transport::Other } else { Transport::Infiniband(s.transport) };
    Ok(Decoded {
        src: s.src,
        dst: s.dst,
        transport,
        header_bytes: data.len() - s.transport.len(),
        sig: SigParts::new(hash, SigHeader::Bytes(&[]), s.transport.len() as u32, s.transport),
        anomaly: None,
        tunnel: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::testutil::{public_dir, public_files, read_all};
    use std::net::Ipv6Addr;

    /// `Tunnel::ALL` holds every kind once (the match fails to compile when a kind is added
    /// and not placed), each with its own name and label: the views list what it holds.
    #[test]
    fn every_tunnel_kind_is_listed_once() {
        fn place(t: Tunnel) -> usize {
            match t {
                Tunnel::Gretap => 0,
                Tunnel::Erspan1 => 1,
                Tunnel::Erspan2 => 2,
                Tunnel::Erspan3 => 3,
                Tunnel::GreIp => 4,
                Tunnel::Vxlan => 5,
                Tunnel::Geneve => 6,
            }
        }
        for (i, t) in Tunnel::ALL.iter().enumerate() {
            assert_eq!(place(*t), i);
        }
        let names: std::collections::HashSet<_> = Tunnel::ALL.iter().map(|t| t.name()).collect();
        let labels: std::collections::HashSet<_> = Tunnel::ALL.iter().map(|t| t.label()).collect();
        assert_eq!((names.len(), labels.len()), (Tunnel::ALL.len(), Tunnel::ALL.len()));
        assert!(names.iter().all(|n| !n.contains('+')), "`+` joins two kinds in the result's keys");
    }

    /// Per-transport (frames, captured bytes) from the tshark protocol hierarchy in
    /// expected.json: TCP/UDP directly over IPv4/IPv6 (after any IPv6 extension headers).
    fn phs_transport_counts(phs: &[serde_json::Value]) -> [(u64, u64); 2] {
        let mut stack: Vec<String> = Vec::new();
        let mut out = [(0, 0); 2];
        for line in phs {
            let line = line.as_str().unwrap();
            let depth = (line.len() - line.trim_start().len()) / 2;
            let mut parts = line.split_whitespace();
            let name = parts.next().unwrap().to_string();
            let num = |p: Option<&str>| p.unwrap().split(':').nth(1).unwrap().parse::<u64>().unwrap();
            let (frames, bytes) = (num(parts.next()), num(parts.next()));
            stack.truncate(depth);
            let parent = stack.iter().rev().find(|n| !n.starts_with("ipv6."));
            let over_ip = matches!(parent.map(String::as_str), Some("ip" | "ipv6"));
            // Exclude transports quoted inside ICMP errors or tunnels: the IP layer must be
            // the first network layer on the path.
            let ip_count = stack.iter().filter(|n| *n == "ip" || *n == "ipv6").count();
            if over_ip && ip_count == 1 {
                let slot = match name.as_str() {
                    "tcp" => Some(0),
                    "udp" => Some(1),
                    _ => None,
                };
                if let Some(i) = slot {
                    out[i].0 += frames;
                    out[i].1 += bytes;
                }
            }
            stack.push(name);
        }
        out
    }

    #[test]
    fn public_captures_agree_with_tshark_hierarchy() {
        let dir = public_dir();
        let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut total_tcp = 0;
        for (name, _, _) in public_files() {
            let phs = v["files"][&name]["variants"]["nokeys"]["values"]["phs"].as_array().expect("phs");
            let want = phs_transport_counts(phs);
            let p = read_all(crate::capture::open(dir.join(&name).to_str().unwrap(), 0).unwrap());
            let mut got = [(0u64, 0u64); 2];
            for (info, data) in &p.frames {
                match decode(info.linktype, data) {
                    Ok(d) => {
                        let (i, payload, declared) = match d.transport {
                            Transport::Tcp(t) => (Some(0), t.payload.len(), t.declared_len),
                            Transport::Udp(u) => (Some(1), u.payload.len(), u.declared_len),
                            Transport::RoceV1(r) | Transport::Infiniband(r) => (None, r.len(), 0),
                            Transport::Other => (None, 0, 0),
                        };
                        assert_eq!(d.header_bytes + payload, data.len(), "{name} frame {}", info.frame.number);
                        if let Some(i) = i {
                            got[i].0 += 1;
                            got[i].1 += data.len() as u64;
                            // No public capture is cut by its snaplen.
                            assert_eq!(declared as usize, payload, "{name} frame {}", info.frame.number);
                        }
                    }
                    Err(e) => panic!("{name} frame {}: {e:?}", info.frame.number),
                }
            }
            if name == "rdma-infiniband-erf-ipoib.pcap" {
                // Its IP rides IPoIB inside IB Sends: the wire stops at the BTH, the pipeline
                // opens IPoIB (checked against tshark in tests/oracle/test_oracle_rdma.py).
                let ib = p.frames.iter().filter(|(i, d)| matches!(decode(i.linktype, d).unwrap().transport, Transport::Infiniband(_))).count();
                assert_eq!((got, ib), ([(0, 0), (0, 0)], 43));
                continue;
            }
            assert_eq!(got, want, "{name}: (tcp frames, bytes), (udp frames, bytes) vs tshark");
            total_tcp += got[0].0;
        }
        assert!(total_tcp > 10_000);
    }

    // smb311-negotiate-contexts-zeek.pcap frame 1 (Ethernet / IPv4 / TCP ACK, 66 bytes).
    static ETH_TCP: [u8; 66] = [
        0x00, 0x25, 0x90, 0x60, 0xff, 0x9c, 0x04, 0x92, 0x26, 0x48, 0xa5, 0xdd, 0x08, 0x00, 0x45, 0x00,
        0x00, 0x34, 0x86, 0x26, 0x40, 0x00, 0x40, 0x06, 0x30, 0xdf, 0xc0, 0xa8, 0x01, 0x59, 0xc0, 0xa8,
        0x01, 0x15, 0xa6, 0x66, 0x01, 0xbd, 0x47, 0x27, 0x5d, 0x14, 0x1f, 0x9e, 0xd9, 0x82, 0x80, 0x10,
        0x01, 0xf5, 0x3b, 0x00, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a, 0x28, 0xf9, 0x97, 0xa9, 0xda, 0x8b,
        0xd5, 0x5a,
    ];

    /// Build Ethernet (+tags) / IPv4 / TCP through the emitters.
    fn eth_ipv4_tcp(tags: [Option<ethernet::VlanTag>; 2], ident: u16, ttl: u8, payload: &[u8]) -> Vec<u8> {
        let src = Ipv4Addr::new(198, 18, 0, 1);
        let dst = Ipv4Addr::new(198, 19, 0, 2);
        let tcp = tcp::Repr {
            src_port: 50000,
            dst_port: 445,
            seq_number: 1000,
            ack_number: 2000,
            flags: tcp::flags::ACK | tcp::flags::PSH,
            window_len: 512,
            urgent_at: 0,
            options: &[],
            payload,
        };
        let ip = ipv4::Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: ipv4::protocol::TCP,
            payload_len: tcp.buffer_len(),
            hop_limit: ttl,
            ident,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            dscp_ecn: 0,
        };
        let eth = ethernet::Repr {
            src_addr: ethernet::Address([2, 0, 0, 0, 0, 1]),
            dst_addr: ethernet::Address([2, 0, 0, 0, 0, 2]),
            tags,
            ethertype: ethernet::ethertype::IPV4,
        };
        let (eh, ih) = (eth.header_len(), ipv4::HEADER_LEN);
        let mut buf = vec![0u8; eh + ih + tcp.buffer_len()];
        eth.emit(&mut ethernet::Packet::new_unchecked(&mut buf[..]));
        ip.emit(&mut ipv4::Packet::new_unchecked(&mut buf[eh..]));
        tcp.emit(&mut tcp::Packet::new_unchecked(&mut buf[eh + ih..]), IpAddr::V4(src), IpAddr::V4(dst));
        buf
    }

    /// `inner` as a remote mirror session delivers it: outer Ethernet and IPv4 (protocol
    /// `proto`) around `tunnel` (the GRE, ERSPAN or UDP + VXLAN headers) and `inner`.
    fn tunnelled_frame(proto: u8, tunnel: &[u8], inner: &[u8]) -> Vec<u8> {
        let ip = ipv4::Repr {
            src_addr: Ipv4Addr::new(198, 19, 0, 1),
            dst_addr: Ipv4Addr::new(198, 19, 0, 2),
            next_header: proto,
            payload_len: tunnel.len() + inner.len(),
            hop_limit: 64,
            ident: 7,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            dscp_ecn: 0,
        };
        let eth = ethernet::Repr {
            src_addr: ethernet::Address([2, 0, 0, 0, 1, 1]),
            dst_addr: ethernet::Address([2, 0, 0, 0, 1, 2]),
            tags: [None, None],
            ethertype: ethernet::ethertype::IPV4,
        };
        let mut buf = vec![0u8; 14 + 20];
        eth.emit(&mut ethernet::Packet::new_unchecked(&mut buf[..]));
        buf.extend_from_slice(tunnel);
        buf.extend_from_slice(inner);
        ip.emit(&mut ipv4::Packet::new_unchecked(&mut buf[14..]));
        buf
    }

    fn gre_header(protocol: u16, sequence: Option<u32>, erspan: Option<erspan::Repr>) -> Vec<u8> {
        let g = gre::Repr { protocol, key: Some(9), sequence };
        let e_len = erspan.map_or(0, |e| e.header_len());
        let mut h = vec![0u8; g.header_len() + e_len];
        g.emit(&mut gre::Packet::new_unchecked(&mut h[..]));
        if let Some(e) = erspan {
            let at = g.header_len();
            e.emit(&mut erspan::Packet::new_unchecked(&mut h[at..]));
        }
        h
    }

    fn erspan_repr(version: u8, frame_type: u8, truncated: bool) -> erspan::Repr {
        erspan::Repr { version, vlan: 10, cos: 0, truncated, session_id: 42, index: 1, timestamp: 5, frame_type }
    }

    #[test]
    fn remote_mirror_tunnels_are_opened() {
        let inner = eth_ipv4_tcp([None, None], 1, 64, b"SMB payload");
        let plain = decode(linktype::ETHERNET, &inner).unwrap();
        let mut vx = [0u8; 16];
        udp::Repr { src_port: 49152, dst_port: vxlan::PORT, payload: &[0; 8] }.emit(
            &mut udp::Packet::new_unchecked(&mut vx[..]),
            IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(198, 19, 0, 2)),
        );
        udp::Packet::new_unchecked(&mut vx[..]).set_len((16 + inner.len()) as u16);
        vxlan::Repr { vni: 42 }.emit(&mut vxlan::Packet::new_unchecked(&mut vx[8..]));
        let mut vx_legacy = vx;
        vx_legacy[2..4].copy_from_slice(&vxlan::PORT_LINUX_LEGACY.to_be_bytes());
        // GENEVE with one 8-byte option, carrying Ethernet; and without options, carrying IP.
        let geneve_header = |protocol: u16, options: &[u8], carried: usize| {
            let g = geneve::Repr { protocol, vni: 42, oam: false, critical: false, options };
            let mut h = vec![0u8; 8 + g.header_len()];
            udp::Repr { src_port: 49152, dst_port: geneve::PORT, payload: &[] }.emit(
                &mut udp::Packet::new_unchecked(&mut h[..]),
                IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)),
                IpAddr::V4(Ipv4Addr::new(198, 19, 0, 2)),
            );
            udp::Packet::new_unchecked(&mut h[..]).set_len((8 + g.header_len() + carried) as u16);
            g.emit(&mut geneve::Packet::new_unchecked(&mut h[8..]));
            h
        };
        let gn = geneve_header(gre::protocol::TEB, &[0x01, 0x02, 0x03, 0x01, 1, 2, 3, 4], inner.len());
        let gn_ip = geneve_header(gre::protocol::IPV4, &[], inner.len() - 14);
        let cases: [(&str, u8, Vec<u8>, Tunnel); 9] = [
            ("gretap", ipv4::protocol::GRE, gre_header(gre::protocol::TEB, None, None), Tunnel::Gretap),
            ("erspan I", ipv4::protocol::GRE, gre_header(gre::protocol::ERSPAN_II, None, None), Tunnel::Erspan1),
            ("erspan II", ipv4::protocol::GRE, gre_header(gre::protocol::ERSPAN_II, Some(1), Some(erspan_repr(erspan::VERSION_II, 0, false))), Tunnel::Erspan2),
            ("erspan III", ipv4::protocol::GRE, gre_header(gre::protocol::ERSPAN_III, Some(1), Some(erspan_repr(erspan::VERSION_III, erspan::FRAME_ETHERNET, false))), Tunnel::Erspan3),
            ("erspan III ip", ipv4::protocol::GRE, gre_header(gre::protocol::ERSPAN_III, Some(1), Some(erspan_repr(erspan::VERSION_III, erspan::FRAME_IP, false))), Tunnel::Erspan3),
            ("vxlan", ipv4::protocol::UDP, vx.to_vec(), Tunnel::Vxlan),
            ("vxlan 8472", ipv4::protocol::UDP, vx_legacy.to_vec(), Tunnel::Vxlan),
            ("geneve", ipv4::protocol::UDP, gn, Tunnel::Geneve),
            ("geneve ip", ipv4::protocol::UDP, gn_ip, Tunnel::Geneve),
        ];
        assert_eq!(plain.tunnel, None);
        for (name, proto, tunnel, kind) in cases {
            // ERSPAN III with frame type IP carries the IP packet without its Ethernet header.
            let carried: &[u8] = if name.ends_with(" ip") { &inner[14..] } else { &inner };
            let frame = tunnelled_frame(proto, &tunnel, carried);
            let d = decode(linktype::ETHERNET, &frame).unwrap();
            assert_eq!((d.src, d.dst), (plain.src, plain.dst), "{name}");
            let (t, p) = (tcp_of(&d), tcp_of(&plain));
            assert_eq!((t.src_port, t.dst_port, t.seq, t.payload), (p.src_port, p.dst_port, p.seq, p.payload), "{name}");
            assert_eq!(d.header_bytes + t.payload.len(), frame.len(), "{name}: every byte in one place");
            assert_eq!(d.dup_signature(), plain.dup_signature(), "{name}: the mirrored frame's signature");
            assert_eq!(d.anomaly, None, "{name}");
            // How it came: the kind, and the bytes around the mirrored frame.
            let bytes = (frame.len() - carried.len()) as u32;
            assert_eq!(d.tunnel, Some(Tunnelling { outer: kind, inner: None, bytes }), "{name}");
        }
        // GRE over IP (an IP tunnel, not a mirror session) carries the inner IP packet.
        let frame = tunnelled_frame(ipv4::protocol::GRE, &gre_header(gre::protocol::IPV4, None, None), &inner[14..]);
        let d = decode(linktype::ETHERNET, &frame).unwrap();
        assert_eq!(tcp_of(&d).payload, b"SMB payload");
        assert_eq!(d.tunnel.map(|t| (t.key(), t.bytes as usize)), Some(("gre_ip".to_string(), frame.len() - inner.len() + 14)));
    }

    #[test]
    fn a_tunnel_over_ipv6_is_opened_too() {
        let inner = eth_ipv4_tcp([None, None], 1, 64, b"SMB payload");
        let gre = gre_header(gre::protocol::ERSPAN_III, Some(1), Some(erspan_repr(erspan::VERSION_III, erspan::FRAME_ETHERNET, false)));
        let (src, dst): (Ipv6Addr, Ipv6Addr) = ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap());
        let ip = ipv6::Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: ipv4::protocol::GRE,
            payload_len: gre.len() + inner.len(),
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        };
        let mut frame = vec![0u8; 14];
        let eth = ethernet::Repr {
            src_addr: ethernet::Address([2, 0, 0, 0, 1, 1]),
            dst_addr: ethernet::Address([2, 0, 0, 0, 1, 2]),
            tags: [None, None],
            ethertype: ethernet::ethertype::IPV6,
        };
        eth.emit(&mut ethernet::Packet::new_unchecked(&mut frame[..]));
        frame.extend_from_slice(&[0u8; 40]);
        ip.emit(&mut ipv6::Packet::new_unchecked(&mut frame[14..]));
        frame.extend_from_slice(&gre);
        frame.extend_from_slice(&inner);
        let d = decode(linktype::ETHERNET, &frame).unwrap();
        assert_eq!(tcp_of(&d).payload, b"SMB payload");
        assert_eq!(d.src, IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)));
        assert_eq!(d.header_bytes + tcp_of(&d).payload.len(), frame.len());
    }

    #[test]
    fn tunnels_that_cannot_be_opened_are_named_or_other() {
        let inner = eth_ipv4_tcp([None, None], 1, 64, b"SMB payload");
        // The switch cut the mirrored frame (ERSPAN's T flag): decoded, with the remark.
        let cut = gre_header(gre::protocol::ERSPAN_II, Some(1), Some(erspan_repr(erspan::VERSION_II, 0, true)));
        let frame = tunnelled_frame(ipv4::protocol::GRE, &cut, &inner);
        assert_eq!(decode(linktype::ETHERNET, &frame).unwrap().anomaly, Some(Anomaly::ErspanTruncatedFrame));
        // A GRE header cut by the capture, and an ERSPAN version that does not exist: named.
        let frame = tunnelled_frame(ipv4::protocol::GRE, &gre_header(gre::protocol::TEB, None, None), &inner);
        assert_eq!(decode(linktype::ETHERNET, &frame[..14 + 20 + 6]).unwrap_err(), DecodeError::Truncated("gre.truncated"));
        let mut bad = gre_header(gre::protocol::ERSPAN_II, Some(1), Some(erspan_repr(erspan::VERSION_II, 0, false)));
        bad[12] = 0x70;
        assert_eq!(decode(linktype::ETHERNET, &tunnelled_frame(ipv4::protocol::GRE, &bad, &inner)).unwrap_err(), DecodeError::Malformed("erspan.bad_version"));
        // What smbwire does not follow stays other traffic, all of it header bytes: MPLS in
        // GRE, PPTP's GRE version 1, UDP to port 4789 that is not VXLAN.
        for tunnel in [gre_header(0x8847, None, None), vec![0x30, 0x01, 0x88, 0x0b, 0, 0, 0, 0]] {
            let frame = tunnelled_frame(ipv4::protocol::GRE, &tunnel, &inner);
            let d = decode(linktype::ETHERNET, &frame).unwrap();
            assert!(matches!(d.transport, Transport::Other) && d.header_bytes == frame.len());
        }
        // UDP to GENEVE's port that is not GENEVE version 0 carrying Ethernet or IP, or whose
        // options run past the datagram: plain UDP, not opened.
        let mut h = vec![0xc0, 0x00, 0x17, 0xc1, 0, 0, 0, 0, 0x00, 0x00, 0x65, 0x58, 0, 0, 42, 0];
        h[4..6].copy_from_slice(&((16 + inner.len()) as u16).to_be_bytes());
        assert_eq!(decode(linktype::ETHERNET, &tunnelled_frame(ipv4::protocol::UDP, &h, &inner)).unwrap().tunnel.map(|t| t.outer), Some(Tunnel::Geneve));
        for (at, byte) in [(8, 0x40), (10, 0x88), (8, 0x3f)] {
            let mut bad = h.clone();
            bad[at] = byte;
            let frame = tunnelled_frame(ipv4::protocol::UDP, &bad, &inner);
            let d = decode(linktype::ETHERNET, &frame).unwrap();
            assert!(matches!(d.transport, Transport::Udp(u) if u.dst_port == geneve::PORT) && d.tunnel.is_none(), "{at} {byte:#x}");
        }
        // Tunnels in tunnels: two are opened, a third is other traffic (no unbounded recursion).
        let teb = gre_header(gre::protocol::TEB, None, None);
        let once = tunnelled_frame(ipv4::protocol::GRE, &teb, &inner);
        let vx = gre_header(gre::protocol::ERSPAN_II, Some(1), Some(erspan_repr(erspan::VERSION_II, 0, false)));
        let twice = tunnelled_frame(ipv4::protocol::GRE, &vx, &once);
        let d = decode(linktype::ETHERNET, &twice).unwrap();
        assert_eq!(tcp_of(&d).payload, b"SMB payload");
        // Both named, outer first; the bytes are those of both layers.
        let t = d.tunnel.unwrap();
        assert_eq!((t.key(), t.bytes as usize), ("erspan2+gretap".to_string(), twice.len() - inner.len()));
        let thrice = tunnelled_frame(ipv4::protocol::GRE, &teb, &twice);
        let d = decode(linktype::ETHERNET, &thrice).unwrap();
        assert!(matches!(d.transport, Transport::Other) && d.header_bytes == thrice.len());
    }

    fn tcp_of<'a>(d: &Decoded<'a>) -> TcpSegment<'a> {
        match d.transport {
            Transport::Tcp(t) => t,
            other => panic!("not TCP: {other:?}"),
        }
    }

    #[test]
    fn ethernet_ipv4_tcp_from_capture() {
        let d = decode(linktype::ETHERNET, &ETH_TCP).unwrap();
        assert_eq!(d.src, IpAddr::V4(Ipv4Addr::new(192, 168, 1, 89)));
        assert_eq!(d.dst, IpAddr::V4(Ipv4Addr::new(192, 168, 1, 21)));
        let t = tcp_of(&d);
        assert_eq!((t.src_port, t.dst_port, t.seq, t.ack, t.flags), (42598, 445, 0x47275d14, 0x1f9ed982, 0x10));
        assert_eq!((t.payload.len(), t.declared_len), (0, 0));
        assert_eq!(d.header_bytes, 66);
        assert_eq!(d.anomaly, None);
    }

    #[test]
    fn vlan_and_qinq_tags_are_walked() {
        let tag = |tpid, vid| Some(ethernet::VlanTag { tpid, pcp: 0, dei: false, vid });
        let plain = eth_ipv4_tcp([None, None], 1, 64, b"hello");
        for tags in [
            [tag(ethernet::ethertype::VLAN, 10), None],
            [tag(ethernet::ethertype::QINQ, 100), tag(ethernet::ethertype::VLAN, 10)],
            [tag(ethernet::ethertype::QINQ_LEGACY, 100), tag(ethernet::ethertype::VLAN, 10)],
        ] {
            let f = eth_ipv4_tcp(tags, 1, 64, b"hello");
            let d = decode(linktype::ETHERNET, &f).unwrap();
            assert_eq!(tcp_of(&d).payload, b"hello");
            assert_eq!(d.header_bytes, f.len() - 5);
            // The tag is link layer: same signature as the untagged copy.
            assert_eq!(d.dup_signature(), decode(linktype::ETHERNET, &plain).unwrap().dup_signature());
        }
    }

    /// Cisco MetaData (TrustSec's in-line SGT) after the MACs, alone or after a VLAN tag, is
    /// walked like a tag; in GRE it leads to IP or Ethernet; cut or unknown forms are named.
    #[test]
    fn cisco_metadata_is_walked_in_ethernet_and_gre() {
        let cmd_eth = |next: u16| {
            let mut h = vec![0x89, 0x09, 0, 0, 0, 0, 0, 0, 0, 0];
            cmd::Repr { sgt: 17, next }.emit(&mut h[2..], cmd::Placement::Ethernet);
            h
        };
        let plain = eth_ipv4_tcp([None, None], 1, 64, b"hello");
        let want = decode(linktype::ETHERNET, &plain).unwrap();
        let tagged = [&plain[..12], &cmd_eth(ethernet::ethertype::IPV4), &plain[14..]].concat();
        let vlan = eth_ipv4_tcp([Some(ethernet::VlanTag { tpid: ethernet::ethertype::VLAN, pcp: 0, dei: false, vid: 10 }), None], 1, 64, b"hello");
        let vlan_cmd = [&vlan[..16], &cmd_eth(ethernet::ethertype::IPV4), &vlan[18..]].concat();
        for f in [&tagged, &vlan_cmd] {
            let d = decode(linktype::ETHERNET, f).unwrap();
            assert_eq!((d.src, d.dst, tcp_of(&d).payload), (want.src, want.dst, &b"hello"[..]));
            assert_eq!(d.header_bytes, f.len() - 5);
            assert_eq!((d.tunnel, d.anomaly), (None, None));
            assert_eq!(d.dup_signature(), want.dup_signature(), "the tag is link layer");
        }
        let cut = [&plain[..12], &cmd_eth(ethernet::ethertype::IPV4)[..5]].concat();
        assert_eq!(decode(linktype::ETHERNET, &cut).unwrap_err(), DecodeError::Truncated("cmd.truncated"));
        let mut v2 = tagged.clone();
        v2[14] = 2;
        assert_eq!(decode(linktype::ETHERNET, &v2).unwrap_err(), DecodeError::Malformed("cmd.unsupported"));
        // Headers naming one another count against the tags' bound.
        let chain: Vec<u8> = (0..ethernet::MAX_TAGS).flat_map(|_| cmd_eth(cmd::ETHERTYPE)[2..].to_vec()).collect();
        let deep = [&plain[..12], &[0x89, 0x09][..], &chain, &plain[12..]].concat();
        assert_eq!(decode(linktype::ETHERNET, &deep).unwrap_err(), DecodeError::Malformed("ethernet.too_many_vlan_tags"));

        // GRE protocol 0x8909: the CMD header names what follows it.
        let gre_cmd = |next: u16| {
            let mut h = gre_header(gre::protocol::CISCO_METADATA, None, None);
            let at = h.len();
            h.resize(at + cmd::HEADER_LEN, 0);
            cmd::Repr { sgt: 17, next }.emit(&mut h[at..], cmd::Placement::Gre);
            h
        };
        let frame = tunnelled_frame(ipv4::protocol::GRE, &gre_cmd(gre::protocol::IPV4), &plain[14..]);
        let d = decode(linktype::ETHERNET, &frame).unwrap();
        assert_eq!(tcp_of(&d).payload, b"hello");
        assert_eq!(d.tunnel, Some(Tunnelling { outer: Tunnel::GreIp, inner: None, bytes: (frame.len() - plain.len() + 14) as u32 }));
        let frame = tunnelled_frame(ipv4::protocol::GRE, &gre_cmd(gre::protocol::TEB), &plain);
        let d = decode(linktype::ETHERNET, &frame).unwrap();
        assert_eq!(d.tunnel, Some(Tunnelling { outer: Tunnel::Gretap, inner: None, bytes: (frame.len() - plain.len()) as u32 }));
        // MPLS after the header is not followed: the GRE packet is other traffic.
        let frame = tunnelled_frame(ipv4::protocol::GRE, &gre_cmd(0x8847), &plain[14..]);
        let d = decode(linktype::ETHERNET, &frame).unwrap();
        assert!(d.tunnel.is_none() && matches!(d.transport, Transport::Other));
        // An ERSPAN session copying a link that tags in line: the mirrored frame carries it.
        let erspan = gre_header(gre::protocol::ERSPAN_II, Some(1), Some(erspan_repr(erspan::VERSION_II, 0, false)));
        let frame = tunnelled_frame(ipv4::protocol::GRE, &erspan, &tagged);
        let d = decode(linktype::ETHERNET, &frame).unwrap();
        assert_eq!((d.src, d.dst, tcp_of(&d).payload), (want.src, want.dst, &b"hello"[..]));
        assert_eq!(d.tunnel, Some(Tunnelling { outer: Tunnel::Erspan2, inner: None, bytes: (frame.len() - tagged.len()) as u32 }));
        assert_eq!(d.header_bytes, frame.len() - 5);
        let mut bad = gre_cmd(gre::protocol::IPV4);
        let v = bad.len() - cmd::HEADER_LEN + 2;
        bad[v] = 9;
        let frame = tunnelled_frame(ipv4::protocol::GRE, &bad, &plain[14..]);
        assert_eq!(decode(linktype::ETHERNET, &frame).unwrap_err(), DecodeError::Malformed("cmd.unsupported"));
    }

    #[test]
    fn ethernet_padding_and_trailer_are_header_bytes() {
        let mut f = eth_ipv4_tcp([None, None], 1, 64, b"hi");
        f.resize(60, 0); // minimum Ethernet frame
        f.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]); // FCS
        let d = decode(linktype::ETHERNET, &f).unwrap();
        let t = tcp_of(&d);
        assert_eq!((t.payload, t.declared_len), (&b"hi"[..], 2));
        assert_eq!(d.header_bytes, 14 + 20 + 20 + (64 - 56));
    }

    #[test]
    fn snaplen_cut_keeps_declared_length() {
        let payload = vec![0x5a; 1000];
        let f = eth_ipv4_tcp([None, None], 1, 64, &payload);
        let cut = &f[..14 + 20 + 20 + 100];
        let d = decode(linktype::ETHERNET, cut).unwrap();
        let t = tcp_of(&d);
        assert_eq!((t.payload.len(), t.declared_len), (100, 1000));
        assert_eq!(d.header_bytes, 54);
        // Cut inside the TCP header: truncated.
        assert_eq!(decode(linktype::ETHERNET, &f[..14 + 20 + 10]).unwrap_err(), DecodeError::Truncated("tcp.truncated"));
        assert_eq!(decode(linktype::ETHERNET, &f[..14 + 10]).unwrap_err(), DecodeError::Truncated("ipv4.truncated"));
        assert_eq!(decode(linktype::ETHERNET, &f[..10]).unwrap_err(), DecodeError::Truncated("ethernet.truncated"));
    }

    #[test]
    fn tcp_header_beyond_ip_total_length_is_malformed() {
        let mut f = eth_ipv4_tcp([None, None], 1, 64, &[]);
        f[14 + 3] = 30; // IP total length 30: only 10 bytes for a 20-byte TCP header
        f.resize(60, 0);
        assert_eq!(decode(linktype::ETHERNET, &f).unwrap_err(), DecodeError::Malformed("tcp.bad_header_length"));
    }

    #[test]
    fn other_link_types() {
        let f = eth_ipv4_tcp([None, None], 7, 64, b"data");
        let ip = &f[14..];
        let want = decode(linktype::ETHERNET, &f).unwrap();
        let check = |lt: u32, frame: &[u8], hdr: usize| {
            let d = decode(lt, frame).unwrap_or_else(|e| panic!("linktype {lt}: {e:?}"));
            assert_eq!(tcp_of(&d).payload, b"data", "linktype {lt}");
            assert_eq!(d.header_bytes, hdr + 40, "linktype {lt}");
            assert_eq!((d.src, d.dst, d.dup_signature()), (want.src, want.dst, want.dup_signature()), "linktype {lt}");
        };
        check(linktype::RAW, ip, 0);
        check(linktype::IPV4, ip, 0);
        for af in [2u32.to_le_bytes(), 2u32.to_be_bytes()] {
            let mut v = af.to_vec();
            v.extend_from_slice(ip);
            check(linktype::NULL, &v, 4);
        }
        let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x08, 0x00];
        sll.extend_from_slice(ip);
        check(linktype::LINUX_SLL, &sll, 16);
        let mut sll2 = vec![0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0];
        sll2.extend_from_slice(ip);
        check(linktype::LINUX_SLL2, &sll2, 20);
        let mut ipoib = vec![0x08, 0x00, 0, 0];
        ipoib.extend_from_slice(ip);
        check(linktype::IPOIB, &ipoib, 4);
        // ERF Ethernet record: header, 2-byte pad, the frame, padding to 8 bytes.
        let rlen = (16 + 2 + f.len()).div_ceil(8) * 8;
        let e = erf::Repr { timestamp: 0, rtype: erf::rtype::ETH, flags: 0, lctr: 0, wlen: f.len() as u16, extensions: &[] };
        let mut rec = Vec::new();
        e.emit(rlen as u16, &mut rec);
        rec.extend_from_slice(&[0, 0]);
        rec.extend_from_slice(&f);
        rec.resize(rlen, 0);
        check(linktype::ERF, &rec, rlen - ip.len());
        // Another ERF record type: not decoded, counted.
        rec[8] = 1; // HDLC POS
        let d = decode(linktype::ERF, &rec).unwrap();
        assert!(matches!(d.transport, Transport::Other));
        assert_eq!((d.header_bytes, d.anomaly), (rec.len(), Some(Anomaly::ErfUnsupportedRecordType)));
        rec[8] = erf::rtype::ETH;
        rec[9] = erf::flags::RX_ERROR;
        assert_eq!(decode(linktype::ERF, &rec).unwrap().anomaly, Some(Anomaly::ErfRxError));
        assert_eq!(decode(12345, &f).unwrap_err(), DecodeError::UnsupportedLinkType(12345));
        assert_eq!(decode(linktype::RAW, &[0x55; 30]).unwrap_err(), DecodeError::Malformed("raw.bad_version"));
        assert_eq!(decode(linktype::NULL, &[2, 0]).unwrap_err(), DecodeError::Truncated("null.truncated"));
        // Unknown address family: not IP.
        let mut v = 99u32.to_le_bytes().to_vec();
        v.extend_from_slice(ip);
        let d = decode(linktype::NULL, &v).unwrap();
        assert!(matches!(d.transport, Transport::Other));
        assert_eq!(d.header_bytes, v.len());
    }

    fn ipv6_udp(payload: &[u8], ext: &[u8], first_next: u8) -> Vec<u8> {
        let src: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let dst: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let udp = udp::Repr { src_port: 4791, dst_port: 4791, payload };
        let ip = ipv6::Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: first_next,
            payload_len: ext.len() + udp.buffer_len(),
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        };
        let mut buf = vec![0u8; 40 + ext.len() + udp.buffer_len()];
        ip.emit(&mut ipv6::Packet::new_unchecked(&mut buf[..]));
        buf[40..40 + ext.len()].copy_from_slice(ext);
        udp.emit(&mut udp::Packet::new_unchecked(&mut buf[40 + ext.len()..]), IpAddr::V6(src), IpAddr::V6(dst));
        buf
    }

    #[test]
    fn ipv6_extension_headers_and_fragments() {
        let p = ipv6_udp(b"rocev2", &[], ipv4::protocol::UDP);
        let d = decode(linktype::IPV6, &p).unwrap();
        match d.transport {
            Transport::Udp(u) => assert_eq!((u.src_port, u.payload, u.declared_len), (4791, &b"rocev2"[..], 6)),
            t => panic!("{t:?}"),
        }
        assert_eq!(d.header_bytes, 48);
        // Hop-by-hop (8 bytes) then destination options (16 bytes) then UDP.
        let mut ext = vec![ipv4::protocol::IPV6_DEST_OPTS, 0, 1, 4, 0, 0, 0, 0];
        ext.extend_from_slice(&[ipv4::protocol::UDP, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let p = ipv6_udp(b"x", &ext, ipv4::protocol::HOP_BY_HOP);
        let d = decode(linktype::RAW, &p).unwrap();
        assert!(matches!(d.transport, Transport::Udp(u) if u.payload == b"x"));
        assert_eq!(d.header_bytes, 40 + 24 + 8);
        // First fragment: decoded, flagged.
        let frag0 = [ipv4::protocol::UDP, 0, 0x00, 0x01, 0, 0, 0, 9];
        let p0 = ipv6_udp(b"abc", &frag0, ipv4::protocol::IPV6_FRAGMENT);
        let d = decode(linktype::IPV6, &p0).unwrap();
        assert!(matches!(d.transport, Transport::Udp(_)));
        assert_eq!(d.anomaly.map(Anomaly::name), Some("ipv6.fragment"));
        // Later fragment: no transport.
        let frag1 = [ipv4::protocol::UDP, 0, 0x00, 0x08, 0, 0, 0, 9];
        let p = ipv6_udp(b"abc", &frag1, ipv4::protocol::IPV6_FRAGMENT);
        let d = decode(linktype::IPV6, &p).unwrap();
        assert!(matches!(d.transport, Transport::Other));
        assert_eq!((d.anomaly.map(Anomaly::name), d.header_bytes), (Some("ipv6.non_first_fragment"), p.len()));
    }

    #[test]
    fn ipv4_fragments() {
        let mut f = eth_ipv4_tcp([None, None], 1, 64, b"0123456789");
        // Later fragment (offset 8 bytes): Other.
        f[14 + 6] = 0x00;
        f[14 + 7] = 0x01;
        let d = decode(linktype::ETHERNET, &f).unwrap();
        assert!(matches!(d.transport, Transport::Other));
        assert_eq!((d.anomaly.map(Anomaly::name), d.header_bytes), (Some("ipv4.non_first_fragment"), f.len()));
        // First fragment (MF set, offset 0): TCP decoded, flagged.
        f[14 + 6] = 0x20;
        f[14 + 7] = 0x00;
        let d = decode(linktype::ETHERNET, &f).unwrap();
        assert_eq!(tcp_of(&d).payload, b"0123456789");
        assert_eq!(d.anomaly.map(Anomaly::name), Some("ipv4.fragment"));
    }

    #[test]
    fn udp_length_beyond_ip_is_malformed() {
        let mut p = ipv6_udp(b"abcd", &[], ipv4::protocol::UDP);
        p[40 + 5] = 200;
        assert_eq!(decode(linktype::IPV6, &p).unwrap_err(), DecodeError::Malformed("udp.bad_length"));
        // UDP shorter than IP: the rest is trailer, counted as header bytes.
        let mut p = ipv6_udp(b"abcd", &[], ipv4::protocol::UDP);
        p[40 + 5] = 10;
        let d = decode(linktype::IPV6, &p).unwrap();
        assert!(matches!(d.transport, Transport::Udp(u) if u.payload == b"ab" && u.declared_len == 2));
        assert_eq!(d.header_bytes, p.len() - 2);
    }

    #[test]
    fn roce_v1_stops_at_grh() {
        let sgid: Ipv6Addr = "fe80::1".parse().unwrap();
        let dgid: Ipv6Addr = "fe80::2".parse().unwrap();
        let bth_and_payload = [0x04u8; 12 + 32 + 4]; // BTH, payload, ICRC
        let grh = ipv6::Repr {
            src_addr: sgid,
            dst_addr: dgid,
            next_header: 0x1b, // IBTA: BTH follows
            payload_len: bth_and_payload.len(),
            hop_limit: 1,
            traffic_class: 0,
            flow_label: 0,
        };
        let mut f = vec![0u8; 14];
        f[12] = 0x89;
        f[13] = 0x15;
        f.resize(14 + 40, 0);
        grh.emit(&mut ipv6::Packet::new_unchecked(&mut f[14..]));
        f.extend_from_slice(&bth_and_payload);
        f.extend_from_slice(&[0xfc; 4]); // FCS kept by the capture
        let d = decode(linktype::ETHERNET, &f).unwrap();
        assert_eq!((d.src, d.dst), (IpAddr::V6(sgid), IpAddr::V6(dgid)));
        match d.transport {
            Transport::RoceV1(r) => {
                assert_eq!(r.len(), 40 + bth_and_payload.len());
                assert_eq!(&r[40..], &bth_and_payload[..]);
                assert_eq!(d.header_bytes + r.len(), f.len());
            }
            t => panic!("{t:?}"),
        }
        assert_eq!(decode(linktype::ETHERNET, &f[..14 + 30]).unwrap_err(), DecodeError::Truncated("roce.grh_truncated"));
        f[14] = 0x40;
        assert_eq!(decode(linktype::ETHERNET, &f).unwrap_err(), DecodeError::Malformed("roce.bad_grh_version"));
    }

    #[test]
    fn non_ip_ethertype_is_other() {
        let mut f = ETH_TCP;
        f[12] = 0x08;
        f[13] = 0x06; // ARP
        let d = decode(linktype::ETHERNET, &f).unwrap();
        assert!(matches!(d.transport, Transport::Other));
        assert_eq!((d.header_bytes, d.src), (f.len(), IpAddr::V4(Ipv4Addr::UNSPECIFIED)));
    }

    #[test]
    fn dup_signature_ignores_hop_fields_only() {
        let sig = |f: &[u8]| decode(linktype::ETHERNET, f).unwrap().dup_signature();
        let payload: Vec<u8> = (0..200u8).collect();
        let base = eth_ipv4_tcp([None, None], 100, 64, &payload);
        assert_eq!(sig(&base), sig(&base.clone()));
        // Another hop: TTL and header checksum differ, still the same frame.
        let hop = eth_ipv4_tcp([None, None], 100, 63, &payload);
        assert_ne!(base[14 + 10..14 + 12], hop[14 + 10..14 + 12]);
        assert_eq!(sig(&base), sig(&hop));
        // A retransmission has a new IP ID.
        assert_ne!(sig(&base), sig(&eth_ipv4_tcp([None, None], 101, 64, &payload)));
        // Payload bytes within the first 64 count.
        let mut early = payload.clone();
        early[10] ^= 1;
        let mut early_frame = base.clone();
        early_frame[54 + 10] ^= 1;
        assert_ne!(sig(&base), sig(&early_frame));
        // Later bytes are not hashed; (a real change also changes the hashed TCP checksum).
        let mut late_frame = base.clone();
        late_frame[54 + 150] ^= 1;
        assert_eq!(sig(&base), sig(&late_frame));
        assert_ne!(sig(&base), sig(&eth_ipv4_tcp([None, None], 100, 64, &early)));
        // Different length, same first bytes.
        assert_ne!(sig(&base), sig(&eth_ipv4_tcp([None, None], 100, 64, &payload[..199])));
        // IPv6 hop limit is ignored too.
        let a = ipv6_udp(b"abc", &[], ipv4::protocol::UDP);
        let mut b = a.clone();
        b[7] = 3;
        assert_eq!(decode(linktype::IPV6, &a).unwrap().dup_signature(), decode(linktype::IPV6, &b).unwrap().dup_signature());
    }

    #[test]
    fn tso_zero_total_length_uses_captured_bytes() {
        let mut f = eth_ipv4_tcp([None, None], 1, 64, &[7; 3000]);
        f[14 + 2] = 0;
        f[14 + 3] = 0;
        let d = decode(linktype::ETHERNET, &f).unwrap();
        assert_eq!(tcp_of(&d).declared_len, 3000);
        assert_eq!(d.anomaly.map(Anomaly::name), Some("ipv4.zero_total_length"));
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        const LINKTYPES: [u32; 10] = [
            linktype::IPOIB,
            linktype::INFINIBAND,
            linktype::NULL,
            linktype::ETHERNET,
            linktype::RAW,
            linktype::LINUX_SLL,
            linktype::IPV4,
            linktype::IPV6,
            linktype::LINUX_SLL2,
            linktype::ERF,
        ];

        fn check(lt: u32, data: &[u8]) -> Result<(), TestCaseError> {
            if let Ok(d) = decode(lt, data) {
                let carried = match d.transport {
                    Transport::Tcp(t) => t.payload.len(),
                    Transport::Udp(u) => u.payload.len(),
                    Transport::RoceV1(r) | Transport::Infiniband(r) => r.len(),
                    Transport::Other => 0,
                };
                prop_assert_eq!(d.header_bytes + carried, data.len());
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

            #[test]
            fn decode_never_panics(lt in proptest::sample::select(&LINKTYPES[..]), data in proptest::collection::vec(any::<u8>(), 0..200)) {
                check(lt, &data)?;
            }

            /// Plausible headers with random fields reach the deeper parsers.
            #[test]
            fn decode_never_panics_on_plausible_ip(
                v6 in any::<bool>(), proto in proptest::sample::select(&[0u8, 6, 17, 43, 44, 47, 51, 60, 59][..]),
                ihl_or_next in any::<u8>(), len in any::<u16>(), tail in proptest::collection::vec(any::<u8>(), 0..120),
                eth_type in proptest::sample::select(&[0x0800u16, 0x86dd, 0x8100, 0x88a8, 0x8915, 0x8909][..]),
                cmd_form in any::<[u8; 2]>(),
            ) {
                let mut ip = Vec::new();
                if v6 {
                    ip.extend_from_slice(&[0x60, 0, 0, 0]);
                    ip.extend_from_slice(&len.to_be_bytes());
                    ip.push(proto);
                    ip.push(ihl_or_next);
                    ip.extend_from_slice(&[0; 32]);
                } else {
                    ip.push(0x40 | (ihl_or_next & 0x0f));
                    ip.push(0);
                    ip.extend_from_slice(&len.to_be_bytes());
                    ip.extend_from_slice(&[0, 0, 0, 0, 64, proto, 0, 0]);
                    ip.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2]);
                }
                ip.extend_from_slice(&tail);
                check(if v6 { linktype::IPV6 } else { linktype::IPV4 }, &ip)?;
                check(linktype::RAW, &ip)?;
                let mut eth = vec![0u8; 12];
                eth.extend_from_slice(&eth_type.to_be_bytes());
                if eth_type == 0x8100 || eth_type == 0x88a8 {
                    eth.extend_from_slice(&[0, 1, if v6 { 0x86 } else { 0x08 }, if v6 { 0xdd } else { 0x00 }]);
                }
                if eth_type == 0x8909 {
                    // Cisco MetaData: version and length random (mostly refused), SGT, EtherType.
                    eth.extend_from_slice(&[cmd_form[0] % 3, cmd_form[1] % 3, 0, 1, 0, 7, if v6 { 0x86 } else { 0x08 }, if v6 { 0xdd } else { 0x00 }]);
                }
                eth.extend_from_slice(&ip);
                check(linktype::ETHERNET, &eth)?;
            }

            /// UDP to the tunnels' ports (VXLAN, GENEVE) with random headers and contents, the
            /// UDP length honest or not: opened, taken as plain UDP, or refused, never a panic.
            #[test]
            fn decode_never_panics_on_udp_tunnels(
                port in proptest::sample::select(&[4789u16, 8472, 6081][..]), honest in any::<bool>(),
                udp_len in any::<u16>(), tail in proptest::collection::vec(any::<u8>(), 0..300),
            ) {
                let len = if honest { (8 + tail.len()) as u16 } else { udp_len };
                let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 19, 0, 1, 198, 19, 0, 2];
                ip[2..4].copy_from_slice(&((28 + tail.len()) as u16).to_be_bytes());
                ip.extend_from_slice(&[0xc0, 0x00]);
                ip.extend_from_slice(&port.to_be_bytes());
                ip.extend_from_slice(&len.to_be_bytes());
                ip.extend_from_slice(&[0, 0]);
                ip.extend_from_slice(&tail);
                check(linktype::RAW, &ip)?;
            }
        }
    }
}
