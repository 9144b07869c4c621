//! InfiniBand Communication Management MADs (IBTA vol. 1 §12.6, §13.4): the ConnectRequest
//! (REQ) and ConnectReply (REP) that set up an RC connection over QP1, from which smbwire learns
//! which queue pairs carry SMB Direct (RDMA CM service ID, port 445) and their starting PSNs.
//!
//! Layout: 24-byte MAD common header (BaseVersion, MgmtClass, ClassVersion, Method, Status,
//! ClassSpecific, TransactionID, AttributeID, Reserved, AttributeModifier), then the CM message.
//! Offsets below are relative to the CM message (IBTA Table 99 REQ, Table 110 REP).

use std::net::{IpAddr, Ipv4Addr};

pub const MAD_HEADER_LEN: usize = 24;
/// A CM MAD is 256 bytes: the common header and a 232-byte message (IBTA §13.4.2).
pub const MAD_LEN: usize = 256;
/// MAD header values (§13.4.2): base version 1, CM class version 2, method Send.
pub const BASE_VERSION: u8 = 1;
/// Management class of Communication Management (IBTA Table 145).
pub const MGMT_CLASS_CM: u8 = 0x07;
pub const CM_CLASS_VERSION: u8 = 2;
pub const METHOD_SEND: u8 = 0x03;

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
pub const ATTR_CONNECT_REQUEST: u16 = attribute::CONNECT_REQUEST;
pub const ATTR_CONNECT_REPLY: u16 = attribute::CONNECT_REPLY;
/// RDMA CM IP-based service IDs (IBTA Annex A11): 0x0000_0000_0106_PPPP is the TCP port space.
pub const SERVICE_ID_PS_TCP: u64 = 0x0000_0000_0106_0000;
pub const SERVICE_ID_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;

mod req {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const SERVICE_ID: usize = 8;
    pub const LOCAL_CA_GUID: usize = 16;
    /// LocalQPN, then ResponderResources.
    pub const LOCAL_QPN: usize = 32;
    /// LocalEECN, then InitiatorDepth.
    pub const LOCAL_EECN: usize = 36;
    /// RemoteEECN, then RemoteCMResponseTimeout, TransportServiceType, EndToEndFlowControl.
    pub const REMOTE_EECN: usize = 40;
    /// StartingPSN, then LocalCMResponseTimeout, RetryCount.
    pub const STARTING_PSN: usize = 44;
    pub const LEN: usize = 47;
    pub const PARTITION_KEY: usize = 48;
    /// PathPacketPayloadMTU, RDCExists, RNRRetryCount.
    pub const MTU: usize = 50;
    /// MaxCMRetries, SRQ, ExtendedTransportType.
    pub const MAX_CM_RETRIES: usize = 51;
    pub const PRIMARY_LOCAL_PORT_LID: usize = 52;
    pub const PRIMARY_REMOTE_PORT_LID: usize = 54;
    pub const PRIMARY_LOCAL_PORT_GID: usize = 56;
    pub const PRIMARY_REMOTE_PORT_GID: usize = 72;
    pub const PRIMARY_HOP_LIMIT: usize = 93;
    pub const PRIMARY_LOCAL_ACK_TIMEOUT: usize = 95;
    pub const PRIVATE_DATA: usize = 140;
}
mod rep {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const LOCAL_QPN: usize = 12;
    pub const LOCAL_EE_CONTEXT: usize = 16;
    pub const STARTING_PSN: usize = 20;
    pub const LEN: usize = 23;
    pub const RESPONDER_RESOURCES: usize = 24;
    pub const INITIATOR_DEPTH: usize = 25;
    /// TargetACKDelay, FailoverAccepted, EndToEndFlowControl.
    pub const TARGET_ACK_DELAY: usize = 26;
    /// RNRRetryCount, SRQ.
    pub const RNR_RETRY_COUNT: usize = 27;
    pub const LOCAL_CA_GUID: usize = 28;
}
/// RTU, DREQ and DREP start with LocalCommID and RemoteCommID; DREQ then has the RemoteQPN.
mod ids {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const REMOTE_QPN: usize = 8;
}
/// The RDMA IP CM header at the start of a REQ's private data (IBTA annex A11.2.4).
mod ip_cm {
    /// MajV, MinV.
    pub const VERSION: usize = 0;
    /// IPV in the high nibble.
    pub const IP_VERSION: usize = 1;
    pub const SRC_PORT: usize = 2;
    /// Source and destination addresses, 16 bytes each; IPv4 in the last 4.
    pub const SRC_IP: usize = 4;
    pub const DST_IP: usize = 20;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    Request { local_comm_id: u32, service_id: u64, local_qpn: u32, starting_psn: u32 },
    Reply { local_comm_id: u32, remote_comm_id: u32, local_qpn: u32, starting_psn: u32 },
    /// Another CM attribute (MRA, REJ, RTU, DREQ, DREP, ...).
    Other(u16),
}

impl Message {
    /// The RDMA CM port of a REQ's IP-based TCP service ID.
    pub fn tcp_port(&self) -> Option<u16> {
        match self {
            Message::Request { service_id, .. } if service_id & SERVICE_ID_PS_MASK == SERVICE_ID_PS_TCP => {
                Some((service_id & 0xffff) as u16)
            }
            _ => None,
        }
    }
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4).map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}
fn be24(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 3).map(|s| (u32::from(s[0]) << 16) | (u32::from(s[1]) << 8) | u32::from(s[2]))
}

/// Parses a MAD (the UD payload on QP1). `None` when it is not a CM MAD or is truncated.
pub fn parse(mad: &[u8]) -> Option<Message> {
    if mad.len() < MAD_HEADER_LEN || mad[1] != MGMT_CLASS_CM {
        return None;
    }
    let attr = u16::from_be_bytes([mad[16], mad[17]]);
    let m = &mad[MAD_HEADER_LEN..];
    match attr {
        ATTR_CONNECT_REQUEST if m.len() >= req::LEN => Some(Message::Request {
            local_comm_id: be32(m, req::LOCAL_COMM_ID)?,
            service_id: u64::from_be_bytes(m.get(req::SERVICE_ID..req::SERVICE_ID + 8)?.try_into().ok()?),
            local_qpn: be24(m, req::LOCAL_QPN)?,
            starting_psn: be24(m, req::STARTING_PSN)?,
        }),
        ATTR_CONNECT_REPLY if m.len() >= rep::LEN => Some(Message::Reply {
            local_comm_id: be32(m, rep::LOCAL_COMM_ID)?,
            remote_comm_id: be32(m, rep::REMOTE_COMM_ID)?,
            local_qpn: be24(m, rep::LOCAL_QPN)?,
            starting_psn: be24(m, rep::STARTING_PSN)?,
        }),
        ATTR_CONNECT_REQUEST | ATTR_CONNECT_REPLY => None,
        a => Some(Message::Other(a)),
    }
}

/// RDMA IP CM service ID for a TCP port (annex A11.2.1).
pub fn ip_service_id(port: u16) -> u64 {
    SERVICE_ID_PS_TCP | u64::from(port)
}

/// IPv4-mapped GID (::ffff:a.b.c.d), how RoCE names an IPv4-configured port (annex A17.4.5).
pub fn ipv4_gid(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// The GID of a RoCE port with address `ip`: IPv4-mapped for IPv4, the address itself for
/// IPv6 (annex A17.4.5).
pub fn ip_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => ipv4_gid(v4),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Modified EUI-64 from a MAC, the usual node GUID of a RoCE adapter.
pub fn guid_from_mac(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]])
}

/// Path MTU encoding (§9.7.2, the IBA MTU values); 4096 for anything larger than 2048.
pub fn mtu_code(mtu: u64) -> u8 {
    match mtu {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

/// What one end of an RC connection says about itself in the CM exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct End {
    pub comm_id: u32,
    pub qpn: u32,
    pub start_psn: u32,
    pub guid: u64,
    pub ip: IpAddr,
    /// The RDMA CM port: the client's source port, or the service's port.
    pub port: u16,
}

/// Responder resources / initiator depth: outstanding RDMA Reads each way.
const RDMA_READ_DEPTH: u8 = 16;

/// The common MAD header (§13.4.2) of a CM Send with `attribute_id`, the rest zero.
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

/// A 24-bit field followed by one byte of other fields.
fn put24(m: &mut [u8], at: usize, v: u32, low: u8) {
    m[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
    m[at + 3] = low;
}

/// ConnectRequest (§12.6.5) from `client` to the IP-based service on `server.port`, as RDMA
/// CM sends it for a RoCE RC connection (the synthesizer's REQ).
pub fn connect_request(tid: u64, client: &End, server: &End, mtu: u64) -> [u8; MAD_LEN] {
    let mut m = mad(attribute::CONNECT_REQUEST, tid);
    let d = &mut m[MAD_HEADER_LEN..];
    d[req::LOCAL_COMM_ID..][..4].copy_from_slice(&client.comm_id.to_be_bytes());
    d[req::SERVICE_ID..][..8].copy_from_slice(&ip_service_id(server.port).to_be_bytes());
    d[req::LOCAL_CA_GUID..][..8].copy_from_slice(&client.guid.to_be_bytes());
    // 28..32 LocalQ_Key: 0 (RC)
    put24(d, req::LOCAL_QPN, client.qpn, RDMA_READ_DEPTH);
    put24(d, req::LOCAL_EECN, 0, RDMA_READ_DEPTH);
    // RemoteCMResponseTimeout 20 (5 bits), TransportServiceType RC (2 bits), EndToEndFlowControl 1.
    put24(d, req::REMOTE_EECN, 0, (20 << 3) | 1);
    // LocalCMResponseTimeout 20, RetryCount 7.
    put24(d, req::STARTING_PSN, client.start_psn, (20 << 3) | 7);
    d[req::PARTITION_KEY..][..2].copy_from_slice(&super::ib::DEFAULT_P_KEY.to_be_bytes());
    d[req::MTU] = (mtu_code(mtu) << 4) | 7; // RDCExists 0, RNRRetryCount 7
    d[req::MAX_CM_RETRIES] = 15 << 4; // SRQ 0, ExtendedTransportType 0
    // LIDs: permissive (routed, RoCE).
    d[req::PRIMARY_LOCAL_PORT_LID..][..2].copy_from_slice(&0xffffu16.to_be_bytes());
    d[req::PRIMARY_REMOTE_PORT_LID..][..2].copy_from_slice(&0xffffu16.to_be_bytes());
    d[req::PRIMARY_LOCAL_PORT_GID..][..16].copy_from_slice(&ip_gid(client.ip));
    d[req::PRIMARY_REMOTE_PORT_GID..][..16].copy_from_slice(&ip_gid(server.ip));
    // 88..92 PrimaryFlowLabel, PrimaryPacketRate: 0; 92 PrimaryTrafficClass 0
    d[req::PRIMARY_HOP_LIMIT] = 64;
    // 94 PrimarySL 0, PrimarySubnetLocal 0 (routed)
    d[req::PRIMARY_LOCAL_ACK_TIMEOUT] = 18 << 3;
    // 96..140 alternate path: none. PrivateData: the IP CM header, then nothing.
    let p = &mut d[req::PRIVATE_DATA..];
    p[ip_cm::VERSION] = 0x00; // MajV 0, MinV 0
    p[ip_cm::SRC_PORT..][..2].copy_from_slice(&client.port.to_be_bytes());
    match (client.ip, server.ip) {
        (IpAddr::V6(c), IpAddr::V6(s)) => {
            p[ip_cm::IP_VERSION] = 6 << 4;
            p[ip_cm::SRC_IP..][..16].copy_from_slice(&c.octets());
            p[ip_cm::DST_IP..][..16].copy_from_slice(&s.octets());
        }
        _ => {
            // IPv4 in the last 4 bytes of each 16 (an IPv6 end paired with IPv4 is not a
            // connection a port can make: its IPv4-mapped form).
            let v4 = |ip: IpAddr| match ip {
                IpAddr::V4(a) => a.octets(),
                IpAddr::V6(a) => a.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED).octets(),
            };
            p[ip_cm::IP_VERSION] = 4 << 4;
            p[ip_cm::SRC_IP + 12..][..4].copy_from_slice(&v4(client.ip));
            p[ip_cm::DST_IP + 12..][..4].copy_from_slice(&v4(server.ip));
        }
    }
    m
}

/// ConnectReply (§12.6.8) from `server` to `client`.
pub fn connect_reply(tid: u64, server: &End, client: &End) -> [u8; MAD_LEN] {
    let mut m = mad(attribute::CONNECT_REPLY, tid);
    let d = &mut m[MAD_HEADER_LEN..];
    d[rep::LOCAL_COMM_ID..][..4].copy_from_slice(&server.comm_id.to_be_bytes());
    d[rep::REMOTE_COMM_ID..][..4].copy_from_slice(&client.comm_id.to_be_bytes());
    // 8..12 LocalQ_Key 0
    put24(d, rep::LOCAL_QPN, server.qpn, 0);
    put24(d, rep::LOCAL_EE_CONTEXT, 0, 0);
    put24(d, rep::STARTING_PSN, server.start_psn, 0);
    d[rep::RESPONDER_RESOURCES] = RDMA_READ_DEPTH;
    d[rep::INITIATOR_DEPTH] = RDMA_READ_DEPTH;
    d[rep::TARGET_ACK_DELAY] = (15 << 3) | 1; // FailoverAccepted 0, EndToEndFlowControl 1
    d[rep::RNR_RETRY_COUNT] = 7 << 5; // SRQ 0
    d[rep::LOCAL_CA_GUID..][..8].copy_from_slice(&server.guid.to_be_bytes());
    m
}

/// ReadyToUse (§12.6.9): the two communication IDs.
pub fn ready_to_use(tid: u64, local: &End, remote: &End) -> [u8; MAD_LEN] {
    ids_only(attribute::READY_TO_USE, tid, local, remote)
}

/// DisconnectReply (§12.6.11), which has the same two IDs as RTU.
pub fn disconnect_reply(tid: u64, local: &End, remote: &End) -> [u8; MAD_LEN] {
    ids_only(attribute::DISCONNECT_REPLY, tid, local, remote)
}

fn ids_only(attr: u16, tid: u64, local: &End, remote: &End) -> [u8; MAD_LEN] {
    let mut m = mad(attr, tid);
    let d = &mut m[MAD_HEADER_LEN..];
    d[ids::LOCAL_COMM_ID..][..4].copy_from_slice(&local.comm_id.to_be_bytes());
    d[ids::REMOTE_COMM_ID..][..4].copy_from_slice(&remote.comm_id.to_be_bytes());
    m
}

/// DisconnectRequest (§12.6.10): the IDs and the remote QPN.
pub fn disconnect_request(tid: u64, local: &End, remote: &End) -> [u8; MAD_LEN] {
    let mut m = ids_only(attribute::DISCONNECT_REQUEST, tid, local, remote);
    put24(&mut m[MAD_HEADER_LEN..], ids::REMOTE_QPN, remote.qpn, 0);
    m
}

/// Builds a CM MAD (tests, synthesizer): 256 bytes like the real thing.
pub fn emit(msg: &Message) -> Vec<u8> {
    let (attr, body): (u16, Vec<(usize, Vec<u8>)>) = match *msg {
        Message::Request { local_comm_id, service_id, local_qpn, starting_psn } => (
            ATTR_CONNECT_REQUEST,
            vec![
                (req::LOCAL_COMM_ID, local_comm_id.to_be_bytes().to_vec()),
                (req::SERVICE_ID, service_id.to_be_bytes().to_vec()),
                (req::LOCAL_QPN, local_qpn.to_be_bytes()[1..].to_vec()),
                (req::STARTING_PSN, starting_psn.to_be_bytes()[1..].to_vec()),
            ],
        ),
        Message::Reply { local_comm_id, remote_comm_id, local_qpn, starting_psn } => (
            ATTR_CONNECT_REPLY,
            vec![
                (rep::LOCAL_COMM_ID, local_comm_id.to_be_bytes().to_vec()),
                (rep::REMOTE_COMM_ID, remote_comm_id.to_be_bytes().to_vec()),
                (rep::LOCAL_QPN, local_qpn.to_be_bytes()[1..].to_vec()),
                (rep::STARTING_PSN, starting_psn.to_be_bytes()[1..].to_vec()),
            ],
        ),
        Message::Other(a) => (a, vec![]),
    };
    let mut v = mad(attr, 0).to_vec();
    for (at, bytes) in body {
        v[MAD_HEADER_LEN + at..MAD_HEADER_LEN + at + bytes.len()].copy_from_slice(&bytes);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn request_and_reply_round_trip() {
        let req = Message::Request { local_comm_id: 7, service_id: SERVICE_ID_PS_TCP | 445, local_qpn: 0x11, starting_psn: 0xabcdef };
        assert_eq!(parse(&emit(&req)), Some(req));
        assert_eq!(req.tcp_port(), Some(445));
        let rep = Message::Reply { local_comm_id: 9, remote_comm_id: 7, local_qpn: 0x22, starting_psn: 0x123456 };
        assert_eq!(parse(&emit(&rep)), Some(rep));
        assert_eq!(rep.tcp_port(), None);
        // Not CM, truncated.
        let mut m = emit(&req);
        m[1] = 0x01;
        assert_eq!(parse(&m), None);
        assert_eq!(parse(&emit(&req)[..40]), None);
    }

    fn end(qpn: u32, ip: [u8; 4]) -> End {
        End {
            comm_id: 0x1234_5678,
            qpn,
            start_psn: 0xABCDEF,
            guid: guid_from_mac([2, 0x53, 0x32, 0x44, 0, 1]),
            ip: IpAddr::from(ip),
            port: 445,
        }
    }

    /// Over IPv6 the GIDs are the addresses, and the IP CM private data says IPV 6 and holds
    /// both addresses whole (annex A11.6.1); over IPv4, IPV 4 and the addresses in the last 4
    /// bytes of their fields, the GIDs IPv4-mapped.
    #[test]
    fn connect_request_names_ipv6_ends() {
        let v6 = |n: u16| IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, n));
        let (c, s) = (End { ip: v6(1), port: 49152, ..end(7, [0; 4]) }, End { ip: v6(2), ..end(9, [0; 4]) });
        let m = connect_request(1, &c, &s, 4096);
        let d = &m[MAD_HEADER_LEN..];
        assert_eq!(d[req::PRIMARY_LOCAL_PORT_GID..][..16], ip_gid(c.ip));
        assert_eq!(d[req::PRIMARY_REMOTE_PORT_GID..][..16], ip_gid(s.ip));
        assert_eq!(ip_gid(c.ip)[..2], [0x20, 0x01]);
        let p = &d[req::PRIVATE_DATA..];
        assert_eq!(p[ip_cm::IP_VERSION] >> 4, 6);
        assert_eq!(p[ip_cm::SRC_IP..][..16], ip_gid(c.ip));
        assert_eq!(p[ip_cm::DST_IP..][..16], ip_gid(s.ip));
        assert_eq!(u16::from_be_bytes([p[ip_cm::SRC_PORT], p[ip_cm::SRC_PORT + 1]]), 49152);
        let (c4, s4) = (end(7, [198, 18, 0, 1]), end(9, [198, 18, 0, 2]));
        let m = connect_request(1, &c4, &s4, 4096);
        let d = &m[MAD_HEADER_LEN..];
        let p = &d[req::PRIVATE_DATA..];
        assert_eq!(p[ip_cm::IP_VERSION] >> 4, 4);
        assert_eq!(p[ip_cm::SRC_IP..][..16], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 198, 18, 0, 1]);
        assert_eq!(d[req::PRIMARY_LOCAL_PORT_GID..][..16], ipv4_gid(Ipv4Addr::new(198, 18, 0, 1)));
    }

    /// The full REQ/REP/RTU/DREQ/DREP: fields where IBTA puts them, and what `parse` reads back.
    #[test]
    fn connect_messages_sit_where_the_spec_puts_them() {
        let c = end(0x00_0123, [198, 18, 0, 1]);
        let s = end(0x00_0456, [198, 18, 0, 2]);
        let m = connect_request(7, &c, &s, 1024);
        assert_eq!(&m[..4], &[1, 7, 2, 3]);
        assert_eq!(u16::from_be_bytes([m[16], m[17]]), 0x0010);
        assert_eq!(u64::from_be_bytes(m[32..40].try_into().unwrap()), 0x0106_01BD);
        assert_eq!(&m[56..60], &[0x00, 0x01, 0x23, 16]);
        assert_eq!(&m[68..71], &[0xAB, 0xCD, 0xEF]);
        assert_eq!(m[74] >> 4, 3, "MTU 1024");
        assert_eq!(&m[80 + 10..80 + 16], &[0xff, 0xff, 198, 18, 0, 1]);
        assert_eq!(&m[164..166], &[0x00, 0x40]);
        assert_eq!(guid_from_mac([2, 0x53, 0x32, 0x44, 0, 1]), 0x0053_32ff_fe44_0001);
        let req = parse(&m).unwrap();
        assert_eq!(req, Message::Request { local_comm_id: 0x1234_5678, service_id: 0x0106_01BD, local_qpn: 0x123, starting_psn: 0xABCDEF });
        assert_eq!(req.tcp_port(), Some(445));
        let r = connect_reply(7, &s, &c);
        assert_eq!(&r[36..39], &[0x00, 0x04, 0x56]);
        assert_eq!(parse(&r), Some(Message::Reply { local_comm_id: 0x1234_5678, remote_comm_id: 0x1234_5678, local_qpn: 0x456, starting_psn: 0xABCDEF }));
        assert_eq!(parse(&ready_to_use(7, &c, &s)), Some(Message::Other(attribute::READY_TO_USE)));
        let dreq = disconnect_request(8, &c, &s);
        assert_eq!((parse(&dreq), &dreq[32..35]), (Some(Message::Other(attribute::DISCONNECT_REQUEST)), &[0x00, 0x04, 0x56][..]));
        assert_eq!(parse(&disconnect_reply(8, &s, &c)), Some(Message::Other(attribute::DISCONNECT_REPLY)));
        assert_eq!(attribute::name(0x0014), "ReadyToUse");
    }

    proptest! {
        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse(&data);
        }
    }
}
