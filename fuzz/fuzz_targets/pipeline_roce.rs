//! RoCEv2 (UDP 4791) packets with fuzzed BTH and everything after it: queue pairs, PSN
//! windows, RDMA Read/Write, SMB Direct messages and their SMB2 content, CM MADs on QP1.
#![no_main]

use libfuzzer_sys::fuzz_target;
mod common;
use common::*;

fuzz_target!(|data: &[u8]| {
    let mut p = pipeline(false);
    for (n, (_, packet)) in records(data).into_iter().enumerate() {
        let frame = udp_frame(4791, packet);
        feed(&mut p, n as u64 + 1, ethernet(), &frame);
        if n % 8 == 7 {
            // A live snapshot now and then, as `live` takes every second (`Dedupe::snapshot`
            // keeps its figures from the first; debug builds check them against the window).
            let _ = p.view();
        }
    }
    let r = p.finish(Vec::new(), Default::default(), std::time::Instant::now());
    let _ = serde_json::to_string(&r);
});
