//! A synthetic SMB Direct exchange over RoCEv2 (built here from the wire `emit`s): negotiate,
//! an SMB2 WRITE pulled by RDMA Read over two descriptors, an SMB2 READ pushed by RDMA Write.
//! Loss, reordering and duplication of its packets never change a linked payload's digest;
//! loss leaves the payload unhashed and reported.

use super::records::{DataTransfer, NegotiateRequest, NegotiateResponse};
use crate::accounting::Accounting;
use crate::anomaly::Anomalies;
use crate::payload::send::{SendKind, SendRecord, Transport};
use crate::frame::{FrameCtx, FrameRef};
use crate::payload::hash::PayloadHasher;
use crate::rdma::ib::{self, opcode, Reth};
use crate::rdma::RdmaState;
use crate::smb2::state::SmbState;
use crate::smb2::{Parts, PayloadSink};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr};

const C: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));
const S: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2));
const QP_C: u32 = 0x11;
const QP_S: u32 = 0x22;
const PMTU: usize = 1024;

/// Sends, and the header frame each names (`SendRecord::header_frame`).
#[derive(Default)]
struct Sink(Vec<SendRecord>, Vec<Option<FrameRef>>);
impl PayloadSink for Sink {
    fn send(&mut self, rec: SendRecord) {
        self.1.push(rec.header_frame);
        self.0.push(rec)
    }
    fn complete(&mut self, _: u64, _: u64, _: u64) {}
}

#[derive(Clone, Debug)]
struct Pkt {
    src: IpAddr,
    dst: IpAddr,
    bytes: Vec<u8>,
    /// Carries RDMA data of transfer 0 (WRITE) or 1 (READ).
    data_of: Option<usize>,
}

fn smb2_header(command: u16, response: bool, message_id: u64) -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\xfeSMB");
    h[4..6].copy_from_slice(&64u16.to_le_bytes());
    h[12..14].copy_from_slice(&command.to_le_bytes());
    h[16..20].copy_from_slice(&u32::from(response).to_le_bytes());
    h[24..32].copy_from_slice(&message_id.to_le_bytes());
    h[36..40].copy_from_slice(&7u32.to_le_bytes());
    h[40..48].copy_from_slice(&0x55u64.to_le_bytes());
    h
}

fn descriptors(d: &[(u64, u32, u32)]) -> Vec<u8> {
    let mut v = Vec::new();
    for &(offset, token, length) in d {
        v.extend_from_slice(&offset.to_le_bytes());
        v.extend_from_slice(&token.to_le_bytes());
        v.extend_from_slice(&length.to_le_bytes());
    }
    v
}

/// WRITE (§2.2.21) / READ (§2.2.19) request with Channel RDMA_V1 and its descriptors.
fn rdma_request(write: bool, message_id: u64, offset: u64, d: &[(u64, u32, u32)]) -> Vec<u8> {
    let mut m = smb2_header(if write { 9 } else { 8 }, false, message_id);
    let desc = descriptors(d);
    let total: u32 = d.iter().map(|x| x.2).sum();
    let mut b = vec![0u8; 48];
    b[0..2].copy_from_slice(&49u16.to_le_bytes());
    b[8..16].copy_from_slice(&offset.to_le_bytes());
    b[16..32].copy_from_slice(&[0xab; 16]);
    if write {
        b[32..36].copy_from_slice(&1u32.to_le_bytes());
        b[36..40].copy_from_slice(&total.to_le_bytes());
        b[40..42].copy_from_slice(&112u16.to_le_bytes());
        b[42..44].copy_from_slice(&(desc.len() as u16).to_le_bytes());
    } else {
        b[4..8].copy_from_slice(&total.to_le_bytes());
        b[36..40].copy_from_slice(&1u32.to_le_bytes());
        b[44..46].copy_from_slice(&112u16.to_le_bytes());
        b[46..48].copy_from_slice(&(desc.len() as u16).to_le_bytes());
    }
    m.extend_from_slice(&b);
    m.extend_from_slice(&desc);
    m
}

fn response(read: bool, message_id: u64, remaining: u32) -> Vec<u8> {
    let mut m = smb2_header(if read { 8 } else { 9 }, true, message_id);
    let mut b = vec![0u8; 17];
    b[0..2].copy_from_slice(&17u16.to_le_bytes());
    if read {
        b[8..12].copy_from_slice(&remaining.to_le_bytes());
    } else {
        b[4..8].copy_from_slice(&remaining.to_le_bytes());
    }
    m.extend_from_slice(&b);
    m
}

fn send(src: IpAddr, dst: IpAddr, qp: u32, psn: u32, msg: &[u8]) -> Pkt {
    Pkt { src, dst, bytes: ib::emit(opcode::SEND_ONLY, qp, psn, true, &[], msg), data_of: None }
}

fn data_msg(smb2: &[u8]) -> Vec<u8> {
    DataTransfer { credits_requested: 10, credits_granted: 10, flags: 0, remaining_data_length: 0, data_offset: 24, data_length: 0 }.emit(smb2)
}

fn reth(va: u64, r_key: u32, len: u32) -> Vec<u8> {
    let mut v = Vec::new();
    Reth { va, r_key, dma_length: len }.emit(&mut v);
    v
}

/// Packets of one RDMA message of `data` (Read Response or Write), PSNs from `psn`.
#[allow(clippy::too_many_arguments)] // the header fields of the message, as the test names them
fn rdma_message(write: bool, src: IpAddr, dst: IpAddr, qp: u32, psn: u32, va: u64, key: u32, data: &[u8], of: usize) -> Vec<Pkt> {
    let chunks: Vec<&[u8]> = data.chunks(PMTU).collect();
    let n = chunks.len();
    let aeth = [0u8; 4];
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (first, last) = (i == 0, i + 1 == n);
            let (op, ext) = match (write, first, last) {
                (true, true, true) => (opcode::RDMA_WRITE_ONLY, reth(va, key, data.len() as u32)),
                (true, true, false) => (opcode::RDMA_WRITE_FIRST, reth(va, key, data.len() as u32)),
                (true, false, false) => (opcode::RDMA_WRITE_MIDDLE, vec![]),
                (true, false, true) => (opcode::RDMA_WRITE_LAST, vec![]),
                (false, true, true) => (opcode::RDMA_READ_RESPONSE_ONLY, aeth.to_vec()),
                (false, true, false) => (opcode::RDMA_READ_RESPONSE_FIRST, aeth.to_vec()),
                (false, false, false) => (opcode::RDMA_READ_RESPONSE_MIDDLE, vec![]),
                (false, false, true) => (opcode::RDMA_READ_RESPONSE_LAST, aeth.to_vec()),
            };
            Pkt { src, dst, bytes: ib::emit(op, qp, psn + i as u32, last, &ext, c), data_of: Some(of) }
        })
        .collect()
}

struct Exchange {
    pkts: Vec<Pkt>,
    payloads: [Vec<u8>; 2],
}

fn exchange(seed: u8) -> Exchange {
    exchange_wrapped(seed, &|m: &[u8], _| m.to_vec())
}

/// The exchange with every SMB2 message passed through `wrap` (message, nonce) first, e.g.
/// encrypted into a TRANSFORM message.
fn exchange_wrapped(seed: u8, wrap: &dyn Fn(&[u8], u8) -> Vec<u8>) -> Exchange {
    let w1: Vec<u8> = (0..5000u32).map(|i| (i as u8).wrapping_mul(seed | 1)).collect();
    let w2: Vec<u8> = (0..3000u32).map(|i| (i as u8) ^ seed).collect();
    let rd: Vec<u8> = (0..6000u32).map(|i| ((i / 7) as u8).wrapping_add(seed)).collect();
    let mut pkts = Vec::new();
    let (mut cpsn, mut spsn) = (100u32, 0x00ff_fff0u32); // the server's PSNs wrap
    let neg = NegotiateRequest { min_version: 0x100, max_version: 0x100, credits_requested: 255, preferred_send_size: 1364, max_receive_size: 8192, max_fragmented_size: 1 << 20 };
    pkts.push(send(C, S, QP_S, cpsn, &neg.emit()));
    cpsn += 1;
    let resp = NegotiateResponse {
        min_version: 0x100, max_version: 0x100, negotiated_version: 0x100, credits_requested: 255, credits_granted: 255,
        status: 0, max_read_write_size: 1 << 20, preferred_send_size: 1364, max_receive_size: 8192, max_fragmented_size: 1 << 20,
    };
    pkts.push(send(S, C, QP_C, spsn, &resp.emit()));
    spsn += 1;
    // WRITE: two descriptors, pulled with two RDMA Reads.
    let wreq = rdma_request(true, 5, 0x10000, &[(0x1000, 0xaaa, 5000), (0x9000, 0xbbb, 3000)]);
    pkts.push(send(C, S, QP_S, cpsn, &data_msg(&wrap(&wreq, 1))));
    cpsn += 1;
    for (va, key, data) in [(0x1000u64, 0xaaa, &w1), (0x9000, 0xbbb, &w2)] {
        let mask = 0xff_ffff;
        pkts.push(Pkt { src: S, dst: C, bytes: ib::emit(opcode::RDMA_READ_REQUEST, QP_C, spsn & mask, true, &reth(va, key, data.len() as u32), &[]), data_of: None });
        pkts.extend(rdma_message(false, C, S, QP_S, spsn & mask, va, key, data, 0).into_iter().map(|mut p| {
            let psn = ib::Packet::new_checked(&p.bytes[..]).unwrap().psn() & mask;
            p.bytes[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
            p
        }));
        spsn = (spsn + data.len().div_ceil(PMTU) as u32) & mask;
    }
    pkts.push(send(S, C, QP_C, spsn, &data_msg(&wrap(&response(false, 5, 8000), 2))));
    spsn += 1;
    // READ: pushed with RDMA Write, then the response.
    let rreq = rdma_request(false, 6, 0x40000, &[(0x20000, 0xccc, 6000)]);
    pkts.push(send(C, S, QP_S, cpsn, &data_msg(&wrap(&rreq, 3))));
    pkts.extend(rdma_message(true, S, C, QP_C, spsn, 0x20000, 0xccc, &rd, 1));
    spsn += rd.len().div_ceil(PMTU) as u32;
    pkts.push(send(S, C, QP_C, spsn, &data_msg(&wrap(&response(true, 6, 6000), 4))));
    let mut wpay = w1.clone();
    wpay.extend_from_slice(&w2);
    Exchange { pkts, payloads: [wpay, rd] }
}

struct Outcome {
    sends: Vec<SendRecord>,
    headers: Vec<Option<FrameRef>>,
    rdma: crate::rdma::RdmaStats,
    accounted: u64,
    fed: u64,
}

fn run(pkts: &[Pkt]) -> Outcome {
    run_with(pkts, SmbState::new())
}

fn run_with(pkts: &[Pkt], mut smb: SmbState) -> Outcome {
    let mut st = RdmaState::new();
    let (mut an, mut acct, mut sink) = (Anomalies::default(), Accounting::default(), Sink::default());
    let mut fed = 0;
    {
        let mut p = Parts { anomalies: &mut an, accounting: &mut acct, smb: &mut smb, sink: &mut sink };
        for (i, k) in pkts.iter().enumerate() {
            let ctx = FrameCtx { frame: FrameRef { file: 0, number: i as u64 + 1 }, ts_ns: i as u64 * 1000, seq: 0 };
            fed += k.bytes.len() as u64;
            st.roce(k.src, k.dst, &k.bytes, &ctx, &mut p);
        }
        st.finish(&FrameCtx::default(), &mut p);
    }
    Outcome { sends: sink.0, headers: sink.1, rdma: st.stats, accounted: acct.total(), fed }
}

fn digest(b: &[u8]) -> crate::payload::PayloadDigest {
    let mut h = PayloadHasher::new();
    h.update(b);
    h.finish()
}

#[test]
fn exchange_in_order_links_both_payloads() {
    let x = exchange(3);
    let o = run(&x.pkts);
    assert_eq!(o.accounted, o.fed);
    assert_eq!(o.sends.len(), 2, "{:?}", o.rdma);
    let w = &o.sends[0];
    assert_eq!((w.kind, w.transport, w.message_id, w.offset, w.src, w.dst), (SendKind::Write, Transport::Rdma, 5, 0x10000, C, S));
    assert_eq!(w.digest, digest(&x.payloads[0]));
    let r = &o.sends[1];
    assert_eq!((r.kind, r.message_id, r.offset, r.src, r.dst), (SendKind::Read, 6, 0x40000, S, C));
    assert_eq!(r.digest, digest(&x.payloads[1]));
    assert_eq!(w.conn, r.conn);
    assert_eq!((o.rdma.smbdirect.negotiate_requests, o.rdma.smbdirect.negotiate_responses, o.rdma.smbdirect.data_messages), (1, 1, 4));
    assert_eq!((o.rdma.linked_transfers, o.rdma.gaps, o.rdma.retransmitted_bytes, o.rdma.unlinked_bytes), (2, 0, 0, 0));
}

/// Evidence over RDMA names the Send that carried the SMB2 header (the WRITE request; the READ
/// response, which follows the RDMA Writes) as well as the first and last RDMA data frames.
#[test]
fn header_frames_are_the_request_and_response_sends() {
    let x = exchange(5);
    let o = run(&x.pkts);
    assert_eq!(o.sends.len(), 2);
    let frame = |i: usize| FrameRef { file: 0, number: i as u64 + 1 };
    let is_send_of = |i: usize, msg: &[u8]| x.pkts[i].data_of.is_none() && x.pkts[i].bytes.windows(msg.len()).any(|w| w == msg);
    let wreq = rdma_request(true, 5, 0x10000, &[(0x1000, 0xaaa, 5000), (0x9000, 0xbbb, 3000)]);
    let rresp = response(true, 6, 6000);
    let w_hdr = (0..x.pkts.len()).find(|&i| is_send_of(i, &wreq)).unwrap();
    let r_hdr = (0..x.pkts.len()).find(|&i| is_send_of(i, &rresp)).unwrap();
    for (k, hdr) in [(0usize, w_hdr), (1, r_hdr)] {
        let data: Vec<usize> = (0..x.pkts.len()).filter(|&i| x.pkts[i].data_of == Some(k)).collect();
        let s = &o.sends[k];
        assert_eq!(o.headers[k], Some(frame(hdr)), "{:?}", s.kind);
        assert_eq!((s.first_frame, s.last_frame), (frame(data[0]), frame(*data.last().unwrap())));
    }
    // The WRITE's header comes before its data, the READ's after.
    assert!(o.headers[0].unwrap() < o.sends[0].first_frame && o.headers[1].unwrap() > o.sends[1].last_frame);
    // No response: the READ is still handed over at the end, whole, without a header frame.
    let o = run(&x.pkts[..x.pkts.len() - 1]);
    assert_eq!((o.sends.len(), o.headers[1]), (2, None));
    assert_eq!(o.sends[1].digest, digest(&x.payloads[1]));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn loss_reorder_duplication_never_change_digests(
        seed in any::<u8>(),
        swaps in proptest::collection::vec(any::<proptest::sample::Index>(), 0..12),
        dups in proptest::collection::vec(any::<proptest::sample::Index>(), 0..6),
        lose in proptest::option::of(any::<proptest::sample::Index>()),
    ) {
        let x = exchange(seed);
        // The negotiate stays first: it is how the queue pairs are recognised without CM.
        let (head, tail) = x.pkts.split_at(2);
        let mut rest = tail.to_vec();
        for s in &swaps {
            let i = s.index(rest.len() - 1);
            rest.swap(i, i + 1);
        }
        for d in &dups {
            let k = rest[d.index(rest.len())].clone();
            let at = d.index(rest.len() + 1);
            rest.insert(at, k);
        }
        let mut lost_of = None;
        if let Some(l) = lose {
            let data: Vec<usize> = (0..rest.len()).filter(|&i| rest[i].data_of.is_some()).collect();
            let i = data[l.index(data.len())];
            let victim = rest[i].clone();
            lost_of = victim.data_of;
            rest.retain(|p| p.bytes != victim.bytes);
        }
        let mut pkts = head.to_vec();
        pkts.extend(rest);
        let o = run(&pkts);
        prop_assert_eq!(o.accounted, o.fed);
        for s in &o.sends {
            let k = if s.kind == SendKind::Write { 0 } else { 1 };
            prop_assert_eq!(&s.digest, &digest(&x.payloads[k]));
            prop_assert!(Some(k) != lost_of, "a payload with a lost packet was hashed");
        }
        match lost_of {
            None => prop_assert_eq!(o.sends.len(), 2, "{:?} {:?}", o.rdma, pkts.iter().map(|p| p.bytes[0]).collect::<Vec<_>>()),
            Some(_) => {
                prop_assert_eq!(o.sends.len(), 1);
                // Losing a FIRST packet leaves the rest unplaceable: the transfer is then "unseen".
                prop_assert!(o.rdma.gaps > 0 && o.rdma.incomplete_transfers + o.rdma.unseen_transfers == 1, "{:?}", o.rdma);
            }
        }
    }

    /// Arbitrary bytes as RoCE packets and as SMB Direct messages: no panic, every byte accounted.
    #[test]
    fn arbitrary_packets_balance(pkts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 0..20)) {
        let x = exchange(1);
        let mut all: Vec<Pkt> = x.pkts[..3].to_vec();
        for b in pkts {
            all.push(Pkt { src: C, dst: S, bytes: b.clone(), data_of: None });
            // The same bytes as the payload of a Send on the SMB Direct QP.
            all.push(send(C, S, QP_S, 0, &b));
        }
        let o = run(&all);
        prop_assert_eq!(o.accounted, o.fed);
    }
}

/// SMB3 encryption over SMB Direct: the WRITE/READ requests and responses are TRANSFORM
/// messages; with the session's keys (`--keys`) their RDMA descriptors are read from the
/// decrypted plaintext, so the RDMA transfers are linked and hashed as in the plain exchange;
/// without keys nothing is linked.
#[test]
fn encrypted_requests_over_smb_direct_link_their_rdma_transfers_with_keys() {
    use crate::smb2::crypto::{self, Cipher, KeyEntry, KeyTable};
    let key = [0x31u8; 16];
    let wrap = |m: &[u8], nonce: u8| {
        let mut h = vec![0u8; crypto::TRANSFORM_LEN];
        h[0..4].copy_from_slice(&[0xFD, b'S', b'M', b'B']);
        h[20..32].copy_from_slice(&[nonce; 12]);
        h[36..40].copy_from_slice(&(m.len() as u32).to_le_bytes());
        h[42] = 1;
        h[44..52].copy_from_slice(&0x55u64.to_le_bytes());
        let mut body = m.to_vec();
        let tag = crypto::encrypt(Cipher::Aes128Gcm, &key, &h, &mut body).unwrap();
        h[4..20].copy_from_slice(&tag);
        h.extend_from_slice(&body);
        h
    };
    let x = exchange_wrapped(5, &wrap);
    let mut t = KeyTable::default();
    t.insert(0x55, KeyEntry { session_key: None, server_to_client: Some(key.to_vec()), client_to_server: Some(key.to_vec()) });
    let o = run_with(&x.pkts, SmbState::new().with_keys(std::sync::Arc::new(t)));
    assert_eq!(o.accounted, o.fed);
    assert_eq!(o.sends.len(), 2, "{:?}", o.rdma);
    assert_eq!((o.sends[0].kind, o.sends[0].transport, o.sends[0].message_id), (SendKind::Write, Transport::Rdma, 5));
    assert_eq!(o.sends[0].digest, digest(&x.payloads[0]));
    assert_eq!(o.sends[1].digest, digest(&x.payloads[1]));
    assert_eq!((o.rdma.linked_transfers, o.rdma.unlinked_bytes), (2, 0));
    // No keys: the requests stay encrypted, nothing is linked.
    let o = run(&x.pkts);
    assert_eq!(o.accounted, o.fed);
    assert!(o.sends.is_empty());
    assert_eq!(o.rdma.linked_transfers, 0);
}

/// A data transfer message announcing more remaining data than `MAX_FRAGMENTED_SIZE` is not
/// reassembled (`smbdirect.fragmented_too_large`): nothing is buffered for it, its bytes are
/// `smb_unparsed`, and the next whole message still decodes.
#[test]
fn fragmented_message_past_the_cap_is_not_buffered() {
    use super::{SmbdConn, MAX_FRAGMENTED_SIZE};
    let mut smb = SmbState::new();
    let (mut an, mut acct, mut sink) = (Anomalies::default(), Accounting::default(), Sink::default());
    let mut c = crate::rdma::RdmaStats::default();
    let mut conn = SmbdConn::new(1, [(C, 1), (S, 2)], Some(0));
    let mut p = Parts { anomalies: &mut an, accounting: &mut acct, smb: &mut smb, sink: &mut sink };
    let ctx = FrameCtx::default();
    let head = smb2_header(9, false, 1);
    let first = DataTransfer { credits_requested: 1, credits_granted: 1, flags: 0, remaining_data_length: MAX_FRAGMENTED_SIZE as u32, data_offset: 24, data_length: 0 }.emit(&head);
    conn.on_send(0, &first, &ctx, &mut p, &mut c);
    assert_eq!(p.anomalies.get("smbdirect.fragmented_too_large"), 1);
    assert!(conn.dirs[0].reassembly.is_empty() && conn.dirs[0].reassembly.capacity() == 0);
    assert_eq!(p.accounting.get(crate::accounting::cat::SMB_UNPARSED), head.len() as u64);
    conn.on_send(1, &data_msg(&response(false, 5, 0)), &ctx, &mut p, &mut c);
    assert_eq!(p.smb.stats.commands.get("WRITE.response"), Some(&1));
}
