//! Block hashing handed to idle `--threads` workers.
//!
//! Sharding by connection leaves a worker idle when there are fewer busy connections than
//! workers (one SMB connection carrying a whole run: one worker decodes and hashes, the other
//! waits), and BLAKE3 is about 40% of a worker's time on 1 MiB writes. A worker's payload
//! hasher (`hash::PayloadHasher`) then hands each full staging batch (`LANES` whole blocks,
//! 64 KiB) to the run's `HashPool` instead of digesting it itself, as long as another worker
//! is idle and waiting; an idle worker takes the batch and digests it (`Helper`); and the
//! hasher collects the digests, in order, when it needs them (a batch it digests itself, or
//! the payload's end). A batch nobody has taken yet by then it digests itself, so nothing
//! waits on a helper that is not there, and a run without a pool (one pipeline, `--dask`
//! tasks) digests everything where it is. At the payload's end a `--threads` worker does not
//! wait for batches a helper is still digesting: it digests its last blocks and hands the send
//! on with its digest pending (`hash::PayloadHasher::finish_deferred`, `PendingDigest`), which
//! the ordered stage settles when it replays the send, long after the helper is done.
//!
//! Small payloads gather: on 4 KiB I/O every payload is one block, whose BLAKE3 fills half of
//! AVX2's lanes. A `--threads` worker's hashers hand the whole blocks of payloads under
//! `GATHER_BELOW` blocks to the worker's gathering job (`gather`), in the buffers they were
//! staged in, and hand the sends on pending; a full job (`LANES` blocks) is digested at once (or
//! offered to an idle worker), and the worker digests the rest of its job before it hands a
//! batch's events to the ordered stage (`gather_flush`), which then settles each send from its
//! blocks' place in the job.
//!
//! Digests do not depend on who computed them (`tests::offloaded_digests_are_the_same`, and
//! `parallel::tests`: every capture with 2 and 3 workers gives one pipeline's result).
//!
//! Memory: at most `MAX_QUEUED` batches wait in a pool, and a batch's 64 KiB go back to the
//! pool's spare list as soon as it is digested (at most `MAX_SPARE` kept).

use super::batch::{self, LANES};
use super::BLOCK_SIZE;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Batches waiting in a pool at most; past it a hasher digests its batch itself.
const MAX_QUEUED: usize = 4;
/// Spare 64 KiB buffers a pool keeps for the next batches.
const MAX_SPARE: usize = 16;
/// An idle worker looks at its own queue again at least this often (a wake-up missed in a
/// race costs at most this).
const IDLE_WAIT: Duration = Duration::from_millis(10);

/// Yields at most before an idle worker sleeps (`HashPool::idle_until`).
const YIELDS: u32 = 32;
/// A sleep this short would have been covered by yielding instead (a futex sleep and wake-up
/// cost several microseconds; 32 yields to another thread some tens).
const SPIN_PAYS: Duration = Duration::from_micros(50);

thread_local! {
    /// Yields this thread's next idle wait makes before it sleeps (learnt: `idle_until`).
    static SPINS: std::cell::Cell<u32> = const { std::cell::Cell::new(YIELDS) };
}

fn more_spins(spins: u32) -> u32 {
    (spins * 2).clamp(1, YIELDS)
}

const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const DONE: u8 = 2;

/// Whole blocks to digest, and their digests once done.
pub(crate) struct HashJob {
    state: AtomicU8,
    work: Mutex<Work>,
}

struct Work {
    /// The blocks: a batch of one payload (`data`), or whole blocks of several payloads in
    /// the buffers they were staged in (`pieces`: a gathering job's).
    data: Vec<u8>,
    pieces: Vec<Vec<u8>>,
    blocks: usize,
    digests: [[u8; 32]; LANES],
    /// Bit i: block i is trivial (all bytes equal).
    trivial: u32,
}

impl HashJob {
    /// Digest the blocks (whoever took the job).
    fn run(&self, pool: Option<&HashPool>) {
        let spare = {
            let mut w = self.work.lock().unwrap_or_else(|e| e.into_inner());
            let w = &mut *w;
            let n = w.blocks;
            let mut refs: [&[u8; BLOCK_SIZE]; LANES] = [&[0; BLOCK_SIZE]; LANES];
            let data = w.data[..if w.pieces.is_empty() { n * BLOCK_SIZE } else { 0 }].chunks_exact(BLOCK_SIZE);
            for (r, block) in refs.iter_mut().zip(data.chain(w.pieces.iter().flat_map(|p| p.chunks_exact(BLOCK_SIZE)))) {
                *r = block.try_into().expect("block length");
            }
            batch::digest_refs(&refs[..n], &mut w.digests[..n]);
            w.trivial = 0;
            for (i, block) in refs[..n].iter().enumerate() {
                if super::hash::is_trivial(&block[..]) {
                    w.trivial |= 1 << i;
                }
            }
            w.pieces.clear();
            std::mem::take(&mut w.data)
        };
        self.state.store(DONE, Ordering::Release);
        if let Some(pool) = pool {
            pool.give_back(spare);
        }
    }

    /// Run it here unless someone took it (a helper, or the hasher that needed it first).
    fn run_unless_taken(&self, pool: Option<&HashPool>) {
        if self.state.compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.run(pool);
        }
    }

    /// Digested already (its digests can be taken without waiting).
    pub(crate) fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) == DONE
    }

    /// Its hasher is gone: a helper that finds it queued leaves it.
    pub(crate) fn cancel(&self) {
        let _ = self.state.compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The digests and trivial flags of blocks `blocks` (all of them for a batch of one
    /// payload, a payload's own for a gathered job), the job run here if nobody took it,
    /// else waited for.
    pub(crate) fn resolve(&self, pool: Option<&HashPool>, blocks: std::ops::Range<usize>, mut each: impl FnMut(&[u8; 32], bool)) {
        self.run_unless_taken(pool);
        let mut spins = 0u32;
        while self.state.load(Ordering::Acquire) != DONE {
            // Another worker is digesting it (64 KiB: some 20 us); it may have lost its CPU.
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let w = self.work.lock().unwrap_or_else(|e| e.into_inner());
        debug_assert!(blocks.end <= w.blocks);
        for i in blocks.start..blocks.end.min(w.blocks) {
            each(&w.digests[i], w.trivial & (1 << i) != 0);
        }
    }

    /// A job that gathers whole blocks of several payloads (`gather`).
    fn open() -> HashJob {
        let work = Work { data: Vec::new(), pieces: Vec::with_capacity(LANES), blocks: 0, digests: [[0; 32]; LANES], trivial: 0 };
        HashJob { state: AtomicU8::new(QUEUED), work: Mutex::new(work) }
    }

    /// Append whole blocks to a gathering job: the first one's index, or the blocks back
    /// when the job has no room for them or was run already (`settle` of a payload of it
    /// before the job was sealed).
    fn append(&self, piece: Vec<u8>) -> Result<usize, Vec<u8>> {
        let mut w = self.work.lock().unwrap_or_else(|e| e.into_inner());
        let blocks = piece.len() / BLOCK_SIZE;
        // Under the lock: a `resolve` that took the job digests what it holds then.
        if self.state.load(Ordering::Acquire) != QUEUED || w.blocks + blocks > LANES {
            return Err(piece);
        }
        w.pieces.push(piece);
        w.blocks += blocks;
        Ok(w.blocks - blocks)
    }

    fn blocks(&self) -> usize {
        self.work.lock().unwrap_or_else(|e| e.into_inner()).blocks
    }
}

/// Batches of block hashing waiting for an idle worker of one run.
#[derive(Default)]
pub struct HashPool {
    queue: Mutex<VecDeque<Arc<HashJob>>>,
    /// `queue`'s length, read without the lock.
    queued: AtomicUsize,
    wake: Condvar,
    /// Workers with nothing of their own to do (helping or waiting): batches are queued
    /// only while there is one.
    helpers: AtomicUsize,
    /// Workers asleep on `wake` (changed under `queue`'s lock): only then is it notified,
    /// each notification being a system call.
    sleepers: AtomicUsize,
    spare: Mutex<Vec<Vec<u8>>>,
    /// Batches digested by another worker than their hasher's (`analysis.hash_batches_helped`).
    pub helped: AtomicUsize,
}

impl HashPool {
    pub fn new() -> Arc<HashPool> {
        Arc::new(HashPool::default())
    }

    /// Is a worker without work of its own now?
    pub(crate) fn has_idle(&self) -> bool {
        self.helpers.load(Ordering::Relaxed) > 0
    }

    /// `data` (whole blocks, at most `LANES`) as a job: queued for an idle worker, or, when
    /// none is idle or enough wait already, digested here and now.
    pub(crate) fn submit(&self, data: Vec<u8>) -> Arc<HashJob> {
        let blocks = data.len() / BLOCK_SIZE;
        debug_assert!(blocks <= LANES && data.len() == blocks * BLOCK_SIZE);
        let job = Arc::new(HashJob {
            state: AtomicU8::new(QUEUED),
            work: Mutex::new(Work { data, pieces: Vec::new(), blocks, digests: [[0; 32]; LANES], trivial: 0 }),
        });
        self.offer(&job);
        job
    }

    /// A job queued for an idle worker, or digested here and now when none is idle or
    /// enough wait already.
    fn offer(&self, job: &Arc<HashJob>) {
        if self.has_idle() && self.queued.load(Ordering::Relaxed) < MAX_QUEUED {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            if q.len() < MAX_QUEUED {
                q.push_back(job.clone());
                self.queued.store(q.len(), Ordering::Relaxed);
                if self.sleepers.load(Ordering::Relaxed) > 0 {
                    self.wake.notify_one();
                }
                return;
            }
        }
        job.run_unless_taken(Some(self));
    }

    /// A buffer for the next staging batch (a spare one when there is one).
    pub(crate) fn buffer(&self, capacity: usize) -> Vec<u8> {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        match spare.iter().position(|b| b.capacity() >= capacity) {
            Some(i) => spare.swap_remove(i),
            None => Vec::with_capacity(capacity),
        }
    }

    fn give_back(&self, mut data: Vec<u8>) {
        data.clear();
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        if spare.len() < MAX_SPARE && data.capacity() > 0 {
            spare.push(data);
        }
    }

    /// Take one queued job and run it here; false when there was none.
    fn help_once(&self) -> bool {
        if self.queued.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let job = {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            let job = loop {
                match q.pop_front() {
                    None => break None,
                    Some(j) => {
                        if j.state.compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                            break Some(j);
                        }
                        // Its hasher needed it first and ran it itself.
                    }
                }
            };
            self.queued.store(q.len(), Ordering::Relaxed);
            match job {
                Some(j) => j,
                None => return false,
            }
        };
        job.run(Some(self));
        self.helped.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// An idle worker: digest queued batches until `ready` has something for it (its own
    /// work: checked before each wait, and after each batch). Between batches it yields the
    /// CPU a few times before it sleeps: a worker whose connection carries large writes
    /// queues a batch every few tens of microseconds, and sleeping and being woken for each
    /// cost more system time than the digest saved.
    ///
    /// How many times is learnt per thread (`SPINS`): yielding pays only when work comes
    /// within it. Where it does not (a live capture at a few Gbit/s: a batch every few
    /// milliseconds), each yield is a context switch to another runnable thread for nothing:
    /// 32 per wait made `live --threads 2` spend 3.1 CPU s on a 2.7 Gbit/s replay where
    /// `--threads 1` spent 2.0-2.4 (learning: 2.5-2.8). So a sleep that lasted longer than
    /// `SPIN_PAYS` halves the next waits' yields (down to none), and work that came within
    /// the yields, or soon after the sleep began, doubles them (up to `YIELDS`).
    pub fn idle_until<T>(&self, mut ready: impl FnMut() -> Option<T>) -> T {
        self.helpers.fetch_add(1, Ordering::SeqCst);
        let out = 'idle: loop {
            if let Some(t) = ready() {
                break t;
            }
            if self.help_once() {
                continue;
            }
            let spins = SPINS.get();
            for _ in 0..spins {
                std::thread::yield_now();
                if self.queued.load(Ordering::Relaxed) > 0 {
                    SPINS.set(more_spins(spins));
                    continue 'idle;
                }
                if let Some(t) = ready() {
                    SPINS.set(more_spins(spins));
                    break 'idle t;
                }
            }
            let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            // Whoever hands this worker its work then looks at `sleepers` (`notify_idle`):
            // one of the two sees the other's write.
            fence(Ordering::SeqCst);
            if let Some(t) = ready() {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                break t;
            }
            let asleep = std::time::Instant::now();
            let q = if q.is_empty() { self.wake.wait_timeout(q, IDLE_WAIT).map(|r| r.0).unwrap_or_else(|e| e.into_inner().0) } else { q };
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
            drop(q);
            SPINS.set(if asleep.elapsed() <= SPIN_PAYS { more_spins(spins) } else { spins / 2 });
        };
        self.helpers.fetch_sub(1, Ordering::SeqCst);
        out
    }

    /// Work was handed to a worker (after it was sent): wake the sleeping ones.
    pub fn notify_idle(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_all();
        }
    }
}

thread_local! {
    static POOL: RefCell<Option<Arc<HashPool>>> = const { RefCell::new(None) };
}

/// The pool this thread's hashers offer their batches to (a `--threads` worker's), or none.
pub fn install(pool: Option<Arc<HashPool>>) {
    POOL.with(|p| *p.borrow_mut() = pool);
}

/// This thread's pool.
pub(crate) fn pool() -> Option<Arc<HashPool>> {
    POOL.with(|p| p.borrow().clone())
}

thread_local! {
    /// Whether this thread's hashers offer their batches now (`set_behind`).
    static BEHIND: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Whether this thread is behind, with more work waiting than what it does now: only then do
/// its hashers offer batches to idle workers. Handing blocks over costs a wake-up of another
/// thread and their bytes' move to its core; it buys time only for a thread that others wait
/// on. A `--threads` worker sets it per batch: offline its queue is full and it offers; live
/// below the rate it can take alone, a batch waits for it rarely and it digests its own
/// (`live --threads 2` on a 2.7 Gbit/s replay: 2.53-2.62 CPU s offering every batch,
/// 2.32-2.45 offering only while behind; offline the same batches are helped).
pub(crate) fn set_behind(behind: bool) {
    BEHIND.set(behind);
}

pub(crate) fn behind() -> bool {
    BEHIND.get()
}

/// Payloads staged in batches of fewer blocks than this gather their whole blocks across
/// payloads (`gather`): on 4 KiB I/O every payload is one block, whose BLAKE3 fills 4 of
/// AVX2's 8 lanes; 8 blocks digested together take two thirds of the time of 8 alone
/// (`batch::digest_blocks` on this project's machine, 2026-11-28: 1575 against 1043 MB/s;
/// docs/performance-log.md).
pub(crate) const GATHER_BELOW: usize = 8;

thread_local! {
    /// This thread's gathering job (`gather`), when gathering is on (`set_gathering`).
    static GATHER: RefCell<Option<Option<Arc<HashJob>>>> = const { RefCell::new(None) };
}

/// Whether this thread's small payloads gather their blocks across payloads (`gather`). Only a
/// thread that hands its sends on with their digests pending and calls `gather_flush` before
/// anyone settles them turns it on (a `--threads` worker, before it hands a batch's events to
/// the ordered stage); elsewhere a pending send is settled at once, and one block is digested
/// alone anyway.
pub fn set_gathering(on: bool) {
    GATHER.with(|g| *g.borrow_mut() = on.then_some(None));
}

/// Is gathering on in this thread?
pub(crate) fn gathering() -> bool {
    GATHER.with(|g| g.borrow().is_some())
}

/// Hand whole blocks of a small payload (`piece`: at most `GATHER_BELOW`, in the buffer they
/// were staged in) to this thread's gathering job: the job and the first block's index in it
/// (`Err(piece)` when gathering is off). A full job (`LANES` blocks) is offered to an idle
/// worker or digested here (`HashPool::offer`), and the next blocks open another.
pub(crate) fn gather(piece: Vec<u8>) -> Result<(Arc<HashJob>, usize), Vec<u8>> {
    debug_assert!(piece.len().is_multiple_of(BLOCK_SIZE) && piece.len() / BLOCK_SIZE < GATHER_BELOW);
    GATHER.with(|g| {
        let mut g = g.borrow_mut();
        let Some(open) = g.as_mut() else { return Err(piece) };
        let blocks = piece.len() / BLOCK_SIZE;
        let mut piece = piece;
        if let Some(job) = open.as_ref() {
            match job.append(piece) {
                Ok(i) => {
                    let job = job.clone();
                    if i + blocks == LANES {
                        seal(open.take());
                    }
                    return Ok((job, i));
                }
                Err(back) => piece = back,
            }
            seal(open.take());
        }
        let job = Arc::new(HashJob::open());
        let i = job.append(piece).map_err(|_| ()).expect("a new job has room");
        *open = Some(job.clone());
        Ok((job, i))
    })
}

/// Seal this thread's gathering job and digest it here (a `--threads` worker before it hands
/// a batch's events on: the ordered stage then finds every gathered digest done).
pub fn gather_flush() {
    let job = GATHER.with(|g| g.borrow_mut().as_mut().and_then(|open| open.take()));
    if let Some(job) = job {
        job.run_unless_taken(pool().as_deref());
    }
}

/// A full gathering job: offered to an idle worker while this thread is behind, else
/// digested here.
fn seal(job: Option<Arc<HashJob>>) {
    let Some(job) = job else { return };
    debug_assert!(job.blocks() > 0);
    match pool() {
        Some(p) if p.has_idle() && behind() => p.offer(&job),
        p => job.run_unless_taken(p.as_deref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::hash::{digest_of, PayloadHasher};

    fn sample(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|i| {
                // Every 5th block is trivial.
                if (i / BLOCK_SIZE) % 5 == 3 {
                    return 0x5a;
                }
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// A worker with nothing of its own to do, digesting what the pool is offered until
    /// stopped.
    struct IdleHelper {
        stop: Arc<std::sync::atomic::AtomicBool>,
        thread: std::thread::JoinHandle<()>,
    }

    impl IdleHelper {
        fn start(pool: &Arc<HashPool>) -> IdleHelper {
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (p, s) = (pool.clone(), stop.clone());
            let thread = std::thread::spawn(move || p.idle_until(|| s.load(Ordering::Acquire).then_some(())));
            IdleHelper { stop, thread }
        }

        fn stop(self, pool: &HashPool) {
            self.stop.store(true, Ordering::Release);
            pool.notify_idle();
            self.thread.join().unwrap();
        }
    }

    /// A hasher with a pool and a helper thread gives the digests of one without, whatever
    /// the payload's length and the size of the pieces it arrives in; the helper took part.
    #[test]
    fn offloaded_digests_are_the_same() {
        let pool = HashPool::new();
        let helper = IdleHelper::start(&pool);
        install(Some(pool.clone()));
        for (len, piece) in [(0, 1), (1, 1), (4095, 1000), (4096, 4096), (65_536, 1448), (65_537, 8948), (1 << 20, 1448), (3 << 20, 65_536), (1_000_001, 7)] {
            let data = sample(len, len as u64);
            let mut h = PayloadHasher::with_len_hint(len as u64);
            for p in data.chunks(piece) {
                h.update(p);
                // Give the helper a chance on a loaded machine.
                if p.len() == piece && pool.queue.lock().unwrap().len() >= 2 {
                    std::thread::yield_now();
                }
            }
            let got = h.finish();
            install(None);
            let want = digest_of(&data);
            install(Some(pool.clone()));
            assert_eq!(got, want, "{len} bytes in pieces of {piece}");
        }
        install(None);
        helper.stop(&pool);
        assert!(pool.helped.load(Ordering::Relaxed) > 0, "the helper digested no batch");
    }

    /// A payload whose batches still wait for a helper at its end is handed on unfinished
    /// (`finish_deferred`), and settles to the digest of one pipeline, whatever its length and
    /// pieces; one with nothing out is ready at once; one dropped unsettled leaves its queued
    /// batches to nobody.
    #[test]
    fn a_payload_with_batches_still_out_settles_later_to_the_same_digest() {
        use crate::payload::hash::Finished;
        let pool = HashPool::new();
        // A worker counted idle that never takes a batch: what was queued is still queued at
        // the payload's end.
        pool.helpers.fetch_add(1, Ordering::SeqCst);
        install(Some(pool.clone()));
        let cases = [(2 * 65_536, 1448), (3 * 65_536 + 5000, 1448), (65_536 + 4096, 8948), (1 << 20, 65_537), (4 * 65_536 + 1, 7000)];
        let settled_leave = |pool: &HashPool| {
            // Batches their hashers settled stay queued until a helper passes them over.
            assert!(!pool.help_once(), "a queued batch was left to be digested");
        };
        for (len, piece) in cases {
            settled_leave(&pool);
            let data = sample(len, len as u64 + 1);
            let mut h = PayloadHasher::with_len_hint(len as u64);
            for p in data.chunks(piece) {
                h.update(p);
            }
            let finished = h.finish_deferred();
            assert!(matches!(finished, Finished::Pending(_)), "{len} bytes in pieces of {piece}: nothing was still out");
            install(None);
            let want = digest_of(&data);
            install(Some(pool.clone()));
            assert_eq!(finished.settle(), want, "{len} bytes in pieces of {piece}");
        }
        // Shorter than two blocks: nothing is handed out, the digest is there at once.
        let data = sample(5000, 3);
        let mut h = PayloadHasher::with_len_hint(5000);
        h.update(&data);
        match h.finish_deferred() {
            Finished::Ready(d) => assert_eq!(d, digest_of(&data)),
            Finished::Pending(_) => panic!("a 5000-byte payload waited for a helper"),
        }
        // Dropped unsettled (a send shed or lost): its queued batches are left to nobody.
        settled_leave(&pool);
        let data = sample(3 * 65_536, 4);
        let mut h = PayloadHasher::with_len_hint(data.len() as u64);
        for p in data.chunks(1448) {
            h.update(p);
        }
        let finished = h.finish_deferred();
        assert!(matches!(finished, Finished::Pending(_)));
        let queued: Vec<_> = pool.queue.lock().unwrap().iter().cloned().collect();
        assert!(queued.iter().any(|j| j.state.load(Ordering::Acquire) == QUEUED));
        drop(finished);
        assert!(queued.iter().all(|j| j.state.load(Ordering::Acquire) != QUEUED), "a dropped payload's batch is still offered");
        settled_leave(&pool);
        assert_eq!(pool.helped.load(Ordering::Relaxed), 0, "a helper digested a dropped payload's batch");
        install(None);
    }

    /// A sink that needs the digest settles a pending one itself (`PayloadSink::send_pending`'s
    /// default), with the same record and digest as one pipeline.
    #[test]
    fn a_sink_without_its_own_way_settles_pending_sends_at_once() {
        use crate::context::PayloadSink;
        use crate::payload::hash::Finished;
        struct Keep(Vec<crate::payload::send::SendRecord>);
        impl PayloadSink for Keep {
            fn send(&mut self, rec: crate::payload::send::SendRecord) {
                self.0.push(rec);
            }
            fn complete(&mut self, _: u64, _: u64, _: u64) {}
        }
        let pool = HashPool::new();
        pool.helpers.fetch_add(1, Ordering::SeqCst);
        install(Some(pool.clone()));
        let data = sample(5 * 65_536 + 77, 8);
        let mut h = PayloadHasher::with_len_hint(data.len() as u64);
        for p in data.chunks(1448) {
            h.update(p);
        }
        let finished = h.finish_deferred();
        assert!(matches!(finished, Finished::Pending(_)));
        install(None);
        let rec = crate::payload::send::SendRecord {
            conn: 1,
            message_id: 2,
            kind: crate::payload::send::SendKind::Write,
            transport: crate::payload::send::Transport::Tcp,
            src: [198, 18, 0, 1].into(),
            dst: [198, 18, 0, 2].into(),
            src_port: 50000,
            dst_port: 445,
            ip_proto: 6,
            session_id: 3,
            tree_id: 4,
            file_id: [5; 16],
            share: None,
            file_name: None,
            offset: 0,
            first_frame: Default::default(),
            last_frame: Default::default(),
            header_frame: None,
            ts_ns: 9,
            digest: Default::default(),
        };
        let mut sink = Keep(Vec::new());
        crate::context::send_finished(&mut sink, finished, rec.clone());
        assert_eq!(sink.0, vec![crate::payload::send::SendRecord { digest: digest_of(&data), ..rec }]);
    }

    /// Small payloads' blocks gathered across payloads (`gather`) settle to the digests of one
    /// pipeline: payloads of 1 byte to 17 blocks, several open at once and fed in pieces of
    /// any size, some dropped unfinished or unsettled, jobs flushed at random points, some
    /// payloads settled from another thread while their job is still gathering; with no pool,
    /// and with a pool and an idle helper. Single-block payloads finished one after another
    /// share a job.
    #[test]
    fn small_payloads_gathered_across_payloads_settle_to_the_same_digests() {
        use crate::payload::hash::Finished;
        let lens = [1, 4095, 4096, 4097, 8192, 12_293, 7 * 4096, 7 * 4096 + 1, 8 * 4096, 20_000, 17 * 4096 + 3];
        for with_pool in [false, true] {
            let pool = HashPool::new();
            let helper = with_pool.then(|| IdleHelper::start(&pool));
            install(with_pool.then(|| pool.clone()));
            set_gathering(true);
            let mut x = 0x2545_f491_4f6c_dd1du64 + with_pool as u64;
            let mut rnd = |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            // (payload, hasher, bytes fed) open at once; finished ones wait to be settled.
            let mut open: Vec<(Vec<u8>, PayloadHasher, usize)> = Vec::new();
            let mut finished: Vec<(Vec<u8>, Finished)> = Vec::new();
            let mut settled = 0;
            let mut far = Vec::new();
            for i in 0..600u64 {
                if open.len() < 5 {
                    let len = lens[rnd(lens.len() as u64) as usize];
                    let data = sample(len, i);
                    open.push((data, PayloadHasher::with_len_hint(len as u64), 0));
                }
                let k = rnd(open.len() as u64) as usize;
                let (data, h, fed) = &mut open[k];
                let piece = (1 + rnd(9000) as usize).min(data.len() - *fed);
                h.update(&data[*fed..*fed + piece]);
                *fed += piece;
                if *fed == data.len() {
                    let (data, h, _) = open.swap_remove(k);
                    match rnd(40) {
                        0 => drop(h),
                        1 => drop(h.finish_deferred()),
                        _ => finished.push((data, h.finish_deferred())),
                    }
                } else if rnd(60) == 0 {
                    drop(open.swap_remove(k));
                }
                if rnd(25) == 0 {
                    gather_flush();
                }
                if rnd(10) == 0 && !finished.is_empty() {
                    // Settled elsewhere, perhaps before its job is sealed.
                    let (data, f) = finished.swap_remove(0);
                    far.push(std::thread::spawn(move || (f.settle(), data)));
                }
            }
            gather_flush();
            for (data, f) in finished.drain(..) {
                let got = f.settle();
                assert_eq!(got, digest_of_alone(&data), "{} bytes", data.len());
                settled += 1;
            }
            for t in far.drain(..) {
                let (got, data) = t.join().unwrap();
                assert_eq!(got, digest_of_alone(&data), "{} bytes, settled on another thread", data.len());
                settled += 1;
            }
            assert!(settled > 100, "{settled}");
            // One-block payloads one after another: gathered into one job, none digested yet.
            let mut jobs = Vec::new();
            let mut pending = Vec::new();
            for i in 0..8 {
                let data = sample(4096, 1000 + i);
                let mut h = PayloadHasher::with_len_hint(4096);
                h.update(&data[..1448]);
                h.update(&data[1448..]);
                match h.finish_deferred() {
                    Finished::Pending(p) => {
                        jobs.extend(p.jobs());
                        pending.push((data, p));
                    }
                    Finished::Ready(_) => panic!("a one-block payload was digested alone"),
                }
            }
            jobs.dedup();
            assert_eq!(jobs.len(), 1, "8 one-block payloads in {} jobs", jobs.len());
            gather_flush();
            for (data, p) in pending {
                assert_eq!(p.settle(), digest_of_alone(&data));
            }
            set_gathering(false);
            install(None);
            if let Some(h) = helper {
                h.stop(&pool);
            }
        }
    }

    /// `digest_of` on a thread without a pool or gathering.
    fn digest_of_alone(data: &[u8]) -> crate::payload::PayloadDigest {
        let data = data.to_vec();
        std::thread::spawn(move || digest_of(&data)).join().unwrap()
    }

    /// Without an idle worker nothing is queued: the hasher digests everything itself.
    #[test]
    fn without_an_idle_worker_nothing_is_offered() {
        let pool = HashPool::new();
        install(Some(pool.clone()));
        let data = sample(1 << 20, 9);
        let mut h = PayloadHasher::with_len_hint(data.len() as u64);
        h.update(&data);
        assert_eq!(h.finish(), digest_of(&data));
        install(None);
        assert_eq!(pool.queue.lock().unwrap().len(), 0);
        assert_eq!(pool.helped.load(Ordering::Relaxed), 0);
    }

    /// A thread that is not behind digests its own blocks even with an idle worker waiting;
    /// once behind, it offers them again.
    #[test]
    fn a_thread_that_keeps_up_offers_nothing() {
        let pool = HashPool::new();
        let helper = IdleHelper::start(&pool);
        while !pool.has_idle() {
            std::thread::yield_now();
        }
        install(Some(pool.clone()));
        let data = sample(1 << 20, 5);
        for behind in [false, true] {
            set_behind(behind);
            let mut h = PayloadHasher::with_len_hint(data.len() as u64);
            let mut offered = 0;
            for p in data.chunks(1448) {
                let before = pool.queued.load(Ordering::Relaxed) + pool.helped.load(Ordering::Relaxed);
                h.update(p);
                offered += usize::from(pool.queued.load(Ordering::Relaxed) + pool.helped.load(Ordering::Relaxed) > before);
            }
            assert_eq!(h.finish(), digest_of(&data));
            if behind {
                assert!(offered > 0, "behind, nothing was offered");
            } else {
                assert_eq!((offered, pool.helped.load(Ordering::Relaxed)), (0, 0), "keeping up, blocks were offered");
            }
        }
        set_behind(true);
        install(None);
        helper.stop(&pool);
    }

    /// An idle thread whose work keeps coming long after it fell asleep stops yielding before
    /// it sleeps (a live capture between batches), and one whose work comes within its
    /// yields yields more again (a reader digesting while batches stream in).
    #[test]
    fn idle_waits_learn_whether_yielding_pays() {
        let pool = HashPool::new();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                assert_eq!(SPINS.get(), YIELDS, "a thread starts by yielding");
                let mut learnt = vec![SPINS.get()];
                // Work that comes only after the thread has slept for a millisecond and more:
                // the yields before each sleep halve, down to none.
                for round in 0..7u32 {
                    let ready = &std::sync::atomic::AtomicU32::new(0);
                    let done = std::thread::scope(|w| {
                        let pool = &pool;
                        w.spawn(move || {
                            while pool.sleepers.load(Ordering::SeqCst) == 0 {
                                std::thread::yield_now();
                            }
                            std::thread::sleep(Duration::from_millis(2));
                            ready.store(round + 1, Ordering::SeqCst);
                            pool.notify_idle();
                        });
                        pool.idle_until(|| Some(ready.load(Ordering::SeqCst)).filter(|&r| r > 0))
                    });
                    assert_eq!(done, round + 1);
                    learnt.push(SPINS.get());
                }
                assert_eq!(learnt, [32, 16, 8, 4, 2, 1, 0, 0], "long sleeps halve the yields");
                // Work there at the first look after a yield: doubled, up to YIELDS.
                let mut grown = Vec::new();
                for _ in 0..7 {
                    let mut looks = 0;
                    if SPINS.get() == 0 {
                        // No yield to find work in (a sleep cut short by a quick wake-up
                        // gives it one back: timing, not tested here).
                        SPINS.set(1);
                    }
                    pool.idle_until(|| {
                        looks += 1;
                        (looks >= 2).then_some(())
                    });
                    grown.push(SPINS.get());
                }
                assert_eq!(grown, [2, 4, 8, 16, 32, 32, 32], "work found while yielding doubles the yields");
            });
            waiter.join().unwrap();
        });
    }
}
