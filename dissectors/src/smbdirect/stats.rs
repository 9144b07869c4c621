//! The report's `"rdma"` section. SMB Direct counts into it (negotiate and data messages,
//! linked transfers) and so do the RDMA transports that carry SMB Direct (`crate::rdma`:
//! iWARP, InfiniBand, queue pairs); it is defined here, in the lowest stage that counts into it,
//! so that dependencies run one way (rdma → smbdirect). `crate::rdma` re-exports it.

use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Default, Clone, Serialize)]
pub struct SmbDirectStats {
    pub negotiate_requests: u64,
    pub negotiate_responses: u64,
    pub data_messages: u64,
    /// Sum of DataLength over data transfer messages (fragments counted individually).
    pub data_length_sum: u64,
    /// Sums of CreditsGranted / CreditsRequested over all messages that carry them.
    pub credits_granted: u64,
    pub credits_requested: u64,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct IwarpStats {
    /// RDMAP opcode ("0x03") → DDP segments.
    pub opcodes: BTreeMap<String, u64>,
    pub mpa_requests: u64,
    pub mpa_replies: u64,
    pub mpa_fpdus: u64,
    pub markers: u64,
    pub crc_errors: u64,
    /// RDMAP Terminate messages (opcode 7): also raised as the `iwarp.terminate` anomaly.
    pub terminates: u64,
    /// Times framing was lost (gap, bad FPDU) and found again.
    pub resyncs: u64,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct InfinibandStats {
    /// BTH opcode (decimal, like tshark's infiniband.bth.opcode) → packets.
    pub bth_opcodes: BTreeMap<String, u64>,
    pub packets: u64,
    pub cm_requests: u64,
    pub cm_replies: u64,
    /// Of `packets`, native InfiniBand Sends carrying IPoIB (RFC 4391/4755), whose IP is
    /// analysed as if it came over Ethernet.
    pub ipoib_packets: u64,
}

/// The `"rdma"` section of the report.
#[derive(Debug, Default, Clone, Serialize)]
pub struct RdmaStats {
    pub smbdirect: SmbDirectStats,
    pub iwarp: IwarpStats,
    pub infiniband: InfinibandStats,
    /// Queue pairs seen (RoCE), by receiving (address, QPN).
    pub qps: u64,
    /// SMB Direct connections (iWARP TCP connections and RoCE QP pairs).
    pub smbdirect_connections: u64,
    /// RoCE: of those, learned from a CM REQ/REP (service ID port 445) and inferred from
    /// traffic (the first Send that is an SMB Direct message).
    pub cm_connections: u64,
    pub inferred_connections: u64,
    /// RoCE: connections a CM REQ/REP named for another upper layer (service ID port not SMB
    /// Direct, e.g. 4420 NVMe-oF); their traffic is `rdma_other_ulp`.
    pub other_ulp_connections: u64,
    /// RDMA transfers linked to an SMB2 WRITE/READ, hashed and sent to dedupe, and their bytes.
    pub linked_transfers: u64,
    pub linked_bytes: u64,
    /// Transfers with missing bytes (not hashed), and transfers of which nothing was seen.
    pub incomplete_transfers: u64,
    pub unseen_transfers: u64,
    /// RDMA data bytes of SMB Direct connections not linked to any request.
    pub unlinked_bytes: u64,
    /// PSNs never seen (RoCE) plus gaps in iWARP TCP streams.
    pub gaps: u64,
    pub retransmitted_bytes: u64,
}
