//! Headers that wrap a whole SMB2 message: TRANSFORM_HEADER (encryption, MS-SMB2 §2.2.41),
//! COMPRESSION_TRANSFORM_HEADER (§2.2.42, unchained and chained), and the SMB1 header
//! (MS-CIFS §2.2.3.1), recognised only so that SMB1 NEGOTIATE and friends are counted.
//! The wrapped bytes stay opaque here: decryption needs session keys and decompression is
//! a separate stage.

use super::records::{protocol_id, u16_at, u32_at, u64_at, Error, Result};

/// TRANSFORM_HEADER (§2.2.41), 52 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransformHeader {
    pub signature: [u8; 16],
    pub nonce: [u8; 16],
    pub original_message_size: u32,
    /// Flags (3.1.1: 0x0001 = Encrypted) / EncryptionAlgorithm (3.0.x: 0x0001 = AES-128-CCM).
    pub flags: u16,
    pub session_id: u64,
}

impl TransformHeader {
    pub const LEN: usize = 52;
    pub fn parse(b: &[u8]) -> Result<TransformHeader> {
        if b.len() < Self::LEN {
            return Err(Error::Truncated);
        }
        if b[0..4] != protocol_id::TRANSFORM {
            return Err(Error::BadProtocolId);
        }
        let mut signature = [0u8; 16];
        signature.copy_from_slice(&b[4..20]);
        let mut nonce = [0u8; 16];
        nonce.copy_from_slice(&b[20..36]);
        Ok(TransformHeader {
            signature,
            nonce,
            original_message_size: u32_at(b, 36)?,
            flags: u16_at(b, 42)?,
            session_id: u64_at(b, 44)?,
        })
    }
}

/// Compression algorithm identifiers (§2.2.3.1.3).
pub mod compression_algorithm {
    pub const NONE: u16 = 0x0000;
    pub const LZNT1: u16 = 0x0001;
    pub const LZ77: u16 = 0x0002;
    pub const LZ77_HUFFMAN: u16 = 0x0003;
    pub const PATTERN_V1: u16 = 0x0004;
    pub const LZ4: u16 = 0x0005;
}

/// One SMB2_COMPRESSION_CHAINED_PAYLOAD_HEADER (§2.2.42.2.1) and where its data lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainedPayload {
    pub compression_algorithm: u16,
    pub flags: u16,
    /// Bytes after this 8-byte header, including OriginalPayloadSize when present.
    pub length: u32,
    /// Present for the LZ-family algorithms only.
    pub original_payload_size: Option<u32>,
    /// Message-relative offset and length of the (compressed or raw) data.
    pub data_offset: usize,
    pub data_length: usize,
}

/// COMPRESSION_TRANSFORM_HEADER (§2.2.42).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompressionTransform {
    /// §2.2.42.1: 16 bytes; `offset` bytes after the header are uncompressed, the rest is
    /// compressed with `compression_algorithm`.
    Unchained { original_compressed_segment_size: u32, compression_algorithm: u16, offset: u32 },
    /// §2.2.42.2: a sequence of payloads, each with its own algorithm.
    Chained { original_compressed_segment_size: u32, payloads: Vec<ChainedPayload> },
}

impl CompressionTransform {
    pub const UNCHAINED_LEN: usize = 16;
    /// SMB2_COMPRESSION_FLAG_CHAINED.
    pub const FLAG_CHAINED: u16 = 0x0001;
    /// At most this many chained payload headers are decoded.
    pub const MAX_PAYLOADS: usize = 64;

    /// Parses the header(s) found in `b` (the message, possibly a capped prefix). For a
    /// chained message, payload headers beyond `b` are not listed.
    pub fn parse(b: &[u8]) -> Result<CompressionTransform> {
        if b.len() < 12 {
            return Err(Error::Truncated);
        }
        if b[0..4] != protocol_id::COMPRESSION_TRANSFORM {
            return Err(Error::BadProtocolId);
        }
        let original_compressed_segment_size = u32_at(b, 4)?;
        let flags = u16_at(b, 10)?;
        if flags & Self::FLAG_CHAINED == 0 {
            return Ok(CompressionTransform::Unchained {
                original_compressed_segment_size,
                compression_algorithm: u16_at(b, 8)?,
                offset: u32_at(b, 12)?,
            });
        }
        let mut payloads = Vec::new();
        let mut at = 8usize;
        while at + 8 <= b.len() && payloads.len() < Self::MAX_PAYLOADS {
            let alg = u16_at(b, at)?;
            let pflags = u16_at(b, at + 2)?;
            let length = u32_at(b, at + 4)?;
            let has_size = matches!(
                alg,
                compression_algorithm::LZNT1 | compression_algorithm::LZ77 | compression_algorithm::LZ77_HUFFMAN | compression_algorithm::LZ4
            );
            let (original_payload_size, skip) = if has_size { (u32_at(b, at + 8).ok(), 4) } else { (None, 0) };
            if (length as usize) < skip {
                return Err(Error::BadOffset);
            }
            payloads.push(ChainedPayload {
                compression_algorithm: alg,
                flags: pflags,
                length,
                original_payload_size,
                data_offset: at + 8 + skip,
                data_length: length as usize - skip,
            });
            at = at.checked_add(8 + length as usize).ok_or(Error::BadOffset)?;
        }
        Ok(CompressionTransform::Chained { original_compressed_segment_size, payloads })
    }

    /// The uncompressed bytes at the start of the original message, if the sender left any
    /// (unchained `offset`, or a leading chained payload with algorithm NONE). Used to see
    /// the SMB2 header of a compressed message without decompressing.
    pub fn uncompressed_prefix<'a>(&self, b: &'a [u8]) -> &'a [u8] {
        match self {
            CompressionTransform::Unchained { offset, .. } => {
                let end = Self::UNCHAINED_LEN.saturating_add(*offset as usize).min(b.len());
                b.get(Self::UNCHAINED_LEN..end).unwrap_or(&[])
            }
            CompressionTransform::Chained { payloads, .. } => match payloads.first() {
                Some(p) if p.compression_algorithm == compression_algorithm::NONE => {
                    let end = p.data_offset.saturating_add(p.data_length).min(b.len());
                    b.get(p.data_offset..end).unwrap_or(&[])
                }
                _ => &[],
            },
        }
    }

    /// Algorithms used, in order (one for unchained).
    pub fn algorithms(&self) -> Vec<u16> {
        match self {
            CompressionTransform::Unchained { compression_algorithm, .. } => vec![*compression_algorithm],
            CompressionTransform::Chained { payloads, .. } => payloads.iter().map(|p| p.compression_algorithm).collect(),
        }
    }
}

impl CompressionTransform {
    /// Appends an unchained header (§2.2.42.1): `offset` bytes after it stay uncompressed,
    /// the rest is `compression_algorithm`'s output for `original_compressed_segment_size`
    /// bytes. The caller appends the uncompressed prefix and the compressed data.
    pub fn emit_unchained(original_compressed_segment_size: u32, compression_algorithm: u16, offset: u32, out: &mut Vec<u8>) {
        out.extend_from_slice(&protocol_id::COMPRESSION_TRANSFORM);
        out.extend_from_slice(&original_compressed_segment_size.to_le_bytes());
        out.extend_from_slice(&compression_algorithm.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes()); // Flags: SMB2_COMPRESSION_FLAG_NONE
        out.extend_from_slice(&offset.to_le_bytes());
    }

    /// Appends the start of a chained message (§2.2.42.2): ProtocolId and
    /// OriginalCompressedSegmentSize (the whole original message); the payloads follow, each
    /// through `ChainedPayload::emit_header` and its data.
    pub fn emit_chained_start(original_compressed_segment_size: u32, out: &mut Vec<u8>) {
        out.extend_from_slice(&protocol_id::COMPRESSION_TRANSFORM);
        out.extend_from_slice(&original_compressed_segment_size.to_le_bytes());
    }
}

impl ChainedPayload {
    /// Appends an SMB2_COMPRESSION_CHAINED_PAYLOAD_HEADER (§2.2.42.2.1) for `data_length`
    /// bytes of data; `original_payload_size` is written (and counted in Length) for the
    /// LZ-family algorithms. `flags` is `CompressionTransform::FLAG_CHAINED` on every payload
    /// but the last (as Windows sends it; the first one's flag marks the message chained).
    pub fn emit_header(compression_algorithm: u16, flags: u16, data_length: usize, original_payload_size: Option<u32>, out: &mut Vec<u8>) {
        let length = data_length + if original_payload_size.is_some() { 4 } else { 0 };
        out.extend_from_slice(&compression_algorithm.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&(length as u32).to_le_bytes());
        if let Some(size) = original_payload_size {
            out.extend_from_slice(&size.to_le_bytes());
        }
    }
}

/// SMB2_COMPRESSION_PATTERN_PAYLOAD_V1 (§2.2.42.2.2): `repetitions` copies of one byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatternV1 {
    pub pattern: u8,
    pub repetitions: u32,
}

impl PatternV1 {
    pub const LEN: usize = 8;

    pub fn parse(b: &[u8]) -> Result<PatternV1> {
        if b.len() < Self::LEN {
            return Err(Error::Truncated);
        }
        Ok(PatternV1 { pattern: b[0], repetitions: u32_at(b, 4)? })
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push(self.pattern);
        out.push(0); // Reserved1
        out.extend_from_slice(&0u16.to_le_bytes()); // Reserved2
        out.extend_from_slice(&self.repetitions.to_le_bytes());
    }

    /// Appends the bytes it stands for, at most `max_out` of them; `false` if that cut it.
    pub fn expand(&self, out: &mut Vec<u8>, max_out: usize) -> bool {
        let n = (self.repetitions as usize).min(max_out);
        out.resize(out.len() + n, self.pattern);
        n == self.repetitions as usize
    }
}

/// The SMB1 header's Command byte (MS-CIFS §2.2.3.1); 0x72 = SMB_COM_NEGOTIATE.
pub fn smb1_command(b: &[u8]) -> Result<u8> {
    if b.len() < 5 {
        return Err(Error::Truncated);
    }
    if b[0..4] != protocol_id::SMB1 {
        return Err(Error::BadProtocolId);
    }
    Ok(b[4])
}

pub const SMB1_COM_NEGOTIATE: u8 = 0x72;

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// smb311-compress-chained-patternv1-lznt1.pcapng frame 1, SMB message (after NetBIOS).
    const CHAINED_WRITE: &str = "fc534d4270010000010001005800000070000000 51b000fe534d4240000100b501000900700800380100040018110100fffe000054000005000800140238000064 00c2890690655e1f74001f9d2a29145bc2310c00700340040018 0c01001e0e000e0124010e0d00 040000000800 0000aa00000000010000";

    #[test]
    fn chained_payload_headers_from_capture() {
        let b = hex(CHAINED_WRITE);
        assert_eq!(b.len(), 0x78);
        let t = CompressionTransform::parse(&b).unwrap();
        match &t {
            CompressionTransform::Chained { original_compressed_segment_size, payloads } => {
                assert_eq!(*original_compressed_segment_size, 368);
                assert_eq!(payloads.len(), 2);
                assert_eq!(payloads[0].compression_algorithm, compression_algorithm::LZNT1);
                assert_eq!(payloads[0].length, 0x58);
                assert_eq!(payloads[0].original_payload_size, Some(0x70));
                assert_eq!(payloads[0].data_offset, 20);
                assert_eq!(payloads[1].compression_algorithm, compression_algorithm::PATTERN_V1);
                assert_eq!(payloads[1].length, 8);
                assert_eq!(payloads[1].data_offset + payloads[1].data_length, b.len());
            }
            _ => panic!("expected chained"),
        }
        assert!(t.uncompressed_prefix(&b).is_empty());
        assert_eq!(t.algorithms(), vec![1, 4]);
    }

    #[test]
    fn chained_none_prefix_exposes_header() {
        // Frame 2 of the same capture: the first chained payload is NONE (a raw SMB2 header).
        let b = hex("fc534d42500100000000010050000000fe534d42400001000000000008000100090000000000000005000000000000 00fffe000001000000050800140238000 0b5575ff57475a895b411ae016378801a1100500200010000000000000000000004000000080000 00aa00000000010000");
        let t = CompressionTransform::parse(&b).unwrap();
        let p = t.uncompressed_prefix(&b);
        assert_eq!(p.len(), 0x50);
        assert_eq!(&p[0..4], &protocol_id::SMB2);
    }

    /// The emitters rebuild frame 1's chained headers byte for byte (the LZNT1 data and
    /// Pattern_V1 payload copied from the capture).
    #[test]
    fn chained_emit_matches_capture() {
        let b = hex(CHAINED_WRITE);
        let mut v = Vec::new();
        CompressionTransform::emit_chained_start(368, &mut v);
        ChainedPayload::emit_header(compression_algorithm::LZNT1, CompressionTransform::FLAG_CHAINED, 0x54, Some(0x70), &mut v);
        v.extend_from_slice(&b[20..20 + 0x54]);
        ChainedPayload::emit_header(compression_algorithm::PATTERN_V1, 0, PatternV1::LEN, None, &mut v);
        PatternV1 { pattern: 0xaa, repetitions: 256 }.emit(&mut v);
        assert_eq!(v, b);
        let p = PatternV1::parse(&b[b.len() - 8..]).unwrap();
        assert_eq!(p, PatternV1 { pattern: 0xaa, repetitions: 256 });
        let mut out = Vec::new();
        assert!(!p.expand(&mut out, 100));
        assert_eq!(out, vec![0xaa; 100]);
        assert_eq!(PatternV1::parse(&b[..7]), Err(Error::Truncated));
    }

    #[test]
    fn unchained_emit_parses_back() {
        let mut v = Vec::new();
        CompressionTransform::emit_unchained(4096, compression_algorithm::LZ77, 0x70, &mut v);
        assert_eq!(v.len(), CompressionTransform::UNCHAINED_LEN);
        v.extend_from_slice(&[0xfe, b'S', b'M', b'B']);
        let t = CompressionTransform::parse(&v).unwrap();
        assert_eq!(t, CompressionTransform::Unchained { original_compressed_segment_size: 4096, compression_algorithm: 2, offset: 0x70 });
        assert_eq!(t.uncompressed_prefix(&v), &[0xfe, b'S', b'M', b'B']);
    }

    #[test]
    fn refuses_truncated_and_wrong_id() {
        assert_eq!(CompressionTransform::parse(&[0xfc, b'S', b'M']), Err(Error::Truncated));
        assert_eq!(TransformHeader::parse(&[0u8; 52]), Err(Error::BadProtocolId));
        assert_eq!(smb1_command(&[0xff, b'S', b'M', b'B', 0x72]), Ok(SMB1_COM_NEGOTIATE));
    }
}
