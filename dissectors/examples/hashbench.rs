//! Block hashing throughput on this CPU: `PayloadHasher` (4 KiB blocks digested 16 at a time,
//! fed in wire-size pieces) against one `blake3::hash` per 4 KiB block (what it did before).
//! Prints MB/s of each, best of `--repeat` runs (default 5).
//!
//! cargo run --release --example hashbench -p smbwire-dissectors [-- --mib 64 --piece 1448]

use smbwire_dissectors::payload::hash::PayloadHasher;
use std::time::Instant;

fn main() {
    let mut mib = 64usize;
    let mut piece = 1448usize;
    let mut repeat = 5usize;
    let args: Vec<String> = std::env::args().skip(1).collect();
    for w in args.chunks(2) {
        let v: usize = w.get(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            eprintln!("usage: hashbench [--mib N] [--piece BYTES] [--repeat N]");
            std::process::exit(2)
        });
        match w[0].as_str() {
            "--mib" => mib = v,
            "--piece" => piece = v.max(1),
            "--repeat" => repeat = v.max(1),
            _ => {
                eprintln!("usage: hashbench [--mib N] [--piece BYTES] [--repeat N]");
                std::process::exit(2)
            }
        }
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let data: Vec<u8> = (0..mib << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let payload = 1 << 20;
    let best = |f: &dyn Fn() -> u64| {
        (0..repeat)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let batched = best(&|| {
        let mut acc = 0u64;
        for p in data.chunks(payload) {
            let mut h = PayloadHasher::with_len_hint(p.len() as u64);
            for c in p.chunks(piece) {
                h.update(c);
            }
            acc ^= h.finish().digest[0] as u64;
        }
        acc
    });
    let single = best(&|| {
        let mut acc = 0u64;
        for b in data.chunks(4096) {
            acc ^= blake3::hash(b).as_bytes()[0] as u64;
        }
        acc
    });
    let mb = data.len() as f64 / 1e6;
    println!(
        "{{\"mib\": {mib}, \"piece\": {piece}, \"payload_hasher_mb_s\": {:.0}, \"blake3_hash_per_block_mb_s\": {:.0}, \"ratio\": {:.2}}}",
        mb / batched,
        mb / single,
        single / batched
    );
}
