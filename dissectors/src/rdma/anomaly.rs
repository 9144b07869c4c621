//! The RDMA transports' anomalies: queue pairs and RoCE contexts (`rdma.*`) and iWARP streams
//! (`iwarp.*`). IB and DDP parse errors (`ib::Error`, `ddp::Error`) are anomalies too.
//! Names are stable strings: the keys of the JSON `"anomalies"` object (docs/json-schema.md).

use crate::anomaly::AnomalyKind;

crate::anomaly::anomalies! {
    /// What this stage can raise.
    pub enum Anomaly {
        CmReplyWithoutRequest = "rdma.cm_reply_without_request",
        ConnectionTableFull = "rdma.connection_table_full",
        DataOutsideMessage = "rdma.data_outside_message",
        DataWithoutConnection = "rdma.data_without_connection",
        QpTableFull = "rdma.qp_table_full",
        ReadRequestWithPayload = "rdma.read_request_with_payload",
        ReadResponseWithoutRequest = "rdma.read_response_without_request",
        ReadTableFull = "rdma.read_table_full",
        SendIncomplete = "rdma.send_incomplete",
        SendOutOfSequence = "rdma.send_out_of_sequence",
        WriteWithoutFirst = "rdma.write_without_first",
        IwarpBadMpaFrame = "iwarp.bad_mpa_frame",
        IwarpCrcError = "iwarp.crc_error",
        IwarpGap = "iwarp.gap",
        IwarpMarkersWithoutCrcField = "iwarp.markers_without_crc_field",
        IwarpMpaPrivateDataTooLong = "iwarp.mpa_private_data_too_long",
        IwarpMpaRejected = "iwarp.mpa_rejected",
        IwarpNoMpaFrame = "iwarp.no_mpa_frame",
        IwarpReadResponseWithoutRequest = "iwarp.read_response_without_request",
        IwarpSendSegmentLost = "iwarp.send_segment_lost",
        IwarpStreamEndedMidFpdu = "iwarp.stream_ended_mid_fpdu",
        IwarpDataAfterClose = "iwarp.data_after_close",
        IwarpTerminate = "iwarp.terminate",
    }
}

impl AnomalyKind for super::ib::Error {
    fn name(self) -> &'static str {
        super::ib::Error::name(self)
    }
}

impl AnomalyKind for super::ddp::Error {
    fn name(self) -> &'static str {
        super::ddp::Error::name(self)
    }
}

/// The names of the IB and DDP parse errors, for `crate::all_anomaly_names` (the matches make
/// a new variant a compile error here until it is listed).
pub fn record_error_names() -> Vec<&'static str> {
    use super::{ddp, ib};
    let ib_all = [ib::Error::Truncated, ib::Error::UnknownOpcode];
    let ddp_all = [ddp::Error::Truncated, ddp::Error::BadVersion, ddp::Error::BadModel];
    for e in ib_all {
        match e {
            ib::Error::Truncated | ib::Error::UnknownOpcode => {}
        }
    }
    for e in ddp_all {
        match e {
            ddp::Error::Truncated | ddp::Error::BadVersion | ddp::Error::BadModel => {}
        }
    }
    ib_all.iter().map(|e| e.name()).chain(ddp_all.iter().map(|e| e.name())).collect()
}
