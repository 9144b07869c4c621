//! Byte accounting: every byte of every input file lands in exactly one category, so the
//! totals reconcile with the files' sizes (`Accounting::total() == sum of file sizes`).

use std::collections::BTreeMap;

/// The categories. Stable names: they appear in the JSON output (`"accounting"`).
pub mod cat {
    /// pcap/pcapng file headers, block headers and trailers, record headers.
    pub const CAPTURE_FORMAT: &str = "capture_format";
    /// Link, IP, TCP/UDP headers (and link trailers/padding) of analysed frames.
    pub const PROTOCOL_HEADERS: &str = "protocol_headers";
    /// Whole frames that are a copy of a frame already seen (mirror port saw it twice).
    pub const MIRROR_DUPLICATE: &str = "mirror_duplicate";
    /// TCP payload bytes already delivered once (retransmission, overlap).
    pub const RETRANSMITTED: &str = "retransmitted";
    /// NetBIOS session headers, SMB2 headers and every non-payload part of SMB2 messages.
    pub const SMB_METADATA: &str = "smb_metadata";
    /// WRITE request data and READ response data (the payload that is hashed).
    pub const SMB_PAYLOAD: &str = "smb_payload";
    /// Messages behind an SMB2 TRANSFORM header (0xFD 'SMB').
    pub const SMB_ENCRYPTED: &str = "smb_encrypted";
    /// Messages behind an SMB2 COMPRESSION_TRANSFORM header (0xFC 'SMB').
    pub const SMB_COMPRESSED: &str = "smb_compressed";
    /// Bytes in an SMB stream that could not be framed (before resynchronisation).
    pub const SMB_UNPARSED: &str = "smb_unparsed";
    /// TCP payload on SMB ports that was buffered out of order and never became contiguous.
    pub const TCP_UNDELIVERED: &str = "tcp_undelivered";
    /// Frames and payload of protocols smbwire does not analyse.
    pub const OTHER_PROTOCOLS: &str = "other_protocols";
    /// Frames that could not be decoded (truncated or malformed link/IP/TCP).
    pub const MALFORMED: &str = "malformed";
    /// Bytes at the end of a capture file that do not form a whole record.
    pub const TRUNCATED_TAIL: &str = "truncated_tail";
    /// RDMA Read Response / RDMA Write data placed into a transfer linked to an SMB2 WRITE/READ.
    pub const RDMA_PAYLOAD: &str = "rdma_payload";
    /// RDMA data of SMB Direct connections not linked to any SMB2 request.
    pub const RDMA_UNLINKED: &str = "rdma_unlinked";
    /// SMB Direct negotiate messages, data transfer headers and padding (credit-only messages).
    pub const SMBDIRECT_CONTROL: &str = "smbdirect_control";
    /// BTH/RETH/AETH/IETH/ImmDt, pad and ICRC; MPA length, pad, CRC and markers; DDP/RDMAP headers.
    pub const RDMA_HEADERS: &str = "rdma_headers";
    /// IB ACK / Atomic ACK packets.
    pub const RDMA_ACK: &str = "rdma_ack";
    /// IB CM MADs on QP1 and iWARP MPA Request/Reply frames.
    pub const RDMA_CM: &str = "rdma_cm";
    /// RDMA traffic of other upper layers (queue pairs / connections that are not SMB Direct).
    pub const RDMA_OTHER_ULP: &str = "rdma_other_ulp";
    /// RDMA packets or data bytes seen a second time (same PSN, same payload position).
    pub const RDMA_RETRANSMITTED: &str = "rdma_retransmitted";
    /// iWARP stream bytes that could not be framed (after a gap, bad FPDU).
    pub const RDMA_UNPARSED: &str = "rdma_unparsed";
    /// Frames outside the `--from`/`--to` time bounds, left out of the analysis.
    pub const OUTSIDE_TIME_BOUNDS: &str = "outside_time_bounds";
    /// Input files skipped as unusable beside usable ones (not a capture, damaged header).
    pub const UNUSABLE_INPUT: &str = "unusable_input";
}

#[derive(Debug, Default, Clone)]
pub struct Accounting {
    bytes: BTreeMap<&'static str, u64>,
}

impl Accounting {
    pub fn add(&mut self, category: &'static str, bytes: u64) {
        if bytes > 0 {
            *self.bytes.entry(category).or_insert(0) += bytes;
        }
    }
    pub fn get(&self, category: &str) -> u64 {
        self.bytes.get(category).copied().unwrap_or(0)
    }
    pub fn total(&self) -> u64 {
        self.bytes.values().sum()
    }
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.bytes.iter().map(|(k, v)| (*k, *v))
    }
}
