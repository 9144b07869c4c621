//! InfiniBand transport headers as carried by RoCEv1 and RoCEv2 (IBTA vol. 1 §9.2, §9.3;
//! Annex A16/A17): the Base Transport Header and the extended transport headers that follow it
//! per opcode (RETH, AETH, IETH, ImmDt, DETH, AtomicETH, AtomicAckETH), then the payload,
//! `PadCnt` pad bytes and the 4-byte ICRC.

use std::fmt;

/// Why a packet was refused. `name()` is the anomaly raised by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Shorter than BTH + extension headers + pad + ICRC.
    Truncated,
    /// An opcode the transport does not define (reserved values, CNP, vendor opcodes).
    UnknownOpcode,
}

impl Error {
    pub fn name(self) -> &'static str {
        match self {
            Error::Truncated => "ib.truncated",
            Error::UnknownOpcode => "ib.unknown_opcode",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

pub const BTH_LEN: usize = 12;
pub const RETH_LEN: usize = 16;
pub const AETH_LEN: usize = 4;
pub const IETH_LEN: usize = 4;
pub const IMMDT_LEN: usize = 4;
pub const DETH_LEN: usize = 8;
pub const ICRC_LEN: usize = 4;
/// The GSI queue pair, which carries Communication Management MADs (IBTA §13.5.1).
pub const QP1: u32 = 1;
/// The Q_Key of QP1 (IBTA vol. 1 §13.5.1, the GSI's well-known Q_Key).
pub const GSI_Q_KEY: u32 = 0x8001_0000;
/// The default partition key, full membership (IBTA §10.9.1.2).
pub const DEFAULT_P_KEY: u16 = 0xffff;
/// PSNs and MSNs are 24 bits (IBTA §9.7.1).
pub const PSN_MASK: u32 = 0x00ff_ffff;
/// The Global Route Header has the IPv6 header's layout (IBTA vol. 1 §8.3.1).
pub const GRH_LEN: usize = crate::wire::ipv6::HEADER_LEN;
/// GRH NxtHdr of a packet whose next header is the BTH ("IBA transport", §8.3.1).
pub const GRH_NEXT_HEADER_BTH: u8 = 0x1b;

/// RC opcodes (IBTA Table 38, transport 000); UC uses the same low bits with transport 001.
pub mod opcode {
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_WITH_IMMEDIATE: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_WITH_IMMEDIATE: u8 = 0x05;
    pub const RDMA_WRITE_FIRST: u8 = 0x06;
    pub const RDMA_WRITE_MIDDLE: u8 = 0x07;
    pub const RDMA_WRITE_LAST: u8 = 0x08;
    pub const RDMA_WRITE_LAST_WITH_IMMEDIATE: u8 = 0x09;
    pub const RDMA_WRITE_ONLY: u8 = 0x0A;
    pub const RDMA_WRITE_ONLY_WITH_IMMEDIATE: u8 = 0x0B;
    pub const RDMA_READ_REQUEST: u8 = 0x0C;
    pub const RDMA_READ_RESPONSE_FIRST: u8 = 0x0D;
    pub const RDMA_READ_RESPONSE_MIDDLE: u8 = 0x0E;
    pub const RDMA_READ_RESPONSE_LAST: u8 = 0x0F;
    pub const RDMA_READ_RESPONSE_ONLY: u8 = 0x10;
    pub const ACKNOWLEDGE: u8 = 0x11;
    pub const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
    pub const COMPARE_SWAP: u8 = 0x13;
    pub const FETCH_ADD: u8 = 0x14;
    pub const SEND_LAST_WITH_INVALIDATE: u8 = 0x16;
    pub const SEND_ONLY_WITH_INVALIDATE: u8 = 0x17;
    /// UD transport (011): SEND_ONLY and SEND_ONLY_WITH_IMMEDIATE, with a DETH.
    pub const UD_SEND_ONLY: u8 = 0x64;
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: u8 = 0x65;
}

/// What an opcode is, for the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Part of a Send message: first/middle/last/only.
    Send { first: bool, last: bool },
    RdmaWrite { first: bool, last: bool },
    ReadRequest,
    ReadResponse { first: bool, last: bool },
    Ack,
    Atomic,
    /// Unreliable Datagram send (CM MADs on QP1, other UD traffic).
    UdSend,
}

/// Extension headers present after the BTH (in wire order: DETH, RETH, AtomicETH, AETH,
/// AtomicAckETH, ImmDt, IETH).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ext {
    pub deth: bool,
    pub reth: bool,
    pub atomic_eth: bool,
    pub aeth: bool,
    pub atomic_ack_eth: bool,
    pub immdt: bool,
    pub ieth: bool,
}

impl Ext {
    pub fn len(&self) -> usize {
        usize::from(self.deth) * DETH_LEN
            + usize::from(self.reth) * RETH_LEN
            + usize::from(self.atomic_eth) * 28
            + usize::from(self.aeth) * AETH_LEN
            + usize::from(self.atomic_ack_eth) * 8
            + usize::from(self.immdt) * IMMDT_LEN
            + usize::from(self.ieth) * IETH_LEN
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Kind and extension headers of an opcode; `None` for reserved/unsupported opcodes.
pub fn describe(op: u8) -> Option<(Kind, Ext)> {
    use opcode::*;
    let e = Ext::default();
    let transport = op >> 5;
    let low = op & 0x1f;
    match transport {
        // RC (000) and UC (001): UC defines only the Send and RDMA Write subset.
        0 | 1 => {
            let uc = transport == 1;
            let r = match low {
                SEND_FIRST => (Kind::Send { first: true, last: false }, e),
                SEND_MIDDLE => (Kind::Send { first: false, last: false }, e),
                SEND_LAST => (Kind::Send { first: false, last: true }, e),
                SEND_LAST_WITH_IMMEDIATE => (Kind::Send { first: false, last: true }, Ext { immdt: true, ..e }),
                SEND_ONLY => (Kind::Send { first: true, last: true }, e),
                SEND_ONLY_WITH_IMMEDIATE => (Kind::Send { first: true, last: true }, Ext { immdt: true, ..e }),
                RDMA_WRITE_FIRST => (Kind::RdmaWrite { first: true, last: false }, Ext { reth: true, ..e }),
                RDMA_WRITE_MIDDLE => (Kind::RdmaWrite { first: false, last: false }, e),
                RDMA_WRITE_LAST => (Kind::RdmaWrite { first: false, last: true }, e),
                RDMA_WRITE_LAST_WITH_IMMEDIATE => (Kind::RdmaWrite { first: false, last: true }, Ext { immdt: true, ..e }),
                RDMA_WRITE_ONLY => (Kind::RdmaWrite { first: true, last: true }, Ext { reth: true, ..e }),
                RDMA_WRITE_ONLY_WITH_IMMEDIATE => {
                    (Kind::RdmaWrite { first: true, last: true }, Ext { reth: true, immdt: true, ..e })
                }
                _ if uc => return None,
                RDMA_READ_REQUEST => (Kind::ReadRequest, Ext { reth: true, ..e }),
                RDMA_READ_RESPONSE_FIRST => (Kind::ReadResponse { first: true, last: false }, Ext { aeth: true, ..e }),
                RDMA_READ_RESPONSE_MIDDLE => (Kind::ReadResponse { first: false, last: false }, e),
                RDMA_READ_RESPONSE_LAST => (Kind::ReadResponse { first: false, last: true }, Ext { aeth: true, ..e }),
                RDMA_READ_RESPONSE_ONLY => (Kind::ReadResponse { first: true, last: true }, Ext { aeth: true, ..e }),
                ACKNOWLEDGE => (Kind::Ack, Ext { aeth: true, ..e }),
                ATOMIC_ACKNOWLEDGE => (Kind::Ack, Ext { aeth: true, atomic_ack_eth: true, ..e }),
                COMPARE_SWAP | FETCH_ADD => (Kind::Atomic, Ext { atomic_eth: true, ..e }),
                SEND_LAST_WITH_INVALIDATE => (Kind::Send { first: false, last: true }, Ext { ieth: true, ..e }),
                SEND_ONLY_WITH_INVALIDATE => (Kind::Send { first: true, last: true }, Ext { ieth: true, ..e }),
                _ => return None,
            };
            Some(r)
        }
        3 => match op {
            UD_SEND_ONLY => Some((Kind::UdSend, Ext { deth: true, ..e })),
            UD_SEND_ONLY_WITH_IMMEDIATE => Some((Kind::UdSend, Ext { deth: true, immdt: true, ..e })),
            _ => None,
        },
        _ => None,
    }
}

mod field {
    use std::ops::Range;
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const P_KEY: Range<usize> = 2..4;
    pub const DEST_QP: Range<usize> = 5..8;
    pub const ACK_REQ: usize = 8;
    pub const PSN: Range<usize> = 9..12;
}

fn be24(b: &[u8]) -> u32 {
    (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2])
}

/// Zero-copy view of a BTH and what follows it (payload, pad, ICRC).
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }
    /// Refuses a buffer shorter than the BTH.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        if buffer.as_ref().len() < BTH_LEN {
            return Err(Error::Truncated);
        }
        Ok(Packet { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn opcode(&self) -> u8 {
        self.b()[field::OPCODE]
    }
    pub fn solicited_event(&self) -> bool {
        self.b()[field::FLAGS] & 0x80 != 0
    }
    pub fn mig_req(&self) -> bool {
        self.b()[field::FLAGS] & 0x40 != 0
    }
    pub fn pad_count(&self) -> u8 {
        (self.b()[field::FLAGS] >> 4) & 0x03
    }
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & 0x0f
    }
    pub fn p_key(&self) -> u16 {
        u16::from_be_bytes([self.b()[field::P_KEY.start], self.b()[field::P_KEY.start + 1]])
    }
    pub fn dest_qp(&self) -> u32 {
        be24(&self.b()[field::DEST_QP])
    }
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACK_REQ] & 0x80 != 0
    }
    pub fn psn(&self) -> u32 {
        be24(&self.b()[field::PSN])
    }
}

/// Base Transport Header (IBTA §9.2): the fields of `Packet` as a plain struct, with `emit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bth {
    pub opcode: u8,
    pub solicited_event: bool,
    /// MigReq: set by a QP in the migrated state (an RC QP without an alternate path).
    pub mig_req: bool,
    pub pad_count: u8,
    pub p_key: u16,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: u32,
}

impl Bth {
    pub fn parse(b: &[u8]) -> Result<Bth, Error> {
        let p = Packet::new_checked(b)?;
        Ok(Bth {
            opcode: p.opcode(),
            solicited_event: p.solicited_event(),
            mig_req: p.mig_req(),
            pad_count: p.pad_count(),
            p_key: p.p_key(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        })
    }
    /// Appends the 12 bytes; TVer, FECN, BECN and the reserved bits are 0.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push(self.opcode);
        out.push(u8::from(self.solicited_event) << 7 | u8::from(self.mig_req) << 6 | (self.pad_count & 3) << 4);
        out.extend_from_slice(&self.p_key.to_be_bytes());
        out.push(0);
        out.extend_from_slice(&self.dest_qp.to_be_bytes()[1..]);
        out.push(u8::from(self.ack_req) << 7);
        out.extend_from_slice(&(self.psn & PSN_MASK).to_be_bytes()[1..]);
    }
}

/// ACK Extended Transport Header (IBTA §9.3.5): syndrome and MSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aeth {
    pub syndrome: u8,
    pub msn: u32,
}

impl Aeth {
    /// Syndrome of an ACK carrying no credit information: "00" then credit count 0x1F (§9.7.5.1).
    pub const ACK_NO_CREDIT_INFO: u8 = 0x1f;
    pub fn parse(b: &[u8]) -> Result<Aeth, Error> {
        let b = b.get(..AETH_LEN).ok_or(Error::Truncated)?;
        Ok(Aeth { syndrome: b[0], msn: be24(&b[1..4]) })
    }
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push(self.syndrome);
        out.extend_from_slice(&(self.msn & PSN_MASK).to_be_bytes()[1..]);
    }
}

/// Invalidate Extended Transport Header (IBTA §9.3.6): the R_Key a Send with Invalidate
/// invalidates at the responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ieth {
    pub r_key: u32,
}

impl Ieth {
    pub fn parse(b: &[u8]) -> Result<Ieth, Error> {
        let b = b.get(..IETH_LEN).ok_or(Error::Truncated)?;
        Ok(Ieth { r_key: u32::from_be_bytes([b[0], b[1], b[2], b[3]]) })
    }
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.r_key.to_be_bytes());
    }
}

/// Datagram Extended Transport Header (IBTA §9.3.2): Q_Key and source QP (UD).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deth {
    pub q_key: u32,
    pub src_qp: u32,
}

impl Deth {
    pub fn parse(b: &[u8]) -> Result<Deth, Error> {
        let b = b.get(..DETH_LEN).ok_or(Error::Truncated)?;
        Ok(Deth { q_key: u32::from_be_bytes([b[0], b[1], b[2], b[3]]), src_qp: be24(&b[5..8]) })
    }
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.q_key.to_be_bytes());
        out.push(0);
        out.extend_from_slice(&(self.src_qp & PSN_MASK).to_be_bytes()[1..]);
    }
}

/// RDMA Extended Transport Header (IBTA §9.3.3): where an RDMA Write lands or a Read reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reth {
    pub va: u64,
    pub r_key: u32,
    pub dma_length: u32,
}

impl Reth {
    pub fn parse(b: &[u8]) -> Result<Reth, Error> {
        let b = b.get(..RETH_LEN).ok_or(Error::Truncated)?;
        Ok(Reth {
            va: u64::from_be_bytes(b[0..8].try_into().map_err(|_| Error::Truncated)?),
            r_key: u32::from_be_bytes(b[8..12].try_into().map_err(|_| Error::Truncated)?),
            dma_length: u32::from_be_bytes(b[12..16].try_into().map_err(|_| Error::Truncated)?),
        })
    }
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.va.to_be_bytes());
        out.extend_from_slice(&self.r_key.to_be_bytes());
        out.extend_from_slice(&self.dma_length.to_be_bytes());
    }
}

/// A BTH packet split into its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    pub opcode: u8,
    pub kind: Kind,
    pub solicited_event: bool,
    pub pad_count: u8,
    pub p_key: u16,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: u32,
    /// RETH when the opcode carries one.
    pub reth: Option<Reth>,
    /// Source QP from the DETH (UD).
    pub src_qp: Option<u32>,
    /// BTH + extension headers.
    pub header_len: usize,
    pub payload: &'a [u8],
    /// Pad bytes + ICRC actually present in the buffer.
    pub trailer_len: usize,
}

impl<'a> Repr<'a> {
    /// Parses BTH, extension headers, payload, pad and ICRC. The buffer must end with the ICRC.
    pub fn parse(b: &'a [u8]) -> Result<Repr<'a>, Error> {
        let p = Packet::new_checked(b)?;
        let (kind, ext) = describe(p.opcode()).ok_or(Error::UnknownOpcode)?;
        let header_len = BTH_LEN + ext.len();
        let trailer_len = usize::from(p.pad_count()) + ICRC_LEN;
        if b.len() < header_len + trailer_len {
            return Err(Error::Truncated);
        }
        let mut off = BTH_LEN;
        let mut src_qp = None;
        if ext.deth {
            src_qp = Some(Deth::parse(&b[off..])?.src_qp);
            off += DETH_LEN;
        }
        let reth = if ext.reth { Some(Reth::parse(&b[off..])?) } else { None };
        Ok(Repr {
            opcode: p.opcode(),
            kind,
            solicited_event: p.solicited_event(),
            pad_count: p.pad_count(),
            p_key: p.p_key(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
            reth,
            src_qp,
            header_len,
            payload: &b[header_len..b.len() - trailer_len],
            trailer_len,
        })
    }
}

/// CRC-32 (IEEE 802.3 polynomial, reflected), which the ICRC uses (IBTA vol. 1 §7.8.1), from
/// the `crc` crate.
static CRC32: crc::Crc<u32, crc::Table<16>> = crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISO_HDLC);

/// The ICRC of a RoCEv2 packet `ip` (IPv4 or IPv6 header through the payload and pad, without
/// the ICRC): CRC-32 over 8 bytes of ones standing for the LRH, then the packet with the
/// variant fields replaced by ones: IPv4 TOS, TTL and header checksum, or IPv6 Traffic Class,
/// Flow Label and Hop Limit; the UDP checksum; and BTH resv8a (annex A17.4.3.3; IBTA vol. 1
/// §7.8.1). Sent least significant byte first.
pub fn icrc_rocev2(ip: &[u8]) -> u32 {
    const UDP_LEN: usize = 8;
    let v6 = ip[0] >> 4 == 6;
    let ihl = if v6 { crate::wire::ipv6::HEADER_LEN } else { usize::from(ip[0] & 0x0f) * 4 };
    let mut c = CRC32.digest();
    c.update(&[0xff; 8]);
    let mut h = [0u8; 60 + UDP_LEN + BTH_LEN];
    let n = ihl + UDP_LEN + BTH_LEN;
    h[..n].copy_from_slice(&ip[..n]);
    if v6 {
        h[0] |= 0x0f; // Traffic Class (high nibble)
        h[1] = 0xff; // Traffic Class (low nibble), Flow Label
        h[2] = 0xff;
        h[3] = 0xff;
        h[7] = 0xff; // Hop Limit
    } else {
        h[1] = 0xff; // TOS
        h[8] = 0xff; // TTL
        h[10] = 0xff; // header checksum
        h[11] = 0xff;
    }
    h[ihl + 6] = 0xff; // UDP checksum
    h[ihl + 7] = 0xff;
    h[ihl + UDP_LEN + 4] = 0xff; // BTH resv8a
    c.update(&h[..n]);
    c.update(&ip[n..]);
    c.finalize()
}

/// The ICRC of a RoCEv1 packet `grh` (GRH through the payload and pad, without the ICRC):
/// the ICRC of an InfiniBand packet with a GRH (IBTA vol. 1 §7.8.1), RoCEv1 having no LRH:
/// CRC-32 over 8 bytes of ones standing for the LRH (all of it variant in a routed packet),
/// then the GRH with TClass, FlowLabel and HopLmt replaced by ones (IPVer, PayLen, NxtHdr
/// and the GIDs are covered), the BTH with resv8a replaced by ones, and the rest as is.
/// RoCEv2's rule (`icrc_rocev2`) is this one with IPv4/UDP in place of the GRH. Sent least
/// significant byte first.
pub fn icrc_rocev1(grh: &[u8]) -> u32 {
    const GRH: usize = GRH_LEN;
    let mut c = CRC32.digest();
    c.update(&[0xff; 8]);
    let mut h = [0u8; GRH + BTH_LEN];
    h.copy_from_slice(&grh[..GRH + BTH_LEN]);
    h[0] |= 0x0f; // TClass (high nibble)
    h[1] = 0xff; // TClass (low nibble), FlowLabel
    h[2] = 0xff;
    h[3] = 0xff;
    h[7] = 0xff; // HopLmt
    h[GRH + 4] = 0xff; // BTH resv8a
    c.update(&h);
    c.update(&grh[GRH + BTH_LEN..]);
    c.finalize()
}

/// The ICRC of a native InfiniBand packet `lrh` (LRH through the payload and pad, without the
/// ICRC; IBTA vol. 1 §7.8.1): with a GRH (LNH 0b11) the LRH is all variant and the rest is as
/// `icrc_rocev1`; without one, the LRH is covered with VL replaced by ones, then the BTH with
/// resv8a as ones. Checked against ibdump's packets in rdma-infiniband-erf-ipoib.pcap.
pub fn icrc_infiniband(lrh: &[u8]) -> u32 {
    const LRH: usize = crate::wire::infiniband::LRH_LEN;
    if lrh[1] & 0x03 == crate::wire::infiniband::lnh::IBA_GLOBAL {
        return icrc_rocev1(&lrh[LRH..]);
    }
    let mut c = CRC32.digest();
    let mut h = [0u8; LRH + BTH_LEN];
    h.copy_from_slice(&lrh[..LRH + BTH_LEN]);
    h[0] |= 0xf0; // VL
    h[LRH + 4] = 0xff; // BTH resv8a
    c.update(&h);
    c.update(&lrh[LRH + BTH_LEN..]);
    c.finalize()
}

/// Builds a packet (for tests and the synthesizer): BTH, `ext` bytes as given, payload, pad, a
/// zero ICRC. `ext` must match the opcode's extension headers.
pub fn emit(opcode: u8, dest_qp: u32, psn: u32, ack_req: bool, ext: &[u8], payload: &[u8]) -> Vec<u8> {
    let pad = (4 - payload.len() % 4) % 4;
    let mut v = Vec::with_capacity(BTH_LEN + ext.len() + payload.len() + pad + ICRC_LEN);
    Bth {
        opcode,
        solicited_event: false,
        mig_req: false,
        pad_count: pad as u8,
        p_key: DEFAULT_P_KEY,
        dest_qp,
        ack_req,
        psn,
    }
    .emit(&mut v);
    v.extend_from_slice(ext);
    v.extend_from_slice(payload);
    v.resize(v.len() + pad + ICRC_LEN, 0);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RDMA_WRITE_FIRST with RETH: every BTH field and the RETH read back.
    #[test]
    fn deconstruct_and_construct_bth() {
        let pkt = emit(opcode::RDMA_WRITE_FIRST, 0x000123, 0xabcdef, true, &{
            let mut r = Vec::new();
            Reth { va: 0x1122_3344_5566_7788, r_key: 0xdead_beef, dma_length: 9000 }.emit(&mut r);
            r
        }, &[7u8; 1024]);
        let p = Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!((p.opcode(), p.dest_qp(), p.psn(), p.ack_req(), p.p_key(), p.pad_count()), (6, 0x123, 0xabcdef, true, 0xffff, 0));
        let r = Repr::parse(&pkt).unwrap();
        assert_eq!(r.reth, Some(Reth { va: 0x1122_3344_5566_7788, r_key: 0xdead_beef, dma_length: 9000 }));
        assert_eq!((r.header_len, r.payload.len(), r.trailer_len), (28, 1024, 4));
        assert_eq!(r.kind, Kind::RdmaWrite { first: true, last: false });
    }

    /// rdma-rocev2-rc-send.pcap (shared corpus) frame 16 from the IPv4 header on: an RC
    /// ACK; tshark shows its ICRC as 0x259cc216 (the bytes in wire order).
    static ACK_PACKET: [u8; 48] = [
        0x45, 0x02, 0x00, 0x30, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x2d, 0x60, 0xc0, 0xa8, 0x46,
        0x06, 0xc0, 0xa8, 0x46, 0x04, 0x00, 0x48, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x40,
        0xff, 0xff, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x01, 0x25,
        0x9c, 0xc2, 0x16,
    ];

    #[test]
    fn icrc_matches_a_real_capture() {
        let n = ACK_PACKET.len();
        assert_eq!(icrc_rocev2(&ACK_PACKET[..n - ICRC_LEN]).to_le_bytes(), ACK_PACKET[n - ICRC_LEN..]);
        // The CRC-32 catalogue check value: the CRC of ASCII "123456789".
        assert_eq!(CRC32.checksum(b"123456789"), 0xCBF4_3926);
    }

    /// RoCEv2 over IPv6: the real ACK above with an IPv6 header in place of the IPv4 one. The
    /// variant fields (Traffic Class, Flow Label, Hop Limit, the UDP checksum, BTH resv8a;
    /// annex A17.4.3.3, as Linux's rxe driver masks them) do not change the ICRC; the version,
    /// payload length, next header, addresses and every transport byte do.
    #[test]
    fn icrc_rocev2_over_ipv6_covers_the_invariant_fields() {
        let udp_on = &ACK_PACKET[20..ACK_PACKET.len() - ICRC_LEN];
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(udp_on.len() as u16 + ICRC_LEN as u16).to_be_bytes());
        p.extend_from_slice(&[17, 64]);
        p.extend_from_slice(&[0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(&[0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        p.extend_from_slice(udp_on);
        let base = icrc_rocev2(&p);
        assert_ne!(base, icrc_rocev2(&ACK_PACKET[..ACK_PACKET.len() - ICRC_LEN]));
        // Variant: TC (low nibble of byte 0, high of byte 1), Flow Label, Hop Limit, UDP checksum, resv8a.
        for (at, v) in [(0, 0x6f), (1, 0xb5), (2, 0x12), (3, 0x34), (7, 1), (46, 0x12), (47, 0x34), (52, 0x77)] {
            let mut q = p.clone();
            q[at] = v;
            assert_eq!(icrc_rocev2(&q), base, "byte {at}");
        }
        // Invariant: payload length, next header, both addresses, UDP ports and length, BTH, AETH.
        for at in [4, 5, 6, 8, 23, 24, 39, 40, 42, 44, 48, 51, 53, 56, 59] {
            let mut q = p.clone();
            q[at] ^= 0x01;
            assert_ne!(icrc_rocev2(&q), base, "byte {at}");
        }
    }

    /// Every BTH field, the AETH and the DETH read back what was written; the bytes are those
    /// of the real ACK above (BTH flags 0x40: MigReq; AETH syndrome 0x06, MSN 1).
    #[test]
    fn bth_aeth_deth_round_trip() {
        let bth = Bth::parse(&ACK_PACKET[28..]).unwrap();
        let want = Bth { opcode: opcode::ACKNOWLEDGE, solicited_event: false, mig_req: true, pad_count: 0, p_key: 0xffff, dest_qp: 0x45, ack_req: false, psn: 0 };
        assert_eq!(bth, want);
        let mut v = Vec::new();
        bth.emit(&mut v);
        Aeth::parse(&ACK_PACKET[40..]).unwrap().emit(&mut v);
        assert_eq!(v, ACK_PACKET[28..44]);
        let b = Bth { opcode: 0x0c, solicited_event: true, mig_req: true, pad_count: 3, p_key: 0x8001, dest_qp: 0x123456, ack_req: true, psn: 0xabcdef };
        v.clear();
        b.emit(&mut v);
        assert_eq!(v, [0x0c, 0xf0, 0x80, 0x01, 0, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef]);
        assert_eq!(Bth::parse(&v), Ok(b));
        let d = Deth { q_key: GSI_Q_KEY, src_qp: QP1 };
        v.clear();
        d.emit(&mut v);
        assert_eq!(v, [0x80, 0x01, 0, 0, 0, 0, 0, 1]);
        assert_eq!(Deth::parse(&v), Ok(d));
        let a = Aeth { syndrome: Aeth::ACK_NO_CREDIT_INFO, msn: 0x010203 };
        v.clear();
        a.emit(&mut v);
        assert_eq!(Aeth::parse(&v), Ok(a));
        assert_eq!(Aeth::parse(&v[..3]), Err(Error::Truncated));
        let i = Ieth { r_key: 0xdead_beef };
        v.clear();
        i.emit(&mut v);
        assert_eq!((Ieth::parse(&v), &v[..]), (Ok(i), &[0xde, 0xad, 0xbe, 0xef][..]));
    }

    /// rdma-infiniband-erf-ipoib.pcap frame 3 is a native IB packet with a GRH (IPoIB over UD):
    /// LRH, GRH, BTH, DETH, payload, ICRC, VCRC. Its ICRC is what `icrc_rocev1` computes over the
    /// GRH onwards, RoCEv1 being that packet without the LRH (which the ICRC never covers in a
    /// packet with a GRH). tshark shows that ICRC as 0x0566d54d.
    #[test]
    fn icrc_matches_an_infiniband_packet_with_a_grh() {
        use crate::capture::testutil::{open_bytes, public_dir, read_all};
        let data = std::fs::read(public_dir().join("rdma-infiniband-erf-ipoib.pcap")).unwrap();
        let pass = read_all(open_bytes(data).unwrap());
        let rec = &pass.frames[2].1;
        // The record ends with the packet; the LRH PktLen (in 4-byte words) runs to the VCRC.
        let end = rec.len() - 2;
        let words = |at: usize| usize::from(u16::from_be_bytes([rec[at + 4], rec[at + 5]]) & 0x7ff);
        let lrh = (0..end - 8)
            .find(|&at| words(at) * 4 == end - at && rec[at + 1] & 3 == 3)
            .expect("an LRH with LNH = GRH");
        let grh = &rec[lrh + 8..end];
        assert_eq!((grh[0] >> 4, grh[6]), (6, 0x1b), "GRH then BTH");
        let n = grh.len();
        assert_eq!(grh[n - 4..], [0x05, 0x66, 0xd5, 0x4d]);
        assert_eq!(icrc_rocev1(&grh[..n - 4]).to_le_bytes(), grh[n - 4..]);
        // The variant fields are outside it; a covered one is not.
        let mut g = grh[..n - 4].to_vec();
        g[1] ^= 0x5a; // TClass / FlowLabel
        g[7] = 3; // HopLmt
        g[GRH_LEN + 4] = 0x77; // BTH resv8a
        assert_eq!(icrc_rocev1(&g), icrc_rocev1(&grh[..n - 4]));
        g[5] ^= 1; // PayLen
        assert_ne!(icrc_rocev1(&g), icrc_rocev1(&grh[..n - 4]));
    }

    /// rdma-infiniband-erf-ipoib.pcap frame 11 (RC Acknowledge, LRH only) and frame 3 (UD
    /// with a GRH): the ICRC of both forms.
    #[test]
    fn icrc_matches_native_infiniband_packets() {
        use crate::capture::testutil::{public_dir, read_all};
        let p = read_all(crate::capture::open(public_dir().join("rdma-infiniband-erf-ipoib.pcap").to_str().unwrap(), 0).unwrap());
        for n in [3usize, 11] {
            let rec = &p.frames[n - 1].1;
            let r = crate::wire::erf::record(rec).unwrap();
            let pkt = &r.packet[..r.packet.len() - crate::wire::infiniband::VCRC_LEN];
            let (body, crc) = pkt.split_at(pkt.len() - ICRC_LEN);
            assert_eq!(icrc_infiniband(body).to_le_bytes(), crc, "frame {n}");
            assert_eq!(crate::wire::infiniband::vcrc(pkt).to_le_bytes(), r.packet[pkt.len()..], "frame {n}");
        }
    }

    #[test]
    fn pad_and_short_buffers() {
        let pkt = emit(opcode::SEND_ONLY, 5, 1, false, &[], b"abcde");
        let r = Repr::parse(&pkt).unwrap();
        assert_eq!((r.payload, r.pad_count, r.trailer_len), (&b"abcde"[..], 3, 7));
        assert_eq!(Repr::parse(&pkt[..15]).unwrap_err(), Error::Truncated);
        assert_eq!(Repr::parse(&[0x15; 20]).unwrap_err(), Error::UnknownOpcode);
        assert_eq!(Packet::new_checked(&[0u8; 11][..]).unwrap_err(), Error::Truncated);
        // A Read Request without room for its RETH.
        let short = emit(opcode::RDMA_READ_REQUEST, 5, 1, false, &[0; 8], &[]);
        assert_eq!(Repr::parse(&short).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn every_defined_opcode_has_a_consistent_header_length() {
        for op in 0..=255u8 {
            if let Some((kind, ext)) = describe(op) {
                let reth = matches!(kind, Kind::ReadRequest) || matches!(kind, Kind::RdmaWrite { first: true, .. });
                assert_eq!(ext.reth, reth, "opcode {op:#x}");
                let aeth = matches!(kind, Kind::Ack) || matches!(kind, Kind::ReadResponse { first, last } if first || last);
                assert_eq!(ext.aeth, aeth, "opcode {op:#x}");
            }
        }
        assert!(describe(0x15).is_none() && describe(0x2c).is_none() && describe(0x81).is_none());
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;
        proptest! {
            #[test]
            fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..80)) {
                if let Ok(r) = Repr::parse(&data) {
                    prop_assert_eq!(r.header_len + r.payload.len() + r.trailer_len, data.len());
                }
            }
        }
    }
}
