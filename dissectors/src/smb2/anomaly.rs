//! The SMB2 stage's anomalies (framing, compound walk, payload, state). Record parse errors
//! (`records::Error`) are anomalies too: `smb2.record_truncated`, `smb2.bad_structure_size`,
//! `smb2.bad_protocol_id`, `smb2.bad_offset`.
//! Names are stable strings: the keys of the JSON `"anomalies"` object (docs/json-schema.md).

use crate::anomaly::AnomalyKind;

crate::anomaly::anomalies! {
    /// What this stage can raise.
    pub enum Anomaly {
        BadNextCommand = "smb2.bad_next_command",
        Gap = "smb2.gap",
        GapInMessage = "smb2.gap_in_message",
        GapResync = "smb2.gap_resync",
        MessageFramesCapped = "smb2.message_frames_capped",
        MessageOverCap = "smb2.message_over_cap",
        MessageTooLong = "smb2.message_too_long",
        NetbiosBadLength = "smb2.netbios_bad_length",
        NetbiosBadType = "smb2.netbios_bad_type",
        NetbiosLengthImplausible = "smb2.netbios_length_implausible",
        NetbiosLengthBeyondMessage = "smb2.netbios_length_beyond_message",
        PayloadIncomplete = "smb2.payload_incomplete",
        ReadBadDataOffset = "smb2.read_bad_data_offset",
        WriteBadDataOffset = "smb2.write_bad_data_offset",
        StreamEndedMidMessage = "smb2.stream_ended_mid_message",
        TrailingBytes = "smb2.trailing_bytes",
        TruncatedHeader = "smb2.truncated_header",
        UnframedMessageTruncated = "smb2.unframed_message_truncated",
        UnframedStateReset = "smb2.unframed_state_reset",
        UnknownProtocolId = "smb2.unknown_protocol_id",
        ReadResponseWithoutRequest = "smb2.read_response_without_request",
        UnknownCommand = "smb2.unknown_command",
        ReportFilesCapped = "smb2.report_files_capped",
        StateEvicted = "smb2.state_evicted",
        NameTruncated = "smb2.name_truncated",
        DecryptFailed = "smb2.decrypt_failed",
        TransformBadSize = "smb2.transform_bad_size",
        OpenBudgetExceeded = "smb2.open_budget_exceeded",
        ResyncUnconfirmed = "smb2.resync_unconfirmed",
        ResyncWrongDirection = "smb2.resync_wrong_direction",
    }
}

impl AnomalyKind for super::records::Error {
    fn name(self) -> &'static str {
        super::records::Error::name(self)
    }
}

/// The record parse errors, for `crate::all_anomaly_names` (the match makes a new variant a
/// compile error here until it is listed).
pub fn record_errors() -> [super::records::Error; 4] {
    use super::records::Error as E;
    let all = [E::Truncated, E::BadStructureSize, E::BadProtocolId, E::BadOffset];
    for e in all {
        match e {
            E::Truncated | E::BadStructureSize | E::BadProtocolId | E::BadOffset => {}
        }
    }
    all
}
