//! DDP (RFC 5041) and RDMAP (RFC 5040) headers inside an MPA ULPDU.
//!
//! Byte 0 is DDP control (T tagged, L last, DV version 1); byte 1 is RDMAP control (RV version
//! 1, opcode). Tagged: STag 4, TO 8 (14 bytes). Untagged: RDMAP reserved/Invalidate STag 4,
//! QN 4, MSN 4, MO 4 (18 bytes). RDMA Read Request bodies (QN 1) hold Sink STag 4, Sink TO 8,
//! RDMARDSZ 4, Source STag 4, Source TO 8 (RFC 5040 §4.4).

pub const TAGGED_HEADER_LEN: usize = 14;
pub const UNTAGGED_HEADER_LEN: usize = 18;
pub const READ_REQUEST_LEN: usize = 28;

/// DDP queue numbers RDMAP uses for untagged messages (RFC 5040 §5.1).
pub mod queue {
    /// Send, Send with Invalidate, with Solicited Event, with both.
    pub const SEND: u32 = 0;
    pub const READ_REQUEST: u32 = 1;
    pub const TERMINATE: u32 = 2;
}

/// RDMAP opcodes (RFC 5040 §4.3).
pub mod opcode {
    pub const WRITE: u8 = 0;
    pub const READ_REQUEST: u8 = 1;
    pub const READ_RESPONSE: u8 = 2;
    pub const SEND: u8 = 3;
    pub const SEND_WITH_INVALIDATE: u8 = 4;
    pub const SEND_WITH_SE: u8 = 5;
    pub const SEND_WITH_SE_AND_INVALIDATE: u8 = 6;
    pub const TERMINATE: u8 = 7;

    pub fn is_send(op: u8) -> bool {
        (SEND..=SEND_WITH_SE_AND_INVALIDATE).contains(&op)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated,
    /// DDP or RDMAP version is not 1.
    BadVersion,
    /// Tagged flag does not match the opcode (Write/Read Response are tagged, others untagged).
    BadModel,
}

impl Error {
    pub fn name(self) -> &'static str {
        match self {
            Error::Truncated => "iwarp.ddp_truncated",
            Error::BadVersion => "iwarp.ddp_bad_version",
            Error::BadModel => "iwarp.ddp_bad_buffer_model",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buffer {
    Tagged { stag: u32, to: u64 },
    Untagged { qn: u32, msn: u32, mo: u32, inval_stag: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment<'a> {
    pub opcode: u8,
    pub last: bool,
    pub buffer: Buffer,
    pub header_len: usize,
    pub payload: &'a [u8],
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}

impl<'a> Segment<'a> {
    pub fn parse(u: &'a [u8]) -> Result<Segment<'a>, Error> {
        if u.len() < 2 {
            return Err(Error::Truncated);
        }
        let tagged = u[0] & 0x80 != 0;
        let last = u[0] & 0x40 != 0;
        if u[0] & 0x03 != 1 || u[1] >> 6 != 1 {
            return Err(Error::BadVersion);
        }
        let opcode = u[1] & 0x0f;
        let want_tagged = matches!(opcode, opcode::WRITE | opcode::READ_RESPONSE);
        if tagged != want_tagged || opcode > opcode::TERMINATE {
            return Err(Error::BadModel);
        }
        let header_len = if tagged { TAGGED_HEADER_LEN } else { UNTAGGED_HEADER_LEN };
        if u.len() < header_len {
            return Err(Error::Truncated);
        }
        let buffer = if tagged {
            Buffer::Tagged { stag: be32(u, 2), to: be64(u, 6) }
        } else {
            Buffer::Untagged { inval_stag: be32(u, 2), qn: be32(u, 6), msn: be32(u, 10), mo: be32(u, 14) }
        };
        Ok(Segment { opcode, last, buffer, header_len, payload: &u[header_len..] })
    }
}

/// RDMA Read Request body (RFC 5040 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    pub sink_stag: u32,
    pub sink_to: u64,
    pub size: u32,
    pub src_stag: u32,
    pub src_to: u64,
}

impl ReadRequest {
    pub fn parse(b: &[u8]) -> Result<ReadRequest, Error> {
        if b.len() < READ_REQUEST_LEN {
            return Err(Error::Truncated);
        }
        Ok(ReadRequest { sink_stag: be32(b, 0), sink_to: be64(b, 4), size: be32(b, 12), src_stag: be32(b, 16), src_to: be64(b, 20) })
    }
    pub fn emit(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(READ_REQUEST_LEN);
        v.extend_from_slice(&self.sink_stag.to_be_bytes());
        v.extend_from_slice(&self.sink_to.to_be_bytes());
        v.extend_from_slice(&self.size.to_be_bytes());
        v.extend_from_slice(&self.src_stag.to_be_bytes());
        v.extend_from_slice(&self.src_to.to_be_bytes());
        v
    }
}

/// The Terminate Control field that starts an RDMAP Terminate message (RFC 5040 §4.8): the
/// layer that found the error (0 RDMAP, 1 DDP, 2 LLP), its error type and code (the RFC 6580
/// registries), and Hdrct, which says which headers of the offending message follow
/// (0b100 M: DDP segment length and MPA, 0b010 D: DDP header, 0b001 R: RDMAP header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminateControl {
    pub layer: u8,
    pub etype: u8,
    pub error_code: u8,
    pub hdrct: u8,
}

impl TerminateControl {
    pub const LEN: usize = 4;
    pub fn parse(b: &[u8]) -> Result<TerminateControl, Error> {
        let b = b.get(..Self::LEN).ok_or(Error::Truncated)?;
        Ok(TerminateControl { layer: b[0] >> 4, etype: b[0] & 0x0f, error_code: b[1], hdrct: b[2] >> 5 })
    }
    /// The 4 bytes, reserved bits zero.
    pub fn emit(&self) -> [u8; Self::LEN] {
        [(self.layer & 0x0f) << 4 | (self.etype & 0x0f), self.error_code, (self.hdrct & 0x07) << 5, 0]
    }
}

/// Builds a ULPDU (tests, synthesizer).
pub fn emit(opcode: u8, last: bool, buffer: Buffer, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(UNTAGGED_HEADER_LEN + payload.len());
    emit_header(&mut v, opcode, last, buffer);
    v.extend_from_slice(payload);
    v
}

/// Appends the DDP and RDMAP headers of one segment (DDP version 1, RDMAP version 1) to `out`;
/// the tagged flag follows `buffer`.
pub fn emit_header(out: &mut Vec<u8>, opcode: u8, last: bool, buffer: Buffer) {
    let tagged = matches!(buffer, Buffer::Tagged { .. });
    out.extend_from_slice(&[u8::from(tagged) << 7 | u8::from(last) << 6 | 1, 0x40 | (opcode & 0x0f)]);
    match buffer {
        Buffer::Tagged { stag, to } => {
            out.extend_from_slice(&stag.to_be_bytes());
            out.extend_from_slice(&to.to_be_bytes());
        }
        Buffer::Untagged { qn, msn, mo, inval_stag } => {
            for x in [inval_stag, qn, msn, mo] {
                out.extend_from_slice(&x.to_be_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// smbdirect-iwarp-win2012-smb300.pcap frame 10, first FPDU's ULPDU: a zero-length RDMA
    /// Read Request on queue 1.
    #[test]
    fn read_request_from_capture() {
        let mut u = vec![0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
        u.extend_from_slice(&[0; 28]);
        let s = Segment::parse(&u).unwrap();
        assert_eq!((s.opcode, s.last, s.header_len, s.payload.len()), (opcode::READ_REQUEST, true, 18, 28));
        assert_eq!(s.buffer, Buffer::Untagged { qn: 1, msn: 1, mo: 0, inval_stag: 0 });
        assert_eq!(ReadRequest::parse(s.payload).unwrap().size, 0);
    }

    #[test]
    fn round_trip_and_refusals() {
        let w = emit(opcode::WRITE, true, Buffer::Tagged { stag: 0x1234, to: 0xffee_0000_0000_0010 }, b"data");
        let s = Segment::parse(&w).unwrap();
        assert_eq!(s.buffer, Buffer::Tagged { stag: 0x1234, to: 0xffee_0000_0000_0010 });
        assert_eq!(s.payload, b"data");
        let mut bad = w.clone();
        bad[0] &= !0x80;
        assert_eq!(Segment::parse(&bad), Err(Error::BadModel));
        bad = w.clone();
        bad[1] = 0x80;
        assert_eq!(Segment::parse(&bad), Err(Error::BadVersion));
        assert_eq!(Segment::parse(&w[..10]), Err(Error::Truncated));
        // DDP layer, Tagged Buffer Error, Invalid STag (RFC 6580: 0x1/0x1/0x00), D and R set.
        let t = TerminateControl { layer: 1, etype: 1, error_code: 0, hdrct: 0b011 };
        assert_eq!(t.emit(), [0x11, 0x00, 0x60, 0x00]);
        assert_eq!(TerminateControl::parse(&t.emit()), Ok(t));
        assert_eq!(TerminateControl::parse(&[0x11, 0]), Err(Error::Truncated));
        let r = ReadRequest { sink_stag: 1, sink_to: 2, size: 3, src_stag: 4, src_to: 5 };
        assert_eq!(ReadRequest::parse(&r.emit()), Ok(r));
    }

    proptest! {
        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(s) = Segment::parse(&data) {
                prop_assert_eq!(s.header_len + s.payload.len(), data.len());
            }
            let _ = ReadRequest::parse(&data);
        }
    }
}
