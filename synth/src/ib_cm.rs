//! InfiniBand Communication Manager MADs (IBTA vol. 1 §12.6) as RDMA CM sends them to
//! set up a RoCEv2 reliable connection: ConnectRequest (REQ), ConnectReply (REP),
//! ReadyToUse (RTU), and DisconnectRequest/Reply (DREQ/DREP) at the end. Each is a
//! 256-byte MAD (24-byte common header, §13.4.2) to QP1, the General Services Interface.
//! The service ID and the private data follow the RDMA IP CM Service annex (A11): the
//! service ID is 0x0000_0000_0106_<port> (ULP "IP", protocol TCP 0x06, the SMB Direct
//! port 445), and REQ private data starts with the 36-byte IP CM header.
//! Multi-byte fields are big-endian, as everywhere in IBA.

use std::net::Ipv4Addr;

pub const MAD_LEN: usize = 256;
const MAD_HEADER_LEN: usize = 24;
/// MAD header values (§13.4.2): base version 1, class CM (0x07) version 2, method Send.
const BASE_VERSION: u8 = 1;
const MGMT_CLASS_CM: u8 = 0x07;
const CM_CLASS_VERSION: u8 = 2;
const METHOD_SEND: u8 = 0x03;

/// CM attribute IDs (§12.6.1, table 98).
pub mod attribute {
    pub const CONNECT_REQUEST: u16 = 0x0010;
    pub const CONNECT_REPLY: u16 = 0x0013;
    pub const READY_TO_USE: u16 = 0x0014;
    pub const DISCONNECT_REQUEST: u16 = 0x0015;
    pub const DISCONNECT_REPLY: u16 = 0x0016;

    pub fn name(id: u16) -> &'static str {
        match id {
            CONNECT_REQUEST => "ConnectRequest",
            CONNECT_REPLY => "ConnectReply",
            READY_TO_USE => "ReadyToUse",
            DISCONNECT_REQUEST => "DisconnectRequest",
            DISCONNECT_REPLY => "DisconnectReply",
            _ => "other",
        }
    }
}

/// RDMA IP CM service ID for a TCP port (annex A11.2.1).
pub fn ip_service_id(port: u16) -> u64 {
    0x0000_0000_0106_0000 | u64::from(port)
}

/// IPv4-mapped GID (::ffff:a.b.c.d), how RoCEv2 names an IPv4 port (annex A17.4.5).
pub fn ipv4_gid(ip: Ipv4Addr) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip.octets());
    g
}

/// Modified EUI-64 from a MAC, the usual node GUID of a RoCE adapter.
pub fn guid_from_mac(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

/// Path MTU encoding (§9.7.2 / table of IBA MTU values).
pub fn mtu_code(mtu: u64) -> u8 {
    match mtu {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

fn mad(attribute_id: u16, transaction_id: u64) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    m[0] = BASE_VERSION;
    m[1] = MGMT_CLASS_CM;
    m[2] = CM_CLASS_VERSION;
    m[3] = METHOD_SEND;
    // 4..6 Status, 6..8 ClassSpecific: 0
    m[8..16].copy_from_slice(&transaction_id.to_be_bytes());
    m[16..18].copy_from_slice(&attribute_id.to_be_bytes());
    // 18..20 Reserved, 20..24 AttributeModifier: 0
    m
}

fn put24(m: &mut [u8], at: usize, v: u32, low: u8) {
    m[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
    m[at + 3] = low;
}

/// What one end of the connection says about itself.
#[derive(Clone, Copy, Debug)]
pub struct End {
    pub comm_id: u32,
    pub qpn: u32,
    pub start_psn: u32,
    pub guid: u64,
    pub ip: Ipv4Addr,
    pub port: u16,
}

/// Responder resources / initiator depth: outstanding RDMA Reads each way.
const RDMA_READ_DEPTH: u8 = 16;

/// ConnectRequest (§12.6.5) from `client` to the service on `server`.
pub fn connect_request(tid: u64, client: &End, server: &End, mtu: u64) -> [u8; MAD_LEN] {
    let mut m = mad(attribute::CONNECT_REQUEST, tid);
    let d = &mut m[MAD_HEADER_LEN..];
    d[0..4].copy_from_slice(&client.comm_id.to_be_bytes()); // LocalCommID
    d[8..16].copy_from_slice(&ip_service_id(server.port).to_be_bytes()); // ServiceID
    d[16..24].copy_from_slice(&client.guid.to_be_bytes()); // LocalCAGUID
                                                           // 28..32 LocalQ_Key: 0 (RC)
    put24(d, 32, client.qpn, RDMA_READ_DEPTH); // LocalQPN, ResponderResources
    put24(d, 36, 0, RDMA_READ_DEPTH); // LocalEECN, InitiatorDepth
                                      // RemoteEECN, RemoteCMResponseTimeout 20 (5 bits), TransportServiceType RC (2 bits),
                                      // EndToEndFlowControl 1.
    put24(d, 40, 0, (20 << 3) | 1);
    put24(d, 44, client.start_psn, (20 << 3) | 7); // StartingPSN, LocalCMResponseTimeout, RetryCount
    d[48..50].copy_from_slice(&0xffffu16.to_be_bytes()); // PartitionKey: default
    d[50] = (mtu_code(mtu) << 4) | 7; // PathPacketPayloadMTU, RDCExists 0, RNRRetryCount 7
    d[51] = 15 << 4; // MaxCMRetries, SRQ 0, ExtendedTransportType 0
    d[52..54].copy_from_slice(&0xffffu16.to_be_bytes()); // PrimaryLocalPortLID: permissive
    d[54..56].copy_from_slice(&0xffffu16.to_be_bytes()); // PrimaryRemotePortLID
    d[56..72].copy_from_slice(&ipv4_gid(client.ip)); // PrimaryLocalPortGID
    d[72..88].copy_from_slice(&ipv4_gid(server.ip)); // PrimaryRemotePortGID
                                                     // 88..92 PrimaryFlowLabel, PrimaryPacketRate: 0; 92 PrimaryTrafficClass 0
    d[93] = 64; // PrimaryHopLimit
                // 94 PrimarySL 0, PrimarySubnetLocal 0 (routed, RoCEv2)
    d[95] = 18 << 3; // PrimaryLocalACKTimeout
                     // 96..140 alternate path: none
                     // 140..232 PrivateData: the IP CM header (annex A11.2.4), then nothing.
    let p = &mut d[140..];
    p[0] = 0x00; // MajV 0, MinV 0
    p[1] = 4 << 4; // IPV 4
    p[2..4].copy_from_slice(&client.port.to_be_bytes()); // SrcPort
    p[16..20].copy_from_slice(&client.ip.octets()); // SrcIP (IPv4 in the last 4 bytes)
    p[32..36].copy_from_slice(&server.ip.octets()); // DstIP
    m
}

/// ConnectReply (§12.6.8) from `server` to `client`.
pub fn connect_reply(tid: u64, server: &End, client: &End) -> [u8; MAD_LEN] {
    let mut m = mad(attribute::CONNECT_REPLY, tid);
    let d = &mut m[MAD_HEADER_LEN..];
    d[0..4].copy_from_slice(&server.comm_id.to_be_bytes()); // LocalCommID
    d[4..8].copy_from_slice(&client.comm_id.to_be_bytes()); // RemoteCommID
                                                            // 8..12 LocalQ_Key 0
    put24(d, 12, server.qpn, 0); // LocalQPN
    put24(d, 16, 0, 0); // LocalEEContext
    put24(d, 20, server.start_psn, 0); // StartingPSN
    d[24] = RDMA_READ_DEPTH; // ResponderResources
    d[25] = RDMA_READ_DEPTH; // InitiatorDepth
    d[26] = (15 << 3) | 1; // TargetACKDelay, FailoverAccepted 0, EndToEndFlowControl 1
    d[27] = 7 << 5; // RNRRetryCount 7, SRQ 0
    d[28..36].copy_from_slice(&server.guid.to_be_bytes()); // LocalCAGUID
    m
}

/// ReadyToUse (§12.6.9), and DisconnectReply (§12.6.11) which has the same two IDs.
pub fn ready_to_use(tid: u64, local: &End, remote: &End) -> [u8; MAD_LEN] {
    ids_only(attribute::READY_TO_USE, tid, local, remote)
}

pub fn disconnect_reply(tid: u64, local: &End, remote: &End) -> [u8; MAD_LEN] {
    ids_only(attribute::DISCONNECT_REPLY, tid, local, remote)
}

fn ids_only(attr: u16, tid: u64, local: &End, remote: &End) -> [u8; MAD_LEN] {
    let mut m = mad(attr, tid);
    m[24..28].copy_from_slice(&local.comm_id.to_be_bytes());
    m[28..32].copy_from_slice(&remote.comm_id.to_be_bytes());
    m
}

/// DisconnectRequest (§12.6.10): the IDs and the remote QPN.
pub fn disconnect_request(tid: u64, local: &End, remote: &End) -> [u8; MAD_LEN] {
    let mut m = ids_only(attribute::DISCONNECT_REQUEST, tid, local, remote);
    put24(&mut m, 32, remote.qpn, 0);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(qpn: u32, ip: [u8; 4]) -> End {
        End {
            comm_id: 0x1234_5678,
            qpn,
            start_psn: 0xABCDEF,
            guid: guid_from_mac([2, 0x53, 0x32, 0x44, 0, 1]),
            ip: Ipv4Addr::from(ip),
            port: 445,
        }
    }

    #[test]
    fn request_fields_sit_where_the_spec_puts_them() {
        let c = end(0x00_0123, [198, 18, 0, 1]);
        let s = end(0x00_0456, [198, 18, 0, 2]);
        let m = connect_request(7, &c, &s, 1024);
        assert_eq!(&m[..4], &[1, 7, 2, 3]);
        assert_eq!(u16::from_be_bytes([m[16], m[17]]), 0x0010);
        assert_eq!(
            u64::from_be_bytes(m[32..40].try_into().unwrap()),
            0x0106_01BD
        );
        assert_eq!(&m[56..60], &[0x00, 0x01, 0x23, 16]);
        assert_eq!(&m[68..71], &[0xAB, 0xCD, 0xEF]);
        assert_eq!(m[74] >> 4, 3, "MTU 1024");
        assert_eq!(&m[80 + 10..80 + 16], &[0xff, 0xff, 198, 18, 0, 1]);
        assert_eq!(&m[164..166], &[0x00, 0x40]);
        assert_eq!(
            guid_from_mac([2, 0x53, 0x32, 0x44, 0, 1]),
            0x0053_32ff_fe44_0001
        );
        let r = connect_reply(7, &s, &c);
        assert_eq!(&r[36..39], &[0x00, 0x04, 0x56]);
    }
}
