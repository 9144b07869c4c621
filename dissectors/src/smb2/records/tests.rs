//! Record parser tests, from bytes of the public captures (NetBIOS header stripped).
use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// smb311-negotiate-contexts-zeek.pcap frame 12: NEGOTIATE request with 3.1.1 contexts.
const NEGOTIATE_REQ: &str = "fe534d42400000000000000000001f0000000000000000000100000000000000000000000000000000000000000000000000000000000000000000000000000024000800010000007f00000016ab4fd9625676488cd1707d08e52b5878000000020000000202100222022402000302031003110300000000010026000000000001002000010067e5f669ff3e0ad12e89ad84ceb1d35dfee53ede3e4858a6d1a9099ac1635a9600000200060000000000020001000200";
/// Frame 13: NEGOTIATE response, dialect 0x0311, preauth + encryption contexts.
const NEGOTIATE_RESP: &str = "fe534d4240000000000000000000010001000000000000000100000000000000000000000000000000000000000000000000000000000000000000000000000041000100110302006e657773746f726167650000000000000500000000008000000080000000800048b174420159d501000000000000000080004a00d0000000604806062b0601050502a03e303ca00e300c060a2b06010401823702020aa32a3028a0261b246e6f745f646566696e65645f696e5f5246433431373840706c656173655f69676e6f726500000000000001002600000000000100200001000d26c9caf2d8fc87a7109c04578270095438526cede08410ca34aa8742b95a800000020004000000000001000100";
/// smb2-readwrite-midstream-zeek.pcap frame 1: CREATE request for "pythonfile" (NameLength 20,
/// followed by alignment bytes that are not part of the name).
const CREATE_REQ: &str = "fe534d424000010000000000050001000000000000000000cd04000000000000fffe00007a6c1953c01c233c0000000000000000000000000000000000000000390000090200000000000000000000000000000000000000890012008000000003000000010000006000000078001400900000005800000070007900740068006f006e00660069006c006500320000002800000010000400000018001000000044486e510000000000000000000000000000000000000000180000001000040000001800000000004d78416300000000000000001000040000001800000000005146696400000000";
/// Frame 2: CREATE response (first 240 bytes).
const CREATE_RESP: &str = "fe534d424000010000000000050001000100000000000000cd04000000000000fffe00007a6c1953c01c233c0000000000000000000000000000000000000000590009000100000080261aedcabfd40140afd907cbbfd4016f871aedcabfd4016f871aedcabfd4010000100000000000100000000000000080000000000000002e8c2fc5000000004d57ffae000000009800000058000000200000001000040000001800080000004d78416300000000000000009f011700000000001000040000001800200000005146696400000000ceee1d0000000000010800000000000000000000000000000000000000000000";
/// Frame 9: READ request, 16 bytes at offset 0.
const READ_REQ: &str = "fe534d424000010000000000080001000000000000000000d204000000000000fffe00007a6c1953c01c233c0000000000000000000000000000000000000000310050001000000000000000000000002e8c2fc5000000004d57ffae000000000000000000000000000000000000000000";
/// Frame 10: READ response, header and fixed part only (16 data bytes follow on the wire).
const READ_RESP_HEAD: &str = "fe534d424000010000000000080001000100000000000000d204000000000000fffe00007a6c1953c01c233c000000000000000000000000000000000000000011005000100000000000000000000000";
/// Frame 19: WRITE request, header and fixed part only (7000 data bytes follow).
const WRITE_REQ_HEAD: &str = "fe534d424000010000000000090001000000000000000000d604000000000000fffe00007a6c1953c01c233c000000000000000000000000000000000000000031007000581b00000000000000000000f9d8d6ca0000000049b1670e0000000000000000000000000000000000000000";
/// Frame 21: WRITE response, Count 7000.
const WRITE_RESP: &str = "fe534d424000010000000000090001000100000000000000d604000000000000fffe00007a6c1953c01c233c000000000000000000000000000000000000000011000000581b00000000000000000000";

// smb302-reads-writes.pcap (SMB 3.0.2, Samba on loopback; NetBIOS header stripped). Field
// values in the tests below are as `tshark -V -O smb2` shows them for these frames.
/// Frame 63: SESSION_SETUP request, NTLMSSP_NEGOTIATE (SessionId 0, MessageId 2).
const SESSION_SETUP_REQ: &str = "fe534d4240000100000000000100000100000000000000000200000000000000fffe00000000000000000000000000000000000000000000000000000000000019000001010000000000000058004a000000000000000000604806062b0601050502a03e303ca00e300c060a2b06010401823702020aa22a04284e544c4d535350000100000005028862000000000000000000000000000000000601b01d0000000f";
/// Frame 29: SESSION_SETUP response, STATUS_SUCCESS, signed, SessionId 0x9b71db6b00000005.
const SESSION_SETUP_RESP: &str = "fe534d4240000100000000000100000109000000000000000200000000000000fffe000000000000050000006bdb719bf4b6567739a3b0d31049f8c020af3e250900000048000501a18201013081fea0030a0100a10b06092a864886f712010202a281e90481e66081e306092a864886f71201020202006f81d33081d0a003020105a10302010fa27a3078a003020112a271046f20487f6a8313106e046cd6d30cc83c54a6c9cfea12416ec97292fd4cdb85f9fd678f3c09c98ba0e0341c823e197c2d42e3b827408c4b5da5ce529733b6553082848c62e2d2f31353a5f9836922d9fd31bab721a2a00e0f5a6e1ae82af4833ec305e32e3ebfb7eaf03ab7e5f7e1802fa3483046a0173015a003020110a10e040c8a8128fc42912f47f861b6c8a12b3029a003020102a1220420d1584ab2119128a47d25b4b3f2a1d03a92d047841b7d3a4751bf82feece6c323";
/// Frame 65: SESSION_SETUP response, STATUS_MORE_PROCESSING_REQUIRED (NTLMSSP_CHALLENGE);
/// header, fixed part and the first bytes of the blob only.
const SESSION_SETUP_RESP_MORE: &str = "fe534d4240000100160000c00100000101000000000000000200000000000000fffe000000000000060000006bdb719b000000000000000000000000000000000900000048002001a182011c30820118";
/// Frame 35: TREE_CONNECT request for \\127.0.0.1\PUBLIC.
const TREE_CONNECT_REQ: &str = "fe534d4240000100000000000300000108000000000000000300000000000000fffe000000000000050000006bdb719b4b59c1a4aaac525bec567068c0d3fc6c09000000480024005c005c003100320037002e0030002e0030002e0031005c005000550042004c0049004300";
/// Frame 37: TREE_CONNECT response, TreeId 1, disk share.
const TREE_CONNECT_RESP: &str = "fe534d4240000100000000000300000109000000000000000300000000000000fffe000001000000050000006bdb719bc8efd732b6a7e1f01374e74dba6ef2b0100001003008000000000000ff011f00";
/// Frame 316: CLOSE request (not in a compound) for .DS_Store, MessageId 74.
const CLOSE_REQ: &str = "fe534d4240000100000000000600000108000000000000004a00000000000000fffe000001000000050000006bdb719b7eceebf43b4fc99b4f8ef6aeea9120c61800000000000000cd000000000000001300000000000000";
/// Frame 318: CLOSE response.
const CLOSE_RESP: &str = "fe534d4240000100000000000600000109000000000000004a00000000000000fffe000001000000050000006bdb719bdbfa2cac5f4d24e99f9c55d48c889deb3c0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";
/// Frame 67: LOGOFF request, SessionId 0x9b71db6b00000006, MessageId 3.
const LOGOFF_REQ: &str = "fe534d4240000100000000000200010000000000000000000300000000000000fffe000000000000060000006bdb719b0000000000000000000000000000000004000000";
/// Frame 69: LOGOFF response.
const LOGOFF_RESP: &str = "fe534d4240000100000000000200010001000000000000000300000000000000fffe000000000000060000006bdb719b0000000000000000000000000000000004000000";
// smb300-dac-getinfo-setinfo.pcap (SMB 3.0; smb302-reads-writes.pcap has no TREE_DISCONNECT).
/// Frame 715: TREE_DISCONNECT request, TreeId 3 (\\bb1file2\IPC$), SessionId 0x5c122c2c00000001.
const TREE_DISCONNECT_REQ: &str = "fe534d4240000100040000000400010000000000000000006f00000000000000fffe000003000000010000002c2c125c0000000000000000000000000000000004000000";
/// Frame 716: TREE_DISCONNECT response.
const TREE_DISCONNECT_RESP: &str = "fe534d4240000100000000000400010001000000000000006f00000000000000fffe000003000000010000002c2c125c0000000000000000000000000000000004000000";

const FILE_ID: [u8; 16] = [0x2e, 0x8c, 0x2f, 0xc5, 0, 0, 0, 0, 0x4d, 0x57, 0xff, 0xae, 0, 0, 0, 0];

#[test]
fn header_deconstruct() {
    let b = hex(CREATE_REQ);
    let h = Header::new_checked(&b[..]).unwrap();
    assert_eq!(h.command(), command::CREATE);
    assert!(!h.is_response() && !h.is_async() && !h.is_related());
    assert_eq!(h.message_id(), 0x4cd);
    // Values as tshark shows them (smb2.tid, smb2.sesid, smb2.pid).
    assert_eq!(h.tree_id(), Some(0x53196c7a));
    assert_eq!(h.session_id(), 0x3c231cc0);
    assert_eq!(HeaderRepr::parse(&b).unwrap().reserved, 0xfeff);
    assert_eq!(h.credit(), 1);
    assert_eq!(h.body_structure_size(), Some(57));
}

#[test]
fn header_parse_emit_round_trip() {
    let b = hex(WRITE_RESP);
    let r = HeaderRepr::parse(&b).unwrap();
    assert!(r.is_response());
    let mut out = [0u8; 64];
    r.emit(&mut out);
    assert_eq!(&out[..], &b[..64]);
    // Async form: AsyncId replaces Reserved+TreeId.
    let a = HeaderRepr { async_id: Some(0x1122334455667788), tree_id: None, status: status::PENDING, flags: flags::SERVER_TO_REDIR, ..r };
    a.emit(&mut out);
    let back = HeaderRepr::parse(&out).unwrap();
    assert_eq!(back.async_id, Some(0x1122334455667788));
    assert_eq!(back.tree_id, None);
    assert!(back.is_interim());
}

#[test]
fn header_refuses_garbage() {
    let mut b = hex(CREATE_REQ);
    assert_eq!(HeaderRepr::parse(&b[..63]), Err(Error::Truncated));
    b[4] = 65;
    assert_eq!(HeaderRepr::parse(&b), Err(Error::BadStructureSize));
    b[0] = 0xfd;
    assert_eq!(HeaderRepr::parse(&b), Err(Error::BadProtocolId));
}

#[test]
fn negotiate_request_with_contexts() {
    let n = NegotiateRequest::parse(&hex(NEGOTIATE_REQ)).unwrap();
    assert_eq!(n.dialects, vec![0x0202, 0x0210, 0x0222, 0x0224, 0x0300, 0x0302, 0x0310, 0x0311]);
    let c = n.contexts.unwrap();
    assert_eq!(c.types, vec![negotiate_context::PREAUTH_INTEGRITY_CAPABILITIES, negotiate_context::ENCRYPTION_CAPABILITIES]);
    assert_eq!(c.preauth_hash_algorithms, vec![1]);
    assert_eq!(c.ciphers, vec![1, 2]);
}

#[test]
fn negotiate_response_dialect_and_cipher() {
    let n = NegotiateResponse::parse(&hex(NEGOTIATE_RESP)).unwrap();
    assert_eq!(n.dialect_revision, 0x0311);
    assert_eq!(n.max_read_size, 0x800000);
    let c = n.contexts.unwrap();
    assert_eq!(c.preauth_hash_algorithms, vec![1]);
    assert_eq!(c.ciphers, vec![1]);
}

#[test]
fn create_request_and_response() {
    let c = CreateRequest::parse(&hex(CREATE_REQ)).unwrap();
    assert_eq!(c.name, "pythonfile");
    let r = CreateResponse::parse(&hex(CREATE_RESP)).unwrap();
    assert_eq!(r.file_id, FILE_ID);
    // A NameLength reaching past the buffer is refused, not a panic.
    let mut b = hex(CREATE_REQ);
    b[64 + 46] = 0xff;
    b[64 + 47] = 0xff;
    assert_eq!(CreateRequest::parse(&b), Err(Error::Truncated));
}

#[test]
fn read_request_and_response() {
    let r = ReadRequest::parse(&hex(READ_REQ)).unwrap();
    assert_eq!((r.length, r.offset, r.file_id, r.channel), (16, 0, FILE_ID, channel::NONE));
    assert!(r.read_channel_info.is_empty());
    let d = ReadResponse::parse(&hex(READ_RESP_HEAD)).unwrap();
    assert_eq!((d.data_offset, d.data_length, d.data_remaining), (0x50, 16, 0));
}

#[test]
fn write_request_and_response() {
    let w = WriteRequest::parse(&hex(WRITE_REQ_HEAD)).unwrap();
    assert_eq!((w.data_offset, w.length, w.offset, w.channel), (0x70, 7000, 0, 0));
    assert_eq!(w.file_id, [0xf9, 0xd8, 0xd6, 0xca, 0, 0, 0, 0, 0x49, 0xb1, 0x67, 0x0e, 0, 0, 0, 0]);
    assert_eq!(WriteResponse::parse(&hex(WRITE_RESP)).unwrap().count, 7000);
    assert_eq!(WriteRequest::parse(&hex(WRITE_REQ_HEAD)[..100]), Err(Error::Truncated));
}

/// The data regions the streaming parser reads agree with the parsed records, and only the
/// data-bearing messages have one.
#[test]
fn data_regions_of_write_request_and_read_response() {
    let (w, r) = (hex(WRITE_REQ_HEAD), hex(READ_RESP_HEAD));
    assert_eq!(data_region(&w, command::WRITE, false), Some(DataRegion { offset: 0x70, length: 7000 }));
    assert_eq!(data_region(&r, command::READ, true), Some(DataRegion { offset: 0x50, length: 16 }));
    assert_eq!(data_fixed_len(command::WRITE, false), Some(HEADER_LEN + WriteRequest::FIXED_LEN));
    assert_eq!(data_region(&w[..HEADER_LEN + WriteRequest::FIXED_LEN - 1], command::WRITE, false), None);
    assert_eq!(data_region(&w, command::WRITE, true), None);
    assert_eq!(data_region(&hex(READ_REQ), command::READ, false), None);
    // An error response (StructureSize 9) has no data region.
    let mut e = r.clone();
    e[HEADER_LEN] = 9;
    assert_eq!(data_region(&e, command::READ, true), None);
}

#[test]
fn rdma_write_channel_info_descriptors() {
    // A WRITE request as SMB Direct sends it (§4 of the protocol notes): Length 0,
    // RemainingBytes = size, Channel RDMA_V1, two descriptors at 0x70.
    let mut b = hex(WRITE_REQ_HEAD);
    b[64 + 2..64 + 4].copy_from_slice(&0u16.to_le_bytes());
    b[64 + 4..64 + 8].copy_from_slice(&0u32.to_le_bytes());
    b[64 + 32..64 + 36].copy_from_slice(&channel::RDMA_V1.to_le_bytes());
    b[64 + 36..64 + 40].copy_from_slice(&0x20000u32.to_le_bytes());
    b[64 + 40..64 + 42].copy_from_slice(&0x70u16.to_le_bytes());
    b[64 + 42..64 + 44].copy_from_slice(&32u16.to_le_bytes());
    for (va, tok, len) in [(0x1000_0000_u64, 0xaabb_u32, 0x10000_u32), (0x2000_0000, 0xccdd, 0x10000)] {
        b.extend_from_slice(&va.to_le_bytes());
        b.extend_from_slice(&tok.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
    }
    let w = WriteRequest::parse(&b).unwrap();
    assert_eq!(w.remaining_bytes, 0x20000);
    assert_eq!(
        w.write_channel_info,
        vec![
            BufferDescriptorV1 { offset: 0x1000_0000, token: 0xaabb, length: 0x10000 },
            BufferDescriptorV1 { offset: 0x2000_0000, token: 0xccdd, length: 0x10000 }
        ]
    );
    // A length that is not a multiple of 16 is refused.
    b[64 + 42] = 20;
    assert_eq!(WriteRequest::parse(&b), Err(Error::BadOffset));
}

/// Header fields as tshark shows them: (command, response, MessageId, SessionId, TreeId, status, signed).
fn header_of(m: &str) -> (u16, bool, u64, u64, Option<u32>, u32, bool) {
    let h = HeaderRepr::parse(&hex(m)).unwrap();
    (h.command, h.is_response(), h.message_id, h.session_id, h.tree_id, h.status, h.flags & flags::SIGNED != 0)
}

#[test]
fn session_setup_request_from_capture() {
    assert_eq!(header_of(SESSION_SETUP_REQ), (command::SESSION_SETUP, false, 2, 0, Some(0), status::SUCCESS, false));
    let s = SessionSetupRequest::parse(&hex(SESSION_SETUP_REQ)).unwrap();
    // tshark: Flags 0, Security mode 0x01 (signing enabled), Capabilities 0x00000001 (DFS),
    // Previous Session Id 0.
    assert_eq!(s, SessionSetupRequest { flags: 0, security_mode: 0x01, capabilities: 0x0000_0001, previous_session_id: 0 });
    assert_eq!(s.flags & SessionSetupRequest::FLAG_BINDING, 0);
    // Binding flag set by hand: a new channel of an existing session.
    let mut b = hex(SESSION_SETUP_REQ);
    b[64 + 2] = SessionSetupRequest::FLAG_BINDING;
    b[64 + 16..64 + 24].copy_from_slice(&0x9b71_db6b_0000_0005u64.to_le_bytes());
    let bound = SessionSetupRequest::parse(&b).unwrap();
    assert_eq!((bound.flags, bound.previous_session_id), (1, 0x9b71_db6b_0000_0005));
    // Another command's body is refused by its StructureSize.
    assert_eq!(SessionSetupRequest::parse(&hex(TREE_CONNECT_REQ)), Err(Error::BadStructureSize));
}

#[test]
fn session_setup_responses_from_capture() {
    // Success: the SessionId every later message of the session carries is in the header.
    assert_eq!(
        header_of(SESSION_SETUP_RESP),
        (command::SESSION_SETUP, true, 2, 0x9b71_db6b_0000_0005, Some(0), status::SUCCESS, true)
    );
    assert_eq!(SessionSetupResponse::parse(&hex(SESSION_SETUP_RESP)).unwrap(), SessionSetupResponse { session_flags: 0 });
    // A guest session flag set by hand comes out as is.
    let mut b = hex(SESSION_SETUP_RESP);
    b[64 + 2] = 0x01;
    assert_eq!(SessionSetupResponse::parse(&b).unwrap().session_flags, 0x0001);
    // The NTLM challenge leg: STATUS_MORE_PROCESSING_REQUIRED with a session setup body (not
    // an error body), SessionId 0x9b71db6b00000006.
    let (cmd, resp, mid, sid, _, st, _) = header_of(SESSION_SETUP_RESP_MORE);
    assert_eq!((cmd, resp, mid, sid, st), (command::SESSION_SETUP, true, 2, 0x9b71_db6b_0000_0006, status::MORE_PROCESSING_REQUIRED));
    assert_eq!(SessionSetupResponse::parse(&hex(SESSION_SETUP_RESP_MORE)).unwrap().session_flags, 0);
    assert_eq!(SessionSetupResponse::parse(&hex(SESSION_SETUP_RESP)[..65]), Err(Error::Truncated));
}

#[test]
fn tree_connect_request_share_path_from_capture() {
    assert_eq!(
        header_of(TREE_CONNECT_REQ),
        (command::TREE_CONNECT, false, 3, 0x9b71_db6b_0000_0005, Some(0), status::SUCCESS, true)
    );
    let t = TreeConnectRequest::parse(&hex(TREE_CONNECT_REQ)).unwrap();
    // tshark: Flags 0x0000, Tree: \\127.0.0.1\PUBLIC (Blob Offset 0x48, Length 36).
    assert_eq!(t, TreeConnectRequest { flags: 0, path: r"\\127.0.0.1\PUBLIC".to_string() });
    // A PathLength reaching past the message is refused, not a panic.
    let mut b = hex(TREE_CONNECT_REQ);
    b[64 + 6] = 38;
    assert_eq!(TreeConnectRequest::parse(&b), Err(Error::Truncated));
    // A PathOffset inside the fixed part is refused.
    let mut b = hex(TREE_CONNECT_REQ);
    b[64 + 4] = 0x40;
    assert_eq!(TreeConnectRequest::parse(&b), Err(Error::BadOffset));
}

#[test]
fn tree_connect_response_tree_id_from_capture() {
    // The TreeId the server assigns is in the response header: 1.
    assert_eq!(
        header_of(TREE_CONNECT_RESP),
        (command::TREE_CONNECT, true, 3, 0x9b71_db6b_0000_0005, Some(1), status::SUCCESS, true)
    );
    let r = TreeConnectResponse::parse(&hex(TREE_CONNECT_RESP)).unwrap();
    // tshark: Share Type disk (0x01), Share flags 0x00000830, Capabilities 0, Access Mask 0x001f01ff.
    assert_eq!(r, TreeConnectResponse { share_type: 1, share_flags: 0x0000_0830, capabilities: 0, maximal_access: 0x001f_01ff });
    assert_eq!(TreeConnectResponse::parse(&hex(TREE_CONNECT_RESP)[..75]), Err(Error::Truncated));
}

#[test]
fn close_request_and_response_from_capture() {
    assert_eq!(header_of(CLOSE_REQ), (command::CLOSE, false, 74, 0x9b71_db6b_0000_0005, Some(1), status::SUCCESS, true));
    let c = CloseRequest::parse(&hex(CLOSE_REQ)).unwrap();
    // tshark: Close Flags 0x0000, File Id 000000cd-0000-0000-1300-000000000000 (its GUID
    // rendering of the bytes cd 00 00 00 00 00 00 00 13 00 ...).
    assert_eq!(c.flags, 0);
    assert_eq!(c.file_id, [0xcd, 0, 0, 0, 0, 0, 0, 0, 0x13, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(header_of(CLOSE_RESP), (command::CLOSE, true, 74, 0x9b71_db6b_0000_0005, Some(1), status::SUCCESS, true));
    assert_eq!(parse_close_response(&hex(CLOSE_RESP)), Ok(()));
    // Request and response bodies are not interchangeable.
    assert_eq!(parse_close_response(&hex(CLOSE_REQ)), Err(Error::BadStructureSize));
    assert_eq!(CloseRequest::parse(&hex(CLOSE_RESP)), Err(Error::BadStructureSize));
    assert_eq!(CloseRequest::parse(&hex(CLOSE_REQ)[..80]), Err(Error::Truncated));
}

#[test]
fn tree_disconnect_from_capture() {
    assert_eq!(
        header_of(TREE_DISCONNECT_REQ),
        (command::TREE_DISCONNECT, false, 111, 0x5c12_2c2c_0000_0001, Some(3), 4, false)
    );
    assert_eq!(
        header_of(TREE_DISCONNECT_RESP),
        (command::TREE_DISCONNECT, true, 111, 0x5c12_2c2c_0000_0001, Some(3), status::SUCCESS, false)
    );
    assert_eq!(parse_empty_body(&hex(TREE_DISCONNECT_REQ)), Ok(()));
    assert_eq!(parse_empty_body(&hex(TREE_DISCONNECT_RESP)), Ok(()));
    assert_eq!(parse_empty_body(&hex(CLOSE_REQ)), Err(Error::BadStructureSize));
    assert_eq!(parse_empty_body(&hex(TREE_DISCONNECT_REQ)[..65]), Err(Error::Truncated));
}

#[test]
fn logoff_from_capture() {
    assert_eq!(header_of(LOGOFF_REQ), (command::LOGOFF, false, 3, 0x9b71_db6b_0000_0006, Some(0), status::SUCCESS, false));
    assert_eq!(header_of(LOGOFF_RESP), (command::LOGOFF, true, 3, 0x9b71_db6b_0000_0006, Some(0), status::SUCCESS, false));
    assert_eq!(parse_empty_body(&hex(LOGOFF_REQ)), Ok(()));
    assert_eq!(parse_empty_body(&hex(LOGOFF_RESP)), Ok(()));
    assert_eq!(command::counter_name(command::LOGOFF, true), "LOGOFF.response");
}

#[test]
fn command_names() {
    assert_eq!(command::counter_name(command::WRITE, false), "WRITE.request");
    assert_eq!(command::counter_name(command::OPLOCK_BREAK, true), "OPLOCK_BREAK.response");
    assert_eq!(command::counter_name(0x13, true), "UNKNOWN.response");
    assert_eq!(body_needed(command::QUERY_DIRECTORY, true), Some(8));
}

#[test]
fn parsers_never_panic_on_prefixes() {
    for m in [
        NEGOTIATE_REQ, NEGOTIATE_RESP, CREATE_REQ, CREATE_RESP, READ_REQ, READ_RESP_HEAD, WRITE_REQ_HEAD, WRITE_RESP,
        SESSION_SETUP_REQ, SESSION_SETUP_RESP, TREE_CONNECT_REQ, TREE_CONNECT_RESP, CLOSE_REQ, CLOSE_RESP, LOGOFF_REQ,
        TREE_DISCONNECT_REQ,
    ] {
        let b = hex(m);
        for n in 0..b.len() {
            let p = &b[..n];
            let _ = HeaderRepr::parse(p);
            let _ = NegotiateRequest::parse(p);
            let _ = NegotiateResponse::parse(p);
            let _ = CreateRequest::parse(p);
            let _ = CreateResponse::parse(p);
            let _ = ReadRequest::parse(p);
            let _ = ReadResponse::parse(p);
            let _ = WriteRequest::parse(p);
            let _ = TreeConnectRequest::parse(p);
            let _ = TreeConnectResponse::parse(p);
            let _ = SessionSetupRequest::parse(p);
            let _ = SessionSetupResponse::parse(p);
            let _ = CloseRequest::parse(p);
            let _ = parse_close_response(p);
            let _ = parse_empty_body(p);
            let _ = CompressionTransform::parse(p);
        }
    }
}

/// Every encoder writes back the capture bytes its parser read (the signature aside: the
/// encoders leave it zero).
#[test]
fn emit_gives_back_the_capture_bytes() {
    fn check(m: &str, emit: fn(&[u8], &HeaderRepr) -> Vec<u8>) {
        let b = hex(m);
        let e = emit(&b, &HeaderRepr::parse(&b).unwrap());
        assert_eq!((&e[..48], &e[64..]), (&b[..48], &b[64..]), "{m}");
        assert_eq!(e[48..64], [0; 16]);
    }
    check(READ_REQ, |b, h| ReadRequest::parse(b).unwrap().emit(h));
    check(READ_RESP_HEAD, |b, h| ReadResponse::parse(b).unwrap().emit(h));
    check(WRITE_REQ_HEAD, |b, h| WriteRequest::parse(b).unwrap().emit(h));
    check(WRITE_RESP, |b, h| WriteResponse::parse(b).unwrap().emit(h));
    check(TREE_CONNECT_REQ, |b, h| TreeConnectRequest::parse(b).unwrap().emit(h));
    check(TREE_CONNECT_RESP, |b, h| TreeConnectResponse::parse(b).unwrap().emit(h));
    check(CLOSE_REQ, |b, h| CloseRequest::parse(b).unwrap().emit(h));
    check(CLOSE_RESP, |_, h| emit_close_response(h));
    // The security buffer is passed through as is.
    fn blob(b: &[u8], at: usize) -> Vec<u8> {
        let off = usize::from(u16::from_le_bytes([b[at], b[at + 1]]));
        b[off..off + usize::from(u16::from_le_bytes([b[at + 2], b[at + 3]]))].to_vec()
    }
    check(NEGOTIATE_REQ, |b, h| NegotiateRequest::parse(b).unwrap().emit(h));
    check(NEGOTIATE_RESP, |b, h| NegotiateResponse::parse(b).unwrap().emit(h, &blob(b, 64 + 56)));
    check(SESSION_SETUP_REQ, |b, h| SessionSetupRequest::parse(b).unwrap().emit(h, &blob(b, 64 + 12)));
    check(SESSION_SETUP_RESP, |b, h| SessionSetupResponse::parse(b).unwrap().emit(h, &blob(b, 64 + 4)));
}

/// CREATE without create contexts: parse(emit(x)) == x.
#[test]
fn create_round_trip() {
    let h = HeaderRepr { command: command::CREATE, credit: 1, message_id: 4, tree_id: Some(1), session_id: 9, reserved: 0xfeff, ..Default::default() };
    let c = CreateRequest {
        security_flags: 0,
        requested_oplock_level: 0,
        impersonation_level: 2,
        smb_create_flags: 0,
        desired_access: 0x0012_019f,
        file_attributes: 0x80,
        share_access: 7,
        create_disposition: 3,
        create_options: 0x40,
        name: r"Slab\extent-0001.dat".to_string(),
    };
    let m = c.emit(&h);
    assert_eq!(m.len(), 64 + 56 + 2 * c.name.len());
    assert_eq!(CreateRequest::parse(&m), Ok(c));
    let r = CreateResponse {
        oplock_level: 0,
        flags: 0,
        create_action: 1,
        creation_time: 1,
        last_access_time: 2,
        last_write_time: 3,
        change_time: 4,
        allocation_size: 1 << 20,
        end_of_file: 1000,
        file_attributes: 0x80,
        file_id: FILE_ID,
    };
    let m = r.emit(&HeaderRepr { flags: flags::SERVER_TO_REDIR, ..h });
    assert_eq!((m.len(), CreateResponse::parse(&m)), (64 + 88, Ok(r)));
}

/// Over SMB Direct: channel info in the Buffer, no inline data; parse(emit(x)) == x.
#[test]
fn rdma_read_write_requests_round_trip() {
    let h = HeaderRepr { command: command::READ, credit: 1, message_id: 9, tree_id: Some(5), session_id: 7, reserved: 0xfeff, ..Default::default() };
    let descs = vec![
        BufferDescriptorV1 { offset: 0xffff_c000_0000_0000, token: 0x1235, length: 0x8000 },
        BufferDescriptorV1 { offset: 0xffff_c000_0000_8000, token: 0x1235, length: 0x8000 },
    ];
    let r = ReadRequest { padding: 0, flags: 0, length: 0x10000, offset: 1 << 20, file_id: [3; 16], minimum_count: 0x10000, channel: channel::RDMA_V1_INVALIDATE, remaining_bytes: 0, read_channel_info: descs.clone() };
    let m = r.emit(&h);
    assert_eq!(m.len(), 64 + 48 + 32);
    assert_eq!((ReadRequest::parse(&m), HeaderRepr::parse(&m)), (Ok(r), Ok(h)));
    let h = HeaderRepr { command: command::WRITE, ..h };
    let w = WriteRequest { data_offset: 0, length: 0, offset: 0, file_id: [4; 16], channel: channel::RDMA_V1, remaining_bytes: 0x10000, write_channel_info_offset: READ_WRITE_REQUEST_BUFFER_OFFSET, write_channel_info_length: 32, flags: 0, write_channel_info: descs };
    assert_eq!(WriteRequest::parse(&w.emit(&h)), Ok(w));
    let p = ReadResponse { data_offset: 0, data_length: 0, data_remaining: 0x10000 };
    let m = p.emit(&HeaderRepr { flags: flags::SERVER_TO_REDIR, ..h });
    assert_eq!((m.len(), ReadResponse::parse(&m)), (64 + 17, Ok(p)));
}

/// Hostile counts in a NEGOTIATE request (DialectCount 65,535, a cipher list of 30,000, a
/// NegotiateContextCount of 65,535): at most `MAX_LIST` entries of each are decoded.
#[test]
fn hostile_negotiate_counts_decode_at_most_max_list() {
    let h = HeaderRepr::parse(&hex(NEGOTIATE_REQ)).unwrap();
    let contexts = NegotiateContexts { types: vec![negotiate_context::ENCRYPTION_CAPABILITIES], ciphers: vec![2; 30_000], ..NegotiateContexts::default() };
    let req = NegotiateRequest { security_mode: 1, capabilities: 0, client_guid: [7; 16], dialects: vec![0x0311; 65_535], contexts: Some(contexts) };
    let mut m = req.emit(&h);
    // 200 more (empty, unknown) contexts after the one emitted, and a count of 65,535.
    m.resize(m.len().next_multiple_of(8), 0);
    for _ in 0..200 {
        m.extend_from_slice(&[0xff, 0x00, 0, 0, 0, 0, 0, 0]);
    }
    m[HEADER_LEN + 32..HEADER_LEN + 34].copy_from_slice(&u16::MAX.to_le_bytes());
    let n = NegotiateRequest::parse(&m).unwrap();
    assert_eq!(n.dialects.len(), MAX_LIST);
    let c = n.contexts.unwrap();
    assert_eq!((c.ciphers.len(), c.types.len()), (MAX_LIST, MAX_LIST));
}
