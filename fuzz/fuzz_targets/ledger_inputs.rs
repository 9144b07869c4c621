//! The Parquet files users hand back to smbwire: ledgers (`smbwire attribute`, replayed through
//! dedupe and attribution) and `--dask` ledger parts (their rows and metadata). The bytes go
//! through a file because the readers take paths (one file per fuzzing process).
#![no_main]

use libfuzzer_sys::fuzz_target;
use smbwire_dissectors::ledger::LedgerReader;
use smbwire_dissectors::pipeline::Config;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("smbwire-fuzz-ledger-{}.parquet", std::process::id()));
    std::fs::write(&path, data).expect("temporary file");
    let p = path.to_string_lossy().into_owned();
    let config = Config::default();
    if let Ok(v) = smbwire_dissectors::attribute::attribute_files(std::slice::from_ref(&p), &config, None, &mut |_, _| true) {
        let _ = serde_json::to_string(&v);
    }
    if let Ok(mut r) = LedgerReader::open_part(&p) {
        while let Ok(Some(_)) = r.next_part_group() {}
    }
    let _ = smbwire_dissectors::distributed::merge_parts(&[p], &config, None, &mut |_, _| true);
});
