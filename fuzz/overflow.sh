#!/usr/bin/env bash
# Every fuzz target built with debug assertions and overflow checks (`cargo fuzz build -O -a
# -s none`): an arithmetic overflow or a failed debug_assert! is a crash here, while the
# campaign's release builds wrap silently. Each target first runs every input of its corpora
# (the repository's seeds, and DIR/corpus/<target> of a long campaign when there is one), then
# fuzzes for SECONDS. New inputs go to a temporary directory; a crash leaves its input in
# DIR/artifacts-overflow/<target>/ and ends the run with status 1.
#   fuzz/overflow.sh [SECONDS] [DIR] [TARGET...]     (make fuzz-overflow)
set -u
cd "$(dirname "$0")"
# Idle CPU only, as fuzz/long.sh: nice the scheduler autogroup too (run it with setsid, so
# the autogroup is its own and not the caller's session's).
if [ -w /proc/self/autogroup ]; then echo 19 > /proc/self/autogroup 2>/dev/null || true; fi
secs=${1:-60}; dir=${2:-${FUZZ_LONG_DIR:-$HOME/smbwire-fuzzlong}}; shift $(( $# >= 2 ? 2 : $# ))
targets=${*:-xca_lznt1 xca_lz77 xca_lz77_huffman text_inputs capture_reader wire_decode pipeline_roce pipeline_tcp xca_roundtrip ledger_inputs live_frames}
mkdir -p "$dir"
nice -n 19 cargo +nightly fuzz build -O -a -s none --target-dir "$dir/target-overflow" >"$dir/build-overflow.log" 2>&1 \
    || { tail -5 "$dir/build-overflow.log"; exit 1; }
bin="$dir/target-overflow/x86_64-unknown-linux-gnu/release"
printf 'target\tcorpus_inputs\texecuted\tseconds\tresult\n'
status=0
for t in $targets; do
    work=$(mktemp -d); mkdir -p "$dir/artifacts-overflow/$t"
    corpora=(corpus/$t); [ -d "$dir/corpus/$t" ] && corpora+=("$dir/corpus/$t")
    inputs=$(find "${corpora[@]}" -type f | wc -l)
    log="$dir/overflow-$t.log"
    start=$(date +%s)
    nice -n 19 "$bin/$t" "$work" "${corpora[@]}" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=60 \
        -print_final_stats=1 -artifact_prefix="$dir/artifacts-overflow/$t/" >"$log" 2>&1
    rc=$?
    n=$(grep -m1 '^stat::number_of_executed_units' "$log" | awk '{print $2}')
    result=$([ $rc -eq 0 ] && echo "no crash" || echo "CRASH (exit $rc, $log)")
    [ $rc -eq 0 ] || status=1
    printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$inputs" "${n:-0}" "$(( $(date +%s) - start ))" "$result"
    rm -rf "$work"
done
exit $status
