//! Live capture sources for `smbwire live`.
//!
//! Two backends deliver the same thing — Ethernet frames of storage traffic with their
//! wire length and a wall-clock timestamp — plus exact counters:
//! - `ebpf`: a program (`bpf/smbwire.bpf.c`) at the TCX ingress hook (Linux 6.6+) or the XDP
//!   hook (Linux 5.9+) filters in the kernel, keeps exact per-flow counters and copies
//!   matching frames into a BPF ring buffer. Its bpf_link dies with the process, so nothing
//!   stays attached even after SIGKILL.
//! - `afpacket`: an AF_PACKET socket with a TPACKET_V3 mmap ring; the same matching rules
//!   run in user space (`classify`).
//!
//! `open` tries eBPF first (the hooks `hook_plan` picks for this kernel, in order) and falls
//! back to AF_PACKET, saying why. After setup `privs::drop_thread` takes every capability
//! away (see there for what remains and why).

pub mod classify;
pub mod flows;

#[cfg(target_os = "linux")]
pub mod afpacket;
#[cfg(target_os = "linux")]
pub mod ebpf;
#[cfg(target_os = "linux")]
pub mod privs;
#[cfg(target_os = "linux")]
pub mod rotate;
#[cfg(target_os = "linux")]
pub mod session;
#[cfg(target_os = "linux")]
mod sys;

use std::io;
use std::sync::Arc;

use serde::Serialize;

use crate::capture::RawFrame;
use crate::parallel::Lease;
pub use flows::{FlowKey, FlowStat};

/// Default SMB ports: 445 (direct TCP transport, MS-SMB2 2.1) and 5445 (SMB Direct over
/// iWARP, MS-SMBD 2.1).
pub const DEFAULT_TCP_PORTS: [u16; 2] = [445, 5445];

/// The TCP ports a capture matches when the user names `extra` ones: they add to the defaults
/// (a user who adds 8445 still sees 445), in that order, each once.
pub fn tcp_ports_with(extra: &[u16]) -> Vec<u16> {
    let mut ports = DEFAULT_TCP_PORTS.to_vec();
    for p in extra {
        if !ports.contains(p) {
            ports.push(*p);
        }
    }
    ports
}
/// RoCEv2 UDP destination port (IBTA RoCEv2 annex A17).
pub const ROCEV2_UDP_PORT: u16 = crate::abi::u16_of(crate::abi::SMBWIRE_ROCEV2_UDP_PORT);
/// RoCEv1 EtherType (IBTA RoCE annex A16).
pub const ETHERTYPE_ROCEV1: u16 = crate::abi::u16_of(crate::abi::SMBWIRE_ETH_P_ROCEV1);
/// Largest number of bytes copied from one frame: a whole GRO/GSO frame (64 KiB, the
/// default gro_max_size) plus L2 headers (`SMBWIRE_MAX_SNAP`), so coalescing never cuts
/// SMB payload off.
pub const MAX_SNAPLEN: u32 = crate::abi::u32_of(crate::abi::SMBWIRE_MAX_SNAP);
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

/// Where the eBPF program is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Hook {
    /// TCX ingress (Linux 6.6+): after GRO, on socket buffers; sees a stripped VLAN tag and
    /// the GRO/GSO segment count.
    Tcx,
    /// XDP (bpf_link since Linux 5.9): in the driver before any socket buffer (native), or
    /// on socket buffers after GRO where the driver has no XDP (generic).
    Xdp,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::Tcx => "tcx",
            Hook::Xdp => "xdp",
        }
    }

    /// The kernel release (major, minor) that first has this hook with a bpf_link.
    pub fn since(self) -> (u32, u32) {
        match self {
            Hook::Tcx => (6, 6),
            Hook::Xdp => (5, 9),
        }
    }
}

/// `--hook`: a hook, or `Auto` (what the kernel offers, TCX first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HookChoice {
    #[default]
    Auto,
    Only(Hook),
}

impl std::str::FromStr for HookChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(HookChoice::Auto),
            "tcx" => Ok(HookChoice::Only(Hook::Tcx)),
            "xdp" => Ok(HookChoice::Only(Hook::Xdp)),
            _ => Err(format!("hook must be auto, tcx or xdp, got {s:?}")),
        }
    }
}

/// The hook in use, for the status line and the JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HookInfo {
    pub hook: Hook,
    /// XDP only: "native", "generic" (or "offloaded", "unknown").
    pub xdp_mode: Option<&'static str>,
    /// XDP only: how a matched frame is copied into its record: "helper"
    /// (`bpf_xdp_load_bytes`, Linux 5.18+) or "loop" (8-byte loads, older kernels).
    pub xdp_copy: Option<&'static str>,
    /// How a matched frame reaches its ring: "direct" (copied once, into a ring reservation
    /// of a size class) or "staged" (into a per-CPU slot, then copied into the ring).
    pub ring_copy: &'static str,
}

/// (major, minor) of a kernel release string such as "6.1.0-18-amd64"; None if unparsable.
pub fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// The hooks to try, in order, for `choice` on a kernel `release`, and why a hook was left
/// out. Auto: TCX on 6.6+, then XDP on 5.9+; a release that cannot be parsed (or a
/// distribution kernel that backports, e.g. RHEL's) is tried with both, since a failed
/// attach costs nothing and falls through. An explicit hook is tried whatever the release.
pub fn hook_plan(choice: HookChoice, release: &str) -> (Vec<Hook>, Vec<String>) {
    let all = [Hook::Tcx, Hook::Xdp];
    match choice {
        HookChoice::Only(h) => (vec![h], Vec::new()),
        HookChoice::Auto => {
            let Some(have) = parse_release(release) else {
                return (all.to_vec(), Vec::new());
            };
            let mut skipped = Vec::new();
            let mut plan = Vec::new();
            for h in all {
                if have >= h.since() {
                    plan.push(h);
                } else {
                    let (ma, mi) = h.since();
                    skipped.push(format!(
                        "{} needs kernel {ma}.{mi} or later, this is {release}",
                        h.name()
                    ));
                }
            }
            (plan, skipped)
        }
    }
}

/// Tries `plan` in order with `attach` and returns the first source that attaches. A
/// permission error ends the search (every hook needs the same privileges); other failures
/// fall through to the next hook. The error of a failed search says what each hook said.
pub fn attach_first<T>(
    plan: &[Hook],
    skipped: &[String],
    mut attach: impl FnMut(Hook) -> Result<T, LiveError>,
) -> Result<(T, Hook), LiveError> {
    let mut why: Vec<String> = skipped.to_vec();
    let mut last = None;
    for &h in plan {
        match attach(h) {
            Ok(src) => return Ok((src, h)),
            Err(e @ LiveError::Permission { .. }) => return Err(e),
            Err(LiveError::Unsupported(w)) => {
                why.push(w.clone());
                last = Some(LiveError::Unsupported(w));
            }
            Err(e) => return Err(e),
        }
    }
    Err(match (why.len(), last) {
        (1, Some(e)) => e,
        _ if why.is_empty() => LiveError::Unsupported("no eBPF hook to try".into()),
        _ => LiveError::Unsupported(why.join("; ")),
    })
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
    /// Which eBPF hook (`--hook`).
    pub hook: HookChoice,
    /// XDP: drop storage frames after counting and copying them (`--xdp-drop`).
    pub xdp_drop: bool,
    /// Capture queues (`--queues`): eBPF ring buffers, or AF_PACKET sockets of one fanout
    /// group, each taking whole connections (a symmetric hash of the connection). Frames are
    /// read from all of them in capture time order (`pick_queue`). At least 1, at most
    /// `MAX_QUEUES`; `ring_bytes` and the AF_PACKET blocks are per queue.
    pub queues: u32,
    /// Shed whole connections when the capture queues fill up (`--no-shed` turns it off:
    /// the queues then overflow and drop scattered frames, counted as ring drops). The
    /// session sheds (`session::Shedder`); the eBPF program also sheds a connection itself
    /// when its frame finds its ring nearly full (`smbwire_config.shed_at`), for when the
    /// session is starved of CPU and does not get to look.
    pub shed: bool,
}

/// Most capture queues (`SMBWIRE_MAX_RINGS` in bpf/smbwire.h).
pub const MAX_QUEUES: u32 = crate::abi::u32_of(crate::abi::SMBWIRE_MAX_RINGS);

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
            hook: HookChoice::Auto,
            xdp_drop: false,
            queues: 1,
            shed: true,
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
    /// Capture queues in use (`LiveOptions::queues`).
    pub queues: u32,
    /// Storage frames (wire bytes) of shed connections that the capture point did not copy
    /// (eBPF: the kernel program skips connections in its shed map; their per-flow and total
    /// counters stay exact). Frames of a shed connection that were already queued are counted
    /// by the session (`live.shed`), not here.
    pub shed_frames: u64,
    pub shed_bytes: u64,
    /// Connections the capture point shed itself, its queue nearly full (eBPF:
    /// `smbwire_config.shed_at`), whether or not the session saw the frame it did so at.
    pub shed_chosen: u64,
    /// Number of flows with exact counters.
    pub flow_count: u64,
    /// The largest flows by bytes, at most `STATS_TOP_FLOWS`.
    pub flows: Vec<FlowStat>,
}

/// What a source says of a frame it hands on, beside its bytes (`LiveSource::next_batch`).
#[derive(Clone, Copy, Default)]
pub struct Handed<'a> {
    /// The lease of the ring memory the frame lies in, when the source lends it (`Lease`:
    /// `--threads` workers then decode it in place).
    pub lease: Option<&'a Arc<Lease>>,
    /// The capture point shed the frame's connection at this frame, its queue being nearly
    /// full (eBPF, `SMBWIRE_EV_SHED_HERE`): the session cuts the connection here.
    pub shed_here: bool,
}

pub trait LiveSource {
    /// Waits up to `timeout_ms` (negative: forever, 0: no wait) for frames and hands each
    /// one to `f` (Ethernet, frame numbers from 1, wall-clock ns), with what the source says
    /// of it (`Handed`). Returns how many.
    fn next_batch(&mut self, timeout_ms: i32, f: &mut dyn FnMut(RawFrame<'_>, Handed<'_>))
        -> io::Result<usize>;
    fn stats(&self) -> LiveStats;
    /// The eBPF hook in use; None for AF_PACKET.
    fn hook(&self) -> Option<HookInfo> {
        None
    }
    /// Whether `stats` still needs a capability once privileges are dropped (eBPF maps on
    /// kernels that check `unprivileged_bpf_disabled` on every bpf() call).
    fn reads_need_cap(&self) -> bool {
        false
    }
    /// How full the fullest capture queue is, 0.0 to 1.0: the session sheds connections
    /// when this stays high, before a queue overflows and drops scattered frames.
    fn backlog(&self) -> f64 {
        0.0
    }
    /// Of `backlog`, the part not handed out yet (0.0 to 1.0): what grows when the analysis
    /// falls behind. It differs only where handed-out frames keep their queue space while
    /// the workers decode them (eBPF rings lent to `--threads` workers, `ebpf::Ring::lend`).
    fn unread(&self) -> f64 {
        self.backlog()
    }
    /// Stops copying the frames of connection `conn` (`FlowKey::connection`) at the capture
    /// point, counting them in `shed_frames`/`shed_bytes`. False when the capture point
    /// cannot (AF_PACKET: the session then discards them itself).
    fn shed(&mut self, _conn: &FlowKey) -> bool {
        false
    }
    /// Connections the capture point shed itself so far (`LiveStats::shed_chosen`), read
    /// without the rest of `stats`: the session asks after every batch.
    fn shed_chosen(&self) -> u64 {
        0
    }
    /// Whether frames are queued that `next_batch` held back to keep time order across
    /// queues (`pick_queue`): a stopping session reads on until there are none.
    fn held(&self) -> bool {
        false
    }
}

/// Frames one `next_batch` hands out at most, and how long it may take (checked every
/// `BATCH_CLOCK_EVERY` frames): the session decides on shedding between batches, so a slow
/// analysis must not keep it from looking for long.
pub(crate) const BATCH_MAX_FRAMES: usize = 1024;
pub(crate) const BATCH_MAX_TIME: std::time::Duration = std::time::Duration::from_millis(2);
pub(crate) const BATCH_CLOCK_EVERY: usize = 16;

/// Whether a batch that started at `started` and has handed out `frames` is to end now.
pub(crate) fn batch_full(frames: usize, started: std::time::Instant) -> bool {
    frames >= BATCH_MAX_FRAMES || (frames.is_multiple_of(BATCH_CLOCK_EVERY) && started.elapsed() >= BATCH_MAX_TIME)
}

/// A queue's oldest frame not yet delivered, for `pick_queue`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Head {
    /// A frame with this capture time (ns, any clock common to the queues).
    At(u64),
    /// Nothing queued.
    Empty,
}

/// Which queue's head to deliver next so that frames of several queues come out in capture
/// time order: the oldest head. While a queue is empty, a frame it may still receive could
/// be older than the other heads (a frame is stamped before it is queued), so only a head
/// stamped at or before `horizon` (a time every queued frame has passed) is taken then.
/// Ties go to the lower queue. None: nothing to deliver now.
pub(crate) fn pick_queue(heads: &[Head], horizon: u64) -> Option<usize> {
    let mut best: Option<(u64, usize)> = None;
    let mut any_empty = false;
    for (i, h) in heads.iter().enumerate() {
        match *h {
            Head::At(ts) => {
                if best.is_none_or(|(b, _)| ts < b) {
                    best = Some((ts, i));
                }
            }
            Head::Empty => any_empty = true,
        }
    }
    let (ts, i) = best?;
    (!any_empty || ts <= horizon).then_some(i)
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
        let (plan, skipped) = hook_plan(opts.hook, &sys::kernel_release());
        match attach_first(&plan, &skipped, |h| {
            ebpf::EbpfSource::open(iface, ifindex, opts, h)
        }) {
            Ok((src, _)) => return Ok((Box::new(src), Backend::Ebpf, None)),
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

/// Tests that need privilege (a BPF map, a capture socket): outside CI, without it, they say
/// so and do not run; in CI (`CI` set, running as root) a missing privilege fails them, so
/// none passes there without having run.
#[cfg(test)]
pub(crate) fn privileged_test_runs(what: &str, why_not: Option<String>) -> bool {
    let Some(why) = why_not else { return true };
    assert!(std::env::var_os("CI").is_none(), "{what}: {why} (CI runs as root: this must run)");
    eprintln!("{what} not run: {why}");
    false
}

#[cfg(test)]
mod hook_tests {
    use super::*;

    #[test]
    fn queues_are_merged_oldest_first_and_wait_for_empty_ones() {
        use Head::*;
        assert_eq!(pick_queue(&[], 0), None);
        assert_eq!(pick_queue(&[Empty, Empty], u64::MAX), None);
        // All queues hold a frame: the oldest, whatever the horizon.
        assert_eq!(pick_queue(&[At(30), At(10), At(20)], 0), Some(1));
        // Ties: the lower queue.
        assert_eq!(pick_queue(&[At(10), At(10)], 0), Some(0));
        // An empty queue may still receive an older frame: only heads at or before the
        // horizon are safe.
        assert_eq!(pick_queue(&[At(30), Empty], 29), None);
        assert_eq!(pick_queue(&[At(30), Empty], 30), Some(0));
        assert_eq!(pick_queue(&[Empty, At(5), At(7)], 6), Some(1));
        // One queue: its own order, no waiting.
        assert_eq!(pick_queue(&[At(u64::MAX)], 0), Some(0));
    }

    #[test]
    fn releases_parse() {
        assert_eq!(parse_release("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(parse_release("5.15.0-91-generic"), Some((5, 15)));
        assert_eq!(parse_release("5.14.0-427.el9.x86_64"), Some((5, 14)));
        assert_eq!(parse_release("6.1.0-18-amd64"), Some((6, 1)));
        assert_eq!(parse_release("6.6"), Some((6, 6)));
        assert_eq!(parse_release("garbage"), None);
        assert_eq!(parse_release("6"), None);
    }

    #[test]
    fn auto_takes_tcx_then_xdp_by_kernel() {
        use Hook::*;
        let plan = |r: &str| hook_plan(HookChoice::Auto, r).0;
        assert_eq!(plan("6.18.44-fc-v669"), vec![Tcx, Xdp]);
        assert_eq!(plan("6.6.0"), vec![Tcx, Xdp]);
        // Debian 12, Ubuntu 22.04, RHEL 9: XDP only.
        assert_eq!(plan("6.1.0-18-amd64"), vec![Xdp]);
        assert_eq!(plan("5.15.0-91-generic"), vec![Xdp]);
        assert_eq!(plan("5.14.0-427.el9.x86_64"), vec![Xdp]);
        assert_eq!(plan("5.9.0"), vec![Xdp]);
        // Neither: AF_PACKET, and the reason names both.
        let (p, why) = hook_plan(HookChoice::Auto, "5.4.0-150-generic");
        assert!(p.is_empty());
        assert_eq!(why.len(), 2);
        assert!(why[0].contains("tcx needs kernel 6.6") && why[1].contains("xdp needs kernel 5.9"), "{why:?}");
        // Unparsable: try both.
        assert_eq!(plan("weird"), vec![Tcx, Xdp]);
    }

    #[test]
    fn explicit_hook_is_tried_whatever_the_release() {
        assert_eq!(hook_plan(HookChoice::Only(Hook::Tcx), "5.4.0").0, vec![Hook::Tcx]);
        assert_eq!(hook_plan(HookChoice::Only(Hook::Xdp), "6.18").0, vec![Hook::Xdp]);
        assert_eq!("xdp".parse::<HookChoice>(), Ok(HookChoice::Only(Hook::Xdp)));
        assert_eq!("auto".parse::<HookChoice>(), Ok(HookChoice::Auto));
        assert!("tc".parse::<HookChoice>().is_err());
    }

    #[test]
    fn attach_falls_through_unsupported_and_stops_at_permission() {
        use Hook::*;
        // TCX missing (a backported kernel said 6.6 but has no TCX): XDP is taken.
        let mut tried = Vec::new();
        let r = attach_first(&[Tcx, Xdp], &[], |h| {
            tried.push(h);
            match h {
                Tcx => Err(LiveError::Unsupported("TCX attach on eth0: Invalid argument".into())),
                Xdp => Ok("xdp-source"),
            }
        });
        assert_eq!(r, Ok(("xdp-source", Xdp)));
        assert_eq!(tried, vec![Tcx, Xdp]);
        // Both fail: AF_PACKET follows, and the reason has both.
        let r: Result<((), Hook), _> = attach_first(&[Tcx, Xdp], &[], |h| {
            Err(LiveError::Unsupported(format!("{} failed", h.name())))
        });
        assert_eq!(r, Err(LiveError::Unsupported("tcx failed; xdp failed".into())));
        // No privilege: XDP is not tried (it needs the same).
        let mut tried = Vec::new();
        let r: Result<((), Hook), _> = attach_first(&[Tcx, Xdp], &[], |h| {
            tried.push(h);
            Err(LiveError::Permission { capability: "CAP_BPF", what: "loading".into() })
        });
        assert!(matches!(r, Err(LiveError::Permission { .. })));
        assert_eq!(tried, vec![Tcx]);
        // An old kernel: nothing to try, the reasons are the skipped hooks.
        let (plan, skipped) = hook_plan(HookChoice::Auto, "5.4.0");
        let r: Result<((), Hook), _> = attach_first(&plan, &skipped, |_| unreachable!());
        match r {
            Err(LiveError::Unsupported(w)) => assert!(w.contains("xdp needs kernel 5.9"), "{w}"),
            other => panic!("{other:?}"),
        }
    }
}

#[cfg(test)]
mod port_tests {
    use super::*;

    #[test]
    fn named_ports_add_to_the_defaults_once_each() {
        assert_eq!(tcp_ports_with(&[]), vec![445, 5445]);
        assert_eq!(tcp_ports_with(&[8445, 445, 8445, 139]), vec![445, 5445, 8445, 139]);
    }
}
