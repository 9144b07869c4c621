//! One pipeline's sink: the dedupe index, fed in order, with small payloads' digests gathered.
//!
//! On 4 KiB I/O every payload is one block, and BLAKE3 of one block fills half of AVX2's
//! lanes. A pipeline's hashers therefore gather small payloads' blocks across payloads
//! (`offload::gather`, as a `--threads` worker's do) and hand their sends on pending. The index
//! must still see every event in the order one pipeline makes them, so from the first pending
//! send on, every event (sends, completions, window sweeps, the ledger's frame times) waits in
//! `waiting`, and leaves, in order, as soon as the sends before it are digested: a gathering job
//! is digested when it holds `LANES` blocks, and whatever waits is settled before anything reads
//! the index (`settled`: a live view, the end of the run). The index receives exactly the
//! events it would have received at once (same results: `parallel` tests, every capture).

use std::collections::VecDeque;

use crate::context::PayloadSink;
use crate::dedupe::{Dedupe, SendRecord};
use crate::payload::hash::PendingDigest;
use crate::payload::offload;

/// Events held back at most (each a few tens of bytes, a send's record boxed).
const MAX_WAITING: usize = 256;

enum Waiting {
    Send(Box<SendRecord>, Option<Box<PendingDigest>>),
    Complete { conn: u64, message_id: u64, ts_ns: u64 },
    Advance(u64),
    /// The capture time of the frames that follow (`Dedupe::note_time`, for the ledger).
    Time(u64),
}

pub struct Settling {
    dedupe: Dedupe,
    waiting: VecDeque<Waiting>,
    /// Gathering was turned on in the thread this pipeline runs in (`gather_here`).
    gathering: bool,
}

impl Settling {
    pub fn new(dedupe: Dedupe) -> Settling {
        Settling { dedupe, waiting: VecDeque::new(), gathering: false }
    }

    /// Turn gathering on in this thread (the one that decodes). Once: a pipeline decodes in the
    /// thread that made its first call.
    pub(crate) fn gather_here(&mut self) {
        if !self.gathering {
            self.gathering = true;
            offload::set_gathering(true);
        }
    }

    /// The index with every event handed to it (gathered blocks digested now).
    pub fn settled(&mut self) -> &mut Dedupe {
        if !self.waiting.is_empty() {
            offload::gather_flush();
            while let Some(w) = self.waiting.pop_front() {
                apply(&mut self.dedupe, w);
            }
        }
        &mut self.dedupe
    }

    /// `settled`, the index handed out; gathering off in this thread.
    pub fn into_settled(mut self) -> Dedupe {
        self.settled();
        self.stop_gathering();
        let empty = Dedupe::new(Default::default(), Default::default(), None);
        std::mem::replace(&mut self.dedupe, empty)
    }

    fn stop_gathering(&mut self) {
        if self.gathering {
            self.gathering = false;
            offload::gather_flush();
            offload::set_gathering(false);
        }
    }

    pub fn note_time(&mut self, ts_ns: u64) {
        if self.waiting.is_empty() {
            self.dedupe.note_time(ts_ns);
        } else if self.dedupe.recording_ledger() {
            match self.waiting.back_mut() {
                Some(Waiting::Time(t)) => *t = ts_ns,
                _ => self.waiting.push_back(Waiting::Time(ts_ns)),
            }
        }
    }

    pub fn advance(&mut self, now_ns: u64) {
        if self.waiting.is_empty() {
            self.dedupe.advance(now_ns);
        } else {
            self.wait(Waiting::Advance(now_ns));
        }
    }

    /// `w` after what waits; then whatever can go. Past `MAX_WAITING` events the gathering job is
    /// digested as it is and everything goes (a trickle of small payloads among large ones
    /// would hold the large ones' records, and a live view's figures, back).
    fn wait(&mut self, w: Waiting) {
        self.waiting.push_back(w);
        if self.waiting.len() > MAX_WAITING {
            self.settled();
            return;
        }
        while let Some(front) = self.waiting.front() {
            if let Waiting::Send(_, Some(p)) = front {
                if !p.is_ready() {
                    break;
                }
            }
            let w = self.waiting.pop_front().expect("a front");
            apply(&mut self.dedupe, w);
        }
    }
}

impl Drop for Settling {
    fn drop(&mut self) {
        self.stop_gathering();
    }
}

fn apply(dedupe: &mut Dedupe, w: Waiting) {
    match w {
        Waiting::Send(rec, pending) => dedupe.send(*crate::context::settled(rec, pending)),
        Waiting::Complete { conn, message_id, ts_ns } => dedupe.complete(conn, message_id, ts_ns),
        Waiting::Advance(now) => dedupe.advance(now),
        Waiting::Time(ts) => dedupe.note_time(ts),
    }
}

impl PayloadSink for Settling {
    fn send(&mut self, rec: SendRecord) {
        if self.waiting.is_empty() {
            self.dedupe.send(rec);
        } else {
            self.wait(Waiting::Send(Box::new(rec), None));
        }
    }
    fn send_pending(&mut self, rec: SendRecord, digest: PendingDigest) {
        self.wait(Waiting::Send(Box::new(rec), Some(Box::new(digest))));
    }
    fn complete(&mut self, conn: u64, message_id: u64, ts_ns: u64) {
        if self.waiting.is_empty() {
            self.dedupe.complete(conn, message_id, ts_ns);
        } else {
            self.wait(Waiting::Complete { conn, message_id, ts_ns });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::send_finished;
    use crate::dedupe::tests::{data, rec};
    use crate::dedupe::{DedupeConfig, SendKind, Topology};
    use crate::payload::hash::PayloadHasher;

    enum Ev {
        Send(Box<SendRecord>, Vec<u8>),
        Complete(u64, u64, u64),
        Advance(u64),
    }

    fn stage() -> Dedupe {
        let cfg = DedupeConfig { window_ns: 40_000_000, ..Default::default() };
        Dedupe::new(cfg, Topology::default(), None)
    }

    /// Events fed through `Settling` with small payloads gathered give the index's result of
    /// the same events fed at once: small and large payloads (repeated contents, so
    /// duplicates within and across the 40 ms window), completions and sweeps interleaved.
    /// Events wait while a gathering job is open, and never more than `MAX_WAITING`.
    #[test]
    fn gathered_events_reach_the_index_in_order() {
        let mut x = 0x5eed_u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut events = Vec::new();
        let (mut t_ms, mut mid) = (0u64, 0u64);
        for _ in 0..4000 {
            t_ms += rnd(3);
            match rnd(10) {
                0 => events.push(Ev::Advance(t_ms * 1_000_000)),
                1 if mid > 0 => events.push(Ev::Complete(1 + mid % 3, mid - rnd(mid.min(5)), t_ms * 1_000_000)),
                _ => {
                    mid += 1;
                    // Mostly one-block payloads of 40 contents; some of 2-3 blocks, some large.
                    let blocks = match rnd(20) {
                        0 => 20,
                        1 | 2 => 2 + rnd(2) as usize,
                        _ => 1,
                    };
                    let bytes = data(rnd(40), blocks);
                    let kind = if rnd(3) == 0 { SendKind::Read } else { SendKind::Write };
                    let (src, dst) = [(1, 2), (2, 3), (1, 3)][rnd(3) as usize];
                    events.push(Ev::Send(Box::new(rec(kind, src, dst, 1 + mid % 3, mid, t_ms, &bytes)), bytes));
                }
            }
        }
        let mut direct = stage();
        for e in &events {
            match e {
                Ev::Send(r, _) => direct.send((**r).clone()),
                Ev::Complete(c, m, t) => direct.complete(*c, *m, *t),
                Ev::Advance(t) => direct.advance(*t),
            }
        }
        let want = serde_json::to_value(direct.finish()).unwrap();

        let got = std::thread::spawn(move || {
            let mut s = Settling::new(stage());
            s.gather_here();
            let (mut pending, mut most_waiting) = (0, 0);
            for e in events {
                match e {
                    Ev::Send(r, bytes) => {
                        let mut h = PayloadHasher::with_len_hint(bytes.len() as u64);
                        for piece in bytes.chunks(1448) {
                            h.update(piece);
                        }
                        let finished = h.finish_deferred();
                        pending += matches!(finished, crate::payload::hash::Finished::Pending(_)) as usize;
                        send_finished(&mut s, finished, *r);
                    }
                    Ev::Complete(c, m, t) => s.complete(c, m, t),
                    Ev::Advance(t) => s.advance(t),
                }
                most_waiting = most_waiting.max(s.waiting.len());
            }
            assert!(pending > 2000, "{pending} sends were handed on pending");
            assert!(most_waiting > 16 && most_waiting <= MAX_WAITING, "{most_waiting} events waited at most");
            let report = s.into_settled().finish();
            assert!(!offload::gathering(), "gathering still on after the run");
            serde_json::to_value(report).unwrap()
        })
        .join()
        .unwrap();
        assert!(want["duplicated_payloads"].as_u64().unwrap() > 100, "{}", want["duplicated_payloads"]);
        assert_eq!(got, want);
    }
}
