//! RDMA transports that carry SMB Direct: InfiniBand transport headers over RoCEv2 (UDP 4791)
//! and RoCEv1 (EtherType 0x8915), and iWARP (MPA/DDP/RDMAP over TCP).
//!
//! - `ib`, `cm`: wire records of the IB transport (BTH and extension headers) and CM MADs.
//! - `mpa`, `ddp`: wire records of iWARP.
//! - `psn`: per-QP PSN window (retransmissions, gaps).
//! - `roce`: queue pairs, their upper layer (from CM or inferred), RDMA Read/Write contexts.
//! - `iwarp`: the MPA stream consumer riding TCP reassembly.
//!
//! SMB Direct itself (messages, reassembly, payload linking) is in `crate::smbdirect`.
//! `RdmaState` is the `rdma` part of `context::Shared`; `RdmaStats` (the report's `"rdma"`
//! section) is defined in `smbdirect::stats`, the lowest stage that counts into it.

pub mod anomaly;
pub mod cm;
pub mod ddp;
pub mod ib;
pub mod iwarp;
pub mod mpa;
pub mod psn;
pub mod roce;

pub use anomaly::Anomaly;

pub use crate::smbdirect::stats::{InfinibandStats, IwarpStats, RdmaStats, SmbDirectStats};

use crate::frame::FrameCtx;
use crate::smb2::Parts;
use crate::smbdirect::SmbdConn;
use std::collections::BTreeMap;
use crate::fasthash::FastMap as HashMap;

/// Counts one packet under an opcode key without allocating once the key exists (this runs
/// for every RDMA packet). `hex`: "0x03" (iWARP RDMAP) rather than "3" (IB BTH, as tshark).
pub(crate) fn count_opcode(map: &mut BTreeMap<String, u64>, op: u8, hex: bool) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 4];
    let key: &[u8] = if hex {
        buf = [b'0', b'x', HEX[usize::from(op >> 4)], HEX[usize::from(op & 15)]];
        &buf
    } else {
        let (h, t, o) = (op / 100, op / 10 % 10, op % 10);
        let n = if h > 0 { 3 } else if t > 0 { 2 } else { 1 };
        buf[..3].copy_from_slice(&[b'0' + h, b'0' + t, b'0' + o]);
        &buf[3 - n..3]
    };
    let key = std::str::from_utf8(key).expect("ascii digits");
    match map.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            map.insert(key.to_owned(), 1);
        }
    }
}

/// RDMA state of a run, the `rdma` part of `context::Shared`.
#[derive(Default)]
pub struct RdmaState {
    pub stats: RdmaStats,
    /// SMB Direct connections by id.
    pub conns: HashMap<u64, SmbdConn>,
    /// MPA Request/Reply frames of iWARP connections, by conn id and sending side.
    pub mpa: HashMap<u64, [Option<mpa::Frame>; 2]>,
    pub roce: roce::Roce,
    /// iWARP RDMA Read Requests by conn id (Read Responses are mapped back through them).
    pub iwarp_reads: HashMap<u64, std::collections::VecDeque<ddp::ReadRequest>>,
    /// iWARP connections: directions closed so far.
    pub iwarp_closed: HashMap<u64, u8>,
}

pub use crate::payload::send::ROCE_CONN_BASE;

impl RdmaState {
    pub fn new() -> Self {
        RdmaState::default()
    }

    /// A RoCE packet (BTH through ICRC) from `src` to `dst`; accounts every byte of `bth`.
    pub fn roce(&mut self, src: std::net::IpAddr, dst: std::net::IpAddr, bth: &[u8], ctx: &FrameCtx, p: &mut Parts) {
        roce::packet(self, src, dst, bth, ctx, p);
    }

    /// A native InfiniBand packet (BTH through ICRC) whose Send carries IPoIB: its IPoIB
    /// packet (encapsulation header first), the IB packet counted. `None` for anything else
    /// (including Sends on queue pairs known to carry SMB Direct), which goes to `roce`.
    pub fn ipoib<'a>(&mut self, src: std::net::IpAddr, dst: std::net::IpAddr, bth: &'a [u8]) -> Option<&'a [u8]> {
        let r = ib::Repr::parse(bth).ok()?;
        let send_only = matches!(r.kind, ib::Kind::Send { first: true, last: true } | ib::Kind::UdSend);
        if !send_only || r.dest_qp <= ib::QP1 || !crate::wire::ipoib::looks_like_ipoib(r.payload) {
            return None;
        }
        if self.roce.carries_smbdirect(src, dst, r.dest_qp) {
            return None;
        }
        self.stats.infiniband.packets += 1;
        self.stats.infiniband.ipoib_packets += 1;
        count_opcode(&mut self.stats.infiniband.bth_opcodes, r.opcode, false);
        Some(r.payload)
    }

    /// End of input: close every connection (open transfers end, leftovers are accounted).
    pub fn finish(&mut self, ctx: &FrameCtx, p: &mut Parts) {
        roce::finish(self, p);
        let mut ids: Vec<u64> = self.conns.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            p.sink.mark(crate::context::Mark { phase: crate::context::phase::FINISH_RDMA, a: id, b: 0 });
            if let Some(mut c) = self.conns.remove(&id) {
                c.close(ctx, p, &mut self.stats);
            }
        }
    }
}

#[cfg(test)]
mod tests;
