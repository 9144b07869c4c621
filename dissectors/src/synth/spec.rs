//! What to generate: the scenario and its options, as JSON (`_core.synth(spec_json, path)`).

use super::smb2::{dialect, MAX_IO_SIZE};
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
    /// Fraction of data segments also sent again later (same seq and payload, new IP ID).
    pub retransmit: f64,
    /// Fraction of data segments swapped with the next one.
    pub reorder: f64,
    pub seed: u64,
    /// TCP maximum segment size (payload bytes per segment).
    pub mss: u64,
    /// Highest SMB dialect offered and chosen: 0x0302 or 0x0311 (JSON number, or a string
    /// such as "3.1.1" or "0x0311").
    #[serde(deserialize_with = "deserialize_dialect")]
    pub dialect: u16,
    /// "tcp" (SMB2 over Direct TCP). RDMA transports are not implemented yet.
    pub transport: String,
    /// TCP connections (SMB multichannel channels) per client→server session.
    pub channels: u64,
    /// Fraction of 4 KiB blocks that are all zeros (trivial blocks).
    pub zero_fill: f64,
    /// Link rate that paces frame timestamps, in Gb/s.
    pub link_gbps: u64,
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
            zero_fill: 0.0,
            link_gbps: 10,
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
        if !(512..=u64::from(MAX_IO_SIZE)).contains(&self.io_size) {
            return Err(format!(
                "io_size must be between 512 and {MAX_IO_SIZE} bytes, got {}",
                self.io_size
            ));
        }
        if !(536..=9000).contains(&self.mss) {
            return Err(format!(
                "mss must be between 536 and 9000, got {}",
                self.mss
            ));
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
            return Err(format!("bytes must be at most 1 TiB, got {}", self.bytes));
        }
        if ![dialect::SMB302, dialect::SMB311].contains(&self.dialect) {
            return Err(format!(
                "dialect must be 0x0302 or 0x0311, got {:#06x}",
                self.dialect
            ));
        }
        match self.transport.as_str() {
            "tcp" => {}
            "rocev2" | "iwarp" => {
                return Err(format!(
                    "transport {:?} is not implemented yet (only \"tcp\")",
                    self.transport
                ))
            }
            other => return Err(format!("unknown transport {other:?} (only \"tcp\")")),
        }
        super::scenario::flows(&self.scenario)?;
        Ok(())
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
        for form in [r#""3.1.1""#, r#""0x0311""#, "785"] {
            let s = Spec::from_json(&format!(r#"{{"scenario":"six","dialect":{form}}}"#)).unwrap();
            assert_eq!(s.dialect, 0x0311);
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
            r#"{"scenario":"mirror2","transport":"rocev2"}"#,
            r#"{"scenario":"mirror2","chanels":2}"#,
            r#"{"scenario":"mirror2","channels":0}"#,
            r#"not json"#,
            r#"{}"#,
        ] {
            assert!(Spec::from_json(bad).is_err(), "{bad}");
        }
    }
}
