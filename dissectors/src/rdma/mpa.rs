//! MPA, Marker PDU Aligned framing for TCP (RFC 5044): the Request/Reply frames that start an
//! iWARP connection, the FPDU layout (ULPDU_Length 2 | ULPDU | pad to 4 | CRC 4), markers and
//! the CRC32c.
//!
//! Facts checked on the public captures: the CRC field is present in every FPDU even when CRC
//! was not negotiated (then zero); the CRC covers the markers inside the FPDU and is stored as
//! the little-endian bytes of the CRC32c value; markers sit every 512 octets of the TCP stream
//! counted from the first octet after the Request/Reply frame of that direction (RFC 5044 §5).

pub const KEY_LEN: usize = 16;
pub const REQ_KEY: &[u8; KEY_LEN] = b"MPA ID Req Frame";
pub const REP_KEY: &[u8; KEY_LEN] = b"MPA ID Rep Frame";
/// MPA revision 1 (RFC 5044 §7.1).
pub const REVISION_1: u8 = 1;
/// Key, flags, revision, PD_Length.
pub const FRAME_HEADER_LEN: usize = 20;
/// RFC 5044 §7.1: private data is at most 512 octets.
pub const MAX_PRIVATE_DATA: usize = 512;
pub const MARKER_INTERVAL: u64 = 512;
pub const MARKER_LEN: usize = 4;
pub const LENGTH_LEN: usize = 2;
pub const CRC_LEN: usize = 4;

/// An MPA Request or Reply frame header (RFC 5044 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub reply: bool,
    /// M: the sender wants to receive markers.
    pub markers: bool,
    /// C: CRC in use.
    pub crc: bool,
    /// R: the connection is rejected (Reply only).
    pub rejected: bool,
    pub revision: u8,
    pub private_data_len: u16,
}

impl Frame {
    /// `None` when the bytes are not an MPA Request/Reply key; `Some(Err)` when the key matches
    /// but the header is incomplete (need more bytes).
    pub fn parse(b: &[u8]) -> Option<Result<Frame, usize>> {
        let n = b.len().min(KEY_LEN);
        let reply = if b[..n] == REQ_KEY[..n] {
            false
        } else if b[..n] == REP_KEY[..n] {
            true
        } else {
            return None;
        };
        if b.len() < FRAME_HEADER_LEN {
            return Some(Err(FRAME_HEADER_LEN));
        }
        let f = b[16];
        Some(Ok(Frame {
            reply,
            markers: f & 0x80 != 0,
            crc: f & 0x40 != 0,
            rejected: f & 0x20 != 0,
            revision: b[17],
            private_data_len: u16::from_be_bytes([b[18], b[19]]),
        }))
    }

    /// Whole frame length on the wire.
    pub fn len(&self) -> usize {
        FRAME_HEADER_LEN + usize::from(self.private_data_len)
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn emit(&self, private_data: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(FRAME_HEADER_LEN + private_data.len());
        v.extend_from_slice(if self.reply { REP_KEY } else { REQ_KEY });
        v.push(u8::from(self.markers) << 7 | u8::from(self.crc) << 6 | u8::from(self.rejected) << 5);
        v.push(self.revision);
        v.extend_from_slice(&(private_data.len() as u16).to_be_bytes());
        v.extend_from_slice(private_data);
        v
    }
}

/// Pad octets after a ULPDU of `ulpdu_len` so that length field + ULPDU is a multiple of 4.
pub fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (LENGTH_LEN + ulpdu_len) % 4) % 4
}

/// FPDU bytes without markers: length field, ULPDU, pad, CRC.
pub fn fpdu_len(ulpdu_len: usize) -> usize {
    LENGTH_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// CRC32c (Castagnoli, the iSCSI CRC of RFC 3385) that MPA uses (RFC 5044 §4.1), from the
/// `crc` crate.
static CRC32C: crc::Crc<u32, crc::Table<16>> = crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

pub fn crc32c(data: &[u8]) -> u32 {
    CRC32C.checksum(data)
}

/// Builds an FPDU (tests, synthesizer) that starts at stream position `pos` (relative to the
/// marker base), inserting markers when `markers`, with a real CRC when `crc`.
pub fn emit_fpdu(ulpdu: &[u8], pos: u64, markers: bool, crc: bool) -> Vec<u8> {
    let mut raw = Vec::with_capacity(fpdu_len(ulpdu.len()) + 16);
    emit_fpdu_into(&mut raw, pos, &[ulpdu], markers, crc);
    raw
}

/// Appends to `out` the FPDU whose ULPDU is the concatenation of `ulpdu` parts, placed at
/// stream position `pos` (relative to the marker base); returns the stream position after it.
/// A marker falls at every `MARKER_INTERVAL`th octet, FPDUPTR pointing back to this FPDU's
/// start (RFC 5044 §5); the CRC covers the markers before it (§4.1) and is stored least
/// significant byte first. A marker due where this FPDU starts is its first octets, FPDUPTR
/// 0, covered by its CRC; so one due right after an FPDU's CRC belongs to the next FPDU, not
/// to the one it follows (the layout of rdma-iwarp-send-recv-crc-markers.pcap, `FRAME7` in
/// the tests, which Wireshark and smbwire read with a good CRC).
pub fn emit_fpdu_into(out: &mut Vec<u8>, pos: u64, ulpdu: &[&[u8]], markers: bool, crc: bool) -> u64 {
    let len: usize = ulpdu.iter().map(|p| p.len()).sum();
    let start = out.len();
    let mut at = pos;
    let marker = |out: &mut Vec<u8>, at: &mut u64| {
        if markers && (*at).is_multiple_of(MARKER_INTERVAL) {
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&((*at - pos) as u16).to_be_bytes());
            *at += MARKER_LEN as u64;
        }
    };
    let put = |out: &mut Vec<u8>, at: &mut u64, bytes: &[u8]| {
        for &b in bytes {
            marker(out, at);
            out.push(b);
            *at += 1;
        }
    };
    put(out, &mut at, &(len as u16).to_be_bytes());
    for p in ulpdu {
        put(out, &mut at, p);
    }
    put(out, &mut at, &[0u8; 3][..pad_len(len)]);
    let mut crc_at = [0usize; CRC_LEN];
    for slot in crc_at.iter_mut() {
        put(out, &mut at, &[0]);
        *slot = out.len() - 1;
    }
    if crc {
        let c = crc32c(&out[start..crc_at[0]]);
        for (i, v) in crc_at.iter().zip(c.to_le_bytes()) {
            out[*i] = v;
        }
    }
    at
}

/// Where an FPDU with a `ulpdu_len`-byte ULPDU placed at stream position `pos` ends, the
/// markers inside it included (the same walk as `emit_fpdu_into`, without the bytes).
pub fn fpdu_end(pos: u64, ulpdu_len: usize, markers: bool) -> u64 {
    let mut remaining = fpdu_len(ulpdu_len) as u64;
    if !markers {
        return pos + remaining;
    }
    let mut at = pos;
    while remaining > 0 {
        if at.is_multiple_of(MARKER_INTERVAL) {
            at += MARKER_LEN as u64;
        }
        let next = (at / MARKER_INTERVAL + 1) * MARKER_INTERVAL;
        let step = remaining.min(next - at);
        at += step;
        remaining -= step;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rdma-iwarp-send-recv-crc-markers.pcap frame 7: a marker, then an FPDU with a good CRC.
    const FRAME7: &str = "000000000022414300000000000000000000000100000000000400000100000000b00508000000005e8789d7";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn crc_covers_markers_and_is_little_endian() {
        let b = hex(FRAME7);
        let ulpdu = &b[6..6 + 34];
        assert_eq!(crc32c(&b[..40]).to_le_bytes(), b[40..44]);
        assert_eq!(emit_fpdu(ulpdu, 0, true, true), b);
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    /// An FPDU that ends on a marker boundary is not followed by that marker: the next FPDU
    /// starts with it (FPDUPTR 0) and its CRC covers it, as `FRAME7`'s first FPDU does at the
    /// start of the stream; `fpdu_end` agrees with the bytes written.
    #[test]
    fn a_marker_between_two_fpdus_starts_the_second() {
        // 2 + 502 + 0 pad + 4 CRC = 508 bytes after the 4-byte marker at 0: ends at 512.
        let ulpdu = [0x5a; 502];
        let mut out = Vec::new();
        let end = emit_fpdu_into(&mut out, 0, &[&ulpdu[..100], &ulpdu[100..]], true, true);
        assert_eq!((end, out.len()), (512, 512));
        assert_eq!(crc32c(&out[..508]).to_le_bytes(), out[508..512]);
        assert_eq!(fpdu_end(0, 502, true), 512);
        let end = emit_fpdu_into(&mut out, end, &[&[7; 34]], true, true);
        assert_eq!(&out[512..516], &[0, 0, 0, 0], "a marker pointing at the FPDU it starts");
        assert_eq!(&out[516..518], &[0, 34]);
        assert_eq!(crc32c(&out[512..552]).to_le_bytes(), out[552..556], "its CRC covers the marker");
        assert_eq!((end, out.len()), (556, 556));
        for (pos, len) in [(0u64, 34usize), (8, 1000), (500, 3), (511, 1400), (4, 502)] {
            let mut v = Vec::new();
            let e = emit_fpdu_into(&mut v, pos, &[&vec![1; len]], true, false);
            assert_eq!(v.len() as u64, e - pos);
            assert_eq!(fpdu_end(pos, len, true), e, "{pos} {len}");
            assert_eq!(fpdu_end(pos, len, false), pos + fpdu_len(len) as u64);
        }
    }

    #[test]
    fn request_reply_frames() {
        let f = Frame { reply: false, markers: true, crc: true, rejected: false, revision: 1, private_data_len: 7 };
        let b = f.emit(b"private");
        assert_eq!(Frame::parse(&b), Some(Ok(f)));
        assert_eq!(f.len(), 27);
        assert_eq!(Frame::parse(&b[..10]), Some(Err(FRAME_HEADER_LEN)));
        assert_eq!(Frame::parse(b"GET / HTTP/1.1\r\n...."), None);
        assert_eq!(fpdu_len(34), 40);
        assert_eq!(fpdu_len(140), 148);
    }
}
