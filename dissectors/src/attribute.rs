//! `smbwire attribute`: dedupe and attribution rerun from send ledgers alone.
//!
//! The ordered stage (`Dedupe`) is a pure function of the events a ledger records, so a
//! fresh stage fed the same events under a new topology or window gives what `analyze` on
//! the captures would give with those options, without reading the captures again. The rest
//! of the result (inputs, accounting, TCP, SMB2, RDMA counters) does not depend on topology
//! or window and comes from the ledgers' run metadata; the warnings that follow from the
//! figures are recomputed by the same function `analyze` uses (`findings::derive`).
//!
//! Several ledgers (one per capture, say, each from its own `analyze --ledger` run) are merged
//! in the order one analysis of all the captures would have produced: by the capture time at
//! which each event reached the ordered stage (`at_ns`), ties to the earlier ledger, as
//! `capture::merge` orders frames. Their connection ids are renumbered so they stay distinct
//! (TCP in order of first appearance from 1, RDMA from the RDMA base), and their frame
//! references point into the concatenated list of inputs.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use serde_json::{Map, Value};

use crate::dedupe::Dedupe;
use crate::ledger::{Event, LedgerReader};
use crate::pipeline::{AnalyzeError, Config};
use crate::rdma::ROCE_CONN_BASE;

struct Source {
    reader: LedgerReader,
    buf: VecDeque<(u64, Event)>,
    done: bool,
    /// Added to every frame reference's file index.
    file_offset: u16,
}

impl Source {
    /// The next event's `at_ns`, refilling from the next row group when empty.
    fn head(&mut self) -> Result<Option<u64>, AnalyzeError> {
        while self.buf.is_empty() && !self.done {
            match self.reader.next_group().map_err(|e| AnalyzeError::Ledger(e.to_string()))? {
                Some(g) => self.buf.extend(g),
                None => self.done = true,
            }
        }
        Ok(self.buf.front().map(|(at, _)| *at))
    }
}

/// New connection ids for merged ledgers: distinct across ledgers, TCP and RDMA ranges kept.
#[derive(Default)]
struct ConnIds {
    map: HashMap<(usize, u64), u64>,
    next_tcp: u64,
    next_rdma: u64,
}

impl ConnIds {
    fn get(&mut self, ledger: usize, conn: u64) -> u64 {
        if let Some(c) = self.map.get(&(ledger, conn)) {
            return *c;
        }
        let c = if conn >= ROCE_CONN_BASE {
            self.next_rdma += 1;
            ROCE_CONN_BASE + self.next_rdma - 1
        } else {
            self.next_tcp += 1;
            self.next_tcp
        };
        self.map.insert((ledger, conn), c);
        c
    }
}

/// Reruns dedupe and attribution from `paths` (ledgers written by `analyze --ledger`) under
/// `config`'s topology, window and top-N; returns the result (schema as `analyze`'s) as JSON.
/// `tick(done, total)` is called once per row group (events); false stops (Ctrl-C).
pub fn attribute_files(
    paths: &[String],
    config: &Config,
    evidence_path: Option<&str>,
    tick: &mut dyn FnMut(u64, u64) -> bool,
) -> Result<Value, AnalyzeError> {
    let started = Instant::now();
    if paths.is_empty() {
        return Err(AnalyzeError::Ledger("no ledger given".into()));
    }
    crate::pipeline::check_outputs(evidence_path, config.ledger.as_deref(), paths)?;
    crate::capture::merge::fd_room(paths.len(), "ledgers").map_err(AnalyzeError::Capture)?;
    let mut sources = Vec::with_capacity(paths.len());
    let mut runs = Vec::with_capacity(paths.len());
    let mut file_offset: usize = 0;
    for p in paths {
        let reader = LedgerReader::open(p).map_err(|e| AnalyzeError::Ledger(e.to_string()))?;
        let run: Value = serde_json::from_str(&reader.run)
            .map_err(|e| AnalyzeError::Ledger(format!("{p}: ledger run metadata is not JSON: {e}")))?;
        let Some(inputs) = run["results"]["inputs"].as_array() else {
            return Err(AnalyzeError::Ledger(format!("{p}: ledger run metadata without its inputs")));
        };
        let n_inputs = inputs.len();
        let offset = u16::try_from(file_offset)
            .map_err(|_| AnalyzeError::Ledger("more than 65535 capture files across the ledgers".into()))?;
        file_offset += n_inputs;
        sources.push(Source { reader, buf: VecDeque::new(), done: false, file_offset: offset });
        runs.push(run);
    }
    let evidence = crate::pipeline::open_evidence(evidence_path)?;
    let mut stage = Dedupe::new(config.dedupe.clone(), config.topology.clone(), evidence);
    let merged = sources.len() > 1;
    let mut conns = ConnIds::default();
    let mut events: u64 = 0;
    loop {
        // The source whose next event came first (ties: the earlier ledger).
        let mut best: Option<(u64, usize)> = None;
        for (i, s) in sources.iter_mut().enumerate() {
            if let Some(at) = s.head()? {
                if best.is_none_or(|(b, _)| at < b) {
                    best = Some((at, i));
                }
            }
        }
        let Some((_, i)) = best else { break };
        let (_, event) = sources[i].buf.pop_front().expect("head was Some");
        let off = sources[i].file_offset;
        match event {
            Event::Send(mut s) => {
                if merged {
                    s.conn = conns.get(i, s.conn);
                    s.first_frame.file += off;
                    s.last_frame.file += off;
                    if let Some(h) = s.header_frame.as_mut() {
                        h.file += off;
                    }
                }
                stage.send(*s);
            }
            Event::Complete { conn, message_id, ts_ns } => {
                let conn = if merged { conns.get(i, conn) } else { conn };
                stage.complete(conn, message_id, ts_ns);
            }
            Event::Advance { ts_ns } => stage.advance(ts_ns),
        }
        events += 1;
        if events.is_multiple_of(32_768) && !tick(events, 0) {
            return Err(AnalyzeError::Interrupted);
        }
    }
    tick(events, events);
    let mut dedupe = stage.finish();
    crate::pipeline::evidence_failed(&mut dedupe, evidence_path)?;
    let dedupe_anomalies = std::mem::take(&mut dedupe.anomalies);

    let mut input_findings: Vec<crate::findings::Finding> = Vec::new();
    let mut result = Value::Null;
    // A ledger written before results said how frames came (`tunnels`) does not know; summed
    // with ledgers that do, the total would claim its frames came in none.
    let tunnels_unknown = runs.iter().any(|r| r.get("results").is_some_and(|r| r.get("tunnels").is_none()));
    for (run, path) in runs.into_iter().zip(paths) {
        if let Some(f) = run.get("input_findings") {
            input_findings.extend(serde_json::from_value::<Vec<crate::findings::Finding>>(f.clone()).map_err(|e| AnalyzeError::Ledger(format!("{path}: ledger run metadata: bad input_findings: {e}")))?);
        } else if let Some(w) = run["input_warnings"].as_array() {
            // A ledger written before findings: its sentences were all skipped inputs ("PATH: ...").
            for m in w.iter().filter_map(Value::as_str) {
                let skipped = m.split(": ").next().unwrap_or("");
                input_findings.push(crate::findings::Finding::new("input_skipped", serde_json::json!({"path": skipped}), m.to_string()));
            }
        }
        let r = run.get("results").cloned().ok_or_else(|| AnalyzeError::Ledger(format!("{path}: ledger run metadata without results")))?;
        result = if result.is_null() { r } else { merge_runs(result, r) };
    }
    let Value::Object(mut out) = result else {
        return Err(AnalyzeError::Ledger("ledger run metadata is not an object".into()));
    };
    if tunnels_unknown {
        out.remove("tunnels");
    }
    // The dedupe part, from the replay.
    let Value::Object(d) = serde_json::to_value(&dedupe).map_err(|e| AnalyzeError::Ledger(e.to_string()))? else {
        return Err(AnalyzeError::Ledger("dedupe report is not an object".into()));
    };
    for (k, v) in d {
        out.insert(k, v);
    }
    out.insert("window_seconds".into(), Value::from(config.dedupe.window_ns as f64 / 1e9));
    let mut anomalies: Map<String, Value> = out
        .get("anomalies")
        .and_then(|a| a.as_object())
        .map(|a| a.iter().filter(|(k, _)| !k.starts_with("dedupe.")).map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    for (k, v) in dedupe_anomalies {
        let prev = anomalies.get(&k).and_then(|x| x.as_u64()).unwrap_or(0);
        anomalies.insert(k, Value::from(prev + v));
    }
    out.insert("anomalies".into(), Value::Object(anomalies));
    // The run metadata is the ledger's (a user's file): read with `get`, never indexed.
    let input_bytes = out.get("accounting").and_then(|a| a.get("input_bytes")).and_then(Value::as_u64).unwrap_or(0);
    let elapsed = started.elapsed().as_secs_f64();
    let frames = out.get("analysis").and_then(|a| a.get("frames")).and_then(Value::as_u64).unwrap_or(0);
    out.insert(
        "analysis".into(),
        serde_json::json!({
            "elapsed_seconds": elapsed,
            "frames": frames,
            "bytes_per_second": if elapsed > 0.0 { input_bytes as f64 / elapsed } else { 0.0 },
            "threads": 1,
            "ledgers": paths,
            "ledger_events": events,
        }),
    );
    let mut out = Value::Object(out);
    crate::findings::attach(&mut out, input_findings);
    Ok(out)
}

/// The non-dedupe part of two runs' results as one analysis of both inputs would give it:
/// inputs concatenated, the capture span widened, counters summed (`peak_*` / `max_*`
/// values and `*_per_second` rates take the larger), lists of names joined without repeats
/// and sorted.
fn merge_runs(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Object(mut a), Value::Object(b)) => {
            for (k, vb) in b {
                // Taken in place (not removed), so the key keeps its position.
                let merged = match (k.as_str(), a.get_mut(&k).map(Value::take)) {
                    (_, None) => vb,
                    ("inputs", Some(Value::Array(mut x))) => {
                        x.extend(vb.as_array().cloned().unwrap_or_default());
                        Value::Array(x)
                    }
                    ("first_ts", Some(va)) => min_max(va, vb, false),
                    ("last_ts", Some(va)) => min_max(va, vb, true),
                    ("duration_seconds", Some(_)) => Value::Null, // recomputed below
                    ("reconciled", Some(_)) => Value::Null,
                    (k, Some(va)) if k.starts_with("peak_") || k.starts_with("max_") || k.ends_with("_per_second") => {
                        min_max(va, vb, true)
                    }
                    (_, Some(va)) => merge_runs(va, vb),
                };
                a.insert(k, merged);
            }
            if a.contains_key("first_ts") && a.contains_key("last_ts") {
                let d = match (a["first_ts"].as_f64(), a["last_ts"].as_f64()) {
                    (Some(f), Some(l)) => l - f,
                    _ => 0.0,
                };
                a.insert("duration_seconds".into(), Value::from(d));
            }
            if a.contains_key("total_bytes") && a.contains_key("input_bytes") {
                let ok = a["total_bytes"] == a["input_bytes"];
                a.insert("reconciled".into(), Value::Bool(ok));
            }
            Value::Object(a)
        }
        (Value::Number(x), Value::Number(y)) => match (x.as_u64(), y.as_u64()) {
            (Some(x), Some(y)) => Value::from(x.saturating_add(y)),
            _ => Value::from(x.as_f64().unwrap_or(0.0) + y.as_f64().unwrap_or(0.0)),
        },
        (Value::Array(mut x), Value::Array(y)) => {
            // A set of the values' JSON text: linear in the lists, however long a file makes them.
            let mut seen: std::collections::HashSet<String> = x.iter().map(Value::to_string).collect();
            for v in y {
                if seen.insert(v.to_string()) {
                    x.push(v);
                }
            }
            // Lists of names (files, dialects) are sorted, as one analysis reports them.
            if x.iter().all(|v| v.is_string()) {
                x.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
            }
            Value::Array(x)
        }
        (Value::Bool(x), Value::Bool(y)) => Value::Bool(x || y),
        (Value::Null, y) => y,
        (x, _) => x,
    }
}

fn min_max(a: Value, b: Value, max: bool) -> Value {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => {
            if (y > x) == max {
                b
            } else {
                a
            }
        }
        (None, _) => b,
        (_, None) => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Event, LedgerWriter};

    fn ledger(dir: &std::path::Path, name: &str, run: &str) -> String {
        let p = dir.join(name).to_str().unwrap().to_string();
        let mut w = LedgerWriter::create(&p).unwrap();
        w.push(1, &Event::Advance { ts_ns: 1 }).unwrap();
        w.close(run).unwrap();
        p
    }

    /// The run metadata is a user's file: without the fields an analysis writes (accounting,
    /// analysis: found by the `ledger_inputs` fuzz target, a panic before), with counters that
    /// overflow when two ledgers are summed, with long lists: a result or one error, never a panic.
    #[test]
    fn hostile_run_metadata_gives_a_result_or_an_error() {
        let dir = std::env::temp_dir().join(format!("smbwire-attribute-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = Config::default();
        let run = |paths: &[String]| attribute_files(paths, &config, None, &mut |_, _| true);
        let bare = ledger(&dir, "bare.parquet", r#"{"results":{"inputs":[]}}"#);
        let v = run(std::slice::from_ref(&bare)).expect("a run without accounting or analysis");
        assert_eq!(v["analysis"]["frames"], 0);
        let big = format!(r#"{{"results":{{"inputs":[],"accounting":{{"input_bytes":{m}}},"x":{m}}}}}"#, m = u64::MAX);
        let (a, b) = (ledger(&dir, "a.parquet", &big), ledger(&dir, "b.parquet", &big));
        let v = run(&[a, b]).expect("two runs summed");
        assert_eq!(v["x"], u64::MAX, "summed counters saturate");
        let list: Vec<u32> = (0..200_000).collect();
        let long = format!(r#"{{"results":{{"inputs":[],"names":{}}}}}"#, serde_json::to_string(&list).unwrap());
        let (a, b) = (ledger(&dir, "l1.parquet", &long), ledger(&dir, "l2.parquet", &long));
        let t = std::time::Instant::now();
        let v = run(&[a, b]).expect("long lists");
        assert_eq!(v["names"].as_array().unwrap().len(), 200_000);
        assert!(t.elapsed().as_secs() < 60, "joining lists is linear");
        // How frames came: summed over ledgers that say; unknown (no key) when one does not.
        let t = |n: u64| format!(r#"{{"results":{{"inputs":[],"tunnels":{{"erspan2":{{"frames":{n},"bytes":{}}}}}}}}}"#, 50 * n);
        let (a, b) = (ledger(&dir, "t1.parquet", &t(3)), ledger(&dir, "t2.parquet", &t(4)));
        let v = run(&[a.clone(), b]).expect("two ledgers with tunnels");
        assert_eq!(v["tunnels"], serde_json::json!({"erspan2": {"frames": 7, "bytes": 350}}));
        let v = run(&[a, bare.clone()]).expect("one ledger from before tunnels");
        assert!(v.get("tunnels").is_none(), "{}", v["tunnels"]);
        for bad in ["{}", "[]", r#"{"results":[1]}"#, "not json"] {
            let p = ledger(&dir, "bad.parquet", bad);
            assert!(run(&[p]).is_err(), "{bad} refused");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
