//! The SMB2/3 messages the synthesizer sends, written by the engine's encoders beside their
//! parsers (`smbwire_dissectors::smb2::records`): this module chooses the field values (what a
//! Windows client and server say). Each builder returns one SMB2 message: the 64-byte header
//! (MS-SMB2 §2.2.1.2, SYNC form) followed by the command's fixed part and buffer. WRITE requests and
//! READ responses return only the head: the caller sends the data right after it, so a
//! 1 MiB payload is never copied into a message buffer.
//!
//! All integers are little-endian (MS-SMB2 §2.2). No message is signed or encrypted.

use smbwire_dissectors::smb2::records::{
    cipher, compression_algorithm, emit_close_response, ChainedPayload, CompressionTransform,
    PatternV1, flags, global_cap, hash_algorithm, negotiate_context,
    security_mode, share_type, CloseRequest,
    CreateRequest, CreateResponse, HeaderRepr, NegotiateContexts, NegotiateRequest,
    NegotiateResponse, ReadRequest, ReadResponse, SessionSetupRequest,
    SessionSetupResponse, TreeConnectRequest, TreeConnectResponse, WriteRequest, WriteResponse,
    READ_WRITE_REQUEST_BUFFER_OFFSET,
};
use smbwire_dissectors::smb2::xca::{self, Algorithm};
/// Command codes (MS-SMB2 §2.2.1.2), dialects (§2.2.3) and WRITE/READ Channel values
/// (§2.2.19, §2.2.21), as the engine defines them.
pub use smbwire_dissectors::smb2::records::{channel, command, dialect, HEADER_LEN};

/// What the synthetic client and server offer (§2.2.3).
const CAPABILITIES: u32 = global_cap::DFS
    | global_cap::LEASING
    | global_cap::LARGE_MTU
    | global_cap::MULTI_CHANNEL
    | global_cap::PERSISTENT_HANDLES;
const SIGNING_ENABLED: u16 = security_mode::SIGNING_ENABLED;
/// MaxTransactSize / MaxReadSize / MaxWriteSize the synthetic server offers (§2.2.4).
pub const MAX_IO_SIZE: u32 = 8 << 20;

/// The header fields that vary between messages (MS-SMB2 §2.2.1.2).
#[derive(Clone, Copy, Debug, Default)]
pub struct Header {
    pub command: u16,
    pub credit_charge: u16,
    /// CreditRequest in a request, CreditResponse in a response.
    pub credits: u16,
    /// NTSTATUS; only meaningful in a response (STATUS_SUCCESS = 0 throughout).
    pub status: u32,
    pub response: bool,
    pub message_id: u64,
    pub tree_id: u32,
    pub session_id: u64,
}

impl Header {
    /// The header as the engine emits it (§2.2.1.2, SYNC): Status only in a response
    /// (ChannelSequence + Reserved are 0 in an SMB 3.x request), never compounded, Reserved
    /// (ProcessId) 0xFEFF as Windows sends it, unsigned.
    pub fn repr(&self) -> HeaderRepr {
        HeaderRepr {
            credit_charge: self.credit_charge,
            status: if self.response { self.status } else { 0 },
            command: self.command,
            credit: self.credits,
            flags: if self.response { flags::SERVER_TO_REDIR } else { 0 },
            next_command: 0,
            message_id: self.message_id,
            async_id: None,
            reserved: 0xFEFF,
            tree_id: Some(self.tree_id),
            session_id: self.session_id,
        }
    }

    /// The response header matching this request header.
    pub fn response(&self) -> Header {
        Header {
            response: true,
            status: 0,
            ..*self
        }
    }
}

/// SMB2_FILEID (§2.2.14.1): Persistent then Volatile, 8 bytes each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileId {
    pub persistent: u64,
    pub volatile: u64,
}

impl FileId {
    /// The 16 bytes on the wire, as the engine's records hold them.
    pub fn bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.persistent.to_le_bytes());
        b[8..].copy_from_slice(&self.volatile.to_le_bytes());
        b
    }
}

/// CreditCharge of a READ/WRITE of `len` bytes: one credit per 64 KiB (§3.1.5.2).
pub fn credit_charge(len: u32) -> u16 {
    (len.saturating_sub(1) / 65536 + 1) as u16
}

/// DER TLV with a short-form length (every token here is under 128 bytes).
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    debug_assert!(content.len() < 128);
    let mut v = Vec::with_capacity(2 + content.len());
    v.push(tag);
    v.push(content.len() as u8);
    v.extend_from_slice(content);
    v
}

/// OID 1.3.6.1.4.1.311.2.2.10, NTLMSSP (MS-NLMP §1.9), DER-encoded.
const OID_NTLMSSP: [u8; 10] = [0x2b, 0x06, 0x01, 0x04, 0x01, 0x82, 0x37, 0x02, 0x02, 0x0a];
/// OID 1.3.6.1.5.5.2, SPNEGO (RFC 4178 §4.1), DER-encoded.
const OID_SPNEGO: [u8; 6] = [0x2b, 0x06, 0x01, 0x05, 0x05, 0x02];

/// GSS-API InitialContextToken (RFC 2743 §3.1) holding a SPNEGO NegTokenInit (RFC 4178
/// §4.2.1) that lists NTLMSSP and carries no mechToken: the smallest security buffer that
/// decoders take as well formed. Used in the NEGOTIATE response and SESSION_SETUP request.
pub fn spnego_init() -> Vec<u8> {
    let mech_types = der(0x30, &der(0x06, &OID_NTLMSSP));
    let init = der(0xa0, &der(0x30, &der(0xa0, &mech_types)));
    let mut inner = der(0x06, &OID_SPNEGO);
    inner.extend_from_slice(&init);
    der(0x60, &inner)
}

/// SPNEGO NegTokenResp (RFC 4178 §4.2.2): negState accept-completed, supportedMech NTLMSSP.
pub fn spnego_accept() -> Vec<u8> {
    let mut seq = der(0xa0, &der(0x0a, &[0x00]));
    seq.extend_from_slice(&der(0xa1, &der(0x06, &OID_NTLMSSP)));
    der(0xa1, &der(0x30, &seq))
}

/// The 3.1.1 negotiate contexts (§2.2.3.1): PREAUTH_INTEGRITY with SHA-512 and `salt`
/// (mandatory, §3.2.4.2.2.2), then ENCRYPTION with `ciphers`, then COMPRESSION when the
/// messages are compressed (§2.2.3.1.3).
fn contexts_311(salt: &[u8; 32], ciphers: &[u16], compression: Compression) -> NegotiateContexts {
    let mut c = NegotiateContexts {
        preauth_hash_algorithms: vec![hash_algorithm::SHA512],
        preauth_salt: salt.to_vec(),
        ciphers: ciphers.to_vec(),
        types: vec![
            negotiate_context::PREAUTH_INTEGRITY_CAPABILITIES,
            negotiate_context::ENCRYPTION_CAPABILITIES,
        ],
        ..Default::default()
    };
    if let Some((algorithms, flags)) = compression.capabilities() {
        c.compression_algorithms = algorithms;
        c.compression_flags = flags;
        c.types.push(negotiate_context::COMPRESSION_CAPABILITIES);
    }
    c
}

/// NEGOTIATE request (§2.2.3). Offers SMB 3.0 up to `max_dialect`; with 3.1.1 it carries
/// the PREAUTH_INTEGRITY and ENCRYPTION contexts (and COMPRESSION when compressing).
pub fn negotiate_request(
    h: &Header,
    max_dialect: u16,
    client_guid: [u8; 16],
    salt: &[u8; 32],
    compression: Compression,
) -> Vec<u8> {
    let smb311 = max_dialect == dialect::SMB311;
    let mut dialects = vec![dialect::SMB300, dialect::SMB302];
    if smb311 {
        dialects.push(dialect::SMB311);
    }
    NegotiateRequest {
        security_mode: SIGNING_ENABLED,
        capabilities: CAPABILITIES,
        client_guid,
        dialects,
        contexts: smb311.then(|| contexts_311(salt, &[cipher::AES128_GCM, cipher::AES128_CCM], compression)),
    }
    .emit(&h.repr())
}

/// NEGOTIATE response (§2.2.4) selecting `chosen`; the security buffer is the server's
/// SPNEGO hint (§3.3.5.4).
pub fn negotiate_response(
    h: &Header,
    chosen: u16,
    server_guid: [u8; 16],
    salt: &[u8; 32],
    now: u64,
    compression: Compression,
) -> Vec<u8> {
    NegotiateResponse {
        security_mode: SIGNING_ENABLED,
        dialect_revision: chosen,
        server_guid,
        capabilities: CAPABILITIES & !global_cap::DFS, // a server does not set DFS here (§3.3.5.4)
        max_transact_size: MAX_IO_SIZE,
        max_read_size: MAX_IO_SIZE,
        max_write_size: MAX_IO_SIZE,
        system_time: now,
        server_start_time: 0,
        contexts: (chosen == dialect::SMB311).then(|| contexts_311(salt, &[cipher::AES128_GCM], compression)),
    }
    .emit(&h.repr(), &spnego_init())
}

/// SESSION_SETUP request (§2.2.5) with a SPNEGO NegTokenInit. `binding` sets
/// SMB2_SESSION_FLAG_BINDING (0x01): an extra multichannel connection joining the session
/// named by the header's SessionId (§3.2.4.1.7).
pub fn session_setup_request(h: &Header, binding: bool) -> Vec<u8> {
    SessionSetupRequest {
        flags: if binding { SessionSetupRequest::FLAG_BINDING } else { 0 },
        security_mode: SIGNING_ENABLED as u8,
        capabilities: global_cap::DFS,
        previous_session_id: 0,
    }
    .emit(&h.repr(), &spnego_init())
}

/// SESSION_SETUP response (§2.2.6), STATUS_SUCCESS, SPNEGO accept-completed.
pub fn session_setup_response(h: &Header) -> Vec<u8> {
    SessionSetupResponse { session_flags: 0 }.emit(&h.repr(), &spnego_accept())
}

/// TREE_CONNECT request (§2.2.9) for `path` (`\\server\share`).
pub fn tree_connect_request(h: &Header, path: &str) -> Vec<u8> {
    TreeConnectRequest {
        flags: 0,
        path: path.to_string(),
    }
    .emit(&h.repr())
}

/// TREE_CONNECT response (§2.2.10): a disk share with full access, manual caching.
pub fn tree_connect_response(h: &Header) -> Vec<u8> {
    TreeConnectResponse {
        share_type: share_type::DISK,
        share_flags: 0,
        capabilities: 0,
        maximal_access: 0x001F_01FF, // FILE_ALL_ACCESS
    }
    .emit(&h.repr())
}

/// CREATE request (§2.2.13): open-or-create `name` for read/write, no create contexts.
pub fn create_request(h: &Header, name: &str) -> Vec<u8> {
    CreateRequest {
        security_flags: 0,
        requested_oplock_level: 0, // SMB2_OPLOCK_LEVEL_NONE
        impersonation_level: 2,    // Impersonation
        smb_create_flags: 0,
        desired_access: 0x0012_019F, // generic read/write rights
        file_attributes: 0x80,       // FILE_ATTRIBUTE_NORMAL
        share_access: 0x7,           // read | write | delete
        create_disposition: 3,       // FILE_OPEN_IF
        create_options: 0x40,        // FILE_NON_DIRECTORY_FILE
        name: name.to_string(),
    }
    .emit(&h.repr())
}

/// CREATE response (§2.2.14): FILE_OPENED, times all `now`, size `end_of_file`.
pub fn create_response(h: &Header, file_id: FileId, now: u64, end_of_file: u64) -> Vec<u8> {
    CreateResponse {
        oplock_level: 0,
        flags: 0,
        create_action: 1, // FILE_OPENED
        creation_time: now,
        last_access_time: now,
        last_write_time: now,
        change_time: now,
        allocation_size: end_of_file.next_multiple_of(1 << 20),
        end_of_file,
        file_attributes: 0x80,
        file_id: file_id.bytes(),
    }
    .emit(&h.repr())
}

/// CLOSE request (§2.2.15) without SMB2_CLOSE_FLAG_POSTQUERY_ATTRIB.
pub fn close_request(h: &Header, file_id: FileId) -> Vec<u8> {
    CloseRequest {
        flags: 0,
        file_id: file_id.bytes(),
    }
    .emit(&h.repr())
}

/// CLOSE response (§2.2.16); the attribute fields are zero because the request did not
/// ask for them.
pub fn close_response(h: &Header) -> Vec<u8> {
    emit_close_response(&h.repr())
}

/// How WRITE requests and READ responses travel (MS-SMB2 §3.1.4.4, §2.2.42; 3.1.1 only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    #[default]
    None,
    /// COMPRESSION_TRANSFORM_HEADER unchained (§2.2.42.1): the SMB2 header and the command's
    /// fixed part uncompressed (Offset), the data compressed with the algorithm.
    Unchained(Algorithm),
    /// Chained (§2.2.42.2): the header and fixed part as a NONE payload, a leading and a
    /// trailing run of one byte (at least `PATTERN_MIN` bytes) as Pattern_V1 payloads, the
    /// rest with the algorithm.
    Chained(Algorithm),
}

/// Shortest run of one byte sent as a Pattern_V1 payload.
pub const PATTERN_MIN: usize = 32;

impl Compression {
    /// The spec's names: "none", "lznt1", "lz77", "lz77huffman", "chained" (LZ77 + Pattern_V1).
    pub const NAMES: [&'static str; 5] = ["none", "lznt1", "lz77", "lz77huffman", "chained"];

    pub fn from_name(name: &str) -> Result<Compression, String> {
        match name {
            "none" => Ok(Compression::None),
            "chained" => Ok(Compression::Chained(Algorithm::Lz77)),
            other => Algorithm::ALL
                .into_iter()
                .find(|a| a.name() == other)
                .map(Compression::Unchained)
                .ok_or_else(|| format!("compression must be one of {:?}, got {other:?}", Self::NAMES)),
        }
    }

    /// The COMPRESSION_CAPABILITIES context's algorithms and flags (§2.2.3.1.3), if any.
    fn capabilities(self) -> Option<(Vec<u16>, u32)> {
        match self {
            Compression::None => None,
            Compression::Unchained(a) => Some((vec![a.to_u16()], 0)),
            // SMB2_COMPRESSION_CAPABILITIES_FLAG_CHAINED = 0x00000001.
            Compression::Chained(a) => Some((vec![a.to_u16(), compression_algorithm::PATTERN_V1], 1)),
        }
    }
}

/// The message `head` + `data` (a WRITE request or READ response with its data inline) as a
/// compressed message, through the engine's COMPRESSION_TRANSFORM_HEADER encoders; `None`
/// when that would not be smaller (the sender then sends it uncompressed, §3.1.4.4).
pub fn compress_message(c: Compression, head: &[u8], data: &[u8]) -> Option<Vec<u8>> {
    let total = head.len() + data.len();
    let mut v = Vec::with_capacity(total / 2 + 64);
    match c {
        Compression::None => return None,
        Compression::Unchained(a) => {
            CompressionTransform::emit_unchained(data.len() as u32, a.to_u16(), head.len() as u32, &mut v);
            v.extend_from_slice(head);
            xca::compress(a, data, &mut v);
        }
        Compression::Chained(a) => {
            let run = |bytes: &mut dyn Iterator<Item = &u8>| {
                let mut it = bytes.peekable();
                let first = it.peek().copied().copied();
                first.map(|b| it.take_while(|&&x| x == b).count()).unwrap_or(0)
            };
            let mut lead = run(&mut data.iter());
            if lead < PATTERN_MIN {
                lead = 0;
            }
            let mut trail = if lead == data.len() { 0 } else { run(&mut data.iter().rev()) };
            if trail < PATTERN_MIN {
                trail = 0;
            }
            let body = &data[lead..data.len() - trail];
            let mut payloads: Vec<(u16, Option<u32>, Vec<u8>)> = vec![(compression_algorithm::NONE, None, head.to_vec())];
            let pattern = |b: u8, n: usize| {
                let mut p = Vec::new();
                PatternV1 { pattern: b, repetitions: n as u32 }.emit(&mut p);
                (compression_algorithm::PATTERN_V1, None, p)
            };
            if lead > 0 {
                payloads.push(pattern(data[0], lead));
            }
            if !body.is_empty() {
                let mut z = Vec::new();
                xca::compress(a, body, &mut z);
                if z.len() < body.len() {
                    payloads.push((a.to_u16(), Some(body.len() as u32), z));
                } else {
                    payloads.push((compression_algorithm::NONE, None, body.to_vec()));
                }
            }
            if trail > 0 {
                payloads.push(pattern(data[data.len() - 1], trail));
            }
            CompressionTransform::emit_chained_start(total as u32, &mut v);
            let last = payloads.len() - 1;
            for (i, (alg, size, bytes)) in payloads.iter().enumerate() {
                let flags = if i < last { CompressionTransform::FLAG_CHAINED } else { 0 };
                ChainedPayload::emit_header(*alg, flags, bytes.len(), *size, &mut v);
                v.extend_from_slice(bytes);
            }
        }
    }
    (v.len() < total).then_some(v)
}

/// Offset of the data in a WRITE request: header + 48-byte fixed part (§2.2.21).
pub const WRITE_DATA_OFFSET: u16 = READ_WRITE_REQUEST_BUFFER_OFFSET;
/// Offset of the data in a READ response: header + 16-byte fixed part (§2.2.20).
pub const READ_DATA_OFFSET: u8 = (HEADER_LEN + ReadResponse::FIXED_LEN) as u8;
/// Where WRITE and READ requests put their channel info: right after the 48-byte fixed
/// part, in the Buffer field (§2.2.19, §2.2.21).
pub const CHANNEL_INFO_OFFSET: u16 = READ_WRITE_REQUEST_BUFFER_OFFSET;

/// Head of a WRITE request (§2.2.21) whose `length` data bytes follow inline.
pub fn write_request_head(h: &Header, file_id: FileId, offset: u64, length: u32) -> Vec<u8> {
    WriteRequest {
        data_offset: WRITE_DATA_OFFSET,
        length,
        offset,
        file_id: file_id.bytes(),
        channel: channel::NONE,
        remaining_bytes: 0,
        write_channel_info_offset: 0,
        write_channel_info_length: 0,
        flags: 0,
        write_channel_info: Vec::new(),
    }
    .emit(&h.repr())
}

/// WRITE response (§2.2.22) acknowledging `count` bytes.
pub fn write_response(h: &Header, count: u32) -> Vec<u8> {
    WriteResponse { count, remaining: 0 }.emit(&h.repr())
}

/// READ request (§2.2.19) for `length` bytes at `offset`, data to come back inline at
/// `READ_DATA_OFFSET` (Padding).
pub fn read_request(h: &Header, file_id: FileId, offset: u64, length: u32) -> Vec<u8> {
    ReadRequest {
        padding: READ_DATA_OFFSET,
        flags: 0,
        length,
        offset,
        file_id: file_id.bytes(),
        minimum_count: length,
        channel: channel::NONE,
        remaining_bytes: 0,
        read_channel_info: Vec::new(),
    }
    .emit(&h.repr())
}

/// Head of a READ response (§2.2.20) whose `length` data bytes follow inline.
pub fn read_response_head(h: &Header, length: u32) -> Vec<u8> {
    ReadResponse {
        data_offset: READ_DATA_OFFSET,
        data_length: length,
        data_remaining: 0,
    }
    .emit(&h.repr())
}

/// WRITE request (§2.2.21) whose data the server pulls by RDMA Read: Length and
/// DataOffset 0, RemainingBytes = the byte count, the SMB_DIRECT_BUFFER_DESCRIPTOR_V1
/// list in WriteChannelInfo (§3.2.4.7: "RemainingBytes ... the length of the data being
/// written" when Channel is RDMA).
pub fn write_request_rdma(
    h: &Header,
    file_id: FileId,
    offset: u64,
    remaining: u32,
    chan: u32,
    descs: &[super::smbdirect::BufferDescriptor],
) -> Vec<u8> {
    WriteRequest {
        data_offset: 0,
        length: 0,
        offset,
        file_id: file_id.bytes(),
        channel: chan,
        remaining_bytes: remaining,
        write_channel_info_offset: CHANNEL_INFO_OFFSET,
        write_channel_info_length: (super::smbdirect::BufferDescriptor::LEN * descs.len()) as u16,
        flags: 0,
        write_channel_info: descs.to_vec(),
    }
    .emit(&h.repr())
}

/// READ request (§2.2.19) asking the server to RDMA Write the data into the buffers
/// named by ReadChannelInfo; no inline data wanted (Padding 0).
pub fn read_request_rdma(
    h: &Header,
    file_id: FileId,
    offset: u64,
    length: u32,
    chan: u32,
    descs: &[super::smbdirect::BufferDescriptor],
) -> Vec<u8> {
    ReadRequest {
        padding: 0,
        flags: 0,
        length,
        offset,
        file_id: file_id.bytes(),
        minimum_count: length,
        channel: chan,
        remaining_bytes: 0,
        read_channel_info: descs.to_vec(),
    }
    .emit(&h.repr())
}

/// READ response (§2.2.20) after the data went by RDMA Write: DataLength 0 and
/// DataRemaining = the bytes written (§3.3.5.12).
pub fn read_response_rdma(h: &Header, remaining: u32) -> Vec<u8> {
    ReadResponse {
        data_offset: 0,
        data_length: 0,
        data_remaining: remaining,
    }
    .emit(&h.repr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(cmd: u16) -> Header {
        Header {
            command: cmd,
            credit_charge: 1,
            credits: 1,
            message_id: 7,
            tree_id: 5,
            session_id: 9,
            ..Default::default()
        }
    }

    #[test]
    fn header_layout() {
        let b = write_response(&hdr(command::WRITE).response(), 4096);
        assert_eq!(&b[0..4], b"\xfeSMB");
        assert_eq!(u16::from_le_bytes([b[4], b[5]]), 64);
        assert_eq!(u16::from_le_bytes([b[12], b[13]]), command::WRITE);
        assert_eq!(
            u32::from_le_bytes(b[16..20].try_into().unwrap()),
            flags::SERVER_TO_REDIR
        );
        assert_eq!(u64::from_le_bytes(b[24..32].try_into().unwrap()), 7);
        assert_eq!(u32::from_le_bytes(b[36..40].try_into().unwrap()), 5);
        assert_eq!(u64::from_le_bytes(b[40..48].try_into().unwrap()), 9);
        assert_eq!(b.len(), 64 + 16);
        assert_eq!(u32::from_le_bytes(b[68..72].try_into().unwrap()), 4096);
    }

    #[test]
    fn fixed_sizes_match_structure_sizes() {
        let f = FileId {
            persistent: 1,
            volatile: 2,
        };
        let h = hdr(0);
        // StructureSize counts the fixed part plus one byte of buffer for variable messages.
        assert_eq!(
            write_request_head(&h, f, 0, 1).len(),
            WRITE_DATA_OFFSET as usize
        );
        assert_eq!(read_response_head(&h, 1).len(), READ_DATA_OFFSET as usize);
        assert_eq!(read_request(&h, f, 0, 1).len(), 64 + 49);
        assert_eq!(close_request(&h, f).len(), 64 + 24);
        assert_eq!(close_response(&h).len(), 64 + 60);
        assert_eq!(create_response(&h, f, 0, 0).len(), 64 + 88);
        assert_eq!(tree_connect_response(&h).len(), 64 + 16);
        assert_eq!(
            session_setup_request(&h, false).len(),
            64 + 24 + spnego_init().len()
        );
        let c = create_request(&h, "a");
        assert_eq!(c.len(), 64 + 56 + 2);
        assert_eq!(&c[120..], &[b'a', 0]);
    }

    #[test]
    fn negotiate_contexts_are_aligned_and_counted() {
        let salt = [0xAB; 32];
        let b = negotiate_request(&hdr(command::NEGOTIATE), dialect::SMB311, [1; 16], &salt, Compression::None);
        let off = u32::from_le_bytes(b[64 + 28..64 + 32].try_into().unwrap()) as usize;
        let count = u16::from_le_bytes([b[64 + 32], b[64 + 33]]);
        assert_eq!(off % 8, 0);
        assert_eq!(count, 2);
        assert_eq!(
            u16::from_le_bytes([b[off], b[off + 1]]),
            negotiate_context::PREAUTH_INTEGRITY_CAPABILITIES
        );
        let len = u16::from_le_bytes([b[off + 2], b[off + 3]]) as usize;
        let next = (off + 8 + len).next_multiple_of(8);
        assert_eq!(
            u16::from_le_bytes([b[next], b[next + 1]]),
            negotiate_context::ENCRYPTION_CAPABILITIES
        );

        let r = negotiate_response(
            &hdr(command::NEGOTIATE).response(),
            dialect::SMB311,
            [2; 16],
            &salt,
            0,
            Compression::None,
        );
        let roff = u32::from_le_bytes(r[64 + 60..64 + 64].try_into().unwrap()) as usize;
        assert_eq!(roff, (128 + spnego_init().len()).next_multiple_of(8));
        assert_eq!(u16::from_le_bytes([r[64 + 6], r[64 + 7]]), 2);
        let plain = negotiate_response(
            &hdr(command::NEGOTIATE).response(),
            dialect::SMB302,
            [2; 16],
            &salt,
            0,
            Compression::None,
        );
        assert_eq!(plain.len(), 128 + spnego_init().len());
    }

    #[test]
    fn spnego_tokens_are_well_formed_der() {
        // Each TLV's length byte covers exactly the rest of the token.
        let i = spnego_init();
        assert_eq!((i[0], i[1] as usize + 2), (0x60, i.len()));
        assert_eq!(&i[2..10], &[0x06, 0x06, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x02]);
        assert_eq!(i.len(), 30);
        let a = spnego_accept();
        assert_eq!((a[0], a[1] as usize + 2), (0xa1, a.len()));
        assert_eq!(a.len(), 23);
    }

    /// The original message of a COMPRESSION_TRANSFORM message, rebuilt with the engine's
    /// parsers and decompressors.
    fn original(msg: &[u8]) -> Vec<u8> {
        use smbwire_dissectors::smb2::records::compression_algorithm as alg;
        let mut out = Vec::new();
        match CompressionTransform::parse(msg).unwrap() {
            CompressionTransform::Unchained { original_compressed_segment_size, compression_algorithm, offset } => {
                let start = CompressionTransform::UNCHAINED_LEN + offset as usize;
                out.extend_from_slice(&msg[CompressionTransform::UNCHAINED_LEN..start]);
                let a = Algorithm::from_u16(compression_algorithm).unwrap();
                xca::decompress(a, &msg[start..], &mut out, original_compressed_segment_size as usize).unwrap();
            }
            CompressionTransform::Chained { original_compressed_segment_size, payloads } => {
                for p in &payloads {
                    let data = &msg[p.data_offset..p.data_offset + p.data_length];
                    match p.compression_algorithm {
                        alg::NONE => out.extend_from_slice(data),
                        alg::PATTERN_V1 => assert!(PatternV1::parse(data).unwrap().expand(&mut out, usize::MAX)),
                        a => xca::decompress(Algorithm::from_u16(a).unwrap(), data, &mut out, p.original_payload_size.unwrap() as usize).unwrap(),
                    }
                }
                assert_eq!(out.len(), original_compressed_segment_size as usize);
                assert_eq!(payloads.last().unwrap().flags, 0);
            }
        }
        out
    }

    #[test]
    fn compressed_messages_parse_back() {
        let f = FileId { persistent: 1, volatile: 2 };
        let mut data = vec![0u8; 3 * 4096];
        data.extend((0..5000u32).map(|i| (i * 31 % 7) as u8));
        data.extend(vec![0x5a; 4096]);
        let head = write_request_head(&hdr(command::WRITE), f, 0, data.len() as u32);
        let whole: Vec<u8> = head.iter().chain(&data).copied().collect();
        for name in Compression::NAMES {
            let c = Compression::from_name(name).unwrap();
            let Some(msg) = compress_message(c, &head, &data) else {
                assert_eq!(c, Compression::None);
                continue;
            };
            assert!(msg.len() < whole.len() / 4, "{name}: {}", msg.len());
            assert_eq!(original(&msg), whole, "{name}");
            let t = CompressionTransform::parse(&msg).unwrap();
            // The SMB2 header stays readable without decompressing.
            assert_eq!(t.uncompressed_prefix(&msg), &head[..], "{name}");
            if name == "chained" {
                assert_eq!(t.algorithms(), vec![0, 4, 2, 4]);
            }
        }
        assert!(Compression::from_name("zip").is_err());
        // Random data does not get smaller: sent uncompressed.
        let mut r = crate::data::SplitMix64::new(3);
        let noise: Vec<u8> = (0..512).flat_map(|_| r.next_u64().to_le_bytes()).collect();
        assert!(compress_message(Compression::Unchained(Algorithm::Lz77), &head, &noise).is_none());
    }

    #[test]
    fn negotiate_offers_compression() {
        use smbwire_dissectors::smb2::records::{NegotiateRequest, NegotiateResponse};
        let salt = [1; 32];
        let c = Compression::Chained(Algorithm::Lz77);
        let req = NegotiateRequest::parse(&negotiate_request(&hdr(command::NEGOTIATE), dialect::SMB311, [1; 16], &salt, c)).unwrap();
        let ctx = req.contexts.unwrap();
        assert_eq!((ctx.compression_algorithms, ctx.compression_flags), (vec![2, 4], 1));
        let resp = negotiate_response(&hdr(command::NEGOTIATE).response(), dialect::SMB311, [2; 16], &salt, 0, Compression::Unchained(Algorithm::Lznt1));
        let ctx = NegotiateResponse::parse(&resp).unwrap().contexts.unwrap();
        assert_eq!((ctx.compression_algorithms, ctx.compression_flags), (vec![1], 0));
        assert_eq!(ctx.types.len(), 3);
    }

    #[test]
    fn credit_charge_per_64k() {
        assert_eq!(credit_charge(1), 1);
        assert_eq!(credit_charge(65536), 1);
        assert_eq!(credit_charge(65537), 2);
        assert_eq!(credit_charge(1 << 20), 16);
    }
}
