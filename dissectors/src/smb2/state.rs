//! Sessions, trees and open files keyed by SessionId/TreeId/FileId, shared by all
//! connections so one session spread over several channels (multichannel) is one session.
//! Those ids are unique per server only (MS-SMB2 §3.3.5.5.3, §3.3.5.7, §3.3.5.9: the server
//! allocates them), so trees and files are kept per server (`Scope`): its ServerGuid from the
//! NEGOTIATE response (the same on every interface of a multichannel server), else its address.
//! Also pending requests (to join a response to its request) and the SMB2 counters
//! reported in `"smb2"`. Every map is bounded: at its cap the oldest entry is evicted and
//! `smb2.state_evicted` is raised.

use super::bounded::BoundedMap;
use super::crypto::{preauth_update, KeyTable, SessionKeys};
use super::keyshare::KeyShare;
use super::records::command;
use crate::anomaly::Anomalies;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use super::Anomaly;

/// Caps of the state maps.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub sessions: usize,
    pub trees: usize,
    pub files: usize,
    pub pending: usize,
    pub connections: usize,
    /// Distinct file names kept for the report.
    pub reported_files: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { sessions: 65_536, trees: 65_536, files: 1 << 20, pending: 1 << 18, connections: 65_536, reported_files: 10_000 }
    }
}

/// Longest share path or file name kept (UTF-8 bytes). The wire allows 64 KiB (a u16
/// length of UTF-16); Windows paths stay far below (32,767 characters at the very most, 260
/// usually). Every map of names holds at most this per entry (docs/memory-audit.md).
pub const MAX_KEPT_NAME: usize = 1024;

/// `name` as kept in the state maps and the report: longer ones are cut at a character
/// boundary before `MAX_KEPT_NAME` bytes and end in "…" (anomaly `smb2.name_truncated`).
pub fn kept_name(name: &str, an: &mut Anomalies) -> Arc<str> {
    if name.len() <= MAX_KEPT_NAME {
        return Arc::from(name);
    }
    an.raise(Anomaly::NameTruncated);
    let mut end = MAX_KEPT_NAME - '…'.len_utf8();
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    Arc::from(format!("{}…", &name[..end]))
}

/// What a request left behind for its response (keyed by connection and MessageId).
#[derive(Debug, Clone)]
pub enum Pending {
    TreeConnect { path: Arc<str> },
    Create { name: Arc<str> },
    Close { file_id: [u8; 16] },
    Read { session_id: u64, tree_id: u32, file_id: [u8; 16], offset: u64, length: u32 },
}

/// Most bytes of encrypted/compressed messages buffered whole at once, over all connections
/// (each message is also bounded by its connection's `max_message_len`). A message that would
/// pass it is not opened (anomaly `smb2.open_budget_exceeded`).
pub const OPENING_CAP: u64 = 256 << 20;

/// What one connection negotiated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnInfo {
    pub dialect: u16,
    /// The largest message body the NEGOTIATE response allows: max(MaxTransactSize,
    /// MaxReadSize, MaxWriteSize) (MS-SMB2 §2.2.4).
    pub max_size: u32,
    pub cipher: Option<u16>,
    pub compression_algorithms: Vec<u16>,
    pub rdma_transform_ids: Vec<u16>,
    /// ServerGuid of the NEGOTIATE response (all zero when absent).
    pub server_guid: [u8; 16],
}

/// The server a tree or file id belongs to (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Guid([u8; 16]),
    Addr(std::net::IpAddr),
    /// A connection whose server is not known yet (no message seen).
    Conn(u64),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Session {
    /// Connections (channels) on which this session was set up or bound.
    pub channels: Vec<u64>,
}

/// The command counters read back (`--dask` parts): names are the engine's own.
fn command_counters<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<&'static str, u64>, D::Error> {
    let m = BTreeMap::<String, u64>::deserialize(d)?;
    m.into_iter()
        .map(|(k, v)| match command::counter_name_of(&k) {
            Some(n) => Ok((n, v)),
            None => Err(serde::de::Error::custom(format!("unknown SMB2 command counter {k:?}"))),
        })
        .collect()
}

/// The SMB2 counters of the report.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Smb2Stats {
    /// `"WRITE.request"` → messages, MS-SMB2 command names (compound elements counted).
    #[serde(deserialize_with = "command_counters")]
    pub commands: BTreeMap<&'static str, u64>,
    pub write_req_pdus: u64,
    /// Sum of WRITE request Length (tshark `smb2.write_length`).
    pub write_bytes: u64,
    /// READ responses, interim (STATUS_PENDING) and error responses included, like tshark.
    pub read_resp_pdus: u64,
    /// Sum of DataLength of READ responses with status 0.
    pub read_bytes: u64,
    /// Distinct non-empty names from CREATE requests (sorted, at most `Limits::reported_files`).
    pub files: BTreeSet<String>,
    /// Dialects from NEGOTIATE responses, e.g. "0x0311".
    pub dialects: BTreeSet<String>,
    pub encrypted_messages: u64,
    /// Encrypted messages decrypted with `--keys`, and their plaintext bytes.
    pub decrypted_messages: u64,
    pub decrypted_bytes: u64,
    /// Encrypted messages left encrypted: no key for their session (or no `--keys`).
    pub encrypted_without_key: u64,
    /// Encrypted messages whose key did not decrypt them (wrong key, damaged message).
    pub decrypt_failed: u64,
    pub compressed_messages: u64,
    /// Compressed messages decompressed (MS-XCA, Pattern_V1), their bytes on the wire (after
    /// the NetBIOS header; accounted as `smb_compressed`), their decompressed bytes, and the
    /// WRITE/READ data bytes inside them (hashed and deduplicated on the decompressed bytes).
    pub decompressed_messages: u64,
    pub decompressed_wire_bytes: u64,
    pub decompressed_bytes: u64,
    pub decompressed_payload_bytes: u64,
    /// Compressed messages that could not be decompressed (anomaly `smb2.decompress_*`).
    pub decompress_failed: u64,
    /// Payloads not sent to dedupe because bytes of them were missing from the capture.
    pub payload_incomplete: u64,
    pub payload_incomplete_bytes: u64,
    /// Payloads hashed and sent to dedupe, and their bytes.
    pub payloads_sent: u64,
    pub payload_bytes_sent: u64,
    /// Sessions established (SESSION_SETUP success), channel bindings excluded.
    pub sessions: u64,
    /// Channel bindings (SESSION_SETUP with SMB2_SESSION_FLAG_BINDING that succeeded).
    pub session_bindings: u64,
    /// Trees connected (TREE_CONNECT success).
    pub trees: u64,
    pub smb1_messages: u64,
    /// Times the stream parser lost framing and resynchronised.
    pub resyncs: u64,
}

/// How many `Smb2Stats::message_counters` there are.
pub const MESSAGE_COUNTERS: usize = 14;

impl Smb2Stats {
    /// The counters one plain or compressed message can add to, besides `commands`: what
    /// `stream::confirm` takes back from a message the next header refutes. Not here: the
    /// encrypted and decrypted counts (an encrypted message is not held), `payloads_sent` and
    /// its bytes (counted when a held message is handed on), SMB1 messages (not held),
    /// `resyncs` (counted after the refutation), the name sets (held apart while the
    /// message is read: `SmbState::held`), and `sessions` (a new session is undone with its
    /// entry, `HeldChange::Session`, as the ordered stage of `--threads` undoes it).
    pub fn message_counters(&mut self) -> [&mut u64; MESSAGE_COUNTERS] {
        [
            &mut self.write_req_pdus, &mut self.write_bytes, &mut self.read_resp_pdus, &mut self.read_bytes,
            &mut self.compressed_messages, &mut self.decompressed_messages, &mut self.decompressed_wire_bytes,
            &mut self.decompressed_bytes, &mut self.decompressed_payload_bytes, &mut self.decompress_failed,
            &mut self.payload_incomplete, &mut self.payload_incomplete_bytes, &mut self.session_bindings,
            &mut self.trees,
        ]
    }

    /// Adds another worker's counters (`--threads`): sums, and the unions of the name sets.
    pub fn absorb(&mut self, o: Smb2Stats) {
        let Smb2Stats {
            commands,
            write_req_pdus,
            write_bytes,
            read_resp_pdus,
            read_bytes,
            files,
            dialects,
            encrypted_messages,
            decrypted_messages,
            decrypted_bytes,
            encrypted_without_key,
            decrypt_failed,
            compressed_messages,
            decompressed_messages,
            decompressed_wire_bytes,
            decompressed_bytes,
            decompressed_payload_bytes,
            decompress_failed,
            payload_incomplete,
            payload_incomplete_bytes,
            payloads_sent,
            payload_bytes_sent,
            sessions,
            session_bindings,
            trees,
            smb1_messages,
            resyncs,
        } = o;
        for (k, v) in commands {
            *self.commands.entry(k).or_insert(0) += v;
        }
        self.files.extend(files);
        self.dialects.extend(dialects);
        for (a, b) in [
            (&mut self.write_req_pdus, write_req_pdus),
            (&mut self.write_bytes, write_bytes),
            (&mut self.read_resp_pdus, read_resp_pdus),
            (&mut self.read_bytes, read_bytes),
            (&mut self.encrypted_messages, encrypted_messages),
            (&mut self.decrypted_messages, decrypted_messages),
            (&mut self.decrypted_bytes, decrypted_bytes),
            (&mut self.encrypted_without_key, encrypted_without_key),
            (&mut self.decrypt_failed, decrypt_failed),
            (&mut self.compressed_messages, compressed_messages),
            (&mut self.decompressed_messages, decompressed_messages),
            (&mut self.decompressed_wire_bytes, decompressed_wire_bytes),
            (&mut self.decompressed_bytes, decompressed_bytes),
            (&mut self.decompressed_payload_bytes, decompressed_payload_bytes),
            (&mut self.decompress_failed, decompress_failed),
            (&mut self.payload_incomplete, payload_incomplete),
            (&mut self.payload_incomplete_bytes, payload_incomplete_bytes),
            (&mut self.payloads_sent, payloads_sent),
            (&mut self.payload_bytes_sent, payload_bytes_sent),
            (&mut self.sessions, sessions),
            (&mut self.session_bindings, session_bindings),
            (&mut self.trees, trees),
            (&mut self.smb1_messages, smb1_messages),
            (&mut self.resyncs, resyncs),
        ] {
            *a += b;
        }
    }
}

/// A payload's share and file names, where known (`SmbState::payload_names`).
pub type ShareAndFile = (Option<Arc<str>>, Option<Arc<str>>);

/// State shared by every SMB2 stream of the run.
#[derive(Debug)]
pub struct SmbState {
    limits: Limits,
    sessions: BoundedMap<(Scope, u64), Session>,
    trees: BoundedMap<(Scope, u64, u32), Arc<str>>,
    files: BoundedMap<(Scope, [u8; 16]), Arc<str>>,
    /// Each connection's server, fixed at its first message (by address, or by the
    /// ServerGuid another connection to that address negotiated), then at its own NEGOTIATE
    /// response by the ServerGuid.
    scopes: BoundedMap<u64, Scope>,
    server_addr: BoundedMap<u64, std::net::IpAddr>,
    guid_of_addr: BoundedMap<std::net::IpAddr, [u8; 16]>,
    pending: BoundedMap<(u64, u64), Pending>,
    conns: BoundedMap<u64, ConnInfo>,
    /// Channel bindings awaiting their SESSION_SETUP response, keyed by (conn, MessageId).
    bindings: BoundedMap<(u64, u64), ()>,
    /// Decryption: the keys file and the preauth hashes and keys of sessions (`--keys`).
    pub crypt: CryptState,
    /// Bytes of encrypted/compressed messages being buffered whole, over all streams (at most
    /// `OPENING_CAP`).
    pub opening_bytes: u64,
    /// Bound on `opening_bytes` (`OPENING_CAP`, or a share of `--max-memory`).
    pub opening_cap: u64,
    pub stats: Smb2Stats,
    /// The names (shares, files) bound and unbound, in order, when a `--threads` worker
    /// keeps them for the ordered stage: a file opened on one channel of a multichannel
    /// session and written on another is named there as one pipeline names it.
    pub journal: Option<Vec<NameOp>>,
    /// While a message that may be refuted is read (`stream::confirm`), what it changes that
    /// a refutation undoes, in order. `None` otherwise.
    pub held: Option<Vec<HeldChange>>,
    /// The ordered stage's replay of the workers' held messages (`NameOp::Hold`): the changes
    /// of each one not decided yet, by (connection, to the server), and the one whose
    /// changes are being applied (its log is `held` meanwhile).
    replayed_holds: BoundedMap<(u64, bool), Vec<HeldChange>>,
    replay_active: Option<(u64, bool)>,
}

/// A name for the report's lists (`Smb2Stats::files`, `Smb2Stats::dialects`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportName {
    File(String),
    Dialect(String),
}

/// A change made by a message that may be refuted (`SmbState::held`).
#[derive(Debug, Clone)]
pub enum HeldChange {
    /// A name for the report's lists: added when the message is handed on, dropped when it is
    /// refuted.
    Name(ReportName),
    /// A pending request's entry was set or taken (a request image must not leave an entry a
    /// real response with its MessageId would take, nor a response image take a real
    /// request's): what it held before, put back when the message is refuted.
    Pending((u64, u64), Option<Pending>),
    /// A channel binding's request was noted or taken; whether one was noted under its key
    /// before.
    Binding((u64, u64), bool),
    /// A session's entry before (a new one, a channel added, a logoff); whether the change
    /// counted a new session (`Smb2Stats::sessions`, taken back with it).
    Session((Scope, u64), Option<Session>, bool),
    /// A tree's share before (connected, disconnected).
    Tree((Scope, u64, u32), Option<Arc<str>>),
    /// A file id's name before (opened, closed).
    File((Scope, [u8; 16]), Option<Arc<str>>),
    /// What the connection had negotiated before (a NEGOTIATE response).
    Conn(u64, Option<Box<ConnInfo>>),
    /// The connection's server before (a NEGOTIATE response's ServerGuid), and the ServerGuid
    /// its address was known by before.
    Scope(u64, Option<Scope>),
    AddrGuid(std::net::IpAddr, Option<[u8; 16]>),
    /// Preauth integrity hashes before (`--keys`): the connection's, a SESSION_SETUP
    /// request's awaiting its response, a session's.
    ConnPreauth(u64, Option<Box<[u8; 64]>>),
    SetupPreauth((u64, u64), Option<Box<[u8; 64]>>),
    SessionPreauth(u64, Option<Box<SessionHash>>),
}

/// Puts `v` under `k`, or removes the entry.
fn put<K: std::hash::Hash + Eq + Clone, V>(m: &mut BoundedMap<K, V>, k: K, prev: Option<V>, an: &mut Anomalies) {
    match prev {
        Some(v) => SmbState::evicted(an, m.insert(k, v)),
        None => {
            m.remove(&k);
        }
    }
}

pub use crate::context::{HoldStep, NameOp};

/// A session's preauth integrity hash, and whether its setup has ended (a STATUS_SUCCESS
/// response): from then on it is the context its keys derive from, and no later
/// SESSION_SETUP with its SessionId changes it. Those are a channel's binding, whose hash is
/// the new channel's own (`PreauthSession` in `Connection.PreauthSessionTable`, MS-SMB2
/// §3.3.5.5, §3.2.5.3.3), and re-authentication, which derives no new keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionHash {
    pub hash: [u8; 64],
    pub done: bool,
}

/// What decryption needs to remember: the keys file, the preauth integrity hashes
/// (connection: after its NEGOTIATE; session: along its SESSION_SETUP exchange, §3.2.5.2 /
/// §3.3.5.5) and the keys that worked. Empty and untouched without `--keys`.
#[derive(Debug)]
pub struct CryptState {
    pub keys: Arc<KeyTable>,
    /// Connection preauth hash: after the NEGOTIATE request, then after the response.
    conn_preauth: BoundedMap<u64, [u8; 64]>,
    /// SESSION_SETUP requests with SessionId 0 awaiting their response: (conn, MessageId).
    setup_pending: BoundedMap<(u64, u64), [u8; 64]>,
    /// Sessions being set up, and (once set up) the hash their keys derive from.
    session_preauth: BoundedMap<u64, SessionHash>,
    /// Keys that decrypted a session's message.
    learned: BoundedMap<u64, SessionKeys>,
    /// With `--threads`: the run's shared hashes and this worker's number (`keyshare`).
    share: Option<(Arc<KeyShare>, usize)>,
    /// This worker's position (`keyshare::pos_of_frame`), with `share`.
    pos: u64,
}

impl CryptState {
    fn new(keys: Arc<KeyTable>, limits: &Limits) -> Self {
        CryptState {
            keys,
            conn_preauth: BoundedMap::new(limits.connections),
            setup_pending: BoundedMap::new(limits.pending),
            session_preauth: BoundedMap::new(limits.sessions),
            learned: BoundedMap::new(limits.sessions),
            share: None,
            pos: 0,
        }
    }

    /// A `--threads` worker's: it shares the sessions' hashes with the others (`keyshare`).
    pub fn share(&mut self, share: Arc<KeyShare>, worker: usize) {
        self.share = Some((share, worker));
    }

    /// The worker starts the step at `pos` (`keyshare::pos_of_frame`, `pos_of_sweep`, `END`).
    pub fn at(&mut self, pos: u64) {
        if let Some((s, me)) = &self.share {
            self.pos = pos;
            s.at(*me, pos);
        }
    }

    /// The hash `session_id`'s keys would derive from: its setup's, once ended.
    fn derivable(&self, session_id: u64) -> Option<[u8; 64]> {
        self.session_preauth.get(&session_id).filter(|h| h.done).map(|h| h.hash)
    }

    /// With `share`: tells the other workers of a change of `session_id`'s derivable hash from
    /// `before` (only for sessions whose keys derive from a hash: a session key in the file).
    fn published(&self, session_id: u64, before: Option<[u8; 64]>) {
        let Some((s, me)) = &self.share else { return };
        let now = self.derivable(session_id);
        if now != before && self.keys.get(session_id).is_some_and(|e| e.session_key.is_some()) {
            s.publish(*me, self.pos, session_id, now);
        }
    }

    pub fn active(&self) -> bool {
        !self.keys.is_empty()
    }

    /// A NEGOTIATE request or response's bytes (whole SMB2 message): the connection's hash
    /// (through `SmbState::preauth_negotiate`, which logs it while a message is held).
    fn on_negotiate(&mut self, conn: u64, response: bool, msg: &[u8]) {
        let mut h = if response { self.conn_preauth.get(&conn).copied().unwrap_or([0; 64]) } else { [0; 64] };
        preauth_update(&mut h, msg);
        self.conn_preauth.insert(conn, h);
    }

    /// A SESSION_SETUP request or response (whole SMB2 message). The final successful
    /// response is not hashed (§3.2.5.3.1): the session's hash is then the keys' context.
    fn on_session_setup(&mut self, conn: u64, message_id: u64, session_id: u64, response: bool, status: u32, msg: &[u8]) {
        let before = self.share.as_ref().and_then(|_| self.derivable(session_id));
        self.session_setup(conn, message_id, session_id, response, status, msg);
        self.published(session_id, before);
    }

    fn session_setup(&mut self, conn: u64, message_id: u64, session_id: u64, response: bool, status: u32, msg: &[u8]) {
        if !response {
            if session_id == 0 {
                let mut h = self.conn_preauth.get(&conn).copied().unwrap_or([0; 64]);
                preauth_update(&mut h, msg);
                self.setup_pending.insert((conn, message_id), h);
            } else if let Some(h) = self.session_preauth.get_mut(&session_id) {
                if !h.done {
                    preauth_update(&mut h.hash, msg);
                }
            }
            return;
        }
        let base = self.setup_pending.remove(&(conn, message_id));
        if let Some(hash) = base {
            self.session_preauth.insert(session_id, SessionHash { hash, done: false });
        }
        if let Some(h) = self.session_preauth.get_mut(&session_id) {
            if h.done {
                // A binding's or a re-authentication's response: not the session's hash.
            } else if status == 0 {
                h.done = true;
            } else {
                preauth_update(&mut h.hash, msg);
            }
        }
    }

    /// The session's preauth hash (3.1.1 key derivation context), when its setup was seen.
    pub fn session_preauth(&self, session_id: u64) -> Option<&[u8; 64]> {
        self.session_preauth.get(&session_id).map(|h| &h.hash)
    }

    /// The keys that first decrypted a message of `session_id`: this worker's, or with
    /// `--threads` another's before this step (`keyshare`), as one pipeline keeps them.
    pub fn learned_keys(&self, session_id: u64) -> Option<SessionKeys> {
        if let Some(k) = self.learned.get(&session_id) {
            return Some(k.clone());
        }
        let (s, me) = self.share.as_ref()?;
        s.learned(*me, self.pos, session_id)
    }

    /// `keys` decrypted a message of `session_id`: kept, and with `--threads` told the others
    /// when they are its first.
    pub fn learn(&mut self, session_id: u64, keys: SessionKeys) {
        if let Some((s, me)) = &self.share {
            if !self.learned.contains_key(&session_id) {
                s.learn(*me, self.pos, session_id, &keys);
            }
        }
        self.learned.insert(session_id, keys);
    }

    /// The hash to derive `session_id`'s keys from now: with `--threads`, the newest any
    /// worker published before this step, as one pipeline would have it (`keyshare`); else,
    /// or when none did, this state's.
    pub fn preauth_for_keys(&self, session_id: u64) -> Option<[u8; 64]> {
        if let Some((s, me)) = &self.share {
            if let Some(h) = s.lookup(*me, self.pos, session_id) {
                return h;
            }
        }
        self.session_preauth(session_id).copied()
    }
}

impl Default for SmbState {
    fn default() -> Self {
        SmbState::with_limits(Limits::default())
    }
}

impl SmbState {
    pub fn new() -> Self {
        SmbState::default()
    }

    pub fn with_limits(limits: Limits) -> Self {
        SmbState {
            limits,
            sessions: BoundedMap::new(limits.sessions),
            trees: BoundedMap::new(limits.trees),
            files: BoundedMap::new(limits.files),
            pending: BoundedMap::new(limits.pending),
            conns: BoundedMap::new(limits.connections),
            scopes: BoundedMap::new(limits.connections),
            server_addr: BoundedMap::new(limits.connections),
            guid_of_addr: BoundedMap::new(limits.connections),
            bindings: BoundedMap::new(limits.pending),
            crypt: CryptState::new(Arc::new(KeyTable::default()), &limits),
            opening_bytes: 0,
            opening_cap: OPENING_CAP,
            stats: Smb2Stats::default(),
            journal: None,
            held: None,
            replayed_holds: BoundedMap::new(limits.connections),
            replay_active: None,
        }
    }

    /// Decrypt with these keys (`--keys`).
    /// Bound on the bytes of encrypted/compressed messages buffered at once.
    pub fn with_opening_cap(mut self, cap: u64) -> Self {
        self.opening_cap = cap;
        self
    }

    pub fn with_keys(mut self, keys: Arc<KeyTable>) -> Self {
        self.crypt = CryptState::new(keys, &self.limits);
        self
    }

    pub fn stats(&self) -> Smb2Stats {
        self.stats.clone()
    }

    fn evicted(an: &mut Anomalies, evicted: bool) {
        if evicted {
            an.raise(Anomaly::StateEvicted);
        }
    }

    pub fn count_command(&mut self, cmd: u16, response: bool) {
        *self.stats.commands.entry(command::counter_name(cmd, response)).or_insert(0) += 1;
    }

    // --- connections ---

    pub fn conn(&self, conn: u64) -> Option<&ConnInfo> {
        self.conns.get(&conn)
    }

    pub fn set_negotiated(&mut self, conn: u64, info: ConnInfo, an: &mut Anomalies) {
        // 0x02FF answers an SMB1 multi-protocol NEGOTIATE ("SMB2 wildcard": a second
        // NEGOTIATE follows); it is not a dialect the connection uses.
        if info.dialect != DIALECT_WILDCARD {
            self.note_report_name(ReportName::Dialect(dialect_name(info.dialect)), an);
        }
        let guid = info.server_guid;
        if let Some(h) = self.held.as_mut() {
            h.push(HeldChange::Conn(conn, self.conns.get(&conn).cloned().map(Box::new)));
        }
        let e = self.conns.insert(conn, info);
        Self::evicted(an, e);
        if guid != [0; 16] {
            self.server_guid(conn, guid, an);
        }
    }

    /// Connection `conn`'s server has address `addr` (called at its first message).
    pub fn note_server(&mut self, conn: u64, addr: std::net::IpAddr, an: &mut Anomalies) {
        if self.scopes.get(&conn).is_some() {
            return;
        }
        if let Some(j) = self.journal.as_mut() {
            j.push(NameOp::Server(conn, addr));
        }
        let scope = self.guid_of_addr.get(&addr).map_or(Scope::Addr(addr), |g| Scope::Guid(*g));
        let e = self.scopes.insert(conn, scope);
        Self::evicted(an, e);
        let e = self.server_addr.insert(conn, addr);
        Self::evicted(an, e);
    }

    /// Connection `conn`'s NEGOTIATE response named ServerGuid `guid`.
    pub fn server_guid(&mut self, conn: u64, guid: [u8; 16], an: &mut Anomalies) {
        if let Some(j) = self.journal.as_mut() {
            j.push(NameOp::ServerGuid(conn, guid));
        }
        if let Some(h) = self.held.as_mut() {
            h.push(HeldChange::Scope(conn, self.scopes.get(&conn).copied()));
        }
        let e = self.scopes.insert(conn, Scope::Guid(guid));
        Self::evicted(an, e);
        if let Some(a) = self.server_addr.get(&conn).copied() {
            if let Some(h) = self.held.as_mut() {
                h.push(HeldChange::AddrGuid(a, self.guid_of_addr.get(&a).copied()));
            }
            let e = self.guid_of_addr.insert(a, guid);
            Self::evicted(an, e);
        }
    }

    /// The server connection `conn`'s tree and file ids belong to.
    pub fn scope(&self, conn: u64) -> Scope {
        self.scopes.get(&conn).copied().unwrap_or(Scope::Conn(conn))
    }

    // --- sessions ---

    pub fn note_binding_request(&mut self, conn: u64, message_id: u64, an: &mut Anomalies) {
        if let Some(h) = self.held.as_mut() {
            h.push(HeldChange::Binding((conn, message_id), self.bindings.contains_key(&(conn, message_id))));
        }
        let e = self.bindings.insert((conn, message_id), ());
        Self::evicted(an, e);
    }

    /// A SESSION_SETUP response with status 0: the session (or a new channel of it) is up.
    pub fn session_established(&mut self, conn: u64, message_id: u64, session_id: u64, an: &mut Anomalies) {
        let binding = self.take_binding(conn, message_id);
        if binding {
            self.stats.session_bindings += 1;
        }
        if let Some(j) = self.journal.as_mut() {
            j.push(NameOp::Session(conn, session_id, binding));
        }
        self.establish(conn, session_id, binding, an);
    }

    /// Session `session_id` is up on `conn` (a new session unless it is known on this server,
    /// or `binding`): `sessions` counts new ones.
    fn establish(&mut self, conn: u64, session_id: u64, binding: bool, an: &mut Anomalies) {
        let key = (self.scope(conn), session_id);
        let prev = self.sessions.get(&key);
        if prev.is_some_and(|s| s.channels.contains(&conn) || s.channels.len() >= 64) {
            return;
        }
        let new = prev.is_none() && !binding;
        if let Some(h) = self.held.as_mut() {
            h.push(HeldChange::Session(key, prev.cloned(), new));
        }
        if new {
            self.stats.sessions += 1;
        }
        match self.sessions.get_mut(&key) {
            Some(s) => s.channels.push(conn),
            None => Self::evicted(an, self.sessions.insert(key, Session { channels: vec![conn] })),
        }
    }

    pub fn session_failed(&mut self, conn: u64, message_id: u64) {
        self.take_binding(conn, message_id);
    }

    /// Whether a channel binding's request was noted under (conn, MessageId); taken.
    fn take_binding(&mut self, conn: u64, message_id: u64) -> bool {
        let taken = self.bindings.remove(&(conn, message_id)).is_some();
        if let (Some(h), true) = (self.held.as_mut(), taken) {
            h.push(HeldChange::Binding((conn, message_id), true));
        }
        taken
    }

    /// Hands `sink` the names journaled since the last hand-over (a `--threads` worker's:
    /// before each send and at each mark, so the ordered stage applies them in the order they
    /// happened relative to the sends).
    pub fn hand_over(&mut self, sink: &mut dyn crate::context::PayloadSink) {
        if let Some(j) = self.journal.as_mut() {
            if !j.is_empty() {
                sink.names(std::mem::take(j));
            }
        }
    }

    /// The share and file name a payload of (conn, message_id) is reported with: as they are
    /// now (the file's: `fallback` when no map names it). A `--threads` worker journals the lookup (`NameOp::Lookup`): its names are only its
    /// connections', so the ordered stage names the payload at this same point from every
    /// connection's names (a file opened on one channel and written on another).
    #[allow(clippy::too_many_arguments)]
    pub fn payload_names(
        &mut self,
        conn: u64,
        message_id: u64,
        read: bool,
        session_id: u64,
        tree_id: u32,
        file_id: &[u8; 16],
        fallback: Option<Arc<str>>,
    ) -> ShareAndFile {
        let file = self.file_name(conn, file_id).or_else(|| fallback.clone());
        if let Some(j) = self.journal.as_mut() {
            j.push(NameOp::Lookup(conn, message_id, read, session_id, tree_id, *file_id, fallback));
        }
        (self.share(conn, session_id, tree_id), file)
    }

    pub fn session(&self, conn: u64, session_id: u64) -> Option<&Session> {
        self.sessions.get(&(self.scope(conn), session_id))
    }

    pub fn logoff(&mut self, conn: u64, session_id: u64) {
        if let Some(j) = self.journal.as_mut() {
            j.push(NameOp::Logoff(conn, session_id));
        }
        let key = (self.scope(conn), session_id);
        let prev = self.sessions.remove(&key);
        if let (Some(h), Some(p)) = (self.held.as_mut(), prev) {
            h.push(HeldChange::Session(key, Some(p), false));
        }
    }

    // --- trees ---

    pub fn tree_connected(&mut self, conn: u64, session_id: u64, tree_id: u32, path: Arc<str>, an: &mut Anomalies) {
        self.stats.trees += 1;
        if let Some(j) = self.journal.as_mut() {
            j.push(NameOp::Tree(conn, session_id, tree_id, Some(path.clone())));
        }
        self.set_tree(conn, session_id, tree_id, Some(path), an);
    }

    fn set_tree(&mut self, conn: u64, session_id: u64, tree_id: u32, path: Option<Arc<str>>, an: &mut Anomalies) {
        let key = (self.scope(conn), session_id, tree_id);
        if let Some(h) = self.held.as_mut() {
            h.push(HeldChange::Tree(key, self.trees.get(&key).cloned()));
        }
        put(&mut self.trees, key, path, an);
    }

    pub fn share(&self, conn: u64, session_id: u64, tree_id: u32) -> Option<Arc<str>> {
        self.trees.get(&(self.scope(conn), session_id, tree_id)).cloned()
    }

    pub fn tree_disconnected(&mut self, conn: u64, session_id: u64, tree_id: u32) {
        if let Some(j) = self.journal.as_mut() {
            j.push(NameOp::Tree(conn, session_id, tree_id, None));
        }
        self.set_tree(conn, session_id, tree_id, None, &mut Anomalies::default());
    }

    // --- files ---

    /// A CREATE request's name, for the report's file list. The empty name (the share's
    /// root directory) is not listed.
    pub fn note_file_name(&mut self, name: &str, an: &mut Anomalies) {
        if name.is_empty() || self.stats.files.contains(name) {
            return;
        }
        self.note_report_name(ReportName::File(name.to_string()), an);
    }

    /// Adds a name to the report's lists, or to `held` while a message is held.
    pub fn note_report_name(&mut self, name: ReportName, an: &mut Anomalies) {
        if let Some(h) = self.held.as_mut() {
            h.push(HeldChange::Name(name));
            return;
        }
        match name {
            ReportName::Dialect(d) => {
                self.stats.dialects.insert(d);
            }
            ReportName::File(f) => {
                if self.stats.files.contains(&f) {
                    return;
                }
                if self.stats.files.len() >= self.limits.reported_files {
                    an.raise(Anomaly::ReportFilesCapped);
                    return;
                }
                self.stats.files.insert(f);
            }
        }
    }

    pub fn file_opened(&mut self, conn: u64, file_id: [u8; 16], name: Arc<str>, an: &mut Anomalies) {
        if let Some(j) = self.journal.as_mut() {
            j.push(NameOp::File(conn, file_id, Some(name.clone())));
        }
        self.set_file(conn, file_id, Some(name), an);
    }

    fn set_file(&mut self, conn: u64, file_id: [u8; 16], name: Option<Arc<str>>, an: &mut Anomalies) {
        let key = (self.scope(conn), file_id);
        if let Some(h) = self.held.as_mut() {
            h.push(HeldChange::File(key, self.files.get(&key).cloned()));
        }
        put(&mut self.files, key, name, an);
    }

    pub fn file_name(&self, conn: u64, file_id: &[u8; 16]) -> Option<Arc<str>> {
        self.files.get(&(self.scope(conn), *file_id)).cloned()
    }

    pub fn file_closed(&mut self, conn: u64, file_id: &[u8; 16]) {
        if let Some(j) = self.journal.as_mut() {
            j.push(NameOp::File(conn, *file_id, None));
        }
        self.set_file(conn, *file_id, None, &mut Anomalies::default());
    }

    /// A worker's name change, in the ordered stage's own copy of the names (its counters
    /// and evictions are the workers' to report: `an` is a scratch counter).
    /// A held message's changes are logged as its worker logged them (`NameOp::Hold`), and
    /// undone when it is refuted.
    pub fn apply(&mut self, op: NameOp, an: &mut Anomalies) {
        if let NameOp::Hold(c, to_server, step) = op {
            return self.replay_hold((c, to_server), step, an);
        }
        // Another connection's change while a held message's are applied is not its own.
        let foreign = self.replay_active.is_some_and(|(c, _)| c != op.conn());
        let active = if foreign { self.held.take() } else { None };
        match op {
            NameOp::Server(c, a) => self.note_server(c, a, an),
            NameOp::ServerGuid(c, g) => self.server_guid(c, g, an),
            NameOp::Tree(c, s, t, path) => self.set_tree(c, s, t, path, an),
            NameOp::File(c, f, name) => self.set_file(c, f, name, an),
            NameOp::Session(c, s, binding) => self.establish(c, s, binding, an),
            NameOp::Logoff(c, s) => self.logoff(c, s),
            // Resolved by the ordered stage (`parallel::Ordered`), which keeps the answer.
            NameOp::Lookup(..) | NameOp::Hold(..) => {}
        }
        if foreign {
            self.held = active;
        }
    }

    fn replay_hold(&mut self, key: (u64, bool), step: HoldStep, an: &mut Anomalies) {
        let mut log = self.replayed_holds.remove(&key).unwrap_or_default();
        if self.replay_active == Some(key) {
            log.extend(self.held.take().unwrap_or_default());
            self.replay_active = None;
        }
        match step {
            HoldStep::Open => {
                if let Some(other) = self.replay_active.take() {
                    // Not paused (journals are not cut inside a held message's reading).
                    let l = self.held.take().unwrap_or_default();
                    Self::evicted(an, self.replayed_holds.insert(other, l));
                }
                self.held = Some(log);
                self.replay_active = Some(key);
            }
            HoldStep::Pause => Self::evicted(an, self.replayed_holds.insert(key, log)),
            HoldStep::Keep | HoldStep::Refute => self.decide(log, step, an),
        }
    }

    // --- pending requests ---

    pub fn add_pending(&mut self, conn: u64, message_id: u64, p: Pending, an: &mut Anomalies) {
        if let Some(h) = self.held.as_mut() {
            h.push(HeldChange::Pending((conn, message_id), self.pending.get(&(conn, message_id)).cloned()));
        }
        let e = self.pending.insert((conn, message_id), p);
        Self::evicted(an, e);
    }

    pub fn pending(&self, conn: u64, message_id: u64) -> Option<&Pending> {
        self.pending.get(&(conn, message_id))
    }

    pub fn take_pending(&mut self, conn: u64, message_id: u64) -> Option<Pending> {
        let taken = self.pending.remove(&(conn, message_id));
        if let (Some(h), Some(t)) = (self.held.as_mut(), taken.as_ref()) {
            h.push(HeldChange::Pending((conn, message_id), Some(t.clone())));
        }
        taken
    }

    /// A refuted message's changes undone, last first (`HeldChange`): its names are dropped.
    pub fn undo_held(&mut self, changes: Vec<HeldChange>, an: &mut Anomalies) {
        for c in changes.into_iter().rev() {
            match c {
                HeldChange::Name(_) => {}
                HeldChange::Pending(key, Some(p)) => Self::evicted(an, self.pending.insert(key, p)),
                HeldChange::Pending(key, None) => {
                    self.pending.remove(&key);
                }
                HeldChange::Binding(key, existed) => put(&mut self.bindings, key, existed.then_some(()), an),
                HeldChange::Session(key, prev, counted) => {
                    if counted {
                        self.stats.sessions = self.stats.sessions.saturating_sub(1);
                    }
                    put(&mut self.sessions, key, prev, an);
                }
                HeldChange::Tree(key, prev) => put(&mut self.trees, key, prev, an),
                HeldChange::File(key, prev) => put(&mut self.files, key, prev, an),
                HeldChange::Conn(conn, prev) => put(&mut self.conns, conn, prev.map(|b| *b), an),
                HeldChange::Scope(conn, prev) => put(&mut self.scopes, conn, prev, an),
                HeldChange::AddrGuid(addr, prev) => put(&mut self.guid_of_addr, addr, prev, an),
                HeldChange::ConnPreauth(conn, prev) => put(&mut self.crypt.conn_preauth, conn, prev.map(|b| *b), an),
                HeldChange::SetupPreauth(key, prev) => {
                    put(&mut self.crypt.setup_pending, key, prev.map(|b| *b), an)
                }
                HeldChange::SessionPreauth(sid, prev) => {
                    let before = self.crypt.share.as_ref().and_then(|_| self.crypt.derivable(sid));
                    put(&mut self.crypt.session_preauth, sid, prev.map(|b| *b), an);
                    self.crypt.published(sid, before);
                }
            }
        }
    }

    /// The preauth integrity hash of a NEGOTIATE (`CryptState::on_negotiate`), logged while
    /// a message is held.
    pub fn preauth_negotiate(&mut self, conn: u64, response: bool, msg: &[u8]) {
        if let Some(h) = self.held.as_mut() {
            h.push(HeldChange::ConnPreauth(conn, self.crypt.conn_preauth.get(&conn).copied().map(Box::new)));
        }
        self.crypt.on_negotiate(conn, response, msg);
    }

    /// The same for a SESSION_SETUP (`CryptState::on_session_setup`).
    pub fn preauth_session_setup(&mut self, conn: u64, message_id: u64, session_id: u64, response: bool, status: u32, msg: &[u8]) {
        if let Some(h) = self.held.as_mut() {
            let c = &self.crypt;
            h.push(HeldChange::SetupPreauth((conn, message_id), c.setup_pending.get(&(conn, message_id)).copied().map(Box::new)));
            h.push(HeldChange::SessionPreauth(session_id, c.session_preauth.get(&session_id).copied().map(Box::new)));
        }
        self.crypt.on_session_setup(conn, message_id, session_id, response, status, msg);
    }

    /// A held message starts being read on (`conn`, to the server when `to_server`): what it
    /// changes is logged in `held`, and journaled between `HoldStep::Open` and `Pause`.
    pub fn hold_open(&mut self, conn: u64, to_server: bool) {
        self.held = Some(Vec::new());
        if let Some(j) = self.journal.as_mut() {
            j.push(NameOp::Hold(conn, to_server, HoldStep::Open));
        }
    }

    /// It stops being read for now: its changes since `hold_open`. (An `Open` that no name
    /// change followed is dropped from the journal rather than paused: a message held over
    /// hundreds of segments adds nothing to it.)
    pub fn hold_pause(&mut self, conn: u64, to_server: bool) -> Option<Vec<HeldChange>> {
        let changes = self.held.take();
        if let (Some(j), true) = (self.journal.as_mut(), changes.is_some()) {
            let open = NameOp::Hold(conn, to_server, HoldStep::Open);
            if j.last() == Some(&open) {
                j.pop();
            } else {
                j.push(NameOp::Hold(conn, to_server, HoldStep::Pause));
            }
        }
        changes
    }

    /// It is decided (`HoldStep::Keep` or `Refute`), in the journal too.
    pub fn hold_decided(&mut self, conn: u64, to_server: bool, changes: Vec<HeldChange>, step: HoldStep, an: &mut Anomalies) {
        if let Some(j) = self.journal.as_mut() {
            j.push(NameOp::Hold(conn, to_server, step));
        }
        self.decide(changes, step, an);
    }

    /// A held message's changes kept (`Keep`) or undone (`Refute`), by its worker or by the
    /// ordered stage replaying the worker's journal.
    fn decide(&mut self, changes: Vec<HeldChange>, step: HoldStep, an: &mut Anomalies) {
        match step {
            HoldStep::Keep => self.keep_held(changes, an),
            HoldStep::Refute => self.undo_held(changes, an),
            HoldStep::Open | HoldStep::Pause => debug_assert!(false, "{step:?} decides nothing"),
        }
    }

    /// A message handed on: its names are added to the report's lists (its other changes stay).
    pub fn keep_held(&mut self, changes: Vec<HeldChange>, an: &mut Anomalies) {
        for c in changes {
            if let HeldChange::Name(n) = c {
                self.note_report_name(n, an);
            }
        }
    }

    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
}

/// DialectRevision 0x02FF: the server supports SMB 2.1 or later and expects a second
/// NEGOTIATE (MS-SMB2 2.2.4, 3.3.5.3.1).
pub const DIALECT_WILDCARD: u16 = 0x02FF;

/// A DialectRevision as the specification names it (`3.1.1`), as tshark shows it; an
/// unknown value in hex.
pub fn dialect_name(d: u16) -> String {
    match d {
        0x0202 => "2.0.2".into(),
        0x0210 => "2.1".into(),
        0x0300 => "3.0".into(),
        0x0302 => "3.0.2".into(),
        0x0311 => "3.1.1".into(),
        other => format!("0x{other:04x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a held message changed is undone last first when it is refuted (a pending entry
    /// set, replaced or taken; a binding noted), and kept when it is handed on.
    #[test]
    fn a_refuted_message_changes_are_undone_and_a_kept_one_stays() {
        let mut an = Anomalies::default();
        let read = |offset| Pending::Read { session_id: 1, tree_id: 1, file_id: [1; 16], offset, length: 1 };
        let offset = |s: &SmbState, mid| match s.pending(1, mid) {
            Some(Pending::Read { offset, .. }) => Some(*offset),
            _ => None,
        };
        let mut s = SmbState::new();
        s.add_pending(1, 7, read(70), &mut an);
        s.add_pending(1, 8, read(80), &mut an);
        s.held = Some(Vec::new());
        s.add_pending(1, 7, read(71), &mut an); // replaces a real entry
        s.add_pending(1, 7, read(72), &mut an); // twice
        s.add_pending(1, 9, read(90), &mut an); // a new one
        assert_eq!(s.take_pending(1, 8).map(|_| ()), Some(())); // takes a real one
        s.note_binding_request(1, 10, &mut an);
        s.note_file_name("image.bin", &mut an);
        let changes = s.held.take().unwrap();
        let mut kept = SmbState::new();
        kept.held = Some(Vec::new());
        kept.add_pending(1, 9, read(90), &mut an);
        kept.note_binding_request(1, 10, &mut an);
        kept.note_file_name("image.bin", &mut an);
        let kept_changes = kept.held.take().unwrap();
        s.undo_held(changes, &mut an);
        assert_eq!((offset(&s, 7), offset(&s, 8), offset(&s, 9)), (Some(70), Some(80), None));
        assert!(!s.bindings.contains_key(&(1, 10)));
        assert!(s.stats.files.is_empty());
        kept.keep_held(kept_changes, &mut an);
        assert_eq!(offset(&kept, 9), Some(90));
        assert!(kept.bindings.contains_key(&(1, 10)));
        assert_eq!(kept.stats.files.iter().collect::<Vec<_>>(), vec!["image.bin"]);
    }

    /// A refuted message's sessions, trees, file names, negotiated settings, ServerGuid and
    /// preauth hashes are put back as they were, in the worker and, from its journal, in the
    /// ordered stage of `--threads` (which counts sessions); a kept one's stay.
    #[test]
    fn a_refuted_message_state_is_put_back_in_the_worker_and_the_ordered_stage() {
        use std::net::{IpAddr, Ipv4Addr};
        let srv = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2));
        let keys = Arc::new(KeyTable::parse("4100000000000000,00112233445566778899aabbccddeeff\n").unwrap());
        // What each state shows: the figures a refuted message must leave as they were.
        let view = |s: &SmbState| {
            let c = &s.crypt;
            (
                (s.stats.sessions, s.session(1, 0x41).cloned(), s.session(1, 0x42).cloned(), s.scope(1), s.scope(3)),
                (s.share(1, 0x41, 1), s.share(1, 0x41, 2), s.file_name(1, &[7; 16]), s.file_name(1, &[8; 16])),
                (s.conn(1).cloned(), s.guid_of_addr.get(&srv).copied(), s.bindings.contains_key(&(1, 20))),
                (c.conn_preauth.get(&1).copied(), c.setup_pending.get(&(1, 30)).copied(), c.session_preauth.get(&0x42).copied()),
            )
        };
        let run = |refute: Option<bool>| {
            let mut an = Anomalies::default();
            let mut s = SmbState::new().with_keys(keys.clone());
            s.journal = Some(Vec::new());
            s.note_server(1, srv, &mut an);
            s.session_established(1, 1, 0x41, &mut an);
            s.tree_connected(1, 0x41, 1, Arc::from("\\\\srv\\real"), &mut an);
            s.file_opened(1, [7; 16], Arc::from("real.vhdx"), &mut an);
            s.note_binding_request(1, 20, &mut an);
            s.preauth_negotiate(1, false, b"negotiate request");
            s.preauth_session_setup(1, 30, 0, false, 0, b"session setup request");
            if let Some(keep) = refute.map(|r| !r) {
                s.hold_open(1, false);
                s.tree_connected(1, 0x41, 2, Arc::from("image"), &mut an);
                s.tree_disconnected(1, 0x41, 1);
                s.file_opened(1, [8; 16], Arc::from("image.bin"), &mut an);
                s.file_closed(1, &[7; 16]);
                s.session_established(1, 2, 0x42, &mut an); // a new session
                s.logoff(1, 0x41);
                s.session_established(1, 20, 0x41, &mut an); // takes the binding, a session again
                let changes = s.hold_pause(1, false).unwrap();
                s.hold_open(1, false);
                let info = ConnInfo { dialect: 0x0302, max_size: 65536, server_guid: [0x5a; 16], ..ConnInfo::default() };
                s.set_negotiated(1, info, &mut an);
                s.preauth_negotiate(1, true, b"negotiate response image");
                s.preauth_session_setup(1, 30, 0x42, true, 0xC000_0016, b"session setup response image");
                let mut all = changes;
                all.extend(s.hold_pause(1, false).unwrap());
                s.hold_decided(1, false, all, if keep { HoldStep::Keep } else { HoldStep::Refute }, &mut an);
            }
            // A later connection to the address takes the server's scope from it.
            s.note_server(3, srv, &mut an);
            let mut o = SmbState::new();
            for op in s.journal.take().unwrap() {
                o.apply(op, &mut an);
            }
            (view(&s), o.stats.sessions, o.share(1, 0x41, 1), o.file_name(1, &[7; 16]), o.scope(3), o.replayed_holds.len(), o.held.is_some())
        };
        let before = run(None);
        assert_eq!(run(Some(true)), before);
        let kept = run(Some(false));
        assert_ne!(kept.0, before.0);
        assert_eq!(((kept.0).0).0, 2, "the kept message's session counts");
        assert_eq!(kept.1, 2, "and is counted by the ordered stage too");
        assert_eq!((kept.2, kept.3), (None, None), "the kept message disconnected the tree and closed the file");
        assert_eq!(kept.4, Scope::Guid([0x5a; 16]));
        assert_eq!((kept.5, kept.6), (0, false), "no hold is left open");
        assert_eq!((before.1, before.4), (1, Scope::Addr(srv)));
        // A held message's reading that changed no name adds nothing to the journal.
        let mut w = SmbState::new();
        w.journal = Some(Vec::new());
        w.hold_open(1, true);
        assert_eq!(w.hold_pause(1, true).map(|c| c.len()), Some(0));
        assert_eq!(w.journal.as_ref().map(Vec::len), Some(0));
        // In the ordered stage, another connection's change amid a held message's is not its.
        let mut o = SmbState::new();
        let mut an = Anomalies::default();
        o.apply(NameOp::Hold(1, false, HoldStep::Open), &mut an);
        o.apply(NameOp::Tree(1, 0x41, 2, Some(Arc::from("image"))), &mut an);
        o.apply(NameOp::Tree(5, 0x51, 1, Some(Arc::from("other"))), &mut an);
        o.apply(NameOp::Hold(1, false, HoldStep::Refute), &mut an);
        assert_eq!((o.share(1, 0x41, 2), o.share(5, 0x51, 1).as_deref()), (None, Some("other")));
    }

    #[test]
    fn multichannel_binding_is_one_session() {
        let mut an = Anomalies::default();
        let mut s = SmbState::new();
        let srv = std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 2));
        s.note_server(1, srv, &mut an);
        s.note_server(2, srv, &mut an);
        s.session_established(1, 3, 0x55, &mut an);
        s.note_binding_request(2, 1, &mut an);
        s.session_established(2, 1, 0x55, &mut an);
        assert_eq!(s.stats.sessions, 1);
        assert_eq!(s.stats.session_bindings, 1);
        assert_eq!(s.session(2, 0x55).unwrap().channels, vec![1, 2]);
        // The same SessionId from another server is another session.
        s.note_server(3, std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 3)), &mut an);
        s.session_established(3, 1, 0x55, &mut an);
        assert_eq!(s.stats.sessions, 2);
        s.tree_connected(1, 0x55, 5, Arc::from("\\\\srv\\share"), &mut an);
        assert_eq!(s.share(1, 0x55, 5).as_deref(), Some("\\\\srv\\share"));
        assert_eq!(s.share(1, 0x56, 5), None);
    }

    #[test]
    fn caps_evict_and_raise() {
        let mut an = Anomalies::default();
        let mut s = SmbState::with_limits(Limits { pending: 2, reported_files: 2, ..Limits::default() });
        for mid in 0..5 {
            s.add_pending(1, mid, Pending::Create { name: Arc::from("x") }, &mut an);
        }
        assert_eq!(s.pending_len(), 2);
        assert_eq!(an.get("smb2.state_evicted"), 3);
        assert!(s.pending(1, 0).is_none() && s.pending(1, 4).is_some());
        for n in ["b", "a", "a", "c"] {
            s.note_file_name(n, &mut an);
        }
        assert_eq!(s.stats.files.iter().cloned().collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(an.get("smb2.report_files_capped"), 1);
    }

    #[test]
    fn dialects_are_named_as_the_specification_names_them() {
        assert_eq!(dialect_name(0x0311), "3.1.1");
        assert_eq!(dialect_name(0x0302), "3.0.2");
        assert_eq!(dialect_name(0x0210), "2.1");
        assert_eq!(dialect_name(0x0aaa), "0x0aaa");
        let mut s = SmbState::new();
        let mut an = Anomalies::default();
        let info = |dialect| ConnInfo { dialect, ..ConnInfo::default() };
        s.set_negotiated(1, info(DIALECT_WILDCARD), &mut an);
        s.set_negotiated(1, info(0x0311), &mut an);
        assert_eq!(s.stats().dialects.into_iter().collect::<Vec<_>>(), vec!["3.1.1".to_string()]);
    }

    #[test]
    fn tree_and_file_ids_belong_to_their_server() {
        use std::net::{IpAddr, Ipv4Addr};
        let a = |n| IpAddr::V4(Ipv4Addr::new(198, 18, 0, n));
        let mut an = Anomalies::default();
        let mut s = SmbState::new();
        // Two servers hand out the same SessionId, TreeId and FileId (they are per server).
        s.note_server(1, a(1), &mut an);
        s.note_server(2, a(2), &mut an);
        s.tree_connected(1, 0x41, 1, Arc::from("\\\\owner\\ClusterStorage$"), &mut an);
        s.tree_connected(2, 0x41, 1, Arc::from("\\\\partner\\SBL$"), &mut an);
        s.file_opened(1, [7; 16], Arc::from("a.vhdx"), &mut an);
        s.file_opened(2, [7; 16], Arc::from("b.dat"), &mut an);
        assert_eq!(s.share(1, 0x41, 1).as_deref(), Some("\\\\owner\\ClusterStorage$"));
        assert_eq!(s.share(2, 0x41, 1).as_deref(), Some("\\\\partner\\SBL$"));
        assert_eq!(s.file_name(1, &[7; 16]).as_deref(), Some("a.vhdx"));
        assert_eq!(s.file_name(2, &[7; 16]).as_deref(), Some("b.dat"));
        // Another connection to the first server's address names the same trees.
        s.note_server(3, a(1), &mut an);
        assert_eq!(s.file_name(3, &[7; 16]).as_deref(), Some("a.vhdx"));
        // Multichannel over two interfaces of one server: the ServerGuid joins them.
        let guid = [0x5a; 16];
        for (conn, addr) in [(10, a(20)), (11, a(21))] {
            s.note_server(conn, addr, &mut an);
            s.set_negotiated(conn, ConnInfo { dialect: 0x311, server_guid: guid, ..ConnInfo::default() }, &mut an);
        }
        s.file_opened(10, [9; 16], Arc::from("c.vhdx"), &mut an);
        assert_eq!(s.file_name(11, &[9; 16]).as_deref(), Some("c.vhdx"));
        // A later connection to either address, NEGOTIATE not seen, is that server too.
        s.note_server(12, a(21), &mut an);
        assert_eq!(s.file_name(12, &[9; 16]).as_deref(), Some("c.vhdx"));
        assert_eq!(s.file_name(2, &[9; 16]), None);
        // The ordered stage of --threads replays a worker's journal into its own state.
        let mut w = SmbState::new();
        w.journal = Some(Vec::new());
        w.note_server(1, a(1), &mut an);
        w.tree_connected(1, 0x41, 1, Arc::from("\\\\owner\\x"), &mut an);
        w.file_opened(1, [7; 16], Arc::from("a.vhdx"), &mut an);
        w.file_closed(1, &[7; 16]);
        // Sessions: one established on two connections of one server counts once; after a
        // logoff the same SessionId is a new session.
        w.note_server(2, a(1), &mut an);
        w.session_established(1, 5, 0x41, &mut an);
        w.session_established(2, 5, 0x41, &mut an);
        w.logoff(2, 0x41);
        w.session_established(2, 6, 0x41, &mut an);
        assert_eq!(w.stats.sessions, 2);
        let mut o = SmbState::new();
        for op in w.journal.take().unwrap() {
            o.apply(op, &mut an);
        }
        assert_eq!(o.share(1, 0x41, 1).as_deref(), Some("\\\\owner\\x"));
        assert_eq!(o.stats.sessions, 2, "the ordered stage counts sessions as the worker did");
        assert_eq!(o.file_name(1, &[7; 16]), None);
        assert_eq!(an.iter().count(), 0);
    }

    #[test]
    fn long_names_are_kept_cut() {
        let mut an = Anomalies::default();
        assert_eq!(&*kept_name("a\\b.vhdx", &mut an), "a\\b.vhdx");
        assert_eq!(an.get("smb2.name_truncated"), 0);
        let long = "é".repeat(40_000); // 80,000 bytes, 2 bytes a character
        let k = kept_name(&long, &mut an);
        assert!(k.len() <= MAX_KEPT_NAME && k.ends_with('…') && k.starts_with("éé"));
        assert_eq!(an.get("smb2.name_truncated"), 1);
    }
}
