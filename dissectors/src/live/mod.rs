//! Live capture sources for `smbwire live`.
//!
//! Two backends deliver the same thing — Ethernet frames of storage traffic with their
//! wire length and a wall-clock timestamp — plus exact counters:
//! - `ebpf`: a TCX ingress program (`bpf/smbwire.bpf.c`) filters in the kernel, keeps exact
//!   per-flow counters and copies matching frames into a BPF ring buffer. Its bpf_link dies
//!   with the process, so nothing stays attached even after SIGKILL.
//! - `afpacket`: an AF_PACKET socket with a TPACKET_V3 mmap ring; the same matching rules
//!   run in user space (`classify`).
//!
//! `open` tries eBPF first and falls back to AF_PACKET, saying why.

pub mod classify;
pub mod flows;

#[cfg(target_os = "linux")]
pub mod afpacket;
#[cfg(target_os = "linux")]
pub mod ebpf;
#[cfg(target_os = "linux")]
pub mod rotate;
#[cfg(target_os = "linux")]
pub mod session;
#[cfg(target_os = "linux")]
mod sys;

use std::io;

use serde::Serialize;

use crate::capture::RawFrame;
pub use flows::{FlowKey, FlowStat};

/// Default SMB ports: 445 (direct TCP transport, MS-SMB2 2.1) and 5445 (SMB Direct over
/// iWARP, MS-SMBD 2.1).
pub const DEFAULT_TCP_PORTS: [u16; 2] = [445, 5445];
/// RoCEv2 UDP destination port (IBTA RoCEv2 annex A17).
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// RoCEv1 EtherType (IBTA RoCE annex A16).
pub const ETHERTYPE_ROCEV1: u16 = 0x8915;
/// Largest number of bytes copied from one frame: a whole GRO/GSO frame (64 KiB, the
/// default gro_max_size) plus L2 headers (`SMBWIRE_MAX_SNAP`), so coalescing never cuts
/// SMB payload off.
pub const MAX_SNAPLEN: u32 = 66048;
/// How many flows `LiveStats::flows` lists (largest by bytes first).
pub const STATS_TOP_FLOWS: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    Ebpf,
    AfPacket,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Ebpf => "ebpf",
            Backend::AfPacket => "af-packet",
        }
    }
}

#[derive(Clone, Debug)]
pub struct LiveOptions {
    /// TCP ports whose traffic is storage traffic (either side of the connection).
    pub tcp_ports: Vec<u16>,
    /// Bytes copied from each matching frame, at most `MAX_SNAPLEN`.
    pub snaplen: u32,
    /// eBPF ring buffer size in bytes (a power of two, at least one page).
    pub ring_bytes: u32,
    /// AF_PACKET TPACKET_V3 block size in bytes (a multiple of the page size).
    pub block_size: u32,
    /// AF_PACKET TPACKET_V3 number of blocks.
    pub block_count: u32,
    /// AF_PACKET: a block is handed to user space after this long even when not full.
    pub block_timeout_ms: u32,
    /// Put the interface in promiscuous mode for as long as the source is open.
    pub promisc: bool,
    /// Fail instead of falling back to AF_PACKET.
    pub require_ebpf: bool,
    /// Skip eBPF (tests, or kernels where it misbehaves).
    pub force_af_packet: bool,
}

impl Default for LiveOptions {
    fn default() -> Self {
        LiveOptions {
            tcp_ports: DEFAULT_TCP_PORTS.to_vec(),
            snaplen: MAX_SNAPLEN,
            ring_bytes: 32 << 20,
            block_size: 1 << 20,
            block_count: 64,
            block_timeout_ms: 50,
            promisc: true,
            require_ebpf: false,
            force_af_packet: false,
        }
    }
}

/// Counters of a live source since it was opened.
///
/// `packets_seen`/`bytes_seen` count every wire packet that reached the capture point;
/// `*_matched` the storage packets among them. A frame GRO or a peer's GSO coalesced counts as
/// its segments, each with its own headers (`frames_matched` counts the frames themselves:
/// with eBPF, `frames_matched = packets_delivered + ring_drops + copy_errors`). With eBPF
/// these are exact wire totals even when user space falls behind. With AF_PACKET frames the
/// kernel dropped are in `kernel_drops` and not in the other counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LiveStats {
    /// Frames the kernel dropped before smbwire had them, since the source was opened:
    /// `interface_drops` (both backends) plus, with AF_PACKET, the frames the socket's ring
    /// had no room for (`tp_drops`). With eBPF the ring's own drops are `ring_drops`.
    pub kernel_drops: u64,
    /// The interface's receive drop counters since the source was opened (sysfs
    /// `rx_dropped + rx_missed_errors`): frames the NIC had no room for and frames a full
    /// receive backlog refused, before the capture point. The kernel also counts in
    /// `rx_dropped` frames of a protocol no handler on this host takes (e.g. LLDP without
    /// lldpd, RoCEv1 without an RDMA stack), after the eBPF hook has counted and copied
    /// them; on such a port this is an upper bound of lost frames. An AF_PACKET socket takes
    /// every protocol, so then no frame is counted that way. `None`: unreadable (another
    /// network namespace's /sys).
    pub interface_drops: Option<u64>,
    pub ring_drops: u64,
    /// eBPF: matched frames whose bytes could not be copied, or malformed ring records.
    pub copy_errors: u64,
    pub packets_seen: u64,
    pub bytes_seen: u64,
    pub packets_matched: u64,
    pub bytes_matched: u64,
    pub frames_matched: u64,
    /// Frames handed to the caller by `next_batch`.
    pub packets_delivered: u64,
    /// Number of flows with exact counters.
    pub flow_count: u64,
    /// The largest flows by bytes, at most `STATS_TOP_FLOWS`.
    pub flows: Vec<FlowStat>,
}

pub trait LiveSource {
    /// Waits up to `timeout_ms` (negative: forever, 0: no wait) for frames and hands each
    /// one to `f` (Ethernet, frame numbers from 1, wall-clock ns). Returns how many.
    fn next_batch(&mut self, timeout_ms: i32, f: &mut dyn FnMut(RawFrame<'_>))
        -> io::Result<usize>;
    fn stats(&self) -> LiveStats;
}

/// What `open` returns: the source, its backend, and why eBPF was not used (if it was not).
pub type Opened = (Box<dyn LiveSource>, Backend, Option<String>);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LiveError {
    /// The process lacks a capability; names it.
    Permission {
        capability: &'static str,
        what: String,
    },
    NoSuchInterface(String),
    /// The backend cannot run here (kernel, build).
    Unsupported(String),
    Io(String),
}

impl std::fmt::Display for LiveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LiveError::Permission { capability, what } => {
                write!(
                    f,
                    "permission denied: {what} needs {capability} (run as root or grant it)"
                )
            }
            LiveError::NoSuchInterface(i) => write!(f, "no such network interface: {i}"),
            LiveError::Unsupported(why) => write!(f, "live capture unsupported: {why}"),
            LiveError::Io(why) => write!(f, "live capture failed: {why}"),
        }
    }
}

impl std::error::Error for LiveError {}

/// Opens `iface`: eBPF first, AF_PACKET if that fails (unless `require_ebpf`). The third
/// value says why eBPF was not used, when it was not.
#[cfg(target_os = "linux")]
pub fn open(iface: &str, opts: &LiveOptions) -> Result<Opened, LiveError> {
    let ifindex = sys::ifindex(iface)?;
    if opts.snaplen == 0 || opts.snaplen > MAX_SNAPLEN {
        return Err(LiveError::Io(format!(
            "snap length must be 1..={MAX_SNAPLEN}"
        )));
    }
    let why = if opts.force_af_packet {
        "AF_PACKET forced".to_string()
    } else {
        match ebpf::EbpfSource::open(iface, ifindex, opts) {
            Ok(src) => return Ok((Box::new(src), Backend::Ebpf, None)),
            Err(e) if opts.require_ebpf => return Err(e),
            Err(e) => e.to_string(),
        }
    };
    let src = afpacket::AfPacketSource::open(iface, ifindex, opts)?;
    Ok((Box::new(src), Backend::AfPacket, Some(why)))
}

#[cfg(not(target_os = "linux"))]
pub fn open(_iface: &str, _opts: &LiveOptions) -> Result<Opened, LiveError> {
    Err(LiveError::Unsupported("live capture needs Linux".into()))
}
