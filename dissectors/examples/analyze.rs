//! Profiling driver: runs the engine on capture files as `smbwire analyze` does (no Python),
//! and prints the result's JSON to stdout. For callgrind / perf:
//!
//! cargo build --release --example analyze -p smbwire-dissectors
//! valgrind --tool=callgrind target/release/examples/analyze FILE... > /dev/null
//!
//! An optional first argument `--config JSON` passes the analysis configuration
//! (`pipeline::Config::from_json`).

use smbwire_dissectors::parallel::analyze_files;
use smbwire_dissectors::pipeline::Config;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut config = Config::default();
    if args.first().map(String::as_str) == Some("--config") && args.len() >= 2 {
        config = Config::from_json(&args[1]).unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2)
        });
        args.drain(..2);
    }
    if args.is_empty() {
        eprintln!("usage: analyze [--config JSON] FILE...");
        std::process::exit(2);
    }
    match analyze_files(&args, &config, None, &mut |_, _| true) {
        Ok(r) => println!("{}", serde_json::to_string(&r).expect("serialisable")),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
