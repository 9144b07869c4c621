//! pcapng block encoders (draft-ietf-opsawg-pcapng): Section Header Block, Interface
//! Description Block (`if_tsresol` = 9: nanosecond timestamps), Enhanced Packet Block with an
//! optional `opt_comment`. Little-endian, as written by this host. Used by `live --write`
//! (`live::rotate`) and `analyze --annotate` (`annotate`).

use std::io::{self, Write};

const SHB_TYPE: u32 = 0x0A0D_0D0A;
const IDB_TYPE: u32 = 0x0000_0001;
const EPB_TYPE: u32 = 0x0000_0006;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
const OPT_ENDOFOPT: u16 = 0;
const OPT_COMMENT: u16 = 1;
const IF_TSRESOL: u16 = 9;

/// Bytes of `shb()`.
pub const SHB_LEN: u64 = 28;
/// Bytes of `idb()`.
pub const IDB_LEN: u64 = 32;
/// An EPB without data or options: type, length, interface, ts high, ts low, caplen, orig
/// len, length.
pub const EPB_FIXED: u64 = 32;

fn pad4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

/// Section Header Block, version 1.0, no options, section length unknown (-1).
pub fn shb() -> Vec<u8> {
    let mut b = Vec::with_capacity(SHB_LEN as usize);
    b.extend_from_slice(&SHB_TYPE.to_le_bytes());
    b.extend_from_slice(&28u32.to_le_bytes());
    b.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&(-1i64).to_le_bytes());
    b.extend_from_slice(&28u32.to_le_bytes());
    b
}

/// Interface Description Block for `linktype` (a LINKTYPE_* value) with `if_tsresol` = 10^-9.
pub fn idb(linktype: u32, snaplen: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(IDB_LEN as usize);
    b.extend_from_slice(&IDB_TYPE.to_le_bytes());
    b.extend_from_slice(&32u32.to_le_bytes());
    b.extend_from_slice(&(linktype as u16).to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&snaplen.to_le_bytes());
    b.extend_from_slice(&IF_TSRESOL.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&[9, 0, 0, 0]);
    b.extend_from_slice(&OPT_ENDOFOPT.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&32u32.to_le_bytes());
    b
}

/// Length of the EPB `write_epb` writes for these sizes.
pub fn epb_len(data_len: usize, comment: Option<&str>) -> u64 {
    let opts = match comment {
        // opt_comment header + value padded, then opt_endofopt.
        Some(c) => 4 + pad4(c.len().min(u16::MAX as usize - 3)) + 4,
        None => 0,
    };
    EPB_FIXED + (pad4(data_len) + opts) as u64
}

/// Writes one Enhanced Packet Block; returns its length. `comment` becomes `opt_comment`
/// (UTF-8, cut to fit the option's 16-bit length).
pub fn write_epb(
    out: &mut impl Write,
    interface: u32,
    ts_ns: u64,
    data: &[u8],
    orig_len: u32,
    comment: Option<&str>,
) -> io::Result<u64> {
    let comment = comment.map(|c| {
        let mut end = c.len().min(u16::MAX as usize - 3);
        while !c.is_char_boundary(end) {
            end -= 1;
        }
        &c[..end]
    });
    let block_len = epb_len(data.len(), comment);
    let mut hdr = Vec::with_capacity(28);
    hdr.extend_from_slice(&EPB_TYPE.to_le_bytes());
    hdr.extend_from_slice(&(block_len as u32).to_le_bytes());
    hdr.extend_from_slice(&interface.to_le_bytes());
    hdr.extend_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
    hdr.extend_from_slice(&(ts_ns as u32).to_le_bytes());
    hdr.extend_from_slice(&(data.len() as u32).to_le_bytes());
    hdr.extend_from_slice(&orig_len.max(data.len() as u32).to_le_bytes());
    out.write_all(&hdr)?;
    out.write_all(data)?;
    out.write_all(&[0u8; 3][..pad4(data.len()) - data.len()])?;
    if let Some(c) = comment {
        out.write_all(&OPT_COMMENT.to_le_bytes())?;
        out.write_all(&(c.len() as u16).to_le_bytes())?;
        out.write_all(c.as_bytes())?;
        out.write_all(&[0u8; 3][..pad4(c.len()) - c.len()])?;
        out.write_all(&OPT_ENDOFOPT.to_le_bytes())?;
        out.write_all(&0u16.to_le_bytes())?;
    }
    out.write_all(&(block_len as u32).to_le_bytes())?;
    Ok(block_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::Accounting;
    use crate::anomaly::Anomalies;

    /// Frames with and without comments (comment lengths 0..5 for every padding) read back
    /// through the engine's own pcapng reader byte for byte, with no anomaly.
    #[test]
    fn blocks_read_back_through_the_reader() {
        let mut file = shb();
        file.extend(idb(crate::wire::linktype::ETHERNET, 65535));
        file.extend(idb(crate::wire::linktype::RAW, 65535));
        let frames: Vec<Vec<u8>> = (0..12u8).map(|i| vec![i; 40 + i as usize]).collect();
        for (i, f) in frames.iter().enumerate() {
            let comment = (i % 2 == 0).then(|| "é".repeat(i / 2) + &"x".repeat(i % 5));
            let before = file.len() as u64;
            let n = write_epb(&mut file, (i % 2) as u32, 1_700_000_000_000_000_000 + i as u64, f, f.len() as u32 + 1, comment.as_deref()).unwrap();
            assert_eq!(file.len() as u64 - before, n);
            assert_eq!(n, epb_len(f.len(), comment.as_deref()));
        }
        let mut r = crate::capture::testutil::open_bytes(file).unwrap();
        let (mut acct, mut an) = (Accounting::default(), Anomalies::default());
        for (i, f) in frames.iter().enumerate() {
            assert!(r.advance(&mut acct, &mut an));
            let got = r.current().unwrap();
            assert_eq!(got.data, &f[..]);
            assert_eq!(got.info.ts_ns, 1_700_000_000_000_000_000 + i as u64);
            let lt = if i % 2 == 0 { crate::wire::linktype::ETHERNET } else { crate::wire::linktype::RAW };
            assert_eq!(got.info.linktype, lt);
        }
        assert!(!r.advance(&mut acct, &mut an));
        assert!(an.iter().next().is_none());
    }
}
