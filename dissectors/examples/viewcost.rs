//! Measuring driver: how long the live snapshot (`Pipeline::view`) takes as the window fills.
//! Runs one pipeline over a capture file and takes a view every N frames, printing the live
//! blocks and the view's time. Not a test; for docs/performance-log.md.
//!
//! cargo run --release --example viewcost -p smbwire-dissectors -- FILE [EVERY_FRAMES]

use smbwire_dissectors::accounting::Accounting;
use smbwire_dissectors::anomaly::Anomalies;
use smbwire_dissectors::capture;
use smbwire_dissectors::pipeline::{Config, Pipeline};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args.first().expect("usage: viewcost FILE [EVERY_FRAMES]");
    let every: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let mut reader = capture::open(path, 0).expect("open");
    let mut acct = Accounting::default();
    let mut anomalies = Anomalies::default();
    let mut p = Pipeline::new(&Config::default(), None);
    let (mut n, started) = (0u64, Instant::now());
    while reader.advance(&mut acct, &mut anomalies) {
        if let Some(f) = reader.current() {
            p.process(&f);
        }
        n += 1;
        if n % every == 0 {
            let t = Instant::now();
            let v = p.view();
            let ms = t.elapsed().as_secs_f64() * 1e3;
            println!("frames {n} at {:.2} s: view {ms:.2} ms (peak live blocks {})", started.elapsed().as_secs_f64(), v.dedupe.index.peak_live_blocks);
        }
    }
}
