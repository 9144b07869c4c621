//! The wire decoders' anomalies: frames whose link, IP or transport headers are truncated or
//! impossible (`DecodeError`), and frames decoded with a remark (IP fragments, zero lengths).
//! Names are stable strings: the keys of the JSON `"anomalies"` object (docs/json-schema.md).
//!
//! `DecodeError` still carries its name as a string from the parsers (`Truncated("ipv4.truncated")`);
//! a test below checks that every such string is a variant here.

use super::DecodeError;
use crate::anomaly::AnomalyKind;

crate::anomaly::anomalies! {
    /// What the wire decoders can raise.
    pub enum Anomaly {
        CmdTruncated = "cmd.truncated",
        /// A Cisco MetaData header (TrustSec's in-line SGT) in a form other than version 1,
        /// length 1: not walked.
        CmdUnsupported = "cmd.unsupported",
        ErfBadRecordLength = "erf.bad_record_length",
        ErfExtensionTruncated = "erf.extension_truncated",
        ErfRxError = "erf.rx_error",
        ErfTooManyExtensionHeaders = "erf.too_many_extension_headers",
        ErfTruncated = "erf.truncated",
        ErfUnsupportedRecordType = "erf.unsupported_record_type",
        ErspanBadVersion = "erspan.bad_version",
        ErspanTruncated = "erspan.truncated",
        /// The mirroring switch cut the frame to fit its tunnel (ERSPAN's T flag).
        ErspanTruncatedFrame = "erspan.truncated_frame",
        EthernetTooManyVlanTags = "ethernet.too_many_vlan_tags",
        EthernetTruncated = "ethernet.truncated",
        EthernetVlanTruncated = "ethernet.vlan_truncated",
        GeneveBadVersion = "geneve.bad_version",
        GeneveTruncated = "geneve.truncated",
        GreTruncated = "gre.truncated",
        GreUnsupported = "gre.unsupported",
        InfinibandBadGrhVersion = "infiniband.bad_grh_version",
        InfinibandBadPacketLength = "infiniband.bad_packet_length",
        InfinibandGrhTruncated = "infiniband.grh_truncated",
        InfinibandTruncated = "infiniband.truncated",
        IpoibTruncated = "ipoib.truncated",
        Ipv4BadHeaderLength = "ipv4.bad_header_length",
        Ipv4BadTotalLength = "ipv4.bad_total_length",
        Ipv4BadVersion = "ipv4.bad_version",
        Ipv4Fragment = "ipv4.fragment",
        Ipv4NonFirstFragment = "ipv4.non_first_fragment",
        Ipv4Truncated = "ipv4.truncated",
        Ipv4ZeroTotalLength = "ipv4.zero_total_length",
        Ipv6BadPayloadLength = "ipv6.bad_payload_length",
        Ipv6BadVersion = "ipv6.bad_version",
        Ipv6ExtensionTruncated = "ipv6.extension_truncated",
        Ipv6Fragment = "ipv6.fragment",
        Ipv6NonFirstFragment = "ipv6.non_first_fragment",
        Ipv6TooManyExtensionHeaders = "ipv6.too_many_extension_headers",
        Ipv6Truncated = "ipv6.truncated",
        Ipv6ZeroPayloadLength = "ipv6.zero_payload_length",
        LinkUnsupportedLinktype = "link.unsupported_linktype",
        NullTruncated = "null.truncated",
        RawBadVersion = "raw.bad_version",
        RawTruncated = "raw.truncated",
        RoceBadGrhVersion = "roce.bad_grh_version",
        RoceGrhTruncated = "roce.grh_truncated",
        SllTruncated = "sll.truncated",
        Sll2Truncated = "sll2.truncated",
        TcpBadHeaderLength = "tcp.bad_header_length",
        TcpBadOption = "tcp.bad_option",
        TcpTruncated = "tcp.truncated",
        UdpBadLength = "udp.bad_length",
        UdpTruncated = "udp.truncated",
        VxlanBadFlags = "vxlan.bad_flags",
        VxlanTruncated = "vxlan.truncated",
    }
}

impl AnomalyKind for DecodeError {
    fn name(self) -> &'static str {
        self.anomaly()
    }
}

#[cfg(test)]
mod tests {
    use super::Anomaly;

    /// Every anomaly name written in the wire parsers is one of `Anomaly::ALL`.
    #[test]
    fn decode_error_names_are_listed() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/wire");
        let known: Vec<&str> = Anomaly::ALL.iter().map(|a| a.name()).collect();
        let mut seen = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
            for pat in ["Truncated(\"", "Malformed(\""] {
                for (i, _) in text.match_indices(pat) {
                    let rest = &text[i + pat.len()..];
                    let name = &rest[..rest.find('"').unwrap()];
                    assert!(known.contains(&name), "{name} is not in wire::Anomaly");
                    seen += 1;
                }
            }
        }
        assert!(seen > 20);
    }
}
