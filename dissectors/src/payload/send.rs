//! A payload send: what the SMB2 and SMB Direct stages hand to the payload sink (the dedupe
//! index), one per WRITE request data, READ response data or linked RDMA transfer.

use super::PayloadDigest;
use crate::frame::FrameRef;
use std::net::IpAddr;
use std::sync::Arc;

/// Conn ids of RoCE connections start here, apart from TCP connection ids.
pub const ROCE_CONN_BASE: u64 = 1 << 40;

/// Which SMB2 operation moved the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SendKind {
    /// WRITE request data (client → server).
    Write,
    /// READ response data (server → client).
    Read,
}

/// How the payload crossed the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Inline in an SMB2 message over TCP (NetBIOS framing).
    Tcp,
    /// Moved by RDMA Read/Write (SMB Direct), linked to an SMB2 WRITE/READ.
    Rdma,
    /// Inline in an SMB2 message carried in SMB Direct Send messages.
    SmbDirect,
}

/// `SendRecord::offset` when the file offset is not known: a READ response whose READ request
/// is not in the capture (one starting mid-traffic). Written as null in evidence, -1 in a ledger.
pub const UNKNOWN_OFFSET: u64 = u64::MAX;

/// One distinct send of a payload (one SMB2 message, or one RDMA transfer).
#[derive(Clone, Debug, PartialEq)]
pub struct SendRecord {
    /// Connection id (unique per TCP connection / RDMA QP pair in this run).
    pub conn: u64,
    /// SMB2 MessageId of the WRITE request / READ request this payload belongs to.
    pub message_id: u64,
    pub kind: SendKind,
    pub transport: Transport,
    /// Network addresses of the sender and receiver of the payload bytes.
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Ports of the sender and receiver on the connection that carried the payload, and its
    /// IP protocol (6 TCP: SMB2 over TCP, SMB Direct over iWARP). `ip_proto` 0 (ports 0)
    /// when the connection has no IP port pair (RoCE queue pairs): no Community ID then.
    pub src_port: u16,
    pub dst_port: u16,
    pub ip_proto: u8,
    pub session_id: u64,
    pub tree_id: u32,
    pub file_id: [u8; 16],
    /// Share path from TREE_CONNECT (e.g. `\\server\share`), when seen.
    pub share: Option<Arc<str>>,
    /// File name from CREATE, when seen.
    pub file_name: Option<Arc<str>>,
    /// File offset of the WRITE / READ (`UNKNOWN_OFFSET`: a READ response whose READ request is
    /// not in the capture, which alone says it).
    pub offset: u64,
    /// Frames that carried the payload (first and last).
    pub first_frame: FrameRef,
    pub last_frame: FrameRef,
    /// The frame of the SMB2 header when it is not among the payload frames: over SMB Direct,
    /// the Send that carried the WRITE request or the READ response (the payload moved in RDMA
    /// Read Responses / RDMA Writes). `None` when the header shares the first payload frame.
    pub header_frame: Option<FrameRef>,
    /// Time of the first payload byte (ns since epoch).
    pub ts_ns: u64,
    pub digest: PayloadDigest,
}
