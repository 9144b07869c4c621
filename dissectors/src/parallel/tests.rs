//! `--threads N` gives one pipeline's result: the same JSON apart from `analysis`, on every
//! bundled and public capture, with 2 and 3 workers, with small batches and several sweeps.

use super::*;
use serde_json::Value;
use std::path::PathBuf;

fn captures() -> Vec<PathBuf> {
    crate::capture::testutil::all_captures()
}

/// The result without the run's own figures (timing, threads), and the evidence lines.
fn run(paths: &[PathBuf], config: &Config, dir: &std::path::Path) -> (Value, String) {
    let paths: Vec<String> = paths.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let ev = dir.join(format!("ev-{}", config.threads));
    let r = analyze_files(&paths, config, Some(ev.to_str().unwrap()), &mut |_, _| true).expect("analysis");
    assert_eq!(r.analysis.threads, config.threads.max(1));
    let mut v = serde_json::to_value(&r).unwrap();
    v.as_object_mut().unwrap().remove("analysis");
    (v, std::fs::read_to_string(ev).unwrap())
}

fn same(paths: &[PathBuf], config: &Config) {
    static RUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let k = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("smbwire-par-{}-{k}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let one = run(paths, &Config { threads: 1, ..config.clone() }, &dir);
    for n in [2, 3] {
        let many = run(paths, &Config { threads: n, ..config.clone() }, &dir);
        crate::capture::testutil::assert_same_json(&format!("{paths:?} with {n} threads"), &one.0, &many.0);
        if many.1 != one.1 {
            let d = one.1.lines().zip(many.1.lines()).position(|(a, b)| a != b);
            let line = |t: &str| d.and_then(|i| t.lines().nth(i)).map(|l| l.chars().take(600).collect::<String>());
            panic!("{paths:?}: evidence with {n} threads differs at line {d:?}:\n{:?}\n{:?}", line(&one.1), line(&many.1));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn threads_give_one_pipelines_result_on_every_capture() {
    for p in captures() {
        same(&[p], &Config::default());
    }
}

#[test]
fn threads_give_one_pipelines_result_with_a_short_window_and_merged_files() {
    // A window of 1 ms folds sends while others are still arriving; idle flows expire with
    // sweeps every second of capture time on the longer captures.
    // Batches of 7 frames: sweeps and closes cross batch boundaries (the others' results
    // must not change with it either).
    BATCH_FRAMES.store(7, std::sync::atomic::Ordering::Relaxed);
    let mut c = Config::default();
    c.dedupe.window_ns = 1_000_000;
    c.dedupe.top_n = 3;
    let (windowed, smb, same_servers) = crate::capture::testutil::equality_inputs(&captures());
    for p in windowed {
        same(&[p], &c);
    }
    same(&smb, &Config::default());
    same(&same_servers, &Config::default());
}

#[test]
fn shard_keeps_both_directions_of_a_connection_together() {
    let caps = captures();
    let cap = caps.iter().find(|p| p.to_string_lossy().contains("redirect4-1MiB")).unwrap();
    for n in [2, 3] {
        let mut m = Merged::open(&[cap.to_string_lossy().into_owned()]).unwrap();
        let (mut acct, mut an) = (Accounting::default(), Anomalies::default());
        type Ends = ((std::net::IpAddr, u16), (std::net::IpAddr, u16));
        let mut by_conn: std::collections::HashMap<Ends, usize> = Default::default();
        let mut first_seen = Vec::new();
        let mut sharder = Sharder::new(n);
        while let Some(f) = m.next_frame(&mut acct, &mut an) {
            let w = sharder.pick(&f.info, f.data);
            let d = wire::decode(f.info.linktype, f.data).unwrap();
            let Transport::Tcp(seg) = d.transport else { continue };
            let (x, y) = ((d.src, seg.src_port), (d.dst, seg.dst_port));
            let key = if x <= y { (x, y) } else { (y, x) };
            if !by_conn.contains_key(&key) {
                first_seen.push(w);
            }
            assert_eq!(*by_conn.entry(key).or_insert(w), w);
        }
        // Placed by load: the first connections (up to n; the capture opens them before
        // any payload) each get a worker of their own, which a hash did only by chance.
        let k = n.min(by_conn.len());
        assert!(k >= 2, "{} connections", by_conn.len());
        let mut firsts = first_seen[..k].to_vec();
        firsts.sort();
        assert_eq!(firsts, (0..k).collect::<Vec<_>>(), "first connections on {first_seen:?}");
    }
}

#[test]
fn sharder_falls_back_to_the_hash_past_its_bound() {
    let caps = captures();
    let cap = caps.iter().find(|p| p.to_string_lossy().contains("redirect4-1MiB")).unwrap();
    let mut m = Merged::open(&[cap.to_string_lossy().into_owned()]).unwrap();
    let (mut acct, mut an) = (Accounting::default(), Anomalies::default());
    let mut sharder = Sharder::new(3);
    // A full table: every connection not placed yet goes where its hash says, and stays.
    for k in 0..SHARDER_CONNECTIONS as u64 {
        sharder.assigned.insert(k.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1 << 63, 0);
    }
    while let Some(f) = m.next_frame(&mut acct, &mut an) {
        assert_eq!(sharder.pick(&f.info, f.data), shard(&f.info, f.data, 3));
    }
    assert_eq!(sharder.assigned.len(), SHARDER_CONNECTIONS);
}

#[test]
fn workers_share_one_pipelines_bounds() {
    let c = Config::from_json(r#"{"max_memory_bytes": 104857600}"#).unwrap();
    let one = Pipeline::new(&c, None);
    let w = Config { workers: 4, ..c.clone() };
    let part = Pipeline::with_sink(&w, Recorder { mark: Mark::default(), out: Vec::new() });
    assert_eq!(part.shared.smb.opening_cap, one.shared.smb.opening_cap / 4);
    let (f1, f4) = (crate::pipeline::tests_flow_config(&c), crate::pipeline::tests_flow_config(&w));
    assert_eq!(f4.max_flows, f1.max_flows / 4);
    assert_eq!(f4.max_total_buffered_bytes, f1.max_total_buffered_bytes / 4);
}

/// The closes of several workers reach Dedupe in the order of their marks, whichever worker
/// recorded them and in whatever order they were gathered: the first send of a payload is
/// the one with the lower mark (its connection is numbered 1 in the report).
#[test]
fn closes_of_several_workers_apply_in_mark_order() {
    let payload: Vec<u8> = (0..8192u32).map(|i| (i * 31 % 251) as u8).collect();
    let send = |conn: u64, src: u8| crate::capture::testutil::write_send(conn, src, &payload);
    let finish = |m: u64| Mark { phase: phase::FINISH_TCP, a: m, b: 0 };
    let mut o = Ordered::new(&Config::default(), 2, None);
    // Gathered worker by worker: worker 0's close (mark 5) before worker 1's (mark 3).
    let mut spent = Vec::new();
    o.apply_group(
        vec![
            (finish(5), 0, Item::Send(Box::new(send(500, 1)), None)),
            (finish(3), 1, Item::Send(Box::new(send(300, 2)), None)),
        ],
        &mut |w, x| spent.push((w, x)),
    );
    // Each record goes back to the worker that made it, to be freed there.
    let back: Vec<_> = spent
        .iter()
        .map(|(w, x)| match x {
            Spent::Send(s) => (*w, s.message_id),
            Spent::Names(_) => panic!("no names were applied"),
        })
        .collect();
    assert_eq!(back, vec![(1, 300), (0, 500)]);
    let r = serde_json::to_value(o.dedupe.finish()).unwrap();
    let sends = r["top_duplicates"][0]["sends"].as_array().expect("one duplicated payload");
    let order: Vec<_> = sends.iter().map(|s| (s["message_id"].as_u64().unwrap(), s["conn"].as_u64().unwrap())).collect();
    assert_eq!(order, vec![(300, 1), (500, 2)], "mark 3 first: {r}");
}

/// Frames of a capture file, plain or compressed, reach the workers as places in the
/// reader's buffer, which their batches hold (no copy); frames handed without a buffer (as
/// live rings hand them) are copied into the batch. All give the same result.
#[test]
fn frames_in_a_read_buffer_are_not_copied() {
    use std::io::Write;
    /// Hands every frame without its buffer.
    struct Copying(Engine);
    impl FrameSink for Copying {
        fn inputs(&mut self) -> (&mut u64, &mut Anomalies, &mut Vec<crate::findings::Finding>) {
            self.0.inputs()
        }
        fn process(&mut self, frame: &RawFrame<'_>) {
            self.0.process(frame)
        }
    }
    let caps = captures();
    let cap = caps.iter().find(|p| p.to_string_lossy().contains("redirect4-1MiB")).unwrap();
    let dir = std::env::temp_dir().join(format!("smbwire-par-map-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gz = dir.join("c.pcap.gz");
    let mut enc = flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), flate2::Compression::fast());
    enc.write_all(&std::fs::read(cap).unwrap()).unwrap();
    enc.finish().unwrap();
    let mut results = Vec::new();
    for (path, copy) in [(cap.clone(), false), (gz, false), (cap.clone(), true)] {
        let paths = vec![path.to_string_lossy().into_owned()];
        let merged = open_inputs(&paths, ReadMode::Buffered).unwrap();
        let mut sink = Copying(Engine::Many(Box::new(Parallel::new(&Config::default(), 2, None))));
        let (inputs, container) = if copy {
            read_inputs(&paths, merged, &Config::default(), &mut sink, &mut |_, _| true).unwrap()
        } else {
            read_inputs(&paths, merged, &Config::default(), &mut sink.0, &mut |_, _| true).unwrap()
        };
        let Engine::Many(many) = &sink.0 else { unreachable!() };
        let (frames, copied) = many.handed;
        assert!(frames + copied > 1000, "{frames} + {copied}");
        if copy {
            assert_eq!(frames, 0, "frames handed without their buffer are copied");
        } else {
            assert_eq!(copied, 0, "{}: frames in a read buffer are not copied", path.display());
        }
        let mut v = serde_json::to_value(sink.0.finish(inputs, container, Instant::now())).unwrap();
        for k in ["analysis", "inputs"] {
            v.as_object_mut().unwrap().remove(k);
        }
        results.push(v);
    }
    crate::capture::testutil::assert_same_json("plain and compressed capture", &results[0], &results[1]);
    crate::capture::testutil::assert_same_json("frames in buffers and copied", &results[0], &results[2]);
    std::fs::remove_dir_all(&dir).ok();
}

/// The reader's shortcut (`tcp_ends`) gives, for every frame it takes, the ends
/// `wire::decode` finds, or the frame does not decode at all (then its worker does not
/// matter: the error is counted the same by any). Every frame of every capture, and each
/// with every one of its first 80 bytes changed.
#[test]
fn the_shortcut_finds_the_ends_decode_finds() {
    use crate::accounting::Accounting;
    let (mut taken, mut frames) = (0u64, 0u64);
    let check = |linktype: u32, data: &[u8]| -> bool {
        let raw = raw_v4_ends(linktype, data);
        let Some((x, y)) = tcp_ends(linktype, data) else {
            assert_eq!(raw, None, "{data:02x?}");
            return false;
        };
        if let Some(k) = raw {
            let ip = |b: &[u8]| std::net::IpAddr::from(<[u8; 4]>::try_from(b).unwrap());
            let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
            assert_eq!(((ip(&k[..4]), port(&k[8..10])), (ip(&k[4..8]), port(&k[10..]))), (x, y), "{data:02x?}");
            assert_eq!(reversed_v4(reversed_v4(k)), k);
            assert_eq!(&reversed_v4(k)[..4], &k[4..8]);
        }
        if let Ok(d) = wire::decode(linktype, data) {
            match d.transport {
                Transport::Tcp(seg) => {
                    assert_eq!(((d.src, seg.src_port), (d.dst, seg.dst_port)), (x, y), "{data:02x?}");
                }
                _ => panic!("the shortcut took a frame that decodes as another transport: {data:02x?}"),
            }
        }
        true
    };
    for p in captures() {
        let Ok(mut r) = crate::capture::open(p.to_str().unwrap(), 0) else { continue };
        let (mut acct, mut an) = (Accounting::default(), Anomalies::default());
        let mut n = 0;
        while r.advance(&mut acct, &mut an) && n < 2000 {
            n += 1;
            let f = r.current().expect("a frame");
            frames += 1;
            taken += u64::from(check(f.info.linktype, f.data));
            if n % 50 == 1 {
                let mut m = f.data.to_vec();
                for i in 0..m.len().min(80) {
                    for x in [0x01u8, 0x0f, 0x40, 0xff] {
                        m[i] ^= x;
                        check(f.info.linktype, &m);
                        m[i] ^= x;
                    }
                }
                for cut in 0..m.len().min(80) {
                    check(f.info.linktype, &m[..cut]);
                }
            }
        }
    }
    // Most frames of the bundled captures are Ethernet TCP: the shortcut is taken.
    assert!(taken * 2 > frames, "the shortcut took {taken} of {frames} frames");
}

/// With one connection and two workers, the idle worker digests blocks for the busy one
/// (`payload::offload`), and the result is one pipeline's (also on every capture above,
/// where workers without connections help the others).
#[test]
fn an_idle_worker_digests_blocks_for_the_busy_one() {
    let p = captures().into_iter().find(|p| p.file_name().is_some_and(|n| n == "nested4-1MiB.pcap")).expect("bundled capture");
    let path = vec![p.to_string_lossy().into_owned()];
    let one = analyze_files(&path, &Config::default(), None, &mut |_, _| true).expect("analysis");
    assert_eq!(one.analysis.hash_batches_helped, 0);
    let mut want = serde_json::to_value(&one).unwrap();
    want.as_object_mut().unwrap().remove("analysis");
    let mut helped = 0;
    // Whether the idle worker is scheduled in time for a given batch depends on the machine:
    // over 20 runs of 2 MiB of 1 MiB writes it takes some.
    for _ in 0..20 {
        let r = analyze_files(&path, &Config { threads: 2, ..Config::default() }, None, &mut |_, _| true).expect("analysis");
        helped += r.analysis.hash_batches_helped;
        let mut got = serde_json::to_value(&r).unwrap();
        got.as_object_mut().unwrap().remove("analysis");
        crate::capture::testutil::assert_same_json("nested4-1MiB.pcap with 2 threads", &want, &got);
    }
    assert!(helped > 0, "no batch was digested by the idle worker in 20 runs");
}

/// A worker none of whose connections has a frame in a batch is not handed it (unless a
/// sweep falls in it): one busy connection leaves the other workers asleep or digesting its
/// blocks, not woken for every batch. Results stay those of one pipeline.
#[test]
fn a_worker_is_handed_only_the_batches_with_work_for_it() {
    use crate::accounting::Accounting;
    BATCH_FRAMES.store(7, std::sync::atomic::Ordering::Relaxed);
    let caps = captures();
    let cap = caps.iter().find(|p| p.to_string_lossy().contains("redirect4-1MiB")).unwrap();
    let mut merged = Merged::open(&[cap.to_string_lossy().into_owned()]).unwrap();
    let (mut acct, mut an) = (Accounting::default(), Anomalies::default());
    // The frames of the capture's first TCP connection only.
    let mut first = None;
    let mut frames: Vec<(FrameInfo, Vec<u8>)> = Vec::new();
    while let Some(f) = merged.next_frame(&mut acct, &mut an) {
        let Some((x, y)) = tcp_ends(f.info.linktype, f.data) else { continue };
        let key = if x <= y { (x, y) } else { (y, x) };
        if *first.get_or_insert(key) == key {
            frames.push((f.info, f.data.to_vec()));
        }
    }
    assert!(frames.len() > 100, "{} frames", frames.len());
    let config = Config::default();
    let mut many = Parallel::new(&config, 3, None);
    let mut one = Engine::new(&Config { threads: 1, ..config.clone() }, None);
    for (info, data) in frames.iter() {
        let frame = RawFrame { info: *info, data };
        many.process(&frame);
        one.process(&frame);
    }
    let handed: Vec<u64> = many.workers.iter().map(|w| w.handed).collect();
    let busy = handed.iter().copied().max().unwrap();
    assert!(busy as usize >= frames.len() / 7, "{handed:?}");
    assert_eq!(handed.iter().filter(|&&h| h == busy).count(), 1, "{handed:?}");
    for &h in handed.iter().filter(|&&h| h != busy) {
        assert!(h * 10 < busy, "an idle worker was handed {h} of {busy} batches: {handed:?}");
    }
    let started = std::time::Instant::now();
    let (a, _, _) = many.finish_recorded(Vec::new(), Accounting::default(), started);
    let (b, _, _) = one.finish_recorded(Vec::new(), Accounting::default(), started);
    let strip = |r: &crate::report::Results| {
        let mut v = serde_json::to_value(r).unwrap();
        v["analysis"] = Value::Null;
        v
    };
    assert_eq!(strip(&a), strip(&b));
}

#[test]
fn frames_in_a_lease_are_decoded_in_place_and_the_lease_comes_back() {
    /// Keeps every frame (as a live ring would hold them), then hands nothing on.
    struct Keeping(Engine, Vec<(FrameInfo, Vec<u8>)>);
    impl FrameSink for Keeping {
        fn inputs(&mut self) -> (&mut u64, &mut Anomalies, &mut Vec<crate::findings::Finding>) {
            self.0.inputs()
        }
        fn process(&mut self, frame: &RawFrame<'_>) {
            self.1.push((frame.info, frame.data.to_vec()));
        }
    }
    let caps = captures();
    let cap = caps.iter().find(|p| p.to_string_lossy().contains("redirect4-1MiB")).unwrap();
    let paths = vec![cap.to_string_lossy().into_owned()];
    let config = Config::default();
    let mut results = Vec::new();
    let mut leases: Vec<Arc<Lease>> = Vec::new();
    for leased in [false, true] {
        let merged = open_inputs(&paths, ReadMode::Buffered).unwrap();
        let mut sink = Keeping(Engine::Many(Box::new(Parallel::new(&config, 2, None))), Vec::new());
        let (inputs, container) = read_inputs(&paths, merged, &config, &mut sink, &mut |_, _| true).unwrap();
        let Keeping(mut engine, frames) = sink;
        assert!(frames.len() > 1000);
        // Stretches of 37 frames, each in one buffer a lease stands for; every fifth frame
        // lies outside its stretch's lease (a retagged VLAN frame does): that one is copied.
        for group in frames.chunks(37) {
            let owner: Arc<Vec<u8>> = Arc::new(group.iter().flat_map(|(_, d)| d.iter().copied()).collect());
            let keep: Arc<dyn Send + Sync> = owner.clone();
            // SAFETY: `owner` is never written and `keep` keeps it alive.
            let lease = Arc::new(unsafe { Lease::new(owner.as_ptr(), owner.len(), keep) });
            let mut at = 0;
            for (k, (info, data)) in group.iter().enumerate() {
                let frame = RawFrame { info: *info, data: &owner[at..at + data.len()] };
                at += data.len();
                match (leased, k % 5 == 4) {
                    (false, _) => engine.process_live(&frame, None),
                    (true, false) => engine.process_live(&frame, Some(&lease)),
                    (true, true) => engine.process_live(&RawFrame { info: *info, data }, Some(&lease)),
                }
            }
            if leased {
                leases.push(lease);
            }
        }
        let Engine::Many(many) = &engine else { unreachable!() };
        let (in_place, copied) = many.handed;
        if leased {
            assert_eq!(in_place + copied, frames.len() as u64);
            assert_eq!(copied, frames.chunks(37).map(|g| g.len() / 5).sum::<usize>() as u64, "only frames outside their lease are copied");
        } else {
            assert_eq!(in_place, 0);
        }
        let mut v = serde_json::to_value(engine.finish(inputs, container, Instant::now())).unwrap();
        for k in ["analysis", "inputs"] {
            v.as_object_mut().unwrap().remove(k);
        }
        results.push(v);
    }
    crate::capture::testutil::assert_same_json("frames copied and leased", &results[0], &results[1]);
    // Every batch that held a lease is spent: each lease is back with its ring alone.
    assert!(!leases.is_empty());
    for l in &mut leases {
        assert!(Arc::get_mut(l).is_some(), "a lease still held after the run");
    }
}

/// `--keys` with `--threads`: one pipeline's result, decrypting every message. The public
/// encrypted captures with their keys; and a multichannel SMB 3.1.1 session whose keys file
/// gives the session key alone, set up on one connection and bound on a second, which the
/// sharder gives another worker: that worker's channel decrypts with the hash the first
/// worker computed (`smb2::keyshare`).
mod keys {
    use super::*;
    use crate::smb2::crypto::{self, Cipher, KeyTable};
    use crate::smb2::records::{command, status};
    use crate::smb2::testutil::{message as msg, negotiate_pair, setup_request, setup_response, transform, write_request};
    use crate::wire::ethernet;
    use std::net::Ipv4Addr;

    const SID: u64 = 0x0000_1234_0000_0077;

    /// One TCP connection's frames, in capture order.
    struct Conn {
        client: (Ipv4Addr, u16),
        server: (Ipv4Addr, u16),
        seq: [u32; 2],
    }

    impl Conn {
        fn new(client: u8, port: u16, server: u8) -> Conn {
            Conn { client: (Ipv4Addr::new(198, 18, 0, client), port), server: (Ipv4Addr::new(198, 18, 1, server), 445), seq: [1000, 9000] }
        }

        fn frame(&mut self, to_server: bool, flags: u8, payload: &[u8]) -> Vec<u8> {
            let d = usize::from(!to_server);
            let end = |(a, port): (Ipv4Addr, u16)| (a, port, ethernet::Address([2, 0, 0, 0, a.octets()[2], a.octets()[3]]));
            let (src, dst) = if to_server { (end(self.client), end(self.server)) } else { (end(self.server), end(self.client)) };
            let f = crate::wire::testutil::tcp_v4_frame(src, dst, (self.seq[d], self.seq[1 - d]), flags, 1, payload);
            self.seq[d] = self.seq[d].wrapping_add(payload.len() as u32 + u32::from(flags & 0x03 != 0));
            f
        }

        fn handshake(&mut self, out: &mut Vec<Vec<u8>>) {
            out.push(self.frame(true, 0x02, &[]));
            out.push(self.frame(false, 0x12, &[]));
            out.push(self.frame(true, 0x10, &[]));
        }

        /// An SMB2 message with its NetBIOS header, in segments of at most 1448 bytes.
        fn send(&mut self, to_server: bool, msg: &[u8], out: &mut Vec<Vec<u8>>) {
            let mut m = vec![0u8; 4];
            crate::smb2::netbios::Repr { kind: 0, length: msg.len() as u32 }.emit((&mut m[..4]).try_into().unwrap());
            m.extend_from_slice(msg);
            for c in m.chunks(1448) {
                out.push(self.frame(to_server, 0x18, c));
            }
        }
    }

    /// A 3.0.2 NEGOTIATE response (§2.2.4, no contexts): a channel that says another dialect
    /// than its session's.
    fn negotiate_302() -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&65u16.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0x0302u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&[0x5a; 16]);
        body.extend_from_slice(&0x4Cu32.to_le_bytes());
        for _ in 0..3 {
            body.extend_from_slice(&(8u32 << 20).to_le_bytes());
        }
        body.extend_from_slice(&[0; 16]);
        body.extend_from_slice(&128u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        msg(command::NEGOTIATE, 0, 0, Some(0), 0, &body)
    }

    /// The capture (pcap, Ethernet) and the keys file's text. `b_says_302`: the second
    /// channel's NEGOTIATE response says 3.0.2, so its own derivation gives other keys: one
    /// pipeline decrypts its messages with the keys that first worked on the session
    /// (`CryptState::learned`), once one has.
    fn multichannel(writes: u64, b_says_302: bool) -> (Vec<u8>, String) {
        let session_key: Vec<u8> = (0x30..0x40).collect();
        let (neg_req, neg_resp) = negotiate_pair();
        let (mut a, mut b) = (Conn::new(1, 50001, 1), Conn::new(2, 50002, 2));
        let mut frames = Vec::new();
        // The session's setup on connection a; its hash (§3.2.5.2) over the NEGOTIATE and
        // the setup's messages but the final response.
        let setup = [
            (true, neg_req.clone()),
            (false, neg_resp.clone()),
            (true, setup_request(1, 0, false, 1)),
            (false, setup_response(1, SID, status::MORE_PROCESSING_REQUIRED, 0x81)),
            (true, setup_request(2, SID, false, 2)),
        ];
        let mut hash = [0u8; 64];
        a.handshake(&mut frames);
        for (to_server, m) in &setup {
            crypto::preauth_update(&mut hash, m);
            a.send(*to_server, m, &mut frames);
        }
        a.send(false, &setup_response(2, SID, 0, 0x82), &mut frames);
        let (c2s, _) = crypto::derive(&session_key, true, Cipher::Aes128Gcm, Some(&hash)).unwrap();
        // Connection b binds to it at once, then both carry encrypted WRITEs.
        b.handshake(&mut frames);
        b.send(true, &neg_req, &mut frames);
        b.send(false, &if b_says_302 { negotiate_302() } else { neg_resp }, &mut frames);
        b.send(true, &setup_request(1, SID, true, 1), &mut frames);
        b.send(false, &setup_response(1, SID, status::MORE_PROCESSING_REQUIRED, 0x81), &mut frames);
        b.send(true, &setup_request(2, SID, true, 2), &mut frames);
        b.send(false, &setup_response(2, SID, 0, 0x82), &mut frames);
        for i in 0..writes {
            let data: Vec<u8> = (0..65536u32).map(|j| (j as u64 * 7 + i) as u8 ^ (j >> 9) as u8).collect();
            // The same data on both channels: each WRITE a duplicate of the other's.
            b.send(true, &transform(Cipher::Aes128Gcm, &c2s, SID, &write_request(10 + i, SID, i * 65536, &data), 2 * i + 1), &mut frames);
            a.send(true, &transform(Cipher::Aes128Gcm, &c2s, SID, &write_request(10 + i, SID, i * 65536, &data), 2 * i + 2), &mut frames);
        }
        let recs: Vec<(u32, u32, &[u8], u32)> =
            frames.iter().enumerate().map(|(i, f)| (1_700_000_000 + (i / 1000) as u32, (i % 1000) as u32 * 1000, &f[..], f.len() as u32)).collect();
        let keys = format!("{},{}\n", hex(&SID.to_le_bytes()), hex(&session_key));
        (crate::capture::testutil::pcap(false, false, 1, &recs), keys)
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn with_keys(text: &str) -> Config {
        Config { keys: Some(Arc::new(KeyTable::parse(text).unwrap())), ..Config::default() }
    }

    #[test]
    fn threads_with_keys_give_one_pipelines_result() {
        let dir = std::env::temp_dir().join(format!("smbwire-par-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for b_says_302 in [false, true] {
            let (capture, keys) = multichannel(40, b_says_302);
            let path = dir.join(format!("multichannel-311-{b_says_302}.pcap"));
            std::fs::write(&path, capture).unwrap();
            let config = with_keys(&keys);
            // One pipeline decrypts every message of both channels (with a channel that says
            // 3.0.2, all but its first, before any message of the session had decrypted): the
            // figures compared mean something.
            let one = run(std::slice::from_ref(&path), &Config { threads: 1, ..config.clone() }, &dir).0;
            let smb2 = &one["smb2"];
            let failed = u64::from(b_says_302);
            assert_eq!((smb2["decrypted_messages"].as_u64(), smb2["decrypt_failed"].as_u64()), (Some(80 - failed), Some(failed)), "{smb2}");
            assert_eq!(one["accounting"]["categories"]["smb_payload"].as_u64(), Some((80 - failed) * 65536));
            same(std::slice::from_ref(&path), &config);
        }
        // The public encrypted captures, with the session key alone and with the directional
        // keys.
        for (file, sid, sk, s2c, c2s) in crate::capture::testutil::ENCRYPTED {
            let p = captures().into_iter().find(|p| p.ends_with(file)).unwrap();
            let directional = (!s2c.is_empty()).then(|| format!("{sid},,{s2c},{c2s}\n"));
            for text in std::iter::once(format!("{sid},{sk}\n")).chain(directional) {
                let c = with_keys(&text);
                let one = run(std::slice::from_ref(&p), &Config { threads: 1, ..c.clone() }, &dir).0;
                assert!(one["smb2"]["decrypted_messages"].as_u64().unwrap() > 0, "{file}");
                assert_eq!(one["smb2"]["decrypt_failed"].as_u64(), Some(0), "{file}");
                same(std::slice::from_ref(&p), &c);
            }
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
