//! The pipeline: frames → wire decode → TCP flows → SMB2 streams → dedupe → `Results`.
//!
//! `Pipeline::process` takes one frame at a time, so offline files and live capture (a ring
//! buffer) drive the same code. Every byte of every frame is accounted here or by the stage
//! it is handed to (see `accounting.rs`).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::accounting::{cat, Accounting};
use crate::anomaly::Anomalies;
use crate::capture::{CaptureError, RawFrame};
use crate::context::{phase, Mark, PayloadSink};
use crate::dedupe::{Dedupe, DedupeConfig, Topology};
use crate::frame::FrameCtx;
use crate::ledger::{LedgerError, LedgerWriter};
use crate::rdma::iwarp::IwarpStream;
use crate::rdma::{mpa, RdmaState};
use crate::report::{self, AccountingReport, AnalysisStats, CaptureSpan, InputFile, Results, TcpReport};
use crate::smb2::crypto::KeyTable;
use crate::smb2::state::SmbState;
use crate::smb2::stream::Smb2Stream;
use crate::tcp::flow::{FlowConfig, FlowOutcome, FlowTable};
use crate::tcp::StreamConsumer;
use crate::wire::{self, Transport};

mod settling;
pub use settling::Settling;

/// The run state every stream consumer shares: counters, SMB sessions, the dedupe index, RDMA.
pub type Shared = crate::context::Shared<SmbState, Settling, RdmaState>;

/// UDP destination port of RoCEv2 (IBTA Annex A17).
pub const ROCE_V2_PORT: u16 = 4791;

/// Analysis settings (from the CLI / Python, as JSON).
#[derive(Clone, Debug)]
pub struct Config {
    pub dedupe: DedupeConfig,
    pub topology: Topology,
    /// TCP ports that carry SMB2 with NetBIOS framing.
    pub smb_ports: Vec<u16>,
    /// TCP ports that carry SMB Direct over iWARP (MPA). Other TCP connections become iWARP
    /// when an MPA Request/Reply frame is seen.
    pub iwarp_ports: Vec<u16>,
    /// Write the send ledger (the ordered stage's events) to this path (`--ledger`).
    pub ledger: Option<String>,
    /// Analyse only frames captured at or after this time (ns since the epoch; `--from`).
    pub from_ns: Option<u64>,
    /// Analyse only frames captured before this time (ns since the epoch; `--to`).
    pub to_ns: Option<u64>,
    /// Memory budget of the whole analysis (`--max-memory`), shared out by `Budget::of`.
    pub max_memory_bytes: Option<u64>,
    /// Out-of-order bytes held per TCP direction before a hole is given up (`--reorder-buffer`;
    /// default `ReassemblyConfig::default()`, 4 MiB).
    pub reorder_buffer_bytes: Option<usize>,
    /// SMB3 session keys (`--keys`): encrypted messages of these sessions are decrypted.
    pub keys: Option<Arc<KeyTable>>,
    /// Decoding threads (`--threads`; `crate::parallel`): 1 runs one `Pipeline`.
    pub threads: usize,
    /// This pipeline is one of this many `--threads` workers: the flow table's and the
    /// reorder buffers' global bounds are shared out among them, so the run holds what one
    /// pipeline would.
    pub workers: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { dedupe: DedupeConfig::default(), topology: Topology::default(), smb_ports: vec![445, 139], iwarp_ports: vec![5445], ledger: None, from_ns: None, to_ns: None, reorder_buffer_bytes: None, keys: None, max_memory_bytes: None, threads: 1, workers: 1 }
    }
}

/// Most top duplicated payloads a result lists (`top_n`, `--top`).
pub const MAX_TOP_N: u64 = 10_000;

/// `seconds` (the JSON value `given`) as whole ns within [`min_ns`, `max_ns`], else the line
/// that names the bounds and the value as given, in JSON's notation (1e+300, not its 301
/// digits).
fn seconds_in(what: &str, given: &serde_json::Value, seconds: f64, min_ns: u64, max_ns: u64) -> Result<u64, String> {
    let ns = seconds * 1e9;
    if !(min_ns as f64..=max_ns as f64).contains(&ns) {
        let (lo, hi) = (min_ns as f64 / 1e9, max_ns as f64 / 1e9);
        return Err(format!("{what} must be between {lo} and {hi} seconds, got {given}"));
    }
    Ok(ns.round() as u64)
}

impl Config {
    /// `{"window_seconds": 60, "series_interval_seconds": 1, "top_n": 10, "topology": {...},
    /// "smb_ports": [445]}`; every key optional.
    pub fn from_json(text: &str) -> Result<Config, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("invalid analysis configuration: {e}"))?;
        let mut c = Config::default();
        if let Some(given) = v.get("window_seconds") {
            let w = given.as_f64().ok_or("window_seconds must be a number")?;
            c.dedupe.window_ns = seconds_in("the window", given, w, crate::dedupe::MIN_WINDOW_NS, crate::dedupe::MAX_WINDOW_NS)?;
        }
        if let Some(given) = v.get("series_interval_seconds").filter(|i| !i.is_null()) {
            let i = given.as_f64().ok_or("series_interval_seconds must be a number")?;
            let (min, max) = (crate::dedupe::series::MIN_INTERVAL_NS, crate::dedupe::series::MAX_INTERVAL_NS);
            c.dedupe.series_interval_ns = seconds_in("the interval", given, i, min, max)?;
        }
        if let Some(n) = v.get("top_n") {
            let top = n.as_u64().filter(|&t| t <= MAX_TOP_N);
            c.dedupe.top_n = top.ok_or_else(|| format!("top must be a whole number from 0 to {MAX_TOP_N}, got {n}"))? as usize;
        }
        if let Some(t) = v.get("topology") {
            if !t.is_null() {
                c.topology = Topology::from_json(t).map_err(|e| format!("topology: {e}"))?;
            }
        }
        if let Some(p) = v.get("smb_ports") {
            let ports = p.as_array().ok_or("smb_ports must be a list")?;
            c.smb_ports = ports
                .iter()
                .map(|x| x.as_u64().filter(|n| *n > 0 && *n < 65536).map(|n| n as u16))
                .collect::<Option<Vec<_>>>()
                .ok_or("smb_ports must hold port numbers")?;
        }
        if let Some(p) = v.get("ledger") {
            if !p.is_null() {
                c.ledger = Some(p.as_str().ok_or("ledger must be a path")?.to_string());
            }
        }
        for (key, opt, slot) in [("from_ns", "--from", &mut c.from_ns), ("to_ns", "--to", &mut c.to_ns)] {
            if let Some(t) = v.get(key) {
                if !t.is_null() {
                    *slot = Some(t.as_u64().ok_or_else(|| {
                        format!("the {opt} time ({key}) must be in ns since 1970 and before 2554-07-21 (64 bits), got {t}")
                    })?);
                }
            }
        }
        if let Some(b) = v.get("reorder_buffer_bytes") {
            if !b.is_null() {
                let b = b.as_u64().filter(|b| (64 * 1024..=(4u64 << 30)).contains(b));
                c.reorder_buffer_bytes =
                    Some(b.ok_or("the reorder buffer must be between 64 KiB and 4 GiB")? as usize);
            }
        }
        if let Some(b) = v.get("max_memory_bytes") {
            if !b.is_null() {
                let b = b.as_u64().filter(|b| (MIN_MEMORY_BUDGET..=(1u64 << 42)).contains(b));
                c.max_memory_bytes = Some(b.ok_or("the memory budget must be between 16 MiB and 4 TiB")?);
            }
        }
        if let Some(b) = v.get("max_index_memory_bytes") {
            if !b.is_null() {
                let b = b.as_u64().filter(|b| (1024..=(1u64 << 40)).contains(b));
                c.dedupe.max_index_bytes = Some(b.ok_or("the index memory bound must be between 1 KiB and 1 TiB")?);
            }
        }
        if let Some(k) = v.get("keys") {
            if !k.is_null() {
                let text = k.as_str().ok_or("keys must be the text of a keys file")?;
                let t = KeyTable::parse(text).map_err(|e| format!("--keys: {e}"))?;
                if t.is_empty() {
                    return Err("--keys: the keys file has no entries".to_string());
                }
                c.keys = Some(Arc::new(t));
            }
        }
        if let (Some(a), Some(b)) = (c.from_ns, c.to_ns) {
            if a >= b {
                return Err("the --from time must be before the --to time".to_string());
            }
        }
        if let Some(t) = v.get("threads") {
            if !t.is_null() {
                let t = t.as_u64().filter(|t| (1..=256).contains(t));
                c.threads = t.ok_or("threads must be between 1 and 256")? as usize;
            }
        }
        if let Some(p) = v.get("iwarp_ports") {
            let ports = p.as_array().ok_or("iwarp_ports must be a list")?;
            c.iwarp_ports = ports
                .iter()
                .map(|x| x.as_u64().filter(|n| *n > 0 && *n < 65536).map(|n| n as u16))
                .collect::<Option<Vec<_>>>()
                .ok_or("iwarp_ports must hold port numbers")?;
        }
        if let Some(m) = c.max_memory_bytes {
            let share = Budget::of(m).index;
            c.dedupe.max_index_bytes = Some(c.dedupe.max_index_bytes.map_or(share, |b| b.min(share)));
        }
        Ok(c)
    }
}

/// TCP flow limits from the configuration: `--reorder-buffer` sets the per-direction buffer
/// (and the segment limit with it, one per 256 bytes, at least the default's), and keeps the
/// all-flows cap at least four such buffers.
fn flow_config(config: &Config) -> FlowConfig {
    let mut fc = FlowConfig::default();
    if let Some(b) = config.reorder_buffer_bytes {
        fc.reassembly.max_buffered_bytes = b;
        fc.reassembly.max_segments = fc.reassembly.max_segments.max(b / 256);
        fc.max_total_buffered_bytes = fc.max_total_buffered_bytes.max(b.saturating_mul(4));
    }
    if let Some(budget) = config.max_memory_bytes {
        let b = Budget::of(budget);
        fc.max_total_buffered_bytes = fc.max_total_buffered_bytes.min(b.reorder as usize);
        fc.reassembly.max_buffered_bytes = fc.reassembly.max_buffered_bytes.min(fc.max_total_buffered_bytes);
        fc.max_flows = fc.max_flows.min((b.flows / FLOW_STATE_ESTIMATE).max(1024) as usize);
    }
    if config.workers > 1 {
        let n = config.workers;
        fc.max_flows = (fc.max_flows / n).max(1024);
        fc.max_total_buffered_bytes = (fc.max_total_buffered_bytes / n).max(fc.reassembly.max_buffered_bytes);
    }
    fc
}

/// `flow_config` for tests of other modules.
#[cfg(test)]
pub fn tests_flow_config(config: &Config) -> FlowConfig {
    flow_config(config)
}

/// `--max-memory` below this is refused: the fixed parts of a run need about this much.
pub const MIN_MEMORY_BUDGET: u64 = 16 << 20;
/// Bytes one tracked TCP flow may hold beyond its buffered data (flow entry, both directions'
/// reassembly state, a stream consumer with its small buffers), for the flow-count bound.
pub const FLOW_STATE_ESTIMATE: u64 = 2048;

/// How `--max-memory` is shared out (docs/architecture.md): every part already bounds itself
/// and reports what it sheds (the index folds its oldest sends early, the reorder buffers give
/// holes up, the flow table evicts flows that never carried storage traffic first, messages
/// that would need decrypting or decompressing past their share stay undecoded), so a budget
/// is honoured by shedding with a report, never by aborting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The dedupe index (`--max-index-memory` when that is lower).
    pub index: u64,
    /// Out-of-order TCP bytes of all flows together.
    pub reorder: u64,
    /// Encrypted and compressed messages buffered whole for decoding.
    pub opening: u64,
    /// Flow state (`FLOW_STATE_ESTIMATE` per flow).
    pub flows: u64,
}

impl Budget {
    /// Half for the index, a fifth for reordering, a tenth each for buffered messages and
    /// flow state; the last tenth is left for everything of fixed size (buffers, maps of
    /// sessions and files, the evidence kept for the top list).
    pub fn of(total: u64) -> Budget {
        Budget { index: total / 2, reorder: total / 5, opening: total / 10, flows: total / 10 }
    }
}

/// The stream consumer a TCP direction gets, by service port. A stream's state (about 300
/// bytes) is made at the direction's first byte, gap or close: a flow that never carries a
/// byte (a SYN flood's) holds only what makes it (issue 12: per-flow state small and lazy).
pub enum Consumer {
    /// An SMB2 direction before its first byte: `Smb2Stream::new`'s arguments.
    /// `direction_known`: exactly one end is an SMB port (`Smb2Stream::with_direction_unknown`).
    Smb2Idle { conn: u64, to_server: bool, direction_known: bool, src: (IpAddr, u16), dst: (IpAddr, u16) },
    Smb2(Box<Smb2Stream>),
    Iwarp(Box<IwarpStream>),
}

impl Consumer {
    fn smb2(conn: u64, to_server: bool, direction_known: bool, src: (IpAddr, u16), dst: (IpAddr, u16)) -> Consumer {
        Consumer::Smb2Idle { conn, to_server, direction_known, src, dst }
    }

    /// Makes the stream of an idle direction.
    fn wake(&mut self) {
        if let Consumer::Smb2Idle { conn, to_server, direction_known, src, dst } = *self {
            let s = Smb2Stream::new(conn, to_server, src, dst);
            *self = Consumer::Smb2(Box::new(if direction_known { s } else { s.with_direction_unknown() }));
        }
    }
}

impl<D: PayloadSink> StreamConsumer<SharedOf<D>> for Consumer {
    fn data(&mut self, bytes: &[u8], ctx: &FrameCtx, shared: &mut SharedOf<D>) {
        self.wake();
        match self {
            Consumer::Smb2(s) => s.data(bytes, ctx, shared),
            Consumer::Iwarp(s) => s.data(bytes, ctx, shared),
            Consumer::Smb2Idle { .. } => unreachable!("woken"),
        }
    }
    fn gap(&mut self, missing: u64, ctx: &FrameCtx, shared: &mut SharedOf<D>) {
        self.wake();
        match self {
            Consumer::Smb2(s) => s.gap(missing, ctx, shared),
            Consumer::Iwarp(s) => s.gap(missing, ctx, shared),
            Consumer::Smb2Idle { .. } => unreachable!("woken"),
        }
    }
    fn close(&mut self, ctx: &FrameCtx, shared: &mut SharedOf<D>) {
        self.wake();
        match self {
            Consumer::Smb2(s) => s.close(ctx, shared),
            Consumer::Iwarp(s) => s.close(ctx, shared),
            Consumer::Smb2Idle { .. } => unreachable!("woken"),
        }
    }
    fn carries_storage(&self) -> bool {
        match self {
            Consumer::Smb2(s) => StreamConsumer::<SharedOf<D>>::carries_storage(s.as_ref()),
            Consumer::Iwarp(s) => StreamConsumer::<SharedOf<D>>::carries_storage(s.as_ref()),
            // A stream not yet made has carried nothing.
            Consumer::Smb2Idle { .. } => false,
        }
    }
}

/// How often (in capture time) the window and idle flows are swept.
const SWEEP_INTERVAL_NS: u64 = 1_000_000_000;

/// The time of a run: frames counted, the first and latest capture time (time never steps
/// back: merged mirror ports may be slightly out of order), and when the next sweep is due.
/// One per run: the pipeline's, or the ordered stage's under `--threads`.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Clock {
    pub frames: u64,
    pub first_ts: Option<u64>,
    pub last_ts: u64,
    last_sweep: u64,
}

impl Clock {
    /// A frame arrives: its context (run-wide number and time).
    pub fn frame(&mut self, frame: &RawFrame<'_>, anomalies: &mut Anomalies) -> FrameCtx {
        self.frames += 1;
        let ts = frame.info.ts_ns;
        if self.first_ts.is_none() {
            self.first_ts = Some(ts);
            self.last_sweep = ts;
        }
        if ts < self.last_ts {
            anomalies.raise(crate::capture::Anomaly::TimeWentBackwards);
        } else {
            self.last_ts = ts;
        }
        FrameCtx { frame: frame.info.frame, ts_ns: self.last_ts, seq: self.frames }
    }

    /// After a frame: the time to sweep the window and idle flows to, when a sweep is due.
    pub fn sweep_due(&mut self) -> Option<u64> {
        if self.last_ts.saturating_sub(self.last_sweep) >= SWEEP_INTERVAL_NS {
            self.last_sweep = self.last_ts;
            Some(self.last_ts)
        } else {
            None
        }
    }
}

/// The run state of a pipeline whose payload sink is `D`.
pub type SharedOf<D> = crate::context::Shared<SmbState, D, RdmaState>;

/// Frame → wire decode → TCP flows / RDMA → SMB2 and SMB Direct → sends into the sink `D`:
/// the dedupe index (one pipeline does everything), or a `--threads` worker's recorder
/// (`crate::parallel`), whose events the ordered stage merges.
pub struct Pipeline<D: PayloadSink = Settling> {
    pub shared: SharedOf<D>,
    flows: FlowTable<Consumer>,
    /// TCP connections found to be iWARP by their MPA frame (not on an iWARP port).
    mpa_flows: FlowTable<Consumer>,
    /// Their (normalised) endpoint pairs.
    mpa_keys: crate::fasthash::FastSet<((IpAddr, u16), (IpAddr, u16))>,
    smb_ports: Vec<u16>,
    iwarp_ports: Vec<u16>,
    /// TCP connections handed to a stream consumer (SMB2 or iWARP).
    conns_opened: u64,
    /// Frames decoded from inside tunnels (remote mirror sessions).
    tunnels: report::TunnelCounter,
    pub clock: Clock,
    window_ns: u64,
    /// Findings raised before or outside the frames (an unusable input file); first in the result.
    pub input_findings: Vec<crate::findings::Finding>,
    /// Bytes of the input files skipped as unusable (accounted as `unusable_input`).
    pub unusable_input_bytes: u64,
}

/// Marks the sink's next events as coming from `m`, first handing it the names the SMB2
/// state journaled since the last mark (they belong to the events before).
fn mark<D: PayloadSink>(shared: &mut SharedOf<D>, m: Mark) {
    shared.smb.hand_over(&mut shared.dedupe);
    shared.dedupe.mark(m);
}

/// What a pipeline (or a `--threads` worker) counted besides the sends: summed over workers
/// into the result.
pub struct Counts {
    pub anomalies: Anomalies,
    pub accounting: Accounting,
    pub smb2: crate::smb2::state::Smb2Stats,
    pub rdma: crate::rdma::RdmaStats,
    pub flows: crate::tcp::ReassemblyStats,
    pub conns: u64,
    /// Frames decoded from inside tunnels, by input and kind.
    pub tunnels: report::TunnelsByInput,
}

impl Counts {
    pub fn absorb(&mut self, o: Counts) {
        self.anomalies.absorb(&o.anomalies);
        for (k, v) in o.accounting.iter() {
            self.accounting.add(k, v);
        }
        self.smb2.absorb(o.smb2);
        self.rdma.absorb(o.rdma);
        self.flows.absorb(&o.flows);
        self.conns += o.conns;
        self.tunnels.absorb(&o.tunnels);
    }
}

impl<D: PayloadSink> Pipeline<D> {
    pub fn with_sink(config: &Config, sink: D) -> Self {
        Pipeline {
            shared: SharedOf::<D> {
                anomalies: Anomalies::default(),
                accounting: Accounting::default(),
                smb: SmbState::new()
                    .with_keys(config.keys.clone().unwrap_or_default())
                    .with_opening_cap(config.max_memory_bytes.map_or(crate::smb2::state::OPENING_CAP, |m| {
                        Budget::of(m).opening.min(crate::smb2::state::OPENING_CAP)
                    }) / config.workers.max(1) as u64),
                dedupe: sink,
                rdma: RdmaState::new(),
            },
            flows: FlowTable::new(flow_config(config)),
            mpa_flows: FlowTable::new(flow_config(config)),
            mpa_keys: Default::default(),
            smb_ports: config.smb_ports.clone(),
            iwarp_ports: config.iwarp_ports.clone(),
            conns_opened: 0,
            tunnels: Default::default(),
            clock: Clock::default(),
            window_ns: config.dedupe.window_ns,
            input_findings: Vec::new(),
            unusable_input_bytes: 0,
        }
    }

    /// Decode one frame whose context (`Clock::frame`) is `ctx`, through to the sink.
    pub fn decode(&mut self, frame: &RawFrame<'_>, ctx: &FrameCtx) {
        let ctx = *ctx;
        let len = frame.data.len() as u64;
        if (frame.info.orig_len as u64) > len {
            self.shared.anomalies.raise(crate::capture::Anomaly::SnaplenTruncatedFrame);
        }
        let decoded = match wire::decode(frame.info.linktype, frame.data) {
            Ok(d) => d,
            Err(e @ wire::DecodeError::UnsupportedLinkType(_)) => {
                self.shared.anomalies.raise(e);
                self.shared.accounting.add(cat::OTHER_PROTOCOLS, len);
                return;
            }
            Err(e) => {
                self.shared.anomalies.raise(e);
                self.shared.accounting.add(cat::MALFORMED, len);
                return;
            }
        };
        if let Some(a) = decoded.anomaly {
            self.shared.anomalies.raise(a);
        }
        if let Some(t) = &decoded.tunnel {
            self.tunnels.add(ctx.frame.file, t);
        }
        // IPoIB inside a native InfiniBand Send: from here on the IP packet inside is the frame's
        // network layer, and the IB headers, IPoIB header, pad, ICRC and VCRC are header bytes.
        let decoded = match decoded.transport {
            Transport::Infiniband(ib) => match self.shared.rdma.ipoib(decoded.src, decoded.dst, ib) {
                Some(inner) => match wire::decode(wire::linktype::IPOIB, inner) {
                    Ok(mut d) => {
                        d.header_bytes += frame.data.len() - inner.len();
                        if let Some(a) = d.anomaly {
                            self.shared.anomalies.raise(a);
                        }
                        d
                    }
                    Err(e) => {
                        self.shared.anomalies.raise(e);
                        self.shared.accounting.add(cat::MALFORMED, len);
                        return;
                    }
                },
                None => decoded,
            },
            _ => decoded,
        };
        match decoded.transport {
            Transport::Tcp(seg) => {
                let from = (decoded.src, seg.src_port);
                let to = (decoded.dst, seg.dst_port);
                let key = if from <= to { (from, to) } else { (to, from) };
                let on_port = |p: &[u16]| p.contains(&seg.src_port) || p.contains(&seg.dst_port);
                let mpa_flow = if self.mpa_keys.contains(&key) {
                    true
                } else if !on_port(&self.smb_ports)
                    && !on_port(&self.iwarp_ports)
                    && seg.payload.len() >= mpa::KEY_LEN
                    && (seg.payload[..mpa::KEY_LEN] == mpa::REQ_KEY[..] || seg.payload[..mpa::KEY_LEN] == mpa::REP_KEY[..])
                    && self.mpa_keys.len() < 65_536
                {
                    self.mpa_keys.insert(key);
                    true
                } else {
                    false
                };
                let smb_ports = &self.smb_ports;
                let iwarp_ports = &self.iwarp_ports;
                let conns_opened = &mut self.conns_opened;
                // A connection's id is its flow's: the run-wide number of its opening frame.
                let mut make = |conn: u64, from: (IpAddr, u16), to: (IpAddr, u16)| -> Option<(Consumer, Consumer)> {
                    let iwarp_server = if mpa_flow {
                        // The sender of the first segment seen is the initiator unless it sends the Reply.
                        Some(seg.payload.len() >= mpa::KEY_LEN && seg.payload[..mpa::KEY_LEN] == mpa::REP_KEY[..])
                    } else if iwarp_ports.contains(&to.1) {
                        Some(false)
                    } else if iwarp_ports.contains(&from.1) {
                        Some(true)
                    } else {
                        None
                    };
                    if let Some(from_is_server) = iwarp_server {
                        *conns_opened += 1;
                        let smbd = !mpa_flow;
                        let (c_side, s_side) = if from_is_server { (1, 0) } else { (0, 1) };
                        // Side 0 is the initiator (client) of the iWARP connection.
                        let ends = if from_is_server { [to, from] } else { [from, to] };
                        return Some((
                            Consumer::Iwarp(Box::new(IwarpStream::new(conn, c_side, ends, smbd))),
                            Consumer::Iwarp(Box::new(IwarpStream::new(conn, s_side, ends, smbd))),
                        ));
                    }
                    // With both ends on SMB ports the first frame's direction is taken as
                    // the client's: a guess.
                    let known = !(smb_ports.contains(&to.1) && smb_ports.contains(&from.1));
                    if smb_ports.contains(&to.1) {
                        *conns_opened += 1;
                        Some((
                            Consumer::smb2(conn, true, known, from, to),
                            Consumer::smb2(conn, false, known, to, from),
                        ))
                    } else if smb_ports.contains(&from.1) {
                        *conns_opened += 1;
                        Some((
                            Consumer::smb2(conn, false, known, from, to),
                            Consumer::smb2(conn, true, known, to, from),
                        ))
                    } else {
                        None
                    }
                };
                let table = if mpa_flow { &mut self.mpa_flows } else { &mut self.flows };
                let out = table.segment(
                    decoded.src,
                    decoded.dst,
                    &seg,
                    decoded.dup_signature(),
                    &ctx,
                    &mut self.shared,
                    &mut make,
                );
                let acct = &mut self.shared.accounting;
                match out {
                    FlowOutcome::MirrorDuplicate => acct.add(cat::MIRROR_DUPLICATE, len),
                    FlowOutcome::Ignored { .. } => acct.add(cat::OTHER_PROTOCOLS, len),
                    FlowOutcome::Stream { seg: o, .. } => {
                        // Delivered and buffered bytes are accounted by the stream consumer
                        // when they reach it; the rest here.
                        acct.add(cat::PROTOCOL_HEADERS, decoded.header_bytes as u64);
                        acct.add(cat::RETRANSMITTED, o.retransmitted);
                        acct.add(cat::TCP_UNDELIVERED, o.dropped);
                        acct.add(cat::TCP_REORDERED_LATE, o.late);
                        acct.add(cat::PROTOCOL_HEADERS, o.keepalive);
                    }
                }
            }
            Transport::Udp(u) if u.dst_port == ROCE_V2_PORT => {
                self.shared.accounting.add(cat::PROTOCOL_HEADERS, decoded.header_bytes as u64);
                let (mut p, rdma) = self.shared.split();
                rdma.roce(decoded.src, decoded.dst, u.payload, &ctx, &mut p);
            }
            Transport::RoceV1(r) => {
                // The GRH is the network header; BTH..ICRC follow.
                let grh = r.len().min(wire::ipv6::HEADER_LEN);
                self.shared.accounting.add(cat::PROTOCOL_HEADERS, (decoded.header_bytes + grh) as u64);
                let (mut p, rdma) = self.shared.split();
                rdma.roce(decoded.src, decoded.dst, &r[grh..], &ctx, &mut p);
            }
            Transport::Infiniband(ib) => {
                // LRH, GRH and VCRC are the network layer, as RoCEv1's GRH; BTH..ICRC follow.
                self.shared.accounting.add(cat::PROTOCOL_HEADERS, decoded.header_bytes as u64);
                let (mut p, rdma) = self.shared.split();
                rdma.roce(decoded.src, decoded.dst, ib, &ctx, &mut p);
            }
            Transport::Udp(_) | Transport::Other => {
                self.shared.accounting.add(cat::OTHER_PROTOCOLS, len);
            }
        }
    }

    /// Close the flows idle at `now_ns` (the TCP table first, then the MPA one, each least
    /// recently seen first), marking what each close emits.
    pub fn expire_idle(&mut self, now_ns: u64) {
        self.flows.expire_idle_marked(now_ns, &mut self.shared, &mut |s, (a, b)| {
            mark(s, Mark { phase: phase::EXPIRE_TCP, a, b })
        });
        self.mpa_flows.expire_idle_marked(now_ns, &mut self.shared, &mut |s, (a, b)| {
            mark(s, Mark { phase: phase::EXPIRE_MPA, a, b })
        });
        mark(&mut self.shared, crate::context::SWEEP_END);
    }

    /// End of input at `end_ts`: flush and close every flow and RDMA connection.
    pub fn close_all(&mut self, end_ts: u64) {
        self.flows.finish_marked(&mut self.shared, &mut |s, (a, b)| mark(s, Mark { phase: phase::FINISH_TCP, a, b }));
        self.mpa_flows.finish_marked(&mut self.shared, &mut |s, (a, b)| mark(s, Mark { phase: phase::FINISH_MPA, a, b }));
        let end = FrameCtx { frame: Default::default(), ts_ns: end_ts, seq: 0 };
        mark(&mut self.shared, Mark { phase: phase::FINISH_RDMA, a: 0, b: 0 });
        {
            let (mut p, rdma) = self.shared.split();
            rdma.finish(&end, &mut p);
        }
        mark(&mut self.shared, Mark { phase: phase::FINISH_RDMA, a: u64::MAX, b: u64::MAX });
    }

    /// Marks the sink's next events as coming from `m` (`crate::context::Mark`).
    pub fn mark(&mut self, m: Mark) {
        mark(&mut self.shared, m)
    }

    /// Out-of-order bytes held now, in the TCP and the MPA table.
    pub fn buffered_bytes(&self) -> (u64, u64) {
        (self.flows.buffered_bytes() as u64, self.mpa_flows.buffered_bytes() as u64)
    }

    /// Both tables' reassembly counters.
    pub fn flow_stats(&self) -> crate::tcp::ReassemblyStats {
        let mut s = self.flows.stats();
        s.absorb(&self.mpa_flows.stats());
        s
    }

    /// Everything counted so far but the sends (a copy: for a live snapshot).
    pub fn counts(&self) -> Counts {
        let mut anomalies = self.shared.anomalies.clone();
        anomalies.absorb(self.flows.anomalies());
        anomalies.absorb(self.mpa_flows.anomalies());
        Counts {
            anomalies,
            accounting: self.shared.accounting.clone(),
            smb2: self.shared.smb.stats(),
            rdma: self.shared.rdma.stats.clone(),
            flows: self.flow_stats(),
            conns: self.conns_opened,
            tunnels: self.tunnels.counts(),
        }
    }

    /// Everything counted but the sends, taking the anomalies and accounting out.
    pub fn take_counts(&mut self) -> Counts {
        let mut anomalies = std::mem::take(&mut self.shared.anomalies);
        anomalies.absorb(self.flows.anomalies());
        anomalies.absorb(self.mpa_flows.anomalies());
        Counts {
            anomalies,
            accounting: std::mem::take(&mut self.shared.accounting),
            smb2: self.shared.smb.stats(),
            rdma: self.shared.rdma.stats.clone(),
            flows: self.flow_stats(),
            conns: self.conns_opened,
            tunnels: self.tunnels.counts(),
        }
    }
}

impl Pipeline<Settling> {
    pub fn new(config: &Config, evidence: Option<Box<dyn std::io::Write + Send>>) -> Self {
        Pipeline::with_sink(config, Settling::new(Dedupe::new(config.dedupe.clone(), config.topology.clone(), evidence)))
    }

    /// Process one captured frame.
    pub fn process(&mut self, frame: &RawFrame<'_>) {
        self.shared.dedupe.gather_here();
        let ctx = self.clock.frame(frame, &mut self.shared.anomalies);
        self.shared.dedupe.note_time(frame.info.ts_ns);
        self.decode(frame, &ctx);
        if let Some(now) = self.clock.sweep_due() {
            self.shared.dedupe.advance(now);
            self.expire_idle(now);
        }
    }

    /// End of input: flush every stream, fold the window, build the result.
    pub fn finish(self, inputs: Vec<InputFile>, container: Accounting, started: Instant) -> Results {
        self.finish_recorded(inputs, container, started).0
    }

    /// `finish`, also handing back the send ledger being recorded (with its first write error):
    /// it holds every event up to the end, including the sends the final flush produced.
    pub fn finish_recorded(
        mut self,
        inputs: Vec<InputFile>,
        container: Accounting,
        started: Instant,
    ) -> Finished {
        self.shared.dedupe.note_time(crate::ledger::AT_END);
        self.close_all(self.clock.last_ts);
        let counts = self.take_counts();
        let mut dedupe = self.shared.dedupe.into_settled();
        let ledger = dedupe.take_ledger();
        let run = Run {
            counts,
            clock: self.clock,
            window_ns: self.window_ns,
            input_findings: self.input_findings,
            unusable_input_bytes: self.unusable_input_bytes,
        };
        let (results, input_findings) = run.results(dedupe, inputs, container, started);
        (results, ledger, input_findings)
    }
}

/// What finishing a run gives: the result, the send ledger being recorded (with its first
/// write error), and the findings about the inputs (for the ledger's run metadata).
pub type Finished = (Results, Option<(LedgerWriter, Option<LedgerError>)>, Vec<crate::findings::Finding>);

/// A finished run's parts, before the ordered stage's report is folded in.
pub struct Run {
    pub counts: Counts,
    pub clock: Clock,
    pub window_ns: u64,
    pub input_findings: Vec<crate::findings::Finding>,
    pub unusable_input_bytes: u64,
}

impl Run {
    /// The result: the ordered stage `dedupe` folded, the counts, the findings that follow.
    pub fn results(
        self,
        dedupe: Dedupe,
        inputs: Vec<InputFile>,
        container: Accounting,
        started: Instant,
    ) -> (Results, Vec<crate::findings::Finding>) {
        let Counts { anomalies, mut accounting, smb2, rdma, flows: flow_stats, conns, tunnels } = self.counts;
        for (k, v) in container.iter() {
            accounting.add(k, v);
        }
        let mut dedupe = dedupe.finish();
        let mut anomaly_counts: std::collections::BTreeMap<String, u64> =
            anomalies.iter().map(|(k, v)| (k.to_string(), v)).collect();
        for (k, v) in std::mem::take(&mut dedupe.anomalies) {
            *anomaly_counts.entry(k).or_insert(0) += v;
        }
        let mut inputs = inputs;
        for (i, input) in inputs.iter_mut().enumerate() {
            input.tunnels = Some(u16::try_from(i).map(|f| tunnels.of(f)).unwrap_or_default());
        }
        let input_bytes: u64 = inputs.iter().map(|i| i.size_bytes).sum::<u64>() + self.unusable_input_bytes;
        let total_bytes = accounting.total();
        let input_findings = self.input_findings;
        let tcp = TcpReport::from_stats(&flow_stats, flow_stats.mirror_duplicate_frames, conns);
        let elapsed = started.elapsed().as_secs_f64();
        let first = self.clock.first_ts.map(|t| t as f64 / 1e9);
        let last = self.clock.first_ts.map(|_| self.clock.last_ts as f64 / 1e9);
        let mut results = Results {
            schema: report::SCHEMA,
            smbwire_version: env!("CARGO_PKG_VERSION"),
            inputs,
            window_seconds: self.window_ns as f64 / 1e9,
            capture: CaptureSpan {
                first_ts: first,
                last_ts: last,
                duration_seconds: match (first, last) {
                    (Some(a), Some(b)) => b - a,
                    _ => 0.0,
                },
            },
            dedupe,
            accounting: AccountingReport {
                categories: accounting.iter().map(|(k, v)| (k.to_string(), v)).collect(),
                total_bytes,
                input_bytes,
                reconciled: total_bytes == input_bytes,
            },
            tunnels: tunnels.total(),
            anomalies: anomaly_counts,
            tcp,
            smb2,
            rdma,
            findings: Vec::new(),
            warnings: Vec::new(),
            analysis: AnalysisStats {
                elapsed_seconds: elapsed,
                frames: self.clock.frames,
                bytes_per_second: if elapsed > 0.0 { input_bytes as f64 / elapsed } else { 0.0 },
                threads: 1,
                hash_batches_helped: 0,
            },
        };
        // The findings that follow from the figures: one function, shared with `attribute`.
        results.findings = input_findings.clone();
        if let Ok(v) = serde_json::to_value(&results) {
            results.findings.extend(crate::findings::derive(&v));
        }
        results.warnings = results.findings.iter().map(|f| f.message.clone()).collect();
        (results, input_findings)
    }
}

/// `outputs::check` for the files the engine writes itself (the evidence, the ledger or a
/// ledger part) against what it reads (captures, ledgers or parts).
pub fn check_outputs(evidence: Option<&str>, ledger: Option<&str>, inputs: &[String]) -> Result<(), AnalyzeError> {
    let outputs: Vec<(&str, &str)> = [("--evidence", evidence), ("--ledger", ledger)]
        .into_iter()
        .filter_map(|(o, p)| Some((o, p?)))
        .collect();
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    crate::outputs::check(&outputs, &inputs).map_err(AnalyzeError::Output)
}

/// Err when the evidence file could not be written (`DedupeReport::evidence_error`): the
/// run fails with one line, as one whose ledger cannot be written does; the file is not left
/// half written (`outputs::StagedWriter`).
pub fn evidence_failed(dedupe: &mut crate::dedupe::DedupeReport, path: Option<&str>) -> Result<(), AnalyzeError> {
    match dedupe.evidence_error.take() {
        Some(e) => Err(AnalyzeError::Evidence(format!("{}: cannot write evidence file: {e}", path.unwrap_or("evidence")))),
        None => Ok(()),
    }
}

/// The evidence file (`--evidence`), created now so an unwritable path fails before the run.
/// It takes its name when the run completes (`outputs::StagedWriter`: the evidence writer's
/// one flush); an interrupted or failed run leaves none.
pub fn open_evidence(path: Option<&str>) -> Result<Option<Box<dyn std::io::Write + Send>>, AnalyzeError> {
    let Some(p) = path else { return Ok(None) };
    let w = crate::outputs::StagedWriter::create(p, 0o666)
        .map_err(|e| AnalyzeError::Evidence(format!("{p}: cannot write evidence file: {e}")))?;
    Ok(Some(Box::new(w)))
}

#[derive(Debug)]
pub enum AnalyzeError {
    Capture(CaptureError),
    Evidence(String),
    Ledger(String),
    /// An output file that is an input or another output (`outputs::check`).
    Output(String),
    Interrupted,
}

impl std::fmt::Display for AnalyzeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnalyzeError::Capture(e) => write!(f, "{e}"),
            AnalyzeError::Evidence(e) | AnalyzeError::Ledger(e) | AnalyzeError::Output(e) => write!(f, "{e}"),
            AnalyzeError::Interrupted => write!(f, "interrupted"),
        }
    }
}

// --- live snapshots ---

/// What the pipeline has seen so far, taken without flushing streams or folding the window:
/// sends still in the window are counted provisionally (`Dedupe::snapshot`). The live view
/// shows this every second; the final result is still `finish`.
pub struct PipelineView {
    pub dedupe: crate::dedupe::DedupeReport,
    pub accounting: Accounting,
    pub anomalies: std::collections::BTreeMap<String, u64>,
    pub tunnels: std::collections::BTreeMap<String, report::TunnelCount>,
    pub tcp: TcpReport,
    pub smb2: crate::smb2::state::Smb2Stats,
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: u64,
    pub frames: u64,
    pub window_ns: u64,
}

impl PipelineView {
    /// A snapshot from the ordered stage `dedupe`, the counts and the clock (`--threads`).
    pub fn of(dedupe: &mut Dedupe, counts: &Counts, clock: &Clock, window_ns: u64) -> PipelineView {
        let mut dedupe = dedupe.snapshot();
        let mut anomalies: std::collections::BTreeMap<String, u64> =
            counts.anomalies.iter().map(|(k, v)| (k.to_string(), v)).collect();
        for (k, v) in std::mem::take(&mut dedupe.anomalies) {
            *anomalies.entry(k).or_insert(0) += v;
        }
        PipelineView {
            dedupe,
            accounting: counts.accounting.clone(),
            anomalies,
            tunnels: counts.tunnels.total(),
            tcp: TcpReport::from_stats(&counts.flows, counts.flows.mirror_duplicate_frames, counts.conns),
            smb2: counts.smb2.clone(),
            first_ts_ns: clock.first_ts,
            last_ts_ns: clock.last_ts,
            frames: clock.frames,
            window_ns,
        }
    }
}

impl Pipeline {
    /// The live snapshot: the same parts as a `--threads` run's (`PipelineView::of`).
    pub fn view(&mut self) -> PipelineView {
        let counts = self.counts();
        PipelineView::of(self.shared.dedupe.settled(), &counts, &self.clock, self.window_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A direction that never carried a byte holds only the arguments of its stream (the
    /// stream itself is made at the first byte, gap or close); then it behaves as a made one.
    #[test]
    fn a_stream_is_made_at_its_first_byte() {
        assert!(std::mem::size_of::<Consumer>() <= 64, "{}", std::mem::size_of::<Consumer>());
        assert!(std::mem::size_of::<Smb2Stream>() > 4 * std::mem::size_of::<Consumer>());
        let a = (IpAddr::from([198, 18, 0, 1]), 50000);
        let b = (IpAddr::from([198, 18, 0, 2]), 445);
        let mut c = Consumer::smb2(7, true, true, a, b);
        let mut p = Pipeline::new(&Config::default(), None);
        assert!(!StreamConsumer::<Shared>::carries_storage(&c));
        let ctx = FrameCtx::default();
        StreamConsumer::<Shared>::data(&mut c, &[0, 0, 0, 4, 0xfe, b'S', b'M', b'B'], &ctx, &mut p.shared);
        let Consumer::Smb2(s) = &c else { panic!("made at the first byte") };
        assert!(StreamConsumer::<Shared>::carries_storage(s.as_ref()) == StreamConsumer::<Shared>::carries_storage(&c));
        let mut idle = Consumer::smb2(8, false, true, b, a);
        StreamConsumer::<Shared>::close(&mut idle, &ctx, &mut p.shared);
        assert!(matches!(idle, Consumer::Smb2(_)), "made to be closed");
    }

    #[test]
    fn a_memory_budget_bounds_every_part_that_grows() {
        let c = Config::from_json(r#"{"max_memory_bytes": 104857600}"#).unwrap();
        let b = Budget::of(100 << 20);
        assert_eq!(c.dedupe.max_index_bytes, Some(b.index));
        let fc = flow_config(&c);
        assert_eq!(fc.max_total_buffered_bytes as u64, b.reorder);
        assert_eq!(fc.max_flows as u64, b.flows / FLOW_STATE_ESTIMATE);
        assert!(fc.reassembly.max_buffered_bytes <= fc.max_total_buffered_bytes);
        let p = Pipeline::new(&c, None);
        assert_eq!(p.shared.smb.opening_cap, b.opening);
        // An explicit lower index bound stays; a higher one is cut to the budget's share.
        let low = Config::from_json(r#"{"max_memory_bytes": 104857600, "max_index_memory_bytes": 4096}"#).unwrap();
        assert_eq!(low.dedupe.max_index_bytes, Some(4096));
        let high = Config::from_json(r#"{"max_memory_bytes": 104857600, "max_index_memory_bytes": 1073741824}"#).unwrap();
        assert_eq!(high.dedupe.max_index_bytes, Some(b.index));
        // No budget: the defaults.
        let d = Config::from_json("{}").unwrap();
        assert_eq!(flow_config(&d), FlowConfig::default());
        assert_eq!(d.dedupe.max_index_bytes, None);
        assert!(Config::from_json(r#"{"max_memory_bytes": 1000}"#).is_err());
    }

    /// `top_n` past `MAX_TOP_N` and times past 64 bits are refused with a line that names the
    /// bound (the top count was cut to 10,000 without a word; the times' message named only
    /// the JSON key).
    #[test]
    fn top_and_time_bounds_are_refused_naming_the_bound() {
        assert_eq!(Config::from_json(r#"{"top_n": 10000}"#).unwrap().dedupe.top_n, 10_000);
        let e = Config::from_json(r#"{"top_n": 10001}"#).err().unwrap();
        assert_eq!(e, "top must be a whole number from 0 to 10000, got 10001");
        assert!(Config::from_json(r#"{"top_n": -1}"#).err().unwrap().contains("from 0 to 10000, got -1"));
        assert_eq!(Config::from_json(r#"{"from_ns": 18446744073709551615}"#).unwrap().from_ns, Some(u64::MAX));
        let e = Config::from_json(r#"{"to_ns": 99999999999999999999}"#).err().unwrap();
        assert!(e.starts_with("the --to time (to_ns) must be in ns since 1970 and before 2554-07-21"), "{e}");
    }

    /// The window and the interval: 1 us to 1 day, refused with the value as given (a huge one
    /// in JSON's notation, not its 301 digits); a window is rounded to whole ns, never to 0.
    #[test]
    fn window_and_interval_bounds() {
        assert_eq!(Config::from_json(r#"{"window_seconds": 0.3}"#).unwrap().dedupe.window_ns, 300_000_000);
        assert_eq!(Config::from_json(r#"{"window_seconds": 0.000001}"#).unwrap().dedupe.window_ns, 1_000);
        assert_eq!(Config::from_json(r#"{"window_seconds": 86400}"#).unwrap().dedupe.window_ns, 86_400_000_000_000);
        for (w, shown) in [("1e-300", "1e-300"), ("0", "0"), ("-1", "-1"), ("1e300", "1e+300"), ("86400.5", "86400.5")] {
            let e = Config::from_json(&format!(r#"{{"window_seconds": {w}}}"#)).err().unwrap();
            assert_eq!(e, format!("the window must be between 0.000001 and 86400 seconds, got {shown}"));
        }
        let e = Config::from_json(r#"{"series_interval_seconds": 1e300}"#).err().unwrap();
        assert_eq!(e, "the interval must be between 0.000001 and 86400 seconds, got 1e+300");
        assert_eq!(Config::from_json(r#"{"series_interval_seconds": null}"#).unwrap().dedupe.series_interval_ns, Config::default().dedupe.series_interval_ns);
        assert!(Config::from_json(r#"{"window_seconds": "60"}"#).is_err());
    }
}
