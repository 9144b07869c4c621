//! Property: noise on the wire never changes the analysis. For random seeds and random noise
//! — RoCEv2 data packets lost and resent later (same PSN) and mirror-port copies; iWARP TCP
//! segments retransmitted, reordered and lost-then-resent, and mirror copies — the redirect4
//! and nested4 scenarios, pushed through the real `Pipeline`, give the same edges (payload
//! bytes, unique bytes, sends, dup ratio, class) and totals as the clean capture of the
//! same seed. The clean figures are also checked against the generator's truth, so that a
//! pipeline seeing nothing cannot pass by agreeing with itself.

use super::read_pcap;
use crate::*;
use smbwire_dissectors::accounting::Accounting;
use smbwire_dissectors::capture::{linktype, FrameInfo, RawFrame};
use smbwire_dissectors::frame::FrameRef;
use smbwire_dissectors::pipeline::{Config, Pipeline};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use serde_json::{json, Value};
use std::time::Instant;

const MIB: u64 = 1 << 20;
/// Five I/Os of 256 KiB, the last one short and not block-aligned.
const BYTES: u64 = MIB + 3 * 4096 + 100;
const IO: u64 = 256 * 1024;

const TOPOLOGY: &str = r#"{"topology": {"nodes": [
    {"name": "owner", "addresses": ["198.18.0.1"], "member": true},
    {"name": "partner", "addresses": ["198.18.0.2"], "member": true}]}}"#;

fn capture(spec: &Value) -> (Vec<u8>, Truth) {
    let spec = Spec::from_json(&spec.to_string()).unwrap();
    let mut buf = Vec::new();
    let truth = generate_to(&spec, pcap::PcapWriter::new(&mut buf).unwrap()).unwrap();
    (buf, truth)
}

/// The capture through `Pipeline::process`: (edges reduced to the compared fields, sorted;
/// totals; RDMA gaps).
fn figures(pcap: &[u8]) -> (Vec<Value>, Value, Value) {
    let mut p = Pipeline::new(&Config::from_json(TOPOLOGY).unwrap(), None);
    for (i, f) in read_pcap(pcap).iter().enumerate() {
        let info = FrameInfo {
            frame: FrameRef { file: 0, number: i as u64 + 1 },
            ts_ns: f.ts,
            linktype: linktype::ETHERNET,
            orig_len: f.data.len() as u32,
        };
        p.process(&RawFrame { info, data: &f.data });
    }
    let r = serde_json::to_value(p.finish(Vec::new(), Accounting::default(), Instant::now())).unwrap();
    let mut edges: Vec<Value> = r["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            json!([e["src"], e["dst"], e["class"], e["payload_bytes"], e["unique_bytes"], e["sends"], e["dup_ratio"]])
        })
        .collect();
    edges.sort_by_key(|e| e.to_string());
    (edges, r["totals"].clone(), r["rdma"]["gaps"].clone())
}

fn noise_strategy() -> impl Strategy<Value = (String, String, u64, Value)> {
    let scenario = prop_oneof![Just("redirect4".to_string()), Just("nested4".to_string())];
    // Rates high enough that a 1 MiB capture always gets some of each noise asked for.
    let frac = || prop_oneof![Just(0.0), 0.01f64..0.05];
    let roce = (any::<bool>(), 0.01f64..0.05)
        .prop_map(|(mirror, loss)| ("rocev2".to_string(), json!({"mirror_dup": mirror, "loss": loss})));
    let iwarp = (any::<bool>(), frac(), frac(), frac()).prop_map(|(mirror, retransmit, reorder, loss)| {
        (
            "iwarp".to_string(),
            json!({"mirror_dup": mirror, "retransmit": retransmit, "reorder": reorder, "loss": loss}),
        )
    });
    (scenario, prop_oneof![roce, iwarp], 1u64..1_000_000)
        .prop_map(|(s, (t, noise), seed)| (s, t, seed, noise))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 16,
        // The same 16 cases on every run: the property is checked, never a coin flipped.
        rng_seed: RngSeed::Fixed(0x5eed_4d1a),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn rdma_noise_leaves_the_figures_unchanged((scenario, transport, seed, noise) in noise_strategy()) {
        let base = json!({"scenario": scenario, "bytes": BYTES, "io_size": IO, "seed": seed,
                          "transport": transport});
        let (clean_pcap, truth) = capture(&base);
        let clean = figures(&clean_pcap);
        // The clean run agrees with the generator: every payload byte found, on the right edges.
        let moved: u64 = clean.0.iter().map(|e| e[3].as_u64().unwrap()).sum();
        prop_assert_eq!(moved, truth.totals.payload_bytes);
        prop_assert!(moved > 0);
        for e in &truth.edges {
            prop_assert!(clean.0.iter().any(|c| c[0] == e.src.as_str() && c[1] == e.dst.as_str()
                && c[2] == serde_json::to_value(e.class).unwrap()
                && c[3] == e.payload_bytes && c[4] == e.unique_bytes && c[5] == e.sends),
                "truth edge {:?} missing from {:?}", e, clean.0);
        }
        let mut noisy_spec = base.clone();
        for (k, v) in noise.as_object().unwrap() {
            noisy_spec[k] = v.clone();
        }
        let (noisy_pcap, _) = capture(&noisy_spec);
        // The noise is real: the capture differs whenever any noise was asked for.
        let asked = noise.as_object().unwrap().values().any(|v| v.as_f64().unwrap_or(0.0) > 0.0 || v == &json!(true));
        if asked {
            prop_assert!(noisy_pcap != clean_pcap, "noise {} changed nothing", noise);
        }
        let noisy = figures(&noisy_pcap);
        prop_assert_eq!(&noisy.0, &clean.0, "edges, noise {}", noise);
        prop_assert_eq!(&noisy.1, &clean.1, "totals, noise {}", noise);
        prop_assert_eq!(&noisy.2, &clean.2, "gaps, noise {}", noise);
    }
}

/// BTH of every RoCEv2 frame (IPv4 / UDP 4791, no options): (opcode, SE bit).
fn rocev2_bths(pcap: &[u8]) -> Vec<(u8, bool)> {
    read_pcap(pcap)
        .iter()
        .filter(|f| f.data[12..14] == [8, 0] && f.data[23] == 17 && f.data[36..38] == [0x12, 0xb7])
        .map(|f| (f.data[42], f.data[43] & 0x80 != 0))
        .collect()
}

/// `solicited_event` is opt-in: off, nothing changes; on, iWARP Sends become RDMAP opcodes 5
/// (Send with Solicited Event) and 6 (... and Invalidate), and RoCE Sends set the BTH SE bit
/// on their last packet; either way the analyzer's figures are the ones without it, and the
/// analyzer sees exactly the opcodes the generator sent.
#[test]
fn solicited_event_sends_change_no_figure() {
    for transport in ["rocev2", "iwarp"] {
        for invalidate in [false, true] {
            let base = json!({"scenario": "redirect4", "bytes": BYTES, "io_size": IO, "seed": 11,
                              "transport": transport, "send_with_invalidate": invalidate,
                              "max_send_size": 512});
            let (plain, plain_truth) = capture(&base);
            let mut off = base.clone();
            off["solicited_event"] = json!(false);
            assert!(capture(&off).0 == plain, "default is off");
            let mut on = base.clone();
            on["solicited_event"] = json!(true);
            let (se, se_truth) = capture(&on);
            assert!(se != plain, "{transport}: solicited_event changed nothing");
            let (pr, sr) = (plain_truth.rdma.unwrap(), se_truth.rdma.unwrap());
            assert_eq!(pr.solicited_events, 0);
            let sends = pr.smbd_negotiate_requests + pr.smbd_negotiate_responses + pr.smbd_data_messages;
            assert_eq!(sr.solicited_events, sends, "{transport}: every SMB Direct Send");
            let count = |t: &crate::rdma::RdmaTruth, op: &str| t.opcodes.get(op).copied().unwrap_or(0);
            if transport == "iwarp" {
                // Each Send is one RDMAP message; its FPDUs all carry the opcode.
                for (old, new) in [("3", "5"), ("4", "6")] {
                    assert_eq!(count(&pr, new), 0);
                    assert_eq!(count(&sr, old), 0, "no plain Send left");
                    assert_eq!(count(&sr, new), count(&pr, old), "opcode {new}");
                }
                assert_eq!(count(&sr, "6") > 0, invalidate);
                assert_eq!(sr.send_with_invalidate, pr.send_with_invalidate);
            } else {
                assert_eq!(sr.opcodes, pr.opcodes, "RoCE opcodes unchanged");
                let bths = rocev2_bths(&se);
                assert!(rocev2_bths(&plain).iter().all(|&(_, s)| !s));
                // SE on SEND_LAST (2), SEND_ONLY (4) and their with-Invalidate forms (0x16,
                // 0x17), once per Send; never on another opcode.
                assert!(bths.iter().filter(|b| b.1).all(|b| [2, 4, 0x16, 0x17].contains(&b.0)));
                assert_eq!(bths.iter().filter(|b| b.1).count() as u64, sends);
            }
            let (a, b) = (figures(&plain), figures(&se));
            assert!(a.0.iter().map(|e| e[3].as_u64().unwrap()).sum::<u64>() > 0);
            assert_eq!(a, b, "{transport} invalidate={invalidate}");
            // The analyzer counted the generator's opcodes.
            let r = analyzed_opcodes(&se, transport);
            let want: std::collections::BTreeMap<String, u64> = sr
                .opcodes
                .iter()
                .map(|(k, v)| (k.parse::<u8>().unwrap(), *v))
                .map(|(k, v)| (if transport == "iwarp" { format!("{k:#04x}") } else { k.to_string() }, v))
                .collect();
            assert_eq!(r, want, "{transport} analyzer opcodes");
        }
    }
}

fn analyzed_opcodes(pcap: &[u8], transport: &str) -> std::collections::BTreeMap<String, u64> {
    let mut p = Pipeline::new(&Config::from_json(TOPOLOGY).unwrap(), None);
    for (i, f) in read_pcap(pcap).iter().enumerate() {
        let info = FrameInfo {
            frame: FrameRef { file: 0, number: i as u64 + 1 },
            ts_ns: f.ts,
            linktype: linktype::ETHERNET,
            orig_len: f.data.len() as u32,
        };
        p.process(&RawFrame { info, data: &f.data });
    }
    let r = serde_json::to_value(p.finish(Vec::new(), Accounting::default(), Instant::now())).unwrap();
    let counts = if transport == "iwarp" { &r["rdma"]["iwarp"]["opcodes"] } else { &r["rdma"]["infiniband"]["bth_opcodes"] };
    serde_json::from_value(counts.clone()).unwrap()
}
