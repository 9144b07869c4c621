//! smbwire engine.
//!
//! The pipeline, one stage per module:
//! `capture` (pcap/pcapng readers, merge by time) → `wire` (link, IP, TCP/UDP views)
//! → `tcp` (flow table, per-direction reassembly) → `smb2` (NetBIOS framing, SMB2/3 records,
//! session/tree/file state) → `payload` (streaming block digests) → `dedupe` (sliding-window
//! index, duplicate and class attribution) → `report` (the serialisable result).
//! `pipeline` wires the stages together; `python` exposes it as `smbwire._core`.
//!
//! Dependencies run one way: a module uses only modules before it in `LAYERS` (checked by
//! the test below, which scans every `crate::` path outside `#[cfg(test)]` modules). `context`
//! holds the run state the stream stages are lent, so no stage needs the pipeline.

pub mod abi;
pub mod accounting;
pub mod attribute;
pub mod annotate;
pub mod anomaly;
pub mod capture;
pub mod community;
pub mod context;
pub mod dedupe;
pub mod distributed;
pub mod fasthash;
pub mod findings;
pub mod frame;
pub mod hint;
pub mod ledger;
pub mod live;
pub mod outputs;
pub mod payload;
pub mod parallel;
pub mod pipeline;
pub mod rdma;
pub mod report;
pub mod smb2;
pub mod smbdirect;
pub mod tcp;
pub mod wire;


/// Every anomaly name the engine can raise (`report::all_anomaly_names`).
pub use report::all_anomaly_names;

/// The allowed dependency order, lowest first: a module may use only modules of an earlier
/// entry (modules within one entry use none of each other).
pub const LAYERS: &[&[&str]] = &[
    &["abi", "frame", "anomaly", "accounting", "fasthash", "community", "hint", "outputs"],
    &["payload"],
    &["context"],
    &["ledger"],
    &["dedupe"],
    &["wire"],
    &["capture"],
    &["tcp"],
    &["smb2"],
    &["smbdirect"],
    &["rdma"],
    &["findings"],
    &["report"],
    &["pipeline"],
    &["attribute", "annotate", "parallel"],
    &["distributed"],
    &["live"],
];

#[cfg(test)]
mod tests {
    use super::LAYERS;
    use std::collections::BTreeSet;
    use std::path::Path;

    fn rank(module: &str) -> Option<usize> {
        LAYERS.iter().position(|l| l.contains(&module))
    }

    /// The source of a file without its `#[cfg(test)] mod ...` items (unit tests may use any
    /// module, like integration tests).
    fn library_code(text: &str) -> String {
        let lines: Vec<&str> = text.lines().collect();
        let mut out = String::new();
        let mut i = 0;
        while i < lines.len() {
            let next = lines.get(i + 1).map(|l| l.trim_start()).unwrap_or("");
            if lines[i].trim() == "#[cfg(test)]" && (next.starts_with("mod ") || next.starts_with("#[path")) {
                // Skip the item: a `mod x;` line, or a braced block.
                let mut j = i + 1;
                while j < lines.len() && !lines[j].trim_start().starts_with("mod ") {
                    j += 1;
                }
                if lines.get(j).is_some_and(|l| l.trim_end().ends_with('{')) {
                    let mut depth = 0i64;
                    loop {
                        depth += lines[j].matches('{').count() as i64 - lines[j].matches('}').count() as i64;
                        j += 1;
                        if depth == 0 || j >= lines.len() {
                            break;
                        }
                    }
                    i = j;
                } else {
                    i = j + 1;
                }
                continue;
            }
            out.push_str(lines[i]);
            out.push('\n');
            i += 1;
        }
        out
    }

    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// (module, used module) for every `crate::X` path in library code.
    fn edges() -> BTreeSet<(String, String)> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut all = Vec::new();
        files(&src, &mut all);
        let mut test_files = BTreeSet::new();
        let mut edges = BTreeSet::new();
        for p in &all {
            let rel = p.strip_prefix(&src).unwrap();
            let first = rel.components().next().unwrap().as_os_str().to_str().unwrap().trim_end_matches(".rs").to_string();
            if first == "lib" {
                continue;
            }
            let text = std::fs::read_to_string(p).unwrap();
            // Files that are test modules themselves (`#[cfg(test)] mod tests;`).
            for l in text.lines().collect::<Vec<_>>().windows(2) {
                if l[0].trim() == "#[cfg(test)]" {
                    if let Some(name) = l[1].trim().strip_prefix("mod ").and_then(|n| n.strip_suffix(';')) {
                        let dir = if rel.file_name().unwrap() == "mod.rs" { p.parent().unwrap().to_path_buf() } else { p.with_extension("") };
                        test_files.insert(dir.join(format!("{name}.rs")));
                    }
                }
            }
            for line in library_code(&text).lines() {
                let code = line.split("//").next().unwrap();
                for (i, _) in code.match_indices("crate::") {
                    if i > 0 && code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                        continue; // `smbwire_dissectors::...` and the like
                    }
                    let used: String = code[i + 7..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !used.is_empty() && used != first {
                        edges.insert((first.clone(), used, p.clone()));
                    }
                }
            }
        }
        edges.into_iter().filter(|(_, _, p)| !test_files.contains(p)).map(|(a, b, _)| (a, b)).collect()
    }

    #[test]
    fn dependencies_run_one_way() {
        let edges = edges();
        // The scan sees the edges it should (a broken scan would pass vacuously).
        assert!(edges.contains(&("pipeline".into(), "smb2".into())) && edges.contains(&("rdma".into(), "smbdirect".into())));
        let mut wrong = Vec::new();
        for (from, to) in edges {
            match (rank(&from), rank(&to)) {
                (Some(a), Some(b)) if b < a => {}
                (None, _) => wrong.push(format!("{from} is not in LAYERS")),
                (_, None) => wrong.push(format!("{to} (used by {from}) is not in LAYERS")),
                _ => wrong.push(format!("{from} -> {to} goes against the order")),
            }
        }
        assert!(wrong.is_empty(), "module dependencies: {wrong:#?}");
    }

    /// Every anomaly name is documented in docs/json-schema.md, once per name.
    #[test]
    fn every_anomaly_is_documented() {
        let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/json-schema.md")).unwrap();
        let names: Vec<&str> = super::all_anomaly_names().collect();
        let unique: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "a name is declared twice");
        let missing: Vec<&str> = names.iter().copied().filter(|n| !doc.contains(&format!("`{n}`"))).collect();
        assert!(missing.is_empty(), "anomalies not in docs/json-schema.md: {missing:?}");
        // And the doc's anomaly table names no anomaly the engine does not have.
        let section = doc.split("## Anomalies").nth(1).expect("an `## Anomalies` section").split("\n## ").next().unwrap();
        for line in section.lines().filter(|l| l.starts_with("| `")) {
            let name = line[3..].split('`').next().unwrap();
            assert!(unique.contains(name), "docs/json-schema.md names `{name}`, which the engine does not raise");
        }
    }

    /// One test layout: a module's unit tests are its child module `tests`, declared
    /// `#[cfg(test)] mod tests` with the body inline or in the module's directory as `tests.rs`
    /// (`x.rs` → `x/tests.rs`, `x/mod.rs` → `x/tests.rs`); no `#[path]`, no other file names.
    /// Tests that need the synthesizer are in synth/tests/. live/ (another owner) is not checked yet.
    #[test]
    fn one_test_layout() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut all = Vec::new();
        files(&src, &mut all);
        let mut wrong = Vec::new();
        for p in &all {
            let rel = p.strip_prefix(&src).unwrap().to_string_lossy().to_string();
            if rel.starts_with("live/") {
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if name.ends_with("_tests.rs") || name == "fuzz.rs" {
                wrong.push(format!("{rel}: test file outside the layout"));
            }
            let text = std::fs::read_to_string(p).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            for (i, l) in lines.iter().enumerate() {
                if l.trim_start().starts_with("#[path") {
                    wrong.push(format!("{rel}:{}: #[path]", i + 1));
                }
                // A file-level test module (not nested in another one) is called `tests`.
                if *l == "#[cfg(test)]" {
                    if let Some(m) = lines.get(i + 1).and_then(|n| n.strip_prefix("mod ")) {
                        if !(m == "tests;" || m == "tests {") {
                            wrong.push(format!("{rel}:{}: test module `{m}`", i + 2));
                        }
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn every_module_is_in_layers() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
        let text = std::fs::read_to_string(src).unwrap();
        for l in text.lines() {
            if let Some(m) = l.strip_prefix("pub mod ").and_then(|m| m.strip_suffix(';')) {
                assert!(rank(m).is_some(), "{m} is not in LAYERS");
            }
        }
    }
}
