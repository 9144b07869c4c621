//! A live analysis session: the capture source and a `Pipeline` on their own thread.
//!
//! The thread reads frames from the source into the pipeline (and, with `--write`, into a
//! rotating pcapng set) and, every interval, publishes a snapshot JSON: the result so far
//! (same shape as `smbwire/1`, sends in the window counted provisionally), the source's
//! counters, and bytes per second per class over the last minutes. The Python side polls
//! the latest snapshot and renders it; rendering never holds up the capture. `stop` ends the
//! loop, drains what is queued, and returns the final result of `Pipeline::finish` — the
//! same figures `smbwire analyze` gives on a capture of the same frames.
//!
//! Memory is bounded: the pipeline by its window, the history by `history_seconds`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::rotate::{RotatingPcapng, WriteOptions};
use super::privs::{self, Summary, User};
use super::{Backend, HookInfo, LiveError, LiveOptions, LiveSource, LiveStats};
use crate::accounting::Accounting;
use crate::dedupe::Class;
use crate::parallel::Engine;
use crate::pipeline::{Config, PipelineView};
use crate::report::{self, InputFile};

#[derive(Clone, Debug)]
pub struct SessionOptions {
    pub live: LiveOptions,
    pub write: Option<WriteOptions>,
    /// Per-second rate samples kept (the TUI's history).
    pub history_seconds: usize,
    /// Snapshot period.
    pub interval: Duration,
    /// Drop privileges once the source is attached (`smbwire live` always does); `None`
    /// keeps them (an embedding program that drops them itself).
    pub privileges: Option<PrivilegeOptions>,
    /// Test aid (hidden `--test-frame-delay-us`): the session spends this long on every
    /// frame before analysing it, so a test can put the analysis below the capture rate.
    pub frame_delay: Duration,
}

#[derive(Clone, Debug, Default)]
pub struct PrivilegeOptions {
    /// Also switch to this user (`--user`: its uid, gid and supplementary groups).
    pub user: Option<String>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            live: LiveOptions::default(),
            write: None,
            history_seconds: 300,
            interval: Duration::from_secs(1),
            privileges: None,
            frame_delay: Duration::ZERO,
        }
    }
}

/// Payload bytes per second of each class, and wire totals, over one interval.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RateSample {
    /// End of the interval, seconds since the epoch.
    pub t: f64,
    pub seconds: f64,
    /// Storage-traffic wire bytes and packets per second (the source's exact counters).
    pub wire_bytes: f64,
    pub packets: f64,
    /// Payload bytes per second by class, in `Class::ALL` order (keys are class names).
    pub classes: std::collections::BTreeMap<&'static str, f64>,
}

#[derive(Default)]
struct Published {
    seq: u64,
    snapshot: Option<Arc<str>>,
}

struct Shared {
    stop: AtomicBool,
    published: Mutex<Published>,
    changed: Condvar,
}

pub struct LiveSession {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Result<String, String>>>,
    backend: Backend,
    hook: Option<HookInfo>,
    fallback_reason: Option<String>,
    seen: Mutex<u64>,
}

type Ready = Result<(Backend, Option<HookInfo>, Option<String>), LiveError>;

impl LiveSession {
    /// Opens `iface` (eBPF, else AF_PACKET unless required) and starts the capture thread.
    /// Errors (permission, no such interface, unwritable `--write` path) come back here.
    pub fn start(iface: &str, mut opts: SessionOptions, config: Config) -> Result<LiveSession, LiveError> {
        if opts.live.queues == 0 {
            // One capture queue per decoding worker.
            opts.live.queues = config.threads.clamp(1, super::MAX_QUEUES as usize) as u32;
        }
        let user = match opts.privileges.as_ref().and_then(|p| p.user.as_deref()) {
            Some(name) => Some(privs::lookup_user(name)?),
            None => None,
        };
        let mut writer = match &opts.write {
            Some(w) => Some(RotatingPcapng::create(w.clone()).map_err(|e| {
                LiveError::Io(format!("{}: cannot write capture file: {e}", w.path.display()))
            })?),
            None => None,
        };
        if let (Some(w), Some(u)) = (writer.as_mut(), user.as_ref()) {
            // The first file was created by root: it belongs to the user the capture runs as.
            w.chown_current(u.uid, u.gid)
                .map_err(|e| LiveError::Io(format!("--write: cannot give the file to {}: {e}", u.name)))?;
        }
        let drop_privileges = opts.privileges.is_some();
        let rotation_dir = opts
            .write
            .as_ref()
            .filter(|w| w.size_limit > 0)
            .map(|w| match w.path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => std::path::PathBuf::from("."),
            });
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            published: Mutex::new(Published::default()),
            changed: Condvar::new(),
        });
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Ready>(1);
        // Privilege drop: the starting thread tells the capture thread when its own part
        // (and the switch of user, which glibc applies to every thread) is done; the capture
        // thread then drops its capabilities and says so, before any frame is read.
        let (go_tx, go_rx) = mpsc::sync_channel::<Result<(), String>>(1);
        let (dropped_tx, dropped_rx) = mpsc::sync_channel::<Result<(), String>>(1);
        let thread_shared = shared.clone();
        let iface_owned = iface.to_string();
        let thread_user = user.clone();
        let thread = std::thread::Builder::new()
            .name("smbwire-live".into())
            .spawn(move || {
                // The source is opened on this thread: it is not Send (raw ring pointers).
                let (source, backend, why) = match super::open(&iface_owned, &opts.live) {
                    Ok(v) => v,
                    Err(e) => {
                        let msg = e.to_string();
                        let _ = ready_tx.send(Err(e));
                        return Err(msg);
                    }
                };
                let mut summary = None;
                let mut keep = 0;
                if drop_privileges {
                    if source.reads_need_cap() {
                        keep = privs::cap_for_bpf_reads();
                    }
                    if let Err(e) = privs::limit_thread(keep != 0) {
                        let e = LiveError::Io(format!("dropping privileges: {e}"));
                        let _ = ready_tx.send(Err(e.clone()));
                        return Err(e.to_string());
                    }
                }
                let _ = ready_tx.send(Ok((backend, source.hook(), why.clone())));
                if drop_privileges {
                    match go_rx.recv() {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return Err(e),
                        Err(_) => return Err("the live session was abandoned".into()),
                    }
                    if let Err(e) = privs::set_thread_caps(keep) {
                        let msg = format!("dropping privileges: {e}");
                        let _ = dropped_tx.send(Err(msg.clone()));
                        return Err(msg);
                    }
                    summary = Some(privs::summary(thread_user.as_ref(), keep));
                    let _ = dropped_tx.send(Ok(()));
                }
                let mut cap = Capture::new(iface_owned, source, backend, why, opts, config, writer);
                cap.privileges = summary;
                Ok(cap.run(&thread_shared))
            })
            .map_err(|e| LiveError::Io(format!("cannot start the capture thread: {e}")))?;
        let (backend, hook, fallback_reason) = match ready_rx.recv() {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let why = match thread.join() {
                    Err(_) => "the capture thread panicked".to_string(),
                    Ok(Err(e)) => e,
                    Ok(Ok(_)) => "the capture thread ended early".to_string(),
                };
                return Err(LiveError::Io(why));
            }
        };
        if drop_privileges {
            let mine = drop_own(user.as_ref(), rotation_dir.as_deref());
            let _ = go_tx.send(mine.clone());
            let theirs = match mine {
                Ok(()) => dropped_rx
                    .recv()
                    .unwrap_or_else(|_| Err("the capture thread ended early".into())),
                Err(e) => Err(e),
            };
            if let Err(e) = theirs {
                shared.stop.store(true, Ordering::SeqCst);
                let _ = thread.join();
                return Err(LiveError::Io(e));
            }
        }
        Ok(LiveSession {
            shared,
            thread: Some(thread),
            backend,
            hook,
            fallback_reason,
            seen: Mutex::new(0),
        })
    }

    /// The eBPF hook in use; None with AF_PACKET.
    pub fn hook(&self) -> Option<HookInfo> {
        self.hook
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Why eBPF is not used, when it is not.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// The newest snapshot not returned before, waiting up to `timeout` for one.
    pub fn poll(&self, timeout: Duration) -> Option<Arc<str>> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let guard = self.shared.published.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = self
            .shared
            .changed
            .wait_timeout_while(guard, timeout, |p| p.seq == *seen)
            .unwrap_or_else(|e| e.into_inner());
        if guard.seq == *seen {
            return None;
        }
        *seen = guard.seq;
        guard.snapshot.clone()
    }

    /// Whether the capture thread has ended on its own (a capture error).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops the capture, drains what is queued, and returns the final result JSON.
    /// A second call returns an error.
    pub fn stop(&mut self) -> Result<String, String> {
        self.shared.stop.store(true, Ordering::SeqCst);
        let thread = self.thread.take().ok_or("the live session is already stopped")?;
        match thread.join() {
            Ok(r) => r,
            Err(_) => Err("the capture thread panicked".to_string()),
        }
    }
}

/// A `--threads` worker's first step: no capability at all.
fn worker_start() {
    let _ = privs::limit_thread(false);
    let _ = privs::set_thread_caps(0);
}

/// The starting thread's part of the drop: bounding and ambient sets, no_new_privs, the
/// switch of user (all threads), then no capability at all.
fn drop_own(user: Option<&User>, rotation_dir: Option<&std::path::Path>) -> Result<(), String> {
    privs::limit_thread(false).map_err(|e| format!("dropping privileges: {e}"))?;
    if let Some(u) = user {
        privs::switch_user(u).map_err(|e| format!("--user {}: {e}", u.name))?;
    }
    privs::set_thread_caps(0).map_err(|e| format!("dropping privileges: {e}"))?;
    if let Some(dir) = rotation_dir {
        // Rotation creates files after the drop: fail now rather than at the first rotation.
        if !privs::can_write_dir(dir) {
            let who = user.map_or("this process without capabilities".to_string(), |u| u.name.clone());
            return Err(format!(
                "--write: {} is not writable by {who} (new files are created there after the privilege drop)",
                dir.display()
            ));
        }
    }
    Ok(())
}

impl Drop for LiveSession {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.stop();
        }
    }
}

/// After a stop, reading goes on until this many empty batches in a row (AF_PACKET hands
/// a partly filled block over only when its retire timer fires) or `DRAIN_MAX` passes.
const DRAIN_EMPTY_BATCHES: u32 = 2;
const DRAIN_MAX: Duration = Duration::from_secs(2);
const BATCH_WAIT_MS: i32 = 100;

struct Capture {
    iface: String,
    source: Box<dyn LiveSource>,
    backend: Backend,
    fallback_reason: Option<String>,
    opts: SessionOptions,
    /// One pipeline, or `--threads` workers and the ordered stage.
    pipeline: Option<Engine>,
    writer: Option<RotatingPcapng>,
    started: Instant,
    started_wall: f64,
    frames: u64,
    captured_bytes: u64,
    history: VecDeque<RateSample>,
    prev_classes: [u64; Class::COUNT],
    prev_wire: (u64, u64),
    prev_at: Instant,
    error: Option<String>,
    privileges: Option<Summary>,
    shed: Shedder,
}

/// The live result's error line for a `--write` that failed (`RotatingPcapng`: nothing is
/// written after the first error).
fn write_error(error: &str, frames_written: u64) -> String {
    format!(
        "--write: cannot write {error}: the capture files hold only the {frames_written} frame{} written before it; the analysis went on",
        if frames_written == 1 { "" } else { "s" }
    )
}

/// When the capture queues fill up faster than the analysis empties them, whole connections
/// are shed rather than letting a queue overflow, which would drop scattered frames of every
/// connection (and with them every message those frames belonged to). A shed connection is
/// not analysed from then on: the capture point stops copying it (eBPF: the kernel's shed
/// map; its exact counters go on), and its frames already queued are discarded here, before
/// `--write` and the analysis, so what is analysed (and written) of it is a prefix of its
/// byte streams, with no hole. Its bytes count in `live.shed` and lower
/// `live.analysed.fraction`. A shed connection stays shed for the rest of the session.
///
/// The cut of a TCP connection is made in sequence space, not at one frame: frames of a
/// direction can reach the capture point out of order (a span port's copies, queued on two
/// CPUs, swap places), and a cut at a frame whose predecessor came after it would leave a
/// hole the analysis reports as lost bytes (a TCP gap) that were only shed. So the first
/// `SHED_SETTLE_FRAMES` frames of each direction after the choice are still analysed, and
/// after them each segment that ends at or before the furthest of those (one that arrived
/// late, or a retransmission); the rest is discarded. RDMA (RoCE) is cut at the frame.
///
/// The capture point sheds too (eBPF): when a frame of a connection not shed finds its ring
/// nearly full (this thread starved of CPU, say, and not looking), the program sheds that
/// connection at that frame and marks it (`Handed::shed_here`), copying the same settling
/// frames after it; `admit` cuts the connection there as if it had chosen it at that frame.
///
/// Policy: after every batch (at most 2 ms, `live::batch_full`), when the fullest queue is at
/// least `SHED_HIGH` full and was fuller at `SHED_RISES` looks since it last drained than at
/// the look before (each 2 to 50 ms after it: a queue that keeps filling while it is read is
/// overload; one that filled during a stall, such as an index table growing or the thread
/// waiting for a CPU, and drains once it is read again is not), or is `SHED_URGENT` full, the
/// next storage frame's connection is shed (a draw weighted by frames, so the busiest
/// connection is the likeliest); the next shedding waits `SHED_SPACING`. After the capture
/// point shed connections, a full queue is not urgent until it has drained below
/// `SHED_HIGH` (`draining`).
struct Shedder {
    enabled: bool,
    tcp_ports: Vec<u16>,
    conns: crate::fasthash::FastMap<super::FlowKey, Cut>,
    /// The order connections were shed in, for the report (at most `SHED_LISTED`).
    listed: Vec<super::FlowKey>,
    /// Shed the connection of the next storage frame.
    want: bool,
    /// Shed by the last batch, still to be told to the capture point.
    fresh: Vec<super::FlowKey>,
    last: Option<Instant>,
    /// Queued frames of shed connections discarded here (frame bytes as captured, and their
    /// wire length).
    frames: u64,
    bytes: u64,
    /// Connections the capture point stopped copying: told by the session
    /// (`LiveSource::shed` said yes) or shed there (`admit`'s `shed_here`).
    stopped: crate::fasthash::FastSet<super::FlowKey>,
    /// Frames at which the capture point shed their connection (`shed_here`), seen here.
    chosen_seen: u64,
    /// Connections the capture point had shed itself at the last look (`shed_chosen`).
    chosen_at_look: u64,
    /// The capture point shed connections and the queue has not drained below `SHED_HIGH`
    /// since: a full queue is then not urgent (`after_batch`).
    draining: bool,
    /// The last look at the unread backlog (when, how full; `LiveSource::unread`), and how
    /// many looks since it last drained (or since a stall) found it fuller than the look before.
    sample: Option<(Instant, f64)>,
    rises: u32,
}

/// Where a shed TCP connection is cut, per direction (`Shedder::admit`): index 0 is the
/// direction from the connection key's first end (`FlowKey::connection`).
type Cut = [CutDirection; 2];

#[derive(Clone, Copy, Debug)]
struct CutDirection {
    /// Frames of this direction still analysed whatever their place.
    settle: u8,
    /// The sequence number after the furthest segment analysed since the choice.
    end: Option<u32>,
}

impl Default for CutDirection {
    fn default() -> Self {
        CutDirection { settle: SHED_SETTLE_FRAMES, end: None }
    }
}

/// Frames of each direction of a TCP connection still analysed after it is chosen to be shed
/// (`Shedder` doc): a segment that arrived before one of them but belongs after it is then
/// behind the cut too, as long as the two were at most this many frames apart.
/// The kernel program copies as many after it sheds a connection itself (bpf/smbwire.h).
const SHED_SETTLE_FRAMES: u8 = crate::abi::u8_of(crate::abi::SMBWIRE_SHED_SETTLE);

/// `a` is at or before `b` in sequence space (RFC 9293 3.4: within 2^31 of each other).
fn seq_at_or_before(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) as i32 >= 0
}

const SHED_HIGH: f64 = 0.5;
const SHED_URGENT: f64 = 0.9;
const SHED_SPACING: Duration = Duration::from_millis(10);
/// Two looks at the backlog at least this far apart tell whether it is filling, and at most
/// this far: a look after a longer gap (a stall) only starts a new comparison.
const SHED_SAMPLE_MIN_AGE: Duration = Duration::from_millis(2);
const SHED_SAMPLE_MAX_AGE: Duration = Duration::from_millis(50);
/// Looks since the queue last drained that must find it fuller than the look before (a look
/// that finds it as full counts neither way) before it counts as filling: one rise may
/// be a stall (on a 2-core host with a 4.5 Gbit/s replay, one of about 30 ms took the queue
/// past `SHED_HIGH` and shed the only connection, 2026-11-27), two are the queue filling
/// while it is read.
const SHED_RISES: u32 = 2;
const SHED_LISTED: usize = 32;
/// Connections shed at most: past it the queues may overflow again (ring drops).
const SHED_MAX: usize = 65_536;

impl Shedder {
    fn new(enabled: bool, tcp_ports: Vec<u16>) -> Shedder {
        Shedder {
            enabled,
            tcp_ports,
            conns: Default::default(),
            listed: Vec::new(),
            want: false,
            fresh: Vec::new(),
            last: None,
            frames: 0,
            bytes: 0,
            stopped: Default::default(),
            chosen_seen: 0,
            chosen_at_look: 0,
            draining: false,
            sample: None,
            rises: 0,
        }
    }

    /// Whether `frame` is to be analysed; false for a frame of a shed connection discarded
    /// (counted). Sheds the frame's connection when one is wanted, or when the capture point
    /// shed it at this frame (`shed_here`: its queue was nearly full; it copies the
    /// frames of the cut, `SHED_SETTLE_FRAMES` a direction, and no more).
    fn admit(&mut self, frame: &crate::capture::RawFrame<'_>, shed_here: bool) -> bool {
        if self.conns.is_empty() && !self.want && !shed_here {
            return true;
        }
        let seen = super::classify::inspect(frame.data, &self.tcp_ports);
        let Some(key) = seen.key else {
            return true;
        };
        let conn = key.connection();
        if shed_here {
            self.chosen_seen += 1;
            self.stopped.insert(conn);
        }
        let dir = usize::from((key.saddr, key.sport) != (conn.saddr, conn.sport));
        let room = self.conns.len() < SHED_MAX;
        let cut = match self.conns.entry(conn) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                // Shed the connection of the next storage frame when one is wanted, and the
                // one the capture point shed (whatever the room: it stopped copying it).
                if shed_here {
                    // The capture point knows.
                } else if self.want && room {
                    self.want = false;
                    self.fresh.push(conn);
                } else {
                    return true;
                }
                if self.listed.len() < SHED_LISTED {
                    self.listed.push(conn);
                }
                e.insert(Cut::default())
            }
        };
        if Self::behind_cut(&mut cut[dir], seen.tcp) {
            return true;
        }
        self.frames += 1;
        self.bytes += u64::from(frame.info.orig_len);
        false
    }

    /// Whether a frame of a shed connection's direction lies behind its cut (`Shedder` doc):
    /// one of the direction's first `SHED_SETTLE_FRAMES` since the choice, or a segment
    /// ending at or before the furthest of those. Never for RDMA (`tcp` None).
    fn behind_cut(d: &mut CutDirection, tcp: Option<super::classify::TcpSpan>) -> bool {
        let Some(seg) = tcp else { return false };
        if d.settle > 0 {
            d.settle -= 1;
            if seg.len > 0 && d.end.is_none_or(|e| seq_at_or_before(e, seg.end())) {
                d.end = Some(seg.end());
            }
            return true;
        }
        seg.len > 0 && d.end.is_some_and(|e| seq_at_or_before(seg.end(), e))
    }

    /// After a batch: tell the capture point what was shed, and decide whether to shed more.
    fn after_batch(&mut self, source: &mut dyn LiveSource) {
        for conn in self.fresh.drain(..) {
            if source.shed(&conn) {
                self.stopped.insert(conn);
            }
        }
        if !self.enabled || self.want || self.conns.len() >= SHED_MAX {
            return;
        }
        // The capture point shed connections itself since the last look (its queue nearly
        // full while this thread did not run, or not soon enough): their inflow has stopped,
        // and what is queued of them is whole up to its cut. Shedding the next frame's
        // connection would discard that backlog, so a full queue is not urgent until it has
        // drained below `SHED_HIGH` (the capture point sheds again if it fills up meanwhile),
        // and the filling is measured anew.
        let chosen = source.shed_chosen();
        if chosen != self.chosen_at_look {
            self.chosen_at_look = chosen;
            self.draining = true;
            self.sample = None;
            self.rises = 0;
            return;
        }
        let now = Instant::now();
        // How full the queue is (the space the kernel cannot write), and of that what is not
        // handed out yet. They differ only while `--threads` workers decode frames where an
        // eBPF ring holds them (`LiveSource::unread`): those stretches come back as the
        // workers finish, a few MiB at most, and rise and fall with the batches in flight,
        // so the analysis is behind when what is unread grows, not what is lent
        // (docs/performance-log.md, 2026-12-02: no change in how often replays shed).
        let backlog = source.backlog();
        let unread = source.unread();
        // Unread above the mark and filling: `SHED_RISES` looks since it last drained found
        // it fuller than the look before, each within SHED_SAMPLE_MAX_AGE of it (after a
        // long stall the queue may be draining fast, and one stall, such as an index table
        // growing, is no overload). Nearly full is urgent, whatever holds the space.
        self.rises = match self.sample {
            // Too close to the last look to tell: keep that one.
            Some((at, _)) if now.duration_since(at) < SHED_SAMPLE_MIN_AGE => self.rises,
            Some((at, b)) => {
                self.sample = Some((now, unread));
                if now.duration_since(at) > SHED_SAMPLE_MAX_AGE || unread < b {
                    0
                } else if unread > b {
                    self.rises.saturating_add(1)
                } else {
                    // As full as then (AF_PACKET counts whole blocks): no news either way.
                    self.rises
                }
            }
            None => {
                self.sample = Some((now, unread));
                0
            }
        };
        let filling = self.rises >= SHED_RISES;
        let spaced = self.last.is_none_or(|t| t.elapsed() >= SHED_SPACING);
        self.draining &= backlog >= SHED_HIGH;
        let urgent = backlog >= SHED_URGENT && !self.draining;
        if (urgent || (unread >= SHED_HIGH && filling)) && spaced {
            self.want = true;
            self.last = Some(now);
        }
    }

    /// `live.shed`: what was shed, with the capture point's share. A connection the capture
    /// point shed at a frame this session never saw (that frame found the ring full) is
    /// counted by the kernel only (`shed_chosen`): it is added here.
    fn section(&self, stats: &LiveStats) -> Value {
        let unseen = stats.shed_chosen.saturating_sub(self.chosen_seen);
        json!({
            "enabled": self.enabled,
            "connections": self.conns.len() as u64 + unseen,
            "connections_at_capture_point": self.stopped.len() as u64 + unseen,
            "connections_shed_by_capture_point": stats.shed_chosen,
            "listed": self.listed.iter().map(|k| k.to_string()).collect::<Vec<_>>(),
            "frames": self.frames + stats.shed_frames,
            "wire_bytes": self.bytes + stats.shed_bytes,
            "queued_frames_discarded": self.frames,
            "capture_point_frames": stats.shed_frames,
        })
    }
}

impl Capture {
    fn new(
        iface: String,
        source: Box<dyn LiveSource>,
        backend: Backend,
        fallback_reason: Option<String>,
        opts: SessionOptions,
        config: Config,
        writer: Option<RotatingPcapng>,
    ) -> Capture {
        Capture {
            iface,
            source,
            backend,
            fallback_reason,
            // Decoding workers start without any capability (the capture thread may keep
            // CAP_BPF on kernels that check it for map reads; see `privs`).
            pipeline: Some(Engine::with_start(&config, None, Some(worker_start))),
            writer,
            started: Instant::now(),
            started_wall: wall_now(),
            frames: 0,
            captured_bytes: 0,
            history: VecDeque::with_capacity(opts.history_seconds),
            prev_classes: [0; Class::COUNT],
            prev_wire: (0, 0),
            prev_at: Instant::now(),
            error: None,
            privileges: None,
            shed: Shedder::new(opts.live.shed, opts.live.tcp_ports.clone()),
            opts,
        }
    }

    fn run(&mut self, shared: &Shared) -> String {
        let mut next_snapshot = Instant::now() + self.opts.interval;
        let mut drain: Option<(Instant, u32)> = None;
        loop {
            if drain.is_none() && shared.stop.load(Ordering::SeqCst) {
                drain = Some((Instant::now(), 0));
            }
            if let Some((since, empty)) = drain {
                if empty >= DRAIN_EMPTY_BATCHES || since.elapsed() >= DRAIN_MAX {
                    break;
                }
            }
            let wait = next_snapshot
                .saturating_duration_since(Instant::now())
                .as_millis()
                .min(BATCH_WAIT_MS as u128) as i32;
            let n = match self.read_batch(wait) {
                Ok(n) => n,
                Err(e) => {
                    self.error = Some(format!("capture on {} failed: {e}", self.iface));
                    break;
                }
            };
            if let Some((_, empty)) = drain.as_mut() {
                *empty = if n == 0 && !self.source.held() { *empty + 1 } else { 0 };
            }
            if Instant::now() >= next_snapshot {
                next_snapshot += self.opts.interval;
                if next_snapshot < Instant::now() {
                    // Fell behind (a long batch): skip missed ticks rather than bursting.
                    next_snapshot = Instant::now() + self.opts.interval;
                }
                self.publish(shared);
            }
        }
        if let Some(w) = self.writer.as_mut() {
            w.flush();
        }
        // A last snapshot, so a poller sees the final counters even on a capture error.
        self.publish(shared);
        self.finish()
    }

    fn read_batch(&mut self, wait_ms: i32) -> std::io::Result<usize> {
        let pipeline = self.pipeline.as_mut().expect("pipeline lives until finish");
        let writer = &mut self.writer;
        let frames = &mut self.frames;
        let bytes = &mut self.captured_bytes;
        let shed = &mut self.shed;
        let delay = self.opts.frame_delay;
        let n = self.source.next_batch(wait_ms, &mut |f, handed| {
            if !shed.admit(&f, handed.shed_here) {
                return;
            }
            if !delay.is_zero() {
                let until = Instant::now() + delay;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
            *frames += 1;
            *bytes += f.data.len() as u64;
            if let Some(w) = writer.as_mut() {
                w.write(&f);
            }
            pipeline.process_live(&f, handed.lease);
        })?;
        self.shed.after_batch(self.source.as_mut());
        Ok(n)
    }

    fn input(&self) -> InputFile {
        InputFile {
            path: format!("live:{}", self.iface),
            size_bytes: self.captured_bytes,
            frames: self.frames,
            source: "interface",
            compression: None,
            compressed_bytes: None,
            tunnels: None,
        }
    }

    fn live_section(&self, stats: &LiveStats) -> Value {
        let mut errors = Vec::new();
        if let Some(e) = &self.error {
            errors.push(e.clone());
        }
        // A capture file the user asked for that stopped short is an error of the run (exit
        // status 1), not only a line in the live view: the analysis went on without it.
        let write = self.writer.as_ref().map(|w| w.stats());
        if let Some(w) = &write {
            if let Some(e) = &w.error {
                errors.push(write_error(e, w.frames_written));
            }
        }
        json!({
            "iface": self.iface,
            "backend": self.backend,
            "hook": self.source.hook().map(|h| h.hook),
            "xdp_mode": self.source.hook().and_then(|h| h.xdp_mode),
            "xdp_copy": self.source.hook().and_then(|h| h.xdp_copy),
            "ring_copy": self.source.hook().map(|h| h.ring_copy),
            "fallback_reason": self.fallback_reason,
            "privileges": self.privileges,
            "started": self.started_wall,
            "uptime_seconds": self.started.elapsed().as_secs_f64(),
            "stats": stats,
            "write": write,
            "shed": self.shed.section(stats),
            "errors": errors,
        })
    }

    fn publish(&mut self, shared: &Shared) {
        let Some(pipeline) = self.pipeline.as_mut() else {
            return;
        };
        // With RDMA counters (PSN gaps, unlinked transfers) for the capture health line.
        let (view, rdma) = pipeline.view();
        let rdma = json!(rdma);
        let stats = self.source.stats();
        self.sample(&view, &stats);
        let mut result = view_result(&view, self.input(), self.started);
        result["rdma"] = rdma;
        let mut live = self.live_section(&stats);
        live["rates"] = json!({
            "classes": Class::ALL.iter().map(|c| c.name()).collect::<Vec<_>>(),
            "samples": self.history,
        });
        live["analysed"] = analysed_section(&result, &stats, self.captured_bytes, self.shed.bytes);
        result["live"] = live;
        let text: Arc<str> = result.to_string().into();
        if let Some(w) = self.writer.as_mut() {
            w.flush();
        }
        let mut p = shared.published.lock().unwrap_or_else(|e| e.into_inner());
        p.seq += 1;
        p.snapshot = Some(text);
        shared.changed.notify_all();
    }

    /// One rate sample: the change in (provisional) payload bytes per class since the last
    /// one. A block reclassified later (its receiver forwarded it) moves between classes in
    /// the interval where that is seen; a class never shows a negative rate.
    fn sample(&mut self, view: &PipelineView, stats: &LiveStats) {
        let now = Instant::now();
        let seconds = now.duration_since(self.prev_at).as_secs_f64().max(1e-3);
        self.prev_at = now;
        let mut totals = [0u64; Class::COUNT];
        for e in &view.dedupe.edges {
            if let Some(i) = Class::ALL.iter().position(|c| *c == e.class) {
                totals[i] += e.figures.payload_bytes;
            }
        }
        let mut classes = std::collections::BTreeMap::new();
        for (i, c) in Class::ALL.iter().enumerate() {
            let d = totals[i].saturating_sub(self.prev_classes[i]);
            classes.insert(c.name(), d as f64 / seconds);
        }
        self.prev_classes = totals;
        let wire = (stats.bytes_matched, stats.packets_matched);
        let sample = RateSample {
            t: wall_now(),
            seconds,
            wire_bytes: wire.0.saturating_sub(self.prev_wire.0) as f64 / seconds,
            packets: wire.1.saturating_sub(self.prev_wire.1) as f64 / seconds,
            classes,
        };
        self.prev_wire = wire;
        if self.history.len() >= self.opts.history_seconds.max(1) {
            self.history.pop_front();
        }
        self.history.push_back(sample);
    }

    fn finish(&mut self) -> String {
        let stats = self.source.stats();
        let pipeline = self.pipeline.take().expect("finish once");
        let results = pipeline.finish(vec![self.input()], Accounting::default(), self.started);
        let mut v = serde_json::to_value(&results).unwrap_or_else(|e| json!({ "error": e.to_string() }));
        let mut live = self.live_section(&stats);
        live["rates"] = json!({
            "classes": Class::ALL.iter().map(|c| c.name()).collect::<Vec<_>>(),
            "samples": self.history,
        });
        live["analysed"] = analysed_section(&v, &stats, self.captured_bytes, self.shed.bytes);
        v["live"] = live;
        v.to_string()
    }
}

/// How much of the storage traffic the capture point matched was analysed
/// (`live.analysed`, docs/live.md): `storage_bytes` the capture point matched (eBPF: counted
/// in the kernel before any ring could drop a frame; AF_PACKET: of the frames the socket
/// delivered), `delivered_bytes` that reached the analysis, `not_analysed_bytes` of those in a
/// not-analysed category (encrypted without key, gaps never filled, unparsed, ...),
/// `shed_bytes` of connections shed under overload (not delivered: skipped by the capture
/// point, or discarded from the queues by the session), and
/// `fraction` = (delivered − not analysed) / max(storage, delivered), 1 before any traffic.
pub fn analysed_section(result: &Value, stats: &LiveStats, delivered: u64, discarded: u64) -> Value {
    use crate::accounting::{Disposition, CATEGORIES};
    let cats = &result["accounting"]["categories"];
    let not_analysed: u64 = CATEGORIES
        .iter()
        .filter(|c| matches!(c.disposition, Disposition::NotAnalysed))
        .filter_map(|c| cats[c.name].as_u64())
        .sum();
    let storage = stats.bytes_matched.max(delivered);
    let fraction = if storage == 0 { 1.0 } else { delivered.saturating_sub(not_analysed) as f64 / storage as f64 };
    json!({
        "storage_bytes": stats.bytes_matched,
        "delivered_bytes": delivered,
        "not_analysed_bytes": not_analysed,
        "shed_bytes": stats.shed_bytes + discarded,
        "fraction": fraction,
    })
}

/// A snapshot in the shape of the final result (`smbwire/1`), from a `PipelineView`.
fn view_result(view: &PipelineView, mut input: InputFile, started: Instant) -> Value {
    // One input, the interface: its tunnels are all of them (as in the final result).
    input.tunnels = Some(view.tunnels.clone());
    let input_bytes = input.size_bytes;
    let total = view.accounting.total();
    let first = view.first_ts_ns.map(|t| t as f64 / 1e9);
    let last = view.first_ts_ns.map(|_| view.last_ts_ns as f64 / 1e9);
    let elapsed = started.elapsed().as_secs_f64();
    let mut out = Map::new();
    out.insert("schema".into(), json!(report::SCHEMA));
    out.insert("smbwire_version".into(), json!(env!("CARGO_PKG_VERSION")));
    out.insert("snapshot".into(), json!(true));
    out.insert("inputs".into(), json!([input]));
    out.insert("window_seconds".into(), json!(view.window_ns as f64 / 1e9));
    out.insert(
        "capture".into(),
        json!({
            "first_ts": first,
            "last_ts": last,
            "duration_seconds": match (first, last) { (Some(a), Some(b)) => b - a, _ => 0.0 },
        }),
    );
    if let Ok(Value::Object(d)) = serde_json::to_value(&view.dedupe) {
        out.extend(d);
    }
    out.insert(
        "accounting".into(),
        json!({
            "categories": view.accounting.iter().map(|(k, v)| (k.to_string(), v)).collect::<std::collections::BTreeMap<_, _>>(),
            "total_bytes": total,
            "input_bytes": input_bytes,
            // Bytes still buffered in reassembly are accounted when they are delivered.
            "reconciled": total == input_bytes,
        }),
    );
    out.insert("tunnels".into(), json!(view.tunnels));
    out.insert("anomalies".into(), json!(view.anomalies));
    out.insert("tcp".into(), json!(view.tcp));
    out.insert("smb2".into(), json!(view.smb2));
    out.insert("findings".into(), json!([]));
    out.insert("warnings".into(), json!([]));
    out.insert(
        "analysis".into(),
        json!({
            "elapsed_seconds": elapsed,
            "frames": view.frames,
            "bytes_per_second": if elapsed > 0.0 { input_bytes as f64 / elapsed } else { 0.0 },
        }),
    );
    let mut out = Value::Object(out);
    // The same findings as the final result (crate::findings), from the figures so far.
    crate::findings::attach(&mut out, Vec::new());
    out
}

fn wall_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live snapshot names the tunnels its frames came in, as the final result does: here a
    /// VXLAN packet (outer Ethernet, IPv4, UDP to 4789, VXLAN) holding a TCP SYN to port 445.
    #[test]
    fn a_snapshot_names_the_tunnels_its_frames_came_in() {
        let mut inner = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        inner.extend([0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2]);
        inner.extend([0xc0, 0x00, 0x01, 0xbd, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
        let mut frame = vec![2, 0, 0, 0, 0, 4, 2, 0, 0, 0, 0, 3, 0x08, 0x00];
        let ip_len = (20 + 8 + 8 + inner.len()) as u16;
        frame.extend([0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 19, 0, 1, 198, 19, 0, 2]);
        frame[16..18].copy_from_slice(&ip_len.to_be_bytes());
        // UDP 49152 -> 4789, its length, no checksum; VXLAN: the I flag, VNI 42.
        frame.extend([0xc0, 0x00, 0x12, 0xb5]);
        frame.extend((8 + 8 + inner.len() as u16).to_be_bytes());
        frame.extend([0, 0]);
        frame.extend([0x08, 0, 0, 0, 0, 0, 42, 0]);
        frame.extend(&inner);
        let mut p = crate::pipeline::Pipeline::new(&crate::pipeline::Config::default(), None);
        let info = crate::capture::FrameInfo { ts_ns: 1, linktype: crate::wire::linktype::ETHERNET, orig_len: frame.len() as u32, ..Default::default() };
        p.process(&crate::capture::RawFrame { info, data: &frame });
        let input = InputFile { path: "span0".into(), size_bytes: frame.len() as u64, frames: 1, source: "character_device", compression: None, compressed_bytes: None, tunnels: None };
        let snap = view_result(&p.view(), input, Instant::now());
        let around = frame.len() - inner.len();
        assert_eq!(snap["tunnels"], json!({"vxlan": {"frames": 1, "bytes": around}}), "{snap}");
        assert_eq!(snap["inputs"][0]["tunnels"], snap["tunnels"], "{snap}");
        assert_eq!(snap["tcp"]["flows"], json!(1), "the SYN inside was the frame analysed");
    }

    #[test]
    fn missing_interface_fails_at_start_and_leaves_no_thread() {
        let r = LiveSession::start("smbwire-no-such-if0", SessionOptions::default(), Config::default());
        match r {
            Err(LiveError::NoSuchInterface(i)) => assert_eq!(i, "smbwire-no-such-if0"),
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("opened a missing interface"),
        }
    }

    #[test]
    fn unwritable_capture_path_fails_at_start() {
        let opts = SessionOptions {
            write: Some(WriteOptions {
                path: "/nonexistent-dir-smbwire/x.pcapng".into(),
                size_limit: 0,
                count: 1,
                snaplen: 100,
            }),
            ..Default::default()
        };
        match LiveSession::start("lo", opts, Config::default()) {
            Err(LiveError::Io(msg)) => assert!(msg.contains("cannot write capture file"), "{msg}"),
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("started with an unwritable capture path"),
        }
    }

    #[test]
    fn analysed_fraction_counts_what_was_matched_delivered_and_analysed() {
        let stats = |matched| LiveStats { bytes_matched: matched, ..Default::default() };
        let result = |not_analysed: u64| json!({"accounting": {"categories": {"smb_payload": 900, "smb_encrypted": not_analysed, "protocol_headers": 100}}});
        // Nothing yet: nothing was lost.
        assert_eq!(analysed_section(&result(0), &stats(0), 0, 0)["fraction"], 1.0);
        // The kernel matched 2000 bytes, 1000 reached the analysis, 100 of them encrypted.
        let a = analysed_section(&result(100), &stats(2000), 1000, 0);
        assert_eq!(a["fraction"], 0.45);
        assert_eq!((a["storage_bytes"].as_u64(), a["delivered_bytes"].as_u64(), a["not_analysed_bytes"].as_u64()), (Some(2000), Some(1000), Some(100)));
        // AF_PACKET counts what it delivered: the fraction is over those bytes.
        assert_eq!(analysed_section(&result(0), &stats(0), 1000, 0)["fraction"], 1.0);
        // Shed: 300 bytes skipped by the kernel, 200 discarded from the queues; the kernel
        // matched all 1500, 1000 were analysed.
        let s = LiveStats { bytes_matched: 1500, shed_bytes: 300, ..Default::default() };
        let a = analysed_section(&result(0), &s, 1000, 200);
        assert_eq!(a["shed_bytes"].as_u64(), Some(500));
        assert_eq!(a["fraction"].as_f64().map(|f| (f * 1500.0).round()), Some(1000.0));
    }

    /// A TCP/445 frame between 198.18.0.`a`:`sport` and 198.18.0.`b`:`dport` (Ethernet,
    /// IPv4, TCP, no payload).
    fn tcp_frame(a: u8, sport: u16, b: u8, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 54];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[16..18].copy_from_slice(&40u16.to_be_bytes());
        f[23] = 6;
        f[26..30].copy_from_slice(&[198, 18, 0, a]);
        f[30..34].copy_from_slice(&[198, 18, 0, b]);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f[46] = 0x50;
        f
    }

    /// `tcp_frame` carrying `payload` bytes at sequence number `seq`, with TCP `flags`.
    fn tcp_segment(a: u8, sport: u16, b: u8, dport: u16, seq: u32, payload: usize, flags: u8) -> Vec<u8> {
        let mut f = tcp_frame(a, sport, b, dport);
        f[16..18].copy_from_slice(&(40 + payload as u16).to_be_bytes());
        f[38..42].copy_from_slice(&seq.to_be_bytes());
        f[47] = flags;
        f.resize(54 + payload, 0xab);
        f
    }

    /// A frame of a TCP connection reordered on its way to the capture point around the
    /// place it is shed stays analysed when it lies behind the cut, so what is analysed of
    /// each direction has no hole (a TCP gap in the report would claim lost bytes); past
    /// the cut nothing is, retransmissions of what was analysed are, and RoCE is cut at the
    /// frame. Fails when the cut is made at the frame the connection is chosen at.
    #[test]
    fn a_tcp_cut_is_made_in_sequence_space_behind_frames_that_came_late() {
        use crate::capture::{FrameInfo, RawFrame};
        use crate::wire::tcp::flags::{ACK, FIN};
        for base in [1_000u32, u32::MAX - 2_500] {
            let mut shed = Shedder::new(true, vec![445]);
            let admit = |shed: &mut Shedder, d: &[u8]| {
                let info = FrameInfo {
                    frame: crate::frame::FrameRef { file: 0, number: 1 },
                    ts_ns: 1,
                    linktype: crate::capture::linktype::ETHERNET,
                    orig_len: d.len() as u32,
                };
                shed.admit(&RawFrame { info, data: d }, false)
            };
            let out = |k: u32| tcp_segment(1, 50000, 2, 445, base.wrapping_add(k * 1000), 1000, ACK);
            let back = |seq: u32, n: usize| tcp_segment(2, 445, 1, 50000, seq, n, ACK);
            // Analysed before the choice: segments 0 and 2 (1 is on its way, late).
            assert!(admit(&mut shed, &out(0)) && admit(&mut shed, &out(2)));
            shed.want = true;
            // Chosen at segment 3; it and the direction's next settling frames are analysed.
            for k in 3..3 + u32::from(SHED_SETTLE_FRAMES) {
                assert!(admit(&mut shed, &out(k)), "settling frame {k}");
            }
            assert_eq!(shed.fresh.len(), 1, "the capture point is told at once");
            let end = 3 + u32::from(SHED_SETTLE_FRAMES);
            // Past the furthest settled segment: discarded.
            assert!(!admit(&mut shed, &out(end)), "{base}");
            // Segment 1, late: behind the cut, analysed; so is a retransmission of segment 5.
            assert!(admit(&mut shed, &out(1)), "{base}: the late segment left a hole");
            assert!(admit(&mut shed, &out(5)));
            // A FIN past the cut, a segment straddling it, and a pure ACK: discarded.
            let fin = tcp_segment(1, 50000, 2, 445, base.wrapping_add(end * 1000), 0, ACK | FIN);
            assert!(!admit(&mut shed, &fin));
            let straddling = tcp_segment(1, 50000, 2, 445, base.wrapping_add(end * 1000 - 500), 1000, ACK);
            assert!(!admit(&mut shed, &straddling));
            assert!(!admit(&mut shed, &tcp_segment(1, 50000, 2, 445, base.wrapping_add(end * 1000), 0, ACK)));
            // The other direction settles on its own frames: pure ACKs give it no place, so
            // after them its next data is past the cut.
            for _ in 0..SHED_SETTLE_FRAMES {
                assert!(admit(&mut shed, &back(7, 0)));
            }
            assert!(!admit(&mut shed, &back(7, 100)));
            assert_eq!(shed.frames, 5);
            // RoCEv2 (UDP to 4791): cut at the frame it is chosen at.
            let mut roce = tcp_frame(3, 49152, 4, 4791);
            roce[23] = 17;
            shed.want = true;
            assert!(!admit(&mut shed, &roce));
            assert_eq!((shed.frames, shed.conns.len()), (6, 2));
        }
    }

    /// A connection the capture point shed itself (its ring nearly full: the frame comes
    /// with `shed_here`) is cut at that frame as if the session had chosen it there, whether
    /// or not the session wanted one, and is not told to the capture point again; what came
    /// before the frame stays analysed. The counts in `live.shed` include it, and one the
    /// kernel counted whose frame never came (`shed_chosen` beyond what was seen).
    #[test]
    fn a_connection_the_capture_point_shed_is_cut_at_its_frame() {
        use crate::capture::{FrameInfo, RawFrame};
        use crate::wire::tcp::flags::ACK;
        let mut shed = Shedder::new(true, vec![445]);
        let admit = |shed: &mut Shedder, d: &[u8], here: bool| {
            let info = FrameInfo { ts_ns: 1, linktype: crate::capture::linktype::ETHERNET, orig_len: d.len() as u32, ..Default::default() };
            shed.admit(&RawFrame { info, data: d }, here)
        };
        let out = |k: u32| tcp_segment(1, 50000, 2, 445, 1_000 + k * 1000, 1000, ACK);
        let other = |k: u32| tcp_segment(5, 50001, 2, 445, 9_000 + k * 1000, 1000, ACK);
        assert!(admit(&mut shed, &out(0), false) && admit(&mut shed, &out(1), false));
        // Shed at segment 2 by the capture point: it and the direction's settling frames.
        for k in 2..2 + u32::from(SHED_SETTLE_FRAMES) {
            assert!(admit(&mut shed, &out(k), k == 2), "settling frame {k}");
        }
        assert!(!shed.want && shed.fresh.is_empty(), "the capture point knows already");
        assert!(!admit(&mut shed, &out(2 + u32::from(SHED_SETTLE_FRAMES)), false));
        assert!(admit(&mut shed, &other(0), false), "another connection is untouched");
        assert_eq!((shed.conns.len(), shed.frames, shed.chosen_seen), (1, 1, 1));
        // The session sheds the other one itself later: told to the capture point.
        shed.want = true;
        assert!(admit(&mut shed, &other(1), false));
        let mut src = Filling { backlog: 0.0, unread: None, told: Vec::new(), chosen: 0 };
        shed.after_batch(&mut src);
        assert_eq!(src.told.len(), 1);
        // The kernel shed three connections, one of them at a frame never seen here.
        let stats = LiveStats { shed_chosen: 2, ..Default::default() };
        let v = shed.section(&stats);
        assert_eq!(v["connections"], 3);
        assert_eq!(v["connections_at_capture_point"], 3);
        assert_eq!(v["connections_shed_by_capture_point"], 2);
        // A frame marked for a connection the session shed first: no second entry.
        let mut shed = Shedder::new(true, vec![445]);
        shed.want = true;
        assert!(admit(&mut shed, &out(0), false));
        shed.after_batch(&mut src);
        assert!(admit(&mut shed, &out(1), true));
        let v = shed.section(&LiveStats { shed_chosen: 1, ..Default::default() });
        assert_eq!((v["connections"].as_u64(), v["connections_at_capture_point"].as_u64()), (Some(1), Some(1)));
    }

    /// A source whose queue is as full as the test says, recording what it is told to shed;
    /// `unread`, when set, is the part not handed out (else all of it).
    struct Filling {
        backlog: f64,
        unread: Option<f64>,
        told: Vec<super::super::FlowKey>,
        /// `shed_chosen`: connections the capture point shed itself.
        chosen: u64,
    }

    impl LiveSource for Filling {
        fn next_batch(
            &mut self,
            _t: i32,
            _f: &mut dyn FnMut(crate::capture::RawFrame<'_>, super::super::Handed<'_>),
        ) -> std::io::Result<usize> {
            Ok(0)
        }
        fn stats(&self) -> LiveStats {
            LiveStats::default()
        }
        fn backlog(&self) -> f64 {
            self.backlog
        }
        fn unread(&self) -> f64 {
            self.unread.unwrap_or(self.backlog)
        }
        fn shed(&mut self, conn: &super::super::FlowKey) -> bool {
            self.told.push(*conn);
            true
        }
        fn shed_chosen(&self) -> u64 {
            self.chosen
        }
    }

    /// After the capture point shed connections itself (the queue nearly full while the
    /// session did not run), a full queue is not urgent until it has drained below half:
    /// what is queued of those connections is whole up to their cut and is analysed, not
    /// discarded by shedding the next frame's connection. A queue that fills again while
    /// draining still sheds, and once drained a full queue is urgent again.
    #[test]
    fn after_the_capture_point_shed_a_full_queue_drains_before_it_is_urgent() {
        let mut shed = Shedder::new(true, vec![445]);
        let mut src = Filling { backlog: 0.95, unread: None, told: Vec::new(), chosen: 2 };
        shed.after_batch(&mut src);
        assert!(!shed.want, "the capture point shed at the look");
        std::thread::sleep(Duration::from_millis(3));
        shed.after_batch(&mut src);
        assert!(!shed.want, "draining: not urgent");
        // Filling again while draining: two rises, shed.
        for b in [0.96, 0.97] {
            std::thread::sleep(Duration::from_millis(3));
            src.backlog = b;
            shed.after_batch(&mut src);
        }
        assert!(shed.want, "filling while draining sheds");
        // Drained below half, then full: urgent again.
        let mut shed = Shedder::new(true, vec![445]);
        src.backlog = 0.95;
        shed.after_batch(&mut src);
        std::thread::sleep(Duration::from_millis(3));
        src.backlog = 0.3;
        shed.after_batch(&mut src);
        std::thread::sleep(Duration::from_millis(3));
        src.backlog = 0.95;
        shed.after_batch(&mut src);
        assert!(shed.want, "urgent once drained");
        // Without a shed by the capture point, a full queue is urgent at once.
        let mut shed = Shedder::new(true, vec![445]);
        src.chosen = 0;
        shed.after_batch(&mut src);
        assert!(shed.want);
    }

    #[test]
    fn a_full_queue_sheds_the_next_connection_whole_and_only_that() {
        use crate::capture::{FrameInfo, RawFrame};
        let frame = |data: &[u8], n: u64| -> (FrameInfo, Vec<u8>) {
            let info = FrameInfo {
                frame: crate::frame::FrameRef { file: 0, number: n },
                ts_ns: n,
                linktype: crate::capture::linktype::ETHERNET,
                orig_len: data.len() as u32,
            };
            (info, data.to_vec())
        };
        let mut shed = Shedder::new(true, vec![445]);
        let mut src = Filling { backlog: 0.2, unread: None, told: Vec::new(), chosen: 0 };
        let a_out = tcp_frame(1, 50000, 2, 445);
        let a_back = tcp_frame(2, 445, 1, 50000);
        let b_out = tcp_frame(3, 50001, 2, 445);
        let mut other = tcp_frame(1, 50000, 2, 8080);
        other[36..38].copy_from_slice(&8080u16.to_be_bytes());
        let admit = |shed: &mut Shedder, d: &[u8]| {
            let (info, data) = frame(d, 1);
            shed.admit(&RawFrame { info, data: &data }, false)
        };
        // Below the mark: nothing is shed.
        shed.after_batch(&mut src);
        assert!(admit(&mut shed, &a_out) && admit(&mut shed, &b_out));
        // Above it after a stall (the last look too long ago to compare), then draining:
        // nothing.
        src.backlog = 0.6;
        std::thread::sleep(SHED_SAMPLE_MAX_AGE + Duration::from_millis(5));
        shed.after_batch(&mut src);
        assert!(!shed.want, "a look after a stall only starts a comparison");
        // One look at the queue, far enough after the last one to compare with it.
        let look = |shed: &mut Shedder, src: &mut Filling, backlog: f64| {
            src.backlog = backlog;
            std::thread::sleep(SHED_SAMPLE_MIN_AGE);
            shed.after_batch(src);
            (shed.want, shed.rises)
        };
        assert_eq!(look(&mut shed, &mut src, 0.55), (false, 0), "draining");
        // Fuller than at the last look once: may be a stall; nothing.
        assert_eq!(look(&mut shed, &mut src, 0.6), (false, 1), "one rise may be a stall");
        // As full as at the last look: the rise still counts, alone it sheds nothing.
        assert_eq!(look(&mut shed, &mut src, 0.6), (false, 1));
        // Drained since: the rises count again from there.
        assert_eq!(look(&mut shed, &mut src, 0.58), (false, 0));
        assert_eq!(look(&mut shed, &mut src, 0.6), (false, 1), "one rise since it drained");
        // Above it and filling at two looks since it drained: the next storage frame's
        // connection (not other traffic).
        assert_eq!(look(&mut shed, &mut src, 0.61), (true, 2));
        assert!(admit(&mut shed, &other), "not storage traffic: never the one shed");
        // The next storage frame's connection is shed: the first SHED_SETTLE_FRAMES frames
        // of each direction are still analysed (pure ACKs here: no sequence space, so
        // nothing lies behind the cut after them) ...
        for _ in 0..SHED_SETTLE_FRAMES {
            assert!(admit(&mut shed, &a_back) && admit(&mut shed, &a_out));
        }
        assert_eq!(shed.conns.len(), 1);
        // ... and from then on both directions of it are discarded, others pass.
        assert!(!admit(&mut shed, &a_back));
        assert!(!admit(&mut shed, &a_out));
        assert!(admit(&mut shed, &b_out));
        assert_eq!((shed.frames, shed.bytes), (2, 108));
        // The capture point is told after the batch, once; spacing holds the next shed back.
        shed.after_batch(&mut src);
        assert_eq!(src.told.len(), 1);
        assert_eq!(src.told[0], super::super::classify::classify(&a_out, &[445]).unwrap().connection());
        assert!(!shed.want, "within SHED_SPACING of the last shed at 0.61");
        // Urgent: not filling (it drained since), once the spacing has passed.
        assert_eq!(look(&mut shed, &mut src, 0.3), (false, 0));
        src.backlog = 0.95;
        std::thread::sleep(SHED_SPACING);
        shed.after_batch(&mut src);
        assert!(shed.want && shed.rises < SHED_RISES, "{}", shed.rises);
        assert!(admit(&mut shed, &b_out), "chosen, one of its settling frames");
        assert!(!shed.want && shed.conns.len() == 2);
        let section = shed.section(&LiveStats { shed_frames: 5, shed_bytes: 500, ..Default::default() });
        assert_eq!(section["connections"], 2);
        assert_eq!(section["frames"], 2 + 5);
        assert_eq!(section["listed"].as_array().map(|l| l.len()), Some(2));
        // Disabled: never sheds.
        let mut off = Shedder::new(false, vec![445]);
        src.backlog = 1.0;
        off.after_batch(&mut src);
        assert!(admit(&mut off, &a_out));
    }

    #[test]
    fn lent_space_rising_is_no_overload_but_unread_rising_and_a_nearly_full_queue_are() {
        let look = |shed: &mut Shedder, src: &mut Filling, backlog: f64, unread: f64| {
            (src.backlog, src.unread) = (backlog, Some(unread));
            std::thread::sleep(SHED_SAMPLE_MIN_AGE);
            shed.after_batch(src);
            (shed.want, shed.rises)
        };
        let mut shed = Shedder::new(true, vec![445]);
        // A queue part of whose space is lent to workers: `backlog` is all of it, `unread`
        // what is not handed out yet.
        let mut src = Filling { backlog: 0.0, unread: Some(0.0), told: Vec::new(), chosen: 0 };
        // The queue above the mark and filling, but with what the workers hold: nothing.
        assert_eq!(look(&mut shed, &mut src, 0.55, 0.10), (false, 0));
        assert_eq!(look(&mut shed, &mut src, 0.60, 0.10), (false, 0));
        assert_eq!(look(&mut shed, &mut src, 0.70, 0.10), (false, 0));
        assert_eq!(look(&mut shed, &mut src, 0.85, 0.10), (false, 0));
        // What is unread above the mark and filling at two looks: shed.
        assert_eq!(look(&mut shed, &mut src, 0.80, 0.50), (false, 1));
        assert_eq!(look(&mut shed, &mut src, 0.85, 0.55), (true, 2));
        // Nearly full, however little of it is unread: urgent.
        let mut shed = Shedder::new(true, vec![445]);
        assert!(look(&mut shed, &mut src, 0.95, 0.05).0);
    }
}

/// Real capture on the loopback interface (needs root: CI runs as root).
#[cfg(test)]
mod capture_tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    fn run_on_lo(force_af_packet: bool) {
        if !crate::live::privileged_test_runs("live capture test", (!is_root()).then(|| "not root".to_string())) {
            return;
        }
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut opts = SessionOptions {
            interval: Duration::from_millis(200),
            history_seconds: 3,
            ..Default::default()
        };
        opts.live.tcp_ports = vec![port];
        opts.live.force_af_packet = force_af_packet;
        opts.live.promisc = false;
        let mut s = LiveSession::start("lo", opts, Config::default()).expect("start on lo");
        assert_eq!(s.backend() == Backend::AfPacket, force_af_packet || s.fallback_reason().is_some());
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut buf = Vec::new();
            c.read_to_end(&mut buf).unwrap();
            buf.len()
        });
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(&[0x5a; 100_000]).unwrap();
        drop(c);
        assert_eq!(server.join().unwrap(), 100_000);
        let snap = s.poll(Duration::from_secs(5)).expect("a snapshot within 5 s");
        let snap: Value = serde_json::from_str(&snap).unwrap();
        assert_eq!(snap["snapshot"], json!(true));
        assert_eq!(snap["schema"], json!(report::SCHEMA));
        // The time series is in the final result only (docs/json-schema.md).
        assert!(snap.get("series").is_none());
        assert!(snap["rdma"]["gaps"].is_u64(), "RDMA counters in the snapshot");
        // Loopback drops nothing here: the interface counters are read and are zero.
        assert_eq!(snap["live"]["stats"]["interface_drops"], json!(0));
        // Samples are bounded by history_seconds.
        std::thread::sleep(Duration::from_millis(1000));
        let snap: Value = serde_json::from_str(&s.poll(Duration::from_secs(2)).unwrap()).unwrap();
        assert!(snap["live"]["rates"]["samples"].as_array().unwrap().len() <= 3);
        let t = Instant::now();
        let fin: Value = serde_json::from_str(&s.stop().expect("final result")).unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "stop took {:?}", t.elapsed());
        assert!(s.is_finished());
        assert!(s.stop().is_err(), "second stop");
        assert!(fin.get("snapshot").is_none());
        assert_eq!(fin["series"]["requested_interval_seconds"], json!(1.0));
        assert!(fin["series"]["rows"].is_array());
        let stats = &fin["live"]["stats"];
        assert!(stats["bytes_matched"].as_u64().unwrap() >= 100_000, "{stats}");
        // The flow table was read (eBPF: in batches): the client's direction is the largest.
        assert!(stats["flow_count"].as_u64().unwrap() >= 1, "{stats}");
        assert!(stats["flows"][0]["bytes"].as_u64().unwrap() >= 100_000, "{stats}");
        assert_eq!(stats["flows"][0]["flow"].as_str().unwrap().split(' ').nth(2), Some(format!("127.0.0.1:{port}").as_str()), "{stats}");
        let frames = fin["inputs"][0]["frames"].as_u64().unwrap();
        assert!(frames > 0);
        assert_eq!(fin["analysis"]["frames"].as_u64().unwrap(), frames);
        assert_eq!(fin["accounting"]["reconciled"], json!(true), "{}", fin["accounting"]);
    }

    #[test]
    fn session_on_loopback_ebpf_or_fallback() {
        run_on_lo(false);
    }

    #[test]
    fn session_on_loopback_af_packet() {
        run_on_lo(true);
    }
}
