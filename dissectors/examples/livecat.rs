//! Debug tool for the live capture sources: opens an interface, reads for a while, prints
//! one JSON object with the backend, the counters and checks on the delivered frames.
//!
//! livecat IFACE [--seconds N] [--stdin-stop] [--af-packet] [--require-ebpf] [--ports P,P]
//!               [--snaplen N] [--no-promisc] [--ring-bytes N] [--block-size N] [--blocks N]
//!               [--stall SECONDS] [--hook auto|tcx|xdp] [--xdp-drop] [--digests] [--shed]
//! "ready BACKEND" ("ready ebpf HOOK" with eBPF) is printed on stderr once the source is
//! attached. It reads until `--seconds`
//! pass or, with `--stdin-stop`, until stdin is closed, then drains what is queued.
//! `--stall` waits that long before reading (to make the buffers overflow on purpose).
//! `--ports` adds TCP ports to the defaults (445, 5445), as `smbwire live --port` does.
//! `--digests` lists the SHA-256 of every delivered frame's captured bytes, in order (tests
//! compare them with the frames they sent, to check the copy byte for byte).
//! `--shed` lets the eBPF program shed a connection itself when its ring is nearly full (as
//! `smbwire live` does, whose session then cuts it at the marked frame); the output counts
//! the marked frames and those delivered after the first of them.
//! Payload bytes are never printed.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use smbwire_dissectors::live::{self, classify::classify, LiveOptions};

fn usage() -> ! {
    eprintln!("usage: livecat IFACE [--seconds N] [--stdin-stop] [--af-packet] [--require-ebpf] [--ports P,P] [--snaplen N] [--no-promisc] [--ring-bytes N] [--block-size N] [--blocks N] [--stall S] [--hook auto|tcx|xdp] [--xdp-drop] [--digests] [--shed]");
    std::process::exit(2);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let iface = args.next().unwrap_or_else(|| usage());
    // No session here to cut what the program sheds: it sheds only with `--shed`.
    let mut opts = LiveOptions { shed: false, ..LiveOptions::default() };
    let mut seconds = 5.0f64;
    let mut stall = 0.0f64;
    let mut stdin_stop = false;
    let mut digests: Option<Vec<String>> = None;
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--seconds" => seconds = val().parse().unwrap_or_else(|_| usage()),
            "--stall" => stall = val().parse().unwrap_or_else(|_| usage()),
            "--stdin-stop" => stdin_stop = true,
            "--ring-bytes" => opts.ring_bytes = val().parse().unwrap_or_else(|_| usage()),
            "--block-size" => opts.block_size = val().parse().unwrap_or_else(|_| usage()),
            "--blocks" => opts.block_count = val().parse().unwrap_or_else(|_| usage()),
            "--af-packet" => opts.force_af_packet = true,
            "--require-ebpf" => opts.require_ebpf = true,
            "--no-promisc" => opts.promisc = false,
            "--hook" => opts.hook = val().parse().unwrap_or_else(|_| usage()),
            "--xdp-drop" => opts.xdp_drop = true,
            "--digests" => digests = Some(Vec::new()),
            "--shed" => opts.shed = true,
            "--snaplen" => opts.snaplen = val().parse().unwrap_or_else(|_| usage()),
            "--ports" => {
                let mut named = opts.tcp_ports.clone();
                named.extend(val().split(',').map(|p| p.parse::<u16>().unwrap_or_else(|_| usage())));
                opts.tcp_ports = live::tcp_ports_with(&named);
            }
            _ => usage(),
        }
    }
    let (mut src, backend, why) = match live::open(&iface, &opts) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("livecat: {e}");
            std::process::exit(1);
        }
    };
    match src.hook() {
        Some(h) => eprintln!("ready {} {}", backend.name(), h.hook.name()),
        None => eprintln!("ready {}", backend.name()),
    }
    let stop = Arc::new(AtomicBool::new(false));
    if stdin_stop {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            stop.store(true, Ordering::SeqCst);
        });
    }
    std::thread::sleep(Duration::from_secs_f64(stall));

    let mut delivered = 0u64;
    let mut captured_bytes = 0u64;
    let mut wire_bytes = 0u64;
    let mut truncated = 0u64;
    let mut numbers_ok = true;
    let mut ts_ok = true;
    let mut all_match = true;
    // Frames the program shed their connection at (`--shed`), and frames delivered after the
    // first of them.
    let mut marked = 0u64;
    let mut after_mark = 0u64;
    let ports = opts.tcp_ports.clone();
    let snaplen = opts.snaplen as usize;
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    // After the stop, keep reading until two empty batches: AF_PACKET hands over a partly
    // filled block only when its retire timer fires.
    let mut empty_after_stop = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let stopping = left.is_zero() || stop.load(Ordering::SeqCst);
        if stopping && empty_after_stop >= 2 {
            break;
        }
        let wait = if stopping {
            200
        } else {
            left.as_millis().min(100) as i32
        };
        let r = src.next_batch(wait, &mut |f, handed| {
            after_mark += u64::from(marked > 0);
            marked += u64::from(handed.shed_here);
            delivered += 1;
            numbers_ok &= f.info.frame.number == delivered;
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
            ts_ok &= f.info.ts_ns <= now + 1_000_000_000 && f.info.ts_ns + 60_000_000_000 >= now;
            all_match &= classify(f.data, &ports).is_some();
            all_match &= f.data.len() <= snaplen + 4 && f.data.len() <= f.info.orig_len as usize;
            captured_bytes += f.data.len() as u64;
            if let Some(d) = digests.as_mut() {
                use sha2::Digest;
                d.push(sha2::Sha256::digest(f.data).iter().map(|b| format!("{b:02x}")).collect());
            }
            wire_bytes += u64::from(f.info.orig_len);
            truncated += u64::from(f.data.len() < f.info.orig_len as usize);
        });
        match r {
            Ok(0) if stopping => empty_after_stop += 1,
            Ok(_) => empty_after_stop = 0,
            Err(e) => {
                eprintln!("livecat: {e}");
                std::process::exit(1);
            }
        }
    }
    let out = serde_json::json!({
        "backend": backend,
        "fallback_reason": why,
        "hook": src.hook().map(|h| h.hook),
        "xdp_mode": src.hook().and_then(|h| h.xdp_mode),
        "xdp_copy": src.hook().and_then(|h| h.xdp_copy),
        "ring_copy": src.hook().map(|h| h.ring_copy),
        "stats": src.stats(),
        "delivered": delivered,
        "delivered_wire_bytes": wire_bytes,
        "captured_bytes": captured_bytes,
        "truncated": truncated,
        "numbers_ok": numbers_ok,
        "ts_ok": ts_ok,
        "all_delivered_match": all_match,
        "digests": digests,
        "marked": marked,
        "after_mark": after_mark,
    });
    println!("{out}");
}
