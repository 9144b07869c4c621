//! The report's `"rdma"` section. SMB Direct counts into it (negotiate and data messages,
//! linked transfers) and so do the RDMA transports that carry SMB Direct (`crate::rdma`:
//! iWARP, InfiniBand, queue pairs); it is defined here, in the lowest stage that counts into it,
//! so that dependencies run one way (rdma → smbdirect). `crate::rdma` re-exports it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
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

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
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

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
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
    /// RoCE: queue pairs of inferred connections placed by the buffer that an RDMA operation
    /// to them named (the WRITE or READ request that registered it is the connection's),
    /// rather than by their addresses: paired so at first (`rdma::roce::claim`), or moved
    /// from a wrong pairing (`rdma::roce::repair`).
    pub buffer_pairings: u64,
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

fn add_map(a: &mut BTreeMap<String, u64>, b: BTreeMap<String, u64>) {
    for (k, v) in b {
        *a.entry(k).or_insert(0) += v;
    }
}

impl RdmaStats {
    /// Adds another worker's counters (`--threads`); every field is a count.
    pub fn absorb(&mut self, o: RdmaStats) {
        let RdmaStats {
            smbdirect,
            iwarp,
            infiniband,
            qps,
            smbdirect_connections,
            cm_connections,
            inferred_connections,
            buffer_pairings,
            other_ulp_connections,
            linked_transfers,
            linked_bytes,
            incomplete_transfers,
            unseen_transfers,
            unlinked_bytes,
            gaps,
            retransmitted_bytes,
        } = o;
        let SmbDirectStats { negotiate_requests, negotiate_responses, data_messages, data_length_sum, credits_granted, credits_requested } = smbdirect;
        let IwarpStats { opcodes, mpa_requests, mpa_replies, mpa_fpdus, markers, crc_errors, terminates, resyncs } = iwarp;
        let InfinibandStats { bth_opcodes, packets, cm_requests, cm_replies, ipoib_packets } = infiniband;
        add_map(&mut self.iwarp.opcodes, opcodes);
        add_map(&mut self.infiniband.bth_opcodes, bth_opcodes);
        let s = &mut self.smbdirect;
        let (w, ib) = (&mut self.iwarp, &mut self.infiniband);
        for (a, b) in [
            (&mut s.negotiate_requests, negotiate_requests),
            (&mut s.negotiate_responses, negotiate_responses),
            (&mut s.data_messages, data_messages),
            (&mut s.data_length_sum, data_length_sum),
            (&mut s.credits_granted, credits_granted),
            (&mut s.credits_requested, credits_requested),
            (&mut w.mpa_requests, mpa_requests),
            (&mut w.mpa_replies, mpa_replies),
            (&mut w.mpa_fpdus, mpa_fpdus),
            (&mut w.markers, markers),
            (&mut w.crc_errors, crc_errors),
            (&mut w.terminates, terminates),
            (&mut w.resyncs, resyncs),
            (&mut ib.packets, packets),
            (&mut ib.cm_requests, cm_requests),
            (&mut ib.cm_replies, cm_replies),
            (&mut ib.ipoib_packets, ipoib_packets),
            (&mut self.qps, qps),
            (&mut self.smbdirect_connections, smbdirect_connections),
            (&mut self.cm_connections, cm_connections),
            (&mut self.inferred_connections, inferred_connections),
            (&mut self.buffer_pairings, buffer_pairings),
            (&mut self.other_ulp_connections, other_ulp_connections),
            (&mut self.linked_transfers, linked_transfers),
            (&mut self.linked_bytes, linked_bytes),
            (&mut self.incomplete_transfers, incomplete_transfers),
            (&mut self.unseen_transfers, unseen_transfers),
            (&mut self.unlinked_bytes, unlinked_bytes),
            (&mut self.gaps, gaps),
            (&mut self.retransmitted_bytes, retransmitted_bytes),
        ] {
            *a += b;
        }
    }
}
