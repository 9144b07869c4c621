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
use crate::smbdirect::{looks_like_smbdirect, SmbdConn, MAX_FRAGMENTED_SIZE};
use std::collections::VecDeque;
use crate::fasthash::FastMap as HashMap;
use std::net::IpAddr;
use super::Anomaly;

/// Queue pairs tracked; past this new QPs are not analysed.
pub const MAX_QPS: usize = 65_536;
/// RDMA Write / Read contexts kept per QP (IBTA limits outstanding reads to a few dozen).
const MAX_CONTEXTS: usize = 128;
/// Bytes of packets held while their context is unknown, per QP / address pair.
const MAX_ORPHAN_BYTES: usize = 4 << 20;
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
    responder: (IpAddr, u32),
}

struct Held {
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

#[derive(Default)]
pub struct Roce {
    qps: HashMap<(IpAddr, u32), Qp>,
    /// Read Requests by (requester, responder) address.
    reads: HashMap<(IpAddr, IpAddr), VecDeque<Context>>,
    read_orphans: HashMap<(IpAddr, IpAddr), Orphans>,
    /// CM REQs awaiting their REP: (requester address, Local Communication ID) → (QPN, port).
    cm_pending: HashMap<(IpAddr, u32), (u32, Option<u16>)>,
    /// Inferred connections whose reverse QP is not known yet: (conn, known end, other address).
    half_open: Vec<(u64, IpAddr, IpAddr)>,
    next_conn: u64,
}

impl Roce {
    /// Whether the receiving QP (`dst`, `qpn`) is known to carry SMB Direct.
    pub fn carries_smbdirect(&self, dst: IpAddr, qpn: u32) -> bool {
        self.qps.get(&(dst, qpn)).is_some_and(|q| matches!(q.ulp, Ulp::Smbd { .. }))
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
                roce.cm_pending.insert((src, local_comm_id), (local_qpn, m.tcp_port()));
            }
        }
        cm::Message::Reply { remote_comm_id, local_qpn, .. } => {
            st.stats.infiniband.cm_replies += 1;
            let Some((req_qpn, port)) = roce.cm_pending.remove(&(dst, remote_comm_id)) else {
                p.anomalies.raise(Anomaly::CmReplyWithoutRequest);
                return;
            };
            let smbd = port.is_some_and(|pt| SMBD_CM_PORTS.contains(&pt));
            let (client, server) = ((dst, req_qpn), (src, local_qpn));
            if smbd {
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

fn set_ulp(roce: &mut Roce, qps: &mut u64, key: (IpAddr, u32), ulp: Ulp) {
    if let Some(q) = roce.qps.get_mut(&key) {
        q.ulp = ulp;
    } else if roce.qps.len() < MAX_QPS {
        *qps += 1;
        roce.qps.insert(key, Qp::new(ulp));
    }
}

/// The first Send of an unknown QP that is SMB Direct: pair it with the reverse direction.
fn adopt(st: &mut RdmaState, src: IpAddr, key: (IpAddr, u32), ctx: &FrameCtx) -> Ulp {
    let roce = &mut st.roce;
    let ulp = if let Some(i) = roce.half_open.iter().rposition(|&(_, known, other)| known == src && other == key.0) {
        let (conn, _, _) = roce.half_open.remove(i);
        Ulp::Smbd { conn, side: 1 }
    } else {
        let id = conn_id(roce, ctx);
        st.stats.smbdirect_connections += 1;
        st.stats.inferred_connections += 1;
        st.conns.insert(id, SmbdConn::new(id, [(key.0, key.1 as u16), (src, 0)], None));
        if roce.half_open.len() >= 1024 {
            roce.half_open.remove(0);
        }
        roce.half_open.push((id, key.0, src));
        Ulp::Smbd { conn: id, side: 0 }
    };
    if let Some(q) = roce.qps.get_mut(&key) {
        q.ulp = ulp;
    }
    ulp
}

#[allow(clippy::too_many_arguments)]
fn on_rc(st: &mut RdmaState, src: IpAddr, dst: IpAddr, r: &ib::Repr<'_>, len: usize, ctx: &FrameCtx, p: &mut Parts) {
    let key = (dst, r.dest_qp);
    if !st.roce.qps.contains_key(&key) {
        if st.roce.qps.len() >= MAX_QPS {
            p.anomalies.raise(Anomaly::QpTableFull);
            return account_all(p, cat::RDMA_OTHER_ULP, len);
        }
        st.stats.qps += 1;
        st.roce.qps.insert(key, Qp::new(Ulp::Unknown));
    }
    let mut ulp = st.roce.qps[&key].ulp;
    if ulp == Ulp::Unknown && matches!(r.kind, Kind::Send { first: true, .. }) && looks_like_smbdirect(r.payload) {
        ulp = adopt(st, src, key, ctx);
    } else if ulp == Ulp::Unknown
        && matches!(r.kind, Kind::ReadRequest | Kind::RdmaWrite { first: true, .. })
        && st.roce.half_open.iter().any(|&(_, known, other)| known == src && other == dst)
    {
        // The reverse QP of a connection inferred from its first Send: the server's first RDMA
        // Read Request (or Write) for a WRITE (READ) reaches it before any Send does.
        ulp = adopt(st, src, key, ctx);
    }
    let Ulp::Smbd { conn, side } = ulp else {
        return account_all(p, cat::RDMA_OTHER_ULP, len);
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
            let Some(reth) = r.reth else { return };
            let c = Context { psn0: r.psn, reth, conn, from: side, responder: key };
            let list = st.roce.reads.entry((src, dst)).or_default();
            if list.len() >= MAX_CONTEXTS {
                list.pop_front();
            }
            list.push_back(c);
            // Responses that came first.
            let held = st.roce.read_orphans.get_mut(&(src, dst)).map(std::mem::take).unwrap_or_default();
            for h in held.list {
                read_response(st, src, dst, h.psn, h.kind, &h.bytes, &h.ctx, p);
            }
        }
        Kind::ReadResponse { .. } => read_response(st, dst, src, r.psn, r.kind, r.payload, ctx, p),
        Kind::RdmaWrite { first, .. } => {
            if first {
                let Some(reth) = r.reth else { return };
                let c = Context { psn0: r.psn, reth, conn, from, responder: key };
                let qp = st.roce.qps.get_mut(&key).expect("present");
                if qp.writes.len() >= MAX_CONTEXTS {
                    qp.writes.pop_front();
                }
                qp.writes.push_back(c);
                deliver(st, &c, r.psn, r.kind, r.payload, ctx, p);
                let held = std::mem::take(&mut st.roce.qps.get_mut(&key).expect("present").orphans);
                for h in held.list {
                    write_packet(st, key, h.psn, h.kind, &h.bytes, &h.ctx, p);
                }
            } else {
                write_packet(st, key, r.psn, r.kind, r.payload, ctx, p);
            }
        }
        _ => account_all(p, cat::RDMA_OTHER_ULP, r.payload.len()),
    }
}

#[allow(clippy::too_many_arguments)]
fn on_send_packet(st: &mut RdmaState, key: (IpAddr, u32), conn: u64, from: usize, first: bool, last: bool, r: &ib::Repr<'_>, ctx: &FrameCtx, p: &mut Parts) {
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
    // IB path MTUs are 256..4096, powers of two; every packet but the last carries one PMTU.
    let pmtu_ok = |m: u64| m.is_power_of_two() && (MIN_PMTU..=4096).contains(&m);
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

fn hold(o: &mut Orphans, psn: u32, kind: Kind, bytes: &[u8], ctx: &FrameCtx) -> bool {
    if o.bytes + bytes.len() > MAX_ORPHAN_BYTES {
        return false;
    }
    o.bytes += bytes.len();
    o.list.push_back(Held { psn, kind, bytes: bytes.to_vec(), ctx: *ctx });
    true
}

fn write_packet(st: &mut RdmaState, key: (IpAddr, u32), psn: u32, kind: Kind, bytes: &[u8], ctx: &FrameCtx, p: &mut Parts) {
    let qp = st.roce.qps.get_mut(&key).expect("present");
    match find(&qp.writes, psn, kind, bytes.len()) {
        Some((c, pos)) => deliver_at(st, &c, pos, bytes, ctx, p),
        None => {
            if !hold(&mut qp.orphans, psn, kind, bytes, ctx) {
                unlinked(st, bytes.len(), Anomaly::WriteWithoutFirst, p);
            }
        }
    }
}

/// A Read Response packet sent by `responder` to `requester`.
#[allow(clippy::too_many_arguments)]
fn read_response(st: &mut RdmaState, requester: IpAddr, responder: IpAddr, psn: u32, kind: Kind, bytes: &[u8], ctx: &FrameCtx, p: &mut Parts) {
    let found = st.roce.reads.get(&(requester, responder)).and_then(|l| find(l, psn, kind, bytes.len()));
    match found {
        Some((c, pos)) => {
            // The response PSNs are the request's: they fill the request stream's window.
            if let Some(q) = st.roce.qps.get_mut(&c.responder) {
                q.req.mark(psn);
            }
            deliver_at(st, &c, pos, bytes, ctx, p)
        }
        None => {
            let o = st.roce.read_orphans.entry((requester, responder)).or_default();
            if !hold(o, psn, kind, bytes, ctx) {
                unlinked(st, bytes.len(), Anomaly::ReadResponseWithoutRequest, p);
            }
        }
    }
}

/// End of input: gaps and leftovers.
pub fn finish(st: &mut RdmaState, p: &mut Parts) {
    let mut leftover = 0usize;
    let mut unparsed = 0usize;
    for q in st.roce.qps.values_mut() {
        st.stats.gaps += q.req.finish();
        leftover += q.orphans.list.iter().map(|h| h.bytes.len()).sum::<usize>();
        q.orphans = Orphans::default();
        if let Some((_, b)) = q.send.take() {
            unparsed += b.len();
        }
    }
    for o in st.roce.read_orphans.values_mut() {
        leftover += o.list.iter().map(|h| h.bytes.len()).sum::<usize>();
        *o = Orphans::default();
    }
    unlinked(st, leftover, crate::smbdirect::Anomaly::RdmaUnlinkedData, p);
    if unparsed > 0 {
        p.anomalies.raise(Anomaly::SendIncomplete);
        p.accounting.add(cat::SMB_UNPARSED, unparsed as u64);
    }
}
