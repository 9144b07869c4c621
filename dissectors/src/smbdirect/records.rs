//! MS-SMBD §2.2 messages: bytes in, structs out, no state. All fields little-endian.

/// SMB Direct protocol version 1.0 (MS-SMBD §2.2.1).
pub const VERSION_1_0: u16 = 0x0100;
/// SMB_DIRECT_RESPONSE_REQUESTED (MS-SMBD §2.2.3).
pub const FLAG_RESPONSE_REQUESTED: u16 = 0x0001;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|s| u16::from_le_bytes([s[0], s[1]]))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// SMB Direct Negotiate Request (§2.2.1), 20 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NegotiateRequest {
    pub min_version: u16,
    pub max_version: u16,
    pub credits_requested: u16,
    pub preferred_send_size: u32,
    pub max_receive_size: u32,
    pub max_fragmented_size: u32,
}

impl NegotiateRequest {
    pub const LEN: usize = 20;
    /// Accepts only a 20-byte message whose version range includes 1.0 and Reserved is 0.
    pub fn parse(b: &[u8]) -> Option<NegotiateRequest> {
        if b.len() != Self::LEN {
            return None;
        }
        let r = NegotiateRequest {
            min_version: u16_at(b, 0)?,
            max_version: u16_at(b, 2)?,
            credits_requested: u16_at(b, 6)?,
            preferred_send_size: u32_at(b, 8)?,
            max_receive_size: u32_at(b, 12)?,
            max_fragmented_size: u32_at(b, 16)?,
        };
        (r.min_version <= VERSION_1_0 && r.max_version >= VERSION_1_0 && u16_at(b, 4)? == 0).then_some(r)
    }
    pub fn emit(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        v.extend_from_slice(&self.min_version.to_le_bytes());
        v.extend_from_slice(&self.max_version.to_le_bytes());
        v.extend_from_slice(&0u16.to_le_bytes());
        v.extend_from_slice(&self.credits_requested.to_le_bytes());
        v.extend_from_slice(&self.preferred_send_size.to_le_bytes());
        v.extend_from_slice(&self.max_receive_size.to_le_bytes());
        v.extend_from_slice(&self.max_fragmented_size.to_le_bytes());
        v
    }
}

/// SMB Direct Negotiate Response (§2.2.2), 32 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NegotiateResponse {
    pub min_version: u16,
    pub max_version: u16,
    pub negotiated_version: u16,
    pub credits_requested: u16,
    pub credits_granted: u16,
    pub status: u32,
    pub max_read_write_size: u32,
    pub preferred_send_size: u32,
    pub max_receive_size: u32,
    pub max_fragmented_size: u32,
}

impl NegotiateResponse {
    pub const LEN: usize = 32;
    pub fn parse(b: &[u8]) -> Option<NegotiateResponse> {
        if b.len() != Self::LEN {
            return None;
        }
        let r = NegotiateResponse {
            min_version: u16_at(b, 0)?,
            max_version: u16_at(b, 2)?,
            negotiated_version: u16_at(b, 4)?,
            credits_requested: u16_at(b, 8)?,
            credits_granted: u16_at(b, 10)?,
            status: u32_at(b, 12)?,
            max_read_write_size: u32_at(b, 16)?,
            preferred_send_size: u32_at(b, 20)?,
            max_receive_size: u32_at(b, 24)?,
            max_fragmented_size: u32_at(b, 28)?,
        };
        (r.min_version <= VERSION_1_0 && r.max_version >= VERSION_1_0 && u16_at(b, 6)? == 0).then_some(r)
    }
    pub fn emit(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        for x in [self.min_version, self.max_version, self.negotiated_version, 0, self.credits_requested, self.credits_granted] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        for x in [self.status, self.max_read_write_size, self.preferred_send_size, self.max_receive_size, self.max_fragmented_size] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v
    }
}

/// Why a data transfer message was refused (anomaly names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Shorter than the 20-byte header (§3.1.5.8).
    Truncated,
    /// DataOffset + DataLength beyond the message, or DataOffset inside the header.
    BadDataOffset,
}

impl Error {
    pub fn name(self) -> &'static str {
        match self {
            Error::Truncated => "smbdirect.truncated",
            Error::BadDataOffset => "smbdirect.bad_data_offset",
        }
    }
}

/// SMB Direct Data Transfer Message (§2.2.3) header; the data is `msg[data_offset..][..data_length]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataTransfer {
    pub credits_requested: u16,
    pub credits_granted: u16,
    pub flags: u16,
    pub remaining_data_length: u32,
    pub data_offset: u32,
    pub data_length: u32,
}

impl DataTransfer {
    pub const HEADER_LEN: usize = 20;
    /// DataOffset used by every implementation seen (§2.2.3: 8-byte aligned, after the header).
    pub const DATA_OFFSET: u32 = 24;

    pub fn parse(b: &[u8]) -> Result<DataTransfer, Error> {
        let f = |at| u16_at(b, at).ok_or(Error::Truncated);
        let g = |at| u32_at(b, at).ok_or(Error::Truncated);
        if b.len() < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        let d = DataTransfer {
            credits_requested: f(0)?,
            credits_granted: f(2)?,
            flags: f(4)?,
            remaining_data_length: g(8)?,
            data_offset: g(12)?,
            data_length: g(16)?,
        };
        if d.data_length > 0 {
            let end = u64::from(d.data_offset) + u64::from(d.data_length);
            if (d.data_offset as usize) < Self::HEADER_LEN || end > b.len() as u64 {
                return Err(Error::BadDataOffset);
            }
        }
        Ok(d)
    }

    /// Bytes of the message that are data.
    pub fn data<'a>(&self, msg: &'a [u8]) -> &'a [u8] {
        if self.data_length == 0 {
            return &[];
        }
        msg.get(self.data_offset as usize..self.data_offset as usize + self.data_length as usize).unwrap_or(&[])
    }

    /// A whole message with `data` at offset 24 (DataOffset and DataLength from `data`; both 0
    /// for a message without data).
    pub fn emit(&self, data: &[u8]) -> Vec<u8> {
        let off = if data.is_empty() { 0 } else { Self::DATA_OFFSET };
        let d = DataTransfer { data_offset: off, data_length: data.len() as u32, ..*self };
        let mut v = Vec::with_capacity(Self::DATA_OFFSET as usize + data.len());
        if data.is_empty() {
            v.extend_from_slice(&d.emit_head()[..Self::HEADER_LEN]);
        } else {
            v.extend_from_slice(&d.emit_head());
            v.extend_from_slice(data);
        }
        v
    }

    /// The 24 bytes before the data of a message whose DataOffset is 24: the header with the
    /// fields as they are, then 4 bytes of padding. The data, `data_length` bytes, follows.
    pub fn emit_head(&self) -> [u8; Self::DATA_OFFSET as usize] {
        let mut v = [0u8; Self::DATA_OFFSET as usize];
        for (i, x) in [self.credits_requested, self.credits_granted, self.flags, 0].into_iter().enumerate() {
            v[2 * i..2 * i + 2].copy_from_slice(&x.to_le_bytes());
        }
        for (i, x) in [self.remaining_data_length, self.data_offset, self.data_length].into_iter().enumerate() {
            v[8 + 4 * i..12 + 4 * i].copy_from_slice(&x.to_le_bytes());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Frame 10 of smbdirect-iwarp-win2012-smb300.pcap: the RDMAP Send payload (Negotiate Request).
    const NEG_REQ: [u8; 20] = [0, 1, 0, 1, 0, 0, 0xff, 0, 0x54, 0x05, 0, 0, 0x00, 0x20, 0, 0, 0, 0, 0x10, 0];

    #[test]
    fn negotiate_request_from_capture() {
        let r = NegotiateRequest::parse(&NEG_REQ).unwrap();
        assert_eq!((r.min_version, r.max_version, r.credits_requested), (0x100, 0x100, 255));
        assert_eq!(r.max_fragmented_size, 1_048_576);
        assert_eq!(r.emit(), NEG_REQ.to_vec());
        assert!(NegotiateRequest::parse(&NEG_REQ[..19]).is_none());
    }

    #[test]
    fn negotiate_response_round_trip() {
        let r = NegotiateResponse {
            min_version: 0x100,
            max_version: 0x100,
            negotiated_version: 0x100,
            credits_requested: 255,
            credits_granted: 63,
            status: 0,
            max_read_write_size: 1 << 20,
            preferred_send_size: 1364,
            max_receive_size: 8192,
            max_fragmented_size: 1 << 20,
        };
        assert_eq!(NegotiateResponse::parse(&r.emit()), Some(r));
    }

    #[test]
    fn data_transfer() {
        let d = DataTransfer { credits_requested: 255, credits_granted: 65, flags: 0, remaining_data_length: 98, data_offset: 24, data_length: 3 };
        let m = d.emit(b"abc");
        assert_eq!(DataTransfer::parse(&m), Ok(d));
        assert_eq!(d.data(&m), b"abc");
        assert_eq!(DataTransfer::parse(&m[..25]), Err(Error::BadDataOffset));
        assert_eq!(DataTransfer::parse(&m[..19]), Err(Error::Truncated));
        let credit_only = DataTransfer { data_offset: 0, data_length: 0, remaining_data_length: 0, ..d };
        assert_eq!(DataTransfer::parse(&credit_only.emit(&[])), Ok(credit_only));
        assert_eq!(credit_only.emit(&[]).len(), DataTransfer::HEADER_LEN);
        let mut head = d.emit_head().to_vec();
        assert_eq!(head, m[..24]);
        head.extend_from_slice(b"abc");
        assert_eq!(DataTransfer::parse(&head), Ok(d));
    }

    proptest! {
        #[test]
        fn parsers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = NegotiateRequest::parse(&data);
            let _ = NegotiateResponse::parse(&data);
            if let Ok(d) = DataTransfer::parse(&data) {
                prop_assert!(d.data(&data).len() == d.data_length as usize);
            }
        }
    }
}
