//! RoCE (v1 and v2) packets after the BTH: which queue pairs carry SMB Direct, PSN bookkeeping,
//! Send reassembly, and turning RDMA Write / Read Response packets into (R_Key, VA, bytes).
//!
//! A queue pair is named by its receiving end (address, QPN) — the BTH names only the
//! destination QP. Its upper layer comes from the CM REQ/REP on QP1 (RDMA CM service ID, TCP
//! port space, port 445 = SMB Direct) or, for captures that start later, from the first Send
//! whose payload is an SMB Direct message; the two receiving ends of one connection are paired
//! by address (the CM names both QPNs; inference pairs the reverse direction seen next).
//!
//! Placement (IBTA §9.4, §9.5): an RDMA Write message's FIRST/ONLY packet carries the RETH;
//! MIDDLE packets carry exactly one PMTU, so a packet's byte position is (PSN − first PSN) ×
//! its own length, and a LAST packet ends the DMA length. RDMA Read Response packets use the
//! PSNs starting at their Read Request's PSN, placed the same way. Packets whose context was
//! not seen yet wait (bounded) for it.
//!
//! Accounting of the BTH..ICRC bytes: ACK → `rdma_ack`; CM MADs → `rdma_cm`; QPs of another or
//! unknown upper layer → `rdma_other_ulp`; duplicates → `rdma_retransmitted`; headers, pad and
//! ICRC of SMB Direct QPs → `rdma_headers`; Send payloads → SMB Direct; RDMA data → the linker.

use super::ib::{self, Kind, Reth};
use super::psn::{self, Mark, PsnWindow};
use super::{cm, RdmaState, ROCE_CONN_BASE};
use crate::accounting::cat;
use crate::frame::FrameCtx;
use crate::smb2::Parts;
use crate::smbdirect::{looks_like_smbdirect, starts_like_smbdirect, SmbdConn, MAX_FRAGMENTED_SIZE};
use std::collections::VecDeque;
use crate::fasthash::FastMap as HashMap;
use std::net::IpAddr;
use super::Anomaly;

/// Queue pairs tracked; past this new QPs are not analysed.
pub const MAX_QPS: usize = 65_536;
/// RDMA Write / Read contexts kept per QP (IBTA limits outstanding reads to a few dozen).
const MAX_CONTEXTS: usize = 128;
/// Bytes of packets held while their context is unknown, per QP / address pair; each held
/// packet is charged its payload and its record (`HELD_RECORD`), so a flood of one-byte
/// packets cannot hold 70 bytes of records per byte of payload.
const MAX_ORPHAN_BYTES: usize = 4 << 20;
/// The same over all QPs and address pairs together.
const MAX_ORPHAN_BYTES_TOTAL: usize = 64 << 20;
/// What one held packet costs beside its payload.
const HELD_RECORD: usize = std::mem::size_of::<Held>();
/// Address pairs (requester, responder) with Read Requests or early Read Responses kept: the
/// pair is taken from the packet's addresses, not from a QP, so it needs its own bound.
const MAX_READ_PAIRS: usize = MAX_QPS;
/// SMB Direct connections opened from RoCE/IB (a CM exchange or an inferred queue pair) while
/// the run holds this many (`RdmaState::conns`, iWARP's included): past it a new connection is
/// not analysed (its queue pairs count as another upper layer).
const MAX_SMBD_CONNS: usize = MAX_QPS;
/// The smallest IB PMTU: bounds how many PSNs one message can span.
const MIN_PMTU: u64 = 256;
/// RDMA CM ports that mean SMB Direct (MS-SMBD §1.9: 445 on IB/RoCE; 5445 is iWARP's).
const SMBD_CM_PORTS: [u16; 2] = [445, 5445];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ulp {
    Unknown,
    Smbd { conn: u64, side: usize },
    Other,
}

#[derive(Debug, Clone, Copy)]
struct Context {
    psn0: u32,
    reth: Reth,
    conn: u64,
    /// Side of the connection that sends the data.
    from: usize,
    /// Receiving QP of the Read Request (its PSN window also covers the responses).
    responder: QpKey,
    /// The payload size of its packets once its FIRST packet was placed (every packet but
    /// the LAST carries one path MTU, IBTA §9.4), `ONE_PACKET` when that was an ONLY packet,
    /// 0 before: it bounds the PSNs the message spans, so that a packet of the next message
    /// that came before that message's FIRST is held for it, not placed in this one under
    /// another path MTU that happens to fit.
    pmtu: u32,
}

/// `Context::pmtu` of a message sent in one packet.
const ONE_PACKET: u32 = u32::MAX;

/// IB path MTUs are 256..4096, powers of two; every packet but the last carries one PMTU.
fn pmtu_ok(m: u64) -> bool {
    m.is_power_of_two() && (MIN_PMTU..=4096).contains(&m)
}

/// `Context::pmtu` learned from a FIRST (or ONLY) packet of `plen` bytes placed at 0.
fn first_pmtu(kind: Kind, plen: usize) -> u32 {
    match kind {
        Kind::RdmaWrite { first: true, last: true } | Kind::ReadResponse { first: true, last: true } => ONE_PACKET,
        Kind::RdmaWrite { first: true, .. } | Kind::ReadResponse { first: true, .. } if pmtu_ok(plen as u64) => plen as u32,
        _ => 0,
    }
}

struct Held {
    /// The connection of the queue pair it was sent to.
    conn: u64,
    psn: u32,
    kind: Kind,
    bytes: Vec<u8>,
    ctx: FrameCtx,
}

#[derive(Default)]
struct Orphans {
    list: VecDeque<Held>,
    bytes: usize,
}

struct Qp {
    ulp: Ulp,
    /// Requests arriving at this QP (Send, Write, Read Request) and the Read Responses to them.
    req: PsnWindow,
    /// Read Responses arriving at this QP (duplicates only).
    resp: PsnWindow,
    send: Option<(u32, Vec<u8>)>,
    writes: VecDeque<Context>,
    orphans: Orphans,
}

impl Qp {
    fn new(ulp: Ulp) -> Self {
        Qp { ulp, req: PsnWindow::default(), resp: PsnWindow::default(), send: None, writes: VecDeque::new(), orphans: Orphans::default() }
    }
}

/// A receiving queue pair: its address, its number, and the address of its peer. An RC queue
/// pair talks to one peer (IBTA vol. 1 §9.6: the responder drops packets whose source is not
/// its connection's path), so packets to the same number from another source are another
/// queue pair's, whatever they claim; under `--threads`, whose workers each hold one pair
/// of addresses, they are on another worker too.
type QpKey = (IpAddr, u32, IpAddr);

#[derive(Default)]
pub struct Roce {
    qps: HashMap<QpKey, Qp>,
    /// Read Requests by (requester, responder) address.
    reads: HashMap<(IpAddr, IpAddr), VecDeque<Context>>,
    read_orphans: HashMap<(IpAddr, IpAddr), Orphans>,
    /// Bytes charged by every `Orphans` of `qps` and `read_orphans` (at most
    /// `MAX_ORPHAN_BYTES_TOTAL`).
    orphan_bytes: usize,
    /// CM REQs awaiting their REP: (requester address, responder address, Local
    /// Communication ID) → (QPN, port). A REP answers the REQ its sender was sent: one from
    /// another address is not its answer, whatever its IDs say (and the two are then on
    /// different workers under `--threads`, which shard RDMA by address pair).
    cm_pending: HashMap<(IpAddr, IpAddr, u32), (u32, Option<u16>)>,
    /// Inferred connections with one queue pair not known yet: (conn, the known one's address,
    /// the other address, the side not known).
    half_open: Vec<(u64, IpAddr, IpAddr, usize)>,
    /// Connections inferred without a CM exchange (`adopt`): their queue pairs, as far as
    /// known, until an RDMA operation settles the pairing (`repair`).
    inferred: HashMap<u64, Inferred>,
    /// The inferred connections between two addresses (`unordered`), at most
    /// `MAX_INFERRED_PER_PAIR` each.
    inferred_pairs: HashMap<(IpAddr, IpAddr), Vec<u64>>,
    next_conn: u64,
}

/// An inferred connection's queue pairs by side (side 0 is the one it was inferred from).
struct Inferred {
    qps: [Option<QpKey>; 2],
    /// An RDMA operation to one of its queue pairs named a buffer its own requests registered:
    /// the pairing is right, and is not looked at again.
    settled: bool,
    /// RDMA operations that named a buffer none of its requests registered, each a search of
    /// the other connections between its addresses: at most `MAX_REPAIR_TRIES`.
    tries: u16,
}

/// Inferred connections between two addresses that `repair` chooses among.
const MAX_INFERRED_PER_PAIR: usize = 16;
/// Searches for a connection's right pairing before it is left as inferred. A capture that
/// starts mid-traffic first shows RDMA operations for the requests in flight, which no
/// connection in it registered, so the bound is well above the requests one connection has in
/// flight. Each search asks up to `MAX_INFERRED_PER_PAIR` linkers of up to
/// `link::MAX_TRANSFERS` requests: this bounds the work hostile traffic can cause per packet.
const MAX_REPAIR_TRIES: u16 = 256;

impl Roce {
    /// Whether the receiving QP (`dst`, `qpn`) is known to carry SMB Direct from `src`.
    pub fn carries_smbdirect(&self, src: IpAddr, dst: IpAddr, qpn: u32) -> bool {
        self.qps.get(&(dst, qpn, src)).is_some_and(|q| matches!(q.ulp, Ulp::Smbd { .. }))
    }
}

fn account_all(p: &mut Parts, category: &'static str, n: usize) {
    p.accounting.add(category, n as u64);
}

pub fn packet(st: &mut RdmaState, src: IpAddr, dst: IpAddr, b: &[u8], ctx: &FrameCtx, p: &mut Parts) {
    st.stats.infiniband.packets += 1;
    if let Some(&op) = b.first() {
        if b.len() >= ib::BTH_LEN {
            super::count_opcode(&mut st.stats.infiniband.bth_opcodes, op, false);
        }
    }
    let r = match ib::Repr::parse(b) {
        Ok(r) => r,
        Err(e) => {
            p.anomalies.raise(e);
            let c = if e == ib::Error::UnknownOpcode { cat::RDMA_OTHER_ULP } else { cat::MALFORMED };
            return account_all(p, c, b.len());
        }
    };
    match r.kind {
        Kind::UdSend => {
            if r.dest_qp == ib::QP1 {
                on_cm(st, src, dst, r.payload, ctx, p);
                account_all(p, cat::RDMA_CM, b.len())
            } else {
                account_all(p, cat::RDMA_OTHER_ULP, b.len())
            }
        }
        Kind::Ack => account_all(p, cat::RDMA_ACK, b.len()),
        Kind::Atomic => account_all(p, cat::RDMA_OTHER_ULP, b.len()),
        _ => on_rc(st, src, dst, &r, b.len(), ctx, p),
    }
}

fn on_cm(st: &mut RdmaState, src: IpAddr, dst: IpAddr, mad: &[u8], ctx: &FrameCtx, p: &mut Parts) {
    let Some(m) = cm::parse(mad) else { return };
    let roce = &mut st.roce;
    match m {
        cm::Message::Request { local_comm_id, local_qpn, .. } => {
            st.stats.infiniband.cm_requests += 1;
            if roce.cm_pending.len() < MAX_QPS {
                roce.cm_pending.insert((src, dst, local_comm_id), (local_qpn, m.tcp_port()));
            }
        }
        cm::Message::Reply { remote_comm_id, local_qpn, .. } => {
            st.stats.infiniband.cm_replies += 1;
            let Some((req_qpn, port)) = roce.cm_pending.remove(&(dst, src, remote_comm_id)) else {
                p.anomalies.raise(Anomaly::CmReplyWithoutRequest);
                return;
            };
            let smbd = port.is_some_and(|pt| SMBD_CM_PORTS.contains(&pt));
            let (client, server) = ((dst, req_qpn, src), (src, local_qpn, dst));
            if smbd && st.conns.len() >= MAX_SMBD_CONNS {
                p.anomalies.raise(Anomaly::ConnectionTableFull);
                set_ulp(roce, &mut st.stats.qps, client, Ulp::Other);
                set_ulp(roce, &mut st.stats.qps, server, Ulp::Other);
            } else if smbd {
                let id = conn_id(roce, ctx);
                st.stats.smbdirect_connections += 1;
                st.stats.cm_connections += 1;
                st.conns.insert(id, SmbdConn::new(id, [(client.0, client.1 as u16), (server.0, server.1 as u16)], Some(0)));
                set_ulp(roce, &mut st.stats.qps, client, Ulp::Smbd { conn: id, side: 0 });
                set_ulp(roce, &mut st.stats.qps, server, Ulp::Smbd { conn: id, side: 1 });
            } else {
                st.stats.other_ulp_connections += 1;
                set_ulp(roce, &mut st.stats.qps, client, Ulp::Other);
                set_ulp(roce, &mut st.stats.qps, server, Ulp::Other);
            }
        }
        cm::Message::Other(_) => {}
    }
}

/// A new connection's id: in the RoCE range, from the opening frame's run-wide number
/// (`FrameCtx::seq`, the same under any `--threads`), or a counter in unit tests.
fn conn_id(roce: &mut Roce, ctx: &FrameCtx) -> u64 {
    roce.next_conn += 1;
    ROCE_CONN_BASE + if ctx.seq != 0 { ctx.seq } else { roce.next_conn - 1 }
}

fn set_ulp(roce: &mut Roce, qps: &mut u64, key: QpKey, ulp: Ulp) {
    if let Some(q) = roce.qps.get_mut(&key) {
        q.ulp = ulp;
    } else if roce.qps.len() < MAX_QPS {
        *qps += 1;
        roce.qps.insert(key, Qp::new(ulp));
    }
}

/// The first Send of an unknown QP that is SMB Direct: pair it with the reverse direction.
fn adopt(st: &mut RdmaState, src: IpAddr, key: QpKey, ctx: &FrameCtx, p: &mut Parts) -> Ulp {
    let roce = &mut st.roce;
    let ulp = if let Some(i) = roce.half_open.iter().rposition(|&(_, known, other, _)| known == src && other == key.0) {
        let (conn, _, _, side) = roce.half_open.remove(i);
        if let Some(inf) = roce.inferred.get_mut(&conn) {
            inf.qps[side] = Some(key);
        }
        Ulp::Smbd { conn, side }
    } else if st.conns.len() >= MAX_SMBD_CONNS {
        p.anomalies.raise(Anomaly::ConnectionTableFull);
        Ulp::Other
    } else {
        let id = conn_id(roce, ctx);
        st.stats.smbdirect_connections += 1;
        st.stats.inferred_connections += 1;
        st.conns.insert(id, SmbdConn::new(id, [(key.0, key.1 as u16), (src, 0)], None));
        if roce.half_open.len() >= 1024 {
            roce.half_open.remove(0);
        }
        roce.half_open.push((id, key.0, src, 1));
        let pair = roce.inferred_pairs.entry(unordered(key.0, src)).or_default();
        if pair.len() < MAX_INFERRED_PER_PAIR {
            pair.push(id);
            roce.inferred.insert(id, Inferred { qps: [Some(key), None], settled: false, tries: 0 });
        }
        Ulp::Smbd { conn: id, side: 0 }
    };
    if let Some(q) = roce.qps.get_mut(&key) {
        q.ulp = ulp;
    }
    ulp
}

/// A Read Request or RDMA Write to queue pair `key`, side `side` of connection `conn`, names
/// buffer `token`. Connections inferred without a CM exchange pair a queue pair with the latest
/// half-open connection between its addresses (`adopt`), which is wrong when several channels
/// run between them (SMB multichannel over one pair of RDMA NICs, two connections each by
/// Windows' default) and the capture starts after their exchanges: then every payload of both
/// is linked to no request. The buffer settles it: SMB Direct registers it in a WRITE or READ
/// request sent on the connection that the RDMA operation serves (MS-SMBD §3.1.4.3, MS-SMB2
/// §2.2.21, §2.2.19). When no request of `conn` registered it and one of another inferred
/// connection between the same addresses did, the queue pair is that one's: it changes places
/// with that connection's queue pair on its side (if any), with the SMB Direct fragments in
/// reassembly towards each and the RDMA contexts of each. Returns the connection it is now in.
fn repair(st: &mut RdmaState, key: QpKey, conn: u64, side: usize, token: u32) -> (u64, usize) {
    let Some(inf) = st.roce.inferred.get(&conn) else { return (conn, side) };
    if inf.settled || inf.tries >= MAX_REPAIR_TRIES {
        return (conn, side);
    }
    if st.conns.get(&conn).is_some_and(|c| c.linker.knows(token)) {
        st.roce.inferred.get_mut(&conn).expect("present").settled = true;
        return (conn, side);
    }
    st.roce.inferred.get_mut(&conn).expect("present").tries += 1;
    let Some((other, their_side)) = registrant(st, key, token, Some(conn)) else { return (conn, side) };
    st.stats.buffer_pairings += 1;
    let roce = &mut st.roce;
    let theirs = roce.inferred[&other].qps[their_side];
    let o = roce.inferred.get_mut(&other).expect("present");
    o.qps[their_side] = Some(key);
    o.settled = true;
    roce.inferred.get_mut(&conn).expect("present").qps[side] = theirs;
    if let Some(q) = roce.qps.get_mut(&key) {
        q.ulp = Ulp::Smbd { conn: other, side: their_side };
    }
    match theirs {
        Some(t) => {
            if let Some(q) = roce.qps.get_mut(&t) {
                q.ulp = Ulp::Smbd { conn, side };
            }
        }
        None => {
            // `other` was waiting for this queue pair; now `conn` waits for one at its address.
            roce.half_open.retain(|&(c, ..)| c != other);
            roce.half_open.push((conn, key.2, key.0, side));
        }
    }
    // RDMA operations already seen: each context goes with its queue pair. The data of a
    // Read Request comes from the side it was sent to, a Write's from the other.
    let moved = |c: &mut Context, write: bool| {
        let s = if c.responder == key {
            c.conn = other;
            their_side
        } else if Some(c.responder) == theirs {
            c.conn = conn;
            side
        } else {
            return;
        };
        c.from = if write { 1 - s } else { s };
    };
    for k in [(key.2, key.0), (key.0, key.2)] {
        if let Some(list) = roce.reads.get_mut(&k) {
            list.iter_mut().for_each(|c| moved(c, false));
        }
    }
    for k in std::iter::once(key).chain(theirs) {
        if let Some(q) = roce.qps.get_mut(&k) {
            q.writes.iter_mut().for_each(|c| moved(c, true));
        }
    }
    // Fragments of SMB Direct messages sent to each queue pair go with it.
    if let Some(mut a) = st.conns.remove(&conn) {
        if let Some(b) = st.conns.get_mut(&other) {
            a.swap_inbound(1 - side, b, 1 - their_side);
        }
        st.conns.insert(conn, a);
    }
    (other, their_side)
}

/// The inferred connection between queue pair `key`'s two addresses (not `except`, not
/// settled) whose requests registered buffer `token`, and its side at the queue pair's address
/// (connections inferred from either direction's first Send have their sides either way round).
fn registrant(st: &RdmaState, key: QpKey, token: u32, except: Option<u64>) -> Option<(u64, usize)> {
    let side_at = |c: &SmbdConn| match (c.side_addr(0), c.side_addr(1)) {
        (a, b) if a == key.0 && b == key.2 => Some(0),
        (a, b) if a == key.2 && b == key.0 => Some(1),
        _ => None,
    };
    let ids = st.roce.inferred_pairs.get(&unordered(key.0, key.2))?;
    ids.iter().copied().filter(|&o| Some(o) != except && !st.roce.inferred[&o].settled).find_map(|o| {
        let c = st.conns.get(&o)?;
        c.linker.knows(token).then_some(())?;
        side_at(c).map(|s| (o, s))
    })
}

/// An RDMA operation naming buffer `token` reaches queue pair `key`, not known to carry SMB
/// Direct yet, and an inferred connection between its addresses registered the buffer: the
/// queue pair is that connection's, on the side at its address. A queue pair paired there
/// before, wrongly, is unknown again, and is learned again from its own traffic.
fn claim(st: &mut RdmaState, key: QpKey, token: u32) -> Option<Ulp> {
    let (conn, side) = registrant(st, key, token, None)?;
    st.stats.buffer_pairings += 1;
    let roce = &mut st.roce;
    let inf = roce.inferred.get_mut(&conn).expect("present");
    let before = inf.qps[side].replace(key);
    inf.settled = true;
    match before {
        Some(b) => {
            if let Some(q) = roce.qps.get_mut(&b) {
                q.ulp = Ulp::Unknown;
            }
        }
        None => roce.half_open.retain(|&(c, ..)| c != conn),
    }
    let ulp = Ulp::Smbd { conn, side };
    if let Some(q) = roce.qps.get_mut(&key) {
        q.ulp = ulp;
    }
    Some(ulp)
}

/// Two addresses in one order, whichever way they were given.
fn unordered(a: IpAddr, b: IpAddr) -> (IpAddr, IpAddr) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

#[allow(clippy::too_many_arguments)]
fn on_rc(st: &mut RdmaState, src: IpAddr, dst: IpAddr, r: &ib::Repr<'_>, len: usize, ctx: &FrameCtx, p: &mut Parts) {
    let key = (dst, r.dest_qp, src);
    if !st.roce.qps.contains_key(&key) {
        if st.roce.qps.len() >= MAX_QPS {
            p.anomalies.raise(Anomaly::QpTableFull);
            return account_all(p, cat::RDMA_OTHER_ULP, len);
        }
        st.stats.qps += 1;
        st.roce.qps.insert(key, Qp::new(Ulp::Unknown));
    }
    let mut ulp = st.roce.qps[&key].ulp;
    if let (Ulp::Unknown, Kind::ReadRequest | Kind::RdmaWrite { first: true, .. }, Some(reth)) = (ulp, r.kind, r.reth) {
        // The buffer it names says which inferred connection it belongs to, if any.
        ulp = claim(st, key, reth.r_key).unwrap_or(ulp);
    }
    // Only a queue pair not known yet looks at a Send's payload.
    let smbd_send = || match r.kind {
        Kind::Send { first: true, last: true } => looks_like_smbdirect(r.payload),
        Kind::Send { first: true, last: false } => starts_like_smbdirect(r.payload),
        _ => false,
    };
    if ulp == Ulp::Unknown && smbd_send() {
        ulp = adopt(st, src, key, ctx, p);
    } else if ulp == Ulp::Unknown
        && matches!(r.kind, Kind::ReadRequest | Kind::RdmaWrite { first: true, .. })
        && st.roce.half_open.iter().any(|&(_, known, other, _)| known == src && other == dst)
    {
        // The reverse QP of a connection inferred from its first Send: the server's first RDMA
        // Read Request (or Write) for a WRITE (READ) reaches it before any Send does.
        ulp = adopt(st, src, key, ctx, p);
    }
    let Ulp::Smbd { conn, side } = ulp else {
        return account_all(p, cat::RDMA_OTHER_ULP, len);
    };
    let (conn, side) = match (r.kind, r.reth) {
        (Kind::ReadRequest | Kind::RdmaWrite { first: true, .. }, Some(reth)) => repair(st, key, conn, side, reth.r_key),
        _ => (conn, side),
    };
    let from = 1 - side;
    let headers = len - r.payload.len();
    let qp = st.roce.qps.get_mut(&key).expect("inserted above");
    let mark = match r.kind {
        Kind::ReadResponse { .. } => qp.resp.mark(r.psn),
        // A Read Request's PSNs are filled by its responses (the first shares its PSN); a copy
        // of the request is recognised by its context.
        Kind::ReadRequest => {
            let dup = st.roce.reads.get(&(src, dst)).is_some_and(|l| l.iter().any(|c| c.psn0 == r.psn && Some(c.reth) == r.reth));
            if dup {
                Mark::Duplicate
            } else {
                Mark::New
            }
        }
        _ => qp.req.mark(r.psn),
    };
    match mark {
        Mark::New => {}
        Mark::Duplicate | Mark::TooOld => {
            st.stats.retransmitted_bytes += len as u64;
            return account_all(p, cat::RDMA_RETRANSMITTED, len);
        }
    }
    p.accounting.add(cat::RDMA_HEADERS, headers as u64);
    match r.kind {
        Kind::Send { first, last } => on_send_packet(st, key, conn, from, first, last, r, ctx, p),
        Kind::ReadRequest => {
            if !r.payload.is_empty() {
                p.anomalies.raise(Anomaly::ReadRequestWithPayload);
                p.accounting.add(cat::MALFORMED, r.payload.len() as u64);
            }
            let Some(reth) = r.reth else { return };
            let c = Context { psn0: r.psn, reth, conn, from: side, responder: key, pmtu: 0 };
            if !st.roce.reads.contains_key(&(src, dst)) && st.roce.reads.len() >= MAX_READ_PAIRS {
                // Its responses will find no request: unlinked.
                p.anomalies.raise(Anomaly::ReadTableFull);
                return;
            }
            let list = st.roce.reads.entry((src, dst)).or_default();
            if list.len() >= MAX_CONTEXTS {
                list.pop_front();
            }
            list.push_back(c);
            // Responses that came first.
            let held = st.roce.read_orphans.remove(&(src, dst)).unwrap_or_default();
            st.roce.orphan_bytes -= held.bytes;
            for h in held.list {
                read_response(st, src, dst, h.conn, h.psn, h.kind, &h.bytes, &h.ctx, p);
            }
        }
        Kind::ReadResponse { .. } => read_response(st, dst, src, conn, r.psn, r.kind, r.payload, ctx, p),
        Kind::RdmaWrite { first, .. } => {
            if first {
                let Some(reth) = r.reth else { return };
                let c = Context { psn0: r.psn, reth, conn, from, responder: key, pmtu: first_pmtu(r.kind, r.payload.len()) };
                let qp = st.roce.qps.get_mut(&key).expect("present");
                if qp.writes.len() >= MAX_CONTEXTS {
                    qp.writes.pop_front();
                }
                qp.writes.push_back(c);
                deliver(st, &c, r.psn, r.kind, r.payload, ctx, p);
                let held = std::mem::take(&mut st.roce.qps.get_mut(&key).expect("present").orphans);
                st.roce.orphan_bytes -= held.bytes;
                for h in held.list {
                    write_packet(st, key, h.conn, h.psn, h.kind, &h.bytes, &h.ctx, p);
                }
            } else {
                write_packet(st, key, conn, r.psn, r.kind, r.payload, ctx, p);
            }
        }
        _ => account_all(p, cat::RDMA_OTHER_ULP, r.payload.len()),
    }
}

#[allow(clippy::too_many_arguments)]
fn on_send_packet(st: &mut RdmaState, key: QpKey, conn: u64, from: usize, first: bool, last: bool, r: &ib::Repr<'_>, ctx: &FrameCtx, p: &mut Parts) {
    let RdmaState { stats, conns, roce, .. } = st;
    let qp = roce.qps.get_mut(&key).expect("present");
    let Some(c) = conns.get_mut(&conn) else {
        return account_all(p, cat::RDMA_OTHER_ULP, r.payload.len());
    };
    if first {
        if let Some((_, old)) = qp.send.take() {
            p.anomalies.raise(Anomaly::SendIncomplete);
            account_all(p, cat::SMB_UNPARSED, old.len());
            c.lost(from, p);
        }
        if last {
            return c.on_send(from, r.payload, ctx, p, stats);
        }
        qp.send = Some(((r.psn + 1) & 0xff_ffff, r.payload.to_vec()));
        return;
    }
    match qp.send.take() {
        Some((next, mut buf)) if next == r.psn && buf.len() + r.payload.len() <= MAX_FRAGMENTED_SIZE => {
            buf.extend_from_slice(r.payload);
            if last {
                c.on_send(from, &buf, ctx, p, stats);
            } else {
                qp.send = Some(((r.psn + 1) & 0xff_ffff, buf));
            }
        }
        other => {
            // A packet of the Send was lost or reordered: the message cannot be rebuilt.
            p.anomalies.raise(Anomaly::SendOutOfSequence);
            let held = other.map(|(_, b)| b.len()).unwrap_or(0);
            account_all(p, cat::SMB_UNPARSED, held + r.payload.len());
            c.lost(from, p);
        }
    }
}

/// Byte position of a packet in its message, or None when it does not fit.
fn position(c: &Context, psn: u32, kind: Kind, plen: usize) -> Option<u64> {
    let d = psn::diff(psn, c.psn0);
    let len = u64::from(c.reth.dma_length);
    let max_pkts = len.div_ceil(MIN_PMTU).max(1);
    if d < 0 || d as u64 >= max_pkts {
        return None;
    }
    let plen = plen as u64;
    let d = d as u64;
    if c.pmtu != 0 {
        // The message's path MTU is known: it spans `count` PSNs, and a packet's place is its
        // PSN's times that MTU.
        let count = if c.pmtu == ONE_PACKET { 1 } else { len.div_ceil(u64::from(c.pmtu)).max(1) };
        let fits = match kind {
            Kind::RdmaWrite { first: true, .. } | Kind::ReadResponse { first: true, .. } => d == 0,
            Kind::RdmaWrite { last: true, .. } | Kind::ReadResponse { last: true, .. } => {
                d + 1 == count && c.pmtu != ONE_PACKET && d * u64::from(c.pmtu) + plen == len
            }
            _ => d + 1 < count && plen == u64::from(c.pmtu),
        };
        if !fits {
            return None;
        }
    }
    let pos = match kind {
        Kind::RdmaWrite { first: true, last, .. } | Kind::ReadResponse { first: true, last } => {
            (d == 0 && (last || pmtu_ok(plen))).then_some(0)?
        }
        Kind::RdmaWrite { last: true, .. } | Kind::ReadResponse { last: true, .. } => {
            let pos = len.checked_sub(plen)?;
            // PMTU implied by the packets before it.
            (d > 0 && pos % d == 0 && pmtu_ok(pos / d) && plen <= pos / d).then_some(pos)?
        }
        _ => (d > 0 && pmtu_ok(plen)).then_some(d * plen)?,
    };
    let fits = match kind {
        Kind::RdmaWrite { last: true, .. } | Kind::ReadResponse { last: true, .. } => pos + plen == len,
        _ => pos + plen < len || (pos == 0 && plen == len),
    };
    fits.then_some(pos)
}

/// The context a MIDDLE/LAST packet belongs to: the latest one starting at or before its PSN.
fn find(list: &VecDeque<Context>, psn: u32, kind: Kind, plen: usize) -> Option<(Context, u64)> {
    list.iter()
        .filter(|c| psn::diff(psn, c.psn0) >= 0)
        .min_by_key(|c| psn::diff(psn, c.psn0))
        .and_then(|c| position(c, psn, kind, plen).map(|pos| (*c, pos)))
}

/// The Read Request a response packet to a queue pair of connection `conn` answers, among the
/// requests between its two addresses (`Roce::reads`): one where the packet fits (`position`),
/// of its own connection before any other, then the latest starting at or before its PSN.
///
/// Not simply the latest: requests of several queue pairs between the same two addresses
/// (SMB multichannel over one pair of RDMA NICs) number their packets in sequences of their
/// own (IBTA vol. 1 §9.7.1: each queue pair's PSNs start where it chooses), so another queue
/// pair's request may start just below this one's PSN, and the packet would be taken for
/// its and dropped. The connection a response's queue pair belongs to is known from the CM
/// exchange; when it was inferred (a capture that starts after the exchange), two queue
/// pairs can be paired wrongly, so a request of another connection where the packet fits
/// still takes it.
fn find_read(list: &VecDeque<Context>, conn: u64, psn: u32, kind: Kind, plen: usize) -> Option<(Context, u64)> {
    let before = |c: &&Context| psn::diff(psn, c.psn0) >= 0;
    // Most packets fit the latest request of their own connection: one `position` then,
    // not one for each of up to `MAX_CONTEXTS` requests (15% of a RoCE run's time with a
    // 1024-byte path MTU).
    let own = list.iter().filter(before).filter(|c| c.conn == conn).min_by_key(|c| psn::diff(psn, c.psn0));
    if let Some(found) = own.and_then(|c| position(c, psn, kind, plen).map(|pos| (*c, pos))) {
        return Some(found);
    }
    list.iter()
        .filter(before)
        .filter_map(|c| position(c, psn, kind, plen).map(|pos| (*c, pos)))
        .min_by_key(|(c, _)| (c.conn != conn, psn::diff(psn, c.psn0)))
}

fn deliver(st: &mut RdmaState, c: &Context, psn: u32, kind: Kind, bytes: &[u8], ctx: &FrameCtx, p: &mut Parts) {
    match position(c, psn, kind, bytes.len()) {
        Some(pos) => deliver_at(st, c, pos, bytes, ctx, p),
        None => unlinked(st, bytes.len(), Anomaly::DataOutsideMessage, p),
    }
}

fn deliver_at(st: &mut RdmaState, c: &Context, pos: u64, bytes: &[u8], ctx: &FrameCtx, p: &mut Parts) {
    let RdmaState { stats, conns, .. } = st;
    match conns.get_mut(&c.conn) {
        Some(conn) => conn.rdma_data(c.from, c.reth.r_key, c.reth.va.wrapping_add(pos), bytes, ctx, p, stats),
        None => unlinked(st, bytes.len(), Anomaly::DataWithoutConnection, p),
    }
}

fn unlinked(st: &mut RdmaState, n: usize, anomaly: impl crate::anomaly::AnomalyKind, p: &mut Parts) {
    if n > 0 {
        p.anomalies.raise(anomaly);
        st.stats.unlinked_bytes += n as u64;
        p.accounting.add(cat::RDMA_UNLINKED, n as u64);
    }
}

/// Holds a packet for a context not seen yet, within `MAX_ORPHAN_BYTES` for `o` and
/// `MAX_ORPHAN_BYTES_TOTAL` for `total` (the run's `Roce::orphan_bytes`).
fn hold(o: &mut Orphans, total: &mut usize, conn: u64, psn: u32, kind: Kind, bytes: &[u8], ctx: &FrameCtx) -> bool {
    let charge = bytes.len() + HELD_RECORD;
    if o.bytes + charge > MAX_ORPHAN_BYTES || *total + charge > MAX_ORPHAN_BYTES_TOTAL {
        return false;
    }
    o.bytes += charge;
    *total += charge;
    o.list.push_back(Held { conn, psn, kind, bytes: bytes.to_vec(), ctx: *ctx });
    true
}

#[allow(clippy::too_many_arguments)]
fn write_packet(st: &mut RdmaState, key: QpKey, conn: u64, psn: u32, kind: Kind, bytes: &[u8], ctx: &FrameCtx, p: &mut Parts) {
    let Roce { qps, orphan_bytes, .. } = &mut st.roce;
    let qp = qps.get_mut(&key).expect("present");
    match find(&qp.writes, psn, kind, bytes.len()) {
        Some((c, pos)) => deliver_at(st, &c, pos, bytes, ctx, p),
        None => {
            if !hold(&mut qp.orphans, orphan_bytes, conn, psn, kind, bytes, ctx) {
                unlinked(st, bytes.len(), Anomaly::WriteWithoutFirst, p);
            }
        }
    }
}

/// A Read Response packet sent by `responder` to `requester`, to a queue pair of connection
/// `conn`.
#[allow(clippy::too_many_arguments)]
fn read_response(st: &mut RdmaState, requester: IpAddr, responder: IpAddr, conn: u64, psn: u32, kind: Kind, bytes: &[u8], ctx: &FrameCtx, p: &mut Parts) {
    let found = st.roce.reads.get(&(requester, responder)).and_then(|l| find_read(l, conn, psn, kind, bytes.len()));
    match found {
        Some((c, pos)) => {
            // The response PSNs are the request's: they fill the request stream's window.
            if let Some(q) = st.roce.qps.get_mut(&c.responder) {
                q.req.mark(psn);
            }
            let pmtu = first_pmtu(kind, bytes.len());
            if c.pmtu == 0 && pmtu != 0 {
                // Its FIRST response says the message's path MTU (`Context::pmtu`).
                let list = st.roce.reads.get_mut(&(requester, responder)).expect("found in it");
                if let Some(e) = list.iter_mut().find(|e| e.psn0 == c.psn0 && e.conn == c.conn && e.reth == c.reth) {
                    e.pmtu = pmtu;
                }
            }
            deliver_at(st, &c, pos, bytes, ctx, p)
        }
        None => {
            let Roce { read_orphans, orphan_bytes, .. } = &mut st.roce;
            let key = (requester, responder);
            let held = (read_orphans.contains_key(&key) || read_orphans.len() < MAX_READ_PAIRS)
                && hold(read_orphans.entry(key).or_default(), orphan_bytes, conn, psn, kind, bytes, ctx);
            if !held {
                unlinked(st, bytes.len(), Anomaly::ReadResponseWithoutRequest, p);
            }
        }
    }
}

/// End of input: gaps and leftovers.
pub fn finish(st: &mut RdmaState, p: &mut Parts) {
    // Raised once for each queue pair or address pair left holding packets (which one
    // `--threads` worker holds), not once a run, so that workers' counts add up to one
    // pipeline's.
    let (mut leftover, mut lists) = (0usize, 0u64);
    let (mut unparsed, mut sends) = (0usize, 0u64);
    let mut take = |o: &mut Orphans| {
        let n = o.list.iter().map(|h| h.bytes.len()).sum::<usize>();
        leftover += n;
        lists += u64::from(n > 0);
        *o = Orphans::default();
    };
    for q in st.roce.qps.values_mut() {
        st.stats.gaps += q.req.finish();
        take(&mut q.orphans);
        if let Some((_, b)) = q.send.take() {
            unparsed += b.len();
            sends += 1;
        }
    }
    st.roce.read_orphans.values_mut().for_each(&mut take);
    st.roce.read_orphans.clear();
    st.roce.orphan_bytes = 0;
    if leftover > 0 {
        p.anomalies.raise_n(crate::smbdirect::Anomaly::RdmaUnlinkedData, lists);
        st.stats.unlinked_bytes += leftover as u64;
        p.accounting.add(cat::RDMA_UNLINKED, leftover as u64);
    }
    if sends > 0 {
        p.anomalies.raise_n(Anomaly::SendIncomplete, sends);
        p.accounting.add(cat::SMB_UNPARSED, unparsed as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::Accounting;
    use crate::anomaly::Anomalies;
    use crate::frame::FrameRef;
    use crate::payload::send::SendRecord;
    use crate::rdma::ib::{opcode, Deth};
    use crate::smb2::state::SmbState;
    use crate::smb2::PayloadSink;
    use crate::smbdirect::records::NegotiateRequest;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const C: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));
    const S: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2));
    const QP_S: u32 = 0x22;
    /// Queue pairs of two connections between C (`QP_A`, `QP_B`) and S (`QP_SA`, `QP_SB`).
    const QP_A: u32 = 0x31;
    const QP_B: u32 = 0x32;
    const QP_SA: u32 = 0x41;
    const QP_SB: u32 = 0x42;

    struct Null;
    impl PayloadSink for Null {
        fn send(&mut self, _: SendRecord) {}
        fn complete(&mut self, _: u64, _: u64, _: u64) {}
    }

    struct Rig {
        st: RdmaState,
        smb: SmbState,
        an: Anomalies,
        acct: Accounting,
        fed: u64,
        frames: u64,
    }

    impl Rig {
        /// A run whose queue pair (S, QP_S) carries SMB Direct (adopted from its first Send).
        fn new() -> Self {
            let mut r = Rig { st: RdmaState::new(), smb: SmbState::new(), an: Anomalies::default(), acct: Accounting::default(), fed: 0, frames: 0 };
            r.open_from(C);
            assert!(r.st.roce.carries_smbdirect(C, S, QP_S));
            r
        }

        /// An SMB Direct Negotiate Request from `src` to (S, QP_S): that queue pair, whose
        /// peer is `src`, is adopted as SMB Direct (while the connection table has room).
        /// Returns the packet's length.
        fn open_from(&mut self, src: IpAddr) -> u64 {
            let neg = NegotiateRequest { min_version: 0x100, max_version: 0x100, credits_requested: 255, preferred_send_size: 1364, max_receive_size: 8192, max_fragmented_size: 1 << 20 };
            let pkt = ib::emit(opcode::SEND_ONLY, QP_S, 1, true, &[], &neg.emit());
            self.feed(src, S, &pkt);
            pkt.len() as u64
        }

        fn feed(&mut self, src: IpAddr, dst: IpAddr, bth: &[u8]) {
            self.frames += 1;
            self.fed += bth.len() as u64;
            let ctx = FrameCtx { frame: FrameRef { file: 0, number: self.frames }, ts_ns: self.frames, seq: 0 };
            let mut sink = Null;
            let mut p = Parts { anomalies: &mut self.an, accounting: &mut self.acct, smb: &mut self.smb, sink: &mut sink };
            self.st.roce(src, dst, bth, &ctx, &mut p);
        }

        fn finish(&mut self) {
            let mut sink = Null;
            let mut p = Parts { anomalies: &mut self.an, accounting: &mut self.acct, smb: &mut self.smb, sink: &mut sink };
            self.st.finish(&FrameCtx::default(), &mut p);
            assert_eq!(self.acct.total(), self.fed, "every byte accounted");
        }

        /// A run with no queue pair known.
        fn empty() -> Self {
            Rig { st: RdmaState::new(), smb: SmbState::new(), an: Anomalies::default(), acct: Accounting::default(), fed: 0, frames: 0 }
        }

        /// The connection queue pair `key` carries.
        fn conn_of(&self, key: QpKey) -> u64 {
            match self.st.roce.qps[&key].ulp {
                Ulp::Smbd { conn, .. } => conn,
                u => panic!("{u:?}"),
            }
        }

        /// No Read Response was left without its request or outside its message; the end.
        fn placed_every_response(&mut self) {
            for a in ["rdma.read_response_without_request", "rdma.data_outside_message"] {
                assert_eq!(self.an.get(a), 0, "{a}");
            }
            self.finish();
        }

        /// What the held packets of every QP and address pair charge, counted from the lists.
        fn held_charge(&self) -> usize {
            let roce = &self.st.roce;
            let lists = roce.qps.values().map(|q| &q.orphans).chain(roce.read_orphans.values());
            lists.flat_map(|o| o.list.iter()).map(|h| h.bytes.len() + HELD_RECORD).sum()
        }
    }

    /// Address `i` of a flood of spoofed sources.
    fn addr(i: u32) -> IpAddr {
        IpAddr::V6(Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(i)))
    }

    /// Read Responses without their request, from ever new responders (each S's SMB Direct
    /// peer on a queue pair of its own): each pair holds at most `MAX_ORPHAN_BYTES`, all of
    /// them together at most `MAX_ORPHAN_BYTES_TOTAL` (without the total, 30 pairs would hold
    /// 30 x 4 MiB); the rest is unlinked, every byte accounted.
    #[test]
    fn early_read_responses_are_held_within_both_bounds() {
        let mut r = Rig::new();
        let mut pkt = ib::emit(opcode::RDMA_READ_RESPONSE_ONLY, QP_S, 0, false, &[0; 4], &vec![0x5a; 256 << 10]);
        let mut psn = 10u32;
        for i in 0..30 {
            r.open_from(addr(i));
            for _ in 0..20 {
                pkt[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
                psn += 1;
                r.feed(addr(i), S, &pkt);
                assert!(r.st.roce.orphan_bytes <= MAX_ORPHAN_BYTES_TOTAL);
            }
            let pair = &r.st.roce.read_orphans[&(S, addr(i))];
            assert!(pair.bytes <= MAX_ORPHAN_BYTES, "pair {i}: {}", pair.bytes);
        }
        assert_eq!(r.st.roce.orphan_bytes, r.held_charge());
        assert!(r.st.roce.orphan_bytes > MAX_ORPHAN_BYTES_TOTAL - (512 << 10), "the total is used up: {}", r.st.roce.orphan_bytes);
        assert!(r.an.get("rdma.read_response_without_request") > 0);
        r.finish();
        assert_eq!(r.st.roce.orphan_bytes, 0);
    }

    /// One-byte RDMA Write Middles without their First: each is charged its record, so one QP
    /// holds at most `MAX_ORPHAN_BYTES / (1 + HELD_RECORD)` of them, not four million.
    #[test]
    fn tiny_held_packets_are_charged_their_record() {
        let mut r = Rig::new();
        let mut pkt = ib::emit(opcode::RDMA_WRITE_MIDDLE, QP_S, 0, false, &[], &[7]);
        let bound = MAX_ORPHAN_BYTES / (1 + HELD_RECORD);
        for psn in 2..(bound as u32 + 1002) {
            pkt[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
            r.feed(C, S, &pkt);
        }
        let held = r.st.roce.qps[&(S, QP_S, C)].orphans.list.len();
        assert_eq!(held, bound, "record size {HELD_RECORD}");
        assert_eq!(r.an.get("rdma.write_without_first"), 1000);
        r.finish();
    }

    /// Read Requests (and, in a second run, early Read Responses) from ever new source
    /// addresses to S's queue pair number. Each source's packets are a queue pair of their
    /// own (`QpKey`), which must carry SMB Direct for them to be remembered, so the address
    /// pairs remembered are at most the queue pairs (`MAX_QPS`, which is also
    /// `MAX_SMBD_CONNS` and `MAX_READ_PAIRS`): past it a source's packets are counted
    /// (`rdma.qp_table_full`, one a packet) and accounted as another upper layer's. The
    /// pairs' own bound (`rdma.read_table_full`) is a guard that this bound leaves unreached.
    #[test]
    fn read_pairs_are_bounded() {
        let extra = 50;
        let n = MAX_READ_PAIRS as u32 + extra;
        let mut r = Rig::new();
        let mut reth = Vec::new();
        Reth { va: 0x1000, r_key: 7, dma_length: 4096 }.emit(&mut reth);
        let req = ib::emit(opcode::RDMA_READ_REQUEST, QP_S, 0, true, &reth, &[]);
        for i in 0..n {
            r.open_from(addr(i));
            r.feed(addr(i), S, &req);
        }
        assert_eq!(r.st.conns.len(), MAX_SMBD_CONNS);
        // Every source that got a connection (the rig's C took one and sent no Read Request).
        assert_eq!(r.st.roce.reads.len(), MAX_SMBD_CONNS - 1);
        assert!(r.st.roce.reads.len() <= MAX_READ_PAIRS);
        assert_eq!(r.st.roce.qps.len(), MAX_QPS);
        assert_eq!(r.an.get("rdma.qp_table_full"), 2 * (u64::from(extra) + 1));
        assert_eq!(r.an.get("rdma.read_table_full"), 0);
        r.finish();

        let mut r = Rig::new();
        let mut resp = ib::emit(opcode::RDMA_READ_RESPONSE_ONLY, QP_S, 0, false, &[0; 4], &[1; 8]);
        let mut neg = 0;
        for (k, i) in (0..n).enumerate() {
            neg = r.open_from(addr(1 << 20 | i));
            resp[9..12].copy_from_slice(&(k as u32 + 5).to_be_bytes()[1..]);
            r.feed(addr(1 << 20 | i), S, &resp);
        }
        assert_eq!(r.st.roce.read_orphans.len(), MAX_SMBD_CONNS - 1);
        assert_eq!(r.an.get("rdma.qp_table_full"), 2 * (u64::from(extra) + 1));
        assert_eq!(r.an.get("rdma.read_response_without_request"), 0);
        assert_eq!(r.acct.get(cat::RDMA_OTHER_ULP), u64::from(extra + 1) * (resp.len() as u64 + neg));
        r.finish();
    }

    /// CM exchanges for SMB Direct (port 445) open connections while fewer than
    /// `MAX_SMBD_CONNS` are tracked; past it a REP is counted (`rdma.connection_table_full`)
    /// and opens none.
    #[test]
    fn cm_connections_are_bounded() {
        let mut r = Rig::new();
        let mut deth = Vec::new();
        Deth { q_key: ib::GSI_Q_KEY, src_qp: ib::QP1 }.emit(&mut deth);
        let extra = 20u32;
        let open = r.st.conns.len() as u32;
        for i in 0..(MAX_SMBD_CONNS as u32 - open + extra) {
            let (c, s) = (addr(2 * i), addr(2 * i + 1));
            let service_id = cm::SERVICE_ID_PS_TCP | 445;
            let req = cm::emit(&cm::Message::Request { local_comm_id: i, service_id, local_qpn: 0x100, starting_psn: 0 });
            r.feed(c, s, &ib::emit(opcode::UD_SEND_ONLY, ib::QP1, 0, false, &deth, &req));
            let rep = cm::emit(&cm::Message::Reply { local_comm_id: i + 1, remote_comm_id: i, local_qpn: 0x200, starting_psn: 0 });
            r.feed(s, c, &ib::emit(opcode::UD_SEND_ONLY, ib::QP1, 0, false, &deth, &rep));
        }
        assert_eq!(r.st.conns.len(), MAX_SMBD_CONNS);
        assert_eq!(r.an.get("rdma.connection_table_full"), u64::from(extra));
        r.finish();
    }

    /// A REP answers the REQ sent to its sender: a REQ from C to another address (here one
    /// whose header was damaged on the way to the capture) with the same IDs is not answered
    /// by S's REP, which is counted (`rdma.cm_reply_without_request`) and opens nothing. This
    /// is also what `--threads` sees, whose workers each hold the CM exchanges between one
    /// pair of addresses (found by a random-capture soak: one pipeline paired them, two did not).
    #[test]
    fn a_cm_reply_answers_only_a_request_sent_to_its_sender() {
        let mut r = Rig::new();
        let mut deth = Vec::new();
        Deth { q_key: ib::GSI_Q_KEY, src_qp: ib::QP1 }.emit(&mut deth);
        let ud = |m: &cm::Message| ib::emit(opcode::UD_SEND_ONLY, ib::QP1, 0, false, &deth, &cm::emit(m));
        let service_id = cm::SERVICE_ID_PS_TCP | 445;
        let (open, conns) = (r.st.conns.len(), r.st.stats.cm_connections);
        let other = addr(7);
        r.feed(C, other, &ud(&cm::Message::Request { local_comm_id: 9, service_id, local_qpn: 0x100, starting_psn: 0 }));
        r.feed(S, C, &ud(&cm::Message::Reply { local_comm_id: 10, remote_comm_id: 9, local_qpn: 0x200, starting_psn: 0 }));
        assert_eq!(r.an.get("rdma.cm_reply_without_request"), 1);
        assert_eq!((r.st.conns.len(), r.st.stats.cm_connections), (open, conns));
        // The same exchange between C and S opens a connection.
        r.feed(C, S, &ud(&cm::Message::Request { local_comm_id: 9, service_id, local_qpn: 0x100, starting_psn: 0 }));
        r.feed(S, C, &ud(&cm::Message::Reply { local_comm_id: 10, remote_comm_id: 9, local_qpn: 0x200, starting_psn: 0 }));
        assert_eq!(r.an.get("rdma.cm_reply_without_request"), 1);
        assert_eq!((r.st.conns.len(), r.st.stats.cm_connections), (open + 1, conns + 1));
        r.finish();
    }

    /// A Read Request with bytes after its RETH (its InfiniBand PktLen damaged, so the VCRC
    /// came with it; found by the random-capture soak): those bytes are malformed, counted,
    /// and every byte is accounted (they were lost before).
    #[test]
    fn a_read_request_with_payload_is_accounted() {
        let mut r = Rig::new();
        let mut reth = Vec::new();
        Reth { va: 0x1000, r_key: 7, dma_length: 4096 }.emit(&mut reth);
        r.feed(C, S, &ib::emit(opcode::RDMA_READ_REQUEST, QP_S, 0, true, &reth, &[0xab, 0xcd]));
        assert_eq!(r.an.get("rdma.read_request_with_payload"), 1);
        assert_eq!(r.acct.get(cat::MALFORMED), 2);
        assert_eq!(r.st.roce.reads[&(C, S)].len(), 1, "the request is kept");
        r.finish();
    }

    /// The packets of 5000-byte RDMA messages over a 4096-byte path MTU (a FIRST of 4096 and a
    /// LAST of 904), the next message's LAST seen before its FIRST (a mirror port reordered
    /// them; found by fuzz/differential.py's ground-truth check). Under a path MTU of 1024, the
    /// LAST would fit the message before (4 PSNs after its FIRST, at 4096 = 4 x 1024), where
    /// it used to be placed, leaving its own message incomplete; that message's FIRST said its
    /// path MTU is 4096, so the LAST is held until its own FIRST (a Write's) or its own Read
    /// Request comes, and placed there.
    #[test]
    fn a_last_packet_before_its_first_waits_for_its_own_message() {
        let reth = |va: u64| {
            let mut b = Vec::new();
            Reth { va, r_key: 7, dma_length: 5000 }.emit(&mut b);
            b
        };
        let (head, tail) = (vec![0x11; 4096], vec![0x22; 904]);
        let mut r = Rig::new();
        let held = |r: &Rig| r.st.roce.qps[&(S, QP_S, C)].orphans.list.len();
        r.feed(C, S, &ib::emit(opcode::RDMA_WRITE_FIRST, QP_S, 3, false, &reth(0x10000), &head));
        r.feed(C, S, &ib::emit(opcode::RDMA_WRITE_LAST, QP_S, 4, false, &[], &tail));
        r.feed(C, S, &ib::emit(opcode::RDMA_WRITE_LAST, QP_S, 7, false, &[], &tail));
        assert_eq!(held(&r), 1, "the early LAST waits for its FIRST");
        r.feed(C, S, &ib::emit(opcode::RDMA_WRITE_FIRST, QP_S, 6, false, &reth(0x20000), &head));
        assert_eq!(held(&r), 0, "and is placed when it comes");
        for a in ["rdma.write_without_first", "rdma.data_outside_message"] {
            assert_eq!(r.an.get(a), 0, "{a}");
        }
        r.finish();

        // Read Responses (S answering C's Read Requests on C's queue pair), the second
        // request seen after its LAST response.
        let mut r = Rig::new();
        let neg = NegotiateRequest { min_version: 0x100, max_version: 0x100, credits_requested: 255, preferred_send_size: 1364, max_receive_size: 8192, max_fragmented_size: 1 << 20 };
        r.feed(S, C, &ib::emit(opcode::SEND_ONLY, QP_S, 1, true, &[], &neg.emit()));
        assert!(r.st.roce.carries_smbdirect(S, C, QP_S));
        let aeth = [0u8; 4];
        let held = |r: &Rig| r.st.roce.read_orphans.get(&(C, S)).map_or(0, |o| o.list.len());
        r.feed(C, S, &ib::emit(opcode::RDMA_READ_REQUEST, QP_S, 3, true, &reth(0x10000), &[]));
        r.feed(S, C, &ib::emit(opcode::RDMA_READ_RESPONSE_FIRST, QP_S, 3, false, &aeth, &head));
        r.feed(S, C, &ib::emit(opcode::RDMA_READ_RESPONSE_LAST, QP_S, 4, false, &aeth, &tail));
        r.feed(S, C, &ib::emit(opcode::RDMA_READ_RESPONSE_LAST, QP_S, 7, false, &aeth, &tail));
        assert_eq!(held(&r), 1, "the early LAST waits for its request");
        r.feed(C, S, &ib::emit(opcode::RDMA_READ_REQUEST, QP_S, 6, true, &reth(0x20000), &[]));
        assert_eq!(held(&r), 0, "and is placed when it comes");
        r.feed(S, C, &ib::emit(opcode::RDMA_READ_RESPONSE_FIRST, QP_S, 6, false, &aeth, &head));
        for a in ["rdma.read_response_without_request", "rdma.data_outside_message"] {
            assert_eq!(r.an.get(a), 0, "{a}");
        }
        r.finish();
    }

    /// Two SMB Direct connections between the same two addresses (multichannel over one pair
    /// of NICs) whose queue pairs' PSN sequences lie close together: the LAST response to the
    /// first connection's Read Request (PSN 102) comes after the second's request, which
    /// starts at PSN 102. It is the first request's, not the second's, where it fits nowhere:
    /// found by the differential's ground truth (4-channel RoCE, 229 of 934 sends lost).
    #[test]
    fn a_read_response_goes_to_its_own_queue_pairs_request() {
        let reth = |va: u64| {
            let mut b = Vec::new();
            Reth { va, r_key: 9, dma_length: 3 * 1024 }.emit(&mut b);
            b
        };
        let neg = NegotiateRequest { min_version: 0x100, max_version: 0x100, credits_requested: 255, preferred_send_size: 1364, max_receive_size: 8192, max_fragmented_size: 1 << 20 };
        let aeth = [0u8; 4];
        let data = vec![0x33; 1024];
        let mut r = Rig::empty();
        // Each connection: the client's Send to the server's queue pair and the server's to
        // the client's pair them; then the server's Read Request (a WRITE's data) to the
        // client's queue pair.
        r.feed(C, S, &ib::emit(opcode::SEND_ONLY, QP_SA, 7, true, &[], &neg.emit()));
        r.feed(S, C, &ib::emit(opcode::SEND_ONLY, QP_A, 99, true, &[], &neg.emit()));
        r.feed(S, C, &ib::emit(opcode::RDMA_READ_REQUEST, QP_A, 100, true, &reth(0x10000), &[]));
        r.feed(C, S, &ib::emit(opcode::SEND_ONLY, QP_SB, 9, true, &[], &neg.emit()));
        r.feed(S, C, &ib::emit(opcode::SEND_ONLY, QP_B, 101, true, &[], &neg.emit()));
        r.feed(S, C, &ib::emit(opcode::RDMA_READ_REQUEST, QP_B, 102, true, &reth(0x20000), &[]));
        assert_ne!(r.conn_of((S, QP_SA, C)), r.conn_of((S, QP_SB, C)), "two connections");
        assert_eq!(r.conn_of((S, QP_SA, C)), r.conn_of((C, QP_A, S)));
        assert_eq!(r.conn_of((S, QP_SB, C)), r.conn_of((C, QP_B, S)));
        assert_eq!(r.st.roce.reads[&(S, C)].len(), 2);
        // The client answers on the server's queue pairs, A's LAST after B's request.
        r.feed(C, S, &ib::emit(opcode::RDMA_READ_RESPONSE_FIRST, QP_SA, 100, false, &aeth, &data));
        r.feed(C, S, &ib::emit(opcode::RDMA_READ_RESPONSE_MIDDLE, QP_SA, 101, false, &[], &data));
        r.feed(C, S, &ib::emit(opcode::RDMA_READ_RESPONSE_LAST, QP_SA, 102, false, &aeth, &data));
        assert!(r.st.roce.read_orphans.get(&(S, C)).is_none_or(|o| o.list.is_empty()), "A's LAST is placed in A's message");
        r.feed(C, S, &ib::emit(opcode::RDMA_READ_RESPONSE_FIRST, QP_SB, 102, false, &aeth, &data));
        r.feed(C, S, &ib::emit(opcode::RDMA_READ_RESPONSE_MIDDLE, QP_SB, 103, false, &[], &data));
        r.feed(C, S, &ib::emit(opcode::RDMA_READ_RESPONSE_LAST, QP_SB, 104, false, &aeth, &data));
        assert!(r.st.roce.read_orphans.get(&(S, C)).is_none_or(|o| o.list.is_empty()));
        assert_eq!(r.st.stats.gaps, 0);
        r.placed_every_response();
    }

    /// Connections inferred without a CM exchange can pair queue pairs wrongly: two
    /// channels' first Sends from the client before the server's, so the server's first Sends
    /// are paired with the latest half-open connection. The Read Response then goes to a queue
    /// pair of another connection than its request's, and still finds it (`find_read`).
    #[test]
    fn a_read_response_finds_its_request_across_a_wrongly_inferred_pairing() {
        let mut reth = Vec::new();
        Reth { va: 0x10000, r_key: 9, dma_length: 2 * 1024 }.emit(&mut reth);
        let neg = NegotiateRequest { min_version: 0x100, max_version: 0x100, credits_requested: 255, preferred_send_size: 1364, max_receive_size: 8192, max_fragmented_size: 1 << 20 };
        let data = vec![0x44; 1024];
        let mut r = Rig::empty();
        r.feed(C, S, &ib::emit(opcode::SEND_ONLY, QP_SA, 7, true, &[], &neg.emit()));
        r.feed(C, S, &ib::emit(opcode::SEND_ONLY, QP_SB, 9, true, &[], &neg.emit()));
        r.feed(S, C, &ib::emit(opcode::SEND_ONLY, QP_A, 99, true, &[], &neg.emit()));
        r.feed(S, C, &ib::emit(opcode::SEND_ONLY, QP_B, 199, true, &[], &neg.emit()));
        assert_ne!(r.conn_of((S, QP_SA, C)), r.conn_of((C, QP_A, S)), "paired wrongly");
        r.feed(S, C, &ib::emit(opcode::RDMA_READ_REQUEST, QP_A, 100, true, &reth, &[]));
        r.feed(C, S, &ib::emit(opcode::RDMA_READ_RESPONSE_FIRST, QP_SA, 100, false, &[0; 4], &data));
        r.feed(C, S, &ib::emit(opcode::RDMA_READ_RESPONSE_LAST, QP_SA, 101, false, &[0; 4], &data));
        assert!(r.st.roce.read_orphans.get(&(S, C)).is_none_or(|o| o.list.is_empty()), "placed in the request");
        r.placed_every_response();
    }

}
