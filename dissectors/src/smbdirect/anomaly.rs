//! SMB Direct's anomalies: messages and reassembly (`smbdirect.*`) and the linking of RDMA
//! transfers to SMB2 requests (`rdma.*`, raised by `link`). Data transfer parse errors
//! (`records::Error`) are anomalies too.
//! Names are stable strings: the keys of the JSON `"anomalies"` object (docs/json-schema.md).

use crate::anomaly::AnomalyKind;

crate::anomaly::anomalies! {
    /// What this stage can raise.
    pub enum Anomaly {
        FragmentLost = "smbdirect.fragment_lost",
        FragmentedTooLarge = "smbdirect.fragmented_too_large",
        NegotiateFailed = "smbdirect.negotiate_failed",
        UnalignedDataOffset = "smbdirect.unaligned_data_offset",
        ZeroCreditsRequested = "smbdirect.zero_credits_requested",
        RdmaDataBeyondDescriptor = "rdma.data_beyond_descriptor",
        RdmaDuplicateTransfer = "rdma.duplicate_transfer",
        RdmaPayloadIncomplete = "rdma.payload_incomplete",
        RdmaReorderBufferFull = "rdma.reorder_buffer_full",
        RdmaTransferEvicted = "rdma.transfer_evicted",
        RdmaTransferTooLong = "rdma.transfer_too_long",
        RdmaUnlinkedData = "rdma.unlinked_data",
    }
}

impl AnomalyKind for super::records::Error {
    fn name(self) -> &'static str {
        super::records::Error::name(self)
    }
}

/// The data transfer parse errors, for `crate::all_anomaly_names` (the match makes a new
/// variant a compile error here until it is listed).
pub fn record_errors() -> [super::records::Error; 2] {
    use super::records::Error as E;
    let all = [E::Truncated, E::BadDataOffset];
    for e in all {
        match e {
            E::Truncated | E::BadDataOffset => {}
        }
    }
    all
}
