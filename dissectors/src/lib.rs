//! smbwire engine.
//!
//! The pipeline, one stage per module:
//! `capture` (pcap/pcapng readers, merge by time) → `wire` (link, IP, TCP/UDP views)
//! → `tcp` (flow table, per-direction reassembly) → `smb2` (NetBIOS framing, SMB2/3 records,
//! session/tree/file state) → `payload` (streaming block digests) → `dedupe` (sliding-window
//! index, duplicate and class attribution) → `report` (the serialisable result).
//! `pipeline` wires the stages together; `python` exposes it as `smbwire._core`.

pub mod accounting;
pub mod attribute;
pub mod anomaly;
pub mod capture;
pub mod dedupe;
pub mod fasthash;
pub mod findings;
pub mod frame;
pub mod ledger;
pub mod live;
pub mod payload;
pub mod pipeline;
pub mod rdma;
pub mod report;
pub mod smb2;
pub mod smbdirect;
pub mod tcp;
pub mod wire;

