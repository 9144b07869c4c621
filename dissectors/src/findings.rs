//! Findings: what limits an analysis, as records. Each has a stable `code`, the figures it
//! is about (counts, bytes, names) and its sentence (`message`); the result carries them in
//! `findings`, and the sentences again, in the same order, in `warnings` (docs/json-schema.md).
//!
//! Every rule about what deserves a finding lives here: `derive` reads a result's figures
//! (its `tcp`, `smb2`, `accounting`, `index`, `anomalies` and `edges` sections), so `analyze`,
//! `attribute` (a result rebuilt from ledgers) and the live snapshots find exactly the same
//! things. The Python face only renders them.

use crate::accounting::{cat, Disposition, CATEGORIES};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// One finding: `{"code": ..., <figures>..., "message": ...}` in the JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub code: String,
    #[serde(flatten)]
    pub fields: Map<String, Value>,
    pub message: String,
}

/// The codes `derive` and the pipeline emit, with the figures each carries (the table in
/// docs/json-schema.md lists the same).
pub const CODES: &[(&str, &[&str])] = &[
    ("input_skipped", &["path"]),
    ("snaplen_truncated", &["frames"]),
    ("mirror_truncated", &["frames"]),
    ("tcp_gaps", &["gaps", "bytes"]),
    ("mirror_duplicates", &["frames", "bytes"]),
    ("retransmitted", &["segments", "bytes"]),
    ("smb_encrypted", &["messages", "bytes"]),
    ("smb_compressed", &["messages", "bytes"]),
    ("smb_decrypt_failed", &["messages", "bytes"]),
    ("accounting_unreconciled", &["total_bytes", "input_bytes"]),
    ("anomalies", &["total", "names"]),
    ("payload_incomplete", &["payloads", "bytes"]),
    ("not_analysed", &["category", "bytes"]),
    ("removed", &["category", "bytes"]),
    ("index_early_expiries", &["sends", "max_live_blocks"]),
    ("index_memory_cap", &["sends", "max_index_bytes", "shortest_window_ms"]),
    ("other_node", &["lookups"]),
    ("series_coarsened", &["interval_seconds", "requested_interval_seconds", "coarsenings"]),
    ("no_payload", &[]),
    ("membership_unknown", &["bytes"]),
];

impl Finding {
    pub fn new(code: &str, fields: Value, message: String) -> Finding {
        debug_assert!(CODES.iter().any(|(c, _)| *c == code), "finding code {code:?} is not in CODES");
        let fields = match fields {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        Finding { code: code.to_string(), fields, message }
    }
}

/// `1 gap`, `2 gaps`: a count with the word in the right number.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A capture file that could not be used beside usable ones (`capture.unusable_input`).
pub fn input_skipped(path: &str, error: &str, others: usize) -> Finding {
    Finding::new(
        "input_skipped",
        json!({ "path": path }),
        format!("{error}: skipped; the report covers the {others} other input{}", if others == 1 { "" } else { "s" }),
    )
}

/// The findings that follow from a result's figures, in the order the report prints them.
pub fn derive(r: &Value) -> Vec<Finding> {
    let n = |path: &[&str]| -> u64 {
        let mut v = r;
        for k in path {
            v = &v[*k];
        }
        v.as_u64().unwrap_or(0)
    };
    let category = |name: &str| n(&["accounting", "categories", name]);
    let mut out = Vec::new();
    // The cause of the gaps and incomplete payloads that follow, named first.
    // Frames cut short before the capture had them whole: the cause of the gaps and
    // incomplete payloads that follow, each named with its fix.
    for (code, anomaly, why) in [
        (
            "snaplen_truncated",
            crate::capture::Anomaly::SnaplenTruncatedFrame.name(),
            "by the capture's snapshot length (tcpdump -s): what was past the cut is not in the file and was not hashed (capture with tcpdump -s 0)",
        ),
        (
            "mirror_truncated",
            crate::wire::Anomaly::ErspanTruncatedFrame.name(),
            "by the mirroring switch to fit its ERSPAN tunnel: what was past the cut never reached the capture and was not hashed (give the path to the collector an MTU of the mirrored frames plus 50 bytes)",
        ),
    ] {
        let cut = n(&["anomalies", anomaly]);
        if cut > 0 {
            out.push(Finding::new(code, json!({ "frames": cut }), format!("{} cut short {why}", count(cut, "frame was", "frames were"))));
        }
    }
    let (gap_bytes, gaps) = (n(&["tcp", "gap_bytes"]), n(&["tcp", "gaps"]));
    if gap_bytes > 0 {
        out.push(Finding::new(
            "tcp_gaps",
            json!({ "gaps": gaps, "bytes": gap_bytes }),
            format!("{} missing from TCP streams in {} (lost or snaplen-truncated segments): payloads with missing bytes are not hashed", count(gap_bytes, "byte", "bytes"), count(gaps, "gap", "gaps")),
        ));
    }
    let mirror = n(&["tcp", "mirror_duplicate_frames"]);
    if mirror > 0 {
        out.push(Finding::new(
            "mirror_duplicates",
            json!({ "frames": mirror, "bytes": category(cat::MIRROR_DUPLICATE) }),
            format!("{} seen twice on the mirror port {} removed (never counted as a second send)", count(mirror, "frame", "frames"), if mirror == 1 { "was" } else { "were" }),
        ));
    }
    let (rb, rs) = (n(&["tcp", "retransmitted_bytes"]), n(&["tcp", "retransmitted_segments"]));
    if rb > 0 {
        out.push(Finding::new(
            "retransmitted",
            json!({ "segments": rs, "bytes": rb }),
            format!("{} retransmitted TCP {} in {} removed", rb, if rb == 1 { "byte" } else { "bytes" }, count(rs, "segment was", "segments were")),
        ));
    }
    let enc = category(cat::SMB_ENCRYPTED);
    if enc > 0 {
        out.push(Finding::new(
            "smb_encrypted",
            json!({ "messages": n(&["smb2", "encrypted_without_key"]), "bytes": enc }),
            if n(&["smb2", "decrypted_messages"]) > 0 {
                format!("{enc} bytes of encrypted SMB3 messages (TRANSFORM header) stayed encrypted: no key for their session")
            } else {
                format!("{enc} bytes of encrypted SMB3 messages (TRANSFORM header) were not analysed (--keys decrypts them)")
            },
        ));
    }
    let failed = category(cat::SMB_DECRYPT_FAILED);
    if failed > 0 {
        out.push(Finding::new(
            "smb_decrypt_failed",
            json!({ "messages": n(&["smb2", "decrypt_failed"]), "bytes": failed }),
            format!(
                "{failed} bytes of encrypted SMB3 messages did not decrypt with the given session key (a wrong key in --keys, or damaged messages)"
            ),
        ));
    }
    let comp = category(cat::SMB_COMPRESSED);
    if comp > 0 {
        out.push(Finding::new(
            "smb_compressed",
            json!({ "messages": n(&["smb2", "decompress_failed"]), "bytes": comp }),
            format!("{comp} bytes of compressed SMB3 messages could not be decompressed and were not analysed"),
        ));
    }
    let (total, input) = (n(&["accounting", "total_bytes"]), n(&["accounting", "input_bytes"]));
    // A live snapshot's accounting is provisional: bytes still buffered in reassembly are
    // accounted when they are delivered.
    let snapshot = r["snapshot"].as_bool() == Some(true);
    if total != input && !snapshot {
        out.push(Finding::new(
            "accounting_unreconciled",
            json!({ "total_bytes": total, "input_bytes": input }),
            format!("byte accounting does not reconcile: {total} accounted vs {input} in the input (a bug: please report it)"),
        ));
    }
    let names: Map<String, Value> = r["anomalies"]
        .as_object()
        .map(|m| m.iter().filter(|(_, v)| v.as_u64().is_some_and(|v| v > 0)).map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let n_anom: u64 = names.values().filter_map(Value::as_u64).sum();
    if n_anom > 0 {
        out.push(Finding::new(
            "anomalies",
            json!({ "total": n_anom, "names": names }),
            format!("{} in the input (see \"anomalies\")", count(n_anom, "anomaly", "anomalies")),
        ));
    }
    let incomplete = n(&["smb2", "payload_incomplete"]);
    if incomplete > 0 {
        out.push(Finding::new(
            "payload_incomplete",
            json!({ "payloads": incomplete, "bytes": n(&["smb2", "payload_incomplete_bytes"]) }),
            format!("{} incomplete in the capture {} not hashed", count(incomplete, "WRITE/READ payload", "WRITE/READ payloads"), if incomplete == 1 { "was" } else { "were" }),
        ));
    }
    // Every other category of bytes that were not analysed or were removed, from the table.
    let own_finding = [cat::SMB_ENCRYPTED, cat::SMB_DECRYPT_FAILED, cat::SMB_COMPRESSED, cat::MIRROR_DUPLICATE, cat::RETRANSMITTED];
    for c in CATEGORIES {
        let bytes = category(c.name);
        if bytes == 0 || own_finding.contains(&c.name) {
            continue;
        }
        let (code, what) = match c.disposition {
            Disposition::NotAnalysed => ("not_analysed", "not analysed"),
            Disposition::Removed => ("removed", "removed"),
            _ => continue,
        };
        out.push(Finding::new(
            code,
            json!({ "category": c.name, "bytes": bytes }),
            format!("{bytes} bytes {what} ({}): {}", c.name, c.description),
        ));
    }
    let early = n(&["index", "early_expiries"]);
    if early > 0 {
        let bound = n(&["index", "max_live_blocks"]);
        out.push(Finding::new(
            "index_early_expiries",
            json!({ "sends": early, "max_live_blocks": bound }),
            format!("{} the dedupe index before {} window ended (live-block bound {bound} reached): duplicates of {} may be missed", count(early, "send left", "sends left"), if early == 1 { "its" } else { "their" }, if early == 1 { "it" } else { "them" }),
        ));
    }
    let early = n(&["index", "memory_early_expiries"]);
    if early > 0 {
        let bound = n(&["index", "max_index_bytes"]);
        let ms = (r["index"]["shortest_window_seconds"].as_f64().unwrap_or(0.0) * 1000.0) as u64;
        out.push(Finding::new(
            "index_memory_cap",
            json!({ "sends": early, "max_index_bytes": bound, "shortest_window_ms": ms }),
            format!("{early} sends left the dedupe index before their window ended (memory bound {bound} bytes reached; the window was as short as {ms} ms): duplicates further apart may be missed"),
        ));
    }
    let other = n(&["index", "other_node_lookups"]);
    if other > 0 {
        out.push(Finding::new(
            "other_node",
            json!({ "lookups": other }),
            format!("{} from/to unlisted addresses {} lumped into node 'other' (too many distinct addresses): use a topology file", count(other, "send", "sends"), if other == 1 { "was" } else { "were" }),
        ));
    }
    if r["membership"].as_str() == Some("unknown") {
        let unclassified: u64 = r["edges"]
            .as_array()
            .map(|edges| {
                edges
                    .iter()
                    .filter(|e| matches!(e["class"].as_str(), Some("write" | "read")))
                    .filter_map(|e| e["payload_bytes"].as_u64())
                    .sum()
            })
            .unwrap_or(0);
        if unclassified > 0 {
            out.push(Finding::new(
                "membership_unknown",
                json!({ "bytes": unclassified }),
                format!(
                    "no topology: {unclassified} payload bytes are labelled write/read (unclassified), because only forwarding seen on the wire proves redirection and replication; give --topology nodes.toml (docs/topology.md) to classify by cluster membership, or --assume-members to treat every address as a member"
                ),
            ));
        }
    }
    let coarsenings = n(&["series", "coarsenings"]);
    if coarsenings > 0 {
        let (got, asked) = (&r["series"]["interval_seconds"], &r["series"]["requested_interval_seconds"]);
        out.push(Finding::new(
            "series_coarsened",
            json!({ "interval_seconds": got, "requested_interval_seconds": asked, "coarsenings": coarsenings }),
            format!(
                "the time series has {got} s intervals, not the {asked} s asked for: it is kept to {} intervals and {} rows (every figure stays exact)",
                n(&["series", "max_intervals"]),
                n(&["series", "max_rows"]),
            ),
        ));
    }
    if r["edges"].as_array().is_some_and(|e| e.is_empty()) {
        out.push(Finding::new("no_payload", json!({}), "no SMB2 WRITE/READ payload found: nothing to compare".into()));
    }
    out
}

/// Set a result's `findings` (the inputs' own, then the derived ones) and `warnings` (their
/// sentences). Keys already present keep their position.
pub fn attach(result: &mut Value, inputs: Vec<Finding>) {
    let mut all = inputs;
    all.extend(derive(result));
    let warnings: Vec<Value> = all.iter().map(|f| Value::from(f.message.clone())).collect();
    result["findings"] = serde_json::to_value(&all).unwrap_or(Value::Array(Vec::new()));
    result["warnings"] = Value::Array(warnings);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_result_has_no_findings() {
        let r = json!({"tcp": {"gaps": 0}, "accounting": {"categories": {"smb_payload": 10}, "total_bytes": 10, "input_bytes": 10},
                       "anomalies": {}, "edges": [{"src": "a"}]});
        assert!(derive(&r).is_empty());
    }

    #[test]
    fn a_coarsened_series_is_a_finding() {
        let series = json!({"interval_seconds": 16.0, "requested_interval_seconds": 1.0, "coarsenings": 4,
                            "max_intervals": 10000, "max_rows": 262144});
        let f = derive(&json!({"edges": [{}], "series": series}));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].code, "series_coarsened");
        assert_eq!(f[0].fields["interval_seconds"], 16.0);
        assert_eq!(f[0].fields["coarsenings"], 4);
        assert!(f[0].message.contains("16.0 s intervals, not the 1.0 s"), "{}", f[0].message);
        let series = json!({"interval_seconds": 1.0, "requested_interval_seconds": 1.0, "coarsenings": 0});
        assert!(derive(&json!({"edges": [{}], "series": series})).is_empty());
    }

    #[test]
    fn a_live_snapshot_does_not_reconcile_yet() {
        let r = json!({"snapshot": true, "accounting": {"total_bytes": 5, "input_bytes": 9}, "edges": [{}]});
        assert!(derive(&r).is_empty());
        let r = json!({"accounting": {"total_bytes": 5, "input_bytes": 9}, "edges": [{}]});
        assert_eq!(derive(&r)[0].code, "accounting_unreconciled");
    }

    #[test]
    fn one_of_a_thing_is_singular() {
        let r = json!({
            "edges": [{"class": "write", "payload_bytes": 4096}],
            "membership": "unknown",
            "tcp": {"gap_bytes": 1, "gaps": 1, "mirror_duplicate_frames": 1, "retransmitted_bytes": 1, "retransmitted_segments": 1},
            "smb2": {"payload_incomplete": 1},
            "index": {"early_expiries": 1, "other_node_lookups": 1},
            "anomalies": {"tcp.bad_header_length": 1},
        });
        let text: Vec<String> = derive(&r).into_iter().map(|f| f.message).collect();
        let all = text.join("\n");
        for want in [
            "1 byte missing from TCP streams in 1 gap (",
            "1 frame seen twice on the mirror port was removed",
            "1 retransmitted TCP byte in 1 segment was removed",
            "1 anomaly in the input",
            "1 WRITE/READ payload incomplete in the capture was not hashed",
            "1 send left the dedupe index before its window ended",
            "1 send from/to unlisted addresses was lumped",
            "no topology: 4096 payload bytes are labelled write/read (unclassified)",
        ] {
            assert!(all.contains(want), "{want:?} not in\n{all}");
        }
        for plural in ["1 gaps", "1 anomalies", "1 frames", "1 sends", "1 segments"] {
            assert!(!all.contains(plural), "{plural:?} in\n{all}");
        }
        // A topology (or --assume-members) leaves nothing unclassified to warn about.
        let mut known = r.clone();
        known["membership"] = json!("topology");
        assert!(derive(&known).iter().all(|f| f.code != "membership_unknown"));
    }

    fn f_len(r: &Value) -> usize {
        derive(r).len()
    }

    #[test]
    fn figures_become_findings_with_codes() {
        let r = json!({
            "edges": [],
            "tcp": {"gap_bytes": 2920, "gaps": 2, "mirror_duplicate_frames": 17, "retransmitted_bytes": 14600, "retransmitted_segments": 10},
            "smb2": {"encrypted_messages": 1, "encrypted_without_key": 1, "payload_incomplete": 3, "payload_incomplete_bytes": 9},
            "accounting": {"categories": {"smb_encrypted": 1000, "smb_unparsed": 5, "rdma_retransmitted": 7, "mirror_duplicate": 1700},
                           "total_bytes": 5, "input_bytes": 6},
            "index": {"early_expiries": 12, "max_live_blocks": 100, "other_node_lookups": 3},
            "anomalies": {"tcp.bad_header_length": 1, "smb2.write.data_offset_out_of_range": 3},
        });
        let f = derive(&r);
        let mut cut = r.clone();
        cut["anomalies"]["erspan.truncated_frame"] = json!(3);
        let g = derive(&cut);
        assert_eq!((g[0].code.as_str(), &g[0].fields["frames"]), ("mirror_truncated", &json!(3)));
        assert!(g[0].message.contains("ERSPAN tunnel"), "{}", g[0].message);
        let mut cut = r.clone();
        cut["anomalies"]["capture.snaplen_truncated_frame"] = json!(1461);
        let g = derive(&cut);
        assert_eq!((g[0].code.as_str(), &g[0].fields["frames"]), ("snaplen_truncated", &json!(1461)));
        assert!(g[0].message.starts_with("1461 frames were cut short by the capture's snapshot length"), "{}", g[0].message);
        assert_eq!(g.len(), f_len(&r) + 1, "one more finding, the rest as without it");
        let codes: Vec<&str> = f.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(
            codes,
            [
                "tcp_gaps", "mirror_duplicates", "retransmitted", "smb_encrypted", "accounting_unreconciled", "anomalies",
                "payload_incomplete", "not_analysed", "removed", "index_early_expiries", "other_node", "no_payload"
            ]
        );
        assert_eq!(f[1].fields["bytes"], 1700);
        assert_eq!(f[5].fields["total"], 4);
        assert_eq!(f[7].fields["category"], "smb_unparsed");
        for x in &f {
            let (_, fields) = CODES.iter().find(|(c, _)| *c == x.code).unwrap();
            let keys: Vec<&str> = x.fields.keys().map(String::as_str).collect();
            assert_eq!(&keys, fields, "{}", x.code);
        }
        let v = serde_json::to_value(&f[0]).unwrap();
        assert_eq!(v, json!({"code": "tcp_gaps", "gaps": 2, "bytes": 2920, "message": f[0].message}));
        let back: Finding = serde_json::from_value(v).unwrap();
        assert_eq!(back, f[0]);
    }
}
