//! InfiniBand Communication Management MADs (IBTA vol. 1 §12.6, §13.4): the ConnectRequest
//! (REQ) and ConnectReply (REP) that set up an RC connection over QP1, from which smbwire learns
//! which queue pairs carry SMB Direct (RDMA CM service ID, port 445) and their starting PSNs.
//!
//! Layout: 24-byte MAD common header (BaseVersion, MgmtClass, ClassVersion, Method, Status,
//! ClassSpecific, TransactionID, AttributeID, Reserved, AttributeModifier), then the CM message.
//! Offsets below are relative to the CM message (IBTA Table 99 REQ, Table 110 REP).

pub const MAD_HEADER_LEN: usize = 24;
/// Management class of Communication Management (IBTA Table 145).
pub const MGMT_CLASS_CM: u8 = 0x07;
pub const ATTR_CONNECT_REQUEST: u16 = 0x0010;
pub const ATTR_CONNECT_REPLY: u16 = 0x0013;
/// RDMA CM IP-based service IDs (IBTA Annex A11): 0x0000_0000_0106_PPPP is the TCP port space.
pub const SERVICE_ID_PS_TCP: u64 = 0x0000_0000_0106_0000;
pub const SERVICE_ID_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;

mod req {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const SERVICE_ID: usize = 8;
    pub const LOCAL_QPN: usize = 32;
    pub const STARTING_PSN: usize = 44;
    pub const LEN: usize = 47;
}
mod rep {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const LOCAL_QPN: usize = 12;
    pub const STARTING_PSN: usize = 20;
    pub const LEN: usize = 23;
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

/// Builds a CM MAD (tests, synthesizer): 256 bytes like the real thing.
pub fn emit(msg: &Message) -> Vec<u8> {
    let mut v = vec![0u8; 256];
    v[0] = 1;
    v[1] = MGMT_CLASS_CM;
    v[2] = 2;
    v[3] = 0x03; // Send
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
    v[16..18].copy_from_slice(&attr.to_be_bytes());
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

    proptest! {
        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse(&data);
        }
    }
}
