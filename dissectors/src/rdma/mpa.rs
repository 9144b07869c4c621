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

const fn crc32c_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}
static CRC32C: [u32; 256] = crc32c_table();

/// CRC32c (Castagnoli), streaming: `crc32c_update(!0, ..)` ... then `!crc`.
pub fn crc32c_update(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc = CRC32C[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

pub fn crc32c(data: &[u8]) -> u32 {
    !crc32c_update(!0, data)
}

/// Builds an FPDU (tests, synthesizer) that starts at stream position `pos` (relative to the
/// marker base), inserting markers when `markers`, with a real CRC when `crc`.
pub fn emit_fpdu(ulpdu: &[u8], pos: u64, markers: bool, crc: bool) -> Vec<u8> {
    let mut logical = Vec::with_capacity(fpdu_len(ulpdu.len()));
    logical.extend_from_slice(&(ulpdu.len() as u16).to_be_bytes());
    logical.extend_from_slice(ulpdu);
    logical.resize(logical.len() + pad_len(ulpdu.len()), 0);
    let mut raw = Vec::with_capacity(logical.len() + 16);
    let body_end = logical.len();
    let mut i = 0;
    let mut at = pos;
    let put = |raw: &mut Vec<u8>, at: &mut u64, b: u8| {
        if markers && (*at).is_multiple_of(MARKER_INTERVAL) {
            let back = (*at - pos) as u16;
            raw.extend_from_slice(&[0, 0]);
            raw.extend_from_slice(&back.to_be_bytes());
            *at += MARKER_LEN as u64;
        }
        raw.push(b);
        *at += 1;
    };
    while i < body_end {
        put(&mut raw, &mut at, logical[i]);
        i += 1;
    }
    if markers && at.is_multiple_of(MARKER_INTERVAL) {
        // A marker due where the CRC field starts precedes it and is covered by it.
        raw.extend_from_slice(&[0, 0]);
        raw.extend_from_slice(&((at - pos) as u16).to_be_bytes());
        at += MARKER_LEN as u64;
    }
    let c = if crc { crc32c(&raw) } else { 0 };
    for b in c.to_le_bytes() {
        put(&mut raw, &mut at, b);
    }
    raw
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
