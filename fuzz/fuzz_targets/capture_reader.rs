//! pcap / pcapng (and gzip, zstd, xz around them) read from arbitrary bytes: every record
//! read, every byte accounted, no panic, bounded memory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smbwire_dissectors::accounting::Accounting;
use smbwire_dissectors::anomaly::Anomalies;
use smbwire_dissectors::capture::open_reader;

fuzz_target!(|data: &[u8]| {
    let n = data.len() as u64;
    let Ok(mut r) = open_reader(Box::new(std::io::Cursor::new(data.to_vec())), n, "<fuzz>", 0) else { return };
    let mut acct = Accounting::default();
    let mut an = Anomalies::default();
    let mut frames = 0u64;
    while r.advance(&mut acct, &mut an) {
        if let Some(f) = r.current() {
            assert!(f.data.len() <= 1 << 28);
        }
        frames += 1;
        if frames > 1_000_000 {
            break;
        }
    }
});
