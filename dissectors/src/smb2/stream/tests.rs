//! Streaming parser tests: real TCP streams of the public captures (extracted at test time
//! with `tshark -z follow,tcp,raw`), compared with tshark's counts in expected.json, plus
//! synthetic streams for compounds, gaps, resync and hostile lengths.
use super::*;
use crate::frame::FrameRef;
use crate::payload::send::{SendKind, SendRecord, Transport};
use crate::smb2::records::{self as rec, command};
use crate::accounting::Accounting;
use crate::anomaly::Anomalies;
use crate::payload::hash::digest_of;
use crate::smb2::records::HeaderRepr;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::process::Command;

/// The public captures bundled in the repository (`captures/public/`, as
/// `capture::testutil::public_dir` finds them); a missing directory fails the test.
fn captures() -> std::path::PathBuf {
    crate::capture::testutil::public_dir()
}

#[derive(Default)]
struct Recorder {
    sends: Vec<SendRecord>,
    completes: Vec<(u64, u64)>,
}

impl PayloadSink for Recorder {
    fn send(&mut self, rec: SendRecord) {
        self.sends.push(rec);
    }
    fn complete(&mut self, conn: u64, message_id: u64, _ts_ns: u64) {
        self.completes.push((conn, message_id));
    }
}

#[derive(Default)]
struct Harness {
    anomalies: Anomalies,
    accounting: Accounting,
    smb: SmbState,
    rec: Recorder,
    fed: u64,
}

impl Harness {
    fn parts(&mut self) -> Parts<'_> {
        Parts { anomalies: &mut self.anomalies, accounting: &mut self.accounting, smb: &mut self.smb, sink: &mut self.rec }
    }
}

fn addr(last: u8, port: u16) -> (IpAddr, u16) {
    (IpAddr::V4(Ipv4Addr::new(198, 18, 0, last)), port)
}

fn ctx(n: u64) -> FrameCtx {
    FrameCtx { frame: FrameRef { file: 0, number: n }, ts_ns: n * 1000, seq: 0 }
}

/// Both directions of one connection.
struct Conn {
    c2s: Smb2Stream,
    s2c: Smb2Stream,
}

impl Conn {
    fn new(id: u64) -> Conn {
        Conn { c2s: Smb2Stream::new(id, true, addr(1, 50000), addr(2, 445)), s2c: Smb2Stream::new(id, false, addr(2, 445), addr(1, 50000)) }
    }
    fn feed(&mut self, h: &mut Harness, to_server: bool, bytes: &[u8], n: u64) {
        h.fed += bytes.len() as u64;
        let s = if to_server { &mut self.c2s } else { &mut self.s2c };
        s.on_message(bytes, &ctx(n), &mut h.parts());
    }
    fn close(&mut self, h: &mut Harness) {
        self.c2s.on_close(&ctx(0), &mut h.parts());
        self.s2c.on_close(&ctx(0), &mut h.parts());
    }
}

type Segments = Vec<(bool, Vec<u8>)>;

/// The in-order segments of TCP stream `n` as (to_server, bytes), via tshark (cached per
/// test process: several tests replay the same streams).
fn follow(file: &str, n: u32) -> Segments {
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<BTreeMap<(String, u32), Segments>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(BTreeMap::new()));
    if let Some(v) = cache.lock().unwrap().get(&(file.to_string(), n)) {
        return v.clone();
    }
    let v = follow_uncached(file, n);
    cache.lock().unwrap().insert((file.to_string(), n), v.clone());
    v
}

fn follow_uncached(file: &str, n: u32) -> Segments {
    let out = Command::new("tshark")
        .args(["-n", "-r", file, "-q", "-z", &format!("follow,tcp,raw,{n}")])
        .current_dir(captures())
        .output()
        .expect("tshark must be installed for the capture tests");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut node0_is_server = false;
    let mut segs = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Node 0: ") {
            node0_is_server = rest.ends_with(":445") || rest.ends_with(":139");
            continue;
        }
        let (node1, hexs) = match line.strip_prefix('\t') {
            Some(h) => (true, h),
            None => (false, line),
        };
        if hexs.is_empty() || !hexs.chars().all(|c| c.is_ascii_hexdigit()) || hexs.len() % 2 != 0 {
            continue;
        }
        let b: Vec<u8> = (0..hexs.len()).step_by(2).map(|i| u8::from_str_radix(&hexs[i..i + 2], 16).unwrap()).collect();
        let to_server = node1 == node0_is_server;
        segs.push((to_server, b));
    }
    segs
}

fn smb_streams(file: &str) -> Vec<u32> {
    let out = Command::new("tshark")
        .args(["-n", "-r", file, "-Y", "tcp.port==445 || tcp.port==139", "-T", "fields", "-e", "tcp.stream"])
        .current_dir(captures())
        .output()
        .expect("tshark");
    let mut v: Vec<u32> = String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Runs every SMB stream of `file` through the parser; `chunk` re-cuts segments
/// (0 = as captured).
fn run_capture(file: &str, chunk: usize) -> Harness {
    run_capture_with(file, chunk, SmbState::default())
}

fn run_capture_with(file: &str, chunk: usize, smb: SmbState) -> Harness {
    let mut h = Harness { smb, ..Harness::default() };
    for sid in smb_streams(file) {
        let mut c = Conn::new(sid as u64 + 1);
        for (i, (to_server, seg)) in follow(file, sid).into_iter().enumerate() {
            if chunk == 0 {
                c.feed(&mut h, to_server, &seg, i as u64 + 1);
            } else {
                for piece in seg.chunks(chunk) {
                    c.feed(&mut h, to_server, piece, i as u64 + 1);
                }
            }
        }
        c.close(&mut h);
    }
    h
}

fn expected(file: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(captures().join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["files"][file]["variants"]["nokeys"]["values"].clone()
}

fn smb_categories(h: &Harness) -> u64 {
    [cat::SMB_METADATA, cat::SMB_PAYLOAD, cat::SMB_ENCRYPTED, cat::SMB_COMPRESSED, cat::SMB_UNPARSED, cat::SMB_DECRYPT_FAILED, cat::SMB_DECOMPRESSED]
        .iter()
        .map(|c| h.accounting.get(c))
        .sum()
}

fn total_commands(h: &Harness) -> u64 {
    h.smb.stats.commands.values().sum()
}

const PLAIN: [&str; 13] = [
    "smb2-readwrite-midstream-zeek.pcap",
    "smb202-samba-reads-writes.pcap",
    "smb202-large-writes-zeek.pcap",
    "smb210-file-copy-reads.pcap",
    "smb302-reads-writes.pcap",
    "smb300-dac-getinfo-setinfo.pcap",
    "smb311-win10-handshake.pcapng",
    "smb311-ms-fasod-example1.pcapng",
    "smb311-async-large-reads.pcap",
    "smb311-multichannel-zeek.pcap",
    "smb311-100-small-files-zeek.pcap",
    "smb2-compound-multiple-pdus-zeek.pcap",
    "smb311-negotiate-contexts-zeek.pcap",
];

#[test]
fn plain_captures_agree_with_tshark() {
    let mut report = Vec::new();
    for f in PLAIN {
        let h = run_capture(f, 0);
        let e = expected(f);
        let s = &h.smb.stats;
        let got = (s.write_req_pdus, s.write_bytes, s.read_resp_pdus, s.read_bytes, total_commands(&h));
        let want = (
            e["write_req_pdus"].as_u64().unwrap(),
            e["write_length_sum"].as_u64().unwrap(),
            e["read_resp_pdus"].as_u64().unwrap(),
            e["read_resp_data_length_sum"].as_u64().unwrap(),
            e["smb2_pdus_total"].as_u64().unwrap(),
        );
        // tshark lists every DialectRevision of a NEGOTIATE response in hex, the 0x02FF
        // wildcard (an answer to an SMB1 multi-protocol NEGOTIATE) included; the result names
        // the dialects the connections use, as the specification names them.
        let dialects: Vec<String> = e["dialects_negotiated"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| u16::from_str_radix(d.as_str().unwrap().trim_start_matches("0x"), 16).unwrap())
            .filter(|d| *d != crate::smb2::state::DIALECT_WILDCARD)
            .map(crate::smb2::state::dialect_name)
            .collect();
        let got_dialects: Vec<String> = s.dialects.iter().cloned().collect();
        if got != want || got_dialects != dialects {
            report.push(format!("{f}: got {got:?} {got_dialects:?}, tshark {want:?} {dialects:?}; anomalies {:?}", h.anomalies.iter().collect::<Vec<_>>()));
        }
        // Every byte fed lands in exactly one SMB category.
        assert_eq!(smb_categories(&h), h.fed, "{f}: accounting");
        assert_eq!(h.accounting.get(cat::SMB_UNPARSED), 0, "{f}: unparsed bytes");
        // Every hashed byte is in exactly one send, digests cover their payload length.
        let sent: u64 = h.rec.sends.iter().map(|r| r.digest.len).sum();
        assert_eq!(sent + s.payload_incomplete_bytes, h.accounting.get(cat::SMB_PAYLOAD), "{f}: payload bytes");
        assert_eq!(sent, s.payload_bytes_sent);
    }
    assert!(report.is_empty(), "disagreements with tshark:\n{}", report.join("\n"));
}

#[test]
fn per_command_counts_match_tshark() {
    // expected.json "smb2_pdus" uses lowercase names ("write_req").
    for f in ["smb202-samba-reads-writes.pcap", "smb311-multichannel-zeek.pcap", "smb300-dac-getinfo-setinfo.pcap"] {
        let h = run_capture(f, 0);
        let e = expected(f);
        let mut want = BTreeMap::new();
        for (k, v) in e["smb2_pdus"].as_object().unwrap() {
            want.insert(k.clone(), v.as_u64().unwrap());
        }
        let mut got = BTreeMap::new();
        for (k, v) in &h.smb.stats.commands {
            let (name, dir) = k.split_once('.').unwrap();
            let key = format!("{}_{}", name.to_lowercase(), if dir == "request" { "req" } else { "resp" });
            got.insert(key, *v);
        }
        assert_eq!(got, want, "{f}");
    }
}

#[test]
fn chunking_does_not_change_results() {
    for f in ["smb2-readwrite-midstream-zeek.pcap", "smb202-samba-reads-writes.pcap", "smb2-compound-multiple-pdus-zeek.pcap"] {
        let a = run_capture(f, 0);
        for chunk in [1, 3, 1000] {
            let b = run_capture(f, chunk);
            assert_eq!(a.rec.sends.len(), b.rec.sends.len(), "{f} chunk {chunk}");
            for (x, y) in a.rec.sends.iter().zip(&b.rec.sends) {
                assert_eq!((x.message_id, &x.digest, x.offset, &x.file_name), (y.message_id, &y.digest, y.offset, &y.file_name));
            }
            assert_eq!(a.rec.completes, b.rec.completes);
            assert_eq!(serde_json::to_value(&a.smb.stats).unwrap(), serde_json::to_value(&b.smb.stats).unwrap());
            assert_eq!(smb_categories(&b), b.fed);
        }
    }
}

#[test]
fn readwrite_sends_carry_names_and_digests() {
    // smb2-readwrite-midstream: WRITE of 7000 'B' to "pythonfile2", READ of 16 'A'.
    let h = run_capture("smb2-readwrite-midstream-zeek.pcap", 0);
    let w: Vec<_> = h.rec.sends.iter().filter(|r| r.kind == SendKind::Write).collect();
    let r: Vec<_> = h.rec.sends.iter().filter(|r| r.kind == SendKind::Read).collect();
    assert_eq!(w.len(), 1);
    assert_eq!(r.len(), 1);
    assert_eq!(w[0].digest, digest_of(&[b'B'; 7000]));
    assert_eq!(w[0].file_name.as_deref(), Some("pythonfile2"));
    assert_eq!(w[0].transport, Transport::Tcp);
    assert_eq!((w[0].src, w[0].dst), (addr(1, 0).0, addr(2, 0).0));
    assert_eq!(r[0].digest, digest_of(&[b'A'; 16]));
    assert_eq!((r[0].src, r[0].dst), (addr(2, 0).0, addr(1, 0).0));
    // The READ response takes FileId/Offset from its request.
    assert_ne!(r[0].file_id, [0; 16]);
    assert!(h.rec.completes.contains(&(w[0].conn, w[0].message_id)));
    assert!(h.rec.completes.contains(&(r[0].conn, r[0].message_id)));
    assert!(h.smb.stats.files.contains("pythonfile2"));
}

// ------------------------------------------------------------------ synthetic streams

fn header(cmd: u16, mid: u64, response: bool, next: u32, related: bool) -> Vec<u8> {
    let mut fl = if response { rec::flags::SERVER_TO_REDIR } else { 0 };
    if related {
        fl |= rec::flags::RELATED_OPERATIONS;
    }
    let r = HeaderRepr { command: cmd, message_id: mid, flags: fl, next_command: next, tree_id: Some(7), session_id: 0x99, credit: 1, ..Default::default() };
    let mut b = [0u8; 64];
    r.emit(&mut b);
    b.to_vec()
}

fn write_req(mid: u64, file_id: [u8; 16], offset: u64, data: &[u8], related: bool, next: u32) -> Vec<u8> {
    let mut m = header(command::WRITE, mid, false, next, related);
    m.extend_from_slice(&49u16.to_le_bytes());
    m.extend_from_slice(&0x70u16.to_le_bytes());
    m.extend_from_slice(&(data.len() as u32).to_le_bytes());
    m.extend_from_slice(&offset.to_le_bytes());
    m.extend_from_slice(&file_id);
    m.extend_from_slice(&[0u8; 16]);
    m.extend_from_slice(data);
    m
}

fn read_resp(mid: u64, data: &[u8]) -> Vec<u8> {
    let mut m = header(command::READ, mid, true, 0, false);
    m.extend_from_slice(&17u16.to_le_bytes());
    m.extend_from_slice(&[0x50, 0]);
    m.extend_from_slice(&(data.len() as u32).to_le_bytes());
    m.extend_from_slice(&[0u8; 8]);
    m.extend_from_slice(data);
    m
}

fn read_req(mid: u64, file_id: [u8; 16], offset: u64, length: u32) -> Vec<u8> {
    let h = HeaderRepr { command: command::READ, message_id: mid, tree_id: Some(7), session_id: 0x99, credit: 1, ..Default::default() };
    let r = rec::ReadRequest { padding: 0x50, flags: 0, length, offset, file_id, minimum_count: 0, channel: 0, remaining_bytes: 0, read_channel_info: Vec::new() };
    r.emit(&h)
}

fn create_req(mid: u64, name: &str, next: u32) -> Vec<u8> {
    let mut m = header(command::CREATE, mid, false, next, false);
    let name16: Vec<u8> = name.encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
    let mut body = vec![0u8; 56];
    body[0..2].copy_from_slice(&57u16.to_le_bytes());
    body[44..46].copy_from_slice(&120u16.to_le_bytes());
    body[46..48].copy_from_slice(&(name16.len() as u16).to_le_bytes());
    m.extend_from_slice(&body);
    m.extend_from_slice(&name16);
    m
}

fn netbios(msg: &[u8]) -> Vec<u8> {
    let mut b = vec![0, 0, 0, 0];
    netbios::Repr { kind: 0, length: msg.len() as u32 }.emit((&mut b[..4]).try_into().unwrap());
    b.extend_from_slice(msg);
    b
}

fn pad8(mut m: Vec<u8>) -> Vec<u8> {
    while !m.len().is_multiple_of(8) {
        m.push(0);
    }
    m
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn one_stream(h: &mut Harness, parts: &[&[u8]]) -> Smb2Stream {
    let mut s = Smb2Stream::new(1, true, addr(1, 50000), addr(2, 445));
    for (i, p) in parts.iter().enumerate() {
        h.fed += p.len() as u64;
        s.on_message(p, &ctx(i as u64 + 1), &mut h.parts());
    }
    s
}

#[test]
fn compound_create_then_related_write() {
    let payload = data(10_000, 3);
    let create = pad8(create_req(10, "dir\\f.bin", 0));
    let len = create.len() as u32;
    let create = pad8(create_req(10, "dir\\f.bin", len));
    let write = write_req(11, [0xFF; 16], 4096, &payload, true, 0);
    let msg = [create, write].concat();
    let stream = netbios(&msg);
    let mut h = Harness::default();
    let mut s = one_stream(&mut h, &[&stream[..100], &stream[100..5000], &stream[5000..]]);
    s.on_close(&ctx(9), &mut h.parts());
    assert_eq!(h.rec.sends.len(), 1);
    let r = &h.rec.sends[0];
    assert_eq!((r.message_id, r.offset, r.session_id, r.tree_id), (11, 4096, 0x99, 7));
    assert_eq!(r.file_name.as_deref(), Some("dir\\f.bin"));
    assert_eq!(r.digest, digest_of(&payload));
    assert_eq!((r.first_frame.number, r.last_frame.number), (2, 3));
    assert_eq!(h.smb.stats.commands.get("CREATE.request"), Some(&1));
    assert_eq!(h.smb.stats.commands.get("WRITE.request"), Some(&1));
    assert_eq!(h.accounting.get(cat::SMB_PAYLOAD), 10_000);
    assert_eq!(h.accounting.get(cat::SMB_METADATA), stream.len() as u64 - 10_000);
    assert_eq!(smb_categories(&h), h.fed);
}

#[test]
fn gap_inside_payload_is_incomplete_and_framing_survives() {
    let w1 = netbios(&write_req(1, [1; 16], 0, &data(8000, 1), false, 0));
    let w2 = netbios(&write_req(2, [1; 16], 8000, &data(3000, 2), false, 0));
    let mut h = Harness::default();
    let mut s = one_stream(&mut h, &[&w1[..3000]]);
    s.on_gap(1000, &ctx(2), &mut h.parts());
    h.fed += (w1.len() - 4000 + w2.len()) as u64;
    s.on_message(&w1[4000..], &ctx(3), &mut h.parts());
    s.on_message(&w2, &ctx(4), &mut h.parts());
    assert_eq!(h.rec.sends.len(), 1);
    assert_eq!(h.rec.sends[0].message_id, 2);
    assert_eq!(h.rec.sends[0].digest, digest_of(&data(3000, 2)));
    assert_eq!(h.smb.stats.payload_incomplete, 1);
    assert_eq!(h.smb.stats.payload_incomplete_bytes, 8000);
    assert_eq!(h.anomalies.get("smb2.payload_incomplete"), 1);
    assert_eq!(h.smb.stats.resyncs, 0);
    assert_eq!(smb_categories(&h), h.fed);
}

#[test]
fn gap_in_header_position_resyncs() {
    let w1 = netbios(&write_req(1, [1; 16], 0, &data(500, 1), false, 0));
    let w2 = netbios(&write_req(2, [1; 16], 0, &data(700, 2), false, 0));
    let w3 = netbios(&write_req(3, [1; 16], 0, &data(900, 3), false, 0));
    let mut h = Harness::default();
    let mut s = one_stream(&mut h, &[&w1]);
    // Lose the middle of w2's header: framing is gone until w3.
    h.fed += (w2.len() - 30) as u64 + w3.len() as u64;
    s.on_gap(30, &ctx(2), &mut h.parts());
    s.on_message(&w2[30..], &ctx(3), &mut h.parts());
    for c in w3.chunks(5) {
        s.on_message(c, &ctx(4), &mut h.parts());
    }
    // w3, found by the resynchronisation, is held until a header confirms it or the stream ends.
    assert_eq!(h.rec.sends.iter().map(|r| r.message_id).collect::<Vec<_>>(), vec![1]);
    s.on_close(&ctx(5), &mut h.parts());
    let ids: Vec<u64> = h.rec.sends.iter().map(|r| r.message_id).collect();
    assert_eq!(ids, vec![1, 3]);
    assert_eq!(h.smb.stats.resyncs, 1);
    assert_eq!(h.accounting.get(cat::SMB_UNPARSED), (w2.len() - 30) as u64);
    assert_eq!(smb_categories(&h), h.fed);
}

#[test]
fn capture_starting_mid_message_resyncs() {
    // Drop the first k bytes of a real client stream: the parser must find the next
    // message and agree with a full run from there on.
    let segs = follow("smb202-samba-reads-writes.pcap", 0);
    let c2s: Vec<u8> = segs.iter().filter(|s| s.0).flat_map(|s| s.1.clone()).collect();
    let full = {
        let mut h = Harness::default();
        let mut s = one_stream(&mut h, &[&c2s]);
        s.on_close(&ctx(0), &mut h.parts());
        h
    };
    for k in [1usize, 5, 77, 1000, 20_000] {
        // Messages the full run completes within the first k bytes are lost to the cut run,
        // plus the one straddling the cut.
        let before = {
            let mut h = Harness::default();
            one_stream(&mut h, &[&c2s[..k]]);
            total_commands(&h)
        };
        let mut h = Harness::default();
        let mut s = one_stream(&mut h, &c2s[k..].chunks(1460).collect::<Vec<_>>());
        s.on_close(&ctx(0), &mut h.parts());
        assert_eq!(smb_categories(&h), h.fed, "k={k}");
        assert!(h.accounting.get(cat::SMB_UNPARSED) > 0);
        assert!(h.accounting.get(cat::SMB_UNPARSED) < 70_000, "k={k}: resync skipped too much");
        assert!(total_commands(&h) + before + 1 >= total_commands(&full), "k={k}: lost messages after resync");
        // The sends found are the tail of the full run's sends.
        let tail = &full.rec.sends[full.rec.sends.len() - h.rec.sends.len()..];
        for (a, b) in tail.iter().zip(&h.rec.sends) {
            assert_eq!((a.message_id, &a.digest), (b.message_id, &b.digest));
        }
    }
}

#[test]
fn bogus_lengths_are_anomalies_not_panics() {
    // DataOffset beyond the message.
    let mut m = write_req(1, [1; 16], 0, &data(100, 1), false, 0);
    m[64 + 2..64 + 4].copy_from_slice(&0x4000u16.to_le_bytes());
    let a = netbios(&m);
    // Length beyond the message.
    let mut m = write_req(2, [1; 16], 0, &data(100, 1), false, 0);
    m[64 + 4..64 + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    let b = netbios(&m);
    // Bad NextCommand (not aligned).
    let mut m = write_req(3, [1; 16], 0, &data(100, 1), false, 0);
    m[20..24].copy_from_slice(&13u32.to_le_bytes());
    let c = netbios(&m);
    let d = netbios(&write_req(4, [1; 16], 0, &data(100, 4), false, 0));
    let mut h = Harness::default();
    let mut s = one_stream(&mut h, &[&a, &b, &c, &d]);
    s.on_close(&ctx(0), &mut h.parts());
    assert_eq!(h.anomalies.get("smb2.write_bad_data_offset"), 2);
    assert_eq!(h.anomalies.get("smb2.bad_next_command"), 1);
    let ids: Vec<u64> = h.rec.sends.iter().map(|r| r.message_id).collect();
    assert_eq!(ids, vec![3, 4]);
    assert_eq!(h.smb.stats.write_req_pdus, 4);
    assert_eq!(smb_categories(&h), h.fed);
}

#[test]
fn oversized_message_is_capped() {
    // A CREATE request with a 70000-byte tail: only MESSAGE_CAP bytes are buffered.
    let mut m = create_req(1, "big", 0);
    m.extend(std::iter::repeat_n(0u8, 70_000));
    let mut h = Harness::default();
    let mut s = one_stream(&mut h, &[&netbios(&m)]);
    s.on_close(&ctx(0), &mut h.parts());
    assert_eq!(h.anomalies.get("smb2.message_over_cap"), 1);
    assert!(h.smb.stats.files.contains("big"));
    assert_eq!(smb_categories(&h), h.fed);
    assert!(s.buf.capacity() <= 16 * 1024 || s.buf.is_empty());
}

#[test]
fn unframed_mode_is_one_message_per_call() {
    let payload = data(5000, 9);
    let mut h = Harness::default();
    let mut s = Smb2Stream::new_unframed(5, true, addr(1, 0), addr(2, 0), 0);
    let m1 = create_req(1, "x", 0);
    let m2 = write_req(2, [4; 16], 0, &payload, false, 0);
    for m in [&m1, &m2] {
        h.fed += m.len() as u64;
        s.on_message(m, &ctx(1), &mut h.parts());
    }
    assert_eq!(h.rec.sends.len(), 1);
    assert_eq!(h.rec.sends[0].transport, Transport::SmbDirect);
    assert_eq!(h.rec.sends[0].digest, digest_of(&payload));
    assert_eq!(h.accounting.get(cat::SMB_METADATA), (m1.len() + m2.len() - 5000) as u64);
    assert_eq!(smb_categories(&h), h.fed);
}

#[test]
fn keepalive_and_smb1_are_metadata() {
    let mut smb1 = vec![0xFF, b'S', b'M', b'B', 0x72];
    smb1.extend_from_slice(&[0u8; 40]);
    let stream = [vec![0x85, 0, 0, 0], netbios(&smb1), netbios(&write_req(1, [1; 16], 0, &data(10, 1), false, 0))].concat();
    let mut h = Harness::default();
    one_stream(&mut h, &[&stream]).on_close(&ctx(0), &mut h.parts());
    assert_eq!(h.smb.stats.smb1_messages, 1);
    assert_eq!(h.rec.sends.len(), 1);
    assert_eq!(h.accounting.get(cat::SMB_UNPARSED), 0);
    assert_eq!(smb_categories(&h), h.fed);
}

#[test]
fn encrypted_and_compressed_captures_are_counted() {
    for f in ["smb300-aes128ccm-wiki.pcap", "smb311-aes128ccm-filt-wiki.pcap", "smb311-aes128gcm-wstest.pcap"] {
        let h = run_capture(f, 0);
        let e = expected(f);
        assert_eq!(h.smb.stats.encrypted_messages, e["transform_headers"].as_u64().unwrap(), "{f}");
        assert!(h.accounting.get(cat::SMB_ENCRYPTED) > 0);
        assert_eq!(smb_categories(&h), h.fed, "{f}");
    }
    // Compressed messages are decompressed and decoded like tshark does: three READ responses
    // of 4096 bytes (LZ77, LZ77+Huffman, LZNT1), each hashed on its decompressed data.
    let h = run_capture("smb311-compress-lz77-lz77huff-lznt1.pcap", 0);
    let s = &h.smb.stats;
    assert_eq!((s.compressed_messages, s.decompressed_messages, s.decompress_failed), (3, 3, 0));
    assert_eq!((s.read_resp_pdus, s.read_bytes), (3, 3 * 4096));
    assert_eq!(s.decompressed_payload_bytes, 3 * 4096);
    assert_eq!(h.rec.sends.len(), 3);
    assert!(h.rec.sends.iter().all(|r| r.digest == digest_of(&[b'a'; 4096])));
    // The wire bytes are smb_decompressed; nothing is accounted twice.
    assert_eq!(h.accounting.get(cat::SMB_PAYLOAD), 0);
    assert_eq!(h.accounting.get(cat::SMB_COMPRESSED), 0);
    assert_eq!(h.accounting.get(cat::SMB_DECOMPRESSED), h.smb.stats.decompressed_wire_bytes);
    assert_eq!(smb_categories(&h), h.fed);
    // Chained (LZNT1 + Pattern_V1 WRITE, NONE + Pattern_V1 READ response): WRITE 256, READ 256,
    // as tshark decodes them.
    let h = run_capture("smb311-compress-chained-patternv1-lznt1.pcapng", 0);
    let s = &h.smb.stats;
    assert_eq!((s.compressed_messages, s.decompressed_messages), (2, 2));
    assert_eq!((s.read_resp_pdus, s.read_bytes), (1, 256));
    assert_eq!((s.write_req_pdus, s.write_bytes), (1, 256));
    assert_eq!(h.rec.sends.len(), 2);
    assert_eq!(smb_categories(&h), h.fed);
    assert!(h.anomalies.iter().all(|(n, _)| !n.starts_with("smb2.decompress")), "{:?}", h.anomalies.iter().collect::<Vec<_>>());
}

mod decompress;
mod decrypt;

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn random_bytes_and_gaps_never_panic(chunks in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..300), 0u64..50), 0..20)) {
            let mut h = Harness::default();
            let mut s = Smb2Stream::new(1, true, addr(1, 0), addr(2, 0));
            for (i, (b, gap)) in chunks.iter().enumerate() {
                h.fed += b.len() as u64;
                s.on_message(b, &ctx(i as u64), &mut h.parts());
                if *gap > 40 {
                    s.on_gap(*gap, &ctx(i as u64), &mut h.parts());
                }
            }
            s.on_close(&ctx(0), &mut h.parts());
            prop_assert_eq!(smb_categories(&h), h.fed);
        }

        #[test]
        fn mutated_real_messages_never_panic(pos in 0usize..400, val in any::<u8>(), cut in 1usize..64) {
            let msg = [pad8(create_req(1, "a", 0)), write_req(2, [1; 16], 0, &data(200, 1), false, 0)].concat();
            let mut msg = msg;
            let l = msg.len();
            msg[4 + pos % (l - 4)] = val;
            let stream = [netbios(&msg), netbios(&write_req(3, [1; 16], 0, &data(50, 1), false, 0))].concat();
            let mut h = Harness::default();
            let parts: Vec<&[u8]> = stream.chunks(cut).collect();
            let mut s = one_stream(&mut h, &parts);
            s.on_close(&ctx(0), &mut h.parts());
            prop_assert_eq!(smb_categories(&h), h.fed);
        }
    }
}

/// One forged NetBIOS length (0xFFFFFF, a whole 16 MiB) must not blind the parser to the valid
/// WRITEs that follow (issue 12): on a WRITE whose data ends long before the claimed end, on a
/// message of another command (longer than any server negotiates), and as a bare header.
#[test]
fn a_forged_netbios_length_does_not_swallow_the_messages_after_it() {
    let writes: Vec<Vec<u8>> = (0..20u64).map(|i| netbios(&write_req(10 + i, [2; 16], i << 18, &data(256 << 10, i as u8), false, 0))).collect();
    let forge = |mut m: Vec<u8>| {
        m[1..4].copy_from_slice(&[0xff, 0xff, 0xff]);
        m
    };
    let cases: [(&str, Vec<u8>, &str, usize); 4] = [
        // The first WRITE itself claims 4 MiB (within any bound): it is hashed, and what
        // follows its data is resynchronised instead of swallowed.
        ("forged write", {
            let mut m = netbios(&write_req(1, [2; 16], 0, &data(4096, 9), false, 0));
            m[1..4].copy_from_slice(&[0x40, 0, 0]);
            m
        }, "smb2.netbios_length_beyond_message", 1),
        // The same WRITE claiming 16 MiB: more than any server offers, not believed at all.
        ("forged write 16 MiB", forge(netbios(&write_req(1, [2; 16], 0, &data(4096, 9), false, 0))), "smb2.netbios_length_implausible", 0),
        // A CREATE claims 16 MiB: more than any server negotiates without a NEGOTIATE seen.
        ("forged create", forge(netbios(&create_req(1, "x", 0))), "smb2.netbios_length_implausible", 0),
        // A bare header claiming 16 MiB, then the next message's own header.
        ("bare header", vec![0, 0xff, 0xff, 0xff], "smb2.netbios_length_implausible", 0),
    ];
    for (name, first, anomaly, extra_sends) in cases {
        let mut h = Harness::default();
        let mut parts: Vec<&[u8]> = vec![&first];
        parts.extend(writes.iter().map(|w| w.as_slice()));
        let mut s = one_stream(&mut h, &parts);
        s.on_close(&ctx(0), &mut h.parts());
        let ids: Vec<u64> = h.rec.sends.iter().map(|r| r.message_id).collect();
        let want: Vec<u64> = (if extra_sends == 1 { vec![1] } else { vec![] }).into_iter().chain(10..30).collect();
        assert_eq!(ids, want, "{name}: every WRITE after the forged length is hashed");
        assert_eq!(h.anomalies.get(anomaly), 1, "{name}");
        assert_eq!(smb_categories(&h), h.fed, "{name}: every byte accounted");
        // Nothing but the forged header's own bytes is unparsed.
        assert!(h.accounting.get(cat::SMB_UNPARSED) <= first.len() as u64, "{name}: {:?}", h.accounting);
    }
    // A negotiated connection believes what it negotiated: a 12 MiB message passes with an
    // 16 MiB MaxWriteSize, and is refused under the 8 MiB default.
    let mut h = Harness::default();
    let info = crate::smb2::state::ConnInfo { dialect: 0x311, max_size: 16 << 20, ..Default::default() };
    h.smb.set_negotiated(1, info, &mut Anomalies::default());
    let big = netbios(&write_req(5, [2; 16], 0, &data(12 << 20, 5), false, 0));
    let mut s = one_stream(&mut h, &[&big]);
    s.on_close(&ctx(0), &mut h.parts());
    assert_eq!(h.rec.sends.len(), 1);
    assert_eq!(h.anomalies.get("smb2.netbios_length_implausible"), 0);
    let mut h = Harness::default();
    let mut s = one_stream(&mut h, &[&big]);
    s.on_close(&ctx(0), &mut h.parts());
    assert_eq!((h.rec.sends.len(), h.anomalies.get("smb2.netbios_length_implausible")), (0, 1));
    assert_eq!(smb_categories(&h), h.fed);
}

#[test]
fn a_capture_starting_where_data_reads_as_a_session_request_loses_nothing_after_it() {
    // A capture that starts inside w1's data, at bytes that read as an RFC 1002 session
    // request of 0xa0bfde bytes. Believed, it skipped w2 and w3 (and up to 16 MiB more); a
    // session request is 68 to 510 bytes long, so framing is lost and found again at w2.
    let mut d1 = data(3000, 1);
    d1[1000..1004].copy_from_slice(&[0x81, 0xa0, 0xbf, 0xde]);
    let w1 = netbios(&write_req(1, [1; 16], 0, &d1, false, 0));
    let w2 = netbios(&write_req(2, [1; 16], 4096, &data(4096, 2), false, 0));
    let w3 = netbios(&write_req(3, [1; 16], 8192, &data(4096, 3), false, 0));
    let cut = 4 + 64 + 48 + 1000;
    let mut h = Harness::default();
    let mut s = one_stream(&mut h, &[&w1[cut..], &w2, &w3]);
    s.on_close(&ctx(0), &mut h.parts());
    let ids: Vec<u64> = h.rec.sends.iter().map(|r| r.message_id).collect();
    assert_eq!(ids, vec![2, 3]);
    assert_eq!(h.anomalies.get("smb2.netbios_bad_length"), 1);
    assert_eq!(h.accounting.get(cat::SMB_UNPARSED), (w1.len() - cut) as u64);
    assert_eq!(smb_categories(&h), h.fed);
    // A keepalive (0x85, length 0) and a positive session response are still metadata.
    let mut h = Harness::default();
    let mut s = one_stream(&mut h, &[&[0x85, 0, 0, 0], &[0x82, 0, 0, 0], &w2]);
    s.on_close(&ctx(0), &mut h.parts());
    assert_eq!(h.rec.sends.len(), 1);
    assert_eq!(h.smb.stats.resyncs, 0);
}

/// WRITE data that holds an SMB2 WRITE's image (a capture file or a TCP dump copied to a
/// share), with other data before and after it.
fn data_with_image(image_mid: u64) -> (Vec<u8>, usize) {
    let image = netbios(&write_req(image_mid, [7; 16], 1 << 30, &data(6000, 77), false, 0));
    let mut d = data(3000, 5);
    let at = d.len();
    d.extend_from_slice(&image);
    // Data after the image that no NetBIOS header starts with (0xAA is no packet type).
    d.extend(std::iter::repeat_n(0xAA, 500));
    d.extend_from_slice(&data(2000, 6));
    (d, at)
}

/// A resynchronisation (a gap across messages, a capture started mid-stream) that lands on an
/// SMB2 message's image inside a WRITE's data took it as a message and reported its WRITE as
/// a send. The message found is now held until the header after it: none follows the image
/// (its data does), so it is dropped, its bytes are unparsed, and the stream resynchronises
/// again on the next real message, which the one after it confirms.
#[test]
fn a_message_image_where_a_resync_lands_is_not_a_send() {
    let (d3, at) = data_with_image(99);
    let ws: Vec<Vec<u8>> = [(1u64, data(4000, 1)), (2, data(4000, 2)), (3, d3.clone()), (4, data(4000, 4)), (5, data(4000, 5))]
        .into_iter()
        .map(|(mid, d)| netbios(&write_req(mid, [1; 16], mid << 20, &d, false, 0)))
        .collect();
    let w3_data_at = ws[2].len() - d3.len();
    // (a) A gap from w2's last bytes into w3's data, just before the image.
    {
        let mut h = Harness::default();
        let mut s = one_stream(&mut h, &[&ws[0], &ws[1][..ws[1].len() - 10]]);
        let skip = 10 + w3_data_at + at - 40;
        s.on_gap(skip as u64, &ctx(3), &mut h.parts());
        let rest: Vec<u8> = [&ws[2][w3_data_at + at - 40..], &ws[3][..], &ws[4][..]].concat();
        h.fed += rest.len() as u64;
        for (i, c) in rest.chunks(1448).enumerate() {
            s.on_message(c, &ctx(4 + i as u64), &mut h.parts());
        }
        s.on_close(&ctx(99), &mut h.parts());
        let ids: Vec<u64> = h.rec.sends.iter().map(|r| r.message_id).collect();
        assert_eq!(ids, vec![1, 4, 5], "w2 and w3 lost to the gap; the image's WRITE 99 is no send");
        assert_eq!(h.anomalies.get("smb2.resync_unconfirmed"), 1);
        assert_eq!(h.smb.stats.payloads_sent, 3);
        // The image's WRITE is taken back from the counters too: w1, w2, w4, w5 (w3 lost to the gap).
        assert_eq!((h.smb.stats.write_req_pdus, h.smb.stats.write_bytes), (4, 4 * 4000));
        assert_eq!(h.smb.stats.commands.get("WRITE.request"), Some(&4));
        // w1, w2's data up to the gap (hashed, then incomplete), w4, w5: not the image's 6000.
        assert_eq!(h.accounting.get(cat::SMB_PAYLOAD), 4000 + 3990 + 2 * 4000);
        assert_eq!(smb_categories(&h), h.fed, "every byte accounted");
    }
    // (b) A capture that starts inside w3's data, before the image.
    {
        let mut h = Harness::default();
        let parts: Vec<&[u8]> = [&ws[2][w3_data_at + 100..], &ws[3][..], &ws[4][..]].into_iter().collect();
        let mut s = one_stream(&mut h, &parts);
        s.on_close(&ctx(99), &mut h.parts());
        let ids: Vec<u64> = h.rec.sends.iter().map(|r| r.message_id).collect();
        assert_eq!(ids, vec![4, 5]);
        assert_eq!(h.anomalies.get("smb2.resync_unconfirmed"), 1);
        assert_eq!((h.smb.stats.write_req_pdus, total_commands(&h)), (2, 2));
        assert_eq!(h.accounting.get(cat::SMB_PAYLOAD), 2 * 4000);
        assert_eq!(smb_categories(&h), h.fed);
    }
    // (c) The same stream read whole: framed, the image is data (one send of w3).
    {
        let mut h = Harness::default();
        let parts: Vec<&[u8]> = ws.iter().map(|w| w.as_slice()).collect();
        let mut s = one_stream(&mut h, &parts);
        s.on_close(&ctx(99), &mut h.parts());
        assert_eq!(h.rec.sends.iter().map(|r| r.message_id).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
        assert_eq!(h.anomalies.get("smb2.resync_unconfirmed"), 0);
        assert_eq!(h.accounting.get(cat::SMB_UNPARSED), 0);
    }
}

/// The message held at a stream's start is handed on, in order with its completion, once the
/// next header confirms it (at that header's frame, not at the stream's end); one the stream
/// ends after, or a gap follows, is handed on undecided.
#[test]
fn a_held_message_is_handed_on_when_the_next_header_confirms_it() {
    let w1 = netbios(&write_req(1, [1; 16], 0, &data(9000, 1), false, 0));
    let w2 = netbios(&write_req(2, [1; 16], 0, &data(9000, 2), false, 0));
    let mut h = Harness::default();
    let mut s = Smb2Stream::new(1, true, addr(1, 50000), addr(2, 445));
    h.fed += (w1.len() + 3) as u64;
    s.on_message(&w1, &ctx(1), &mut h.parts());
    s.on_message(&w2[..3], &ctx(2), &mut h.parts());
    assert!(h.rec.sends.is_empty(), "held until a whole header and ProtocolId follow");
    h.fed += 10;
    s.on_message(&w2[3..13], &ctx(3), &mut h.parts());
    assert_eq!(h.rec.sends.iter().map(|r| r.message_id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(h.rec.sends[0].digest, digest_of(&data(9000, 1)));
    assert_eq!((h.rec.sends[0].first_frame.number, h.rec.sends[0].last_frame.number), (1, 1));
    // Confirmed: w2 is handed on at its end, not held.
    h.fed += (w2.len() - 13) as u64;
    s.on_message(&w2[13..], &ctx(4), &mut h.parts());
    assert_eq!(h.rec.sends.len(), 2);
    assert_eq!(h.anomalies.get("smb2.resync_unconfirmed"), 0);
    assert_eq!(smb_categories(&h), h.fed);
    // A gap right after a held message: undecided, handed on.
    let mut h = Harness::default();
    let mut s = one_stream(&mut h, &[&w1]);
    s.on_gap(100, &ctx(2), &mut h.parts());
    assert_eq!(h.rec.sends.len(), 1);
    assert_eq!(h.anomalies.get("smb2.resync_unconfirmed"), 0);
    // The stream's end after a held message hands it on.
    let mut h = Harness::default();
    let mut s = one_stream(&mut h, &[&w1]);
    assert!(h.rec.sends.is_empty());
    s.on_close(&ctx(2), &mut h.parts());
    assert_eq!(h.rec.sends.len(), 1);
    assert_eq!(h.anomalies.get("smb2.resync_unconfirmed"), 0);
}

/// A refuted message's report names (a CREATE image's file name, a NEGOTIATE response image's
/// dialect) and the anomalies it raised (a name cut at `MAX_KEPT_NAME`) are not reported; a
/// confirmed or undecided message's are.
#[test]
fn a_refuted_message_adds_no_file_name_dialect_or_anomaly() {
    let long_name = format!("image-only-{}", "x".repeat(1100));
    let neg = rec::NegotiateResponse {
        security_mode: 1,
        dialect_revision: 0x0202,
        server_guid: [5; 16],
        capabilities: 0,
        max_transact_size: 8 << 20,
        max_read_size: 8 << 20,
        max_write_size: 8 << 20,
        system_time: 0,
        server_start_time: 0,
        contexts: None,
    };
    let neg_hdr = HeaderRepr { command: command::NEGOTIATE, message_id: 97, flags: rec::flags::SERVER_TO_REDIR, credit: 1, ..Default::default() };
    let mut d3 = data(3000, 5);
    d3.extend_from_slice(&netbios(&create_req(98, &long_name, 0)));
    d3.extend(std::iter::repeat_n(0xAA, 500));
    d3.extend_from_slice(&netbios(&neg.emit(&neg_hdr, &[])));
    d3.extend(std::iter::repeat_n(0xAA, 500));
    d3.extend_from_slice(&data(2000, 6));
    let w3 = netbios(&write_req(3, [1; 16], 0, &d3, false, 0));
    let (w4, w5) = (netbios(&write_req(4, [1; 16], 0, &data(4000, 4), false, 0)), netbios(&write_req(5, [1; 16], 0, &data(4000, 5), false, 0)));
    // A capture that starts inside w3's data, before both images.
    let mut h = Harness::default();
    let rest: Vec<u8> = [&w3[w3.len() - d3.len() + 100..], &w4[..], &w5[..]].concat();
    let chunks: Vec<&[u8]> = rest.chunks(1448).collect();
    let mut s = one_stream(&mut h, &chunks);
    s.on_close(&ctx(99), &mut h.parts());
    assert_eq!(h.rec.sends.iter().map(|r| r.message_id).collect::<Vec<_>>(), vec![4, 5]);
    assert_eq!(h.anomalies.get("smb2.resync_unconfirmed"), 2, "both images refuted");
    assert!(h.smb.stats.files.is_empty(), "{:?}", h.smb.stats.files);
    assert!(h.smb.stats.dialects.is_empty(), "{:?}", h.smb.stats.dialects);
    assert_eq!(h.anomalies.get("smb2.name_truncated"), 0, "the CREATE image's name is no name");
    assert_eq!(h.smb.stats.commands.keys().copied().collect::<Vec<_>>(), vec!["WRITE.request"]);
    assert_eq!(smb_categories(&h), h.fed);
    // The same CREATE as a stream's first message: confirmed by the next header, or left
    // undecided by a gap or the stream's end, its name is reported (cut, with its anomaly).
    let create = netbios(&create_req(98, &long_name, 0));
    for end in ["header", "gap", "close"] {
        let mut h = Harness::default();
        let mut s = one_stream(&mut h, &[&create]);
        assert!(h.smb.stats.files.is_empty(), "held with its message");
        match end {
            "header" => {
                h.fed += w4.len() as u64;
                s.on_message(&w4, &ctx(2), &mut h.parts());
            }
            "gap" => s.on_gap(100, &ctx(2), &mut h.parts()),
            _ => s.on_close(&ctx(2), &mut h.parts()),
        }
        assert_eq!(h.smb.stats.files.len(), 1, "{end}");
        assert!(h.smb.stats.files.iter().all(|f| f.starts_with("image-only-xxx") && f.ends_with('…')), "{end}");
        assert_eq!(h.anomalies.get("smb2.name_truncated"), 1, "{end}");
        assert_eq!(h.anomalies.get("smb2.resync_unconfirmed"), 0, "{end}");
    }
}

/// A held message whose header says response on the client's side (or request on the
/// server's) is no message (MS-SMB2 §2.2.1: SERVER_TO_REDIR is set on responses only): it is
/// not decoded and is refuted when it ends, even when a real header follows it. Here a READ
/// response's image ends exactly where a WRITE's data ends, so the next real header would
/// have confirmed it, and its data would have been a send. Mirrored: a WRITE request's image
/// at the end of a READ response's data, on the server's side.
#[test]
fn a_held_message_in_the_wrong_direction_is_refuted_whatever_follows() {
    for to_server in [true, false] {
        let image_data = data(6000, 77);
        let mut d3 = data(3000, 5);
        d3.extend_from_slice(&netbios(&if to_server { read_resp(97, &image_data) } else { write_req(97, [7; 16], 0, &image_data, false, 0) }));
        let msg = |mid: u64, d: &[u8]| netbios(&if to_server { write_req(mid, [1; 16], 0, d, false, 0) } else { read_resp(mid, d) });
        let (w3, w4, w5) = (msg(3, &d3), msg(4, &data(4000, 4)), msg(5, &data(4000, 5)));
        let rest: Vec<u8> = [&w3[w3.len() - d3.len() + 100..], &w4[..], &w5[..]].concat();
        let mut h = Harness::default();
        let mut s = Smb2Stream::new(1, to_server, addr(1, 50000), addr(2, 445));
        h.fed += rest.len() as u64;
        for (i, c) in rest.chunks(1448).enumerate() {
            s.on_message(c, &ctx(i as u64 + 1), &mut h.parts());
        }
        s.on_close(&ctx(99), &mut h.parts());
        assert_eq!(h.rec.sends.iter().map(|r| r.message_id).collect::<Vec<_>>(), vec![4, 5], "to_server {to_server}");
        assert_eq!(h.anomalies.get("smb2.resync_wrong_direction"), 1);
        assert_eq!(h.anomalies.get("smb2.resync_unconfirmed"), 1);
        let (cmd, n) = if to_server { ("WRITE.request", h.smb.stats.write_req_pdus) } else { ("READ.response", h.smb.stats.read_resp_pdus) };
        assert_eq!(h.smb.stats.commands.keys().copied().collect::<Vec<_>>(), vec![cmd]);
        assert_eq!(n, 2);
        assert_eq!(h.accounting.get(cat::SMB_PAYLOAD), 2 * 4000);
        assert_eq!(smb_categories(&h), h.fed);
        // With both ends on SMB ports the direction is a guess, not checked: the image is
        // confirmed by the header after it, as before.
        let mut h = Harness::default();
        let mut s = Smb2Stream::new(1, to_server, addr(1, 445), addr(2, 445)).with_direction_unknown();
        h.fed += rest.len() as u64;
        for (i, c) in rest.chunks(1448).enumerate() {
            s.on_message(c, &ctx(i as u64 + 1), &mut h.parts());
        }
        s.on_close(&ctx(99), &mut h.parts());
        assert_eq!(h.rec.sends.iter().map(|r| r.message_id).collect::<Vec<_>>(), vec![97, 4, 5]);
        assert_eq!(h.anomalies.get("smb2.resync_wrong_direction"), 0);
    }
}

/// A refuted request's image leaves no pending request behind: a READ request image with
/// MessageId 50 must not name the real READ response 50 (whose request came before the
/// capture) with the image's file and offset, nor replace the entry of a real READ request 50
/// seen before it.
#[test]
fn a_refuted_request_image_leaves_no_pending_request() {
    let mut d3 = data(3000, 5);
    d3.extend_from_slice(&netbios(&read_req(50, [7; 16], 1 << 30, 4096)));
    d3.extend(std::iter::repeat_n(0xAA, 500));
    d3.extend_from_slice(&data(2000, 6));
    let w3 = netbios(&write_req(3, [1; 16], 0, &d3, false, 0));
    let w3_data_at = w3.len() - d3.len();
    let (w2, w4) = (netbios(&write_req(2, [1; 16], 0, &data(4000, 2), false, 0)), netbios(&write_req(4, [1; 16], 0, &data(4000, 4), false, 0)));
    let real_read = netbios(&read_req(50, [2; 16], 8192, 4096));
    let response = netbios(&read_resp(50, &data(4096, 9)));
    for real_request_seen in [false, true] {
        let mut h = Harness::default();
        let mut c = Conn::new(1);
        if real_request_seen {
            // The real request, confirmed by w2's header; then a gap from inside w2 into w3's
            // data, before the image.
            c.feed(&mut h, true, &[&real_read[..], &w2[..w2.len() - 10]].concat(), 1);
            c.c2s.on_gap((10 + w3_data_at + 100) as u64, &ctx(2), &mut h.parts());
        }
        // (Else the capture starts inside w3's data.)
        let rest: Vec<u8> = [&w3[w3_data_at + 100..], &w4[..]].concat();
        for (i, ch) in rest.chunks(1448).enumerate() {
            c.feed(&mut h, true, ch, 3 + i as u64);
        }
        assert_eq!(h.anomalies.get("smb2.resync_unconfirmed"), 1, "the image is refuted");
        c.feed(&mut h, false, &response, 50);
        c.close(&mut h);
        let read: Vec<_> = h.rec.sends.iter().filter(|r| r.message_id == 50).collect();
        assert_eq!(read.len(), 1);
        if real_request_seen {
            assert_eq!((read[0].file_id, read[0].offset), ([2; 16], 8192), "the real request's entry, put back");
            assert_eq!(h.anomalies.get("smb2.read_response_without_request"), 0);
        } else {
            assert_eq!((read[0].file_id, read[0].offset), ([0; 16], crate::payload::send::UNKNOWN_OFFSET), "no request seen");
            assert_eq!(h.anomalies.get("smb2.read_response_without_request"), 1);
        }
        assert_eq!(smb_categories(&h), h.fed);
    }
}
