//! Shard tasks and the merge give one pipeline's result: the same JSON apart from `analysis`,
//! and the same evidence, on every bundled and public capture, with 1, 2 and 3 shards.

use super::*;
use crate::parallel::analyze_files;
use std::path::{Path, PathBuf};

fn captures() -> Vec<PathBuf> {
    crate::capture::testutil::all_captures()
}

fn strings(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| p.to_string_lossy().into_owned()).collect()
}

fn tmp(name: &str) -> PathBuf {
    static RUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let k = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("smbwire-dist-{name}-{}-{k}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `shards` shard tasks into `dir`; the parts' paths (shard order).
fn shard_all(paths: &[String], config: &Config, shards: usize, dir: &Path) -> Vec<String> {
    (0..shards)
        .map(|k| {
            let part = dir.join(format!("part-{k}-of-{shards}.parquet")).to_string_lossy().into_owned();
            let s = analyze_shard(paths, config, k, shards, "t", &part, &mut |_, _| true).expect("shard task");
            assert_eq!((s.shard, s.shards), (k, shards));
            part
        })
        .collect()
}

fn without_analysis(r: &Results) -> Value {
    let mut v = serde_json::to_value(r).unwrap();
    v.as_object_mut().unwrap().remove("analysis");
    v
}

fn same(paths: &[PathBuf], config: &Config) {
    let dir = tmp("same");
    let paths = strings(paths);
    let ev1 = dir.join("ev-1");
    let one = analyze_files(&paths, &Config { threads: 1, ..config.clone() }, ev1.to_str(), &mut |_, _| true).unwrap();
    let (want, want_ev) = (without_analysis(&one), std::fs::read_to_string(&ev1).unwrap());
    for n in [1, 2, 3] {
        let mut parts = shard_all(&paths, config, n, &dir);
        parts.reverse(); // any order of the list
        let ev = dir.join(format!("ev-d{n}"));
        let got = merge_parts(&parts, config, ev.to_str(), &mut |_, _| true).expect("merge");
        assert_eq!(got.analysis.threads, n);
        crate::capture::testutil::assert_same_json(&format!("{paths:?} with {n} shards"), &want, &without_analysis(&got));
        assert!(std::fs::read_to_string(&ev).unwrap() == want_ev, "{paths:?}: evidence with {n} shards differs");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn shards_give_one_pipelines_result_on_every_capture() {
    for p in captures() {
        same(&[p], &Config::default());
    }
}

#[test]
fn shards_give_one_pipelines_result_with_a_short_window_and_merged_files() {
    let mut c = Config::default();
    c.dedupe.window_ns = 1_000_000;
    c.dedupe.top_n = 3;
    let (windowed, smb, same_servers) = crate::capture::testutil::equality_inputs(&captures());
    for p in windowed {
        same(&[p], &c);
    }
    same(&smb, &Config::default());
    same(&same_servers, &Config::default());
}

/// The merge writes the send ledger one analysis writes (`--ledger`): the same events.
#[test]
fn the_merge_writes_the_analysis_ledger() {
    let dir = tmp("ledger");
    let cap = captures().into_iter().find(|p| p.to_string_lossy().contains("nested4-1MiB-mirrordup")).unwrap();
    let paths = strings(&[cap]);
    let mut c = Config { ledger: Some(dir.join("one.parquet").to_string_lossy().into_owned()), ..Config::default() };
    analyze_files(&paths, &c, None, &mut |_, _| true).unwrap();
    let parts = shard_all(&paths, &Config::default(), 2, &dir);
    c.ledger = Some(dir.join("merged.parquet").to_string_lossy().into_owned());
    merge_parts(&parts, &c, None, &mut |_, _| true).unwrap();
    let (a, b) = (crate::ledger::read(c.ledger.as_ref().unwrap()).unwrap(), crate::ledger::read(dir.join("one.parquet").to_str().unwrap()).unwrap());
    assert!(a.events.len() > 8);
    assert!(a.events == b.events && a.at_ns == b.at_ns, "ledger events differ");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_merge_refuses_missing_foreign_and_damaged_parts() {
    let dir = tmp("refuse");
    let caps = captures();
    let cap = caps.iter().find(|p| p.to_string_lossy().contains("nested4-1MiB-mirrordup")).unwrap();
    let other = caps.iter().find(|p| p.to_string_lossy().contains("redirect4")).unwrap();
    let paths = strings(std::slice::from_ref(cap));
    let parts = shard_all(&paths, &Config::default(), 3, &dir);
    let merge = |p: &[String]| merge_parts(p, &Config::default(), None, &mut |_, _| true).expect_err("refused").to_string();
    assert!(merge(&parts[..2]).contains("every shard's part"), "{}", merge(&parts[..2]));
    assert!(merge(&[parts[0].clone(), parts[1].clone(), parts[1].clone()]).contains("every shard's part"));
    // A part of another run: other inputs, or other options (tag).
    let odir = tmp("refuse-other");
    let foreign = shard_all(&strings(std::slice::from_ref(other)), &Config::default(), 3, &odir);
    assert!(merge(&[parts[0].clone(), parts[1].clone(), foreign[2].clone()]).contains("another run"));
    let tagged = odir.join("tagged.parquet").to_string_lossy().into_owned();
    analyze_shard(&paths, &Config::default(), 2, 3, "other-options", &tagged, &mut |_, _| true).unwrap();
    assert!(merge(&[parts[0].clone(), parts[1].clone(), tagged]).contains("another run"));
    // Not a part: a ledger, garbage.
    let ledger = odir.join("ledger.parquet").to_string_lossy().into_owned();
    let c = Config { ledger: Some(ledger.clone()), ..Config::default() };
    analyze_files(&paths, &c, None, &mut |_, _| true).unwrap();
    assert!(merge(&[ledger]).contains("is not smbwire-ledger-part/3"));
    let junk = odir.join("junk.parquet");
    std::fs::write(&junk, b"PAR1 junk").unwrap();
    assert!(merge(&[junk.to_string_lossy().into_owned()]).contains("not a Parquet ledger"));
    assert!(merge(&[]).contains("no ledger part"));
    // A ledger is not a part either way round.
    assert!(crate::ledger::read(&parts[0]).err().expect("part is not a ledger").0.contains("is not smbwire-ledger/1"));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::remove_dir_all(&odir).ok();
}

#[test]
fn a_shard_task_refuses_streams_and_shards_that_do_not_exist() {
    let dir = tmp("streams");
    let part = dir.join("p.parquet").to_string_lossy().into_owned();
    let cap = strings(&captures()[..1]);
    let e = analyze_shard(&["-".to_string()], &Config::default(), 0, 2, "t", &part, &mut |_, _| true).err().unwrap();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let e = analyze_shard(&[dir.to_string_lossy().into_owned()], &Config::default(), 0, 2, "t", &part, &mut |_, _| true).err().unwrap();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let e = analyze_shard(&cap, &Config::default(), 2, 2, "t", &part, &mut |_, _| true).err().unwrap();
    assert!(e.to_string().contains("does not exist"), "{e}");
    let e = analyze_shard(&cap, &Config::default(), 0, 2, "t", "/nonexistent-dir/p.parquet", &mut |_, _| true).err().unwrap();
    assert!(e.to_string().contains("cannot write ledger"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Every counter a part carries reads back as written (the merge sums what it reads).
#[test]
fn counts_survive_the_part_metadata() {
    let caps = captures();
    let dir = tmp("counts");
    for cap in caps.iter().filter(|p| ["nested4", "roce", "iwarp", "compress", "aes"].iter().any(|k| p.to_string_lossy().contains(k))) {
        let part = dir.join("p.parquet").to_string_lossy().into_owned();
        analyze_shard(&strings(std::slice::from_ref(cap)), &Config::default(), 0, 1, "t", &part, &mut |_, _| true).unwrap();
        let r = LedgerReader::open_part(&part).unwrap();
        let v: Value = serde_json::from_str(&r.run).unwrap();
        let m = meta_of(&part, &r.run).unwrap();
        assert_eq!(counts_json(&m.counts), v["counts"], "{cap:?}");
        assert_eq!(serde_json::to_value(&m.inputs).unwrap(), v["inputs"]);
        assert_eq!(names_json(m.container.iter()), v["container"]);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The merge applies a sweep's and the end's closes of several parts in mark order (not part
/// by part): parts written by hand, with the metadata of real shard tasks.
#[test]
fn the_merge_orders_closes_of_several_parts_by_mark() {
    let dir = tmp("marks");
    let cap = strings(&captures()[..1]);
    let real = shard_all(&cap, &Config::default(), 2, &dir);
    let payload: Vec<u8> = (0..8192u32).map(|i| (i * 31 % 251) as u8).collect();
    let send = |conn: u64, src: u8| crate::capture::testutil::write_send(conn, src, &payload);
    for step in [part_step::SWEEP_CLOSES, part_step::FINISH] {
        let pos = if step == part_step::FINISH { AT_END } else { 1 };
        let mut parts = Vec::new();
        for (k, (mark, conn)) in [(5u64, 500u64), (3, 300)].into_iter().enumerate() {
            let meta = LedgerReader::open_part(&real[k]).unwrap().run;
            let p = dir.join(format!("hand-{step}-{k}.parquet")).to_string_lossy().into_owned();
            let mut w = LedgerWriter::create_part(&p).unwrap();
            let key = PartKey { pos, step, mark: Mark { phase: crate::context::phase::FINISH_TCP, a: mark, b: 0 } };
            w.push_part(key, 1_000, &PartItem::Event(Event::Send(Box::new(send(conn, k as u8 + 1))))).unwrap();
            w.close(&meta).unwrap();
            parts.push(p);
        }
        let r = serde_json::to_value(merge_parts(&parts, &Config::default(), None, &mut |_, _| true).unwrap()).unwrap();
        let sends = r["top_duplicates"][0]["sends"].as_array().unwrap_or_else(|| panic!("{}", r.to_string().chars().take(3000).collect::<String>()));
        let order: Vec<_> = sends.iter().map(|s| s["message_id"].as_u64().unwrap()).collect();
        assert_eq!(order, vec![300, 500], "step {step}: mark 3 (part 1) before mark 5 (part 0)");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A part written by another build of the engine is refused in one line, even when every
/// other field matches (the package version is the same on every build).
#[test]
fn the_merge_refuses_parts_of_another_engine_build() {
    let dir = tmp("build");
    let cap = strings(&captures()[..1]);
    let real = shard_all(&cap, &Config::default(), 2, &dir);
    let merge = |p: &[String]| merge_parts(p, &Config::default(), None, &mut |_, _| true);
    assert!(merge(&real).is_ok());
    let mut meta: Value = serde_json::from_str(&LedgerReader::open_part(&real[1]).unwrap().run).unwrap();
    assert_eq!(meta["engine"], crate::report::ENGINE_BUILD);
    assert_eq!(crate::report::ENGINE_BUILD.len(), 16);
    meta["engine"] = "0123456789abcdef".into();
    let p = dir.join("other-build.parquet").to_string_lossy().into_owned();
    LedgerWriter::create_part(&p).unwrap().close(&meta.to_string()).unwrap();
    let e = merge(&[real[0].clone(), p]).expect_err("refused").to_string();
    assert!(e.contains("engine build 0123456789abcdef") && e.contains(crate::report::ENGINE_BUILD), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}
