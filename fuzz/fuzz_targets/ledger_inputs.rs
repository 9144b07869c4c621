//! The Parquet files users hand back to smbwire: ledgers (`smbwire attribute`, replayed through
//! dedupe and attribution) and `--dask` ledger parts (their rows and metadata). The bytes go
//! through a file because the readers take paths (one file per fuzzing process, removed after
//! each input), in memory (`/dev/shm`) where there is one: through `/tmp` on a disk the process
//! waited on the file's creation and truncation and got a fourteenth of a CPU (about 280
//! executions a second of wall time against 8,000; README, "Fuzzing").
#![no_main]

use libfuzzer_sys::fuzz_target;
use smbwire_dissectors::ledger::LedgerReader;
use smbwire_dissectors::pipeline::Config;

/// This process's input file, chosen once: memory-backed when the system has `/dev/shm`.
static PATH: std::sync::LazyLock<std::path::PathBuf> = std::sync::LazyLock::new(|| {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    dir.join(format!("smbwire-fuzz-ledger-{}.parquet", std::process::id()))
});

fuzz_target!(|data: &[u8]| {
    let path = &*PATH;
    std::fs::write(path, data).expect("temporary file");
    let p = path.to_string_lossy().into_owned();
    let config = Config::default();
    if let Ok(v) = smbwire_dissectors::attribute::attribute_files(std::slice::from_ref(&p), &config, None, &mut |_, _| true) {
        let _ = serde_json::to_string(&v);
    }
    if let Ok(mut r) = LedgerReader::open_part(&p) {
        while let Ok(Some(_)) = r.next_part_group() {}
    }
    let _ = smbwire_dissectors::distributed::merge_parts(&[p], &config, None, &mut |_, _| true);
    let _ = std::fs::remove_file(path);
});
