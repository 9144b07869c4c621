//! `smbwire analyze --annotate OUT.pcapng`: the input frames, merged in time order as the
//! analysis merged them (`capture::merge`), written again as pcapng with a frame comment on
//! every frame of every send of a duplicated payload, e.g.
//! `smbwire: payload 356c46251b84e92b send 2/3 per-copy duplicate, replication n1->n2, offset 262144`.
//!
//! It runs after the analysis decided, as a second pass over the inputs, from the evidence
//! lines (`dedupe::evidence`, docs/attribution.md). Which frames are a send's: its first and
//! last frame, its SMB2 header frame (SMB Direct), and the frames between first and last in
//! the same input that go from the send's sender to its receiver with transport payload (same
//! TCP ports when the send has them). Memory: one entry per listed send (its comment and
//! frame range), never per frame and never payload bytes; frames are streamed through.
//!
//! The output is a capture the user asked for, so payload bytes are written (mode 0600),
//! byte for byte as read; frames of a file that the analysis could not read are not there.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::IpAddr;

use serde::Deserialize;

use crate::accounting::Accounting;
use crate::anomaly::Anomalies;
use crate::capture::merge::Merged;
use crate::capture::source::ReadMode;
use crate::capture::writer;
use crate::wire::{self, Transport};

/// What `annotate_files` did.
#[derive(Clone, Debug, Default, serde::Serialize, PartialEq, Eq)]
pub struct AnnotateStats {
    pub frames_written: u64,
    pub frames_commented: u64,
    /// Sends read from the evidence (each one commented).
    pub sends: u64,
    /// Interfaces written: one per input link type.
    pub interfaces: u32,
}

#[derive(Deserialize)]
struct EvLine {
    digest: String,
    sends_total: u64,
    sends: Vec<EvSend>,
}

#[derive(Deserialize)]
struct EvSend {
    file: u16,
    frames: [u64; 2],
    #[serde(default)]
    header_frame: Option<u64>,
    src: IpAddr,
    dst: IpAddr,
    #[serde(default)]
    src_port: Option<u16>,
    #[serde(default)]
    dst_port: Option<u16>,
    src_node: String,
    dst_node: String,
    /// Null when not known (a READ response without its request).
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    dup_kind: Option<String>,
}

/// One send to comment.
struct Mark {
    first: u64,
    last: u64,
    src: IpAddr,
    dst: IpAddr,
    ports: Option<(u16, u16)>,
    comment: String,
}

/// The comment of the send at 1-based position `i` of `total` sends.
fn comment(digest: &str, i: u64, total: u64, s: &EvSend) -> String {
    let kind = match s.dup_kind.as_deref() {
        Some("per_copy") => "per-copy duplicate",
        Some("repeated") => "repeated content",
        Some("unique") => "unique",
        Some("trivial") => "trivial",
        Some(other) => other,
        None => "undecided",
    };
    let class = s.class.as_deref().unwrap_or("unclassified");
    format!(
        "smbwire: payload {} send {i}/{total} {kind}, {class} {}->{}, offset {}",
        &digest[..digest.len().min(16)],
        s.src_node,
        s.dst_node,
        s.offset.map_or_else(|| "unknown".to_string(), |o| o.to_string())
    )
}

/// The marks per input file, sorted by first frame, and the header frames' marks.
type Marks = (Vec<Vec<Mark>>, BTreeMap<(u16, u64), Vec<(usize, usize)>>, u64);

fn read_evidence(path: &str, files: usize) -> Result<Marks, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{path}: cannot read evidence: {e}"))?;
    let mut marks: Vec<Vec<Mark>> = (0..files).map(|_| Vec::new()).collect();
    let mut headers: Vec<(u16, u64, usize, u64)> = Vec::new();
    let mut sends = 0u64;
    for (n, line) in BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| format!("{path}: cannot read evidence: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let ev: EvLine = serde_json::from_str(&line)
            .map_err(|e| format!("{path}:{}: not an smbwire evidence line: {e}", n + 1))?;
        for (i, s) in ev.sends.iter().enumerate() {
            let file = s.file as usize;
            if file >= files {
                return Err(format!("{path}:{}: send names input {file}; {files} given", n + 1));
            }
            let text = comment(&ev.digest, i as u64 + 1, ev.sends_total, s);
            let ports = s.src_port.zip(s.dst_port);
            if let Some(h) = s.header_frame {
                headers.push((s.file, h, file, marks[file].len() as u64));
            }
            marks[file].push(Mark { first: s.frames[0], last: s.frames[1].max(s.frames[0]), src: s.src, dst: s.dst, ports, comment: text });
            sends += 1;
        }
    }
    // Sort each file's marks by first frame; header references follow the permutation.
    let mut header_map: BTreeMap<(u16, u64), Vec<(usize, usize)>> = BTreeMap::new();
    let mut perms: Vec<Vec<usize>> = Vec::with_capacity(files);
    for m in marks.iter_mut() {
        let mut idx: Vec<usize> = (0..m.len()).collect();
        idx.sort_by_key(|&i| (m[i].first, i));
        let mut old: Vec<Option<Mark>> = std::mem::take(m).into_iter().map(Some).collect();
        let mut new_pos = vec![0usize; idx.len()];
        for (pos, &i) in idx.iter().enumerate() {
            new_pos[i] = pos;
            m.push(old[i].take().expect("each once"));
        }
        perms.push(new_pos);
    }
    for (file16, frame, file, old) in headers {
        header_map.entry((file16, frame)).or_default().push((file, perms[file][old as usize]));
    }
    Ok((marks, header_map, sends))
}

/// Whether a frame between a send's first and last frame is one of its frames.
fn carries(mark: &Mark, d: &wire::Decoded<'_>) -> bool {
    if d.src != mark.src || d.dst != mark.dst {
        return false;
    }
    match (d.transport, mark.ports) {
        (Transport::Tcp(t), Some((sp, dp))) => t.src_port == sp && t.dst_port == dp && t.declared_len > 0,
        (Transport::Tcp(t), None) => t.declared_len > 0,
        (Transport::Udp(u), None) => !u.payload.is_empty(),
        (Transport::RoceV1(b), None) => !b.is_empty(),
        _ => false,
    }
}

/// Writes `out` (pcapng): every frame of `paths`, merged in time order, with the comments of
/// the sends in the evidence file. `paths` must be the analysed inputs in the analysis'
/// order (the evidence's `file` indexes them).
pub fn annotate_files(paths: &[String], evidence: &str, out: &str) -> Result<AnnotateStats, String> {
    let mut inputs: Vec<&str> = paths.iter().map(String::as_str).collect();
    inputs.push(evidence);
    crate::outputs::check(&[("--annotate", out)], &inputs)?;
    // Read through a buffer, not mapped: a capture another process truncates meanwhile (a
    // `tcpdump -W` ring reusing its names) ends early instead of killing the process (SIGBUS).
    let mut merged = Merged::open_with(paths, ReadMode::Buffered).map_err(|e| e.to_string())?;
    if !merged.skipped.is_empty() {
        let (i, e) = &merged.skipped[0];
        return Err(format!("cannot annotate: input {} is not readable now: {e}", paths[*i]));
    }
    let (marks, headers, sends) = read_evidence(evidence, paths.len())?;
    // Takes its name once complete (`outputs::Staged`); 0600: it holds payload bytes.
    let (file, staged) = crate::outputs::Staged::create(out, 0o600).map_err(|e| format!("{out}: cannot write: {e}"))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let io = |e: std::io::Error| format!("{out}: cannot write: {e}");
    w.write_all(&writer::shb()).map_err(io)?;
    let mut stats = AnnotateStats { sends, ..Default::default() };
    let mut interfaces: HashMap<u32, u32> = HashMap::new();
    // Per file: next mark to activate, and the active marks (indexes).
    let mut next = vec![0usize; paths.len()];
    let mut active: Vec<Vec<usize>> = vec![Vec::new(); paths.len()];
    let (mut acct, mut an) = (Accounting::default(), Anomalies::default());
    let mut text = String::new();
    while let Some(frame) = merged.next_frame(&mut acct, &mut an) {
        let f = frame.info.frame.file as usize;
        let n = frame.info.frame.number;
        let fm = &marks[f];
        while next[f] < fm.len() && fm[next[f]].first <= n {
            active[f].push(next[f]);
            next[f] += 1;
        }
        active[f].retain(|&i| fm[i].last >= n);
        text.clear();
        let push = |c: &str, text: &mut String| {
            if !text.is_empty() {
                text.push_str(" | ");
            }
            text.push_str(c);
        };
        if let Some(hs) = headers.get(&(f as u16, n)) {
            for &(_, i) in hs {
                push(&fm[i].comment, &mut text);
            }
        }
        if !active[f].is_empty() {
            let decoded = wire::decode(frame.info.linktype, frame.data).ok();
            for &i in &active[f] {
                let m = &fm[i];
                let named = n == m.first || n == m.last;
                let header = headers.get(&(f as u16, n)).is_some_and(|hs| hs.iter().any(|&(_, j)| j == i));
                if !header && (named || decoded.as_ref().is_some_and(|d| carries(m, d))) {
                    push(&m.comment, &mut text);
                }
            }
        }
        let iface = match interfaces.get(&frame.info.linktype) {
            Some(&i) => i,
            None => {
                let i = interfaces.len() as u32;
                w.write_all(&writer::idb(frame.info.linktype, 262_144)).map_err(io)?;
                interfaces.insert(frame.info.linktype, i);
                i
            }
        };
        let comment = (!text.is_empty()).then_some(text.as_str());
        writer::write_epb(&mut w, iface, frame.info.ts_ns, frame.data, frame.info.orig_len, comment).map_err(io)?;
        stats.frames_written += 1;
        stats.frames_commented += u64::from(comment.is_some());
    }
    if merged.interrupted() {
        return Err("interrupted".into());
    }
    w.flush().map_err(io)?;
    drop(w);
    staged.commit().map_err(io)?;
    stats.interfaces = interfaces.len() as u32;
    Ok(stats)
}

#[cfg(test)]
mod tests;
