//! `smbwire analyze --dask`: the `--threads` split across processes and machines, through
//! ledger parts (docs/architecture.md "Distributed", docs/ledger.md "Ledger parts").
//!
//! ```text
//!  task k of n (any process): every input, in time order ──▶ clock, frame numbers, sweeps
//!     frames of connections with shard(c) = k ──▶ Decoder ──▶ part-k.parquet (rows with keys)
//!  merge (one process): part-0 … part-(n-1) ──▶ rows in key order ──▶ Ordered (Dedupe) ──▶ report
//! ```
//!
//! - **Sharding** is `--threads`' (`parallel::shard`): both directions of a TCP connection and
//!   every RDMA packet between two addresses go to one task, so a connection spanning rotated
//!   files, both SPAN copies of a frame and every frame of one connection meet in one decoder.
//!   Multichannel sessions span tasks: names cross in the parts (`NameOp` rows), as they cross
//!   workers under `--threads`.
//! - **Order.** Every task reads every input in the same time-merged order, so every task
//!   numbers every frame alike and sees the same sweeps. A part's rows carry their key: the
//!   frame they came from, or the sweep after a frame, or the end, and the mark a close was
//!   recorded under. The merge replays exactly what the `--threads` ordered stage replays:
//!   each frame's events, then at a sweep the window's advance and every task's closes in
//!   mark order, then the end's closes in mark order. So the result is one pipeline's.
//! - **Cost.** Every task reads (and frames) all inputs; it decodes, reassembles and hashes
//!   only its connections. Framing every frame costs about a third of one pipeline's CPU on
//!   MSS 1448 frames (docs/architecture.md "Distributed"): the price of exactness without a
//!   pre-pass.
//! - **What else a part holds** (footer metadata `smbwire.run`): the task's counters, and the
//!   reader's (clock, inputs, container accounting, input findings), which every task has
//!   alike: the merge takes shard 0's and checks the others agree (same inputs, same frames).

use std::collections::VecDeque;
use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::accounting::Accounting;
use crate::anomaly::Anomalies;
use crate::capture::RawFrame;
use crate::context::Mark;
use crate::findings::Finding;
use crate::ledger::{part_step, Event, LedgerReader, LedgerWriter, PartItem, PartKey, AT_END, PART_FORMAT};
use crate::parallel::{self, Decoder, FrameSink, Item, Ordered};
use crate::pipeline::{AnalyzeError, Clock, Config, Counts, Run};
use crate::report::{InputFile, Results};

/// What one shard task did (returned to the caller as JSON).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ShardStats {
    pub shard: usize,
    pub shards: usize,
    /// Frames read (every input's) and, of them, decoded by this task, with their bytes.
    pub frames: u64,
    pub shard_frames: u64,
    pub shard_bytes: u64,
    /// Bytes of the inputs read.
    pub input_bytes: u64,
    /// Rows written to the part.
    pub rows: u64,
}

/// The fingerprint of a run's options (the config JSON every task of one run is given), kept
/// in each part so the merge refuses parts of different runs.
pub fn config_tag(config_json: &str) -> String {
    blake3::hash(config_json.as_bytes()).to_hex()[..16].to_string()
}

fn ledger_err(e: impl std::fmt::Display) -> AnalyzeError {
    AnalyzeError::Ledger(e.to_string())
}

/// One shard task: reader (clock, frame numbers, sweeps) over every input, decoder of its
/// connections, writer of its part.
struct ShardRun {
    shard: usize,
    clock: Clock,
    anomalies: Anomalies,
    unusable_input_bytes: u64,
    input_findings: Vec<Finding>,
    decoder: Decoder,
    part: LedgerWriter,
    error: Option<crate::ledger::LedgerError>,
    stats: ShardStats,
    sharder: parallel::Sharder,
}

impl ShardRun {
    /// Writes what the decoder recorded since the last call under `pos`/`step`.
    fn flush(&mut self, pos: u64, step: u8, at_ns: u64) {
        let out = std::mem::take(self.decoder.out());
        for (mark, item) in out {
            let key = PartKey { pos, step, mark };
            match item {
                Item::Send(s, pending) => self.push(key, at_ns, &PartItem::Event(Event::Send(parallel::settled(s, pending)))),
                Item::Complete { conn, message_id, ts_ns } => {
                    self.push(key, at_ns, &PartItem::Event(Event::Complete { conn, message_id, ts_ns }))
                }
                Item::Names(ops) => {
                    for op in ops {
                        self.push(key, at_ns, &PartItem::Name(op));
                    }
                }
                Item::Buffered(t, m) => self.push(key, at_ns, &PartItem::Buffered(t, m)),
                // `--threads` only: a part's rows carry their sweep in their key.
                Item::SweepDone => {}
            }
        }
    }

    fn push(&mut self, key: PartKey, at_ns: u64, item: &PartItem) {
        if self.error.is_none() {
            if let Err(e) = self.part.push_part(key, at_ns, item) {
                self.error = Some(e);
            }
        }
    }
}

impl FrameSink for ShardRun {
    fn inputs(&mut self) -> (&mut u64, &mut Anomalies, &mut Vec<Finding>) {
        (&mut self.unusable_input_bytes, &mut self.anomalies, &mut self.input_findings)
    }

    fn process(&mut self, frame: &RawFrame<'_>) {
        let ctx = self.clock.frame(frame, &mut self.anomalies);
        self.stats.frames += 1;
        if self.sharder.pick(&frame.info, frame.data) == self.shard {
            self.stats.shard_frames += 1;
            self.stats.shard_bytes += frame.data.len() as u64;
            self.decoder.frame(frame, &ctx);
            self.flush(ctx.seq, part_step::FRAME, frame.info.ts_ns);
        }
        if let Some(now) = self.clock.sweep_due() {
            // The window's advance is the run's, not a task's: shard 0 writes it.
            if self.shard == 0 {
                let key = PartKey { pos: ctx.seq, step: part_step::SWEEP, mark: Mark::default() };
                self.push(key, frame.info.ts_ns, &PartItem::Event(Event::Advance { ts_ns: now }));
            }
            self.decoder.sweep(now);
            self.flush(ctx.seq, part_step::SWEEP_CLOSES, frame.info.ts_ns);
        }
    }
}

fn names_json<'a>(it: impl Iterator<Item = (&'a str, u64)>) -> Value {
    Value::Object(it.map(|(k, v)| (k.to_string(), json!(v))).collect())
}

fn counts_json(c: &Counts) -> Value {
    json!({
        "anomalies": names_json(c.anomalies.iter()),
        "accounting": names_json(c.accounting.iter()),
        "smb2": &c.smb2,
        "rdma": &c.rdma,
        "flows": &c.flows,
        "conns": c.conns,
        "tunnels": &c.tunnels,
    })
}

/// Analyse shard `shard` of `shards` of the inputs: write its part to `part_path`. `tag` is
/// `config_tag` of the run's options. Inputs must be regular files (every task reads them).
pub fn analyze_shard(
    paths: &[String],
    config: &Config,
    shard: usize,
    shards: usize,
    tag: &str,
    part_path: &str,
    tick: &mut dyn FnMut(u64, u64) -> bool,
) -> Result<ShardStats, AnalyzeError> {
    if shards == 0 || shard >= shards {
        return Err(AnalyzeError::Ledger(format!("shard {shard} of {shards} does not exist")));
    }
    for p in paths {
        // Every task reads every input: a stream (stdin, a FIFO) can be read only once.
        if std::fs::metadata(p).is_ok_and(|m| !m.is_file()) || p == "-" {
            return Err(AnalyzeError::Ledger(format!(
                "{p}: not a regular file (a distributed analysis reads every input in every task)"
            )));
        }
    }
    let inputs: Vec<&str> = paths.iter().map(String::as_str).collect();
    crate::outputs::check(&[("ledger part", part_path)], &inputs).map_err(AnalyzeError::Output)?;
    let merged = parallel::open_inputs(paths, crate::capture::source::ReadMode::Mapped)?;
    let mut wc = config.clone();
    wc.workers = shards;
    let mut run = ShardRun {
        shard,
        clock: Clock::default(),
        anomalies: Anomalies::default(),
        unusable_input_bytes: 0,
        input_findings: Vec::new(),
        decoder: Decoder::new(&wc),
        part: LedgerWriter::create_part(part_path).map_err(ledger_err)?,
        error: None,
        stats: ShardStats { shard, shards, ..Default::default() },
        sharder: parallel::Sharder::new(shards),
    };
    let (inputs, container) = parallel::read_inputs(paths, merged, config, &mut run, tick)?;
    let counts = run.decoder.finish(run.clock.last_ts);
    run.flush(AT_END, part_step::FINISH, AT_END);
    if let Some(e) = run.error.take() {
        return Err(ledger_err(e));
    }
    run.stats.input_bytes = inputs.iter().map(|i| i.compressed_bytes.unwrap_or(i.size_bytes)).sum();
    let meta = json!({
        "format": PART_FORMAT,
        "engine": crate::report::ENGINE_BUILD,
        "shard": shard,
        "shards": shards,
        "tag": tag,
        "counts": counts_json(&counts),
        "clock": &run.clock,
        "reader_anomalies": names_json(run.anomalies.iter()),
        "container": names_json(container.iter()),
        "inputs": &inputs,
        "input_findings": &run.input_findings,
        "unusable_input_bytes": run.unusable_input_bytes,
    });
    run.stats.rows = run.part.rows();
    run.part.close(&meta.to_string()).map_err(ledger_err)?;
    Ok(run.stats)
}

/// A part's metadata read back.
struct PartMeta {
    /// `report::ENGINE_BUILD` of the task that wrote it.
    engine: String,
    shard: usize,
    shards: usize,
    tag: String,
    counts: Counts,
    clock: Clock,
    reader_anomalies: Anomalies,
    container: Accounting,
    inputs: Vec<InputFile>,
    /// The inputs as written (compared across parts).
    inputs_json: Value,
    input_findings: Vec<Finding>,
    unusable_input_bytes: u64,
}

fn field<'a>(path: &str, v: &'a Value, k: &str) -> Result<&'a Value, AnalyzeError> {
    v.get(k).ok_or_else(|| AnalyzeError::Ledger(format!("{path}: ledger part metadata without {k:?}")))
}

fn de<T: serde::de::DeserializeOwned>(path: &str, v: &Value, k: &str) -> Result<T, AnalyzeError> {
    serde_json::from_value(field(path, v, k)?.clone())
        .map_err(|e| AnalyzeError::Ledger(format!("{path}: ledger part metadata {k:?}: {e}")))
}

fn u64_map(path: &str, v: &Value, k: &str) -> Result<Vec<(String, u64)>, AnalyzeError> {
    let m: Map<String, Value> = de(path, v, k)?;
    m.into_iter()
        .map(|(name, n)| match n.as_u64() {
            Some(n) => Ok((name, n)),
            None => Err(AnalyzeError::Ledger(format!("{path}: ledger part metadata {k:?}: {name} is not a count"))),
        })
        .collect()
}

fn anomalies_of(path: &str, v: &Value, k: &str) -> Result<Anomalies, AnalyzeError> {
    let mut a = Anomalies::default();
    for (name, n) in u64_map(path, v, k)? {
        let Some(known) = crate::report::all_anomaly_names().find(|x| *x == name) else {
            return Err(AnalyzeError::Ledger(format!("{path}: ledger part names an unknown anomaly {name:?}")));
        };
        a.add_named(known, n);
    }
    Ok(a)
}

fn accounting_of(path: &str, v: &Value, k: &str) -> Result<Accounting, AnalyzeError> {
    let mut a = Accounting::default();
    for (name, n) in u64_map(path, v, k)? {
        let Some(c) = crate::accounting::category(&name) else {
            return Err(AnalyzeError::Ledger(format!("{path}: ledger part names an unknown category {name:?}")));
        };
        a.add(c.name, n);
    }
    Ok(a)
}

fn inputs_of(path: &str, v: &Value) -> Result<Vec<InputFile>, AnalyzeError> {
    use crate::capture::source::{Compression, InputKind};
    let bad = |what: &str| AnalyzeError::Ledger(format!("{path}: ledger part metadata: input {what}"));
    let list = field(path, v, "inputs")?.as_array().ok_or_else(|| bad("list is not a list"))?;
    let kinds = [InputKind::File, InputKind::Stdin, InputKind::Fifo, InputKind::CharDevice].map(InputKind::name);
    let packings = [Compression::Gzip, Compression::Zstd, Compression::Xz].map(Compression::name);
    list.iter()
        .map(|i| {
            let text = |k: &str| i.get(k).and_then(Value::as_str);
            let num = |k: &str| i.get(k).and_then(Value::as_u64);
            Ok(InputFile {
                path: text("path").ok_or_else(|| bad("without a path"))?.to_string(),
                size_bytes: num("size_bytes").ok_or_else(|| bad("without a size"))?,
                frames: num("frames").ok_or_else(|| bad("without frames"))?,
                source: kinds.into_iter().find(|k| Some(*k) == text("source")).ok_or_else(|| bad("source"))?,
                compression: match text("compression") {
                    None => None,
                    Some(c) => Some(packings.into_iter().find(|k| *k == c).ok_or_else(|| bad("compression"))?),
                },
                compressed_bytes: num("compressed_bytes"),
                tunnels: None,
            })
        })
        .collect()
}

fn counts_of(path: &str, v: &Value) -> Result<Counts, AnalyzeError> {
    let c = field(path, v, "counts")?;
    Ok(Counts {
        anomalies: anomalies_of(path, c, "anomalies")?,
        accounting: accounting_of(path, c, "accounting")?,
        smb2: de(path, c, "smb2")?,
        rdma: de(path, c, "rdma")?,
        flows: de(path, c, "flows")?,
        conns: de(path, c, "conns")?,
        tunnels: de(path, c, "tunnels")?,
    })
}

fn meta_of(path: &str, run: &str) -> Result<PartMeta, AnalyzeError> {
    let v: Value = serde_json::from_str(run)
        .map_err(|e| AnalyzeError::Ledger(format!("{path}: ledger part metadata is not JSON: {e}")))?;
    Ok(PartMeta {
        engine: de(path, &v, "engine")?,
        shard: de(path, &v, "shard")?,
        shards: de(path, &v, "shards")?,
        tag: de(path, &v, "tag")?,
        counts: counts_of(path, &v)?,
        clock: de(path, &v, "clock")?,
        reader_anomalies: anomalies_of(path, &v, "reader_anomalies")?,
        container: accounting_of(path, &v, "container")?,
        inputs: inputs_of(path, &v)?,
        inputs_json: field(path, &v, "inputs")?.clone(),
        input_findings: de(path, &v, "input_findings")?,
        unusable_input_bytes: de(path, &v, "unusable_input_bytes")?,
    })
}

/// A part being replayed: its rows not yet applied, a row group at a time.
struct Source {
    path: String,
    reader: LedgerReader,
    buf: VecDeque<(PartKey, u64, PartItem)>,
    done: bool,
}

impl Source {
    /// The key of the next row, reading the next row group when needed.
    fn head(&mut self) -> Result<Option<PartKey>, AnalyzeError> {
        while self.buf.is_empty() && !self.done {
            match self.reader.next_part_group().map_err(ledger_err)? {
                Some(rows) => self.buf.extend(rows),
                None => self.done = true,
            }
        }
        Ok(self.buf.front().map(|r| r.0))
    }
}

fn item_of(path: &str, item: PartItem) -> Result<Item, AnalyzeError> {
    Ok(match item {
        PartItem::Event(Event::Send(s)) => Item::Send(s, None),
        PartItem::Event(Event::Complete { conn, message_id, ts_ns }) => Item::Complete { conn, message_id, ts_ns },
        PartItem::Event(Event::Advance { .. }) => {
            return Err(AnalyzeError::Ledger(format!("{path}: ledger part has a window advance outside a sweep")))
        }
        PartItem::Name(op) => Item::Names(vec![op]),
        PartItem::Buffered(t, m) => Item::Buffered(t, m),
    })
}

/// The ordered stage over the parts of one run (every shard's, in any order): the result
/// one `analyze` of the same inputs with the same options gives (`analysis.threads` = shards).
pub fn merge_parts(
    parts: &[String],
    config: &Config,
    evidence_path: Option<&str>,
    tick: &mut dyn FnMut(u64, u64) -> bool,
) -> Result<Results, AnalyzeError> {
    let started = Instant::now();
    if parts.is_empty() {
        return Err(AnalyzeError::Ledger("no ledger part given".into()));
    }
    crate::pipeline::check_outputs(evidence_path, config.ledger.as_deref(), parts)?;
    crate::capture::merge::fd_room(parts.len(), "ledger parts").map_err(AnalyzeError::Capture)?;
    let mut opened: Vec<(PartMeta, Source)> = Vec::with_capacity(parts.len());
    for p in parts {
        let reader = LedgerReader::open_part(p).map_err(ledger_err)?;
        let meta = meta_of(p, &reader.run)?;
        opened.push((meta, Source { path: p.clone(), reader, buf: VecDeque::new(), done: false }));
    }
    opened.sort_by_key(|(m, _)| m.shard);
    let n = opened.len();
    for (i, (m, s)) in opened.iter().enumerate() {
        let first = &opened[0].0;
        if m.engine != crate::report::ENGINE_BUILD {
            return Err(AnalyzeError::Ledger(format!(
                "{}: written by engine build {}, this is build {}: install the same smbwire on every worker",
                s.path,
                m.engine,
                crate::report::ENGINE_BUILD
            )));
        }
        if m.shards != n || m.shard != i {
            return Err(AnalyzeError::Ledger(format!(
                "{}: part of shard {} of {}, but {n} parts given (every shard's part, once each, is needed)",
                s.path, m.shard, m.shards
            )));
        }
        if m.tag != first.tag || m.inputs_json != first.inputs_json || m.clock.frames != first.clock.frames {
            return Err(AnalyzeError::Ledger(format!(
                "{}: part of another run than {} (other options or inputs)",
                s.path, opened[0].1.path
            )));
        }
    }
    let (mut metas, mut sources): (Vec<PartMeta>, Vec<Source>) = opened.into_iter().unzip();
    let evidence = crate::pipeline::open_evidence(evidence_path)?;
    let mut ordered = Ordered::new(config, n, evidence);
    if let Some(p) = &config.ledger {
        ordered.dedupe.record_ledger(LedgerWriter::create(p).map_err(ledger_err)?);
    }
    let mut rows: u64 = 0;
    loop {
        let mut next: Option<(u64, u8)> = None;
        for s in sources.iter_mut() {
            if let Some(k) = s.head()? {
                if next.is_none_or(|n| (k.pos, k.step) < n) {
                    next = Some((k.pos, k.step));
                }
            }
        }
        let Some((pos, step)) = next else { break };
        let mut group: Vec<(Mark, usize, Item)> = Vec::new();
        let mut noted = false;
        for (i, s) in sources.iter_mut().enumerate() {
            while s.head()?.is_some_and(|k| k.pos == pos && k.step == step) {
                let (key, at_ns, item) = s.buf.pop_front().expect("head was Some");
                rows += 1;
                match step {
                    part_step::FRAME | part_step::SWEEP => {
                        if !noted {
                            ordered.dedupe.note_time(at_ns);
                            noted = true;
                        }
                        match item {
                            PartItem::Event(Event::Advance { ts_ns }) if step == part_step::SWEEP => {
                                ordered.dedupe.advance(ts_ns)
                            }
                            item => {
                                // One thread: what the stage is done with is freed here.
                                let _ = ordered.apply(i, item_of(&s.path, item)?);
                            }
                        }
                    }
                    _ => group.push((key.mark, i, item_of(&s.path, item)?)),
                }
            }
        }
        match step {
            part_step::FRAME => ordered.frame_done(),
            part_step::FINISH => {
                ordered.dedupe.note_time(AT_END);
                ordered.apply_group(group, &mut |_, _| {});
            }
            part_step::SWEEP_CLOSES => ordered.apply_group(group, &mut |_, _| {}),
            _ => {}
        }
        if rows.is_multiple_of(65_536) && !tick(rows, 0) {
            return Err(AnalyzeError::Interrupted);
        }
    }
    let mut counts: Option<Counts> = None;
    for m in metas.iter_mut() {
        let c = std::mem::replace(&mut m.counts, empty_counts());
        match counts.as_mut() {
            Some(all) => all.absorb(c),
            None => counts = Some(c),
        }
    }
    let first = metas.swap_remove(0);
    let counts = ordered.with_own(counts.expect("at least one part"), &first.reader_anomalies);
    let ledger = ordered.dedupe.take_ledger();
    let run = Run {
        counts,
        clock: first.clock,
        window_ns: config.dedupe.window_ns,
        input_findings: first.input_findings,
        unusable_input_bytes: first.unusable_input_bytes,
    };
    let (mut results, input_findings) = run.results(ordered.dedupe, first.inputs, first.container, started);
    results.analysis.threads = n;
    crate::pipeline::evidence_failed(&mut results.dedupe, evidence_path)?;
    parallel::close_ledger(&results, ledger, input_findings)?;
    Ok(results)
}

fn empty_counts() -> Counts {
    Counts {
        anomalies: Anomalies::default(),
        accounting: Accounting::default(),
        smb2: Default::default(),
        rdma: Default::default(),
        flows: Default::default(),
        conns: 0,
        tunnels: Default::default(),
    }
}

#[cfg(test)]
mod tests;
