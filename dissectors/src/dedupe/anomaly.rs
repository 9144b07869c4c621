//! The dedupe index's anomalies (limits and ordering).
//! Names are stable strings: the keys of the JSON `"anomalies"` object (docs/json-schema.md).

crate::anomaly::anomalies! {
    /// What this stage can raise.
    pub enum Anomaly {
        AutoNodeCap = "dedupe.auto_node_cap",
        LiveBlockCap = "dedupe.live_block_cap",
        IndexMemoryCap = "dedupe.index_memory_cap",
        RepeatedMessage = "dedupe.repeated_message",
        SendOutOfOrder = "dedupe.send_out_of_order",
        EvidenceCap = "dedupe.evidence_cap",
        EvidenceWriteError = "dedupe.evidence_write_error",
        ConnectionNumbersCapped = "dedupe.connection_numbers_capped",
        EdgeCap = "dedupe.edge_cap",
    }
}
