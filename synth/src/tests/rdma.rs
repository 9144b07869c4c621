//! End-to-end checks of SMB Direct captures (RoCEv2 and iWARP), read back with independent
//! minimal readers: RoCEv2 packets (ICRC verified with a bitwise CRC-32) or MPA FPDUs on
//! reassembled TCP (CRC32c verified bitwise, markers stripped), then RDMA Sends, Read
//! Requests/Responses and Writes, then SMB Direct messages and SMB2, and finally the WRITE /
//! READ data found through the buffer descriptors, compared with the returned `Truth`.

use super::{read_pcap, reassemble, segments, Frame};
use crate::*;
use smbwire_dissectors::rdma::{cm, ib, mpa};
use std::collections::{BTreeMap, HashMap, HashSet};

const MIB: u64 = 1 << 20;
const SMALL: u64 = 2 * MIB + 4096 * 3 + 100;

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}
fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().unwrap())
}
fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn le64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// What the RDMA layer carried: Send messages per direction, and the data of RDMA Reads
/// (by the source buffer: token, address) and RDMA Writes (by the target buffer).
#[derive(Default)]
pub(super) struct Ops {
    pub(super) sends: Vec<([u8; 4], [u8; 4], Vec<u8>)>,
    pub(super) read_data: HashMap<(u32, u64), Vec<u8>>,
    pub(super) write_data: HashMap<(u32, u64), Vec<u8>>,
    pub(super) opcodes: BTreeMap<String, u64>,
    pub(super) invalidated: Vec<u32>,
    pub(super) cm: u64,
}

fn op_count(o: &mut Ops, op: u8) {
    *o.opcodes.entry(op.to_string()).or_default() += 1;
}

/// A RoCE frame's sender (IPv4 address; RoCEv1: from its IPv4-mapped source GID) and the
/// packet from the BTH through the ICRC, after checking the encapsulation and the ICRC (the
/// engine's `ib::icrc_rocev1`/`icrc_rocev2`, which mask the variant fields). RoCEv2: IPv4 / UDP 4791. RoCEv1: EtherType 0x8915 / GRH.
fn roce_packet(d: &[u8]) -> ([u8; 4], &[u8]) {
    if d[12..14] == [0x89, 0x15] {
        let grh = &d[14..];
        assert_eq!(grh[0] >> 4, 6, "GRH IPVer");
        assert_eq!(grh[6], 0x1b, "GRH NxtHdr: BTH");
        let end = 40 + u16::from_be_bytes([grh[4], grh[5]]) as usize;
        let pkt = &grh[..end];
        for gid in [&pkt[8..24], &pkt[24..40]] {
            assert_eq!(
                gid[..12],
                [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff],
                "IPv4-mapped GID"
            );
        }
        let crc = ib::icrc_rocev1(&pkt[..end - 4]);
        assert_eq!(crc.to_le_bytes(), pkt[end - 4..], "ICRC");
        return (pkt[20..24].try_into().unwrap(), &pkt[40..]);
    }
    assert_eq!(&d[12..14], &[8, 0]);
    let ip = &d[14..];
    assert_eq!(ip[9], 17, "UDP");
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    let pkt = &ip[..total];
    assert_eq!(u16::from_be_bytes([pkt[22], pkt[23]]), 4791);
    assert_eq!(&pkt[26..28], &[0, 0], "UDP checksum not used");
    let crc = ib::icrc_rocev2(&pkt[..total - 4]);
    assert_eq!(crc.to_le_bytes(), pkt[total - 4..], "ICRC");
    (pkt[12..16].try_into().unwrap(), &pkt[28..])
}

/// RoCE (v1 or v2): every frame is a RoCE packet with a good ICRC.
pub(super) fn roce_ops(frames: &[Frame]) -> Ops {
    // (src ip, dest QP, response?) -> PSN -> (opcode, headers+payload); first PSN seen.
    type Key = ([u8; 4], u32, bool);
    let mut streams: BTreeMap<Key, (u32, BTreeMap<u32, Vec<u8>>)> = BTreeMap::new();
    let mut o = Ops::default();
    let mut seen_psn: HashSet<(Key, u32)> = HashSet::new();
    // CM: client comm ID -> client QPN (REQ), and -> server QPN (REP).
    let (mut req_qpn, mut rep_qpn) = (HashMap::new(), HashMap::new());
    for f in frames {
        let (src, body) = roce_packet(&f.data);
        let bth = ib::Bth::parse(body).unwrap();
        let (op, dest_qp, psn) = (bth.opcode, bth.dest_qp, bth.psn);
        let rest = body[ib::BTH_LEN..body.len() - ib::ICRC_LEN - usize::from(bth.pad_count)].to_vec();
        if op == ib::opcode::UD_SEND_ONLY {
            assert_eq!(dest_qp, ib::QP1, "CM MADs go to QP1");
            assert_eq!(rest.len(), ib::DETH_LEN + cm::MAD_LEN);
            match cm::parse(&rest[ib::DETH_LEN..]).expect("a CM MAD") {
                cm::Message::Request { local_comm_id, local_qpn, .. } => {
                    req_qpn.insert(local_comm_id, local_qpn);
                }
                cm::Message::Reply { remote_comm_id, local_qpn, .. } => {
                    rep_qpn.insert(remote_comm_id, local_qpn);
                }
                cm::Message::Other(_) => {}
            }
            o.cm += 1;
            op_count(&mut o, op);
            continue;
        }
        if op == 0x11 {
            op_count(&mut o, op);
            continue;
        }
        let resp = (0x0d..=0x10).contains(&op);
        let key = (src, dest_qp, resp);
        if !seen_psn.insert((key, psn)) {
            continue; // a resend
        }
        op_count(&mut o, op);
        let mut v = vec![op];
        v.extend_from_slice(&rest);
        let e = streams.entry(key).or_insert((psn, BTreeMap::new()));
        let rel = psn.wrapping_sub(e.0) & 0xff_ffff;
        e.1.insert(rel, v);
    }
    // Walk requester streams in PSN order.
    let mut read_requests = Vec::new(); // (responder ip, requester qp, first psn rel-abs, va, rkey, len)
    for (&(src, qp, resp), (base, pkts)) in &streams {
        if resp {
            continue;
        }
        let mut msg: Vec<u8> = Vec::new();
        let mut write: Option<(u64, u32, Vec<u8>)> = None;
        let mut expect = 0u32;
        for (&rel, p) in pkts {
            let (op, body) = (p[0], &p[1..]);
            if op == 0x0c {
                read_requests.push((
                    src,
                    qp,
                    (base + rel) & 0xff_ffff,
                    be64(body),
                    be32(&body[8..]),
                    be32(&body[12..]),
                ));
                let n = (be32(&body[12..]) as usize)
                    .div_ceil(mtu_of(&streams))
                    .max(1) as u32;
                expect = rel + n;
                continue;
            }
            assert!(rel >= expect, "PSNs in order");
            expect = rel + 1;
            match op {
                0x00 | 0x01 => msg.extend_from_slice(body),
                0x02 | 0x04 => {
                    msg.extend_from_slice(body);
                    let dst = peer_ip(src);
                    o.sends.push((src, dst, std::mem::take(&mut msg)));
                }
                0x16 | 0x17 => {
                    o.invalidated.push(be32(body));
                    msg.extend_from_slice(&body[4..]);
                    o.sends.push((src, peer_ip(src), std::mem::take(&mut msg)));
                }
                0x06 | 0x0a => {
                    let mut w = (be64(body), be32(&body[8..]), body[16..].to_vec());
                    if op == 0x0a {
                        assert_eq!(w.2.len() as u32, be32(&body[12..]));
                        o.write_data.insert((w.1, w.0), std::mem::take(&mut w.2));
                    } else {
                        write = Some(w);
                    }
                }
                0x07 => write.as_mut().unwrap().2.extend_from_slice(body),
                0x08 => {
                    let mut w = write.take().unwrap();
                    w.2.extend_from_slice(body);
                    o.write_data.insert((w.1, w.0), w.2);
                }
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }
    // The QP pairs the CM set up: the peer of each QP.
    let mut peer_qp = HashMap::new();
    for (comm, c) in &req_qpn {
        let s = rep_qpn[comm];
        peer_qp.insert(*c, s);
        peer_qp.insert(s, *c);
    }
    for (req_ip, dest_qp, psn, va, rkey, len) in read_requests {
        // The responses come from the peer to the requester's QP, PSNs from `psn` on.
        let req_qp = peer_qp[&dest_qp];
        let (base, pkts) = streams
            .iter()
            .find(|(k, _)| k.0 == peer_ip(req_ip) && k.1 == req_qp && k.2)
            .map(|(_, v)| v)
            .expect("read responses");
        let n = (len as usize).div_ceil(mtu_of(&streams)).max(1);
        let mut data = Vec::new();
        for i in 0..n as u32 {
            let rel = (psn + i).wrapping_sub(*base) & 0xff_ffff;
            let p = &pkts[&rel];
            let want = match (n == 1, i == 0, i + 1 == n as u32) {
                (true, _, _) => 0x10,
                (false, true, _) => 0x0d,
                (false, _, true) => 0x0f,
                _ => 0x0e,
            };
            assert_eq!(p[0], want);
            let aeth = if want == 0x0e { 0 } else { 4 };
            data.extend_from_slice(&p[1 + aeth..]);
        }
        assert_eq!(data.len() as u32, len);
        o.read_data.insert((rkey, va), data);
    }
    o
}

thread_local!(static MTU: std::cell::Cell<usize> = const { std::cell::Cell::new(4096) });
fn mtu_of<T>(_: &T) -> usize {
    MTU.with(|m| m.get())
}

fn peer_ip(ip: [u8; 4]) -> [u8; 4] {
    if ip == [198, 18, 0, 1] {
        [198, 18, 0, 2]
    } else {
        [198, 18, 0, 1]
    }
}

/// iWARP: TCP streams to/from 5445, MPA frames, then FPDUs.
fn iwarp_ops(frames: &[Frame], markers: bool, crc: bool) -> Ops {
    let (flows, _) = segments(frames);
    let mut o = Ops::default();
    let mut read_requests = Vec::new(); // (sink stag, sink to, len, src stag, src to)
    // (RDMAP opcode, STag) -> the tagged segments: (tagged offset, bytes).
    type Pieces = Vec<(u64, Vec<u8>)>;
    let mut tagged: HashMap<(u8, u32), Pieces> = HashMap::new();
    for (key, segs) in &flows {
        let stream = reassemble(segs);
        if stream.is_empty() {
            continue;
        }
        assert!(stream.starts_with(b"MPA ID Req Frame") || stream.starts_with(b"MPA ID Rep Frame"));
        assert_eq!(
            stream[16] & 0xc0,
            u8::from(markers) << 7 | u8::from(crc) << 6
        );
        assert_eq!(stream[17], 1, "MPA revision 1");
        let pd = u16::from_be_bytes([stream[18], stream[19]]) as usize;
        let marked = &stream[20 + pd..];
        // Strip markers, checking each FPDUPTR lands on an FPDU start.
        let mut fp = Vec::with_capacity(marked.len());
        let mut starts = HashSet::new();
        let mut i = 0;
        let mut next_fpdu = 0usize;
        let mut begins = HashSet::new();
        while i < marked.len() {
            if markers && i % 512 == 0 {
                let ptr = u16::from_be_bytes([marked[i + 2], marked[i + 3]]) as usize;
                assert_eq!(&marked[i..i + 2], &[0, 0]);
                starts.insert(i - ptr);
                i += 4;
                continue;
            }
            if fp.len() == next_fpdu {
                begins.insert(i);
                if markers && i >= 4 && (i - 4) % 512 == 0 {
                    begins.insert(i - 4); // a marker right before the header
                }
                let hi = marked[i];
                // length needs two bytes; a marker cannot split them (never at odd offsets here)
                let len = u16::from_be_bytes([hi, marked[i + 1]]) as usize;
                next_fpdu += 2 + len + (4 - (2 + len) % 4) % 4 + 4;
            }
            fp.push(marked[i]);
            i += 1;
        }
        assert!(
            starts.is_subset(&begins),
            "every FPDUPTR points at an FPDU start"
        );
        let mut off = 0;
        let mut send_msg: HashMap<u32, Vec<u8>> = HashMap::new();
        while off < fp.len() {
            let len = u16::from_be_bytes([fp[off], fp[off + 1]]) as usize;
            let pad = (4 - (2 + len) % 4) % 4;
            let end = off + 2 + len + pad;
            let got = u32::from_le_bytes(fp[end..end + 4].try_into().unwrap());
            if crc && !markers {
                assert_eq!(got, mpa::crc32c(&fp[off..end]), "MPA CRC");
            } else if !crc {
                assert_eq!(got, 0);
            }
            let u = &fp[off + 2..off + 2 + len];
            let (tagged_flag, last, op) = (u[0] & 0x80 != 0, u[0] & 0x40 != 0, u[1] & 0x0f);
            assert_eq!((u[0] & 3, u[1] >> 6), (1, 1), "DDP and RDMAP version 1");
            op_count(&mut o, op);
            if tagged_flag {
                let (stag, to) = (be32(&u[2..]), be64(&u[6..]));
                tagged
                    .entry((op, stag))
                    .or_default()
                    .push((to, u[14..].to_vec()));
                if last && op == 0 {
                    // One RDMA Write message ends: its segments are contiguous from the first.
                    let parts = tagged.remove(&(op, stag)).unwrap();
                    let start = parts[0].0;
                    let mut v = Vec::new();
                    for (t, d) in parts {
                        assert_eq!(t, start + v.len() as u64, "tagged offsets contiguous");
                        v.extend_from_slice(&d);
                    }
                    o.write_data.insert((stag, start), v);
                }
            } else {
                let (inval, qn, msn, mo) =
                    (be32(&u[2..]), be32(&u[6..]), be32(&u[10..]), be32(&u[14..]));
                let body = &u[18..];
                match qn {
                    0 => {
                        let m = send_msg.entry(msn).or_default();
                        assert_eq!(m.len() as u32, mo, "MO");
                        m.extend_from_slice(body);
                        if last {
                            if op == 4 {
                                o.invalidated.push(inval);
                            }
                            o.sends.push((key.0, key.2, send_msg.remove(&msn).unwrap()));
                        }
                    }
                    1 => {
                        assert_eq!((op, last, body.len()), (1, true, 28));
                        read_requests.push((
                            be32(body),
                            be64(&body[4..]),
                            be32(&body[12..]),
                            be32(&body[16..]),
                            be64(&body[20..]),
                        ));
                    }
                    other => panic!("queue {other}"),
                }
            }
            off = end + 4;
        }
    }
    let gather = |parts: &Vec<(u64, Vec<u8>)>, to: u64, len: usize| {
        let mut v = Vec::new();
        for (t, d) in parts {
            if *t >= to && *t < to + len as u64 {
                assert_eq!(*t, to + v.len() as u64, "tagged offsets contiguous");
                v.extend_from_slice(d);
            }
        }
        v
    };
    for (sink, sink_to, len, src, src_to) in read_requests {
        let d = gather(&tagged[&(2, sink)], sink_to, len as usize);
        assert_eq!(d.len() as u32, len);
        o.read_data.insert((src, src_to), d);
    }
    assert!(tagged.keys().all(|k| k.0 == 2), "every RDMA Write ended");
    o
}

/// Per (source, destination) IPv4: the WRITE/READ payloads, in order.
type Payloads = BTreeMap<([u8; 4], [u8; 4]), Vec<Vec<u8>>>;

#[derive(Default, Debug)]
pub(super) struct Smbd {
    pub(super) negotiate_requests: u64,
    pub(super) negotiate_responses: u64,
    pub(super) data_messages: u64,
    pub(super) data_length: u64,
    smb2: u64,
    pub(super) writes: u64,
    pub(super) read_responses: u64,
    pub(super) payloads: Payloads,
}

/// SMB Direct messages, reassembled SMB2 messages, and the data behind the descriptors.
fn smbd(o: &Ops) -> Smbd {
    // Directions are read one after the other, so READ requests are collected first.
    let first = smbd_pass(o, &HashMap::new(), true).1;
    smbd_pass(o, &first, false).0
}

type ReadDescs = HashMap<u64, Vec<(u64, u32, u32)>>;

fn smbd_pass(o: &Ops, reads: &ReadDescs, collect: bool) -> (Smbd, ReadDescs) {
    let mut s = Smbd::default();
    let mut partial: HashMap<([u8; 4], [u8; 4]), Vec<u8>> = HashMap::new();
    let mut read_descs: ReadDescs = HashMap::new();
    for (src, dst, m) in &o.sends {
        match m.len() {
            20 => {
                s.negotiate_requests += 1;
                continue;
            }
            32 if le16(m, 4) == 0x0100 => {
                s.negotiate_responses += 1;
                continue;
            }
            _ => {}
        }
        assert!(le16(m, 0) >= 1, "CreditsRequested");
        let (remaining, doff, dlen) = (le32(m, 8), le32(m, 12) as usize, le32(m, 16) as usize);
        assert_eq!(doff, 24);
        assert_eq!(doff + dlen, m.len());
        s.data_messages += 1;
        s.data_length += dlen as u64;
        let buf = partial.entry((*src, *dst)).or_default();
        buf.extend_from_slice(&m[24..]);
        if remaining > 0 {
            continue;
        }
        let msg = std::mem::take(buf);
        assert_eq!(&msg[..4], b"\xfeSMB");
        s.smb2 += 1;
        let (cmd, resp, mid) = (le16(&msg, 12), le32(&msg, 16) & 1 == 1, le64(&msg, 24));
        let descs = |off: usize, len: usize| -> Vec<(u64, u32, u32)> {
            msg[off..off + len]
                .chunks(16)
                .map(|c| (le64(c, 0), le32(c, 8), le32(c, 12)))
                .collect()
        };
        match (cmd, resp) {
            (9, false) if !collect => {
                assert_eq!(
                    (le16(&msg, 66), le32(&msg, 68)),
                    (0, 0),
                    "DataOffset, Length"
                );
                assert!([1, 2].contains(&le32(&msg, 96)), "Channel RDMA");
                let total = le32(&msg, 100);
                let d = descs(le16(&msg, 104) as usize, le16(&msg, 106) as usize);
                let mut data = Vec::new();
                for (va, tok, len) in d {
                    let piece = &o.read_data[&(tok, va)];
                    assert_eq!(piece.len() as u32, len);
                    data.extend_from_slice(piece);
                }
                assert_eq!(data.len() as u32, total);
                s.writes += 1;
                s.payloads.entry((*src, *dst)).or_default().push(data);
            }
            (8, false) => {
                assert!([1, 2].contains(&le32(&msg, 100)));
                read_descs.insert(
                    mid,
                    descs(le16(&msg, 108) as usize, le16(&msg, 110) as usize),
                );
            }
            (8, true) if !collect => {
                assert_eq!(le32(&msg, 68), 0, "DataLength");
                let remaining = le32(&msg, 72);
                let mut data = Vec::new();
                for (va, tok, len) in &reads[&mid] {
                    let piece = &o.write_data[&(*tok, *va)];
                    assert_eq!(piece.len() as u32, *len);
                    data.extend_from_slice(piece);
                }
                assert_eq!(data.len() as u32, remaining);
                s.read_responses += 1;
                s.payloads.entry((*src, *dst)).or_default().push(data);
            }
            _ => {}
        }
    }
    assert!(
        partial.values().all(|b| b.is_empty()),
        "no unfinished fragments"
    );
    (s, read_descs)
}

pub(super) fn gen(json: &str) -> (Vec<u8>, Truth, Vec<Frame>) {
    let spec = Spec::from_json(json).unwrap();
    let mut buf = Vec::new();
    let truth = generate_to(&spec, pcap::PcapWriter::new(&mut buf).unwrap()).unwrap();
    let mut again = Vec::new();
    let t2 = generate_to(&spec, pcap::PcapWriter::new(&mut again).unwrap()).unwrap();
    assert!(buf == again, "deterministic bytes");
    assert_eq!(
        serde_json::to_string(&t2).unwrap(),
        serde_json::to_string(&truth).unwrap()
    );
    let frames = read_pcap(&buf);
    assert_eq!(frames.len() as u64, truth.capture.frames);
    (buf, truth, frames)
}

pub(super) fn check(json: &str) -> (Truth, Ops, Smbd) {
    let spec = Spec::from_json(json).unwrap();
    let (_, t, frames) = gen(json);
    MTU.with(|m| m.set(spec.mtu as usize));
    let o = if spec.transport.starts_with("roce") {
        roce_ops(&frames)
    } else {
        iwarp_ops(&frames, spec.mpa_markers, spec.mpa_crc)
    };
    let s = smbd(&o);
    let r = t.rdma.as_ref().unwrap();
    assert_eq!(s.negotiate_requests, r.smbd_negotiate_requests);
    assert_eq!(s.negotiate_responses, r.smbd_negotiate_responses);
    assert_eq!(r.smbd_negotiate_requests, r.connections);
    assert_eq!(s.data_messages, r.smbd_data_messages);
    assert_eq!(s.data_length, r.smbd_data_length);
    assert_eq!(s.smb2, t.smb2.messages);
    assert_eq!(s.writes, t.smb2.write_requests);
    assert_eq!(s.read_responses, t.smb2.read_responses);
    if spec.loss == 0.0 {
        assert_eq!(o.opcodes, r.opcodes);
    }
    assert_eq!(o.invalidated.len() as u64, r.send_with_invalidate);
    // Per edge: count, bytes and distinct content as in the truth.
    for e in &t.edges {
        let ip = |n: &str| {
            if n == "owner" {
                [198, 18, 0, 1]
            } else {
                [198, 18, 0, 2]
            }
        };
        let p = &s.payloads[&(ip(&e.src), ip(&e.dst))];
        assert_eq!(p.len() as u64, e.sends);
        assert_eq!(
            p.iter().map(|x| x.len() as u64).sum::<u64>(),
            e.payload_bytes
        );
        let mut distinct: HashSet<&[u8]> = HashSet::new();
        let unique: u64 = p
            .iter()
            .flat_map(|x| x.chunks(4096))
            .filter(|b| !b.iter().all(|&v| v == b[0]) && distinct.insert(b))
            .map(|b| b.len() as u64)
            .sum();
        assert_eq!(unique, e.unique_bytes);
    }
    (t, o, s)
}

pub(super) fn spec(scenario: &str, extra: &str) -> String {
    format!(r#"{{"scenario":"{scenario}","bytes":{SMALL},"io_size":{MIB},"seed":3{extra}}}"#)
}

#[test]
fn roce_scenarios_carry_the_table() {
    for (name, mtu) in [
        ("mirror2", 4096),
        ("nested4", 1024),
        ("redirect4", 4096),
        ("read-nonowner", 1024),
        ("read-owner", 4096),
    ] {
        let (t, o, _) = check(&spec(
            name,
            &format!(r#","transport":"rocev2","mtu":{mtu}"#),
        ));
        let r = t.rdma.unwrap();
        // REQ, REP, RTU, DREQ, DREP per connection.
        assert_eq!(o.cm, 5 * r.connections);
        assert_eq!(r.rdma_read_bytes, t.smb2.write_data_bytes);
        assert_eq!(r.rdma_write_bytes, t.smb2.read_data_bytes);
        let data_packets: u64 = ["13", "14", "15", "16", "6", "7", "8", "10"]
            .iter()
            .map(|k| r.opcodes.get(*k).copied().unwrap_or(0))
            .sum();
        let expect: u64 = (0..t.ios)
            .map(|i| SMALL.min((i + 1) * MIB) - i * MIB)
            .map(|l| l.div_ceil(mtu))
            .sum::<u64>()
            * t.edges.iter().map(|e| e.sends / t.ios.max(1)).sum::<u64>();
        assert_eq!(data_packets, expect, "{name}: packets at MTU {mtu}");
    }
}

#[test]
fn iwarp_scenarios_carry_the_table() {
    for (name, extra) in [
        ("six", ""),
        ("redirect4", r#","mpa_markers":true"#),
        (
            "read-nonowner",
            r#","mpa_crc":false,"mpa_private_data":false"#,
        ),
        ("read-nonowner", r#","mpa_markers":true,"descriptors":3"#),
    ] {
        let (t, _, _) = check(&spec(name, &format!(r#","transport":"iwarp"{extra}"#)));
        let r = t.rdma.unwrap();
        assert_eq!(r.rdma_read_bytes, t.smb2.write_data_bytes);
        assert_eq!(r.rdma_write_bytes, t.smb2.read_data_bytes);
    }
}

#[test]
fn fragmentation_invalidate_descriptors_multichannel() {
    for tr in ["rocev2", "iwarp"] {
        let (t, o, _) = check(&spec(
            "redirect4",
            &format!(
                r#","transport":"{tr}","max_send_size":128,"send_with_invalidate":true,"descriptors":2,"qps":2"#
            ),
        ));
        let r = t.rdma.unwrap();
        assert!(r.smbd_fragmented_messages > 0);
        assert_eq!(r.connections, 4);
        assert_eq!(r.send_with_invalidate, t.smb2.write_requests);
        assert_eq!(r.rdma_reads, 2 * t.smb2.write_requests);
        assert_eq!(o.invalidated.len() as u64, t.smb2.write_requests);
    }
}

#[test]
fn loss_retransmit_repairs_and_drop_leaves_a_gap() {
    let (t, _, _) = check(&spec(
        "nested4",
        r#","transport":"rocev2","mtu":1024,"loss":0.01"#,
    ));
    let r = t.rdma.unwrap();
    assert!(r.lost_packets > 0 && r.dropped_packets == 0);
    let (_, t2, frames) = gen(&spec("nested4", r#","transport":"rocev2","mtu":1024"#));
    assert_eq!(
        t.capture.frames, t2.capture.frames,
        "every lost packet is resent once"
    );
    let _ = frames;

    let (_, d, frames) = gen(&spec(
        "nested4",
        r#","transport":"rocev2","mtu":1024,"loss":0.01,"loss_mode":"drop"}"#.trim_end_matches('}'),
    ));
    let r = d.rdma.as_ref().unwrap();
    assert!(r.dropped_packets > 0);
    assert_eq!(d.capture.frames + r.dropped_packets, t2.capture.frames);
    let bytes: u64 = frames.iter().map(|f| f.data.len() as u64).sum();
    let full: u64 = read_pcap(&gen(&spec("nested4", r#","transport":"rocev2","mtu":1024"#)).0)
        .iter()
        .map(|f| f.data.len() as u64)
        .sum();
    assert!(full - bytes >= r.dropped_bytes);

    let (t, _, _) = check(&spec("mirror2", r#","transport":"iwarp","loss":0.02"#));
    assert!(t.rdma.unwrap().lost_packets > 0);
    let (_, d, _) = gen(&spec(
        "mirror2",
        r#","transport":"iwarp","loss":0.02,"loss_mode":"drop""#,
    ));
    assert!(d.rdma.unwrap().dropped_bytes > 0);
}

#[test]
fn mirror_noise_keeps_rdma_payload() {
    let (_, t, frames) = gen(&spec(
        "mirror2",
        r#","transport":"rocev2","mirror_dup":true"#,
    ));
    let (_, c, _) = gen(&spec("mirror2", r#","transport":"rocev2""#));
    assert_eq!(t.capture.frames, 2 * c.capture.frames);
    let single: Vec<Frame> = frames.into_iter().step_by(2).collect();
    let s = smbd(&roce_ops(&single));
    assert_eq!(s.writes, c.smb2.write_requests);
    check(&spec(
        "nested4",
        r#","transport":"iwarp","retransmit":0.01,"reorder":0.01"#,
    ));
}
