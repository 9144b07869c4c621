//! `--keys` with `--threads`: the sessions' preauth integrity hashes, shared between workers.
//!
//! An SMB 3.1.1 session's encryption keys derive from its session key and the preauth hash
//! of the SESSION_SETUP exchange that set it up (MS-SMB2 §3.2.5.3.1), on the connection where
//! it began. A channel bound to it later (multichannel, §3.3.5.5) is another connection,
//! which `--threads` may give another worker: that worker decrypts the channel's messages
//! with a hash it did not compute. One pipeline has every hash at hand in capture order; the
//! workers get the same one this way:
//!
//! - A worker **publishes** every change of a session's hash that keys could derive from
//!   (the setup's successful response; a refuted message putting it back) under its
//!   **position**: 2 × the frame's number, or 2 × the number + 1 for a sweep after that
//!   frame (`pos_of_frame`, `pos_of_sweep`). Only sessions whose keys-file entry has a
//!   session key are published (directional keys need no hash), so the table holds at most
//!   the keys file's sessions, and the last `HISTORY` changes of each.
//! - One pipeline keeps the keys that first decrypted a session's message and tries only those
//!   from then on (`CryptState::learned`), on every channel. A worker publishes the keys of
//!   its first success for a session, and the earliest in capture order stands.
//! - A worker meeting a session's encrypted message with no keys of its own for it **waits**
//!   until every other worker has done all its frames before its position `p` (its position
//!   is at least `p`, or it has no batch left), then takes the keys that first worked before
//!   `p`, else derives them from the newest change of the hash before `p`: what one pipeline
//!   has there. Workers only wait for positions before their own, so two never wait for each
//!   other. This happens once per session and worker: the keys that worked are kept.
//!
//! Without `--keys`, or with one pipeline, none of this exists.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::crypto::SessionKeys;

/// Changes kept per session.
const HISTORY: usize = 8;

/// After its last batch: everything it will do at the end of input comes after any frame.
pub const END: u64 = u64::MAX;

pub fn pos_of_frame(seq: u64) -> u64 {
    seq.saturating_mul(2)
}

pub fn pos_of_sweep(after_seq: u64) -> u64 {
    pos_of_frame(after_seq).saturating_add(1)
}

#[derive(Default)]
struct Progress {
    /// The position of the step it is on (0 before any).
    pos: AtomicU64,
    /// Batches handed to it that it has not finished.
    outstanding: AtomicUsize,
}

/// One change of a session's hash: where, by whom, and the hash keys derive from from then
/// on (`None`: none, as when a refuted message's setup is put back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Change {
    pos: u64,
    worker: usize,
    hash: Option<[u8; 64]>,
}

/// Shared by the workers of one run.
pub struct KeyShare {
    progress: Vec<Progress>,
    changes: Mutex<HashMap<u64, VecDeque<Change>>>,
    /// Per session, the keys of its first decrypted message: (position, worker, keys).
    learned: Mutex<HashMap<u64, (u64, usize, SessionKeys)>>,
}

impl std::fmt::Debug for KeyShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyShare").field("workers", &self.progress.len()).finish()
    }
}

impl KeyShare {
    pub fn new(workers: usize) -> KeyShare {
        KeyShare {
            progress: (0..workers).map(|_| Progress::default()).collect(),
            changes: Mutex::new(HashMap::new()),
            learned: Mutex::new(HashMap::new()),
        }
    }

    /// The reader hands `worker` a batch (before sending it).
    pub fn handed(&self, worker: usize) {
        self.progress[worker].outstanding.fetch_add(1, Ordering::SeqCst);
    }

    /// `worker` finished a batch.
    pub fn finished(&self, worker: usize) {
        self.progress[worker].outstanding.fetch_sub(1, Ordering::SeqCst);
    }

    /// `worker` starts the step at `pos`.
    pub fn at(&self, worker: usize, pos: u64) {
        self.progress[worker].pos.store(pos, Ordering::SeqCst);
    }

    /// `worker` changed `session_id`'s hash at `pos`.
    pub fn publish(&self, worker: usize, pos: u64, session_id: u64, hash: Option<[u8; 64]>) {
        let mut m = self.changes.lock().unwrap_or_else(|e| e.into_inner());
        let h = m.entry(session_id).or_default();
        if h.len() == HISTORY {
            h.pop_front();
        }
        h.push_back(Change { pos, worker, hash });
    }

    /// `worker` decrypted a message of `session_id` at `pos` with `keys`, the first it did: the
    /// earliest such success in capture order is the session's.
    pub fn learn(&self, worker: usize, pos: u64, session_id: u64, keys: &SessionKeys) {
        let mut m = self.learned.lock().unwrap_or_else(|e| e.into_inner());
        match m.get(&session_id) {
            Some(&(p, w, _)) if (p, w) <= (pos, worker) => {}
            _ => {
                m.insert(session_id, (pos, worker, keys.clone()));
            }
        }
    }

    /// The keys that first decrypted a message of `session_id` before `pos` (`me`'s own at
    /// `pos` too), once every other worker is past `pos` (`lookup`).
    pub fn learned(&self, me: usize, pos: u64, session_id: u64) -> Option<SessionKeys> {
        self.wait(me, pos);
        let m = self.learned.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&session_id).filter(|(p, w, _)| *p < pos || (*w == me && *p <= pos)).map(|(_, _, k)| k.clone())
    }

    /// Has every worker but `me` done all its frames before `pos`?
    fn others_past(&self, me: usize, pos: u64) -> bool {
        self.progress.iter().enumerate().all(|(i, p)| {
            i == me || p.outstanding.load(Ordering::SeqCst) == 0 || p.pos.load(Ordering::SeqCst) >= pos
        })
    }

    /// The hash `session_id`'s keys derive from at `pos`, as `me` needs it: `Some(None)` when
    /// a change says there is none, `None` when no worker changed it before `pos` (the
    /// caller's own state decides then). Waits for the other workers to reach `pos`, except
    /// at the end of input (`END`), where they are past every frame.
    pub fn lookup(&self, me: usize, pos: u64, session_id: u64) -> Option<Option<[u8; 64]>> {
        self.wait(me, pos);
        let m = self.changes.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&session_id)?
            .iter()
            .filter(|c| c.pos < pos || (c.worker == me && c.pos <= pos))
            .max_by_key(|c| (c.pos, c.worker == me))
            .map(|c| c.hash)
    }

    /// Until every worker but `me` is past `pos` (`others_past`).
    fn wait(&self, me: usize, pos: u64) {
        let mut spins = 0u32;
        while !self.others_past(me, pos) {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else if spins < 256 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_lookup_waits_for_the_others_to_pass_its_position_and_takes_the_newest_change_before_it() {
        let s = Arc::new(KeyShare::new(2));
        s.handed(0);
        s.handed(1);
        s.at(1, pos_of_frame(10));
        // Worker 0 is at frame 3: worker 1's lookup at frame 10 waits for it.
        s.at(0, pos_of_frame(3));
        let t = {
            let s = s.clone();
            std::thread::spawn(move || s.lookup(1, pos_of_frame(10), 7))
        };
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert!(!t.is_finished(), "it waits while worker 0 may still change the hash");
        s.publish(0, pos_of_frame(5), 7, Some([5; 64]));
        s.publish(0, pos_of_sweep(8), 7, Some([8; 64]));
        s.at(0, pos_of_frame(12));
        s.publish(0, pos_of_frame(12), 7, None); // after frame 10: not seen there
        assert_eq!(t.join().unwrap(), Some(Some([8; 64])));
        // Its own change at its own position counts; a session nobody changed is None.
        s.publish(1, pos_of_frame(10), 9, Some([1; 64]));
        assert_eq!(s.lookup(1, pos_of_frame(10), 9), Some(Some([1; 64])));
        assert_eq!(s.lookup(0, pos_of_frame(10), 9), None, "not before frame 10 for another worker");
        assert_eq!(s.lookup(1, pos_of_frame(10), 8), None);
        // A worker with no batch left holds no one up.
        s.finished(0);
        s.at(0, pos_of_frame(12));
        assert_eq!(s.lookup(1, pos_of_frame(100), 7), Some(None));
        // Only the last HISTORY changes are kept.
        for i in 0..20 {
            s.publish(0, pos_of_frame(200 + i), 3, Some([i as u8; 64]));
        }
        assert_eq!(s.changes.lock().unwrap()[&3].len(), HISTORY);
        assert_eq!(s.lookup(1, END, 3), Some(Some([19; 64])));
        // The keys that first worked, in capture order, whoever published first.
        let keys = |b: u8| SessionKeys { cipher: crate::smb2::crypto::Cipher::Aes128Gcm, client_to_server: vec![b; 16], server_to_client: vec![b; 16] };
        s.learn(1, pos_of_frame(50), 4, &keys(50));
        s.learn(0, pos_of_frame(30), 4, &keys(30));
        s.learn(0, pos_of_frame(70), 4, &keys(70));
        assert_eq!(s.learned(1, pos_of_frame(30), 4), None, "not before its frame");
        assert_eq!(s.learned(1, pos_of_frame(31), 4), Some(keys(30)));
        s.at(1, pos_of_frame(100));
        assert_eq!(s.learned(0, pos_of_frame(30), 4), Some(keys(30)), "its own at its frame");
    }
}
