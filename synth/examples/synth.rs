//! `cargo run --release --example synth -- SPEC_JSON OUT.pcap` prints the Truth JSON.
//! The same as `smbwire._core.synth(spec_json, out_path)`, for use without the Python build.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: synth SPEC_JSON OUT.pcap");
        std::process::exit(2);
    }
    match smbwire_synth::synth_json(&args[1], &args[2]) {
        Ok(truth) => println!("{truth}"),
        Err(e) => {
            eprintln!("synth: {e}");
            std::process::exit(1);
        }
    }
}
