//! What SMB Direct needs from an RDMA provider (MS-SMBD §3.1.4: Send, RDMA Read from the
//! peer's buffer, RDMA Write to it), implemented on the wire by `roce` (IBTA RC over
//! RoCEv1/v2) and `iwarp` (RDMAP/DDP/MPA over TCP), and the counts the Truth reports for it.

use super::pcap::Tap;
use super::smbdirect::BufferDescriptor;
use super::{ConnId, Host, Side};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// An RDMA connection provider between two hosts (one reliable connection per `ConnId`).
pub trait RdmaLink<W: Write> {
    /// Establish a connection from `client` to the SMB Direct listener on `server`.
    fn connect(&mut self, tap: &mut Tap<W>, client: &Host, server: &Host) -> io::Result<ConnId>;
    /// One RDMA Send of `msg` from side `from`; with `invalidate`, a Send with Invalidate
    /// of that R_Key / STag.
    fn post_send(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: Side,
        msg: &[u8],
        invalidate: Option<u32>,
    ) -> io::Result<()>;
    /// The server reads `data` (already in the client's buffer `remote`).
    fn rdma_read(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        remote: &BufferDescriptor,
        data: &[u8],
    ) -> io::Result<()>;
    /// The server writes `data` into the client's buffer `remote`.
    fn rdma_write(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        remote: &BufferDescriptor,
        data: &[u8],
    ) -> io::Result<()>;
    fn close(&mut self, tap: &mut Tap<W>, conn: ConnId) -> io::Result<()>;
    fn stats(&mut self) -> &mut RdmaTruth;
}

/// Figures of the RDMA side of a capture (Truth `rdma`, present for rocev1, rocev2 and iwarp).
///
/// `opcodes` counts RDMA packets (RoCE: IB BTH opcode; iWARP: RDMAP opcode of each
/// FPDU) by decimal opcode, each packet once as its sender sent it: mirror copies and
/// resends of lost packets are not counted, and a dropped packet is.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RdmaTruth {
    pub transport: String,
    /// RDMA connections (queue pairs on RoCE, MPA connections on iWARP).
    pub connections: u64,
    /// RoCE path MTU; iWARP: the largest ULPDU (DDP segment) an FPDU carries.
    pub mtu: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mpa_crc: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mpa_markers: Option<bool>,
    /// RDMA CM messages on QP1 by name (RoCE only).
    pub cm: BTreeMap<String, u64>,
    pub smbd_negotiate_requests: u64,
    pub smbd_negotiate_responses: u64,
    /// Data transfer messages (each fragment once) and the sum of their DataLength.
    pub smbd_data_messages: u64,
    pub smbd_data_length: u64,
    /// SMB2 messages that needed more than one data transfer message.
    pub smbd_fragmented_messages: u64,
    /// Responses sent with Send with Invalidate.
    pub send_with_invalidate: u64,
    pub opcodes: BTreeMap<String, u64>,
    /// RDMA Read operations (one per buffer descriptor) and the bytes they moved.
    pub rdma_reads: u64,
    pub rdma_read_bytes: u64,
    pub rdma_writes: u64,
    pub rdma_write_bytes: u64,
    /// RoCE RC acknowledgements (opcode 17) sent.
    pub acks: u64,
    /// RDMA data packets (RDMA Write, RDMA Read Response; iWARP: the TCP segments holding
    /// them) missing at first and resent later, and those never captured with their
    /// payload bytes.
    pub lost_packets: u64,
    pub dropped_packets: u64,
    pub dropped_bytes: u64,
    /// RoCE data packets also sent a second time later (same PSN and bytes), and data
    /// packets sent after the one that followed them. iWARP reports these in `tcp`.
    #[serde(skip_serializing_if = "is_zero")]
    pub retransmitted_packets: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub reordered_pairs: u64,
    /// RoCE connections of another upper layer (spec `other_ulp_port`), and the bytes of
    /// their RC packets from BTH through ICRC, ACKs excepted (the analyzer's
    /// `rdma_other_ulp`); their CM MADs are counted in `cm` like the others.
    #[serde(skip_serializing_if = "is_zero")]
    pub other_ulp_connections: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub other_ulp_bytes: u64,
    /// iWARP: RDMAP Terminate messages sent (spec `iwarp_terminate`).
    #[serde(skip_serializing_if = "is_zero")]
    pub terminates: u64,
    /// SMB Direct Sends that asked for a solicited event (spec `solicited_event`): iWARP
    /// opcodes 5 and 6; RoCE Sends whose last packet has the BTH SE bit.
    #[serde(skip_serializing_if = "is_zero")]
    pub solicited_events: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RdmaTruth {
    pub fn opcode(&mut self, op: u8) {
        *self.opcodes.entry(op.to_string()).or_default() += 1;
    }
}
