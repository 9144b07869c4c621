//! Confirmation of a message found where framing was not known: the first message of a TCP
//! direction (a capture may start mid-connection) and the first after a resynchronisation (a
//! bad header, a gap). A scan takes the first bytes that look like a NetBIOS + SMB2 header, and
//! an SMB2 message's image inside a WRITE's data (a capture file copied to a share) looks like
//! one. What such a message hands on (its sends, its completions) is held until the next header
//! decides: a NetBIOS header and ProtocolId right where its length ends confirm it (and the
//! stream); a header that does not parse there refutes it: its sends are dropped, its bytes
//! move to `smb_unparsed` and `smb2.resync_unconfirmed` is raised. A gap or the end of the
//! stream before the next header leaves it undecided: it is handed on, as before this check. A
//! held message whose header says response on the client's side, or request on the server's, is
//! no message (MS-SMB2 §2.2.1: SMB2_FLAGS_SERVER_TO_REDIR is set on responses and only on
//! them): it is not decoded, and it is refuted when it ends even if a header follows
//! (`smb2.resync_wrong_direction`); checked where exactly one end of the connection is an SMB
//! port, since then the ports say which end is the server. Plain and compressed SMB2 messages
//! are held (an encrypted one is authenticated when it is decrypted). A refuted message's
//! counters (commands, WRITE and READ counts and bytes, sessions, trees, decompression), the
//! names it would add to the report's lists (`smb2.files`, `smb2.dialects`) and the anomalies
//! it raised are taken back too, and the SMB2 state it changed is put back as it was
//! (`SmbState::held` logs each change while it is read): pending requests, channel bindings,
//! sessions, trees, file ids' names, a NEGOTIATE response's connection settings and
//! ServerGuid, and with `--keys` the preauth integrity hashes. A `--threads` worker journals
//! the held message's steps (`NameOp::Hold`), so the ordered stage undoes the names and
//! sessions it changed there too.

use super::Smb2Stream;
use crate::accounting::{cat, CATEGORY_COUNT};
use crate::anomaly::take_back_count;
use crate::context::send_finished;
use crate::payload::hash::Finished;
use crate::payload::send::SendRecord;
use crate::smb2::state::{HeldChange, HoldStep, Smb2Stats, MESSAGE_COUNTERS};
use crate::smb2::{Anomaly, Parts};
use std::collections::BTreeMap;

const COUNTERS: usize = MESSAGE_COUNTERS;

/// The message counters' values now.
fn counters(s: &mut Smb2Stats) -> [u64; COUNTERS] {
    s.message_counters().map(|c| *c)
}

/// A counter table keyed by name (SMB2 commands, anomalies): what a message added to one
/// since a base, and taking it back.
type Named = BTreeMap<&'static str, u64>;

fn add_named_since(total: &mut Named, base: &Named, now: &Named) {
    for (k, &v) in now {
        let d = v.saturating_sub(base.get(k).copied().unwrap_or(0));
        if d > 0 {
            *total.entry(k).or_insert(0) += d;
        }
    }
}

/// What a message added to the SMB2 counters and the anomalies (or, as a base, their values
/// at a moment).
#[derive(Default)]
struct Counted {
    counters: [u64; COUNTERS],
    commands: Named,
    anomalies: Named,
}

impl Counted {
    fn now(p: &mut Parts) -> Counted {
        Counted { counters: counters(&mut p.smb.stats), commands: p.smb.stats.commands.clone(), anomalies: p.anomalies.counts().clone() }
    }
    /// Adds what was counted since `base`.
    fn add_since(&mut self, base: &Counted, p: &mut Parts) {
        for ((t, n), b) in self.counters.iter_mut().zip(counters(&mut p.smb.stats)).zip(base.counters) {
            *t += n.saturating_sub(b);
        }
        add_named_since(&mut self.commands, &base.commands, &p.smb.stats.commands);
        add_named_since(&mut self.anomalies, &base.anomalies, p.anomalies.counts());
    }
    fn take_back_from(&self, p: &mut Parts) {
        let s = &mut p.smb.stats;
        for (c, n) in s.message_counters().into_iter().zip(self.counters) {
            *c = c.saturating_sub(n);
        }
        for (k, &v) in &self.commands {
            take_back_count(&mut s.commands, k, v);
        }
        for (k, &v) in &self.anomalies {
            p.anomalies.take_back(k, v);
        }
    }
}

/// What a held message has handed on, in order.
enum Held {
    Send(Box<SendRecord>, u32),
    Complete(u64, u64),
}

/// The message held until the next header decides.
pub(super) struct Unconfirmed {
    /// Bytes it added to each accounting category, up to `base`.
    tally: [u64; CATEGORY_COUNT],
    /// The accounting when this stream last started adding to `tally`.
    base: [u64; CATEGORY_COUNT],
    /// The same for the SMB2 counters.
    counted: Counted,
    counted_base: Counted,
    held: Vec<Held>,
    /// What it changed that a refutation undoes, and the names it would add to the report's
    /// lists (`SmbState::held` while it is read).
    changes: Vec<HeldChange>,
    /// Its last byte was read: the next header is being read.
    ended: bool,
    /// A header of it says response on the client's side, or request on the server's
    /// (MS-SMB2 §2.2.1: SMB2_FLAGS_SERVER_TO_REDIR is set on responses and only on them):
    /// refuted when it ends, whatever follows.
    wrong_direction: bool,
}

impl Unconfirmed {
    /// Holding from now: `base` and `counted_base` are the accounting and counters now (an
    /// inner stream's holder, whose bytes its outer stream counts, takes zeros).
    fn new(base: [u64; CATEGORY_COUNT], counted_base: Counted) -> Box<Unconfirmed> {
        Box::new(Unconfirmed { tally: [0; CATEGORY_COUNT], base, counted: Counted::default(), counted_base, held: Vec::new(), changes: Vec::new(), ended: false, wrong_direction: false })
    }
}

impl Smb2Stream {
    /// A plain SMB2 message starts (before any of its bytes are counted): held when the
    /// stream is not confirmed.
    pub(super) fn hold_if_unconfirmed(&mut self, p: &mut Parts) {
        if self.framed && !self.confirmed && self.unconfirmed.is_none() {
            self.unconfirmed = Some(Unconfirmed::new(p.accounting.snapshot(), Counted::now(p)));
            p.smb.hold_open(self.conn, self.to_server);
        }
    }

    /// This stream starts adding to the accounting (a chunk, a gap, the end): a held message
    /// still being read counts from here.
    pub(super) fn rebase_held(&mut self, p: &mut Parts) {
        if let Some(u) = self.unconfirmed.as_mut().filter(|u| !u.ended) {
            u.base = p.accounting.snapshot();
            u.counted_base = Counted::now(p);
            p.smb.hold_open(self.conn, self.to_server);
        }
    }

    /// What this stream added since `rebase_held` belongs to the held message still being
    /// read. Names stop being held in `SmbState` here (until the next `rebase_held`).
    pub(super) fn tally_held(&mut self, p: &mut Parts) {
        let changes = p.smb.hold_pause(self.conn, self.to_server);
        if let Some(u) = self.unconfirmed.as_mut().filter(|u| !u.ended) {
            let now = p.accounting.snapshot();
            for ((t, n), b) in u.tally.iter_mut().zip(now).zip(u.base) {
                *t += n.saturating_sub(b);
            }
            u.base = now;
            u.counted.add_since(&u.counted_base, p);
            u.counted_base = Counted::now(p);
            u.changes.extend(changes.into_iter().flatten());
        }
    }

    /// The next header's first bytes are read: the held message ended before them.
    pub(super) fn held_message_ended(&mut self, p: &mut Parts) {
        self.tally_held(p);
        if let Some(u) = self.unconfirmed.as_mut() {
            u.ended = true;
        }
    }

    /// A header of the held message still being read disagrees with the stream's direction:
    /// false when no message is held (a framed stream's messages are not checked).
    /// (`smb2.resync_wrong_direction` is raised when it is refuted or handed on, after what
    /// it counted is taken back.)
    pub(super) fn held_in_wrong_direction(&mut self) -> bool {
        match self.unconfirmed.as_mut().filter(|u| !u.ended) {
            Some(u) => {
                u.wrong_direction = true;
                true
            }
            None => false,
        }
    }

    /// The held message in the wrong direction ended: refuted, and the header after it is
    /// read on its own (its message is held in turn).
    pub(super) fn refute_if_wrong_direction(&mut self, p: &mut Parts) {
        if self.unconfirmed.as_ref().is_some_and(|u| u.ended && u.wrong_direction) {
            self.refute_held(p);
            p.anomalies.raise(Anomaly::ResyncWrongDirection);
        }
    }

    /// A NetBIOS header and a known ProtocolId follow the held message: it was a message,
    /// and the stream is framed.
    pub(super) fn confirm_held(&mut self, p: &mut Parts) {
        if self.unconfirmed.as_ref().is_some_and(|u| u.ended) {
            self.confirmed = true;
            self.release_held(p);
        }
    }

    /// Hands on what the held message held, in order (confirmed, or undecided: a gap or the
    /// end of the stream came before the next header).
    pub(super) fn release_held(&mut self, p: &mut Parts) {
        let Some(mut u) = self.unconfirmed.take() else { return };
        if u.wrong_direction {
            // A gap or the stream's end came first: not refuted, but not decoded either.
            p.anomalies.raise(Anomaly::ResyncWrongDirection);
        }
        // Changes held in `SmbState` are the message's when it is still being read (a gap).
        if let Some(c) = p.smb.hold_pause(self.conn, self.to_server) {
            u.changes.extend(c);
        }
        p.smb.hold_decided(self.conn, self.to_server, std::mem::take(&mut u.changes), HoldStep::Keep, p.anomalies);
        for h in u.held {
            match h {
                Held::Send(mut rec, length) => {
                    let digest = std::mem::take(&mut rec.digest);
                    self.hand_on(Finished::Ready(digest), *rec, length, p)
                }
                Held::Complete(mid, ts_ns) => p.sink.complete(self.conn, mid, ts_ns),
            }
        }
    }

    /// Framing is lost at or inside the held message: it was not a message (its sends are
    /// dropped, its bytes are unparsed).
    pub(super) fn refute_held(&mut self, p: &mut Parts) {
        self.tally_held(p);
        if let Some(u) = self.unconfirmed.take() {
            p.anomalies.raise(Anomaly::ResyncUnconfirmed);
            p.accounting.reclassify(&u.tally, cat::SMB_UNPARSED);
            u.counted.take_back_from(p);
            p.smb.hold_decided(self.conn, self.to_server, u.changes, HoldStep::Refute, p.anomalies);
        }
    }

    /// The message this held one decompresses to is fed to `inner`: what it hands on is held
    /// too (`take_held_from` moves it here).
    pub(super) fn hold_in(&self, inner: &mut Smb2Stream) {
        if self.unconfirmed.is_some() {
            inner.unconfirmed = Some(Unconfirmed::new([0; CATEGORY_COUNT], Counted::default()));
        }
    }

    pub(super) fn take_held_from(&mut self, inner: &mut Smb2Stream) {
        if let (Some(u), Some(i)) = (self.unconfirmed.as_mut(), inner.unconfirmed.take()) {
            u.held.extend(i.held);
            u.changes.extend(i.changes);
            u.wrong_direction |= i.wrong_direction;
        }
    }

    /// A payload's send: handed on, or held with its digest settled.
    pub(super) fn emit_send(&mut self, finished: Finished, rec: SendRecord, length: u32, p: &mut Parts) {
        match self.unconfirmed.as_mut() {
            Some(u) => {
                let mut rec = Box::new(rec);
                rec.digest = finished.settle();
                u.held.push(Held::Send(rec, length));
            }
            None => self.hand_on(finished, rec, length, p),
        }
    }

    /// The request `mid` got its response: signalled, or held.
    pub(super) fn emit_complete(&mut self, mid: u64, ts_ns: u64, p: &mut Parts) {
        match self.unconfirmed.as_mut() {
            Some(u) => u.held.push(Held::Complete(mid, ts_ns)),
            None => p.sink.complete(self.conn, mid, ts_ns),
        }
    }

    fn hand_on(&mut self, finished: Finished, rec: SendRecord, length: u32, p: &mut Parts) {
        p.smb.stats.payloads_sent += 1;
        p.smb.stats.payload_bytes_sent += u64::from(length);
        p.smb.hand_over(p.sink);
        send_finished(p.sink, finished, rec);
    }
}
