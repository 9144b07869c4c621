use super::*;
use crate::capture::testutil::open_bytes;
use crate::parallel::analyze_files;
use crate::pipeline::Config;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// (frame number, comment) of every EPB of a pcapng file written by `writer`.
fn comments(bytes: &[u8]) -> Vec<(u64, Option<String>)> {
    let u32at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u16at = |o: usize| u16::from_le_bytes(bytes[o..o + 2].try_into().unwrap()) as usize;
    let (mut off, mut n, mut out) = (0usize, 0u64, Vec::new());
    while off < bytes.len() {
        let (ty, len) = (u32at(off), u32at(off + 4) as usize);
        if ty == 6 {
            n += 1;
            let caplen = u32at(off + 20) as usize;
            let mut o = off + 28 + caplen.div_ceil(4) * 4;
            let mut c = None;
            while o + 4 <= off + len - 4 {
                let (code, l) = (u16at(o), u16at(o + 2));
                if code == 0 {
                    break;
                }
                if code == 1 {
                    c = Some(String::from_utf8(bytes[o + 4..o + 4 + l].to_vec()).unwrap());
                }
                o += 4 + l.div_ceil(4) * 4;
            }
            out.push((n, c));
        }
        off += len;
    }
    out
}

/// Analyses `cap` with `config`, annotates, and checks: every frame byte-identical to the
/// input in the same order; every frame named in the evidence (first, last, header) has a
/// comment naming its payload; every commented frame lies within a send's frames.
fn check(caps: &[&str], config: &Config) -> (AnnotateStats, usize) {
    let dir = std::env::temp_dir().join(format!("smbwire-annotate-{}-{}", std::process::id(), caps.join("+").replace('/', "_")));
    std::fs::create_dir_all(&dir).unwrap();
    let ev = dir.join("ev.jsonl").to_str().unwrap().to_string();
    let out = dir.join("out.pcapng").to_str().unwrap().to_string();
    let paths: Vec<String> = caps.iter().map(|c| root().join(c).to_str().unwrap().to_string()).collect();
    analyze_files(&paths, config, Some(&ev), &mut |_, _| true).unwrap();
    let stats = annotate_files(&paths, &ev, &out).unwrap();

    // The output is the merge of the inputs, frame for frame; `at` maps (file, number) to the
    // output's frame number.
    let written = std::fs::read(&out).unwrap();
    let mut a = Merged::open(&paths).unwrap();
    let mut b = open_bytes(written.clone()).unwrap();
    let (mut acct, mut an) = (Accounting::default(), Anomalies::default());
    let mut at = HashMap::new();
    let mut frames = 0u64;
    while let Some(x) = a.next_frame(&mut acct, &mut an) {
        assert!(b.advance(&mut acct, &mut an));
        let y = b.current().unwrap();
        assert_eq!(x.data, y.data);
        assert_eq!((x.info.ts_ns, x.info.linktype, x.info.orig_len), (y.info.ts_ns, y.info.linktype, y.info.orig_len));
        frames += 1;
        at.insert((x.info.frame.file as u64, x.info.frame.number), frames);
    }
    assert!(!b.advance(&mut acct, &mut an));
    assert_eq!(stats.frames_written, frames);

    let got = comments(&written);
    let commented: BTreeSet<u64> = got.iter().filter(|(_, c)| c.is_some()).map(|(n, _)| *n).collect();
    assert_eq!(commented.len() as u64, stats.frames_commented);
    let text = std::fs::read_to_string(&ev).unwrap();
    let mut named = BTreeSet::new();
    let mut ranges = Vec::new();
    let mut sends = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let digest = &v["digest"].as_str().unwrap()[..16];
        for s in v["sends"].as_array().unwrap() {
            sends += 1;
            let file = s["file"].as_u64().unwrap();
            let (f, l) = (s["frames"][0].as_u64().unwrap(), s["frames"][1].as_u64().unwrap());
            let mut own = vec![f, l];
            own.extend(s["header_frame"].as_u64());
            for n in own {
                let n = at[&(file, n)];
                let c = got[n as usize - 1].1.as_deref().unwrap_or_else(|| panic!("frame {n} has no comment"));
                assert!(c.contains(&format!("payload {digest} send ")), "frame {n}: {c}");
                named.insert(n);
            }
            ranges.push((at[&(file, f)], at[&(file, l)]));
        }
    }
    assert!(sends > 0, "{caps:?}: no duplicated payload");
    assert_eq!(stats.sends, sends as u64);
    for n in &commented {
        assert!(named.contains(n) || ranges.iter().any(|&(f, l)| f <= *n && *n <= l), "frame {n} commented outside every send");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    (stats, named.len())
}

#[test]
fn tcp_capture_comments_every_send_and_keeps_every_frame() {
    let topo = std::fs::read_to_string(root().join("captures/s2d-two-node.toml")).unwrap();
    let config = Config { topology: crate::dedupe::topology::Topology::from_toml(&topo).unwrap(), ..Config::default() };
    let (stats, named) = check(&["captures/nested4-1MiB.pcap"], &config);
    // 1 MiB WRITEs in MSS-sized segments: far more commented frames than named ones.
    assert!(stats.frames_commented > 4 * named as u64, "{stats:?} named {named}");
    assert_eq!(stats.interfaces, 1);
}

/// Two inputs (a pcap and a pcapng of another experiment): the output is their merge by time,
/// and the evidence's (file, frame) references land on the right output frames.
#[test]
fn several_inputs_are_merged_in_time_order() {
    let topo = std::fs::read_to_string(root().join("captures/s2d-two-node.toml")).unwrap();
    let config = Config { topology: crate::dedupe::topology::Topology::from_toml(&topo).unwrap(), ..Config::default() };
    let (stats, _) = check(&["captures/public/smb311-win10-handshake.pcapng", "captures/redirect4-1MiB.pcap"], &config);
    assert!(stats.frames_commented > 0);
}

#[test]
fn comment_text_names_position_kind_class_and_edge() {
    let s = EvSend {
        file: 0,
        frames: [1, 2],
        header_frame: None,
        src: "198.18.0.1".parse().unwrap(),
        dst: "198.18.0.2".parse().unwrap(),
        src_port: Some(50000),
        dst_port: Some(445),
        src_node: "owner".into(),
        dst_node: "partner".into(),
        offset: Some(262144),
        class: Some("replication".into()),
        dup_kind: Some("per_copy".into()),
    };
    assert_eq!(
        comment("356c46251b84e92b0000", 2, 3, &s),
        "smbwire: payload 356c46251b84e92b send 2/3 per-copy duplicate, replication owner->partner, offset 262144"
    );
}

#[test]
fn bad_evidence_is_one_line_error() {
    let dir = std::env::temp_dir().join(format!("smbwire-annotate-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ev = dir.join("ev.jsonl");
    std::fs::write(&ev, "{not json\n").unwrap();
    let cap = root().join("captures/read-owner.pcap").to_str().unwrap().to_string();
    let e = annotate_files(&[cap], ev.to_str().unwrap(), dir.join("o.pcapng").to_str().unwrap()).unwrap_err();
    assert!(e.contains("ev.jsonl:1: not an smbwire evidence line"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Hostile evidence: a send naming an input that was not given is one line; frames out of
/// range, reversed, or at u64::MAX, a short digest and an absent class comment nothing that
/// is not there and never panic.
#[test]
fn hostile_evidence_lines() {
    let dir = std::env::temp_dir().join(format!("smbwire-annotate-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cap = root().join("captures/read-owner.pcap").to_str().unwrap().to_string();
    let ev = dir.join("ev.jsonl");
    let send = |file: u32, a: u64, b: u64| {
        format!(r#"{{"file":{file},"frames":[{a},{b}],"src":"198.18.0.1","dst":"198.18.0.2","src_node":"a","dst_node":"b","offset":0}}"#)
    };
    std::fs::write(&ev, format!("{{\"digest\":\"ab\",\"sends_total\":3,\"sends\":[{},{},{}]}}\n", send(0, 5, 2), send(0, u64::MAX, u64::MAX), send(0, 0, 0))).unwrap();
    let out = dir.join("o.pcapng");
    let s = annotate_files(std::slice::from_ref(&cap), ev.to_str().unwrap(), out.to_str().unwrap()).unwrap();
    // The reversed range [5, 2] is read as frame 5 alone.
    assert_eq!((s.sends, s.frames_commented), (3, 1));
    let got = comments(&std::fs::read(&out).unwrap());
    assert_eq!(got[4].1.as_deref(), Some("smbwire: payload ab send 1/3 undecided, unclassified a->b, offset 0"));
    std::fs::write(&ev, format!("{{\"digest\":\"ab\",\"sends_total\":1,\"sends\":[{}]}}\n", send(5, 1, 1))).unwrap();
    let e = annotate_files(&[cap], ev.to_str().unwrap(), out.to_str().unwrap()).unwrap_err();
    assert!(e.contains("send names input 5; 1 given"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
