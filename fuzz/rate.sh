#!/usr/bin/env bash
# Executions per CPU-second of each fuzz target (the README's "Fuzzing" table): libFuzzer from
# the target's seeds (a fresh copy), SECONDS of wall time, its own executed-units count divided
# by the CPU time the process got (user + system), so the figure holds on a busy machine too.
#   fuzz/rate.sh BIN_DIR [SECONDS] [TARGET...]
#   BIN_DIR: e.g. fuzz/target/x86_64-unknown-linux-gnu/release (ASan, `cargo fuzz build -O`)
set -u
cd "$(dirname "$0")"
bin=$1; secs=${2:-15}; shift $(( $# >= 2 ? 2 : 1 ))
targets=${*:-capture_reader wire_decode pipeline_tcp pipeline_roce text_inputs xca_lznt1 xca_lz77 xca_lz77_huffman xca_roundtrip ledger_inputs live_frames}
printf 'target\texecuted\tcpu_seconds\texec_per_cpu_second\n'
for t in $targets; do
    work=$(mktemp -d)
    cp corpus/$t/* "$work/"
    log=$(mktemp)
    /usr/bin/time -f 'cpu %U %S' "$bin/$t" "$work" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 >"$log" 2>&1
    n=$(grep -m1 '^stat::number_of_executed_units' "$log" | awk '{print $2}')
    cpu=$(grep '^cpu ' "$log" | awk '{print $2 + $3}')
    printf '%s\t%s\t%s\t%.0f\n' "$t" "$n" "$cpu" "$(echo "$n / $cpu" | bc -l)"
    rm -rf "$work" "$log"
done
