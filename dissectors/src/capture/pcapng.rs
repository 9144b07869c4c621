//! pcapng (draft-ietf-opsawg-pcapng): Section Header Block (either byte order), Interface
//! Description Block (link type, snaplen, `if_tsresol`, `if_tsoffset`), Enhanced Packet
//! Block, Simple Packet Block, obsolete Packet Block; every other block is skipped.
//! A file may hold several sections, each with its own byte order and interfaces.

use super::pcap::read_u32;
use super::source::Source;
use super::{CaptureError, FrameInfo, FrameReader, RawFrame};
use crate::accounting::{cat, Accounting};
use crate::anomaly::Anomalies;
use crate::frame::FrameRef;
use super::Anomaly;

pub mod block {
    /// Section Header Block; the value reads the same in both byte orders.
    pub const SHB: u32 = 0x0a0d_0d0a;
    pub const IDB: u32 = 0x0000_0001;
    /// Packet Block (obsolete).
    pub const PB: u32 = 0x0000_0002;
    pub const SPB: u32 = 0x0000_0003;
    pub const EPB: u32 = 0x0000_0006;
}

pub const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
/// Block type + block total length.
const BLOCK_HEAD_LEN: usize = 8;
/// Block type, block total length, trailing block total length.
const BLOCK_MIN_LEN: usize = 12;
/// Blocks we parse must fit in memory; anything longer is skipped without buffering.
pub const MAX_PARSED_BLOCK: usize = 4 << 20;
/// More interfaces than this in a section is treated as damage.
pub const MAX_INTERFACES: usize = 4096;

/// IDB option codes.
const OPT_ENDOFOPT: u16 = 0;
const IF_TSRESOL: u16 = 9;
const IF_TSOFFSET: u16 = 14;

/// Timestamp unit of an interface: 10^-n or 2^-n seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsResolution {
    Pow10(u8),
    Pow2(u8),
}

impl TsResolution {
    /// Decode the one-byte `if_tsresol` value (MSB set: power of two).
    pub fn from_option(v: u8) -> Self {
        if v & 0x80 != 0 {
            TsResolution::Pow2(v & 0x7f)
        } else {
            TsResolution::Pow10(v)
        }
    }

    /// Convert a timestamp in these units plus an offset in seconds to ns since the epoch,
    /// saturating at 0 and u64::MAX.
    pub fn to_ns(self, ts: u64, offset_s: i64) -> u64 {
        let ts = u128::from(ts);
        let ns: u128 = match self {
            TsResolution::Pow10(k) if k <= 9 => ts * 10u128.pow(u32::from(9 - k)),
            TsResolution::Pow10(k) => match 10u128.checked_pow(u32::from(k - 9)) {
                Some(d) => ts / d,
                None => 0,
            },
            TsResolution::Pow2(k) => {
                let scaled = ts * 1_000_000_000;
                if k >= 128 {
                    0
                } else {
                    scaled >> k
                }
            }
        };
        let total = ns as i128 + i128::from(offset_s) * 1_000_000_000;
        total.clamp(0, i128::from(u64::MAX)) as u64
    }
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    linktype: u32,
    snaplen: u32,
    tsresol: TsResolution,
    tsoffset_s: i64,
}

/// What the reader holds for the current frame: the whole block is still buffered.
#[derive(Clone, Copy)]
struct Current {
    info: FrameInfo,
    data_off: usize,
    data_len: usize,
    block_len: usize,
}

pub struct PcapngReader {
    src: Source,
    big_endian: bool,
    interfaces: Vec<Interface>,
    file_index: u16,
    frames: u64,
    last_ts_ns: u64,
    cur: Option<Current>,
    done: bool,
}

impl PcapngReader {
    /// Check that the file starts with a sane Section Header Block (not consumed here).
    pub fn new(mut src: Source, path: &str, file_index: u16) -> Result<Self, CaptureError> {
        let bad = |r: &str| CaptureError::BadHeader { path: path.to_string(), reason: r.to_string() };
        if src.fill(28) < 28 {
            return Err(bad("pcapng section header block shorter than 28 bytes"));
        }
        let h = src.peek();
        let big_endian = match read_u32(&h[8..12], false) {
            BYTE_ORDER_MAGIC => false,
            m if m.swap_bytes() == BYTE_ORDER_MAGIC => true,
            _ => return Err(bad("pcapng byte-order magic missing")),
        };
        let total = read_u32(&h[4..8], big_endian) as usize;
        if total < 28 || !total.is_multiple_of(4) {
            return Err(bad("pcapng section header block length invalid"));
        }
        let major = if big_endian { u16::from_be_bytes([h[12], h[13]]) } else { u16::from_le_bytes([h[12], h[13]]) };
        if major != 1 {
            return Err(bad(&format!("unsupported pcapng major version {major}")));
        }
        Ok(PcapngReader {
            src,
            big_endian,
            interfaces: Vec::new(),
            file_index,
            frames: 0,
            last_ts_ns: 0,
            cur: None,
            done: false,
        })
    }

    fn u32_at(&self, b: &[u8], off: usize) -> u32 {
        read_u32(&b[off..off + 4], self.big_endian)
    }

    fn u16_at(&self, b: &[u8], off: usize) -> u16 {
        let a = [b[off], b[off + 1]];
        if self.big_endian {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        }
    }

    fn abandon(&mut self, acct: &mut Accounting, an: &mut Anomalies, anomaly: Anomaly, category: &'static str) {
        an.raise(self.src.why_ended(anomaly));
        let rest = self.src.skip_to_end();
        acct.add(category, rest);
        self.done = true;
    }

    /// Drop a whole buffered block of `len` bytes into `category`.
    fn drop_block(&mut self, acct: &mut Accounting, len: usize, category: &'static str) {
        self.src.consume(len);
        acct.add(category, len as u64);
    }

    /// Parse an IDB body (block bytes `b`, whole block).
    fn interface_from(&self, b: &[u8]) -> Option<Interface> {
        let body = &b[BLOCK_HEAD_LEN..b.len() - 4];
        if body.len() < 8 {
            return None;
        }
        let mut iface = Interface {
            linktype: u32::from(self.u16_at(body, 0)),
            snaplen: self.u32_at(body, 4),
            tsresol: TsResolution::Pow10(6),
            tsoffset_s: 0,
        };
        let mut opts = &body[8..];
        while opts.len() >= 4 {
            let code = self.u16_at(opts, 0);
            let len = usize::from(self.u16_at(opts, 2));
            let padded = (len + 3) & !3;
            if code == OPT_ENDOFOPT || opts.len() < 4 + len {
                break;
            }
            let v = &opts[4..4 + len];
            match (code, len) {
                (IF_TSRESOL, 1) => iface.tsresol = TsResolution::from_option(v[0]),
                (IF_TSOFFSET, 8) => {
                    let a: [u8; 8] = v.try_into().unwrap_or([0; 8]);
                    iface.tsoffset_s = if self.big_endian { i64::from_be_bytes(a) } else { i64::from_le_bytes(a) };
                }
                _ => {}
            }
            opts = &opts[(4 + padded).min(opts.len())..];
        }
        Some(iface)
    }
}

impl FrameReader for PcapngReader {
    fn advance(&mut self, acct: &mut Accounting, an: &mut Anomalies) -> bool {
        if let Some(c) = self.cur.take() {
            self.src.consume(c.block_len);
        }
        loop {
            if self.done {
                return false;
            }
            let avail = self.src.fill(BLOCK_MIN_LEN);
            if avail == 0 && !self.src.read_error && !self.src.interrupted {
                self.done = true;
                return false;
            }
            if avail < BLOCK_MIN_LEN {
                self.abandon(acct, an, Anomaly::TruncatedRecord, cat::TRUNCATED_TAIL);
                return false;
            }
            let h = self.src.peek();
            let ty = self.u32_at(h, 0);
            if ty == block::SHB {
                match read_u32(&h[8..12], false) {
                    BYTE_ORDER_MAGIC => self.big_endian = false,
                    m if m.swap_bytes() == BYTE_ORDER_MAGIC => self.big_endian = true,
                    _ => {
                        self.abandon(acct, an, Anomaly::PcapngBadByteOrderMagic, cat::MALFORMED);
                        return false;
                    }
                }
            }
            let h = self.src.peek();
            let total = self.u32_at(h, 4) as usize;
            if total < BLOCK_MIN_LEN || !total.is_multiple_of(4) {
                self.abandon(acct, an, Anomaly::PcapngBadBlockLength, cat::MALFORMED);
                return false;
            }
            let parsed = matches!(ty, block::SHB | block::IDB | block::EPB | block::SPB | block::PB);
            if !parsed || total > MAX_PARSED_BLOCK {
                // Skipped without buffering the whole block.
                let skipped = self.src.skip(total as u64);
                if skipped < total as u64 {
                    an.raise(Anomaly::TruncatedRecord);
                    acct.add(cat::TRUNCATED_TAIL, skipped);
                    self.done = true;
                    return false;
                }
                if parsed {
                    an.raise(Anomaly::PcapngOversizedBlock);
                    acct.add(cat::MALFORMED, skipped);
                    if matches!(ty, block::EPB | block::SPB | block::PB) {
                        self.frames += 1;
                    }
                } else {
                    acct.add(cat::CAPTURE_FORMAT, skipped);
                }
                continue;
            }
            if self.src.fill(total) < total {
                self.abandon(acct, an, Anomaly::TruncatedRecord, cat::TRUNCATED_TAIL);
                return false;
            }
            // The next block's header and frame start: loaded while this one is handled.
            if let Some(next) = self.src.peek().get(total..total + 128) {
                super::prefetch(next);
            }
            // And further on, as the pcap reader does (`capture::PREFETCH_AHEAD`).
            if let Some(ahead) = self.src.peek().get(total + super::PREFETCH_AHEAD..total + super::PREFETCH_AHEAD + 1) {
                super::prefetch(ahead);
            }
            let b = &self.src.peek()[..total];
            if self.u32_at(b, total - 4) as usize != total {
                an.raise(Anomaly::PcapngBlockLengthMismatch);
            }
            match ty {
                block::SHB => {
                    // BOM(4) major(2) minor(2) section length(8) options.
                    if total < 28 {
                        an.raise(Anomaly::PcapngBadSectionHeader);
                        self.drop_block(acct, total, cat::MALFORMED);
                        continue;
                    }
                    if self.u16_at(b, 12) != 1 {
                        self.abandon(acct, an, Anomaly::PcapngUnsupportedVersion, cat::MALFORMED);
                        return false;
                    }
                    self.interfaces.clear();
                    self.drop_block(acct, total, cat::CAPTURE_FORMAT);
                }
                block::IDB => match self.interface_from(b) {
                    Some(i) if self.interfaces.len() < MAX_INTERFACES => {
                        self.interfaces.push(i);
                        self.drop_block(acct, total, cat::CAPTURE_FORMAT);
                    }
                    Some(_) => {
                        an.raise(Anomaly::PcapngTooManyInterfaces);
                        self.drop_block(acct, total, cat::MALFORMED);
                    }
                    None => {
                        an.raise(Anomaly::PcapngBadInterfaceBlock);
                        self.drop_block(acct, total, cat::MALFORMED);
                    }
                },
                _ => {
                    // A packet block: EPB, SPB or PB.
                    self.frames += 1;
                    match self.packet(b, ty) {
                        Ok((iface, ts, data_off, data_len, orig_len)) => {
                            // An interface's snaplen bounds its records (pcapng §4.2; 0: none).
                            if iface.snaplen != 0 && data_len > iface.snaplen as usize {
                                an.raise(Anomaly::PcapngRecordExceedsSnaplen);
                            }
                            let info = FrameInfo {
                                frame: FrameRef { file: self.file_index, number: self.frames },
                                ts_ns: ts,
                                linktype: iface.linktype,
                                orig_len,
                            };
                            self.last_ts_ns = ts;
                            acct.add(cat::CAPTURE_FORMAT, (total - data_len) as u64);
                            self.cur = Some(Current { info, data_off, data_len, block_len: total });
                            return true;
                        }
                        Err(anomaly) => {
                            an.raise(anomaly);
                            self.drop_block(acct, total, cat::MALFORMED);
                        }
                    }
                }
            }
        }
    }

    fn current(&self) -> Option<RawFrame<'_>> {
        let c = self.cur?;
        Some(RawFrame { info: c.info, data: &self.src.peek()[c.data_off..c.data_off + c.data_len] })
    }

    fn source(&self) -> &Source {
        &self.src
    }

    fn source_mut(&mut self) -> &mut Source {
        &mut self.src
    }

    fn file_size(&self) -> u64 {
        self.src.size()
    }

    fn position(&self) -> u64 {
        self.src.position() + self.cur.map_or(0, |c| c.block_len as u64)
    }
}

impl PcapngReader {
    /// Locate the frame in a packet block: (interface, ts_ns, data offset, caplen, orig_len).
    fn packet(&self, b: &[u8], ty: u32) -> Result<(Interface, u64, usize, usize, u32), Anomaly> {
        let total = b.len();
        match ty {
            block::EPB | block::PB => {
                // EPB: interface(4) ts_hi(4) ts_lo(4) caplen(4) origlen(4);
                // PB: interface(2) drops(2) then the same.
                if total < 32 {
                    return Err(Anomaly::PcapngBadPacketBlock);
                }
                let iface_id = if ty == block::EPB { self.u32_at(b, 8) as usize } else { usize::from(self.u16_at(b, 8)) };
                let iface = *self.interfaces.get(iface_id).ok_or(Anomaly::PcapngUnknownInterface)?;
                let ts = (u64::from(self.u32_at(b, 12)) << 32) | u64::from(self.u32_at(b, 16));
                let caplen = self.u32_at(b, 20) as usize;
                let orig_len = self.u32_at(b, 24);
                if caplen > total - 32 {
                    return Err(Anomaly::PcapngBadCaplen);
                }
                Ok((iface, iface.tsresol.to_ns(ts, iface.tsoffset_s), 28, caplen, orig_len))
            }
            _ => {
                // SPB: origlen(4) then data; it belongs to interface 0 and has no timestamp,
                // so it takes the previous frame's time (keeps the merge order stable).
                if total < 16 {
                    return Err(Anomaly::PcapngBadPacketBlock);
                }
                let iface = *self.interfaces.first().ok_or(Anomaly::PcapngUnknownInterface)?;
                let orig_len = self.u32_at(b, 8);
                let mut caplen = (orig_len as usize).min(total - 16);
                if iface.snaplen != 0 {
                    caplen = caplen.min(iface.snaplen as usize);
                }
                Ok((iface, self.last_ts_ns, 12, caplen, orig_len))
            }
        }
    }
}
