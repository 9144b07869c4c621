//! Property tests of the iWARP parsers, like the TCP ones: `mpa::Frame::parse` on arbitrary
//! bytes, and `IwarpStream` (both directions of one connection) fed random bytes or a plausible
//! MPA/DDP/RDMAP stream (with and without markers, CRC on and off) cut at random points, with
//! random byte flips, gaps and early closes. Nothing may panic, and every byte handed to the
//! streams must land in exactly one accounting category.

use crate::rdma::ddp::{self, Buffer};
use crate::rdma::iwarp::IwarpStream;
use crate::rdma::{mpa, RdmaState};
use crate::accounting::Accounting;
use crate::anomaly::Anomalies;
use crate::context::Shared;
use crate::dedupe::{Dedupe, DedupeConfig, Topology};
use crate::frame::{FrameCtx, FrameRef};
use crate::smb2::state::SmbState;
use crate::smbdirect::records::{DataTransfer, NegotiateRequest, NegotiateResponse};
use crate::tcp::StreamConsumer;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr};

const C: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 50000);
const S: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)), 5445);

type Run = Shared<SmbState, Dedupe, RdmaState>;

fn shared() -> Run {
    Shared {
        anomalies: Anomalies::default(),
        accounting: Accounting::default(),
        smb: SmbState::new(),
        dedupe: Dedupe::new(DedupeConfig::default(), Topology::default(), None),
        rdma: RdmaState::new(),
    }
}

/// One event of a direction's stream.
#[derive(Debug, Clone)]
enum Ev {
    Data(usize, Vec<u8>),
    Gap(usize, u64),
    Close(usize),
}

/// Feeds the events, then closes both directions and ends the run; returns the bytes fed.
fn drive(evs: &[Ev], smbd: bool) -> (Run, u64) {
    let mut sh = shared();
    let mut st = [IwarpStream::new(7, 0, [C, S], smbd), IwarpStream::new(7, 1, [C, S], smbd)];
    let mut fed = 0u64;
    for (i, e) in evs.iter().enumerate() {
        let ctx = FrameCtx { frame: FrameRef { file: 0, number: i as u64 + 1 }, ts_ns: i as u64 * 1000, seq: 0 };
        match e {
            Ev::Data(s, b) => {
                fed += b.len() as u64;
                st[*s].data(b, &ctx, &mut sh);
            }
            Ev::Gap(s, n) => st[*s].gap(*n, &ctx, &mut sh),
            Ev::Close(s) => st[*s].close(&ctx, &mut sh),
        }
    }
    let ctx = FrameCtx { frame: FrameRef { file: 0, number: evs.len() as u64 + 1 }, ts_ns: evs.len() as u64 * 1000, seq: 0 };
    for s in &mut st {
        s.close(&ctx, &mut sh);
    }
    {
        let (mut p, rdma) = sh.split();
        rdma.finish(&ctx, &mut p);
    }
    (sh, fed)
}

/// A plausible SMB Direct over iWARP exchange, as the two directions' byte streams (after their
/// MPA frames): negotiate, a Send fragmented over DDP segments, an RDMA Read Request and its
/// Read Response, an RDMA Write, a Terminate. Returns the MPA Request/Reply frames and the
/// FPDUs that follow each (marker positions count from the first octet after the frame).
fn streams(markers: bool, crc: bool, seed: u8) -> ([Vec<u8>; 2], [Vec<u8>; 2]) {
    let req = mpa::Frame { reply: false, markers, crc, rejected: false, revision: 1, private_data_len: 8 };
    let rep = mpa::Frame { reply: true, markers, crc, rejected: false, revision: 1, private_data_len: 8 };
    let mut out = [Vec::new(), Vec::new()];
    let frames = [req.emit(&[seed; 8]), rep.emit(&[seed; 8])];
    let mut put = |side: usize, ulpdu: Vec<u8>| {
        let pos = out[side].len() as u64;
        let f = mpa::emit_fpdu(&ulpdu, pos, markers, crc);
        out[side].extend_from_slice(&f);
    };
    let send = |msn: u32, mo: u32, last: bool, b: &[u8]| {
        ddp::emit(ddp::opcode::SEND, last, Buffer::Untagged { qn: 0, msn, mo, inval_stag: 0 }, b)
    };
    let nreq = NegotiateRequest { min_version: 0x100, max_version: 0x100, credits_requested: 10, preferred_send_size: 1364, max_receive_size: 1364, max_fragmented_size: 1 << 20 };
    put(0, send(1, 0, true, &nreq.emit()));
    let nrep = NegotiateResponse {
        min_version: 0x100,
        max_version: 0x100,
        negotiated_version: 0x100,
        credits_requested: 10,
        credits_granted: 10,
        status: 0,
        max_read_write_size: 1 << 20,
        preferred_send_size: 1364,
        max_receive_size: 1364,
        max_fragmented_size: 1 << 20,
    };
    put(1, send(1, 0, true, &nrep.emit()));
    // A data transfer message carrying random "SMB2" bytes, in two DDP segments.
    let body: Vec<u8> = (0..300u32).map(|i| (i as u8).wrapping_mul(seed | 1)).collect();
    let dt = DataTransfer { credits_requested: 1, credits_granted: 1, flags: 0, remaining_data_length: 0, data_offset: 24, data_length: 0 }.emit(&body);
    let (a, b) = dt.split_at(dt.len() / 2);
    put(0, send(2, 0, false, a));
    put(0, send(2, a.len() as u32, true, b));
    let rr = ddp::ReadRequest { sink_stag: 0x10, sink_to: 0x1000, size: 600, src_stag: 0x20, src_to: 0x9000 };
    put(1, ddp::emit(ddp::opcode::READ_REQUEST, true, Buffer::Untagged { qn: 1, msn: 1, mo: 0, inval_stag: 0 }, &rr.emit()));
    let data: Vec<u8> = (0..600u32).map(|i| (i as u8) ^ seed).collect();
    put(0, ddp::emit(ddp::opcode::READ_RESPONSE, false, Buffer::Tagged { stag: 0x10, to: 0x1000 }, &data[..400]));
    put(0, ddp::emit(ddp::opcode::READ_RESPONSE, true, Buffer::Tagged { stag: 0x10, to: 0x1000 + 400 }, &data[400..]));
    put(1, ddp::emit(ddp::opcode::WRITE, true, Buffer::Tagged { stag: 0x30, to: 0x4000 }, &data));
    put(1, ddp::emit(ddp::opcode::TERMINATE, true, Buffer::Untagged { qn: 2, msn: 1, mo: 0, inval_stag: 0 }, &[0; 28]));
    (frames, out)
}

/// The MPA Request then the Reply (an initiator sends no FPDU before it has the Reply), then
/// the FPDUs of both directions cut into interleaved Data events at `cuts`, applying `flips`
/// (position, xor) and turning some pieces into gaps (`holes`: piece indexes) and one optional
/// early close.
fn events(x: &([Vec<u8>; 2], [Vec<u8>; 2]), cuts: &[(bool, u16)], flips: &[(u16, u8)], holes: &[u16], close: Option<u16>) -> Vec<Ev> {
    let mut st = x.1.clone();
    for &(at, x) in flips {
        let side = usize::from(at % 2 == 1);
        if !st[side].is_empty() {
            let i = usize::from(at) % st[side].len();
            st[side][i] ^= x;
        }
    }
    let mut pos = [0usize; 2];
    let mut evs = vec![Ev::Data(0, x.0[0].clone()), Ev::Data(1, x.0[1].clone())];
    let mut piece = 0u16;
    for &(side, len) in cuts.iter().chain(std::iter::repeat_n(&(false, 997), 64)).chain(std::iter::repeat_n(&(true, 997), 64)) {
        let s = usize::from(side);
        let n = usize::from(len % 1500).min(st[s].len() - pos[s]);
        if n == 0 {
            continue;
        }
        let b = st[s][pos[s]..pos[s] + n].to_vec();
        pos[s] += n;
        if holes.contains(&piece) {
            evs.push(Ev::Gap(s, n as u64));
        } else {
            evs.push(Ev::Data(s, b));
        }
        if close == Some(piece) {
            evs.push(Ev::Close(s));
        }
        piece += 1;
    }
    evs
}

#[test]
fn clean_exchange_decodes_and_balances() {
    for markers in [false, true] {
        for crc in [false, true] {
            let st = streams(markers, crc, 3);
            let evs = events(&st, &[(false, 37), (true, 5), (false, 1499)], &[], &[], None);
            let (sh, fed) = drive(&evs, true);
            let i = &sh.rdma.stats.iwarp;
            assert_eq!((i.mpa_requests, i.mpa_replies, i.mpa_fpdus, i.crc_errors, i.resyncs), (1, 1, 9, 0, 0), "{markers} {crc}");
            assert_eq!(i.markers > 0, markers);
            assert_eq!(sh.rdma.stats.smbdirect.negotiate_requests, 1);
            assert_eq!(sh.rdma.stats.smbdirect.data_messages, 1);
            assert_eq!(i.opcodes.get("0x07"), Some(&1));
            assert_eq!((i.terminates, sh.anomalies.get("iwarp.terminate")), (1, 1));
            assert_eq!(sh.accounting.total(), fed, "{:?}", sh.accounting);
        }
    }
}

/// A direction closed early and then fed more bytes (the proptest case that failed now and
/// then): they are not framed, so no CRC is checked on a misaligned FPDU; they are accounted.
#[test]
fn bytes_after_a_close_are_accounted_not_framed() {
    for markers in [false, true] {
        for crc in [false, true] {
            let st = streams(markers, crc, 1);
            for close in 0..12 {
                let evs = events(&st, &[(false, 300), (true, 200), (false, 700)], &[], &[], Some(close));
                let (sh, fed) = drive(&evs, true);
                assert_eq!(sh.rdma.stats.iwarp.crc_errors, 0, "{markers} {crc} close at {close}");
                assert_eq!(sh.accounting.total(), fed, "{:?}", sh.accounting);
                let Some(at) = evs.iter().position(|e| matches!(e, Ev::Close(_))) else {
                    assert!(close > 2, "pieces 0-2 exist");
                    continue;
                };
                let Ev::Close(side) = evs[at] else { unreachable!() };
                let later = evs[at..].iter().any(|e| matches!(e, Ev::Data(s, b) if *s == side && !b.is_empty()));
                assert_eq!(sh.anomalies.get("iwarp.data_after_close") > 0, later, "close at {close}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn mpa_frame_parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40), key in 0u8..3) {
        let mut v = match key {
            0 => Vec::new(),
            1 => mpa::REQ_KEY.to_vec(),
            _ => mpa::REP_KEY.to_vec(),
        };
        v.extend_from_slice(&b);
        for n in 0..=v.len() {
            match mpa::Frame::parse(&v[..n]) {
                None => prop_assert!(key == 0 || n > mpa::KEY_LEN || v[..n.min(mpa::KEY_LEN)] != mpa::REQ_KEY[..n.min(mpa::KEY_LEN)]),
                Some(Err(need)) => prop_assert!(n < need && need == mpa::FRAME_HEADER_LEN),
                Some(Ok(f)) => {
                    prop_assert!(n >= mpa::FRAME_HEADER_LEN);
                    prop_assert_eq!(f.len(), mpa::FRAME_HEADER_LEN + usize::from(u16::from_be_bytes([v[18], v[19]])));
                    // Parsing what it emits gives it back.
                    let again = f.emit(&vec![0; usize::from(f.private_data_len)]);
                    prop_assert_eq!(mpa::Frame::parse(&again), Some(Ok(mpa::Frame { rejected: f.rejected, ..f })));
                }
            }
        }
    }

    /// Arbitrary bytes on both directions, arbitrary gaps and closes, on an SMB Direct port or not.
    #[test]
    fn iwarp_stream_random_bytes_balance(
        evs in proptest::collection::vec((0u8..6, proptest::collection::vec(any::<u8>(), 0..700), 0u64..5000), 0..24),
        smbd in any::<bool>(),
        mpa_start in any::<bool>(),
    ) {
        let mut list = Vec::new();
        if mpa_start {
            list.push(Ev::Data(0, mpa::Frame { reply: false, markers: true, crc: true, rejected: false, revision: 1, private_data_len: 0 }.emit(&[])));
            list.push(Ev::Data(1, mpa::Frame { reply: true, markers: false, crc: false, rejected: false, revision: 1, private_data_len: 4 }.emit(&[1, 2, 3, 4])));
        }
        for (k, b, n) in evs {
            let s = usize::from(k % 2);
            list.push(match k {
                0 | 1 => Ev::Data(s, b),
                2 | 3 => Ev::Gap(s, n),
                _ => Ev::Close(s),
            });
        }
        let (sh, fed) = drive(&list, smbd);
        prop_assert_eq!(sh.accounting.total(), fed, "{:?}", sh.accounting);
    }

    /// A real exchange, with and without markers and CRC, cut anywhere, with flipped bytes,
    /// lost pieces (gaps) and an early close: no panic, every byte accounted; untouched, the
    /// CRC never fails.
    #[test]
    fn iwarp_stream_mutated_exchange_balances(
        markers in any::<bool>(),
        crc in any::<bool>(),
        seed in any::<u8>(),
        cuts in proptest::collection::vec((any::<bool>(), 0u16..1600), 0..40),
        flips in proptest::collection::vec((any::<u16>(), 1u8..=255), 0..4),
        holes in proptest::collection::vec(0u16..30, 0..3),
        close in proptest::option::of(0u16..30),
        smbd in any::<bool>(),
    ) {
        let st = streams(markers, crc, seed);
        let evs = events(&st, &cuts, &flips, &holes, close);
        let (sh, fed) = drive(&evs, smbd);
        prop_assert_eq!(sh.accounting.total(), fed, "{:?}", sh.accounting);
        if flips.is_empty() && holes.is_empty() {
            prop_assert_eq!(sh.rdma.stats.iwarp.crc_errors, 0);
            prop_assert_eq!(sh.rdma.stats.iwarp.mpa_requests, 1);
        }
        if flips.is_empty() && holes.is_empty() && close.is_none() {
            prop_assert_eq!(sh.rdma.stats.iwarp.mpa_fpdus, 9);
            prop_assert_eq!(sh.rdma.stats.iwarp.resyncs, 0);
        }
    }
}

/// A sender that negotiated markers and no CRC, and places its markers every 512 octets of the
/// stream not counting the FPDUs' 4-octet CRC fields (which it still sends, zero), FPDUPTR least
/// significant byte first (the layout of rdma-iwarp-read-write-long-run-markers.pcap, checked
/// against its bytes in tests/oracle/test_oracle_rdma.py): its FPDUs are framed where it put
/// the markers, once the first marker that tells the two layouts apart is seen, without CRC
/// errors; RFC 5044's layout keeps being read as before.
#[test]
fn markers_counted_without_crc_fields_are_found() {
    let req = mpa::Frame { reply: false, markers: true, crc: false, rejected: false, revision: 1, private_data_len: 0 };
    let rep = mpa::Frame { reply: true, ..req };
    let mut out = Vec::new();
    let mut mpos = 0u64;
    for k in 0..40u32 {
        let ulpdu = ddp::emit(ddp::opcode::WRITE, true, Buffer::Tagged { stag: 1, to: u64::from(k) * 1024 }, &[2u8; 1024]);
        let start = out.len();
        let mut put = |out: &mut Vec<u8>, b: u8, crc: bool| {
            if !crc && mpos.is_multiple_of(mpa::MARKER_INTERVAL) {
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(&((out.len() - 2 - start) as u16).to_le_bytes());
                mpos += 4;
            }
            out.push(b);
            mpos += u64::from(!crc);
        };
        for b in (ulpdu.len() as u16).to_be_bytes().into_iter().chain(ulpdu.iter().copied()) {
            put(&mut out, b, false);
        }
        for _ in 0..(4 - (ulpdu.len() + 2) % 4) % 4 + mpa::CRC_LEN {
            put(&mut out, 0, true);
        }
    }
    let mut evs = vec![Ev::Data(0, req.emit(&[])), Ev::Data(1, rep.emit(&[]))];
    for c in out.chunks(1052) {
        evs.push(Ev::Data(1, c.to_vec()));
    }
    let (sh, fed) = drive(&evs, false);
    let iw = &sh.rdma.stats.iwarp;
    assert_eq!((iw.mpa_fpdus, iw.crc_errors, iw.resyncs), (40, 0, 0));
    assert_eq!(iw.opcodes.get("0x00"), Some(&40));
    // Only this anomaly: RFC positions would misframe once the drift (4 octets an FPDU)
    // reaches an FPDU header.
    assert_eq!(sh.anomalies.iter().count(), 1);
    assert_eq!(sh.anomalies.get("iwarp.markers_without_crc_field"), 1);
    assert_eq!(sh.accounting.total(), fed);
    // The same FPDUs in RFC 5044's layout: no anomaly.
    let mut rfc = Vec::new();
    let mut pos = 0;
    for k in 0..40u32 {
        let ulpdu = ddp::emit(ddp::opcode::WRITE, true, Buffer::Tagged { stag: 1, to: u64::from(k) * 1024 }, &[2u8; 1024]);
        pos = mpa::emit_fpdu_into(&mut rfc, pos, &[&ulpdu], true, false);
    }
    let mut evs = vec![Ev::Data(0, req.emit(&[])), Ev::Data(1, rep.emit(&[]))];
    evs.push(Ev::Data(1, rfc));
    let (sh, _) = drive(&evs, false);
    assert_eq!((sh.rdma.stats.iwarp.mpa_fpdus, sh.rdma.stats.iwarp.crc_errors), (40, 0));
    assert_eq!(sh.anomalies.get("iwarp.markers_without_crc_field"), 0);
}

/// FPDUs with CRCs, the first ending exactly where a marker is due: the marker starts the
/// second FPDU (FPDUPTR 0) and the second's CRC covers it (`mpa::emit_fpdu_into`, the layout of
/// rdma-iwarp-send-recv-crc-markers.pcap's first FPDU). Every CRC verifies; the synthesizer
/// used to write that marker after the first FPDU's CRC, pointing back to it, which neither
/// smbwire nor Wireshark read with good CRCs.
#[test]
fn a_marker_between_two_fpdus_is_the_next_ones() {
    let req = mpa::Frame { reply: false, markers: true, crc: true, rejected: false, revision: 1, private_data_len: 0 };
    let rep = mpa::Frame { reply: true, ..req };
    let mut out = Vec::new();
    let mut ends = Vec::new();
    let mut pos = 0;
    for (k, n) in [488usize, 1000, 300].into_iter().enumerate() {
        let ulpdu = ddp::emit(ddp::opcode::WRITE, true, Buffer::Tagged { stag: 1, to: k as u64 * 4096 }, &vec![2u8; n]);
        pos = mpa::emit_fpdu_into(&mut out, pos, &[&ulpdu], true, true);
        ends.push(pos);
    }
    assert_eq!(ends[0], mpa::MARKER_INTERVAL, "the first FPDU ends where a marker is due");
    let evs = vec![Ev::Data(0, req.emit(&[])), Ev::Data(1, rep.emit(&[])), Ev::Data(1, out)];
    let (sh, fed) = drive(&evs, false);
    let iw = &sh.rdma.stats.iwarp;
    assert_eq!((iw.mpa_fpdus, iw.crc_errors, iw.resyncs, iw.markers), (3, 0, 0, 4));
    assert_eq!(sh.anomalies.iter().count(), 0);
    assert_eq!(sh.accounting.total(), fed);
}
