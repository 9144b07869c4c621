//! `--threads N`: N decoding workers and one ordered stage, with the result of one pipeline.
//!
//! ```text
//!  reader (this thread) ──frames of connection c──▶ worker of c: Pipeline<Recorder>
//!     clock, sweeps                                   wire, TCP/RDMA, SMB2, SMB Direct, BLAKE3
//!        │                                                         │ marked events
//!        └── ordered stage (this thread): Dedupe ◀── merge by frame number / mark ──┘
//! ```
//!
//! - **Sharding.** A frame goes to the worker of its connection (`Sharder`: a new connection
//!   to the worker handed the fewest bytes so far): both directions of a TCP
//!   connection (its address and port pair), every RDMA packet between two addresses (RoCE
//!   queue pairs, their CM exchange, InfiniBand and IPoIB between two ports), so every piece
//!   of per-connection state (reassembly, framing, pending requests, SMB Direct links,
//!   iWARP's MPA detection) lives in one worker.
//! - **Order.** The reader numbers frames (`FrameCtx::seq`) and keeps the clock; ids of what
//!   a frame opens derive from its number, so they do not depend on the worker. Each worker
//!   records its sends, completions and name changes with a `Mark` (the frame, or the flow a
//!   sweep or the end closed); the ordered stage replays frame by frame in capture order, and
//!   a sweep's or the end's closes of all workers in the order of marks, which is the order
//!   one pipeline's tables close them in. So the ordered stage receives exactly the event
//!   stream of one pipeline, and the result is the same JSON (tested on every capture).
//! - **What crosses connections.** Names of shares and files (a file opened on one channel of
//!   a multichannel session and written on another) are journaled by the workers (`NameOp`)
//!   and kept by the ordered stage, which names a send its worker could not. With `--keys`, the
//!   sessions' preauth hashes, which a 3.1.1 session's keys derive from on its first channel,
//!   are shared by the workers in capture order (`smb2::keyshare`).
//! - **Limits**: the flow table's and all flows' reorder bounds (and with `--max-memory`
//!   their budget shares) are divided among the workers, so the run holds what one pipeline
//!   would; the SMB2 state maps and per-direction buffers keep their bounds per worker.
//!   Results are one pipeline's while no bound is reached (each is reported when it is).
//! - **Idle workers hash.** A worker waiting for its next batch digests block batches that
//!   busy workers' payload hashers hand to the run's `HashPool` (`payload::offload`), so one
//!   busy connection does not leave the other workers idle while BLAKE3 runs on one core;
//!   the reader, waiting for a worker's batch, digests queued batches too. Small payloads'
//!   blocks (4 KiB I/O) are digested 16 at a time across payloads (`offload::gather`), each
//!   batch's before its events are handed on.
//! - **Memory.** At most `DEPTH` (6; 3 for live rings) batches per worker are in flight. A
//!   frame of a capture file goes to its worker as a place in the reader's 1 MiB read buffer,
//!   which the batch holds on to (`Source::chunk`): no copy; the reader reads on into another
//!   buffer and reuses one once no batch holds it. A frame of a live eBPF ring goes as a
//!   place in the ring, the batch holding the ring's `Lease` of that stretch, which the
//!   kernel may not write until no batch holds it (`live::ebpf::Ring::lend`); AF_PACKET
//!   frames are copied once into the batch's buffer. Buffers are reused. Capture files are read, not mapped: why, and the
//!   measurements, at `capture::source::ReadMode`.
//! - **Between cores.** What one thread writes and another reads crosses between their
//!   cores a cache line at a time, and the host may place the two vCPUs of this project's
//!   machine kind far apart (a line's round trip 400 ns instead of 100-160;
//!   bench/core_latency.c). So a worker asks for the bytes of the frame two ahead of the one it
//!   decodes (`FRAMES_AHEAD`), settles its sends' digests before handing a batch on, and
//!   frees what the ordered stage hands back (`Spent`) on its own core.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::accounting::{cat, Accounting};
use crate::anomaly::Anomalies;
use crate::capture::merge::Merged;
use crate::capture::{CaptureError, FrameInfo, RawFrame};
use crate::capture::source::ReadMode;
use crate::context::{phase, Mark, NameOp, PayloadSink};
use crate::smb2::bounded::BoundedMap;
use crate::dedupe::Dedupe;
use crate::frame::FrameCtx;
use crate::ledger::LedgerWriter;
use crate::payload::hash::PendingDigest;
use crate::payload::offload::{self, HashPool};
use crate::payload::send::SendRecord;
use crate::pipeline::{AnalyzeError, Clock, Config, Counts, Finished, Pipeline, Run};
use crate::report::{InputFile, Results};
use crate::smb2::keyshare::{self, KeyShare};
use crate::smb2::state::{ShareAndFile, SmbState};
use crate::wire::{self, Transport};

/// A worker asks for the bytes of the frame this many steps ahead of the one it decodes, up
/// to `PREFETCH_FRAME_BYTES` of it. Alternating runs, `--threads 2` (2026-11-29): MSS 1448
/// frames 0.265-0.27 s against 0.29 (median of 6; 8 of 8 pairs faster in a slower minute,
/// 0.29 against 0.355), 4 KiB I/O 0.485 against 0.50 (11 of 16 faster), jumbo frames the same;
/// 1, 2 and 4 ahead about alike.
const FRAMES_AHEAD: usize = 2;
const PREFETCH_FRAME_BYTES: usize = 16 * 1024;

/// Payload names the ordered stage keeps for sends still to come (`Ordered::looked_up`): as
/// many as SMB2 pending requests one pipeline keeps.
const LOOKUPS_KEPT: usize = 1 << 18;

/// Batches in flight per worker before the reader waits for the oldest one's events.
///
/// Six, not three: on two cores the reader and two workers share the CPUs, and a thread that
/// waits out the scheduler's slice (a few ms) stalled the others within 3 batches (about 3 ms
/// of work): 4 connections of MSS-1448 writes, `--threads 2`, took 1.01-1.10 s at 3 and
/// 0.78-0.86 s at 16 (2026-11-27). Not sixteen: since the batches hold the reader's buffers,
/// what is in flight is what the workers read after the reader, and 6 MiB of it stays in the
/// caches where 16 MiB did not: alternating runs at 4, 6, 8 and 16, 5 each (2026-11-29), took
/// 0.29 / 0.46 / 0.19 / 0.30 s at 6 against 0.32 / 0.49 / 0.21 / 0.35 s at 16 (MSS 1448, 4 KiB
/// I/O, jumbo, 4 channels; user CPU 4-14% less), 4 and 8 about as 6. A frame in a read
/// buffer costs the batch 40 bytes (the buffers it holds are the reader's: at most
/// `BATCH_BYTES` of frames per batch); frames copied into the batch (live rings) cost
/// `BATCH_BYTES` a batch each, so when a run copies `DEPTH_COPIED` are in flight: with 16, a
/// live run's resident set grew by 8 MiB after its warm-up as bursts filled more batches
/// (tests/live/test_live_memory.py). Frames left in an eBPF ring (`Lease`) hold room in the
/// ring instead, which the kernel cannot fill meanwhile: `DEPTH_COPIED` too.
const DEPTH: usize = 6;
const DEPTH_COPIED: usize = 3;
/// A batch is handed out at this many frames or bytes, whichever comes first.
static BATCH_FRAMES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1024);
const BATCH_BYTES: usize = 1 << 20;

/// What a worker recorded, in order, with the mark it was recorded under.
pub(crate) enum Item {
    /// A send; with a pending digest when other workers were still digesting its last blocks
    /// (`PayloadSink::send_pending`): the ordered stage settles it (`settled`).
    Send(Box<SendRecord>, Option<Box<PendingDigest>>),
    Complete { conn: u64, message_id: u64, ts_ns: u64 },
    Names(Vec<NameOp>),
    /// The worker's out-of-order bytes now, in its TCP and MPA tables.
    Buffered(u64, u64),
    /// The end of a sweep's events (`Step::Sweep`). The ordered stage replays a sweep's
    /// closes up to it: a worker with no frames between two sweeps of one batch has both
    /// sweeps' closes in a row, and without it the first sweep took the second's too (their
    /// marks do not say which sweep they belong to).
    SweepDone,
}

pub(crate) use crate::context::settled;

/// What the ordered stage is done with that a worker allocated: handed back with the
/// worker's next batch and freed there (`Batch::spent`). Freed by the reader, each record
/// (its box, block list, the share and file names it holds a count of) went back to the
/// worker's allocator pages and reference counts from the other core, a cache line's round
/// trip each, several per 4 KiB send; the host sometimes places the two vCPUs far apart
/// (bench/core_latency.c), and then such round trips cost 400 ns.
#[allow(dead_code)] // held only to be dropped on the worker's thread
pub(crate) enum Spent {
    Send(Box<SendRecord>),
    Names(Vec<NameOp>),
}

/// A worker's payload sink: records everything, with its mark.
pub(crate) struct Recorder {
    mark: Mark,
    pub(crate) out: Vec<(Mark, Item)>,
}

impl Recorder {
    pub(crate) fn new() -> Recorder {
        Recorder { mark: Mark::default(), out: Vec::new() }
    }
}

impl PayloadSink for Recorder {
    fn send(&mut self, rec: SendRecord) {
        self.out.push((self.mark, Item::Send(Box::new(rec), None)));
    }
    fn send_pending(&mut self, rec: SendRecord, digest: PendingDigest) {
        self.out.push((self.mark, Item::Send(Box::new(rec), Some(Box::new(digest)))));
    }
    fn complete(&mut self, conn: u64, message_id: u64, ts_ns: u64) {
        self.out.push((self.mark, Item::Complete { conn, message_id, ts_ns }));
    }
    fn mark(&mut self, mark: Mark) {
        self.mark = mark;
    }
    fn names(&mut self, ops: Vec<NameOp>) {
        self.out.push((self.mark, Item::Names(ops)));
    }
}

/// `Step::Frame::chunk` of a frame copied into the batch's buffer.
const COPIED: u32 = u32::MAX;

enum Step {
    /// A frame: its context and its bytes, at `start..start + len` of read buffer or ring
    /// lease `chunk` of the batch's `chunks`, or of the batch's own buffer (`COPIED`:
    /// AF_PACKET rings).
    Frame { info: FrameInfo, ctx: FrameCtx, chunk: u32, start: usize, len: usize },
    /// Close the flows idle at this time (the first number: after the frame with the
    /// second).
    Sweep(u64, u64),
}

/// Bytes a batch holds on to instead of copying the frames lying in them: a capture file's
/// read buffer (`Source::chunk`) or a stretch of a live ring the kernel may not write until
/// the last batch holding it is spent (`Lease`).
#[derive(Clone)]
pub enum Chunk {
    Buf(Arc<Vec<u8>>),
    Lease(Arc<Lease>),
}

impl Chunk {
    /// Its bytes at `start..start + len` (a frame's).
    #[inline]
    fn slice(&self, start: usize, len: usize) -> &[u8] {
        match self {
            Chunk::Buf(b) => &b[start..start + len],
            Chunk::Lease(l) => l.slice(start, len),
        }
    }

    fn same(&self, other: ChunkRef<'_>) -> bool {
        match (self, other) {
            (Chunk::Buf(a), ChunkRef::Buf(b)) => Arc::ptr_eq(a, b),
            (Chunk::Lease(a), ChunkRef::Lease(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// A borrowed `Chunk`, as the reader offers it with a frame.
#[derive(Clone, Copy)]
enum ChunkRef<'a> {
    Buf(&'a Arc<Vec<u8>>),
    Lease(&'a Arc<Lease>),
}

impl ChunkRef<'_> {
    /// Where its bytes start, and how many.
    fn span(&self) -> (usize, usize) {
        match self {
            ChunkRef::Buf(b) => (b.as_ptr() as usize, b.len()),
            ChunkRef::Lease(l) => (l.ptr as usize, l.len),
        }
    }

    fn to_owned(self) -> Chunk {
        match self {
            ChunkRef::Buf(b) => Chunk::Buf(b.clone()),
            ChunkRef::Lease(l) => Chunk::Lease(l.clone()),
        }
    }
}

/// Memory someone else owns whose frames handed out with the lease stay readable and
/// unchanged while it lives: a stretch of a live capture ring (`live::ebpf`), which the ring hands back to the kernel
/// only once no batch holds its lease (`Arc::get_mut` on the ring's own reference).
pub struct Lease {
    ptr: *const u8,
    len: usize,
    /// Keeps the memory mapped.
    _owner: Arc<dyn Send + Sync>,
}

// SAFETY: the bytes are only read, and stay mapped and unwritten while the lease lives
// (`Lease::new`'s contract); `_owner` is Send + Sync.
unsafe impl Send for Lease {}
// SAFETY: as above.
unsafe impl Sync for Lease {}

impl Lease {
    /// # Safety
    /// `ptr..ptr + len` must stay mapped while `owner` lives, and nothing may write the bytes
    /// of the frames handed out with the lease while it (or a clone of its `Arc`) lives.
    pub unsafe fn new(ptr: *const u8, len: usize, owner: Arc<dyn Send + Sync>) -> Lease {
        Lease { ptr, len, _owner: owner }
    }

    /// Its bytes at `start..start + len`. Only frames handed out with the lease are read:
    /// the rest of a ring's stretch may be written by the kernel meanwhile.
    #[inline]
    pub fn slice(&self, start: usize, len: usize) -> &[u8] {
        assert!(start <= self.len && len <= self.len - start, "a frame outside its lease");
        // SAFETY: within the lease (checked), which `new`'s contract keeps mapped and unwritten.
        unsafe { std::slice::from_raw_parts(self.ptr.add(start), len) }
    }
}

struct Batch {
    data: Vec<u8>,
    /// Read buffers and ring leases its frames lie in (`Step::Frame::chunk`).
    chunks: Vec<Chunk>,
    steps: Vec<Step>,
    /// What the worker recorded for it (empty on the way out; its capacity is reused).
    out: Vec<(Mark, Item)>,
    /// What the ordered stage is done with of what this worker recorded before (`Spent`).
    spent: Vec<Spent>,
}

impl Batch {
    fn new() -> Batch {
        Batch { data: Vec::new(), chunks: Vec::new(), steps: Vec::new(), out: Vec::new(), spent: Vec::new() }
    }

    /// The bytes of a frame at `start..start + len` of read buffer `chunk`, or of the batch's
    /// own buffer (`COPIED`).
    fn frame_bytes(&self, chunk: u32, start: usize, len: usize) -> &[u8] {
        match self.chunks.get(chunk as usize) {
            Some(c) => c.slice(start, len),
            None => &self.data[start..start + len],
        }
    }
}

enum Job {
    Batch(Batch),
    /// Hand back a copy of the counts (a live snapshot).
    Counts,
    /// End of input at this time: close everything, hand back the counts.
    Finish(u64),
}

enum Done {
    /// A batch with its events, its buffers for reuse.
    Batch(Batch),
    Finish(Vec<(Mark, Item)>, Box<Counts>),
    Counts(Box<Counts>),
}

/// One decoding worker's pipeline (a `--threads` worker thread, a `--dask` shard task): it
/// decodes the frames of its connections and records what it hands the ordered stage, each
/// event under the mark that orders it.
pub(crate) struct Decoder {
    p: Pipeline<Recorder>,
    /// Out-of-order bytes (TCP, MPA tables) last recorded.
    buffered: (u64, u64),
}

impl Decoder {
    /// `config.workers` says how many decoders share the bounds.
    pub(crate) fn new(config: &Config) -> Decoder {
        let mut p = Pipeline::with_sink(config, Recorder::new());
        p.shared.smb.journal = Some(Vec::new());
        Decoder { p, buffered: (0, 0) }
    }

    fn note_buffered(&mut self, m: Mark) {
        let now = self.p.buffered_bytes();
        if now != self.buffered {
            self.buffered = now;
            self.p.shared.dedupe.out.push((m, Item::Buffered(now.0, now.1)));
        }
    }

    /// One frame of this decoder's connections, numbered by the reader (`ctx.seq`).
    pub(crate) fn frame(&mut self, frame: &RawFrame<'_>, ctx: &FrameCtx) {
        let m = Mark { phase: phase::FRAME, a: ctx.seq, b: 0 };
        self.p.shared.smb.crypt.at(keyshare::pos_of_frame(ctx.seq));
        self.p.mark(m);
        self.p.decode(frame, ctx);
        // Hands over the names of this frame (marked with it).
        self.p.mark(Mark { phase: phase::FRAME, a: ctx.seq, b: 1 });
        self.note_buffered(m);
    }

    /// A sweep: close the flows idle at `now`.
    pub(crate) fn sweep(&mut self, now: u64) {
        self.p.expire_idle(now);
        self.note_buffered(crate::context::SWEEP_END);
    }

    /// The end of input at `end_ts`: close everything; the counts.
    pub(crate) fn finish(&mut self, end_ts: u64) -> Counts {
        self.p.close_all(end_ts);
        self.note_buffered(Mark { phase: phase::FINISH_RDMA, a: u64::MAX, b: u64::MAX });
        self.p.take_counts()
    }

    /// What was recorded since it was last taken.
    pub(crate) fn out(&mut self) -> &mut Vec<(Mark, Item)> {
        &mut self.p.shared.dedupe.out
    }
}

fn worker(
    config: Config,
    // With `--keys`: the run's shared hashes, and this worker's number.
    share: Option<(Arc<KeyShare>, usize)>,
    jobs: Receiver<Job>,
    queued: Arc<AtomicUsize>,
    done: SyncSender<Done>,
    start: Option<fn()>,
    pool: Arc<HashPool>,
) {
    if let Some(f) = start {
        f();
    }
    offload::install(Some(pool.clone()));
    // Small payloads' blocks are digested several payloads at a time, each batch's before its
    // events go to the ordered stage (`gather_flush` below).
    offload::set_gathering(true);
    let mut d = Decoder::new(&config);
    if let Some((s, me)) = &share {
        d.p.shared.smb.crypt.share(s.clone(), *me);
    }
    // Waiting for its next batch, a worker digests other workers' blocks (`offload`).
    let next = || {
        pool.idle_until(|| match jobs.try_recv() {
            Ok(job) => Some(Some(job)),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => Some(None),
            Err(std::sync::mpsc::TryRecvError::Empty) => None,
        })
    };
    while let Some(job) = next() {
        match job {
            Job::Batch(mut b) => {
                // Its blocks go to idle workers only while more batches wait for it: a worker
                // that keeps up (a live capture below its rate) digests its own, without
                // waking another thread and moving the blocks to its core (`offload`).
                offload::set_behind(queued.fetch_sub(1, std::sync::atomic::Ordering::Relaxed) > 1);
                b.spent.clear();
                for (k, step) in b.steps.iter().enumerate() {
                    // The reader's core read these bytes last: on two vCPUs the host places
                    // apart, each line comes from the other core's cache at several times
                    // the latency of memory, and the prefetchers do not run far enough ahead
                    // across frames. Asking for the frame after next while this one is
                    // decoded keeps more of them in flight (`FRAMES_AHEAD`).
                    if let Some(&Step::Frame { chunk, start, len, .. }) = b.steps.get(k + FRAMES_AHEAD) {
                        crate::hint::prefetch_all(b.frame_bytes(chunk, start, len), PREFETCH_FRAME_BYTES);
                    }
                    match *step {
                        Step::Frame { info, ctx, chunk, start, len } => {
                            d.frame(&RawFrame { info, data: b.frame_bytes(chunk, start, len) }, &ctx);
                        }
                        Step::Sweep(now, after) => {
                            d.p.shared.smb.crypt.at(keyshare::pos_of_sweep(after));
                            d.sweep(now);
                            d.out().push((crate::context::SWEEP_END, Item::SweepDone));
                        }
                    }
                }
                b.steps.clear();
                b.data.clear();
                // The reader reuses a buffer once no batch holds it (`Source::unshare`).
                b.chunks.clear();
                if let Some((s, me)) = &share {
                    s.finished(*me);
                }
                offload::gather_flush();
                std::mem::swap(d.out(), &mut b.out);
                // Its sends' digests are complete now (`gather_flush`): settled here, the
                // ordered stage neither resolves their jobs nor frees them.
                for (_, item) in b.out.iter_mut() {
                    if let Item::Send(rec, pending @ Some(_)) = item {
                        if let Some(p) = pending.take() {
                            rec.digest = p.settle();
                        }
                    }
                }
                if done.send(Done::Batch(b)).is_err() {
                    return;
                }
                // The reader may be waiting for it, digesting meanwhile (`replay_oldest`).
                pool.notify_idle();
            }
            Job::Counts => {
                if done.send(Done::Counts(Box::new(d.p.counts()))).is_err() {
                    return;
                }
            }
            Job::Finish(end_ts) => {
                d.p.shared.smb.crypt.at(keyshare::END);
                let counts = d.finish(end_ts);
                offload::gather_flush();
                let out = std::mem::take(d.out());
                let _ = done.send(Done::Finish(out, Box::new(counts)));
                return;
            }
        }
    }
}

/// Records are allocated by the workers and freed by the ordered stage. With glibc's default
/// of one malloc arena per thread, memory freed into a worker's arena from another thread
/// is not given back as it is within one arena: a live run's resident set crept up by a few
/// MiB per 100 MiB of traffic (tests/live/test_live_memory.py). One arena for the process
/// stops that, but then every thread takes the one arena's lock: on 4 KiB I/O with
/// `--threads 2`, about 15% of the ordered stage's time was waiting for it (perf: futex waits
/// under `malloc`/`_int_free`). The Python extension therefore allocates with mimalloc
/// (pybind's `#[global_allocator]`), which frees another thread's blocks without a lock;
/// this setting remains for C libraries' allocations and for embedders of this crate that
/// keep glibc's allocator. Called when the Python module loads (before any thread of ours
/// exists: arenas already made stay in use) and again here for other embedders.
pub fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; M_ARENA_MAX limits arenas created later.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// A frame's connection as a 64-bit key: a hash of its unordered address (and port) pair, so
/// both directions meet. `None` for frames that do not decode.
fn connection_key(info: &FrameInfo, data: &[u8]) -> Option<u64> {
    if let Some(ends) = tcp_ends(info.linktype, data) {
        return Some(tcp_key(ends));
    }
    let d = wire::decode(info.linktype, data).ok()?;
    match d.transport {
        Transport::Tcp(seg) => Some(tcp_key(((d.src, seg.src_port), (d.dst, seg.dst_port)))),
        // RoCEv2 (UDP 4791, any source port), RoCEv1, InfiniBand and IPoIB, and what
        // carries no storage: by the address pair.
        _ => {
            let mut h = key_hasher();
            let (a, b) = if d.src <= d.dst { (d.src, d.dst) } else { (d.dst, d.src) };
            (a, b).hash(&mut h);
            Some(h.finish())
        }
    }
}

/// The hasher of connection keys (fixed: every `--dask` task must place connections alike).
fn key_hasher() -> impl Hasher {
    foldhash::fast::FixedState::with_seed(0x736d_6277_6972_6521).build_hasher()
}

type Ends = ((std::net::IpAddr, u16), (std::net::IpAddr, u16));

/// `connection_key` of a TCP frame with these ends, in either direction.
fn tcp_key((x, y): Ends) -> u64 {
    let mut h = key_hasher();
    let (x, y) = if x <= y { (x, y) } else { (y, x) };
    (x, y).hash(&mut h);
    h.finish()
}

/// The two ends (address, port) of an untagged Ethernet frame carrying IPv4 (not a fragment)
/// or IPv6 with TCP as its first next header, read where they lie: the reader's shortcut
/// around `wire::decode`, which it otherwise runs on every frame only to find its worker
/// (3% of a `--threads 2` run's samples on 4 KiB I/O, in the thread that limits it). For such
/// a frame `wire::decode` gives TCP with these ends, or an error, which is counted the same
/// whichever worker meets it; everything else takes the full decode
/// (`tests::the_shortcut_finds_the_ends_decode_finds`).
#[inline]
fn tcp_ends(linktype: u32, d: &[u8]) -> Option<Ends> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    const TCP: u8 = 6;
    // An IPv4 header's 20 bytes (`raw_v4_ends` reads the ports with `get`); IPv6 checks its
    // own below.
    if linktype != wire::linktype::ETHERNET || d.len() < 14 + 20 {
        return None;
    }
    match [d[12], d[13]] {
        [0x08, 0x00] => {
            let k = raw_v4_ends(linktype, d)?;
            let addr = |at: usize| IpAddr::V4(Ipv4Addr::new(k[at], k[at + 1], k[at + 2], k[at + 3]));
            let port = |at: usize| u16::from_be_bytes([k[at], k[at + 1]]);
            Some(((addr(0), port(8)), (addr(4), port(10))))
        }
        [0x86, 0xdd] => {
            let port = |at: usize| d.get(at..at + 2).map(|p| u16::from_be_bytes([p[0], p[1]]));
            let ip = &d[14..];
            if ip[0] >> 4 != 6 || ip[6] != TCP || d.len() < 14 + 40 + 20 {
                return None;
            }
            let addr = |at: usize| IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&ip[at..at + 16]).expect("16 bytes")));
            Some(((addr(8), port(54)?), (addr(24), port(56)?)))
        }
        _ => None,
    }
}

/// The ends of an untagged Ethernet frame carrying IPv4 (not a fragment) with TCP, as they
/// lie on the wire: source and destination address, then source and destination port
/// (`tcp_ends` builds its IPv4 ends from these bytes). `Sharder` compares them with recent
/// frames' without building addresses (building and ordering them was 2% of a `--threads 2`
/// run's samples, on the reader).
#[inline]
fn raw_v4_ends(linktype: u32, d: &[u8]) -> Option<[u8; 12]> {
    const TCP: u8 = 6;
    if linktype != wire::linktype::ETHERNET || d.len() < 14 + 20 || d[12] != 0x08 || d[13] != 0x00 {
        return None;
    }
    let ip = &d[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    // Version 4, a whole header; neither more fragments nor an offset (a fragment's ends are
    // its address pair only).
    if ip[0] >> 4 != 4 || ihl < 20 || ip[6] & 0x3f != 0 || ip[7] != 0 || ip[9] != TCP {
        return None;
    }
    let ports = d.get(14 + ihl..14 + ihl + 4)?;
    let mut k = [0u8; 12];
    k[..8].copy_from_slice(&ip[12..20]);
    k[8..].copy_from_slice(ports);
    Some(k)
}

/// `raw_v4_ends` of the other direction.
fn reversed_v4(k: [u8; 12]) -> [u8; 12] {
    let mut r = [0u8; 12];
    r[..4].copy_from_slice(&k[4..8]);
    r[4..8].copy_from_slice(&k[..4]);
    r[8..10].copy_from_slice(&k[10..12]);
    r[10..].copy_from_slice(&k[8..10]);
    r
}

/// The worker a frame belongs to by its connection's hash alone (frames that do not decode:
/// worker 0): what `Sharder` falls back to once its table is full (tests).
#[cfg(test)]
pub(crate) fn shard(info: &FrameInfo, data: &[u8], n: usize) -> usize {
    connection_key(info, data).map_or(0, |k| (k % n as u64) as usize)
}

/// Connections `Sharder` places by load before falling back to the hash.
const SHARDER_CONNECTIONS: usize = 1 << 16;

/// Assigns each connection to a worker when its first frame is seen: the worker that was
/// handed the fewest frame bytes so far (ties: the lowest), then keeps it there. A hash alone
/// put both connections of a two-connection capture on one worker half of the time (the
/// 4 KiB bench capture: one busy worker of two). The assignment is a function of the frames
/// in order, so every `--dask` task, which reads every frame in the same order, makes the
/// same one. Past `SHARDER_CONNECTIONS` assigned connections, new ones go by hash (bounded
/// memory under a flood of one-packet flows; still one worker per connection).
pub(crate) struct Sharder {
    n: usize,
    assigned: crate::fasthash::FastMap<u64, u32>,
    load: Vec<u64>,
    /// The ends of the last IPv6 TCP frame the shortcut read (lower end first), and its
    /// worker: a frame of the same connection goes there without hashing or a lookup (a
    /// connection's worker never changes). IPv4 frames use `recent_v4`.
    last: Option<(Ends, usize)>,
    /// The last few IPv4 TCP connections' `raw_v4_ends` (both directions) and workers: the
    /// same, compared as bytes, for several connections whose frames interleave (two busy
    /// connections alternating missed a one-entry cache on most frames). Replaced in turn.
    recent_v4: [Option<RecentV4>; RECENT_V4],
    next_v4: usize,
}

/// A `Sharder::recent_v4` entry: a connection's `raw_v4_ends`, both directions, and its worker.
type RecentV4 = ([u8; 12], [u8; 12], usize);

/// Connections `Sharder::recent_v4` remembers.
const RECENT_V4: usize = 4;

impl Sharder {
    pub(crate) fn new(n: usize) -> Self {
        Sharder { n: n.max(1), assigned: Default::default(), load: vec![0; n.max(1)], last: None, recent_v4: [None; RECENT_V4], next_v4: 0 }
    }

    /// The worker of this frame (frames that do not decode: worker 0).
    pub(crate) fn pick(&mut self, info: &FrameInfo, data: &[u8]) -> usize {
        let raw = raw_v4_ends(info.linktype, data);
        if let Some(k) = raw {
            if let Some((_, _, w)) = self.recent_v4.iter().flatten().find(|(fwd, rev, _)| k == *fwd || k == *rev) {
                let w = *w;
                self.load[w] += data.len() as u64;
                return w;
            }
        }
        let ends = tcp_ends(info.linktype, data).map(|(x, y)| if x <= y { (x, y) } else { (y, x) });
        if let (None, Some(e), Some((last, w))) = (raw, ends, self.last) {
            if e == last {
                self.load[w] += data.len() as u64;
                return w;
            }
        }
        let key = match ends {
            Some(e) => Some(tcp_key(e)),
            None => connection_key(info, data),
        };
        let w = match key {
            None => 0,
            Some(k) => match self.assigned.get(&k) {
                Some(&w) => w as usize,
                None if self.assigned.len() >= SHARDER_CONNECTIONS => (k % self.n as u64) as usize,
                None => {
                    let w = (0..self.n).min_by_key(|&i| (self.load[i], i)).unwrap_or(0);
                    self.assigned.insert(k, w as u32);
                    w
                }
            },
        };
        self.load[w] += data.len() as u64;
        match (raw, ends) {
            (Some(k), _) => {
                self.recent_v4[self.next_v4] = Some((k, reversed_v4(k), w));
                self.next_v4 = (self.next_v4 + 1) % RECENT_V4;
            }
            (None, Some(e)) => self.last = Some((e, w)),
            (None, None) => {}
        }
        w
    }
}

/// The ordered stage of `--threads` (and of `--dask`, over ledger parts): Dedupe fed in the
/// order one pipeline feeds it, the names that cross connections, and the decoding workers'
/// out-of-order bytes.
pub struct Ordered {
    pub dedupe: Dedupe,
    /// Shares and files by the workers' journals (`NameOp`), to name sends.
    names: SmbState,
    /// Names the ordered stage gave payloads whose worker lacked one, at the point the worker
    /// looked them up (`NameOp::Lookup`), by (connection, MessageId, READ): taken by the send.
    looked_up: BoundedMap<(u64, u64, bool), ShareAndFile>,
    /// Each worker's out-of-order bytes (TCP, MPA tables) as last reported.
    buffered: Vec<(u64, u64)>,
    /// Peak of the summed out-of-order bytes, at frame ends.
    peak_buffered: (u64, u64),
}

impl Ordered {
    pub(crate) fn new(config: &Config, workers: usize, evidence: Option<Box<dyn std::io::Write + Send>>) -> Self {
        Ordered {
            dedupe: Dedupe::new(config.dedupe.clone(), config.topology.clone(), evidence),
            names: SmbState::new(),
            looked_up: BoundedMap::new(LOOKUPS_KEPT),
            buffered: vec![(0, 0); workers],
            peak_buffered: (0, 0),
        }
    }

    /// After a frame's events: the peak of the workers' summed buffered bytes.
    pub(crate) fn frame_done(&mut self) {
        let sum = self.buffered.iter().fold((0, 0), |s, w| (s.0 + w.0, s.1 + w.1));
        self.peak_buffered = (self.peak_buffered.0.max(sum.0), self.peak_buffered.1.max(sum.1));
    }

    /// The workers' summed counts with the reader's own: its anomalies, and the peak of
    /// out-of-order bytes. One pipeline's peak is that of its tables' totals: the workers'
    /// summed at each frame, or one direction's own peak (each worker's figure), whichever is
    /// larger.
    pub(crate) fn with_own(&self, mut counts: Counts, reader: &Anomalies) -> Counts {
        counts.anomalies.absorb(reader);
        // Sessions are per server, not per connection: counted here, from the journals.
        counts.smb2.sessions = self.names.stats.sessions;
        counts.flows.peak_buffered_bytes =
            counts.flows.peak_buffered_bytes.max(self.peak_buffered.0).max(self.peak_buffered.1);
        counts
    }

    /// Closes of several workers in the order of their marks (a stable sort keeps each
    /// close's own order).
    /// Returns what the workers allocated, for them to free (`Spent`), in `spent`.
    pub(crate) fn apply_group(&mut self, mut group: Vec<(Mark, usize, Item)>, spent: &mut dyn FnMut(usize, Spent)) {
        group.sort_by_key(|(m, _, _)| *m);
        for (_, w, item) in group {
            if let Some(x) = self.apply(w, item) {
                spent(w, x);
            }
        }
    }

    /// One event of `worker`'s; what it allocated and the stage is done with comes back.
    pub(crate) fn apply(&mut self, worker: usize, item: Item) -> Option<Spent> {
        match item {
            Item::Send(s, pending) => {
                let mut s = settled(s, pending);
                // A send's names are those one pipeline gives it: what the ordered stage found
                // from every connection's names at the point its worker named the payload (a
                // file opened on one channel and written on another). The worker's own stay
                // in the record, which goes back to it.
                let key = (s.conn, s.message_id, s.kind == crate::payload::send::SendKind::Read);
                match self.looked_up.remove(&key) {
                    Some((mut share, mut file)) => {
                        std::mem::swap(&mut s.share, &mut share);
                        std::mem::swap(&mut s.file_name, &mut file);
                        self.dedupe.send_ref(&mut s);
                        s.share = share;
                        s.file_name = file;
                    }
                    None => self.dedupe.send_ref(&mut s),
                }
                return Some(Spent::Send(s));
            }
            Item::Complete { conn, message_id, ts_ns } => self.dedupe.complete(conn, message_id, ts_ns),
            Item::Names(mut ops) => {
                let mut scratch = Anomalies::default();
                for op in ops.drain(..) {
                    if let NameOp::Lookup(conn, message_id, read, session, tree, file_id, fallback) = op {
                        let names = (self.names.share(conn, session, tree), self.names.file_name(conn, &file_id).or(fallback));
                        self.looked_up.insert((conn, message_id, read), names);
                    } else {
                        self.names.apply(op, &mut scratch);
                    }
                }
                return Some(Spent::Names(ops));
            }
            Item::Buffered(t, m) => self.buffered[worker] = (t, m),
            Item::SweepDone => {}
        }
        None
    }
}

struct Worker {
    jobs: SyncSender<Job>,
    /// Batches sent to it that it has not started on (it reads this to decide whether to
    /// offer its blocks to idle workers).
    queued: Arc<AtomicUsize>,
    done: Receiver<Done>,
    handle: Option<JoinHandle<()>>,
    /// Events received, not yet replayed.
    pending: VecDeque<(Mark, Item)>,
    /// The batch being filled, and emptied buffers to fill next.
    batch: Batch,
    spare: Vec<Batch>,
    /// Batches handed to it.
    handed: u64,
}

/// What the reader did with one batch, in order: what the ordered stage replays.
enum Order {
    Frame { worker: usize, seq: u64, ts_ns: u64 },
    Sweep(u64),
}

/// N workers and the ordered stage; `process` one frame at a time like `Pipeline`.
pub struct Parallel {
    workers: Vec<Worker>,
    pub ordered: Ordered,
    pub clock: Clock,
    /// The reader's own anomalies (time stepping back; the capture readers').
    pub anomalies: Anomalies,
    /// Batches handed out and not yet replayed, and which workers were handed a part.
    in_flight: VecDeque<(Vec<Order>, Vec<bool>)>,
    order: Vec<Order>,
    frames_in_batch: usize,
    bytes_in_batch: usize,
    window_ns: u64,
    pub input_findings: Vec<crate::findings::Finding>,
    pub unusable_input_bytes: u64,
    /// Frames were copied into the batches or lie in leased ring memory (`DEPTH_COPIED`).
    copies: bool,
    /// Frames handed out as places in a read buffer, and copied (tests).
    pub handed: (u64, u64),
    sharder: Sharder,
    /// Block hashing idle workers take over (`offload`).
    pool: Arc<HashPool>,
    /// With `--keys`: the sessions' preauth hashes the workers share (`smb2::keyshare`).
    keyshare: Option<Arc<KeyShare>>,
}

impl Parallel {
    /// `threads` workers (at least 2; one is `Pipeline`).
    pub fn new(config: &Config, threads: usize, evidence: Option<Box<dyn std::io::Write + Send>>) -> Self {
        Parallel::with_start(config, threads, evidence, None)
    }

    /// `new`, each worker thread first calling `start` (the live session drops the thread's
    /// capabilities there).
    pub fn with_start(
        config: &Config,
        threads: usize,
        evidence: Option<Box<dyn std::io::Write + Send>>,
        start: Option<fn()>,
    ) -> Self {
        let n = threads.max(2);
        one_malloc_arena();
        // Each worker holds its share of the bounds one pipeline has (flow table, reorder
        // buffers of all flows; `pipeline::flow_config`), and of a budget.
        let mut wc = config.clone();
        wc.workers = n;
        let pool = HashPool::new();
        let keyshare = config.keys.as_ref().map(|_| Arc::new(KeyShare::new(n)));
        let workers = (0..n)
            .map(|i| {
                let (jt, jr) = sync_channel(DEPTH + 1);
                let (dt, dr) = sync_channel(DEPTH + 1);
                let c = wc.clone();
                let p = pool.clone();
                let queued = Arc::new(AtomicUsize::new(0));
                let q = queued.clone();
                let share = keyshare.clone().map(|s| (s, i));
                let handle = std::thread::Builder::new()
                    .name(format!("smbwire-worker-{i}"))
                    .spawn(move || worker(c, share, jr, q, dt, start, p))
                    .expect("a worker thread can be started");
                Worker {
                    jobs: jt,
                    queued,
                    done: dr,
                    handle: Some(handle),
                    pending: VecDeque::new(),
                    batch: Batch::new(),
                    spare: Vec::new(),
                    handed: 0,
                }
            })
            .collect();
        Parallel {
            workers,
            ordered: Ordered::new(config, n, evidence),
            clock: Clock::default(),
            anomalies: Anomalies::default(),
            in_flight: VecDeque::new(),
            order: Vec::new(),
            frames_in_batch: 0,
            bytes_in_batch: 0,
            window_ns: config.dedupe.window_ns,
            input_findings: Vec::new(),
            unusable_input_bytes: 0,
            copies: false,
            handed: (0, 0),
            sharder: Sharder::new(n),
            pool,
            keyshare,
        }
    }

    pub fn threads(&self) -> usize {
        self.workers.len()
    }

    /// Process one captured frame (its events reach the ordered stage a few batches later).
    pub fn process(&mut self, frame: &RawFrame<'_>) {
        self.process_in(frame, None)
    }

    /// `process`, the frame lying in `chunk` (a capture file's read buffer, `Source::chunk`):
    /// its worker's batch holds on to the buffer rather than copy the frame.
    pub fn process_in(&mut self, frame: &RawFrame<'_>, chunk: Option<&Arc<Vec<u8>>>) {
        self.hand(frame, chunk.map(ChunkRef::Buf))
    }

    /// `process`, the frame lying in `lease` (a live ring's, `live::ebpf`): its worker's batch
    /// holds the lease rather than copy the frame, and the ring's stretch goes back to the
    /// kernel once no batch holds it.
    pub fn process_leased(&mut self, frame: &RawFrame<'_>, lease: &Arc<Lease>) {
        self.hand(frame, Some(ChunkRef::Lease(lease)))
    }

    fn hand(&mut self, frame: &RawFrame<'_>, chunk: Option<ChunkRef<'_>>) {
        let ctx = self.clock.frame(frame, &mut self.anomalies);
        let w = self.sharder.pick(&frame.info, frame.data);
        let b = &mut self.workers[w].batch;
        let len = frame.data.len();
        let p = frame.data.as_ptr() as usize;
        let within = |c: &ChunkRef<'_>| {
            let (at, n) = c.span();
            p >= at && p + len <= at + n
        };
        match chunk.filter(within) {
            Some(c) => {
                self.handed.0 += 1;
                if matches!(c, ChunkRef::Lease(_)) {
                    // A lease holds ring space the kernel cannot fill meanwhile: as few
                    // batches in flight as when frames are copied (`DEPTH_COPIED`).
                    self.copies = true;
                }
                if !b.chunks.last().is_some_and(|l| l.same(c)) {
                    b.chunks.push(c.to_owned());
                }
                let chunk = (b.chunks.len() - 1) as u32;
                b.steps.push(Step::Frame { info: frame.info, ctx, chunk, start: p - c.span().0, len });
            }
            None => {
                self.copies = true;
                self.handed.1 += 1;
                let start = b.data.len();
                b.data.extend_from_slice(frame.data);
                b.steps.push(Step::Frame { info: frame.info, ctx, chunk: COPIED, start, len });
            }
        }
        self.order.push(Order::Frame { worker: w, seq: ctx.seq, ts_ns: frame.info.ts_ns });
        self.frames_in_batch += 1;
        self.bytes_in_batch += frame.data.len();
        if let Some(now) = self.clock.sweep_due() {
            for wk in self.workers.iter_mut() {
                wk.batch.steps.push(Step::Sweep(now, ctx.seq));
            }
            self.order.push(Order::Sweep(now));
        }
        if self.frames_in_batch >= BATCH_FRAMES.load(std::sync::atomic::Ordering::Relaxed) || self.bytes_in_batch >= BATCH_BYTES {
            self.hand_out();
        }
    }

    /// Hand the batch being filled to the workers; replay the oldest when too many are out.
    fn hand_out(&mut self) {
        let mut sent = vec![false; self.workers.len()];
        if let Some(s) = &self.keyshare {
            // Every worker of this batch counts it before any receives its part, so none
            // takes another for done with the frames before its own (`KeyShare::lookup`).
            for (i, wk) in self.workers.iter().enumerate() {
                if !wk.batch.steps.is_empty() {
                    s.handed(i);
                }
            }
        }
        for (wk, sent) in self.workers.iter_mut().zip(sent.iter_mut()) {
            // A worker with nothing in this batch (no frame of its connections, no sweep)
            // is not woken for it: with one busy connection, the other workers stay free
            // to digest its blocks (`offload`).
            if wk.batch.steps.is_empty() {
                continue;
            }
            *sent = true;
            wk.handed += 1;
            let next = wk.spare.pop().unwrap_or(Batch::new());
            let b = std::mem::replace(&mut wk.batch, next);
            // A worker only ends when its channel closes: it is alive while we hold `jobs`.
            wk.queued.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            wk.jobs.send(Job::Batch(b)).expect("worker alive");
        }
        self.pool.notify_idle();
        self.in_flight.push_back((std::mem::take(&mut self.order), sent));
        self.frames_in_batch = 0;
        self.bytes_in_batch = 0;
        let depth = if self.copies { DEPTH_COPIED } else { DEPTH };
        while self.in_flight.len() >= depth {
            self.replay_oldest();
        }
    }

    fn replay_oldest(&mut self) {
        let Some((order, sent)) = self.in_flight.pop_front() else { return };
        let pool = &self.pool;
        for (wk, _) in self.workers.iter_mut().zip(sent).filter(|(_, sent)| *sent) {
            // Waiting for a worker, the reader digests block batches other workers queued.
            let done = match wk.done.try_recv() {
                Ok(d) => Some(d),
                Err(_) => pool.idle_until(|| match wk.done.try_recv() {
                    Ok(d) => Some(Some(d)),
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => Some(None),
                    Err(std::sync::mpsc::TryRecvError::Empty) => None,
                }),
            };
            match done.expect("worker alive") {
                Done::Batch(mut b) => {
                    wk.pending.extend(b.out.drain(..));
                    wk.spare.push(b);
                }
                Done::Finish(..) | Done::Counts(..) => unreachable!("answers come in the order asked"),
            }
        }
        for o in order {
            match o {
                Order::Frame { worker, seq, ts_ns } => {
                    self.ordered.dedupe.note_time(ts_ns);
                    while let Some((m, _)) = self.workers[worker].pending.front() {
                        if m.phase != phase::FRAME || m.a != seq {
                            break;
                        }
                        let (_, item) = self.workers[worker].pending.pop_front().expect("front");
                        if let Some(x) = self.ordered.apply(worker, item) {
                            self.workers[worker].batch.spent.push(x);
                        }
                    }
                    self.ordered.frame_done();
                }
                Order::Sweep(now) => {
                    self.ordered.dedupe.advance(now);
                    let mut group = Vec::new();
                    for (i, wk) in self.workers.iter_mut().enumerate() {
                        // Every worker was handed the sweep: its closes, then `SweepDone`.
                        while let Some((m, _)) = wk.pending.front() {
                            if m.phase != phase::EXPIRE_TCP && m.phase != phase::EXPIRE_MPA {
                                debug_assert!(false, "a sweep without its end: {m:?}");
                                break;
                            }
                            let (m, item) = wk.pending.pop_front().expect("front");
                            if matches!(item, Item::SweepDone) {
                                break;
                            }
                            group.push((m, i, item));
                        }
                    }
                    let workers = &mut self.workers;
                    self.ordered.apply_group(group, &mut |w, x| workers[w].batch.spent.push(x));
                }
            }
        }
    }

    /// What the run has seen so far, for the live view: every frame handed out is replayed
    /// first (so the workers are idle for a moment), then the workers' counts are summed.
    pub fn view(&mut self) -> (crate::pipeline::PipelineView, crate::rdma::RdmaStats) {
        if !self.order.is_empty() {
            self.hand_out();
        }
        while !self.in_flight.is_empty() {
            self.replay_oldest();
        }
        let mut counts: Option<Counts> = None;
        for wk in self.workers.iter() {
            wk.jobs.send(Job::Counts).expect("worker alive");
        }
        self.pool.notify_idle();
        for wk in self.workers.iter() {
            let Done::Counts(c) = wk.done.recv().expect("worker alive") else {
                unreachable!("every batch was replayed")
            };
            match counts.as_mut() {
                Some(all) => all.absorb(*c),
                None => counts = Some(*c),
            }
        }
        let counts = self.ordered.with_own(counts.expect("at least two workers"), &self.anomalies);
        let rdma = counts.rdma.clone();
        (crate::pipeline::PipelineView::of(&mut self.ordered.dedupe, &counts, &self.clock, self.window_ns), rdma)
    }

    /// End of input: every batch replayed, every worker closed in mark order, the result.
    pub fn finish_recorded(
        mut self,
        inputs: Vec<InputFile>,
        container: Accounting,
        started: Instant,
    ) -> Finished {
        if !self.order.is_empty() || self.workers.iter().any(|w| !w.batch.steps.is_empty()) {
            self.hand_out();
        }
        while !self.in_flight.is_empty() {
            self.replay_oldest();
        }
        self.ordered.dedupe.note_time(crate::ledger::AT_END);
        let end = self.clock.last_ts;
        for wk in self.workers.iter() {
            wk.jobs.send(Job::Finish(end)).expect("worker alive");
        }
        self.pool.notify_idle();
        let mut counts: Option<Counts> = None;
        let mut group = Vec::new();
        for i in 0..self.workers.len() {
            let wk = &mut self.workers[i];
            let Done::Finish(out, c) = wk.done.recv().expect("worker alive") else {
                unreachable!("every batch was replayed")
            };
            if let Some(h) = wk.handle.take() {
                let _ = h.join();
            }
            for (m, item) in wk.pending.drain(..).chain(out) {
                group.push((m, i, item));
            }
            match counts.as_mut() {
                Some(all) => all.absorb(*c),
                None => counts = Some(*c),
            }
        }
        // The workers have ended: what they allocated is freed here.
        self.ordered.apply_group(group, &mut |_, _| {});
        let counts = self.ordered.with_own(counts.expect("at least two workers"), &self.anomalies);
        let ledger = self.ordered.dedupe.take_ledger();
        let threads = self.workers.len();
        let run = Run {
            counts,
            clock: std::mem::take(&mut self.clock),
            window_ns: self.window_ns,
            input_findings: std::mem::take(&mut self.input_findings),
            unusable_input_bytes: self.unusable_input_bytes,
        };
        let dedupe = std::mem::replace(
            &mut self.ordered.dedupe,
            Dedupe::new(Default::default(), Default::default(), None),
        );
        let (mut results, input_findings) = run.results(dedupe, inputs, container, started);
        results.analysis.threads = threads;
        results.analysis.hash_batches_helped = self.pool.helped.load(std::sync::atomic::Ordering::Relaxed) as u64;
        (results, ledger, input_findings)
    }
}

impl Drop for Parallel {
    fn drop(&mut self) {
        // Interrupted (or finished): close both channels of every worker, so one waiting for
        // a job or blocked handing back events ends, then wait for it.
        for wk in self.workers.iter_mut() {
            let (jobs, _) = sync_channel(0);
            let (_, done) = sync_channel(0);
            drop(std::mem::replace(&mut wk.jobs, jobs));
            drop(std::mem::replace(&mut wk.done, done));
        }
        for wk in self.workers.iter_mut() {
            if let Some(h) = wk.handle.take() {
                let _ = h.join();
            }
        }
    }
}


/// One pipeline, or workers and the ordered stage (`config.threads` > 1).
pub enum Engine {
    One(Box<Pipeline>),
    Many(Box<Parallel>),
}

impl Engine {
    pub fn new(config: &Config, evidence: Option<Box<dyn std::io::Write + Send>>) -> Self {
        Engine::with_start(config, evidence, None)
    }

    /// `new`, each worker thread (if any) first calling `start`.
    pub fn with_start(config: &Config, evidence: Option<Box<dyn std::io::Write + Send>>, start: Option<fn()>) -> Self {
        if Engine::is_parallel(config) {
            Engine::Many(Box::new(Parallel::with_start(config, config.threads, evidence, start)))
        } else {
            Engine::One(Box::new(Pipeline::new(config, evidence)))
        }
    }

    /// Does `config` run workers and an ordered stage (else one pipeline)?
    pub fn is_parallel(config: &Config) -> bool {
        config.threads > 1
    }

    pub fn dedupe(&mut self) -> &mut Dedupe {
        match self {
            Engine::One(p) => p.shared.dedupe.settled(),
            Engine::Many(p) => &mut p.ordered.dedupe,
        }
    }

    /// Where unusable inputs are counted: their bytes, the reader's anomalies, the findings.
    pub fn inputs(&mut self) -> (&mut u64, &mut Anomalies, &mut Vec<crate::findings::Finding>) {
        match self {
            Engine::One(p) => (&mut p.unusable_input_bytes, &mut p.shared.anomalies, &mut p.input_findings),
            Engine::Many(p) => (&mut p.unusable_input_bytes, &mut p.anomalies, &mut p.input_findings),
        }
    }

    pub fn process(&mut self, frame: &RawFrame<'_>) {
        match self {
            Engine::One(p) => p.process(frame),
            Engine::Many(p) => p.process(frame),
        }
    }

    /// `process`, the frame lying in a live ring's `lease` when it has one: workers decode
    /// it in place (`Parallel::process_leased`); one pipeline decodes it now.
    pub fn process_live(&mut self, frame: &RawFrame<'_>, lease: Option<&Arc<Lease>>) {
        match (self, lease) {
            (Engine::One(p), _) => p.process(frame),
            (Engine::Many(p), Some(l)) => p.process_leased(frame, l),
            (Engine::Many(p), None) => p.process(frame),
        }
    }

    /// A live snapshot and the RDMA counters.
    pub fn view(&mut self) -> (crate::pipeline::PipelineView, crate::rdma::RdmaStats) {
        match self {
            Engine::One(p) => (p.view(), p.shared.rdma.stats.clone()),
            Engine::Many(p) => p.view(),
        }
    }

    pub fn finish(self, inputs: Vec<InputFile>, container: Accounting, started: Instant) -> Results {
        self.finish_recorded(inputs, container, started).0
    }

    pub fn finish_recorded(
        self,
        inputs: Vec<InputFile>,
        container: Accounting,
        started: Instant,
    ) -> Finished {
        match self {
            Engine::One(p) => p.finish_recorded(inputs, container, started),
            Engine::Many(p) => p.finish_recorded(inputs, container, started),
        }
    }
}

/// Progress is reported about every this many input bytes.
const PROGRESS_EVERY: u64 = 8 << 20;

/// What reads the inputs frame by frame: a pipeline, the `--threads` engine, a `--dask` shard.
pub(crate) trait FrameSink {
    /// Where unusable inputs are counted: their bytes, the reader's anomalies, the findings.
    fn inputs(&mut self) -> (&mut u64, &mut Anomalies, &mut Vec<crate::findings::Finding>);
    fn process(&mut self, frame: &RawFrame<'_>);
    /// `process`, the frame lying in `chunk`, a read buffer the sink may hold on to rather
    /// than copy the frame (`Source::chunk`).
    fn process_in(&mut self, frame: &RawFrame<'_>, _chunk: Option<&Arc<Vec<u8>>>) {
        self.process(frame);
    }
}

impl FrameSink for Engine {
    fn inputs(&mut self) -> (&mut u64, &mut Anomalies, &mut Vec<crate::findings::Finding>) {
        Engine::inputs(self)
    }
    fn process(&mut self, frame: &RawFrame<'_>) {
        Engine::process(self, frame)
    }
    fn process_in(&mut self, frame: &RawFrame<'_>, chunk: Option<&Arc<Vec<u8>>>) {
        match self {
            Engine::One(p) => p.process(frame),
            Engine::Many(p) => p.process_in(frame, chunk),
        }
    }
}

/// Opens the inputs of an analysis (merged in time order).
pub(crate) fn open_inputs(paths: &[String], how: ReadMode) -> Result<Merged, AnalyzeError> {
    Merged::open_with(paths, how).map_err(|e| match e {
        CaptureError::Interrupted => AnalyzeError::Interrupted,
        e => AnalyzeError::Capture(e),
    })
}

/// Reads every frame of the opened inputs into `sink` (skipped inputs counted, frames outside
/// `--from`/`--to` accounted), ticking `tick(done, total)` every few MiB; the inputs as the
/// report lists them and the container's byte accounting.
pub(crate) fn read_inputs(
    paths: &[String],
    mut merged: Merged,
    config: &Config,
    sink: &mut dyn FrameSink,
    tick: &mut dyn FnMut(u64, u64) -> bool,
) -> Result<(Vec<InputFile>, Accounting), AnalyzeError> {
    // Streams and compressed captures have no size before their end: no total then.
    let total = if merged.sizes_known() { merged.total_size() } else { 0 };
    let mut container = Accounting::default();
    for (i, e) in &merged.skipped {
        // Its bytes are accounted too (every input byte in one category), as far as they can
        // be known: a regular file's size; nothing for a missing file or a stream.
        let bytes = std::fs::metadata(&paths[*i]).ok().filter(|m| m.is_file()).map_or(0, |m| m.len());
        container.add(cat::UNUSABLE_INPUT, bytes);
        let (unusable, anomalies, findings) = sink.inputs();
        *unusable += bytes;
        anomalies.raise(crate::capture::Anomaly::UnusableInput);
        let path = paths.get(*i).map_or("", String::as_str);
        findings.push(crate::findings::input_skipped(path, &e.to_string(), merged.used.len()));
    }
    let mut frames_per_file = vec![0u64; merged.used.len()];
    let mut next_tick = PROGRESS_EVERY;
    while let Some((frame, chunk)) = merged.next_shared(&mut container, sink.inputs().1) {
        if let Some(n) = frames_per_file.get_mut(frame.info.frame.file as usize) {
            *n += 1;
        }
        let ts = frame.info.ts_ns;
        if config.from_ns.is_some_and(|a| ts < a) || config.to_ns.is_some_and(|b| ts >= b) {
            container.add(cat::OUTSIDE_TIME_BOUNDS, frame.data.len() as u64);
            continue;
        }
        sink.process_in(&frame, chunk);
        let pos = merged.position();
        if pos >= next_tick {
            next_tick = pos + PROGRESS_EVERY;
            if !tick(pos, total) {
                return Err(AnalyzeError::Interrupted);
            }
        }
    }
    if merged.interrupted() {
        return Err(AnalyzeError::Interrupted);
    }
    let total = merged.total_size();
    tick(total, total);
    // Only the files that were analysed: frames and evidence name them by this index.
    let inputs = merged
        .used
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let src = merged.source(i);
            InputFile {
                path: paths[p].clone(),
                size_bytes: src.size(),
                frames: frames_per_file[i],
                source: src.kind.name(),
                compression: src.compression.map(|c| c.name()),
                compressed_bytes: src.compression.map(|_| src.raw_bytes()),
                tunnels: None,
            }
        })
        .collect();
    Ok((inputs, container))
}

/// Writes the footer of the send ledger a run recorded (`--ledger`): the result and the
/// findings about its inputs are its run metadata.
pub(crate) fn close_ledger(
    results: &Results,
    ledger: Option<(LedgerWriter, Option<crate::ledger::LedgerError>)>,
    input_findings: Vec<crate::findings::Finding>,
) -> Result<(), AnalyzeError> {
    if let Some((writer, error)) = ledger {
        if let Some(e) = error {
            return Err(AnalyzeError::Ledger(e.to_string()));
        }
        let run = serde_json::json!({ "results": results, "input_findings": input_findings });
        let run = serde_json::to_string(&run).map_err(|e| AnalyzeError::Ledger(e.to_string()))?;
        writer.close(&run).map_err(|e| AnalyzeError::Ledger(e.to_string()))?;
    }
    Ok(())
}

/// Analyse capture files end to end. `tick(done, total)` is called every few MiB; returning
/// false stops the analysis (Ctrl-C).
pub fn analyze_files(
    paths: &[String],
    config: &Config,
    evidence_path: Option<&str>,
    tick: &mut dyn FnMut(u64, u64) -> bool,
) -> Result<Results, AnalyzeError> {
    let started = Instant::now();
    crate::pipeline::check_outputs(evidence_path, config.ledger.as_deref(), paths)?;
    // Read, not mapped (`ReadMode`): workers hold the read buffers their frames lie in.
    let merged = open_inputs(paths, ReadMode::Buffered)?;
    let evidence = crate::pipeline::open_evidence(evidence_path)?;
    let mut pipeline = Engine::new(config, evidence);
    if let Some(p) = &config.ledger {
        pipeline.dedupe().record_ledger(LedgerWriter::create(p).map_err(|e| AnalyzeError::Ledger(e.to_string()))?);
    }
    let (inputs, container) = read_inputs(paths, merged, config, &mut pipeline, tick)?;
    let (mut results, ledger, input_findings) = pipeline.finish_recorded(inputs, container, started);
    crate::pipeline::evidence_failed(&mut results.dedupe, evidence_path)?;
    close_ledger(&results, ledger, input_findings)?;
    Ok(results)
}


#[cfg(test)]
mod tests;
