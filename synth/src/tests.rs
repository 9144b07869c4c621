//! End-to-end checks of generated captures, read back through the engine's capture reader,
//! wire decoder (both checksums verified) and TCP reassembler, then NetBIOS-framed SMB2
//! messages walked here, compared with the returned `Truth`.

use super::*;
use smbwire_dissectors::capture::testutil::{open_bytes, read_all};
use smbwire_dissectors::capture::{linktype, pcap::MAGIC_NANOS};
use smbwire_dissectors::frame::FrameCtx;
use smbwire_dissectors::tcp::reassembly::{ReassemblyConfig, Reassembler};
use smbwire_dissectors::tcp::{Chunk, ReassemblyStats};
use smbwire_dissectors::wire::{self as engine_wire, ethernet, ipv4, tcp as engine_tcp, Transport};
use std::collections::{BTreeMap, HashMap, HashSet};

const MIB: u64 = 1 << 20;

pub(super) struct Frame {
    pub(super) ts: u64,
    pub(super) data: Vec<u8>,
}

/// Every frame of a nanosecond Ethernet pcap, through the engine's capture reader, which must
/// account for the whole file and find nothing odd.
pub(super) fn read_pcap(b: &[u8]) -> Vec<Frame> {
    assert_eq!(u32::from_le_bytes(b[0..4].try_into().unwrap()), MAGIC_NANOS, "ns pcap magic");
    let pass = read_all(open_bytes(b.to_vec()).expect("the engine opens the capture"));
    assert_eq!(pass.an.iter().count(), 0, "reader anomalies");
    assert_eq!(pass.covered(), b.len() as u64, "every byte of the file accounted for");
    pass.frames
        .into_iter()
        .map(|(info, data)| {
            // LINKTYPE_ERF: the InfiniBand transport's records.
            assert!(matches!(info.linktype, linktype::ETHERNET | linktype::ERF), "LINKTYPE_ETHERNET or ERF");
            assert_eq!(info.orig_len as usize, data.len(), "not cut by a snaplen");
            Frame { ts: info.ts_ns, data }
        })
        .collect()
}

pub(super) type FlowKey = ([u8; 4], u16, [u8; 4], u16);

#[derive(Clone)]
pub(super) struct Segment {
    seq: u32,
    flags: u8,
    ip_id: u16,
    payload: Vec<u8>,
}

fn octets(ip: std::net::IpAddr) -> [u8; 4] {
    match ip {
        std::net::IpAddr::V4(a) => a.octets(),
        other => panic!("IPv4 expected, got {other}"),
    }
}

/// Decode every frame through `wire::decode` (checking both checksums with the engine's views)
/// and group TCP segments per direction.
pub(super) fn segments(frames: &[Frame]) -> (BTreeMap<FlowKey, Vec<Segment>>, usize) {
    let mut flows: BTreeMap<FlowKey, Vec<Segment>> = BTreeMap::new();
    let mut max_frame = 0;
    for f in frames {
        let d = &f.data;
        max_frame = max_frame.max(d.len());
        let dec = engine_wire::decode(linktype::ETHERNET, d).expect("Ethernet/IPv4/TCP");
        assert_eq!(dec.anomaly, None);
        let Transport::Tcp(t) = dec.transport else {
            panic!("a TCP segment expected")
        };
        let ip = ipv4::Packet::new_checked(&d[ethernet::HEADER_LEN..]).unwrap();
        assert_eq!(usize::from(ip.header_len()), ipv4::HEADER_LEN, "IPv4 without options");
        assert!(ip.verify_checksum(), "IPv4 header checksum");
        let seg = engine_tcp::Packet::new_checked(ip.payload()).unwrap();
        assert!(seg.verify_checksum(dec.src, dec.dst), "TCP checksum");
        let key = (octets(dec.src), t.src_port, octets(dec.dst), t.dst_port);
        flows.entry(key).or_default().push(Segment {
            seq: t.seq,
            flags: t.flags,
            ip_id: ip.ident(),
            payload: t.payload.to_vec(),
        });
    }
    (flows, max_frame)
}

/// One direction through the engine's reassembler, in capture order: every byte once, no gap,
/// and every repeated segment carries the bytes the stream holds at its place.
pub(super) fn reassemble(segs: &[Segment]) -> Vec<u8> {
    let syn = segs.iter().find(|s| s.flags & 0x02 != 0).expect("SYN");
    let base = syn.seq.wrapping_add(1);
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let mut stats = ReassemblyStats::default();
    let ctx = FrameCtx::default();
    let mut out = Vec::new();
    let mut gaps = 0;
    let mut deliver = |c: Chunk<'_>, _: &FrameCtx| match c {
        Chunk::Data(d) => out.extend_from_slice(d),
        Chunk::Gap(n) => gaps += n,
    };
    for s in segs {
        r.segment(s.seq, s.flags, &s.payload, s.payload.len() as u32, &ctx, &mut stats, &mut deliver);
    }
    r.flush(&mut stats, &mut deliver);
    assert_eq!(gaps, 0, "no gap");
    for s in segs.iter().filter(|s| !s.payload.is_empty()) {
        let off = s.seq.wrapping_sub(base) as usize;
        assert_eq!(
            out.get(off..off + s.payload.len()),
            Some(&s.payload[..]),
            "a repeated segment carries the same bytes"
        );
    }
    out
}

/// (src ip, dst ip) → data payloads in capture order.
type PayloadsByEdge = BTreeMap<([u8; 4], [u8; 4]), Vec<Vec<u8>>>;

#[derive(Default, Debug)]
struct Seen {
    messages: u64,
    write_requests: u64,
    write_bytes: u64,
    read_responses: u64,
    read_bytes: u64,
    payloads: PayloadsByEdge,
    commands: Vec<(u16, bool)>,
}

fn u16le(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32le(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

fn parse_stream(stream: &[u8], key: &FlowKey, seen: &mut Seen) {
    let mut off = 0;
    while off < stream.len() {
        assert_eq!(stream[off], 0);
        let len =
            u32::from_be_bytes([0, stream[off + 1], stream[off + 2], stream[off + 3]]) as usize;
        let m = &stream[off + 4..off + 4 + len];
        assert_eq!(&m[0..4], b"\xfeSMB");
        let cmd = u16le(m, 12);
        let response = u32le(m, 16) & 1 == 1;
        seen.messages += 1;
        seen.commands.push((cmd, response));
        let edge = (key.0, key.2);
        match (cmd, response) {
            (9, false) => {
                let (doff, dlen) = (u16le(m, 66) as usize, u32le(m, 68) as usize);
                assert_eq!(doff + dlen, m.len());
                seen.write_requests += 1;
                seen.write_bytes += dlen as u64;
                seen.payloads
                    .entry(edge)
                    .or_default()
                    .push(m[doff..].to_vec());
            }
            (8, true) => {
                let (doff, dlen) = (m[66] as usize, u32le(m, 68) as usize);
                assert_eq!(doff + dlen, m.len());
                seen.read_responses += 1;
                seen.read_bytes += dlen as u64;
                seen.payloads
                    .entry(edge)
                    .or_default()
                    .push(m[doff..].to_vec());
            }
            _ => {}
        }
        off += 4 + len;
    }
}

struct Generated {
    bytes: Vec<u8>,
    truth: Truth,
    frames: Vec<Frame>,
    seen: Seen,
    flows: BTreeMap<FlowKey, Vec<Segment>>,
}

fn gen(json: &str) -> Generated {
    let spec = Spec::from_json(json).unwrap();
    let mut buf = Vec::new();
    let truth = generate_to(&spec, pcap::PcapWriter::new(&mut buf).unwrap()).unwrap();
    // Generating again gives the same file and the same truth.
    let mut again = Vec::new();
    let t2 = generate_to(&spec, pcap::PcapWriter::new(&mut again).unwrap()).unwrap();
    assert!(buf == again, "deterministic bytes");
    assert_eq!(
        serde_json::to_string(&t2).unwrap(),
        serde_json::to_string(&truth).unwrap()
    );
    let frames = read_pcap(&buf);
    let (flows, max_frame) = segments(&frames);
    assert!(max_frame <= frames::HEADERS_LEN + spec.mss as usize);
    let mut seen = Seen::default();
    for (key, segs) in &flows {
        parse_stream(&reassemble(segs), key, &mut seen);
    }
    Generated {
        bytes: buf,
        truth,
        frames,
        seen,
        flows,
    }
}

fn edge<'a>(t: &'a Truth, src: &str, dst: &str) -> &'a truth::EdgeTruth {
    let e: Vec<_> = t
        .edges
        .iter()
        .filter(|e| e.src == src && e.dst == dst)
        .collect();
    assert_eq!(e.len(), 1, "{src}->{dst} in {:?}", t.edges);
    e[0]
}

const OWNER_IP: [u8; 4] = [198, 18, 0, 1];
const PARTNER_IP: [u8; 4] = [198, 18, 0, 2];

fn check_counts(g: &Generated) {
    let (t, s) = (&g.truth, &g.seen);
    assert_eq!(g.frames.len() as u64, t.capture.frames);
    assert_eq!(g.bytes.len() as u64, t.capture.file_bytes);
    assert_eq!(s.messages, t.smb2.messages);
    assert_eq!(s.write_requests, t.smb2.write_requests);
    assert_eq!(s.write_bytes, t.smb2.write_data_bytes);
    assert_eq!(s.read_responses, t.smb2.read_responses);
    assert_eq!(s.read_bytes, t.smb2.read_data_bytes);
    assert!(
        g.frames.windows(2).all(|w| w[0].ts <= w[1].ts),
        "time order"
    );
    // Every edge's payload: count, bytes and distinct content agree with the truth.
    for e in &t.edges {
        let ip = |n: &str| if n == "owner" { OWNER_IP } else { PARTNER_IP };
        let p = &s.payloads[&(ip(&e.src), ip(&e.dst))];
        assert_eq!(p.len() as u64, e.sends);
        assert_eq!(
            p.iter().map(|x| x.len() as u64).sum::<u64>(),
            e.payload_bytes
        );
        let mut distinct: HashSet<&[u8]> = HashSet::new();
        let mut trivial = 0u64;
        let mut unique = 0u64;
        for x in p {
            for b in x.chunks(4096) {
                if b.iter().all(|&v| v == b[0]) {
                    trivial += b.len() as u64;
                } else if distinct.insert(b) {
                    unique += b.len() as u64;
                }
            }
        }
        assert_eq!(trivial, e.trivial_bytes);
        assert_eq!(unique, e.unique_bytes);
    }
    let on_wire: u64 = s.payloads.values().flatten().map(|p| p.len() as u64).sum();
    assert_eq!(on_wire, t.totals.payload_bytes);
}

const SMALL: u64 = 2 * MIB + 4096 * 3 + 100; // a short last I/O, with a short last block

fn spec(scenario: &str, extra: &str) -> String {
    format!(r#"{{"scenario":"{scenario}","bytes":{SMALL},"io_size":{MIB},"seed":3{extra}}}"#)
}

#[test]
fn write_scenarios_match_the_published_table() {
    for (name, copies) in [("mirror2", 1u64), ("nested4", 2), ("six", 3)] {
        let g = gen(&spec(name, ""));
        check_counts(&g);
        let t = &g.truth;
        assert_eq!(t.edges.len(), 1);
        let e = edge(t, "owner", "partner");
        assert_eq!(e.class, truth::Class::Replication);
        assert_eq!(e.payload_bytes, copies * SMALL);
        assert_eq!(e.unique_bytes, SMALL);
        assert_eq!(e.sends, copies * 3);
        assert_eq!(e.dup_ratio, Some(copies as f64));
        assert_eq!(e.per_copy_duplicate_bytes, (copies - 1) * SMALL);
        assert_eq!(t.totals.amplification, copies as f64);
        // The copies of one I/O are identical; different I/Os differ.
        let p = &g.seen.payloads[&(OWNER_IP, PARTNER_IP)];
        for io in p.chunks(copies as usize) {
            assert!(io.iter().all(|c| c == &io[0]));
        }
        assert_ne!(p[0], p[copies as usize]);
    }
}

#[test]
fn redirect4_is_redirection_then_replication() {
    let g = gen(&spec("redirect4", ""));
    check_counts(&g);
    let t = &g.truth;
    let red = edge(t, "partner", "owner");
    assert_eq!(
        (
            red.class,
            red.payload_bytes,
            red.unique_bytes,
            red.dup_ratio
        ),
        (truth::Class::Redirection, SMALL, SMALL, Some(1.0))
    );
    let rep = edge(t, "owner", "partner");
    assert_eq!(
        (
            rep.class,
            rep.payload_bytes,
            rep.unique_bytes,
            rep.dup_ratio
        ),
        (truth::Class::Replication, 2 * SMALL, SMALL, Some(2.0))
    );
    assert_eq!(t.totals.payload_bytes, 3 * SMALL);
    assert_eq!(
        g.seen.payloads[&(PARTNER_IP, OWNER_IP)][0],
        g.seen.payloads[&(OWNER_IP, PARTNER_IP)][1]
    );
    // Write-through: the owner answers the redirected WRITE after its partner answered both copies.
    let order: Vec<_> = g.seen.commands.iter().filter(|c| c.0 == 9).collect();
    assert_eq!(order.len(), 2 * 3 * 3);
}

#[test]
fn reads() {
    let g = gen(&spec("read-nonowner", ""));
    check_counts(&g);
    let e = edge(&g.truth, "owner", "partner");
    assert_eq!(
        (e.class, e.payload_bytes, e.unique_bytes, e.sends),
        (truth::Class::RedirectedRead, SMALL, SMALL, 3)
    );
    assert_eq!(g.truth.smb2.write_requests, 0);

    let g = gen(&spec("read-owner", ""));
    check_counts(&g);
    assert!(g.truth.edges.is_empty());
    assert_eq!(g.truth.totals.payload_bytes, 0);
    assert_eq!((g.seen.read_responses, g.seen.write_requests), (0, 0));
    assert!(
        g.seen.messages >= 8,
        "setup and metadata only: {:?}",
        g.seen.commands
    );
}

#[test]
fn noise_leaves_the_payload_unchanged() {
    let clean = gen(&spec("nested4", ""));
    let noisy = gen(&spec("nested4", r#","retransmit":0.02,"reorder":0.02"#));
    check_counts(&noisy);
    assert_eq!(noisy.seen.payloads, clean.seen.payloads);
    let t = &noisy.truth.tcp;
    assert!(
        t.retransmitted_segments > 0 && t.reordered_pairs > 0,
        "{t:?}"
    );
    assert_eq!(
        noisy.frames.len() as u64,
        clean.frames.len() as u64 + t.retransmitted_segments
    );
    // A retransmission repeats seq and payload with a new IP ID.
    let mut retx = 0;
    for segs in noisy.flows.values() {
        let mut first: HashMap<u32, &Segment> = HashMap::new();
        for s in segs.iter().filter(|s| !s.payload.is_empty()) {
            if let Some(o) = first.insert(s.seq, s) {
                assert_eq!(o.payload, s.payload);
                assert_ne!(o.ip_id, s.ip_id);
                retx += 1;
            }
        }
    }
    assert_eq!(retx, t.retransmitted_segments);
}

#[test]
fn mirror_dup_records_every_frame_twice() {
    let clean = gen(&spec("mirror2", ""));
    let dup = gen(&spec("mirror2", r#","mirror_dup":true"#));
    check_counts(&dup);
    assert_eq!(dup.frames.len(), 2 * clean.frames.len());
    assert_eq!(
        dup.truth.capture.mirror_duplicate_frames,
        clean.frames.len() as u64
    );
    for (pair, orig) in dup.frames.chunks(2).zip(&clean.frames) {
        assert_eq!(pair[0].data, pair[1].data);
        assert_eq!(pair[1].ts, pair[0].ts + 1_000);
        // Same frames apart from SMB2 time fields (the clock runs on during the copies).
        assert_eq!(pair[0].data.len(), orig.data.len());
    }
    assert_eq!(dup.seen.payloads, clean.seen.payloads);
    assert_eq!(
        dup.truth.edges[0].payload_bytes,
        clean.truth.edges[0].payload_bytes
    );
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let a = gen(&spec("redirect4", r#","retransmit":0.01"#));
    let b = gen(&spec("redirect4", r#","retransmit":0.01"#));
    assert_eq!(a.bytes, b.bytes);
    let c = gen(&format!(
        r#"{{"scenario":"redirect4","bytes":{SMALL},"io_size":{MIB},"seed":4,"retransmit":0.01}}"#
    ));
    assert_ne!(a.bytes, c.bytes);
    assert_ne!(a.seen.payloads, c.seen.payloads);
}

#[test]
fn multichannel_spreads_copies_over_connections() {
    let g = gen(&spec("six", r#","channels":2"#));
    check_counts(&g);
    assert_eq!(g.truth.tcp.connections, 2);
    let with_writes: Vec<_> = g
        .flows
        .iter()
        .filter(|(k, segs)| {
            k.3 == 445 && segs.iter().map(|s| s.payload.len()).sum::<usize>() > MIB as usize
        })
        .collect();
    assert_eq!(with_writes.len(), 2, "both channels carry WRITE data");
}

#[test]
fn zero_fill_and_dialect_311() {
    let g = gen(&spec(
        "nested4",
        r#","zero_fill":0.3,"dialect":"3.1.1","mss":8948"#,
    ));
    check_counts(&g);
    let e = edge(&g.truth, "owner", "partner");
    assert!(e.trivial_bytes > 0);
    assert_eq!(e.dup_ratio, Some(2.0));
    assert_eq!(e.payload_bytes - e.trivial_bytes, 2 * e.unique_bytes);
    // The NEGOTIATE response selects 3.1.1.
    let stream = reassemble(&g.flows[&(PARTNER_IP, 445, OWNER_IP, 49152)]);
    assert_eq!(u16le(&stream, 4 + 64 + 4), 0x0311);
}

#[test]
fn writes_to_a_file() {
    let dir = std::env::temp_dir().join(format!("smbwire-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.pcap");
    let out = synth_json(&spec("mirror2", ""), path.to_str().unwrap()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(v["capture"]["file_bytes"].as_u64(), Some(size));
    assert_eq!(v["topology"]["nodes"][1]["addresses"][0], "198.18.0.2");
    assert_eq!(v["edges"][0]["class"], "replication");
    assert!(synth_json(
        r#"{"scenario":"mirror2"}"#,
        dir.join("no/such/dir.pcap").to_str().unwrap()
    )
    .is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_crate_reader_and_decoder_accept_the_capture() {
    let g = gen(&spec(
        "redirect4",
        r#","mirror_dup":true,"retransmit":0.01,"reorder":0.01"#,
    ));
    let n = g.bytes.len() as u64;
    let mut r = smbwire_dissectors::capture::open_reader(
        Box::new(std::io::Cursor::new(g.bytes.clone())),
        n,
        "<synth>",
        0,
    )
    .unwrap();
    let mut acct = smbwire_dissectors::accounting::Accounting::default();
    let mut an = smbwire_dissectors::anomaly::Anomalies::default();
    let (mut frames, mut payload) = (0u64, 0u64);
    let mut last_ts = 0;
    while r.advance(&mut acct, &mut an) {
        let f = r.current().unwrap();
        assert_eq!(f.info.linktype, smbwire_dissectors::capture::linktype::ETHERNET);
        assert!(f.info.ts_ns >= last_ts);
        last_ts = f.info.ts_ns;
        let d = smbwire_dissectors::wire::decode(f.info.linktype, f.data).unwrap();
        match d.transport {
            smbwire_dissectors::wire::Transport::Tcp(t) => payload += t.payload.len() as u64,
            other => panic!("not TCP: {other:?}"),
        }
        frames += 1;
    }
    assert_eq!(
        an.iter().count(),
        0,
        "anomalies: {:?}",
        an.iter().collect::<Vec<_>>()
    );
    assert_eq!(frames, g.truth.capture.frames);
    assert_eq!(last_ts, g.truth.capture.last_ts_ns);
    // Every TCP payload byte the reader sees is one the independent reader above saw.
    let seen: u64 = g
        .flows
        .values()
        .flatten()
        .map(|s| s.payload.len() as u64)
        .sum();
    assert_eq!(payload, seen);
}

mod infiniband;
mod rdma;
mod rdma_property;
mod rocev1;
