//! The send ledger: the events the decoding stages hand to the ordered stage (dedupe and
//! attribution), as a documented, versioned Apache Parquet file.
//!
//! The ordered stage is a pure function of this event stream: `Dedupe::send` for every payload
//! send, `Dedupe::complete` when its response is seen, `Dedupe::advance` at each sweep of the
//! window. Replaying a ledger through a fresh `Dedupe` (`dedupe::replay`) therefore gives the same
//! figures as the analysis that wrote it, under any topology or window: a user who fixes a
//! topology file does not re-read the captures, and a distributed analysis can cut here.
//!
//! Format (docs/ledger.md): one row per event, in the order the ordered stage received them;
//! columns below (`SCHEMA`); file key-value metadata `smbwire.ledger` = `LEDGER_FORMAT`, and
//! `smbwire.run` = the analysis result without its dedupe part (JSON), so `attribute` can
//! rebuild the whole report. Payload bytes are never in a ledger: only digests.
//!
//! Why the `parquet` crate in the engine (not pyarrow): the events are produced in Rust, at
//! millions per minute; writing them from Rust avoids marshalling every record through Python,
//! and the reader (`smbwire attribute`, later the distributed ordered stage) stays a Rust
//! function with no Python in the loop. Only its low-level column API is used (no Arrow), with
//! Snappy compression, which keeps the dependency small.

use std::fs::File;
use std::net::IpAddr;
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::column::writer::ColumnWriter;
use parquet::data_type::ByteArray;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use crate::context::{HoldStep, Mark, NameOp};
use crate::payload::send::{SendKind, SendRecord, Transport};
use crate::frame::FrameRef;
use crate::payload::{BlockDigest, PayloadDigest, BLOCK_SIZE};

mod footer;
mod pages;

/// The footer step of opening a ledger, on its Thrift-encoded metadata alone: smbwire's check
/// (`footer`), then, when it passes, the `parquet` crate's decoding, as `read` and the part
/// readers do; the crate's row-group count, or the refusal. For the `ledger_footer` fuzz target,
/// which reaches this step millions of times faster than a whole file through `attribute`.
#[doc(hidden)]
pub fn decode_footer_metadata(meta: &[u8]) -> Result<usize, String> {
    footer::check_metadata(meta)?;
    parquet::file::metadata::ParquetMetaDataReader::decode_metadata(meta)
        .map(|m| m.num_row_groups())
        .map_err(|e| e.to_string())
}

/// Version of the ledger format; readers refuse any other.
pub const LEDGER_FORMAT: &str = "smbwire-ledger/1";
/// Metadata key holding `LEDGER_FORMAT`.
pub const KEY_FORMAT: &str = "smbwire.ledger";
/// Metadata key holding the rest of the analysis result (JSON).
pub const KEY_RUN: &str = "smbwire.run";

/// One column per field; `event` says which fields a row uses (the others are zero/empty).
pub const SCHEMA: &str = "
message smbwire_ledger {
  required int32 event;
  required int64 ts_ns;
  required int64 conn;
  required int64 message_id;
  required int32 kind;
  required int32 transport;
  required binary src_ip;
  required binary dst_ip;
  required int32 src_port;
  required int32 dst_port;
  required int64 session_id;
  required int32 tree_id;
  required binary file_id;
  optional binary share (UTF8);
  optional binary file_name (UTF8);
  required int64 offset;
  required int64 length;
  required int32 first_file;
  required int64 first_number;
  required int32 last_file;
  required int64 last_number;
  optional int32 header_file;
  optional int64 header_number;
  required binary digest;
  required binary block_hashes;
  required binary block_trivial;
  required int64 at_ns;
}
";

/// `at_ns` of the events produced by the end-of-input flush (streams cut short, RDMA
/// transfers never completed): after every frame of every capture.
pub const AT_END: u64 = i64::MAX as u64;

const EV_SEND: i32 = 0;
const EV_COMPLETE: i32 = 1;
const EV_ADVANCE: i32 = 2;
// Ledger parts only (`PART_FORMAT`): a decoding task's name changes and buffered bytes.
const EV_NAME_SERVER: i32 = 3;
const EV_NAME_GUID: i32 = 4;
const EV_NAME_TREE: i32 = 5;
const EV_NAME_FILE: i32 = 6;
const EV_BUFFERED: i32 = 7;
const EV_NAME_SESSION: i32 = 8;
const EV_NAME_LOGOFF: i32 = 9;
const EV_NAME_LOOKUP: i32 = 10;
const EV_NAME_HOLD: i32 = 11;

/// Version of a ledger part (`smbwire analyze --dask`, docs/ledger.md "Ledger parts"): what
/// one decoding task of a distributed run hands the ordered stage. Its columns are the
/// ledger's, then `PART_KEY_COLUMNS`.
pub const PART_FORMAT: &str = "smbwire-ledger-part/3";

/// The columns a part adds: where its row goes in the ordered stage's replay.
const PART_KEY_COLUMNS: &str = "
  required int64 pos;
  required int32 step;
  required int32 mark_phase;
  required int64 mark_a;
  required int64 mark_b;
";

/// The part schema: the ledger's columns, then the key columns.
fn part_schema() -> String {
    let body = SCHEMA.trim_end().strip_suffix('}').expect("schema ends with a brace");
    format!("{body}{PART_KEY_COLUMNS}}}\n").replace("message smbwire_ledger", "message smbwire_ledger_part")
}

/// Where a part's row goes in the replay: frame `pos` (its run-wide number) and the `step`
/// within it (`part_step`), and the mark the decoding task recorded it under (it orders the
/// closes of several tasks at a sweep and at the end).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PartKey {
    pub pos: u64,
    pub step: u8,
    pub mark: Mark,
}

/// The steps of a `PartKey`, in replay order at one position.
pub mod part_step {
    /// Events of the frame `pos` itself.
    pub const FRAME: u8 = 0;
    /// The sweep due after frame `pos` (an `Advance` row: the window moves), then what the
    /// sweep closed in each task.
    pub const SWEEP: u8 = 1;
    pub const SWEEP_CLOSES: u8 = 2;
    /// The end of input (`pos` is `AT_END`): what closing everything produced.
    pub const FINISH: u8 = 3;
}

/// One row of a part.
#[derive(Clone, Debug, PartialEq)]
pub enum PartItem {
    Event(Event),
    /// A change of the names that cross connections (`context::NameOp`).
    Name(NameOp),
    /// The task's out-of-order bytes now (TCP, MPA tables).
    Buffered(u64, u64),
}

/// A part's row as read back: its key, when it reached the ordered stage (`at_ns`), its item.
pub type PartRow = (PartKey, u64, PartItem);

/// Rows per row group: bounds the writer's buffer (about 100 bytes a row plus 16 per block).
const ROW_GROUP_ROWS: usize = 32_768;
/// Most rows of one row group the reader accepts: its columns are read whole, with room
/// reserved from the footer's row count (about 400 bytes a row before the values' bytes),
/// so a damaged or forged footer must not size them. Four times what the writer puts in one.
pub const MAX_ROW_GROUP_ROWS: usize = 4 * ROW_GROUP_ROWS;

/// The row count of a row group as the reader may allocate for it (see `MAX_ROW_GROUP_ROWS`).
fn row_group_rows(path: &str, g: usize, num_rows: i64) -> Result<usize, LedgerError> {
    match usize::try_from(num_rows) {
        Ok(n) if n <= MAX_ROW_GROUP_ROWS => Ok(n),
        _ => Err(err(path, format!("ledger row group {g} declares {num_rows} rows (at most {MAX_ROW_GROUP_ROWS})"))),
    }
}

/// What the ordered stage receives, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Send(Box<SendRecord>),
    /// The response to (conn, message_id) was seen at ts_ns.
    Complete { conn: u64, message_id: u64, ts_ns: u64 },
    /// The window sweeps to ts_ns.
    Advance { ts_ns: u64 },
}

#[derive(Debug)]
pub struct LedgerError(pub String);

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LedgerError {}

fn err(path: &str, e: impl std::fmt::Display) -> LedgerError {
    LedgerError(format!("{path}: {e}"))
}

/// A failed write of the ledger: "cannot write ledger: No space left on device (os error 28)",
/// without the Parquet writer's "External: " before the file system's error.
fn write_err(path: &str, e: parquet::errors::ParquetError) -> LedgerError {
    match e {
        parquet::errors::ParquetError::External(inner) => err(path, format!("cannot write ledger: {inner}")),
        e => err(path, format!("cannot write ledger: {e}")),
    }
}

/// Columns of the rows not yet written.
#[derive(Default)]
struct Columns {
    event: Vec<i32>,
    ts_ns: Vec<i64>,
    conn: Vec<i64>,
    message_id: Vec<i64>,
    kind: Vec<i32>,
    transport: Vec<i32>,
    src_ip: Vec<ByteArray>,
    dst_ip: Vec<ByteArray>,
    src_port: Vec<i32>,
    dst_port: Vec<i32>,
    session_id: Vec<i64>,
    tree_id: Vec<i32>,
    file_id: Vec<ByteArray>,
    share: (Vec<ByteArray>, Vec<i16>),
    file_name: (Vec<ByteArray>, Vec<i16>),
    offset: Vec<i64>,
    length: Vec<i64>,
    first_file: Vec<i32>,
    first_number: Vec<i64>,
    last_file: Vec<i32>,
    last_number: Vec<i64>,
    header_file: (Vec<i32>, Vec<i16>),
    header_number: (Vec<i64>, Vec<i16>),
    digest: Vec<ByteArray>,
    block_hashes: Vec<ByteArray>,
    block_trivial: Vec<ByteArray>,
    at_ns: Vec<i64>,
    // Parts only (`PART_KEY_COLUMNS`).
    pos: Vec<i64>,
    step: Vec<i32>,
    mark_phase: Vec<i32>,
    mark_a: Vec<i64>,
    mark_b: Vec<i64>,
}

fn ip_bytes(ip: IpAddr) -> ByteArray {
    match ip {
        IpAddr::V4(a) => ByteArray::from(a.octets().to_vec()),
        IpAddr::V6(a) => ByteArray::from(a.octets().to_vec()),
    }
}

fn opt_str(col: &mut (Vec<ByteArray>, Vec<i16>), v: Option<&str>) {
    match v {
        Some(s) => {
            col.0.push(ByteArray::from(s.as_bytes().to_vec()));
            col.1.push(1);
        }
        None => col.1.push(0),
    }
}

impl Columns {
    fn len(&self) -> usize {
        self.event.len()
    }

    fn push_common(&mut self, event: i32, ts_ns: u64, conn: u64, message_id: u64) {
        self.event.push(event);
        self.ts_ns.push(ts_ns as i64);
        self.conn.push(conn as i64);
        self.message_id.push(message_id as i64);
    }

    fn push(&mut self, at_ns: u64, e: &Event) {
        self.at_ns.push(at_ns.min(AT_END) as i64);
        match e {
            Event::Send(s) => {
                self.push_common(EV_SEND, s.ts_ns, s.conn, s.message_id);
                self.kind.push(match s.kind {
                    SendKind::Write => 0,
                    SendKind::Read => 1,
                });
                self.transport.push(match s.transport {
                    Transport::Tcp => 0,
                    Transport::Rdma => 1,
                    Transport::SmbDirect => 2,
                });
                self.src_ip.push(ip_bytes(s.src));
                self.dst_ip.push(ip_bytes(s.dst));
                // The IP protocol rides in bits 16..24 of src_port (docs/ledger.md).
                self.src_port.push(i32::from(s.src_port) | (i32::from(s.ip_proto) << 16));
                self.dst_port.push(i32::from(s.dst_port));
                self.session_id.push(s.session_id as i64);
                self.tree_id.push(s.tree_id as i32);
                self.file_id.push(ByteArray::from(s.file_id.to_vec()));
                opt_str(&mut self.share, s.share.as_deref());
                opt_str(&mut self.file_name, s.file_name.as_deref());
                self.offset.push(s.offset as i64);
                self.length.push(s.digest.len as i64);
                self.first_file.push(s.first_frame.file as i32);
                self.first_number.push(s.first_frame.number as i64);
                self.last_file.push(s.last_frame.file as i32);
                self.last_number.push(s.last_frame.number as i64);
                match s.header_frame {
                    Some(h) => {
                        self.header_file.0.push(h.file as i32);
                        self.header_file.1.push(1);
                        self.header_number.0.push(h.number as i64);
                        self.header_number.1.push(1);
                    }
                    None => {
                        self.header_file.1.push(0);
                        self.header_number.1.push(0);
                    }
                }
                self.digest.push(ByteArray::from(s.digest.digest.to_vec()));
                let mut hashes = Vec::with_capacity(16 * s.digest.blocks.len());
                let mut trivial = vec![0u8; s.digest.blocks.len().div_ceil(8)];
                for (i, b) in s.digest.blocks.iter().enumerate() {
                    hashes.extend_from_slice(&b.hash);
                    if b.trivial {
                        trivial[i / 8] |= 1 << (i % 8);
                    }
                }
                self.block_hashes.push(ByteArray::from(hashes));
                self.block_trivial.push(ByteArray::from(trivial));
            }
            Event::Complete { conn, message_id, ts_ns } => {
                self.push_common(EV_COMPLETE, *ts_ns, *conn, *message_id);
                self.push_empty_send_fields();
            }
            Event::Advance { ts_ns } => {
                self.push_common(EV_ADVANCE, *ts_ns, 0, 0);
                self.push_empty_send_fields();
            }
        }
    }

    fn push_empty_send_fields(&mut self) {
        let empty = || ByteArray::from(Vec::new());
        self.kind.push(0);
        self.transport.push(0);
        self.src_ip.push(empty());
        self.dst_ip.push(empty());
        self.src_port.push(0);
        self.dst_port.push(0);
        self.session_id.push(0);
        self.tree_id.push(0);
        self.file_id.push(empty());
        self.share.1.push(0);
        self.file_name.1.push(0);
        self.offset.push(0);
        self.length.push(0);
        self.first_file.push(0);
        self.first_number.push(0);
        self.last_file.push(0);
        self.last_number.push(0);
        self.header_file.1.push(0);
        self.header_number.1.push(0);
        self.digest.push(empty());
        self.block_hashes.push(empty());
        self.block_trivial.push(empty());
    }

    /// A part's row that is not a ledger event: a name change or buffered bytes, in the
    /// ledger's columns (docs/ledger.md "Ledger parts").
    fn push_part_item(&mut self, at_ns: u64, item: &PartItem) {
        let set = |col: &mut Vec<ByteArray>, v: Vec<u8>| *col.last_mut().expect("row pushed") = ByteArray::from(v);
        let name = |col: &mut (Vec<ByteArray>, Vec<i16>), v: &Option<Arc<str>>| {
            if let Some(v) = v {
                col.0.push(ByteArray::from(v.as_bytes().to_vec()));
                *col.1.last_mut().expect("row pushed") = 1;
            }
        };
        match item {
            PartItem::Event(e) => self.push(at_ns, e),
            PartItem::Name(op) => {
                let code = match op {
                    NameOp::Server(..) => EV_NAME_SERVER,
                    NameOp::ServerGuid(..) => EV_NAME_GUID,
                    NameOp::Tree(..) => EV_NAME_TREE,
                    NameOp::File(..) => EV_NAME_FILE,
                    NameOp::Session(..) => EV_NAME_SESSION,
                    NameOp::Logoff(..) => EV_NAME_LOGOFF,
                    NameOp::Lookup(..) => EV_NAME_LOOKUP,
                    NameOp::Hold(..) => EV_NAME_HOLD,
                };
                let conn = op.conn();
                self.at_ns.push(at_ns.min(AT_END) as i64);
                self.push_common(code, 0, conn, 0);
                self.push_empty_send_fields();
                match op {
                    NameOp::Server(_, ip) => *self.src_ip.last_mut().expect("row pushed") = ip_bytes(*ip),
                    NameOp::ServerGuid(_, g) => set(&mut self.file_id, g.to_vec()),
                    NameOp::Tree(_, session, tree, share) => {
                        *self.session_id.last_mut().expect("row pushed") = *session as i64;
                        *self.tree_id.last_mut().expect("row pushed") = *tree as i32;
                        name(&mut self.share, share);
                    }
                    NameOp::File(_, fid, file) => {
                        set(&mut self.file_id, fid.to_vec());
                        name(&mut self.file_name, file);
                    }
                    NameOp::Session(_, session, binding) => {
                        *self.session_id.last_mut().expect("row pushed") = *session as i64;
                        *self.kind.last_mut().expect("row pushed") = i32::from(*binding);
                    }
                    NameOp::Logoff(_, session) => *self.session_id.last_mut().expect("row pushed") = *session as i64,
                    NameOp::Lookup(_, mid, read, session, tree, fid, fallback) => {
                        *self.message_id.last_mut().expect("row pushed") = *mid as i64;
                        *self.kind.last_mut().expect("row pushed") = i32::from(*read);
                        *self.session_id.last_mut().expect("row pushed") = *session as i64;
                        *self.tree_id.last_mut().expect("row pushed") = *tree as i32;
                        set(&mut self.file_id, fid.to_vec());
                        name(&mut self.file_name, fallback);
                    }
                    NameOp::Hold(_, to_server, step) => {
                        *self.kind.last_mut().expect("row pushed") = *step as i32;
                        *self.tree_id.last_mut().expect("row pushed") = i32::from(*to_server);
                    }
                }
            }
            PartItem::Buffered(tcp, mpa) => {
                self.at_ns.push(at_ns.min(AT_END) as i64);
                self.push_common(EV_BUFFERED, 0, 0, 0);
                self.push_empty_send_fields();
                *self.offset.last_mut().expect("row pushed") = *tcp as i64;
                *self.length.last_mut().expect("row pushed") = *mpa as i64;
            }
        }
    }

    fn push_key(&mut self, k: PartKey) {
        self.pos.push(k.pos as i64);
        self.step.push(i32::from(k.step));
        self.mark_phase.push(i32::from(k.mark.phase));
        self.mark_a.push(k.mark.a as i64);
        self.mark_b.push(k.mark.b as i64);
    }
}

/// Writes events to a ledger file as they come; `close` writes the footer with the run
/// metadata. Memory: one row group (`ROW_GROUP_ROWS` rows).
pub struct LedgerWriter {
    path: String,
    writer: Option<SerializedFileWriter<File>>,
    /// The file takes its name at `close` (`outputs::Staged`): an interrupted run leaves no
    /// half ledger, whose missing footer `attribute` would refuse.
    staged: Option<crate::outputs::Staged>,
    cols: Columns,
    rows: u64,
    /// `LEDGER_FORMAT`, or `PART_FORMAT` (then every row has its key).
    format: &'static str,
}

impl LedgerWriter {
    pub fn create(path: &str) -> Result<Self, LedgerError> {
        LedgerWriter::create_as(path, SCHEMA, LEDGER_FORMAT)
    }

    /// A ledger part (`PART_FORMAT`): rows are pushed with `push_part`.
    pub fn create_part(path: &str) -> Result<Self, LedgerError> {
        LedgerWriter::create_as(path, &part_schema(), PART_FORMAT)
    }

    fn create_as(path: &str, schema: &str, format: &'static str) -> Result<Self, LedgerError> {
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by(format!("smbwire {}", env!("CARGO_PKG_VERSION")))
            .build();
        LedgerWriter::create_with(path, schema, format, props)
    }

    /// With other writer properties (tests: every page layout the reader accepts).
    fn create_with(path: &str, schema: &str, format: &'static str, props: WriterProperties) -> Result<Self, LedgerError> {
        let schema = Arc::new(parse_message_type(schema).map_err(|e| err(path, e))?);
        let (file, staged) =
            crate::outputs::Staged::create(path, 0o666).map_err(|e| err(path, format!("cannot write ledger: {e}")))?;
        let writer = SerializedFileWriter::new(file, schema, Arc::new(props)).map_err(|e| write_err(path, e))?;
        Ok(LedgerWriter {
            path: path.to_string(),
            writer: Some(writer),
            staged: Some(staged),
            cols: Columns::default(),
            rows: 0,
            format,
        })
    }

    /// Appends one row of a part, with its key.
    pub fn push_part(&mut self, key: PartKey, at_ns: u64, item: &PartItem) -> Result<(), LedgerError> {
        debug_assert_eq!(self.format, PART_FORMAT);
        self.cols.push_key(key);
        self.cols.push_part_item(at_ns, item);
        self.rows += 1;
        if self.cols.len() >= ROW_GROUP_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Appends one event, received by the ordered stage while the frame of capture time
    /// `at_ns` was processed (`AT_END` during the end-of-input flush).
    pub fn push(&mut self, at_ns: u64, e: &Event) -> Result<(), LedgerError> {
        self.cols.push(at_ns, e);
        self.rows += 1;
        if self.cols.len() >= ROW_GROUP_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    fn flush(&mut self) -> Result<(), LedgerError> {
        if self.cols.len() == 0 {
            return Ok(());
        }
        let cols = std::mem::take(&mut self.cols);
        let path = self.path.clone();
        let w = self.writer.as_mut().expect("writer open until close");
        let mut rg = w.next_row_group().map_err(|e| write_err(&path, e))?;
        let mut i = 0;
        while let Some(mut col) = rg.next_column().map_err(|e| write_err(&path, e))? {
            let r = match (i, col.untyped()) {
                (0, ColumnWriter::Int32ColumnWriter(w)) => w.write_batch(&cols.event, None, None),
                (1, ColumnWriter::Int64ColumnWriter(w)) => w.write_batch(&cols.ts_ns, None, None),
                (2, ColumnWriter::Int64ColumnWriter(w)) => w.write_batch(&cols.conn, None, None),
                (3, ColumnWriter::Int64ColumnWriter(w)) => w.write_batch(&cols.message_id, None, None),
                (4, ColumnWriter::Int32ColumnWriter(w)) => w.write_batch(&cols.kind, None, None),
                (5, ColumnWriter::Int32ColumnWriter(w)) => w.write_batch(&cols.transport, None, None),
                (6, ColumnWriter::ByteArrayColumnWriter(w)) => w.write_batch(&cols.src_ip, None, None),
                (7, ColumnWriter::ByteArrayColumnWriter(w)) => w.write_batch(&cols.dst_ip, None, None),
                (8, ColumnWriter::Int32ColumnWriter(w)) => w.write_batch(&cols.src_port, None, None),
                (9, ColumnWriter::Int32ColumnWriter(w)) => w.write_batch(&cols.dst_port, None, None),
                (10, ColumnWriter::Int64ColumnWriter(w)) => w.write_batch(&cols.session_id, None, None),
                (11, ColumnWriter::Int32ColumnWriter(w)) => w.write_batch(&cols.tree_id, None, None),
                (12, ColumnWriter::ByteArrayColumnWriter(w)) => w.write_batch(&cols.file_id, None, None),
                (13, ColumnWriter::ByteArrayColumnWriter(w)) => w.write_batch(&cols.share.0, Some(&cols.share.1), None),
                (14, ColumnWriter::ByteArrayColumnWriter(w)) => {
                    w.write_batch(&cols.file_name.0, Some(&cols.file_name.1), None)
                }
                (15, ColumnWriter::Int64ColumnWriter(w)) => w.write_batch(&cols.offset, None, None),
                (16, ColumnWriter::Int64ColumnWriter(w)) => w.write_batch(&cols.length, None, None),
                (17, ColumnWriter::Int32ColumnWriter(w)) => w.write_batch(&cols.first_file, None, None),
                (18, ColumnWriter::Int64ColumnWriter(w)) => w.write_batch(&cols.first_number, None, None),
                (19, ColumnWriter::Int32ColumnWriter(w)) => w.write_batch(&cols.last_file, None, None),
                (20, ColumnWriter::Int64ColumnWriter(w)) => w.write_batch(&cols.last_number, None, None),
                (21, ColumnWriter::Int32ColumnWriter(w)) => {
                    w.write_batch(&cols.header_file.0, Some(&cols.header_file.1), None)
                }
                (22, ColumnWriter::Int64ColumnWriter(w)) => {
                    w.write_batch(&cols.header_number.0, Some(&cols.header_number.1), None)
                }
                (23, ColumnWriter::ByteArrayColumnWriter(w)) => w.write_batch(&cols.digest, None, None),
                (24, ColumnWriter::ByteArrayColumnWriter(w)) => w.write_batch(&cols.block_hashes, None, None),
                (25, ColumnWriter::ByteArrayColumnWriter(w)) => w.write_batch(&cols.block_trivial, None, None),
                (26, ColumnWriter::Int64ColumnWriter(w)) => w.write_batch(&cols.at_ns, None, None),
                (27, ColumnWriter::Int64ColumnWriter(w)) => w.write_batch(&cols.pos, None, None),
                (28, ColumnWriter::Int32ColumnWriter(w)) => w.write_batch(&cols.step, None, None),
                (29, ColumnWriter::Int32ColumnWriter(w)) => w.write_batch(&cols.mark_phase, None, None),
                (30, ColumnWriter::Int64ColumnWriter(w)) => w.write_batch(&cols.mark_a, None, None),
                (31, ColumnWriter::Int64ColumnWriter(w)) => w.write_batch(&cols.mark_b, None, None),
                _ => return Err(err(&path, format!("ledger schema column {i} has an unexpected type"))),
            };
            r.map_err(|e| write_err(&path, e))?;
            col.close().map_err(|e| write_err(&path, e))?;
            i += 1;
        }
        rg.close().map_err(|e| write_err(&path, e))?;
        Ok(())
    }

    /// Writes the remaining rows and the footer; `run` is the analysis result without its
    /// dedupe part (JSON).
    pub fn close(mut self, run: &str) -> Result<u64, LedgerError> {
        self.flush()?;
        let path = self.path.clone();
        let mut w = self.writer.take().expect("writer open until close");
        w.append_key_value_metadata(KeyValue::new(KEY_FORMAT.to_string(), self.format.to_string()));
        w.append_key_value_metadata(KeyValue::new(KEY_RUN.to_string(), run.to_string()));
        w.close().map_err(|e| write_err(&path, e))?;
        if let Some(s) = self.staged.take() {
            s.commit().map_err(|e| err(&path, format!("cannot write ledger: {e}")))?;
        }
        Ok(self.rows)
    }
}

/// A ledger read back whole: its events in order, with the capture time each reached the
/// ordered stage (`at_ns`), and the run metadata.
pub struct Ledger {
    pub events: Vec<Event>,
    pub at_ns: Vec<u64>,
    pub run: String,
}

/// Column `$j` of row group `$rg` as `(values, definition levels)`, through `pages` (optional
/// columns: the levels say which rows have one of the values).
macro_rules! read_col {
    ($self:expr, $rg:expr, $j:expr, $ty:ty, $n:expr, $path:expr) => {{
        let optional = $self.reader.metadata().file_metadata().schema_descr().column($j).max_def_level() > 0;
        let c = pages::read_column::<$ty>(&$self.file, $self.file_len, $rg.column($j), optional, $n)
            .map_err(|e| err($path, format!("ledger row group {} column {}: {e}", $self.next_group - 1, $j)))?;
        (c.values, c.defs)
    }};
}

fn ip_of(path: &str, b: &ByteArray) -> Result<IpAddr, LedgerError> {
    let d = b.data();
    match d.len() {
        4 => Ok(IpAddr::from(<[u8; 4]>::try_from(d).unwrap())),
        16 => Ok(IpAddr::from(<[u8; 16]>::try_from(d).unwrap())),
        n => Err(err(path, format!("ledger address of {n} bytes"))),
    }
}

/// Optional values come packed (only the defined ones); `defs` says which rows have one.
fn unpack<T: Clone>(values: Vec<T>, defs: &[i16]) -> Vec<Option<T>> {
    let mut it = values.into_iter();
    defs.iter().map(|d| if *d > 0 { it.next() } else { None }).collect()
}

fn blocks_of(path: &str, len: u64, hashes: &[u8], trivial: &[u8]) -> Result<Vec<BlockDigest>, LedgerError> {
    let n = (len as usize).div_ceil(BLOCK_SIZE);
    if hashes.len() != 16 * n || trivial.len() != n.div_ceil(8) {
        return Err(err(path, format!("ledger send of {len} bytes has {} block digests", hashes.len() / 16)));
    }
    Ok((0..n)
        .map(|i| BlockDigest {
            hash: hashes[16 * i..16 * i + 16].try_into().unwrap(),
            len: if i + 1 < n { BLOCK_SIZE as u32 } else { (len as usize - BLOCK_SIZE * (n - 1)) as u32 },
            trivial: trivial[i / 8] & (1 << (i % 8)) != 0,
        })
        .collect())
}

/// Reads a ledger one row group at a time (memory: one row group, `ROW_GROUP_ROWS` events),
/// so ledgers of terabyte captures replay in bounded memory.
pub struct LedgerReader {
    path: String,
    /// The footer (parsed by the `parquet` crate); pages are read by `pages`.
    reader: SerializedFileReader<File>,
    file: File,
    file_len: u64,
    next_group: usize,
    /// The run metadata (JSON) from the footer.
    pub run: String,
}

/// The columns of one row group, optional ones unpacked.
struct Group {
    n: usize,
    event: Vec<i32>,
    ts: Vec<i64>,
    conn: Vec<i64>,
    mid: Vec<i64>,
    kind: Vec<i32>,
    transport: Vec<i32>,
    src_ip: Vec<ByteArray>,
    dst_ip: Vec<ByteArray>,
    src_port: Vec<i32>,
    dst_port: Vec<i32>,
    session: Vec<i64>,
    tree: Vec<i32>,
    file_id: Vec<ByteArray>,
    share: Vec<Option<ByteArray>>,
    fname: Vec<Option<ByteArray>>,
    offset: Vec<i64>,
    length: Vec<i64>,
    ff: Vec<i32>,
    fnum: Vec<i64>,
    lf: Vec<i32>,
    lnum: Vec<i64>,
    hf: Vec<Option<i32>>,
    hnum: Vec<Option<i64>>,
    digest: Vec<ByteArray>,
    bh: Vec<ByteArray>,
    bt: Vec<ByteArray>,
    at: Vec<i64>,
}

impl Group {
    fn text(path: &str, b: &Option<ByteArray>) -> Result<Option<Arc<str>>, LedgerError> {
        b.as_ref().map(|b| std::str::from_utf8(b.data()).map(Arc::from).map_err(|e| err(path, e))).transpose()
    }

    fn at(&self, path: &str, i: usize) -> Result<u64, LedgerError> {
        if self.at[i] < 0 {
            return Err(err(path, format!("ledger event time {} is negative", self.at[i])));
        }
        Ok(self.at[i] as u64)
    }

    /// Row `i` as a ledger event; None for the rows only parts have.
    fn event(&self, path: &str, i: usize) -> Result<Option<Event>, LedgerError> {
        Ok(Some(match self.event[i] {
            EV_SEND => {
                let len = self.length[i] as u64;
                let d: [u8; 32] =
                    self.digest[i].data().try_into().map_err(|_| err(path, "ledger payload digest is not 32 bytes"))?;
                Event::Send(Box::new(SendRecord {
                    conn: self.conn[i] as u64,
                    message_id: self.mid[i] as u64,
                    kind: match self.kind[i] {
                        0 => SendKind::Write,
                        1 => SendKind::Read,
                        k => return Err(err(path, format!("ledger send kind {k}"))),
                    },
                    transport: match self.transport[i] {
                        0 => Transport::Tcp,
                        1 => Transport::Rdma,
                        2 => Transport::SmbDirect,
                        t => return Err(err(path, format!("ledger transport {t}"))),
                    },
                    src: ip_of(path, &self.src_ip[i])?,
                    dst: ip_of(path, &self.dst_ip[i])?,
                    src_port: self.src_port[i] as u16,
                    dst_port: self.dst_port[i] as u16,
                    ip_proto: (self.src_port[i] >> 16) as u8,
                    session_id: self.session[i] as u64,
                    tree_id: self.tree[i] as u32,
                    file_id: self.file_id16(path, i)?,
                    share: Group::text(path, &self.share[i])?,
                    file_name: Group::text(path, &self.fname[i])?,
                    offset: self.offset[i] as u64,
                    first_frame: FrameRef { file: self.ff[i] as u16, number: self.fnum[i] as u64 },
                    last_frame: FrameRef { file: self.lf[i] as u16, number: self.lnum[i] as u64 },
                    header_frame: match (self.hf[i], self.hnum[i]) {
                        (Some(f), Some(n)) => Some(FrameRef { file: f as u16, number: n as u64 }),
                        _ => None,
                    },
                    ts_ns: self.ts[i] as u64,
                    digest: PayloadDigest {
                        len,
                        digest: d,
                        blocks: blocks_of(path, len, self.bh[i].data(), self.bt[i].data())?,
                    },
                }))
            }
            EV_COMPLETE => {
                Event::Complete { conn: self.conn[i] as u64, message_id: self.mid[i] as u64, ts_ns: self.ts[i] as u64 }
            }
            EV_ADVANCE => Event::Advance { ts_ns: self.ts[i] as u64 },
            EV_NAME_SERVER..=EV_NAME_HOLD => return Ok(None),
            e => return Err(err(path, format!("ledger event type {e}"))),
        }))
    }

    fn file_id16(&self, path: &str, i: usize) -> Result<[u8; 16], LedgerError> {
        self.file_id[i].data().try_into().map_err(|_| err(path, "ledger FileId is not 16 bytes"))
    }

    /// Row `i` of a part.
    fn part_item(&self, path: &str, i: usize) -> Result<PartItem, LedgerError> {
        if let Some(e) = self.event(path, i)? {
            return Ok(PartItem::Event(e));
        }
        let conn = self.conn[i] as u64;
        Ok(match self.event[i] {
            EV_NAME_SERVER => PartItem::Name(NameOp::Server(conn, ip_of(path, &self.src_ip[i])?)),
            EV_NAME_GUID => PartItem::Name(NameOp::ServerGuid(conn, self.file_id16(path, i)?)),
            EV_NAME_TREE => PartItem::Name(NameOp::Tree(
                conn,
                self.session[i] as u64,
                self.tree[i] as u32,
                Group::text(path, &self.share[i])?,
            )),
            EV_NAME_FILE => {
                PartItem::Name(NameOp::File(conn, self.file_id16(path, i)?, Group::text(path, &self.fname[i])?))
            }
            EV_NAME_SESSION => PartItem::Name(NameOp::Session(conn, self.session[i] as u64, self.kind[i] != 0)),
            EV_NAME_LOGOFF => PartItem::Name(NameOp::Logoff(conn, self.session[i] as u64)),
            EV_NAME_LOOKUP => PartItem::Name(NameOp::Lookup(
                conn,
                self.mid[i] as u64,
                self.kind[i] != 0,
                self.session[i] as u64,
                self.tree[i] as u32,
                self.file_id16(path, i)?,
                Group::text(path, &self.fname[i])?,
            )),
            EV_NAME_HOLD => PartItem::Name(NameOp::Hold(
                conn,
                self.tree[i] != 0,
                HoldStep::from_code(self.kind[i]).ok_or_else(|| err(path, format!("ledger hold step {}", self.kind[i])))?,
            )),
            _ => PartItem::Buffered(self.offset[i] as u64, self.length[i] as u64),
        })
    }
}

impl LedgerReader {
    /// Opens a ledger. Refuses a file that is not a ledger of this format with one line.
    pub fn open(path: &str) -> Result<Self, LedgerError> {
        LedgerReader::open_as(path, SCHEMA, LEDGER_FORMAT)
    }

    /// Opens a ledger part (`PART_FORMAT`); its metadata is in `run`.
    pub fn open_part(path: &str) -> Result<Self, LedgerError> {
        LedgerReader::open_as(path, &part_schema(), PART_FORMAT)
    }

    fn open_as(path: &str, schema: &str, format: &str) -> Result<Self, LedgerError> {
        let file = File::open(path).map_err(|e| err(path, format!("cannot read ledger: {e}")))?;
        let file_len = file.metadata().map_err(|e| err(path, format!("cannot read ledger: {e}")))?.len();
        let pages = file.try_clone().map_err(|e| err(path, format!("cannot read ledger: {e}")))?;
        footer::check_footer(&file, file_len).map_err(|e| err(path, format!("not a Parquet ledger ({e})")))?;
        let reader = SerializedFileReader::new(file).map_err(|e| err(path, format!("not a Parquet ledger ({e})")))?;
        let meta = reader.metadata();
        let kv = meta.file_metadata().key_value_metadata().cloned().unwrap_or_default();
        let get = |k: &str| kv.iter().find(|x| x.key == k).and_then(|x| x.value.clone());
        match get(KEY_FORMAT) {
            Some(f) if f == format => {}
            Some(f) => return Err(err(path, format!("ledger format {f} is not {format}"))),
            None => return Err(err(path, "not an smbwire ledger (no smbwire.ledger metadata)")),
        }
        let run = get(KEY_RUN).ok_or_else(|| err(path, "ledger without its run metadata"))?;
        let expected = parse_message_type(schema).map_err(|e| err(path, e))?;
        if meta.file_metadata().schema() != &expected {
            return Err(err(path, format!("ledger columns differ from {format}")));
        }
        Ok(LedgerReader { path: path.to_string(), reader, file: pages, file_len, next_group: 0, run })
    }

    /// The next row group's columns (and the part key columns when `part`), or None at the end.
    #[allow(clippy::type_complexity)]
    fn read_group(&mut self, part: bool) -> Result<Option<(Group, Option<Vec<PartKey>>)>, LedgerError> {
        let path = self.path.as_str();
        let meta = self.reader.metadata();
        let g = self.next_group;
        if g >= meta.num_row_groups() {
            return Ok(None);
        }
        self.next_group += 1;
        let n = row_group_rows(path, g, meta.row_group(g).num_rows())?;
        let rg = meta.row_group(g);
        let want = meta.file_metadata().schema_descr().num_columns();
        if rg.num_columns() != want {
            return Err(err(path, format!("ledger row group {g} has {} columns, not {want}", rg.num_columns())));
        }
        let (share, share_d) = read_col!(self, rg, 13, ByteArray, n, path);
        let (fname, fname_d) = read_col!(self, rg, 14, ByteArray, n, path);
        let (hf, hf_d) = read_col!(self, rg, 21, i32, n, path);
        let (hnum, hnum_d) = read_col!(self, rg, 22, i64, n, path);
        let group = Group {
            n,
            event: read_col!(self, rg, 0, i32, n, path).0,
            ts: read_col!(self, rg, 1, i64, n, path).0,
            conn: read_col!(self, rg, 2, i64, n, path).0,
            mid: read_col!(self, rg, 3, i64, n, path).0,
            kind: read_col!(self, rg, 4, i32, n, path).0,
            transport: read_col!(self, rg, 5, i32, n, path).0,
            src_ip: read_col!(self, rg, 6, ByteArray, n, path).0,
            dst_ip: read_col!(self, rg, 7, ByteArray, n, path).0,
            src_port: read_col!(self, rg, 8, i32, n, path).0,
            dst_port: read_col!(self, rg, 9, i32, n, path).0,
            session: read_col!(self, rg, 10, i64, n, path).0,
            tree: read_col!(self, rg, 11, i32, n, path).0,
            file_id: read_col!(self, rg, 12, ByteArray, n, path).0,
            share: unpack(share, &share_d),
            fname: unpack(fname, &fname_d),
            offset: read_col!(self, rg, 15, i64, n, path).0,
            length: read_col!(self, rg, 16, i64, n, path).0,
            ff: read_col!(self, rg, 17, i32, n, path).0,
            fnum: read_col!(self, rg, 18, i64, n, path).0,
            lf: read_col!(self, rg, 19, i32, n, path).0,
            lnum: read_col!(self, rg, 20, i64, n, path).0,
            hf: unpack(hf, &hf_d),
            hnum: unpack(hnum, &hnum_d),
            digest: read_col!(self, rg, 23, ByteArray, n, path).0,
            bh: read_col!(self, rg, 24, ByteArray, n, path).0,
            bt: read_col!(self, rg, 25, ByteArray, n, path).0,
            at: read_col!(self, rg, 26, i64, n, path).0,
        };
        if !part {
            return Ok(Some((group, None)));
        }
        let pos = read_col!(self, rg, 27, i64, n, path).0;
        let step = read_col!(self, rg, 28, i32, n, path).0;
        let phase = read_col!(self, rg, 29, i32, n, path).0;
        let a = read_col!(self, rg, 30, i64, n, path).0;
        let b = read_col!(self, rg, 31, i64, n, path).0;
        let mut keys = Vec::with_capacity(n);
        for i in 0..n {
            let (Ok(st), Ok(ph)) = (u8::try_from(step[i]), u8::try_from(phase[i])) else {
                return Err(err(path, format!("ledger part key step {} phase {}", step[i], phase[i])));
            };
            if st > part_step::FINISH {
                return Err(err(path, format!("ledger part key step {st}")));
            }
            keys.push(PartKey { pos: pos[i] as u64, step: st, mark: Mark { phase: ph, a: a[i] as u64, b: b[i] as u64 } });
        }
        Ok(Some((group, Some(keys))))
    }

    /// The events of the next row group with their `at_ns`, or None at the end.
    pub fn next_group(&mut self) -> Result<Option<Vec<(u64, Event)>>, LedgerError> {
        let Some((g, _)) = self.read_group(false)? else { return Ok(None) };
        let path = self.path.as_str();
        let mut events = Vec::with_capacity(g.n);
        for i in 0..g.n {
            let Some(ev) = g.event(path, i)? else {
                return Err(err(path, format!("ledger event type {} (a part's, not a ledger's)", g.event[i])));
            };
            events.push((g.at(path, i)?, ev));
        }
        Ok(Some(events))
    }

    /// The rows of a part's next row group.
    pub fn next_part_group(&mut self) -> Result<Option<Vec<PartRow>>, LedgerError> {
        let Some((g, keys)) = self.read_group(true)? else { return Ok(None) };
        let path = self.path.as_str();
        let keys = keys.expect("part keys read");
        let mut rows = Vec::with_capacity(g.n);
        for (i, k) in keys.into_iter().enumerate() {
            rows.push((k, g.at(path, i)?, g.part_item(path, i)?));
        }
        Ok(Some(rows))
    }
}

/// Reads a whole ledger (tests and small ledgers; `LedgerReader` streams).
pub fn read(path: &str) -> Result<Ledger, LedgerError> {
    let mut r = LedgerReader::open(path)?;
    let (mut events, mut at_ns) = (Vec::new(), Vec::new());
    while let Some(group) = r.next_group()? {
        for (at, e) in group {
            at_ns.push(at);
            events.push(e);
        }
    }
    Ok(Ledger { events, at_ns, run: r.run })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::hash::digest_of;
    use std::net::Ipv4Addr;

    /// A fresh directory for one test (removed at its end).
    fn test_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("smbwire-ledger-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn send(i: u64, payload: &[u8], header: bool, names: bool) -> SendRecord {
        SendRecord {
            conn: 3 + i,
            message_id: 100 + i,
            kind: if i.is_multiple_of(2) { SendKind::Write } else { SendKind::Read },
            transport: [Transport::Tcp, Transport::Rdma, Transport::SmbDirect][i as usize % 3],
            src: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
            dst: if i.is_multiple_of(2) { IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)) } else { "2001:db8::2".parse().unwrap() },
            src_port: if i % 3 == 2 { 0 } else { 49152 + (i % 1000) as u16 },
            dst_port: if i % 3 == 2 { 0 } else { 445 },
            ip_proto: if i % 3 == 2 { 0 } else { 6 },
            session_id: 0x4000_0000_0000_0001,
            tree_id: 5,
            file_id: [i as u8; 16],
            share: names.then(|| Arc::from("\\\\partner\\SBL$")),
            file_name: names.then(|| Arc::from("Slab\\extent-0001.dat")),
            offset: i * 65536,
            first_frame: FrameRef { file: 1, number: 10 + i },
            last_frame: FrameRef { file: 1, number: 50 + i },
            header_frame: header.then_some(FrameRef { file: 1, number: 9 }),
            ts_ns: 1_700_000_000_000_000_000 + i,
            digest: digest_of(payload),
        }
    }

    #[test]
    fn round_trip_keeps_every_event_and_the_run() {
        let dir = test_dir("round-trip");
        let path = dir.join("l.parquet");
        let path = path.to_str().unwrap();
        let mut data = vec![0u8; 3 * BLOCK_SIZE + 100];
        for (i, b) in data.iter_mut().enumerate().skip(BLOCK_SIZE) {
            *b = (i * 7 % 251) as u8;
        }
        let mut events = vec![Event::Advance { ts_ns: 5 }];
        // More rows than one row group, so the reader crosses groups.
        for i in 0..(ROW_GROUP_ROWS as u64 + 10) {
            let len = if i % 5 == 0 { data.len() } else { (i as usize * 37) % data.len() };
            events.push(Event::Send(Box::new(send(i, &data[..len], i % 3 == 0, i % 4 != 0))));
            if i % 7 == 0 {
                events.push(Event::Complete { conn: 3 + i, message_id: 100 + i, ts_ns: 9 + i });
            }
        }
        let at: Vec<u64> = (0..events.len() as u64).map(|i| if i + 1 == events.len() as u64 { AT_END } else { 1000 + i / 3 }).collect();
        let mut w = LedgerWriter::create(path).unwrap();
        for (e, t) in events.iter().zip(&at) {
            w.push(*t, e).unwrap();
        }
        assert_eq!(w.close("{\"inputs\":[]}").unwrap(), events.len() as u64);
        let back = read(path).unwrap();
        assert_eq!(back.run, "{\"inputs\":[]}");
        assert_eq!(back.events.len(), events.len());
        assert!(back.events == events, "events differ after the round trip");
        assert_eq!(back.at_ns, at);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Every name change of a part (`NameOp`) and its buffered bytes read back as written.
    #[test]
    fn a_part_keeps_every_name_change() {
        let dir = test_dir("part-names");
        let path = dir.join("p.parquet");
        let path = path.to_str().unwrap();
        let name = |s: &str| Some(Arc::from(s));
        let mut items = vec![
            PartItem::Name(NameOp::Server(1, IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)))),
            PartItem::Name(NameOp::ServerGuid(1, [0x5a; 16])),
            PartItem::Name(NameOp::Tree(1, 0x41, 7, name("\\\\srv\\share"))),
            PartItem::Name(NameOp::Tree(1, 0x41, 7, None)),
            PartItem::Name(NameOp::File(1, [7; 16], name("a.vhdx"))),
            PartItem::Name(NameOp::File(1, [7; 16], None)),
            PartItem::Name(NameOp::Session(1, 0x41, true)),
            PartItem::Name(NameOp::Logoff(1, 0x41)),
            PartItem::Name(NameOp::Lookup(1, 9, true, 0x41, 7, [7; 16], name("b.dat"))),
            PartItem::Buffered(100, 200),
        ];
        for (i, step) in [HoldStep::Open, HoldStep::Pause, HoldStep::Keep, HoldStep::Refute].into_iter().enumerate() {
            items.push(PartItem::Name(NameOp::Hold(2, i % 2 == 0, step)));
        }
        let key = |i: usize| PartKey { pos: i as u64, step: part_step::FRAME, mark: Mark::default() };
        let mut w = LedgerWriter::create_part(path).unwrap();
        for (i, item) in items.iter().enumerate() {
            w.push_part(key(i), 1000 + i as u64, item).unwrap();
        }
        w.close("{}").unwrap();
        let mut r = LedgerReader::open_part(path).unwrap();
        let mut back = Vec::new();
        while let Some(rows) = r.next_part_group().unwrap() {
            back.extend(rows);
        }
        let expected: Vec<PartRow> = items.into_iter().enumerate().map(|(i, it)| (key(i), 1000 + i as u64, it)).collect();
        assert_eq!(back, expected);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn refuses_what_is_not_a_ledger() {
        let dir = test_dir("bad");
        let p = dir.join("x.parquet");
        std::fs::write(&p, b"PAR1 not really").unwrap();
        let e = read(p.to_str().unwrap()).err().expect("garbage refused");
        assert!(e.0.contains("not a Parquet ledger"), "{e}");
        let e = read(dir.join("missing").to_str().unwrap()).err().expect("missing refused");
        assert!(e.0.contains("cannot read ledger"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A footer with an unknown field holding a list that claims 2^31 booleans in a few bytes (the
    /// `parquet` crate's parser skips such elements as if they took no bytes, and spins: a fuzz
    /// timeout) is refused at once, with one line.
    #[test]
    fn refuses_a_footer_whose_counts_exceed_its_bytes() {
        let dir = test_dir("footer");
        let p = dir.join("f.parquet");
        // A file of nothing but a footer holding `meta`.
        let footer = |meta: &[u8]| {
            let mut f = b"PAR1".to_vec();
            f.extend(meta);
            f.extend((meta.len() as u32).to_le_bytes());
            f.extend(b"PAR1");
            std::fs::write(&p, &f).unwrap();
            f
        };
        // Field 40 (long form), a list: size in a varint (2^31 - 1), elements boolean; stop.
        let mut f = footer(&[0x09u8, 0x50, 0xf1, 0xff, 0xff, 0xff, 0xff, 0x07, 0x00]);
        let t = std::time::Instant::now();
        let e = read(p.to_str().unwrap()).err().expect("refused");
        assert!(e.0.contains("not a Parquet ledger") && e.0.contains("footer"), "{e}");
        assert!(t.elapsed().as_secs() < 2);
        // Within its bytes by the compact protocol's specification (six booleans, a byte each),
        // but those six bytes are what the parquet crate reads next (it gives a boolean element
        // no byte): a field 41 holding 2^31 - 1 booleans again. Refused as a collection of
        // booleans, which no Parquet metadata holds (six fuzz-found ledgers took 0.7 s each).
        footer(&[0x09u8, 0x50, 0x61, 0x19, 0xf1, 0xff, 0xff, 0xff, 0x07, 0x00]);
        let e = read(p.to_str().unwrap()).err().expect("refused");
        assert!(e.0.contains("footer: metadata collection of booleans"), "{e}");
        // A field the crate parses, declared with another type: `created_by` (6) as a boolean,
        // which takes no bytes here and which the crate reads as a string anyway.
        footer(&[0x62u8, 0x00]);
        let e = read(p.to_str().unwrap()).err().expect("refused");
        assert!(e.0.contains("footer: FileMetaData field 6 has Thrift type 2, not 8"), "{e}");
        // The same for a map whose keys or values are booleans.
        for kv in [0x15u8, 0x51] {
            footer(&[0x0bu8, 0x50, 0x01, kv, 0x01, 0x05, 0x00]);
            let e = read(p.to_str().unwrap()).err().expect("refused");
            assert!(e.0.contains("collection of booleans"), "{kv:#x}: {e}");
        }
        // Its length past the file, and a file too short for one.
        let n = f.len();
        f[n - 8..n - 4].copy_from_slice(&1000u32.to_le_bytes());
        std::fs::write(&p, &f).unwrap();
        assert!(read(p.to_str().unwrap()).err().unwrap().0.contains("footer of 1000 bytes"));
        std::fs::write(&p, b"PAR1PAR1").unwrap();
        assert!(read(p.to_str().unwrap()).err().unwrap().0.contains("too short"));
        std::fs::remove_dir_all(&dir).ok();
    }

    /// `decode_footer_metadata` (the `ledger_footer` fuzz target's step): a ledger's metadata
    /// decodes with its row-group count; the footers of the slow inputs `ledger_inputs` found
    /// (fuzz seeds) are refused by the check, before the crate sees them.
    #[test]
    fn footer_metadata_alone_decodes_or_is_refused_by_the_check() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/ledger_footer");
        let meta = std::fs::read(dir.join("mirror2-1MiB.footer")).unwrap();
        assert!(decode_footer_metadata(&meta).unwrap() >= 1);
        let mut refused = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if !p.file_name().unwrap().to_string_lossy().starts_with("slow-unit-") {
                continue;
            }
            // Refused by smbwire's check ("footer: ..."), so the crate never parses it.
            let r = decode_footer_metadata(&std::fs::read(&p).unwrap());
            assert!(r.as_ref().is_err_and(|e| e.starts_with("footer: ")), "{}: {r:?}", p.display());
            refused += 1;
        }
        assert!(refused >= 4);
    }

    /// A footer whose row group declares more rows than the reader allocates for (forged:
    /// 2^62, negative, one past the cap) is refused with one line before any column is read;
    /// the same file with its true count reads.
    #[test]
    fn refuses_a_row_group_count_past_the_cap() {
        use parquet::file::metadata::ParquetMetaDataWriter;
        let dir = test_dir("rows");
        let path = dir.join("l.parquet");
        let path = path.to_str().unwrap();
        let mut w = LedgerWriter::create(path).unwrap();
        for i in 0..3 {
            w.push(1000 + i, &Event::Send(Box::new(send(i, b"abc", false, true)))).unwrap();
        }
        w.close("{}").unwrap();
        let bytes = std::fs::read(path).unwrap();
        let meta_len = u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap()) as usize;
        let body = &bytes[..bytes.len() - 8 - meta_len];
        let meta = SerializedFileReader::new(File::open(path).unwrap()).unwrap().metadata().clone();
        let forged = |rows: i64| -> String {
            let groups = meta.row_groups().iter().map(|g| g.clone().into_builder().set_num_rows(rows).build().unwrap()).collect();
            let m = meta.clone().into_builder().set_row_groups(groups).build();
            let mut out = body.to_vec();
            ParquetMetaDataWriter::new(&mut out, &m).finish().unwrap();
            let p = dir.join(format!("rows{rows}.parquet"));
            std::fs::write(&p, out).unwrap();
            p.to_str().unwrap().to_string()
        };
        for rows in [1i64 << 62, -1, MAX_ROW_GROUP_ROWS as i64 + 1] {
            let e = read(&forged(rows)).err().expect("forged row count refused");
            assert!(e.0.contains(&format!("declares {rows} rows")), "{e}");
        }
        assert_eq!(read(&forged(3)).unwrap().events.len(), 3, "the rewritten footer itself is sound");
        assert_eq!(row_group_rows("x", 0, MAX_ROW_GROUP_ROWS as i64).unwrap(), MAX_ROW_GROUP_ROWS);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The page layouts a Parquet writer may give a ledger: Snappy or none, dictionary pages
    /// or plain values, data pages v1 or v2, one page or many per column.
    fn layouts() -> Vec<(&'static str, WriterProperties)> {
        use parquet::file::properties::WriterVersion;
        let b = || WriterProperties::builder().set_created_by("test".into());
        vec![
            ("snappy-dict-v1", b().set_compression(Compression::SNAPPY).build()),
            ("plain-v1", b().set_dictionary_enabled(false).build()),
            ("dict-v1-pages", b().set_data_page_row_count_limit(2).set_write_batch_size(1).build()),
            ("snappy-dict-v2", b().set_compression(Compression::SNAPPY).set_writer_version(WriterVersion::PARQUET_2_0).build()),
            (
                "plain-v2-pages",
                b().set_dictionary_enabled(false)
                    .set_encoding(parquet::basic::Encoding::PLAIN)
                    .set_writer_version(WriterVersion::PARQUET_2_0)
                    .set_data_page_row_count_limit(2)
                    .set_write_batch_size(1)
                    .build(),
            ),
        ]
    }

    /// A few events of every kind, optional columns both set and null.
    fn small_events() -> Vec<Event> {
        let mut data = vec![0u8; 2 * BLOCK_SIZE + 10];
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i * 13 % 253) as u8;
        }
        vec![
            Event::Advance { ts_ns: 5 },
            Event::Send(Box::new(send(0, &data, true, true))),
            Event::Send(Box::new(send(1, &data[..100], false, false))),
            Event::Complete { conn: 3, message_id: 100, ts_ns: 9 },
            Event::Send(Box::new(send(2, &data[5..], false, true))),
            Event::Send(Box::new(send(3, b"abc", true, false))),
        ]
    }

    fn write_small(path: &str, props: WriterProperties) -> Vec<Event> {
        let events = small_events();
        let mut w = LedgerWriter::create_with(path, SCHEMA, LEDGER_FORMAT, props).unwrap();
        for (i, e) in events.iter().enumerate() {
            w.push(1000 + i as u64, e).unwrap();
        }
        w.close("{}").unwrap();
        events
    }

    #[test]
    fn reads_every_page_layout() {
        let dir = test_dir("layouts");
        for (name, props) in layouts() {
            let p = dir.join(format!("{name}.parquet"));
            let events = write_small(p.to_str().unwrap(), props);
            let back = read(p.to_str().unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(back.events == events, "{name}: events differ after the round trip");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Hostile ledgers: every single-byte change and every truncation of a small ledger, in
    /// each page layout, is read or refused with one line naming the file; never a panic.
    /// (The Parquet crate's own value decoders panic on some of these: a plain byte-array page
    /// shorter than its value count, found by the `ledger_inputs` fuzz target.)
    #[test]
    fn every_corruption_is_read_or_refused_never_a_panic() {
        let dir = test_dir("corrupt");
        let bad = dir.join("bad.parquet");
        let bad_s = bad.to_str().unwrap();
        for (name, props) in layouts() {
            let p = dir.join(format!("{name}.parquet"));
            write_small(p.to_str().unwrap(), props);
            let good = std::fs::read(&p).unwrap();
            let (mut refused, mut tried) = (0usize, 0usize);
            let mut check = |bytes: &[u8], what: &str| {
                std::fs::write(&bad, bytes).unwrap();
                let r = std::panic::catch_unwind(|| read(bad_s).map(|l| l.events.len()));
                match r {
                    Err(_) => panic!("{name}: {what}: the reader panicked"),
                    Ok(Err(e)) => {
                        assert!(e.0.starts_with(bad_s) && !e.0.contains('\n'), "{name}: {what}: {e}");
                        refused += 1;
                    }
                    Ok(Ok(_)) => {}
                }
                tried += 1;
            };
            for at in 0..good.len() {
                for m in [0xffu8, 0x01, 0x80] {
                    let mut b = good.clone();
                    b[at] ^= m;
                    check(&b, &format!("byte {at} ^ {m:#x}"));
                }
            }
            for len in 0..good.len() {
                check(&good[..len], &format!("first {len} bytes"));
            }
            // Teeth: most changes are refused (the footer, page headers, lengths, values).
            assert!(refused * 2 > tried, "{name}: only {refused} of {tried} refused");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A bundled capture analysed with the events recorded, then the ledger replayed: the same
    /// dedupe report, under the capture's topology and under none (every address a node).
    #[test]
    fn replay_gives_the_analysis_figures() {
        use crate::dedupe::{Dedupe, Topology};
        use crate::parallel::analyze_files;
    use crate::pipeline::Config;
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let cap = root.join("captures/nested4-1MiB-mirrordup-retx-reorder.pcap");
        let topo_toml = std::fs::read_to_string(root.join("captures/s2d-two-node.toml")).unwrap();
        let dir = test_dir("replay");
        for with_topology in [true, false] {
            let mut config = Config::default();
            if with_topology {
                config.topology = two_node_topology(&topo_toml);
            }
            let ledger = dir.join(format!("l-{with_topology}.parquet"));
            config.ledger = Some(ledger.to_str().unwrap().to_string());
            let r = analyze_files(&[cap.to_str().unwrap().to_string()], &config, None, &mut |_, _| true).unwrap();
            let want = serde_json::to_value(&r.dedupe).unwrap();
            let l = read(ledger.to_str().unwrap()).unwrap();
            assert!(l.events.iter().filter(|e| matches!(e, Event::Send(_))).count() >= 8);
            let mut d = Dedupe::new(config.dedupe.clone(), config.topology.clone(), None);
            crate::dedupe::replay(l.events, &mut d);
            let got = serde_json::to_value(d.finish()).unwrap();
            assert_eq!(got, want, "with_topology={with_topology}");
            let _ = Topology::default();
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The two nodes of captures/s2d-two-node.toml (owner 198.18.0.1, partner .2, members).
    fn two_node_topology(toml: &str) -> crate::dedupe::Topology {
        assert!(toml.contains("198.18.0.1") && toml.contains("198.18.0.2"));
        crate::dedupe::Topology::from_json(&serde_json::json!({"nodes": [
            {"name": "owner", "addresses": ["198.18.0.1"], "member": true},
            {"name": "partner", "addresses": ["198.18.0.2"], "member": true},
        ]}))
        .unwrap()
    }
}
