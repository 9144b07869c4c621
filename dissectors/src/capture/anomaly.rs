//! The capture readers' anomalies (pcap, pcapng) and the pipeline's about frames as captured.
//! Names are stable strings: the keys of the JSON `"anomalies"` object (docs/json-schema.md).

crate::anomaly::anomalies! {
    /// What this stage can raise.
    pub enum Anomaly {
        ReadError = "capture.read_error",
        DecompressMemoryLimit = "capture.decompress_memory_limit",
        Interrupted = "capture.interrupted",
        TruncatedRecord = "capture.truncated_record",
        SnaplenTruncatedFrame = "capture.snaplen_truncated_frame",
        TimeWentBackwards = "capture.time_went_backwards",
        UnusableInput = "capture.unusable_input",
        PcapBadRecordLength = "pcap.bad_record_length",
        PcapBadTimestampFraction = "pcap.bad_timestamp_fraction",
        PcapSnaplenZero = "pcap.snaplen_zero",
        PcapSnaplenImplausible = "pcap.snaplen_implausible",
        PcapRecordExceedsSnaplen = "pcap.record_exceeds_snaplen",
        PcapngRecordExceedsSnaplen = "pcapng.record_exceeds_snaplen",
        PcapngBadBlockLength = "pcapng.bad_block_length",
        PcapngBadByteOrderMagic = "pcapng.bad_byte_order_magic",
        PcapngBadCaplen = "pcapng.bad_caplen",
        PcapngBadInterfaceBlock = "pcapng.bad_interface_block",
        PcapngBadPacketBlock = "pcapng.bad_packet_block",
        PcapngBadSectionHeader = "pcapng.bad_section_header",
        PcapngBlockLengthMismatch = "pcapng.block_length_mismatch",
        PcapngOversizedBlock = "pcapng.oversized_block",
        PcapngTooManyInterfaces = "pcapng.too_many_interfaces",
        PcapngUnknownInterface = "pcapng.unknown_interface",
        PcapngUnsupportedVersion = "pcapng.unsupported_version",
    }
}
