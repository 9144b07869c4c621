//! SMB2/3 record parsers (MS-SMB2 §2.2): bytes in, structs out, no state.
//!
//! Every parser takes the message starting at its 64-byte SMB2 header (`msg`), because the
//! spec's offsets (DataOffset, NameOffset, PathOffset, ...) are relative to the header.
//! `msg` may be shorter than the message on the wire (the streaming parser buffers at most
//! a capped prefix): a field outside `msg` is an error, never a panic.
//! Transform and compression headers (§2.2.41, §2.2.42) live in `transform`.

use std::fmt;

pub use super::transform::*;

/// Why a record was refused. `name()` is the anomaly name raised by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The buffer ends before a fixed field or a referenced buffer.
    Truncated,
    /// StructureSize is not the value the spec requires.
    BadStructureSize,
    /// A ProtocolId other than the one expected.
    BadProtocolId,
    /// An offset/length pair that points outside the message or inside the fixed part.
    BadOffset,
}

impl Error {
    pub fn name(self) -> &'static str {
        match self {
            Error::Truncated => "smb2.record_truncated",
            Error::BadStructureSize => "smb2.bad_structure_size",
            Error::BadProtocolId => "smb2.bad_protocol_id",
            Error::BadOffset => "smb2.bad_offset",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn u16_at(b: &[u8], at: usize) -> Result<u16> {
    b.get(at..at + 2).map(|s| u16::from_le_bytes([s[0], s[1]])).ok_or(Error::Truncated)
}
pub(crate) fn u32_at(b: &[u8], at: usize) -> Result<u32> {
    b.get(at..at + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]])).ok_or(Error::Truncated)
}
pub(crate) fn u64_at(b: &[u8], at: usize) -> Result<u64> {
    b.get(at..at + 8)
        .map(|s| {
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            u64::from_le_bytes(a)
        })
        .ok_or(Error::Truncated)
}
fn bytes16_at(b: &[u8], at: usize) -> Result<[u8; 16]> {
    let mut a = [0u8; 16];
    a.copy_from_slice(b.get(at..at + 16).ok_or(Error::Truncated)?);
    Ok(a)
}
/// `len` bytes at header-relative `off`, refusing ranges outside `msg`.
fn range(msg: &[u8], off: usize, len: usize) -> Result<&[u8]> {
    let end = off.checked_add(len).ok_or(Error::BadOffset)?;
    msg.get(off..end).ok_or(Error::Truncated)
}
/// UTF-16LE to String (lossy: a hostile name must not stop parsing).
pub fn utf16le(b: &[u8]) -> String {
    let units: Vec<u16> = b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    String::from_utf16_lossy(&units)
}

/// ProtocolId values (first four bytes of a message).
pub mod protocol_id {
    pub const SMB2: [u8; 4] = [0xFE, b'S', b'M', b'B'];
    pub const TRANSFORM: [u8; 4] = [0xFD, b'S', b'M', b'B'];
    pub const COMPRESSION_TRANSFORM: [u8; 4] = [0xFC, b'S', b'M', b'B'];
    pub const SMB1: [u8; 4] = [0xFF, b'S', b'M', b'B'];
}

/// SMB2 commands (§2.2.1.2).
pub mod command {
    pub const NEGOTIATE: u16 = 0x00;
    pub const SESSION_SETUP: u16 = 0x01;
    pub const LOGOFF: u16 = 0x02;
    pub const TREE_CONNECT: u16 = 0x03;
    pub const TREE_DISCONNECT: u16 = 0x04;
    pub const CREATE: u16 = 0x05;
    pub const CLOSE: u16 = 0x06;
    pub const FLUSH: u16 = 0x07;
    pub const READ: u16 = 0x08;
    pub const WRITE: u16 = 0x09;
    pub const LOCK: u16 = 0x0A;
    pub const IOCTL: u16 = 0x0B;
    pub const CANCEL: u16 = 0x0C;
    pub const ECHO: u16 = 0x0D;
    pub const QUERY_DIRECTORY: u16 = 0x0E;
    pub const CHANGE_NOTIFY: u16 = 0x0F;
    pub const QUERY_INFO: u16 = 0x10;
    pub const SET_INFO: u16 = 0x11;
    pub const OPLOCK_BREAK: u16 = 0x12;

    const NAMES: [&str; 19] = [
        "NEGOTIATE", "SESSION_SETUP", "LOGOFF", "TREE_CONNECT", "TREE_DISCONNECT", "CREATE",
        "CLOSE", "FLUSH", "READ", "WRITE", "LOCK", "IOCTL", "CANCEL", "ECHO", "QUERY_DIRECTORY",
        "CHANGE_NOTIFY", "QUERY_INFO", "SET_INFO", "OPLOCK_BREAK",
    ];
    const REQUEST: [&str; 19] = [
        "NEGOTIATE.request", "SESSION_SETUP.request", "LOGOFF.request", "TREE_CONNECT.request",
        "TREE_DISCONNECT.request", "CREATE.request", "CLOSE.request", "FLUSH.request",
        "READ.request", "WRITE.request", "LOCK.request", "IOCTL.request", "CANCEL.request",
        "ECHO.request", "QUERY_DIRECTORY.request", "CHANGE_NOTIFY.request", "QUERY_INFO.request",
        "SET_INFO.request", "OPLOCK_BREAK.request",
    ];
    const RESPONSE: [&str; 19] = [
        "NEGOTIATE.response", "SESSION_SETUP.response", "LOGOFF.response", "TREE_CONNECT.response",
        "TREE_DISCONNECT.response", "CREATE.response", "CLOSE.response", "FLUSH.response",
        "READ.response", "WRITE.response", "LOCK.response", "IOCTL.response", "CANCEL.response",
        "ECHO.response", "QUERY_DIRECTORY.response", "CHANGE_NOTIFY.response",
        "QUERY_INFO.response", "SET_INFO.response", "OPLOCK_BREAK.response",
    ];

    /// The spec's name of a command, `None` outside 0x00–0x12.
    pub fn name(cmd: u16) -> Option<&'static str> {
        NAMES.get(cmd as usize).copied()
    }
    /// `"WRITE.request"` / `"WRITE.response"`, the key used in the `commands` counters.
    /// The counter name equal to `name` (a result read back: `--dask` parts), if it is one.
    pub fn counter_name_of(name: &str) -> Option<&'static str> {
        REQUEST.iter().chain(RESPONSE.iter()).chain(["UNKNOWN.request", "UNKNOWN.response"].iter()).copied().find(|n| *n == name)
    }

    pub fn counter_name(cmd: u16, response: bool) -> &'static str {
        let t = if response { &RESPONSE } else { &REQUEST };
        t.get(cmd as usize).copied().unwrap_or(if response { "UNKNOWN.response" } else { "UNKNOWN.request" })
    }
}

/// Header Flags (§2.2.1.2).
pub mod flags {
    pub const SERVER_TO_REDIR: u32 = 0x0000_0001;
    pub const ASYNC_COMMAND: u32 = 0x0000_0002;
    pub const RELATED_OPERATIONS: u32 = 0x0000_0004;
    pub const SIGNED: u32 = 0x0000_0008;
}

/// NTSTATUS values the parser acts on (MS-ERREF §2.3).
pub mod status {
    pub const SUCCESS: u32 = 0x0000_0000;
    pub const PENDING: u32 = 0x0000_0103;
    pub const BUFFER_OVERFLOW: u32 = 0x8000_0005;
    pub const MORE_PROCESSING_REQUIRED: u32 = 0xC000_0016;
}

/// Channel values in READ/WRITE requests (§2.2.19, §2.2.21).
pub mod channel {
    pub const NONE: u32 = 0;
    pub const RDMA_V1: u32 = 1;
    pub const RDMA_V1_INVALIDATE: u32 = 2;
    pub const RDMA_TRANSFORM: u32 = 3;
}

/// Zero-copy view of the 64-byte SMB2 header (§2.2.1.1 async, §2.2.1.2 sync).
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

mod field {
    use std::ops::Range;
    pub const PROTOCOL_ID: Range<usize> = 0..4;
    pub const STRUCTURE_SIZE: usize = 4;
    pub const CREDIT_CHARGE: usize = 6;
    /// Status in responses; ChannelSequence/Reserved in 3.x requests.
    pub const STATUS: usize = 8;
    pub const COMMAND: usize = 12;
    pub const CREDIT: usize = 14;
    pub const FLAGS: usize = 16;
    pub const NEXT_COMMAND: usize = 20;
    pub const MESSAGE_ID: usize = 24;
    /// Async header: AsyncId (8 bytes). Sync header: Reserved (4) then TreeId (4).
    pub const ASYNC_ID: usize = 32;
    pub const TREE_ID: usize = 36;
    pub const SESSION_ID: usize = 40;
    pub const SIGNATURE: Range<usize> = 48..64;
}

pub const HEADER_LEN: usize = 64;

impl<T: AsRef<[u8]>> Header<T> {
    /// Refuses a buffer shorter than 64 bytes, a wrong ProtocolId or StructureSize.
    pub fn new_checked(buffer: T) -> Result<Header<T>> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::PROTOCOL_ID] != protocol_id::SMB2 {
            return Err(Error::BadProtocolId);
        }
        let h = Header { buffer };
        if h.structure_size() != 64 {
            return Err(Error::BadStructureSize);
        }
        Ok(h)
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    fn u16(&self, at: usize) -> u16 {
        u16::from_le_bytes([self.b()[at], self.b()[at + 1]])
    }
    fn u32(&self, at: usize) -> u32 {
        let b = self.b();
        u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    fn u64(&self, at: usize) -> u64 {
        (self.u32(at) as u64) | ((self.u32(at + 4) as u64) << 32)
    }
    pub fn structure_size(&self) -> u16 {
        self.u16(field::STRUCTURE_SIZE)
    }
    pub fn credit_charge(&self) -> u16 {
        self.u16(field::CREDIT_CHARGE)
    }
    pub fn status(&self) -> u32 {
        self.u32(field::STATUS)
    }
    pub fn command(&self) -> u16 {
        self.u16(field::COMMAND)
    }
    pub fn credit(&self) -> u16 {
        self.u16(field::CREDIT)
    }
    pub fn flags(&self) -> u32 {
        self.u32(field::FLAGS)
    }
    pub fn next_command(&self) -> u32 {
        self.u32(field::NEXT_COMMAND)
    }
    pub fn message_id(&self) -> u64 {
        self.u64(field::MESSAGE_ID)
    }
    pub fn is_async(&self) -> bool {
        self.flags() & flags::ASYNC_COMMAND != 0
    }
    pub fn is_response(&self) -> bool {
        self.flags() & flags::SERVER_TO_REDIR != 0
    }
    pub fn is_related(&self) -> bool {
        self.flags() & flags::RELATED_OPERATIONS != 0
    }
    pub fn async_id(&self) -> Option<u64> {
        self.is_async().then(|| self.u64(field::ASYNC_ID))
    }
    /// TreeId exists only in the sync header.
    pub fn tree_id(&self) -> Option<u32> {
        (!self.is_async()).then(|| self.u32(field::TREE_ID))
    }
    pub fn session_id(&self) -> u64 {
        self.u64(field::SESSION_ID)
    }
    pub fn signature(&self) -> &[u8] {
        &self.b()[field::SIGNATURE]
    }
    /// The fixed-part StructureSize of the command body (first 2 bytes after the header),
    /// when present.
    pub fn body_structure_size(&self) -> Option<u16> {
        u16_at(self.b(), HEADER_LEN).ok()
    }
}

/// The meaning of an SMB2 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderRepr {
    pub credit_charge: u16,
    pub status: u32,
    pub command: u16,
    pub credit: u16,
    pub flags: u32,
    pub next_command: u32,
    pub message_id: u64,
    pub async_id: Option<u64>,
    /// Sync header only: Reserved (the client SHOULD set 0xFEFF, §2.2.1.2).
    pub reserved: u32,
    pub tree_id: Option<u32>,
    pub session_id: u64,
}

impl HeaderRepr {
    pub fn parse(msg: &[u8]) -> Result<HeaderRepr> {
        let h = Header::new_checked(msg)?;
        Ok(HeaderRepr {
            credit_charge: h.credit_charge(),
            status: h.status(),
            command: h.command(),
            credit: h.credit(),
            flags: h.flags(),
            next_command: h.next_command(),
            message_id: h.message_id(),
            async_id: h.async_id(),
            reserved: if h.is_async() { 0 } else { h.u32(field::ASYNC_ID) },
            tree_id: h.tree_id(),
            session_id: h.session_id(),
        })
    }
    /// Writes the 64-byte header (signature zero).
    pub fn emit(&self, out: &mut [u8; HEADER_LEN]) {
        out.fill(0);
        out[0..4].copy_from_slice(&protocol_id::SMB2);
        out[4..6].copy_from_slice(&64u16.to_le_bytes());
        out[6..8].copy_from_slice(&self.credit_charge.to_le_bytes());
        out[8..12].copy_from_slice(&self.status.to_le_bytes());
        out[12..14].copy_from_slice(&self.command.to_le_bytes());
        out[14..16].copy_from_slice(&self.credit.to_le_bytes());
        let mut fl = self.flags & !flags::ASYNC_COMMAND;
        if self.async_id.is_some() {
            fl |= flags::ASYNC_COMMAND;
        }
        out[16..20].copy_from_slice(&fl.to_le_bytes());
        out[20..24].copy_from_slice(&self.next_command.to_le_bytes());
        out[24..32].copy_from_slice(&self.message_id.to_le_bytes());
        match self.async_id {
            Some(a) => out[32..40].copy_from_slice(&a.to_le_bytes()),
            None => {
                out[32..36].copy_from_slice(&self.reserved.to_le_bytes());
                out[36..40].copy_from_slice(&self.tree_id.unwrap_or(0).to_le_bytes());
            }
        }
        out[40..48].copy_from_slice(&self.session_id.to_le_bytes());
    }
    pub fn is_response(&self) -> bool {
        self.flags & flags::SERVER_TO_REDIR != 0
    }
    pub fn is_related(&self) -> bool {
        self.flags & flags::RELATED_OPERATIONS != 0
    }
    /// An interim response (§3.3.4.2): async, STATUS_PENDING; the final response follows.
    pub fn is_interim(&self) -> bool {
        self.is_response() && self.status == status::PENDING && self.async_id.is_some()
    }
}

/// Checks the command body's StructureSize (at header offset 64).
fn structure_size(msg: &[u8], want: u16) -> Result<()> {
    if u16_at(msg, HEADER_LEN)? != want {
        return Err(Error::BadStructureSize);
    }
    Ok(())
}

/// Error response (§2.2.2): StructureSize 9. Failed responses and interim responses use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorResponse {
    pub error_context_count: u8,
    pub byte_count: u32,
}

impl ErrorResponse {
    pub fn parse(msg: &[u8]) -> Result<ErrorResponse> {
        structure_size(msg, 9)?;
        Ok(ErrorResponse { error_context_count: *msg.get(HEADER_LEN + 2).ok_or(Error::Truncated)?, byte_count: u32_at(msg, HEADER_LEN + 4)? })
    }
}

/// SecurityMode of NEGOTIATE (§2.2.3, §2.2.4; 16 bits) and SESSION_SETUP (§2.2.5; 8 bits).
pub mod security_mode {
    pub const SIGNING_ENABLED: u16 = 0x0001;
    pub const SIGNING_REQUIRED: u16 = 0x0002;
}

/// SMB2_GLOBAL_CAP_* of NEGOTIATE and SESSION_SETUP (§2.2.3).
pub mod global_cap {
    pub const DFS: u32 = 0x0000_0001;
    pub const LEASING: u32 = 0x0000_0002;
    pub const LARGE_MTU: u32 = 0x0000_0004;
    pub const MULTI_CHANNEL: u32 = 0x0000_0008;
    pub const PERSISTENT_HANDLES: u32 = 0x0000_0010;
    pub const DIRECTORY_LEASING: u32 = 0x0000_0020;
    pub const ENCRYPTION: u32 = 0x0000_0040;
}

/// ShareType of TREE_CONNECT responses (§2.2.10).
pub mod share_type {
    pub const DISK: u8 = 0x01;
    pub const PIPE: u8 = 0x02;
    pub const PRINT: u8 = 0x03;
}

/// NEGOTIATE context types (§2.2.3.1).
pub mod negotiate_context {
    pub const PREAUTH_INTEGRITY_CAPABILITIES: u16 = 0x0001;
    pub const ENCRYPTION_CAPABILITIES: u16 = 0x0002;
    pub const COMPRESSION_CAPABILITIES: u16 = 0x0003;
    pub const NETNAME_NEGOTIATE_CONTEXT_ID: u16 = 0x0005;
    pub const TRANSPORT_CAPABILITIES: u16 = 0x0006;
    pub const RDMA_TRANSFORM_CAPABILITIES: u16 = 0x0007;
    pub const SIGNING_CAPABILITIES: u16 = 0x0008;
}

/// Dialect revisions (§2.2.3).
pub mod dialect {
    pub const SMB202: u16 = 0x0202;
    pub const SMB210: u16 = 0x0210;
    pub const SMB300: u16 = 0x0300;
    pub const SMB302: u16 = 0x0302;
    pub const SMB311: u16 = 0x0311;
}

/// HashAlgorithms of the PREAUTH_INTEGRITY_CAPABILITIES context (§2.2.3.1.1).
pub mod hash_algorithm {
    pub const SHA512: u16 = 0x0001;
}

/// Ciphers of the ENCRYPTION_CAPABILITIES context (§2.2.3.1.2).
pub mod cipher {
    pub const AES128_CCM: u16 = 0x0001;
    pub const AES128_GCM: u16 = 0x0002;
    pub const AES256_CCM: u16 = 0x0003;
    pub const AES256_GCM: u16 = 0x0004;
}

/// What the negotiate contexts of a 3.1.1 NEGOTIATE request or response say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NegotiateContexts {
    pub preauth_hash_algorithms: Vec<u16>,
    /// The PREAUTH_INTEGRITY_CAPABILITIES Salt.
    pub preauth_salt: Vec<u8>,
    pub ciphers: Vec<u16>,
    pub compression_algorithms: Vec<u16>,
    pub compression_flags: u32,
    pub rdma_transform_ids: Vec<u16>,
    pub signing_algorithms: Vec<u16>,
    /// Context types seen, in order (includes types not decoded above).
    pub types: Vec<u16>,
}

/// At most this many contexts/list entries are decoded; the rest is ignored (hostile counts).
const MAX_LIST: usize = 64;

fn u16_list(data: &[u8], at: usize, count: usize) -> Vec<u16> {
    (0..count.min(MAX_LIST)).map_while(|i| u16_at(data, at + 2 * i).ok()).collect()
}

impl NegotiateContexts {
    /// `off` is header-relative; contexts are 8-byte aligned (§2.2.3.1).
    fn parse(msg: &[u8], off: usize, count: usize) -> Result<NegotiateContexts> {
        let mut out = NegotiateContexts::default();
        let mut at = off;
        for _ in 0..count.min(MAX_LIST) {
            at = (at + 7) & !7;
            let ctype = u16_at(msg, at)?;
            let dlen = u16_at(msg, at + 2)? as usize;
            let data = range(msg, at + 8, dlen)?;
            out.types.push(ctype);
            let n = |i| u16_at(data, i).map(|v| v as usize);
            match ctype {
                negotiate_context::PREAUTH_INTEGRITY_CAPABILITIES => {
                    out.preauth_hash_algorithms = u16_list(data, 4, n(0)?);
                    let salt_at = 4 + 2 * n(0)?;
                    out.preauth_salt = data.get(salt_at..salt_at + n(2)?).unwrap_or_default().to_vec();
                }
                negotiate_context::ENCRYPTION_CAPABILITIES => out.ciphers = u16_list(data, 2, n(0)?),
                negotiate_context::COMPRESSION_CAPABILITIES => {
                    out.compression_flags = u32_at(data, 4)?;
                    out.compression_algorithms = u16_list(data, 8, n(0)?);
                }
                negotiate_context::RDMA_TRANSFORM_CAPABILITIES => out.rdma_transform_ids = u16_list(data, 8, n(0)?),
                negotiate_context::SIGNING_CAPABILITIES => out.signing_algorithms = u16_list(data, 2, n(0)?),
                _ => {}
            }
            at += 8 + dlen;
        }
        Ok(out)
    }
}

/// NEGOTIATE request (§2.2.3), StructureSize 36.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NegotiateRequest {
    pub security_mode: u16,
    pub capabilities: u32,
    pub client_guid: [u8; 16],
    pub dialects: Vec<u16>,
    /// Present when the dialect list offers 0x0311.
    pub contexts: Option<NegotiateContexts>,
}

impl NegotiateRequest {
    pub fn parse(msg: &[u8]) -> Result<NegotiateRequest> {
        structure_size(msg, 36)?;
        let b = HEADER_LEN;
        let count = u16_at(msg, b + 2)? as usize;
        let dialects: Vec<u16> = (0..count.min(MAX_LIST)).map(|i| u16_at(msg, b + 36 + 2 * i)).collect::<Result<_>>()?;
        let contexts = if dialects.contains(&0x0311) {
            let off = u32_at(msg, b + 28)? as usize;
            let n = u16_at(msg, b + 32)? as usize;
            Some(NegotiateContexts::parse(msg, off, n)?)
        } else {
            None
        };
        Ok(NegotiateRequest {
            security_mode: u16_at(msg, b + 4)?,
            capabilities: u32_at(msg, b + 8)?,
            client_guid: bytes16_at(msg, b + 12)?,
            dialects,
            contexts,
        })
    }
}

/// NEGOTIATE response (§2.2.4), StructureSize 65.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NegotiateResponse {
    pub security_mode: u16,
    pub dialect_revision: u16,
    pub server_guid: [u8; 16],
    pub capabilities: u32,
    pub max_transact_size: u32,
    pub max_read_size: u32,
    pub max_write_size: u32,
    /// FILETIMEs (MS-DTYP §2.3.3).
    pub system_time: u64,
    pub server_start_time: u64,
    /// Present for dialect 0x0311.
    pub contexts: Option<NegotiateContexts>,
}

impl NegotiateResponse {
    pub fn parse(msg: &[u8]) -> Result<NegotiateResponse> {
        structure_size(msg, 65)?;
        let b = HEADER_LEN;
        let dialect_revision = u16_at(msg, b + 4)?;
        let contexts = if dialect_revision == 0x0311 {
            let n = u16_at(msg, b + 6)? as usize;
            let off = u32_at(msg, b + 60)? as usize;
            Some(NegotiateContexts::parse(msg, off, n)?)
        } else {
            None
        };
        Ok(NegotiateResponse {
            security_mode: u16_at(msg, b + 2)?,
            dialect_revision,
            server_guid: bytes16_at(msg, b + 8)?,
            capabilities: u32_at(msg, b + 24)?,
            max_transact_size: u32_at(msg, b + 28)?,
            max_read_size: u32_at(msg, b + 32)?,
            max_write_size: u32_at(msg, b + 36)?,
            system_time: u64_at(msg, b + 40)?,
            server_start_time: u64_at(msg, b + 48)?,
            contexts,
        })
    }
}

/// SESSION_SETUP request (§2.2.5), StructureSize 25.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSetupRequest {
    /// 0x01 = SMB2_SESSION_FLAG_BINDING: binds a new channel to an existing session.
    pub flags: u8,
    pub security_mode: u8,
    pub capabilities: u32,
    pub previous_session_id: u64,
}

impl SessionSetupRequest {
    pub const FLAG_BINDING: u8 = 0x01;
    pub fn parse(msg: &[u8]) -> Result<SessionSetupRequest> {
        structure_size(msg, 25)?;
        let b = HEADER_LEN;
        Ok(SessionSetupRequest {
            flags: *msg.get(b + 2).ok_or(Error::Truncated)?,
            security_mode: *msg.get(b + 3).ok_or(Error::Truncated)?,
            capabilities: u32_at(msg, b + 4)?,
            previous_session_id: u64_at(msg, b + 16)?,
        })
    }
}

/// SESSION_SETUP response (§2.2.6), StructureSize 9. The SessionId is in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSetupResponse {
    pub session_flags: u16,
}

impl SessionSetupResponse {
    pub fn parse(msg: &[u8]) -> Result<SessionSetupResponse> {
        structure_size(msg, 9)?;
        Ok(SessionSetupResponse { session_flags: u16_at(msg, HEADER_LEN + 2)? })
    }
}

/// TREE_CONNECT request (§2.2.9), StructureSize 9.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeConnectRequest {
    pub flags: u16,
    /// `\\server\share`, UTF-16LE on the wire.
    pub path: String,
}

impl TreeConnectRequest {
    /// SMB2_TREE_CONNECT_FLAG_EXTENSION_PRESENT (§2.2.9): the buffer starts with
    /// SMB2_TREE_CONNECT_REQUEST_EXTENSION and PathOffset is relative to it.
    pub const FLAG_EXTENSION_PRESENT: u16 = 0x0004;
    pub fn parse(msg: &[u8]) -> Result<TreeConnectRequest> {
        structure_size(msg, 9)?;
        let b = HEADER_LEN;
        let flags = u16_at(msg, b + 2)?;
        let mut off = u16_at(msg, b + 4)? as usize;
        let len = u16_at(msg, b + 6)? as usize;
        if flags & Self::FLAG_EXTENSION_PRESENT != 0 {
            // Extension (§2.2.9.1): TreeConnectContextOffset 4, Count 2, Reserved 10,
            // then PathName. [I] PathOffset points at the extension; the name follows
            // its 16-byte fixed part.
            let ext = off;
            off = ext.checked_add(16).ok_or(Error::BadOffset)?;
        }
        if off < b + 8 {
            return Err(Error::BadOffset);
        }
        Ok(TreeConnectRequest { flags, path: utf16le(range(msg, off, len)?) })
    }
}

/// TREE_CONNECT response (§2.2.10), StructureSize 16. The TreeId is in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeConnectResponse {
    /// 0x01 DISK, 0x02 PIPE, 0x03 PRINT.
    pub share_type: u8,
    pub share_flags: u32,
    pub capabilities: u32,
    pub maximal_access: u32,
}

impl TreeConnectResponse {
    pub fn parse(msg: &[u8]) -> Result<TreeConnectResponse> {
        structure_size(msg, 16)?;
        let b = HEADER_LEN;
        Ok(TreeConnectResponse {
            share_type: *msg.get(b + 2).ok_or(Error::Truncated)?,
            share_flags: u32_at(msg, b + 4)?,
            capabilities: u32_at(msg, b + 8)?,
            maximal_access: u32_at(msg, b + 12)?,
        })
    }
}

/// CREATE request (§2.2.13), StructureSize 57.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    pub security_flags: u8,
    pub requested_oplock_level: u8,
    pub impersonation_level: u32,
    pub smb_create_flags: u64,
    pub desired_access: u32,
    pub file_attributes: u32,
    pub share_access: u32,
    pub create_disposition: u32,
    pub create_options: u32,
    /// Path relative to the share, UTF-16LE on the wire (empty = the share root).
    pub name: String,
}

impl CreateRequest {
    pub fn parse(msg: &[u8]) -> Result<CreateRequest> {
        structure_size(msg, 57)?;
        let b = HEADER_LEN;
        let off = u16_at(msg, b + 44)? as usize;
        let len = u16_at(msg, b + 46)? as usize;
        let name = if len == 0 {
            String::new()
        } else {
            if off < b + 56 {
                return Err(Error::BadOffset);
            }
            utf16le(range(msg, off, len)?)
        };
        Ok(CreateRequest {
            security_flags: *msg.get(b + 2).ok_or(Error::Truncated)?,
            requested_oplock_level: *msg.get(b + 3).ok_or(Error::Truncated)?,
            impersonation_level: u32_at(msg, b + 4)?,
            smb_create_flags: u64_at(msg, b + 8)?,
            desired_access: u32_at(msg, b + 24)?,
            file_attributes: u32_at(msg, b + 28)?,
            share_access: u32_at(msg, b + 32)?,
            create_disposition: u32_at(msg, b + 36)?,
            create_options: u32_at(msg, b + 40)?,
            name,
        })
    }
}

/// CREATE response (§2.2.14), StructureSize 89.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateResponse {
    pub oplock_level: u8,
    pub flags: u8,
    pub create_action: u32,
    /// FILETIMEs (MS-DTYP §2.3.3).
    pub creation_time: u64,
    pub last_access_time: u64,
    pub last_write_time: u64,
    pub change_time: u64,
    pub allocation_size: u64,
    pub end_of_file: u64,
    pub file_attributes: u32,
    /// SMB2_FILEID: Persistent (8) then Volatile (8).
    pub file_id: [u8; 16],
}

impl CreateResponse {
    pub fn parse(msg: &[u8]) -> Result<CreateResponse> {
        structure_size(msg, 89)?;
        let b = HEADER_LEN;
        Ok(CreateResponse {
            oplock_level: *msg.get(b + 2).ok_or(Error::Truncated)?,
            flags: *msg.get(b + 3).ok_or(Error::Truncated)?,
            create_action: u32_at(msg, b + 4)?,
            creation_time: u64_at(msg, b + 8)?,
            last_access_time: u64_at(msg, b + 16)?,
            last_write_time: u64_at(msg, b + 24)?,
            change_time: u64_at(msg, b + 32)?,
            allocation_size: u64_at(msg, b + 40)?,
            end_of_file: u64_at(msg, b + 48)?,
            file_attributes: u32_at(msg, b + 56)?,
            file_id: bytes16_at(msg, b + 64)?,
        })
    }
}

/// CLOSE request (§2.2.15), StructureSize 24.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseRequest {
    pub flags: u16,
    pub file_id: [u8; 16],
}

impl CloseRequest {
    pub fn parse(msg: &[u8]) -> Result<CloseRequest> {
        structure_size(msg, 24)?;
        Ok(CloseRequest { flags: u16_at(msg, HEADER_LEN + 2)?, file_id: bytes16_at(msg, HEADER_LEN + 8)? })
    }
}

/// SMB_DIRECT_BUFFER_DESCRIPTOR_V1 (MS-SMBD §2.2.3.1): one registered buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferDescriptorV1 {
    pub offset: u64,
    pub token: u32,
    pub length: u32,
}

impl BufferDescriptorV1 {
    pub const LEN: usize = 16;
    /// At most this many descriptors are kept per request.
    pub const MAX: usize = 64;

    pub fn parse(b: &[u8]) -> Option<BufferDescriptorV1> {
        let d = b.get(..Self::LEN)?;
        Some(BufferDescriptorV1 {
            offset: u64::from_le_bytes(d[0..8].try_into().ok()?),
            token: u32::from_le_bytes(d[8..12].try_into().ok()?),
            length: u32::from_le_bytes(d[12..16].try_into().ok()?),
        })
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.token.to_le_bytes());
        out.extend_from_slice(&self.length.to_le_bytes());
    }

    /// The array at header-relative `off`, `len` bytes. An empty range yields an empty list.
    pub fn parse_array(msg: &[u8], off: usize, len: usize) -> Result<Vec<BufferDescriptorV1>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        if !len.is_multiple_of(Self::LEN) {
            return Err(Error::BadOffset);
        }
        let b = range(msg, off, len)?;
        Ok(b.chunks_exact(Self::LEN).take(Self::MAX).filter_map(Self::parse).collect())
    }
}

/// READ request (§2.2.19), StructureSize 49.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    pub padding: u8,
    pub flags: u8,
    pub length: u32,
    pub offset: u64,
    pub file_id: [u8; 16],
    pub minimum_count: u32,
    pub channel: u32,
    pub remaining_bytes: u32,
    pub read_channel_info: Vec<BufferDescriptorV1>,
}

impl ReadRequest {
    /// Bytes of the fixed part before Buffer.
    pub const FIXED_LEN: usize = 48;
    pub fn parse(msg: &[u8]) -> Result<ReadRequest> {
        structure_size(msg, 49)?;
        let b = HEADER_LEN;
        let channel = u32_at(msg, b + 36)?;
        let ci_off = u16_at(msg, b + 44)? as usize;
        let ci_len = u16_at(msg, b + 46)? as usize;
        let read_channel_info = if channel == channel::RDMA_V1 || channel == channel::RDMA_V1_INVALIDATE {
            BufferDescriptorV1::parse_array(msg, ci_off, ci_len)?
        } else {
            Vec::new()
        };
        Ok(ReadRequest {
            padding: *msg.get(b + 2).ok_or(Error::Truncated)?,
            flags: *msg.get(b + 3).ok_or(Error::Truncated)?,
            length: u32_at(msg, b + 4)?,
            offset: u64_at(msg, b + 8)?,
            file_id: bytes16_at(msg, b + 16)?,
            minimum_count: u32_at(msg, b + 32)?,
            channel,
            remaining_bytes: u32_at(msg, b + 40)?,
            read_channel_info,
        })
    }
}

/// READ response (§2.2.20), StructureSize 17. Data at DataOffset (header-relative).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadResponse {
    pub data_offset: u8,
    pub data_length: u32,
    pub data_remaining: u32,
}

impl ReadResponse {
    /// Bytes of the fixed part before Buffer.
    pub const FIXED_LEN: usize = 16;
    /// Parses the fixed part only (the data is streamed, not buffered).
    pub fn parse(msg: &[u8]) -> Result<ReadResponse> {
        structure_size(msg, 17)?;
        let b = HEADER_LEN;
        Ok(ReadResponse {
            data_offset: *msg.get(b + 2).ok_or(Error::Truncated)?,
            data_length: u32_at(msg, b + 4)?,
            data_remaining: u32_at(msg, b + 8)?,
        })
    }
}

/// WRITE request (§2.2.21), StructureSize 49. Data at DataOffset (header-relative).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRequest {
    pub data_offset: u16,
    pub length: u32,
    pub offset: u64,
    pub file_id: [u8; 16],
    pub channel: u32,
    pub remaining_bytes: u32,
    pub write_channel_info_offset: u16,
    pub write_channel_info_length: u16,
    pub flags: u32,
    /// Decoded when Channel is RDMA_V1/RDMA_V1_INVALIDATE and the info lies inside `msg`.
    pub write_channel_info: Vec<BufferDescriptorV1>,
}

impl WriteRequest {
    /// Bytes of the fixed part before Buffer.
    pub const FIXED_LEN: usize = 48;
    /// Parses the fixed part; the channel info is decoded only if `msg` holds it (it
    /// precedes the data in practice). A channel info range outside `msg` is left empty.
    pub fn parse(msg: &[u8]) -> Result<WriteRequest> {
        structure_size(msg, 49)?;
        let b = HEADER_LEN;
        let channel = u32_at(msg, b + 32)?;
        let ci_off = u16_at(msg, b + 40)?;
        let ci_len = u16_at(msg, b + 42)?;
        let write_channel_info = if channel == channel::RDMA_V1 || channel == channel::RDMA_V1_INVALIDATE {
            match BufferDescriptorV1::parse_array(msg, ci_off as usize, ci_len as usize) {
                Err(Error::Truncated) => Vec::new(),
                r => r?,
            }
        } else {
            Vec::new()
        };
        Ok(WriteRequest {
            data_offset: u16_at(msg, b + 2)?,
            length: u32_at(msg, b + 4)?,
            offset: u64_at(msg, b + 8)?,
            file_id: bytes16_at(msg, b + 16)?,
            channel,
            remaining_bytes: u32_at(msg, b + 36)?,
            write_channel_info_offset: ci_off,
            write_channel_info_length: ci_len,
            flags: u32_at(msg, b + 44)?,
            write_channel_info,
        })
    }
}

/// WRITE response (§2.2.22), StructureSize 17.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteResponse {
    pub count: u32,
    pub remaining: u32,
}

impl WriteResponse {
    pub fn parse(msg: &[u8]) -> Result<WriteResponse> {
        structure_size(msg, 17)?;
        Ok(WriteResponse { count: u32_at(msg, HEADER_LEN + 4)?, remaining: u32_at(msg, HEADER_LEN + 8)? })
    }
}

/// TREE_DISCONNECT and LOGOFF requests/responses (§2.2.7, §2.2.8, §2.2.11, §2.2.12):
/// StructureSize 4 and a reserved field.
pub fn parse_empty_body(msg: &[u8]) -> Result<()> {
    structure_size(msg, 4)
}

/// CLOSE response (§2.2.16), StructureSize 60.
pub fn parse_close_response(msg: &[u8]) -> Result<()> {
    structure_size(msg, 60)
}

// Encoders (tests and the synthesizer): each message as its parser above reads it, header
// first. Reserved fields are zero; a variable Buffer that would be empty holds the one byte
// StructureSize counts.

/// A message buffer holding the 64-byte header `h`, with room for `body` more bytes.
fn start_message(h: &HeaderRepr, body: usize) -> Vec<u8> {
    let mut head = [0u8; HEADER_LEN];
    h.emit(&mut head);
    let mut v = Vec::with_capacity(HEADER_LEN + body);
    v.extend_from_slice(&head);
    v
}

fn put_u16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn put_u32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn put_u64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

/// Header-relative offset of the Buffer of a READ or WRITE request, after the 48-byte fixed
/// part: where the channel info (or inline WRITE data) goes.
pub const READ_WRITE_REQUEST_BUFFER_OFFSET: u16 = (HEADER_LEN + WriteRequest::FIXED_LEN) as u16;

impl NegotiateContexts {
    /// Appends, each 8-byte aligned in `v` (which starts with the SMB2 header), the contexts
    /// listed in `types` that this struct holds the data of: PREAUTH_INTEGRITY (hash
    /// algorithms, salt), ENCRYPTION (ciphers), COMPRESSION (flags, algorithms), SIGNING
    /// (algorithms). Returns how many.
    fn emit(&self, v: &mut Vec<u8>) -> u16 {
        let mut count = 0;
        for &ctype in &self.types {
            let mut data = Vec::new();
            let list = |data: &mut Vec<u8>, l: &[u16]| {
                put_u16(data, l.len() as u16);
                for x in l {
                    put_u16(data, *x);
                }
            };
            match ctype {
                negotiate_context::PREAUTH_INTEGRITY_CAPABILITIES => {
                    put_u16(&mut data, self.preauth_hash_algorithms.len() as u16);
                    put_u16(&mut data, self.preauth_salt.len() as u16);
                    for x in &self.preauth_hash_algorithms {
                        put_u16(&mut data, *x);
                    }
                    data.extend_from_slice(&self.preauth_salt);
                }
                negotiate_context::ENCRYPTION_CAPABILITIES => list(&mut data, &self.ciphers),
                negotiate_context::SIGNING_CAPABILITIES => list(&mut data, &self.signing_algorithms),
                negotiate_context::COMPRESSION_CAPABILITIES => {
                    // §2.2.3.1.3: count, Padding, Flags, then the algorithms.
                    put_u16(&mut data, self.compression_algorithms.len() as u16);
                    put_u16(&mut data, 0);
                    put_u32(&mut data, self.compression_flags);
                    for x in &self.compression_algorithms {
                        put_u16(&mut data, *x);
                    }
                }
                _ => continue,
            }
            v.resize(v.len().next_multiple_of(8), 0);
            put_u16(v, ctype);
            put_u16(v, data.len() as u16);
            put_u32(v, 0); // Reserved
            v.extend_from_slice(&data);
            count += 1;
        }
        count
    }
}

impl NegotiateRequest {
    /// The dialects after the 36-byte fixed part; with `contexts`, NegotiateContextOffset and
    /// Count in place of ClientStartTime and the contexts after the dialects, 8-byte aligned.
    pub fn emit(&self, h: &HeaderRepr) -> Vec<u8> {
        let mut v = start_message(h, 36 + 2 * self.dialects.len() + 96);
        put_u16(&mut v, 36);
        put_u16(&mut v, self.dialects.len() as u16);
        put_u16(&mut v, self.security_mode);
        put_u16(&mut v, 0); // Reserved
        put_u32(&mut v, self.capabilities);
        v.extend_from_slice(&self.client_guid);
        let context_at = v.len();
        put_u64(&mut v, 0); // NegotiateContextOffset, Count, Reserved2 (or ClientStartTime)
        for d in &self.dialects {
            put_u16(&mut v, *d);
        }
        if let Some(c) = &self.contexts {
            v.resize(v.len().next_multiple_of(8), 0);
            let off = v.len() as u32;
            let n = c.emit(&mut v);
            v[context_at..context_at + 4].copy_from_slice(&off.to_le_bytes());
            v[context_at + 4..context_at + 6].copy_from_slice(&n.to_le_bytes());
        }
        v
    }
}

impl NegotiateResponse {
    /// `security_buffer` right after the 64-byte fixed part; with `contexts`, the contexts
    /// after it, 8-byte aligned.
    pub fn emit(&self, h: &HeaderRepr, security_buffer: &[u8]) -> Vec<u8> {
        let mut v = start_message(h, 64 + security_buffer.len() + 96);
        put_u16(&mut v, 65);
        put_u16(&mut v, self.security_mode);
        put_u16(&mut v, self.dialect_revision);
        let count_at = v.len();
        put_u16(&mut v, 0); // NegotiateContextCount (or Reserved)
        v.extend_from_slice(&self.server_guid);
        put_u32(&mut v, self.capabilities);
        put_u32(&mut v, self.max_transact_size);
        put_u32(&mut v, self.max_read_size);
        put_u32(&mut v, self.max_write_size);
        put_u64(&mut v, self.system_time);
        put_u64(&mut v, self.server_start_time);
        put_u16(&mut v, (HEADER_LEN + 64) as u16); // SecurityBufferOffset
        put_u16(&mut v, security_buffer.len() as u16);
        let offset_at = v.len();
        put_u32(&mut v, 0); // NegotiateContextOffset (or Reserved2)
        v.extend_from_slice(security_buffer);
        if let Some(c) = &self.contexts {
            v.resize(v.len().next_multiple_of(8), 0);
            let off = v.len() as u32;
            let n = c.emit(&mut v);
            v[count_at..count_at + 2].copy_from_slice(&n.to_le_bytes());
            v[offset_at..offset_at + 4].copy_from_slice(&off.to_le_bytes());
        }
        v
    }
}

impl SessionSetupRequest {
    /// Channel 0; `security_buffer` (the GSS token) right after the 24-byte fixed part.
    pub fn emit(&self, h: &HeaderRepr, security_buffer: &[u8]) -> Vec<u8> {
        let mut v = start_message(h, 24 + security_buffer.len());
        put_u16(&mut v, 25);
        v.extend_from_slice(&[self.flags, self.security_mode]);
        put_u32(&mut v, self.capabilities);
        put_u32(&mut v, 0); // Channel
        put_u16(&mut v, (HEADER_LEN + 24) as u16); // SecurityBufferOffset
        put_u16(&mut v, security_buffer.len() as u16);
        put_u64(&mut v, self.previous_session_id);
        v.extend_from_slice(security_buffer);
        v
    }
}

impl SessionSetupResponse {
    /// `security_buffer` right after the 8-byte fixed part.
    pub fn emit(&self, h: &HeaderRepr, security_buffer: &[u8]) -> Vec<u8> {
        let mut v = start_message(h, 8 + security_buffer.len());
        put_u16(&mut v, 9);
        put_u16(&mut v, self.session_flags);
        put_u16(&mut v, (HEADER_LEN + 8) as u16); // SecurityBufferOffset
        put_u16(&mut v, security_buffer.len() as u16);
        v.extend_from_slice(security_buffer);
        v
    }
}

impl CreateRequest {
    /// The name right after the 56-byte fixed part; no create contexts.
    pub fn emit(&self, h: &HeaderRepr) -> Vec<u8> {
        let name: Vec<u8> = self.name.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let mut v = start_message(h, 56 + name.len().max(1));
        put_u16(&mut v, 57);
        v.extend_from_slice(&[self.security_flags, self.requested_oplock_level]);
        put_u32(&mut v, self.impersonation_level);
        put_u64(&mut v, self.smb_create_flags);
        put_u64(&mut v, 0); // Reserved
        put_u32(&mut v, self.desired_access);
        put_u32(&mut v, self.file_attributes);
        put_u32(&mut v, self.share_access);
        put_u32(&mut v, self.create_disposition);
        put_u32(&mut v, self.create_options);
        put_u16(&mut v, (HEADER_LEN + 56) as u16); // NameOffset
        put_u16(&mut v, name.len() as u16);
        put_u32(&mut v, 0); // CreateContextsOffset
        put_u32(&mut v, 0); // CreateContextsLength
        v.extend_from_slice(&name);
        if name.is_empty() {
            v.push(0);
        }
        v
    }
}

impl CreateResponse {
    /// No create contexts.
    pub fn emit(&self, h: &HeaderRepr) -> Vec<u8> {
        let mut v = start_message(h, 88);
        put_u16(&mut v, 89);
        v.extend_from_slice(&[self.oplock_level, self.flags]);
        put_u32(&mut v, self.create_action);
        for t in [self.creation_time, self.last_access_time, self.last_write_time, self.change_time, self.allocation_size, self.end_of_file] {
            put_u64(&mut v, t);
        }
        put_u32(&mut v, self.file_attributes);
        put_u32(&mut v, 0); // Reserved2
        v.extend_from_slice(&self.file_id);
        put_u32(&mut v, 0); // CreateContextsOffset
        put_u32(&mut v, 0); // CreateContextsLength
        v
    }
}

/// CLOSE response (§2.2.16) to a request without SMB2_CLOSE_FLAG_POSTQUERY_ATTRIB: Flags 0 and
/// the attribute fields zero, as `parse_close_response` expects.
pub fn emit_close_response(h: &HeaderRepr) -> Vec<u8> {
    let mut v = start_message(h, 60);
    put_u16(&mut v, 60);
    v.resize(HEADER_LEN + 60, 0);
    v
}

impl TreeConnectRequest {
    /// The path right after the 8-byte fixed part (no extension).
    pub fn emit(&self, h: &HeaderRepr) -> Vec<u8> {
        let path: Vec<u8> = self.path.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let mut v = start_message(h, 8 + path.len());
        put_u16(&mut v, 9);
        put_u16(&mut v, self.flags);
        put_u16(&mut v, (HEADER_LEN + 8) as u16); // PathOffset
        put_u16(&mut v, path.len() as u16);
        v.extend_from_slice(&path);
        v
    }
}

impl TreeConnectResponse {
    pub fn emit(&self, h: &HeaderRepr) -> Vec<u8> {
        let mut v = start_message(h, 16);
        put_u16(&mut v, 16);
        v.extend_from_slice(&[self.share_type, 0]);
        put_u32(&mut v, self.share_flags);
        put_u32(&mut v, self.capabilities);
        put_u32(&mut v, self.maximal_access);
        v
    }
}

impl CloseRequest {
    pub fn emit(&self, h: &HeaderRepr) -> Vec<u8> {
        let mut v = start_message(h, 24);
        put_u16(&mut v, 24);
        put_u16(&mut v, self.flags);
        put_u32(&mut v, 0); // Reserved
        v.extend_from_slice(&self.file_id);
        v
    }
}

impl ReadRequest {
    /// ReadChannelInfo, when there is any, fills the Buffer right after the fixed part.
    pub fn emit(&self, h: &HeaderRepr) -> Vec<u8> {
        let info = BufferDescriptorV1::LEN * self.read_channel_info.len();
        let mut v = start_message(h, Self::FIXED_LEN + info.max(1));
        put_u16(&mut v, 49);
        v.extend_from_slice(&[self.padding, self.flags]);
        put_u32(&mut v, self.length);
        put_u64(&mut v, self.offset);
        v.extend_from_slice(&self.file_id);
        put_u32(&mut v, self.minimum_count);
        put_u32(&mut v, self.channel);
        put_u32(&mut v, self.remaining_bytes);
        let at = if info == 0 { 0 } else { READ_WRITE_REQUEST_BUFFER_OFFSET };
        put_u16(&mut v, at); // ReadChannelInfoOffset
        put_u16(&mut v, info as u16); // ReadChannelInfoLength
        if info == 0 {
            v.push(0);
        }
        for d in &self.read_channel_info {
            d.emit(&mut v);
        }
        v
    }
}

impl ReadResponse {
    /// The header and fixed part; `data_length` data bytes follow at `data_offset`. Without
    /// data (it went by RDMA Write, §3.3.5.12) the message ends with the one Buffer byte.
    pub fn emit(&self, h: &HeaderRepr) -> Vec<u8> {
        let mut v = start_message(h, Self::FIXED_LEN + 1);
        put_u16(&mut v, 17);
        v.extend_from_slice(&[self.data_offset, 0]);
        put_u32(&mut v, self.data_length);
        put_u32(&mut v, self.data_remaining);
        put_u32(&mut v, 0); // Flags (3.1.1) / Reserved2
        if self.data_length == 0 {
            v.push(0);
        }
        v
    }
}

impl WriteRequest {
    /// The header, fixed part and WriteChannelInfo (at `write_channel_info_offset`, which must
    /// be the Buffer right after the fixed part when there is any); `length` inline data bytes
    /// follow at `data_offset`.
    pub fn emit(&self, h: &HeaderRepr) -> Vec<u8> {
        let info = BufferDescriptorV1::LEN * self.write_channel_info.len();
        let mut v = start_message(h, Self::FIXED_LEN + info);
        put_u16(&mut v, 49);
        put_u16(&mut v, self.data_offset);
        put_u32(&mut v, self.length);
        put_u64(&mut v, self.offset);
        v.extend_from_slice(&self.file_id);
        put_u32(&mut v, self.channel);
        put_u32(&mut v, self.remaining_bytes);
        put_u16(&mut v, self.write_channel_info_offset);
        put_u16(&mut v, self.write_channel_info_length);
        put_u32(&mut v, self.flags);
        for d in &self.write_channel_info {
            d.emit(&mut v);
        }
        v
    }
}

impl WriteResponse {
    pub fn emit(&self, h: &HeaderRepr) -> Vec<u8> {
        let mut v = start_message(h, 16);
        put_u16(&mut v, 17);
        put_u16(&mut v, 0); // Reserved
        put_u32(&mut v, self.count);
        put_u32(&mut v, self.remaining);
        put_u16(&mut v, 0); // WriteChannelInfoOffset
        put_u16(&mut v, 0); // WriteChannelInfoLength
        v
    }
}

/// Body bytes (after the header) the streaming parser should buffer to parse a message of
/// this command. `None` = the whole message (up to the cap): the parser reads a variable
/// buffer (names, paths, contexts, channel info).
pub fn body_needed(cmd: u16, response: bool) -> Option<usize> {
    use command::*;
    match (cmd, response) {
        (NEGOTIATE, _) | (TREE_CONNECT, false) | (CREATE, false) | (READ, false) | (WRITE, false) => None,
        (SESSION_SETUP, false) => Some(24),
        (CREATE, true) => Some(88),
        (CLOSE, false) => Some(24),
        (READ, true) | (WRITE, true) => Some(16),
        (TREE_CONNECT, true) => Some(16),
        // Header plus StructureSize and a little: enough to tell error responses apart.
        _ => Some(8),
    }
}

/// Where the data of a WRITE request (§2.2.21 DataOffset, Length) or a READ response
/// (§2.2.20 DataOffset, DataLength) lies, read from its header and fixed part alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataRegion {
    /// From the start of the SMB2 header.
    pub offset: usize,
    pub length: u32,
}

/// Bytes of header and fixed part that `data_region` reads: WRITE requests and READ responses
/// only (`None` for other messages).
pub fn data_fixed_len(cmd: u16, response: bool) -> Option<usize> {
    match (cmd, response) {
        (command::WRITE, false) => Some(HEADER_LEN + WriteRequest::FIXED_LEN),
        (command::READ, true) => Some(HEADER_LEN + ReadResponse::FIXED_LEN),
        _ => None,
    }
}

/// The data region of a WRITE request or READ response. `None` when `msg` is shorter than the
/// fixed part, or its body is not the data-bearing one (another StructureSize: an error
/// response). The region is not checked against the message: the caller decides.
pub fn data_region(msg: &[u8], cmd: u16, response: bool) -> Option<DataRegion> {
    let fixed = data_fixed_len(cmd, response)?;
    let write = cmd == command::WRITE;
    if msg.len() < fixed || u16_at(msg, HEADER_LEN) != Ok(if write { 49 } else { 17 }) {
        return None;
    }
    // WRITE's DataOffset is 2 bytes; READ's is 1 byte followed by Reserved. Both lengths sit
    // at body offset 4.
    let offset = if write { usize::from(u16_at(msg, HEADER_LEN + 2).ok()?) } else { usize::from(msg[HEADER_LEN + 2]) };
    Some(DataRegion { offset, length: u32_at(msg, HEADER_LEN + 4).ok()? })
}

#[cfg(test)]
mod tests;
