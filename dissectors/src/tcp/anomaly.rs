//! The flow table's anomalies (reassembly limits).
//! Names are stable strings: the keys of the JSON `"anomalies"` object (docs/json-schema.md).

crate::anomaly::anomalies! {
    /// What this stage can raise.
    pub enum Anomaly {
        FlowTableFull = "tcp.flow_table_full",
        StorageFlowEvicted = "tcp.storage_flow_evicted",
        GlobalBufferCap = "tcp.global_buffer_cap",
        ReorderBeyondBuffer = "tcp.reorder_beyond_buffer",
        UndeliverableData = "tcp.undeliverable_data",
    }
}
