//! Pipeline tests: one end-to-end property over TCP.
//!
//! An SMB2 connection (CREATE, then WRITE requests and READ responses carrying payload) is
//! built with the synthesizer's message emitters and cut into random TCP segments. The
//! segments are then reordered within the reassembly window, and some are seen twice (a
//! mirror-port copy right after the original, or a TCP retransmission, possibly cut
//! differently). The frames go through the real stages — `wire::decode`, `FlowTable`
//! reassembly, `Smb2Stream` — and must yield exactly the sends of a clean in-order run:
//! the same (MessageId, kind, offset, length, whole and per-block digests). The same frames
//! through `Pipeline::process` must give the same edges, totals and SMB2 counters.

use smbwire_dissectors::pipeline::*;
use smbwire_dissectors::wire::{self, Transport};
use smbwire_dissectors::accounting::Accounting;
use smbwire_dissectors::anomaly::Anomalies;
use smbwire_dissectors::capture::RawFrame;
use smbwire_dissectors::frame::FrameCtx;
use smbwire_dissectors::smb2::state::SmbState;
use smbwire_dissectors::smb2::stream::Smb2Stream;
use smbwire_dissectors::tcp::flow::{FlowConfig, FlowTable};
use std::net::IpAddr;
use std::time::Instant;
use smbwire_dissectors::capture::{linktype, FrameInfo};
use smbwire_dissectors::dedupe::{SendKind, SendRecord};
use smbwire_dissectors::frame::FrameRef;
use smbwire_dissectors::payload::hash::digest_of;
use smbwire_dissectors::context::{PayloadSink, Shared};
use smbwire_synth::data::SplitMix64;
use smbwire_synth::frames::{flags, Endpoint, FrameBuilder, TcpFields};
use smbwire_synth::smb2 as msg;
use proptest::prelude::*;
use std::net::Ipv4Addr;

const CLIENT: Endpoint = Endpoint { mac: [2, 0, 0, 0, 0, 1], ip: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), port: 49_152 };
const SERVER: Endpoint = Endpoint { mac: [2, 0, 0, 0, 0, 2], ip: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)), port: 445 };
const ISN: [u32; 2] = [0x1000_0000, 0xffff_f000]; // client, server (the server's wraps)
const FILE_ID: msg::FileId = msg::FileId { persistent: 0x11, volatile: 0x22 };
const BLOCK: usize = 4096;

/// One I/O of the connection: a WRITE of `data` or a READ answered with `data`.
#[derive(Clone, Debug)]
struct Io {
    write: bool,
    offset: u64,
    data: Vec<u8>,
}

/// Payload of `len` bytes from `rng`: 4 KiB blocks of random bytes, zero-filled blocks
/// (trivial) and copies of the first block (repeated content).
fn payload(rng: &mut SplitMix64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = Vec::with_capacity(len);
    while v.len() < len {
        let n = BLOCK.min(len - v.len());
        match rng.next_u64() % 8 {
            0 => v.extend(std::iter::repeat_n(0u8, n)),
            1 if v.len() >= BLOCK => v.extend_from_within(..n),
            _ => v.extend((0..n).map(|_| rng.next_u64() as u8)),
        }
    }
    v
}

/// A NetBIOS session message: length header, then the parts.
fn nbss(parts: &[&[u8]]) -> Vec<u8> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut v = vec![0, (len >> 16) as u8, (len >> 8) as u8, len as u8];
    for p in parts {
        v.extend_from_slice(p);
    }
    v
}

fn header(command: u16, message_id: u64, response: bool) -> msg::Header {
    msg::Header { command, credit_charge: 1, credits: 1, status: 0, response, message_id, tree_id: 1, session_id: 0x77 }
}

/// The byte streams of the connection as bursts: (direction, bytes), in the order they
/// must reach the analyzer (a response after its request). Direction 0 = client → server.
/// `batches` groups the I/Os: each batch sends all its requests, then all its responses.
fn bursts(ios: &[Io], batches: &[usize]) -> Vec<(usize, Vec<u8>)> {
    let mut out = vec![
        (0, nbss(&[&msg::create_request(&header(msg::command::CREATE, 1, false), "vm\\disk.vhdx")])),
        (1, nbss(&[&msg::create_response(&header(msg::command::CREATE, 1, true), FILE_ID, 0, 1 << 30)])),
    ];
    let mut i = 0;
    for &b in batches {
        let group: Vec<(u64, &Io)> = ios[i..(i + b).min(ios.len())].iter().enumerate().map(|(k, io)| ((i + k) as u64 + 2, io)).collect();
        i += b;
        let (mut req, mut resp) = (Vec::new(), Vec::new());
        for &(mid, io) in &group {
            let len = io.data.len() as u32;
            if io.write {
                let h = header(msg::command::WRITE, mid, false);
                req.extend(nbss(&[&msg::write_request_head(&h, FILE_ID, io.offset, len), &io.data]));
                resp.extend(nbss(&[&msg::write_response(&h.response(), len)]));
            } else {
                let h = header(msg::command::READ, mid, false);
                req.extend(nbss(&[&msg::read_request(&h, FILE_ID, io.offset, len)]));
                resp.extend(nbss(&[&msg::read_response_head(&h.response(), len), &io.data]));
            }
        }
        if !group.is_empty() {
            out.push((0, req));
            out.push((1, resp));
        }
    }
    out
}

/// A TCP segment of one direction: stream offset and bytes (flags: SYN when `syn`).
#[derive(Clone, Debug)]
struct Seg {
    dir: usize,
    rel: u32,
    bytes: Vec<u8>,
    syn: bool,
    /// IP identification: equal for a mirror copy, new for a retransmission.
    ip_id: u16,
}

/// Renders segments into Ethernet frames (checksums filled in by the emitters).
fn frames(segs: &[Seg]) -> Vec<Vec<u8>> {
    let mut fb = FrameBuilder::default();
    segs.iter()
        .map(|s| {
            let (src, dst) = if s.dir == 0 { (&CLIENT, &SERVER) } else { (&SERVER, &CLIENT) };
            // A SYN takes one sequence number: data starts at ISN + 1.
            let seq = if s.syn { ISN[s.dir] } else { ISN[s.dir].wrapping_add(1).wrapping_add(s.rel) };
            let ack = ISN[1 - s.dir].wrapping_add(1);
            let fl = if s.syn { if s.dir == 0 { flags::SYN } else { flags::SYN | flags::ACK } } else { flags::ACK | flags::PSH };
            let t = TcpFields { seq, ack, flags: fl, window: 65_535, options: &[] };
            fb.tcp_frame(src, dst, s.ip_id, &t, &[&s.bytes]).to_vec()
        })
        .collect()
}

/// The handshake, then every burst cut at `mss` (the clean, in-order run).
fn clean(bursts: &[(usize, Vec<u8>)], mss: usize) -> Vec<Seg> {
    let mut ip_id = [0u16; 2];
    let mut next_id = |d: usize| {
        ip_id[d] = ip_id[d].wrapping_add(1);
        ip_id[d].wrapping_add((d as u16) * 0x8000)
    };
    let mut segs = vec![
        Seg { dir: 0, rel: 0, bytes: vec![], syn: true, ip_id: next_id(0) },
        Seg { dir: 1, rel: 0, bytes: vec![], syn: true, ip_id: next_id(1) },
    ];
    let mut pos = [0u32; 2];
    for (d, b) in bursts {
        for c in b.chunks(mss) {
            segs.push(Seg { dir: *d, rel: pos[*d], bytes: c.to_vec(), syn: false, ip_id: next_id(*d) });
            pos[*d] += c.len() as u32;
        }
    }
    segs
}

/// How the messy run mangles the clean one.
#[derive(Clone, Debug)]
struct Mangle {
    seed: u64,
    /// Largest segment (random cuts between 1 and this).
    max_seg: usize,
    /// Furthest a segment moves from its place within its burst.
    reorder: usize,
    /// Per mille of segments with a mirror copy / a retransmission.
    mirror: u64,
    retransmit: u64,
}

/// The handshake, then every burst cut at random sizes, each burst's segments reordered
/// (a segment moves at most `reorder` places), some followed by a mirror copy (identical
/// frame) and some seen again later as a retransmission (new IP id, sometimes covering a
/// different byte range that overlaps the original).
fn messy(bursts: &[(usize, Vec<u8>)], m: &Mangle) -> Vec<Seg> {
    let mut rng = SplitMix64::new(m.seed);
    let mut ip_id = [0u16; 2];
    let mut next_id = |d: usize| {
        ip_id[d] = ip_id[d].wrapping_add(1);
        ip_id[d].wrapping_add((d as u16) * 0x8000 + 0x4000)
    };
    let mut out = vec![
        Seg { dir: 0, rel: 0, bytes: vec![], syn: true, ip_id: next_id(0) },
        Seg { dir: 1, rel: 0, bytes: vec![], syn: true, ip_id: next_id(1) },
    ];
    let mut pos = [0u32; 2];
    let mut sent: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    for (d, b) in bursts {
        let d = *d;
        let base = pos[d];
        let mut cut = Vec::new();
        let mut at = 0usize;
        while at < b.len() {
            let n = (1 + (rng.next_u64() as usize) % m.max_seg).min(b.len() - at);
            cut.push(Seg { dir: d, rel: base + at as u32, bytes: b[at..at + n].to_vec(), syn: false, ip_id: 0 });
            at += n;
        }
        // Bounded displacement: sort by index plus a random delay of at most `reorder`.
        let mut keyed: Vec<(usize, usize, Seg)> =
            cut.into_iter().enumerate().map(|(i, s)| (i + (rng.next_u64() as usize) % (m.reorder + 1), i, s)).collect();
        keyed.sort_by_key(|k| (k.0, k.1));
        sent[d].extend_from_slice(b);
        pos[d] += b.len() as u32;
        // Retransmissions waiting for their turn: (originals sent before it goes, segment).
        let mut pending: Vec<(usize, Seg)> = Vec::new();
        for (n, (_, _, mut s)) in keyed.into_iter().enumerate() {
            s.ip_id = next_id(d);
            let copy = s.clone();
            out.push(s);
            if rng.next_u64() % 1000 < m.mirror {
                out.push(copy.clone()); // the switch copied the frame twice
            }
            if rng.next_u64() % 1000 < m.retransmit {
                // Retransmitted a few segments later: the same bytes, or a range around them
                // re-cut by the sender (within what this direction has sent so far).
                let mut r = copy;
                if rng.next_u64().is_multiple_of(2) {
                    let start = r.rel.saturating_sub((rng.next_u64() % 700) as u32);
                    let end = (r.rel + r.bytes.len() as u32 + (rng.next_u64() % 700) as u32).min(pos[d]);
                    r.rel = start;
                    r.bytes = sent[d][start as usize..end as usize].to_vec();
                }
                pending.push((n + (rng.next_u64() as usize) % 8, r));
            }
            let (due, rest): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(at, _)| *at <= n);
            pending = rest;
            for (_, mut r) in due {
                r.ip_id = next_id(d);
                out.push(r);
            }
        }
        for (_, mut r) in pending {
            r.ip_id = next_id(d);
            out.push(r);
        }
    }
    out
}

/// A send as the property compares it.
/// (MessageId, is a WRITE, offset, length, payload digest, blocks, sender, file name).
type Key = (u64, bool, u64, u64, [u8; 32], Vec<([u8; 16], u32, bool)>, IpAddr, Option<String>);

fn key(r: &SendRecord) -> Key {
    (
        r.message_id,
        r.kind == SendKind::Write,
        r.offset,
        r.digest.len,
        r.digest.digest,
        r.digest.blocks.iter().map(|b| (b.hash, b.len, b.trivial)).collect(),
        r.src,
        r.file_name.as_deref().map(str::to_string),
    )
}

#[derive(Default)]
struct Tap {
    anomalies: Anomalies,
    accounting: Accounting,
    smb: Option<SmbState>,
    sends: Vec<SendRecord>,
    tcp: smbwire_dissectors::tcp::ReassemblyStats,
}

struct Sink<'a>(&'a mut Vec<SendRecord>);

impl PayloadSink for Sink<'_> {
    fn send(&mut self, rec: SendRecord) {
        self.0.push(rec);
    }
    fn complete(&mut self, _: u64, _: u64, _: u64) {}
}

fn ctx_of(i: usize) -> FrameCtx {
    FrameCtx { frame: FrameRef { file: 0, number: i as u64 + 1 }, ts_ns: 1_700_000_000_000_000_000 + i as u64 * 1_000, seq: 0 }
}

/// Frames through wire decode, the flow table's reassembly and SMB2 streams; the sends.
fn sends_through_stages(frames: &[Vec<u8>]) -> (Vec<Key>, Tap) {
    let mut tap = Tap { smb: Some(SmbState::new()), ..Tap::default() };
    let smb = tap.smb.take().unwrap();
    let mut sends = Vec::new();
    {
        let anomalies = std::mem::take(&mut tap.anomalies);
        let accounting = std::mem::take(&mut tap.accounting);
        let mut shared = Shared { anomalies, accounting, smb, dedupe: Sink(&mut sends), rdma: () };
        let mut table: FlowTable<Smb2Stream> = FlowTable::new(FlowConfig::default());
        for (i, f) in frames.iter().enumerate() {
            let d = wire::decode(linktype::ETHERNET, f).expect("synthetic frame decodes");
            let Transport::Tcp(seg) = d.transport else { panic!("not TCP") };
            table.segment(d.src, d.dst, &seg, d.dup_signature(), &ctx_of(i), &mut shared, &mut |_, from, to| {
                assert_eq!(to.1, 445, "the first segment seen goes to the server");
                Some((Smb2Stream::new(1, true, from, to), Smb2Stream::new(1, false, to, from)))
            });
        }
        table.finish(&mut shared);
        tap.tcp = table.stats();
        tap.anomalies = shared.anomalies;
        tap.accounting = shared.accounting;
        tap.smb = Some(shared.smb);
    }
    let mut keys: Vec<Key> = sends.iter().map(key).collect();
    keys.sort();
    tap.sends = sends;
    (keys, tap)
}

/// Frames through `Pipeline::process`: edges, totals and SMB2 counters of the result.
fn pipeline_figures(frames: &[Vec<u8>]) -> (serde_json::Value, serde_json::Value, serde_json::Value) {
    let mut p = Pipeline::new(&Config::default(), None);
    for (i, f) in frames.iter().enumerate() {
        let c = ctx_of(i);
        let info = FrameInfo { frame: c.frame, ts_ns: c.ts_ns, linktype: linktype::ETHERNET, orig_len: f.len() as u32 };
        p.process(&RawFrame { info, data: f });
    }
    let r = serde_json::to_value(p.finish(Vec::new(), Accounting::default(), Instant::now())).unwrap();
    (r["edges"].clone(), r["totals"].clone(), r["smb2"].clone())
}

/// The sends the I/Os must produce, from the payload bytes themselves.
fn expected(ios: &[Io]) -> Vec<Key> {
    let mut v: Vec<Key> = ios
        .iter()
        .enumerate()
        .filter(|(_, io)| !io.data.is_empty())
        .map(|(i, io)| {
            let d = digest_of(&io.data);
            let src = if io.write { CLIENT.ip } else { SERVER.ip };
            let blocks = d.blocks.iter().map(|b| (b.hash, b.len, b.trivial)).collect();
            (i as u64 + 2, io.write, io.offset, d.len, d.digest, blocks, src, Some("vm\\disk.vhdx".to_string()))
        })
        .collect();
    v.sort();
    v
}

fn ios_strategy() -> impl Strategy<Value = (Vec<Io>, Vec<usize>)> {
    (
        proptest::collection::vec((any::<bool>(), 1usize..=96 * 1024, 0u64..64), 1..6),
        proptest::collection::vec(1usize..4, 1..6),
        any::<u64>(),
    )
        .prop_map(|(spec, batches, seed)| {
            let mut rng = SplitMix64::new(seed);
            let ios = spec
                .into_iter()
                .map(|(write, len, slot)| Io { write, offset: slot << 20, data: payload(&mut rng, len) })
                .collect::<Vec<_>>();
            // Batches covering every I/O (the last one takes what is left).
            let mut b = Vec::new();
            let mut left = ios.len();
            for n in batches {
                if left == 0 {
                    break;
                }
                b.push(n.min(left));
                left -= n.min(left);
            }
            if left > 0 {
                b.push(left);
            }
            (ios, b)
        })
}

fn mangle_strategy() -> impl Strategy<Value = Mangle> {
    (any::<u64>(), 1usize..=1460, 0usize..=24, 0u64..=300, 0u64..=300)
        .prop_map(|(seed, max_seg, reorder, mirror, retransmit)| Mangle { seed, max_seg, reorder, mirror, retransmit })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn mangled_tcp_gives_the_same_sends_as_a_clean_run((ios, batches) in ios_strategy(), m in mangle_strategy()) {
        let bursts = bursts(&ios, &batches);
        let clean_frames = frames(&clean(&bursts, 1448));
        let messy_segs = messy(&bursts, &m);
        let messy_frames = frames(&messy_segs);

        let (clean_sends, clean_tap) = sends_through_stages(&clean_frames);
        // The clean run itself is right: one send per I/O, digests of the bytes sent.
        prop_assert_eq!(&clean_sends, &expected(&ios));
        prop_assert_eq!(clean_tap.anomalies.iter().count(), 0, "clean run anomalies: {:?}", clean_tap.anomalies);

        let (messy_sends, messy_tap) = sends_through_stages(&messy_frames);
        prop_assert_eq!(&messy_sends, &clean_sends, "mangle {:?}", m);
        prop_assert_eq!((messy_tap.tcp.gap_bytes, messy_tap.tcp.dropped_bytes), (0, 0));
        // Nothing of the stream was lost on the way (no gap, no undeliverable byte).
        prop_assert_eq!(messy_tap.anomalies.iter().filter(|(k, _)| k.starts_with("smb2.")).count(), 0,
            "messy run anomalies: {:?}", messy_tap.anomalies);

        // The whole pipeline agrees: same edges, totals and SMB2 counters.
        prop_assert_eq!(pipeline_figures(&messy_frames), pipeline_figures(&clean_frames));
    }
}

/// The property can fail: a lost segment changes the sends (guards against a harness that
/// compares two empty sets, or one that would not notice a missing byte).
#[test]
fn a_lost_segment_is_noticed() {
    let mut rng = SplitMix64::new(7);
    let ios = vec![
        Io { write: true, offset: 0, data: payload(&mut rng, 40_000) },
        Io { write: false, offset: 1 << 20, data: payload(&mut rng, 30_000) },
    ];
    let b = bursts(&ios, &[2]);
    let segs = clean(&b, 1448);
    let (all, _) = sends_through_stages(&frames(&segs));
    assert_eq!(all, expected(&ios));
    assert_eq!(all.len(), 2);
    // Drop one data segment in the middle of the WRITE payload.
    let victim = segs.iter().position(|s| s.dir == 0 && s.rel > 10_000).unwrap();
    let mut lossy = segs.clone();
    lossy.remove(victim);
    let (some, _) = sends_through_stages(&frames(&lossy));
    assert_ne!(some, all);
    assert!(some.iter().all(|k| !k.1), "the WRITE with a hole must not be a send: {some:?}");
}

/// A fixed, heavy mangling: the run really reorders, retransmits (also re-cut) and
/// mirror-copies, and still gives the clean sends.
#[test]
fn heavy_mangling_is_exercised_and_harmless() {
    let mut rng = SplitMix64::new(42);
    let ios: Vec<Io> = (0..6)
        .map(|i| Io { write: i % 3 != 2, offset: (i as u64) << 20, data: payload(&mut rng, 20_000 + i * 13_001) })
        .collect();
    let b = bursts(&ios, &[2, 3, 1]);
    let clean_frames = frames(&clean(&b, 1448));
    let m = Mangle { seed: 9, max_seg: 900, reorder: 20, mirror: 250, retransmit: 250 };
    let messy_frames = frames(&messy(&b, &m));
    let (clean_sends, clean_tap) = sends_through_stages(&clean_frames);
    let (messy_sends, messy_tap) = sends_through_stages(&messy_frames);
    assert_eq!(clean_sends, expected(&ios));
    assert_eq!(messy_sends, clean_sends);
    assert_eq!(clean_tap.tcp.out_of_order_segments + clean_tap.tcp.retransmitted_segments + clean_tap.tcp.mirror_duplicate_frames, 0);
    let t = messy_tap.tcp;
    assert!(t.out_of_order_segments > 50, "{t:?}");
    assert!(t.retransmitted_segments > 50, "{t:?}");
    assert!(t.mirror_duplicate_frames > 50, "{t:?}");
    assert_eq!((t.gap_bytes, t.dropped_bytes), (0, 0), "{t:?}");
    assert_eq!(pipeline_figures(&messy_frames), pipeline_figures(&clean_frames));
    // And the figures are the expected ones: every payload crossed once.
    let (edges, totals, _) = pipeline_figures(&clean_frames);
    let payload: u64 = ios.iter().map(|io| io.data.len() as u64).sum();
    assert_eq!(totals["payload_bytes"].as_u64(), Some(payload), "{totals}");
    assert_eq!(edges.as_array().unwrap().iter().map(|e| e["sends"].as_u64().unwrap()).sum::<u64>(), 6);
}
