//! What to generate: the scenario and its options, as JSON (`_core.synth(spec_json, path)`).

use super::smb2::{dialect, Compression, MAX_IO_SIZE};
use serde::{Deserialize, Deserializer};

pub const MIB: u64 = 1 << 20;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Spec {
    /// `mirror2`, `nested4`, `six`, `redirect4`, `read-nonowner`, `read-owner`.
    pub scenario: String,
    /// W: bytes the VM writes (or reads).
    pub bytes: u64,
    /// Bytes per I/O (one SMB2 WRITE or READ); the last I/O may be shorter.
    pub io_size: u64,
    /// Record every frame twice, as a mirror port copying ingress and egress (+1 µs).
    pub mirror_dup: bool,
    /// Fraction of data segments also sent again later (same seq and payload, new IP ID;
    /// RoCE: RDMA data packets, same PSN).
    pub retransmit: f64,
    /// Fraction of data segments swapped with the next one (RoCE: RDMA data packets).
    pub reorder: f64,
    pub seed: u64,
    /// TCP maximum segment size (payload bytes per segment).
    pub mss: u64,
    /// Highest SMB dialect offered and chosen: 0x0302 or 0x0311 (JSON number, or a string
    /// such as "3.1.1" or "0x0311").
    #[serde(deserialize_with = "deserialize_dialect")]
    pub dialect: u16,
    /// "tcp" (SMB2 over Direct TCP), "rocev1", "rocev2", "infiniband" or "iwarp" (SMB Direct,
    /// MS-SMBD).
    pub transport: String,
    /// Connections (SMB multichannel channels: TCP connections or RDMA queue pairs) per
    /// client→server session. Also accepted as `qps`.
    #[serde(alias = "qps")]
    pub channels: u64,
    /// RoCE path MTU: 256, 512, 1024, 2048 or 4096.
    pub mtu: u64,
    /// SMB Direct max send size each side negotiates (MS-SMBD §3.1.1.1 MaxSendSize);
    /// larger SMB2 messages are fragmented. Windows uses 1364.
    pub max_send_size: u64,
    /// SMB_DIRECT_BUFFER_DESCRIPTOR_V1 entries per WRITE/READ (one registration, cut in
    /// this many pieces).
    pub descriptors: u64,
    /// Channel = RDMA_V1_INVALIDATE, and responses sent with Send with Invalidate.
    pub send_with_invalidate: bool,
    /// Fraction of RDMA data packets (RDMA Write, RDMA Read Response; iWARP: their TCP
    /// segments) missing from the capture.
    pub loss: f64,
    /// "retransmit": a lost packet is sent again later; "drop": never seen again.
    pub loss_mode: String,
    /// iWARP: MPA CRC32c on (else the CRC field is zero).
    pub mpa_crc: bool,
    /// iWARP: MPA markers every 512 bytes.
    pub mpa_markers: bool,
    /// iWARP: MPA request/reply carry the 8 bytes of private data Windows sends.
    pub mpa_private_data: bool,
    /// Fraction of 4 KiB blocks that are all zeros (trivial blocks).
    pub zero_fill: f64,
    /// Link rate that paces frame timestamps, in Gb/s.
    pub link_gbps: u64,
    /// RoCE: also open, before the scenario, one RC connection of another upper layer
    /// between the first two hosts, its CM REQ naming this TCP port in the service ID (e.g.
    /// 4420, NVMe-oF): a few command/completion Sends and an RDMA Write. 0 = none.
    pub other_ulp_port: u16,
    /// iWARP: the server ends each connection with an RDMAP Terminate (opcode 7).
    pub iwarp_terminate: bool,
    /// Every SMB Direct Send asks the receiver for a solicited event. iWARP: RDMAP Send with
    /// Solicited Event (opcode 5) and, with `send_with_invalidate`, Send with Solicited
    /// Event and Invalidate (opcode 6) (RFC 5040 §4.3). RoCE: the BTH SE bit on the last
    /// (or only) packet of each Send (IBTA §9.2.1; the opcode stays the same). Off by
    /// default.
    pub solicited_event: bool,
    /// SMB 3.1.1 compression of WRITE requests and READ responses (MS-SMB2 §2.2.42): "none",
    /// "lznt1", "lz77", "lz77huffman" (unchained, the SMB2 header left uncompressed by
    /// Offset), or "chained" (a NONE payload for the header, Pattern_V1 for leading/trailing
    /// runs, LZ77 for the rest). A message that would not get smaller is sent uncompressed.
    /// Needs dialect 3.1.1 and transport "tcp"; the NEGOTIATE carries the context.
    pub compression: String,
    /// How the capture point receives the frames (`Tunnel`): "none" (a local mirror port),
    /// or from a remote mirror session: "gretap" (GRE, transparent Ethernet bridging),
    /// "erspan1", "erspan2", "erspan3" (ERSPAN types I-III over GRE), "vxlan" (UDP 4789) or "geneve" (UDP 6081).
    /// Ethernet transports only (not "infiniband").
    pub encap: String,
    /// The VLAN tags the mirror port delivers the frames with (`frames::Vlan`): "none", "dot1q"
    /// (VLAN 100, priority 3, as SMB Direct over RoCE runs) or "qinq" (802.1ad service tag,
    /// VLAN 200, around it). Ethernet transports only.
    pub vlan: String,
    /// IPv6 in place of IPv4 (RFC 5180's benchmarking prefix 2001:2::/48): SMB2 over TCP,
    /// iWARP, RoCEv2 over UDP/IPv6, RoCEv1 with the addresses as GIDs. Ethernet transports only.
    pub ipv6: bool,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            scenario: String::new(),
            bytes: 64 * MIB,
            io_size: MIB,
            mirror_dup: false,
            retransmit: 0.0,
            reorder: 0.0,
            seed: 1,
            mss: 1448,
            dialect: dialect::SMB302,
            transport: "tcp".into(),
            channels: 1,
            mtu: 4096,
            max_send_size: 1364,
            descriptors: 1,
            send_with_invalidate: false,
            loss: 0.0,
            loss_mode: "retransmit".into(),
            mpa_crc: true,
            mpa_markers: false,
            mpa_private_data: true,
            zero_fill: 0.0,
            link_gbps: 10,
            other_ulp_port: 0,
            iwarp_terminate: false,
            solicited_event: false,
            compression: "none".into(),
            encap: "none".into(),
            vlan: "none".into(),
            ipv6: false,
        }
    }
}

fn deserialize_dialect<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u64),
        Text(String),
    }
    let v = match Raw::deserialize(d)? {
        Raw::Number(n) => {
            u16::try_from(n).map_err(|_| serde::de::Error::custom("dialect out of range"))?
        }
        Raw::Text(s) => match s.trim().to_ascii_lowercase().as_str() {
            "3.0.2" | "0x0302" | "0x302" | "302" => dialect::SMB302,
            "3.1.1" | "0x0311" | "0x311" | "311" => dialect::SMB311,
            other => {
                return Err(serde::de::Error::custom(format!(
                    "unknown dialect {other:?}"
                )))
            }
        },
    };
    Ok(v)
}

impl Spec {
    pub fn from_json(s: &str) -> Result<Spec, String> {
        let spec: Spec = serde_json::from_str(s).map_err(|e| format!("bad synth spec: {e}"))?;
        spec.validate()?;
        Ok(spec)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.scenario.is_empty() {
            return Err("the spec needs a \"scenario\"".into());
        }
        let fraction = |name: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(format!("{name} must be a fraction in [0, 1], got {v}"))
            }
        };
        fraction("retransmit", self.retransmit)?;
        fraction("reorder", self.reorder)?;
        fraction("zero_fill", self.zero_fill)?;
        fraction("loss", self.loss)?;
        if self.loss > 0.0 && self.transport == "tcp" {
            return Err("loss applies to RDMA transports (rocev1, rocev2, infiniband, iwarp)".into());
        }
        if !["retransmit", "drop"].contains(&self.loss_mode.as_str()) {
            return Err(format!(
                "loss_mode must be \"retransmit\" or \"drop\", got {:?}",
                self.loss_mode
            ));
        }
        if ![256, 512, 1024, 2048, 4096].contains(&self.mtu) {
            return Err(format!(
                "mtu must be 256, 512, 1024, 2048 or 4096, got {}",
                self.mtu
            ));
        }
        // MS-SMBD §3.1.5.8 needs room for the 24-byte header plus data; 128 is the smallest
        // receive size a peer must accept.
        if !(128..=65536).contains(&self.max_send_size) {
            return Err(format!(
                "max_send_size must be between 128 and 65536, got {}",
                self.max_send_size
            ));
        }
        if !(1..=16).contains(&self.descriptors) {
            return Err(format!(
                "descriptors must be between 1 and 16, got {}",
                self.descriptors
            ));
        }
        if self.send_with_invalidate && self.dialect < dialect::SMB302 {
            return Err("send_with_invalidate needs SMB 3.0.2 or later".into());
        }
        if !(512..=u64::from(MAX_IO_SIZE)).contains(&self.io_size) {
            return Err(format!(
                "io_size (--io-size) must be between 512 and {MAX_IO_SIZE} bytes, got {}",
                self.io_size
            ));
        }
        if !(536..=9000).contains(&self.mss) {
            return Err(format!(
                "mss must be between 536 and 9000, got {}",
                self.mss
            ));
        }
        if self.other_ulp_port != 0 && !["rocev1", "rocev2", "infiniband"].contains(&self.transport.as_str()) {
            return Err("other_ulp_port applies to RoCE and InfiniBand (rocev1, rocev2, infiniband)".into());
        }
        if self.iwarp_terminate && self.transport != "iwarp" {
            return Err("iwarp_terminate applies to iwarp".into());
        }
        if [445, 5445].contains(&self.other_ulp_port) {
            return Err("other_ulp_port must not be an SMB Direct port (445, 5445)".into());
        }
        if !(1..=64).contains(&self.channels) {
            return Err(format!(
                "channels must be between 1 and 64, got {}",
                self.channels
            ));
        }
        if !(1..=800).contains(&self.link_gbps) {
            return Err(format!(
                "link_gbps must be between 1 and 800, got {}",
                self.link_gbps
            ));
        }
        if self.bytes > 1 << 40 {
            return Err(format!("bytes (--bytes) must be at most 1 TiB, got {}", self.bytes));
        }
        if ![dialect::SMB302, dialect::SMB311].contains(&self.dialect) {
            return Err(format!(
                "dialect must be 0x0302 or 0x0311, got {:#06x}",
                self.dialect
            ));
        }
        match self.transport.as_str() {
            "tcp" | "rocev1" | "rocev2" | "infiniband" | "iwarp" => {}
            other => {
                return Err(format!(
                    "unknown transport {other:?} (\"tcp\", \"rocev1\", \"rocev2\", \"infiniband\" or \"iwarp\")"
                ))
            }
        }
        if Compression::from_name(&self.compression)? != Compression::None {
            if self.dialect != dialect::SMB311 {
                return Err("compression needs dialect 3.1.1".into());
            }
            if self.transport != "tcp" {
                return Err("compression applies to transport \"tcp\"".into());
            }
        }
        let encap = crate::frames::Encap::from_name(&self.encap)?;
        if encap != crate::frames::Encap::None && self.transport == "infiniband" {
            return Err("encap (--encap) applies to Ethernet transports, not infiniband".into());
        }
        if crate::frames::Vlan::from_name(&self.vlan)? != crate::frames::Vlan::None && self.transport == "infiniband" {
            return Err("vlan (--vlan) applies to Ethernet transports, not infiniband".into());
        }
        if self.ipv6 && self.transport == "infiniband" {
            return Err("ipv6 (--ipv6) applies to Ethernet transports, not infiniband".into());
        }
        super::scenario::flows(&self.scenario)?;
        Ok(())
    }

    /// The validated `compression` option.
    pub fn compression(&self) -> Compression {
        Compression::from_name(&self.compression).unwrap_or_default()
    }

    pub fn rdma(&self) -> bool {
        self.transport != "tcp"
    }

    /// Number of I/Os: W / io_size, rounded up.
    pub fn ios(&self) -> u64 {
        self.bytes.div_ceil(self.io_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_dialect_forms() {
        let s = Spec::from_json(r#"{"scenario":"mirror2"}"#).unwrap();
        assert_eq!(
            (s.bytes, s.io_size, s.mss, s.channels, s.dialect),
            (64 * MIB, MIB, 1448, 1, 0x0302)
        );
        let r = Spec::from_json(r#"{"scenario":"six","transport":"rocev2","qps":2}"#).unwrap();
        assert_eq!(
            (r.channels, r.mtu, r.max_send_size, r.rdma()),
            (2, 4096, 1364, true)
        );
        for form in [r#""3.1.1""#, r#""0x0311""#, "785"] {
            let s = Spec::from_json(&format!(r#"{{"scenario":"six","dialect":{form}}}"#)).unwrap();
            assert_eq!(s.dialect, 0x0311);
        }
        for name in Compression::NAMES {
            let s = Spec::from_json(&format!(r#"{{"scenario":"six","dialect":"3.1.1","compression":"{name}"}}"#)).unwrap();
            assert_eq!(s.compression() == Compression::None, name == "none");
        }
    }

    #[test]
    fn refuses_bad_specs() {
        for bad in [
            r#"{"scenario":"nope"}"#,
            r#"{"scenario":"mirror2","retransmit":1.5}"#,
            r#"{"scenario":"mirror2","io_size":0}"#,
            r#"{"scenario":"mirror2","io_size":16777216}"#,
            r#"{"scenario":"mirror2","dialect":"2.1"}"#,
            r#"{"scenario":"mirror2","transport":"ib"}"#,
            r#"{"scenario":"mirror2","transport":"rocev2","mtu":1500}"#,
            r#"{"scenario":"mirror2","transport":"rocev2","loss":2}"#,
            r#"{"scenario":"mirror2","loss":0.1}"#,
            r#"{"scenario":"mirror2","transport":"iwarp","loss_mode":"maybe"}"#,
            r#"{"scenario":"mirror2","transport":"iwarp","max_send_size":64}"#,
            r#"{"scenario":"mirror2","chanels":2}"#,
            r#"{"scenario":"mirror2","channels":0}"#,
            r#"{"scenario":"mirror2","compression":"lz77"}"#,
            r#"{"scenario":"mirror2","dialect":"3.1.1","compression":"zip"}"#,
            r#"{"scenario":"mirror2","dialect":"3.1.1","transport":"iwarp","compression":"lznt1"}"#,
            r#"not json"#,
            r#"{}"#,
        ] {
            assert!(Spec::from_json(bad).is_err(), "{bad}");
        }
    }
}
