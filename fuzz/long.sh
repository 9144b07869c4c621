#!/usr/bin/env bash
# The long fuzzing run (`make fuzz-long`): every target, one at a time in the order given, to
# FUZZ_RUNS executions as counted by libFuzzer itself (stat::number_of_executed_units, summed
# over sessions and workers), at `nice -n 19` so it only takes idle CPU.
#
# Everything lives in FUZZ_LONG_DIR, outside the repository:
#   bin/<sanitizer>/<target>   the binaries of this run (copied, so rebuilding the repo does not
#                              change a running campaign)
#   corpus/<target>/           the growing corpus; seeds/<target>/: fuzz/corpus/<target>, read only
#   artifacts/<target>/        crashing, leaking or timing-out inputs
#   <target>.log               per session: the worker logs' last progress line and final stats
#   <target>.w<i>.log          the running session's full libFuzzer output, worker i
#   results.tsv                one line per worker-session (exit: libFuzzer's code, or
#                              "70:stall" for a timeout that did not reproduce, see `stalled`);
#                              `fuzz/long_table.py` makes the
#                              README table from it
#   slow-units.tsv             one line per slow unit libFuzzer reported (an input that took
#                              over FUZZ_SLOW_UNIT s, default 10), with its time replayed once
#                              (`slow_units`): not a crash, so the campaign goes on, but a few KB
#                              that take seconds are a finding to look at
# A campaign is resumable: it starts from the executions results.tsv already holds for the
# target and sanitizer. A session is FUZZ_SESSION_RUNS executions per worker (so an interrupted
# campaign loses at most one session's count); SIGTERM/SIGINT to this script ends the running
# session cleanly (libFuzzer prints its final stats on SIGINT, and they are recorded).
# The per-input timeout is 60 s of wall time (libFuzzer's timer is not CPU time): at nice 19 on
# a busy machine an input can wait seconds for a core; the slowest seen take well under 1 s.
set -u
cd "$(dirname "$0")"
# `nice` only orders processes within one scheduler autogroup (Linux, CONFIG_SCHED_AUTOGROUP:
# one per session): a campaign started in its own session would otherwise take half the
# machine from the user's session whatever its nice value. Nice its autogroup too.
if [ -w /proc/self/autogroup ]; then echo 19 > /proc/self/autogroup 2>/dev/null || true; fi
RUNS=${FUZZ_RUNS:-100000000}
SESSION=${FUZZ_SESSION_RUNS:-2000000}
WORKERS=${FUZZ_WORKERS:-2}
# Per-input limit (s); a timeout's input replayed within a tenth of it was a stall (`stalled`).
TIMEOUT=60
STALL_LIMIT=$((TIMEOUT / 10))
# libFuzzer's -report_slow_units: an input slower than this (s) is written as slow-unit-<hash>.
SLOW_UNIT=${FUZZ_SLOW_UNIT:-10}
SAN=${FUZZ_SANITIZER:-none}
# FUZZ_TRACE_COMPARES=0: build without libFuzzer's comparison tracing (`cargo fuzz build
# --no-trace-compares`). Its runs are a build of their own, "<sanitizer>+nocmp" (bin/, target-,
# the sanitizer column of results.tsv and slow-units.tsv), counted apart from the traced build's.
# For targets whose comparisons are between data, not against values an input must hit: the
# compressors' round trip (`xca_roundtrip`) spent three quarters of its time in the comparison
# hooks, and ran 4x faster without them (README, "Fuzzing").
if [ "${FUZZ_TRACE_COMPARES:-1}" = 0 ]; then BUILD=$SAN+nocmp; NOCMP=--no-trace-compares; else BUILD=$SAN; NOCMP=; fi
OUT=${FUZZ_LONG_DIR:?set FUZZ_LONG_DIR to a directory outside the repository}
TARGETS=${FUZZ_TARGETS:?set FUZZ_TARGETS (the order is the order of the run)}
mkdir -p "$OUT/bin/$BUILD" "$OUT/target-$BUILD"
RESULTS=$OUT/results.tsv
[ -f "$RESULTS" ] || printf 'start_utc\tend_utc\ttarget\tsanitizer\tworker\truns_asked\texecuted\texit\tseconds\tpeak_rss_mb\tcommit\thost\n' >"$RESULTS"

# Build once, copy the binaries and the seeds out of the repository (a campaign outlives
# rebuilds and checkouts of it). FUZZ_PREBUILT=1: use what an earlier run copied there (the
# repository is then not needed at all: the script may run from a copy).
if [ "${FUZZ_PREBUILT:-0}" = 1 ]; then
    for t in $TARGETS; do [ -x "$OUT/bin/$BUILD/$t" ] && [ -d "$OUT/seeds/$t" ] || { echo "no $OUT/bin/$BUILD/$t or seeds"; exit 1; }; done
    COMMIT=$(cat "$OUT/bin/$BUILD/COMMIT")
else
    nice -n 19 cargo +nightly fuzz build -O -s "$SAN" $NOCMP --target-dir "$OUT/target-$BUILD" || exit 1
    for t in $TARGETS; do
        cp "$OUT/target-$BUILD/x86_64-unknown-linux-gnu/release/$t" "$OUT/bin/$BUILD/$t" || exit 1
        mkdir -p "$OUT/seeds/$t" && cp corpus/$t/* "$OUT/seeds/$t/" || exit 1
    done
    COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- ../dissectors fuzz_targets || echo +dirty)
    echo "$COMMIT" >"$OUT/bin/$BUILD/COMMIT"
fi
HOST="$(nproc)cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//;s/  */ /g')"

pids=()
stop=0
crashes=0
rm -f "$OUT/stopped"
# (Its own loop variable: the trap runs inside the loop below that waits for each `p`.)
trap 'stop=1; for q in "${pids[@]}"; do kill -INT "$q" 2>/dev/null; done' INT TERM

executed_so_far() {
    awk -F'\t' -v t="$1" -v s="$BUILD" 'NR > 1 && $3 == t && $4 == s { n += $7 } END { print n + 0 }' "$RESULTS"
}

# After a target's campaign without a sanitizer reaches FUZZ_RUNS: its whole corpus once through
# the ASan build (bin/address/<target>, when there), so the inputs found without ASan are checked
# with it. One line per target in asan-replay.tsv (target, time, inputs, exit code). A corpus
# that is not here (grown on another machine: corpus/<target> empty) is not replayed, and no line
# says it was: the target's log says so.
asan_replay() {
    local t=$1 bin="$OUT/bin/address/$1" rec="$OUT/asan-replay.tsv"
    [ "$SAN" = none ] && [ -x "$bin" ] || return 0
    grep -q "^$t"$'\t' "$rec" 2>/dev/null && return 0
    local n code
    n=$(ls "$OUT/corpus/$t" 2>/dev/null | wc -l)
    if [ "$n" -eq 0 ]; then
        echo "== ASan replay: no corpus of $t here (grown elsewhere?), not replayed" >>"$OUT/$t.log"
        return 0
    fi
    nice -n 19 "$bin" -runs=0 -rss_limit_mb=2048 -timeout=$TIMEOUT -artifact_prefix="$OUT/artifacts/$t/asan-replay-" \
        "$OUT/corpus/$t" >"$OUT/$t.asan-replay.log" 2>&1
    code=$?
    [ $stop -eq 1 ] && return 0
    printf '%s\t%s\t%s\t%s\n' "$t" "$(date -u +%FT%TZ)" "$n" "$code" >>"$rec"
    echo "== ASan replay of the corpus ($n inputs): exit $code" >>"$OUT/$t.log"
    [ "$code" -eq 0 ] || crashes=$((crashes + 1))
}

# Was the timeout in worker log $2 of target $1 a stall? Its input (the "Test unit written to"
# line) replayed STALL_REPLAYS times in a row, each within STALL_LIMIT: then yes,
# and the input is renamed stall-<hash>. A run of the input that is slow, fails or cannot be
# found: no (a finding, which stops the target's campaign as before).
STALL_REPLAYS=${FUZZ_STALL_REPLAYS:-3}
stalled() {
    local t=$1 log=$2 unit
    unit=$(sed -n 's/.*Test unit written to \(.*timeout-[0-9a-f]*\).*/\1/p' "$log" | tail -1)
    [ -n "$unit" ] && [ -f "$unit" ] || return 1
    timeout $((STALL_REPLAYS * STALL_LIMIT + 10)) "$OUT/bin/$BUILD/$t" -runs="$STALL_REPLAYS" -timeout=$STALL_LIMIT -rss_limit_mb=2048 "$unit" \
        >>"$log.replay" 2>&1 || return 1
    mv "$unit" "$(dirname "$unit")/stall-${unit##*timeout-}"
    echo "== the timeout's input ran $STALL_REPLAYS times within $STALL_LIMIT s each: a stall, not a finding" >>"$log"
}

# The slow units worker log $2 of target $1 reports ("Slowest unit: N s:", then the file it
# wrote): each replayed once by this campaign's binary, and recorded in slow-units.tsv with both
# times (a unit that replays fast was the host's stall: a busy or paused machine) and in the
# target's log. Four slow units went unreported for a day before this (README, Fuzzing).
slow_units() {
    local t=$1 log=$2 start=$3 w=$4 rec="$OUT/slow-units.tsv" secs unit t0 ms r
    [ -f "$rec" ] || printf 'start_utc\ttarget\tsanitizer\tworker\treported_s\treplay_s\tfile\tcommit\n' >"$rec"
    awk '/^Slowest unit: /{s=$3} /Test unit written to .*slow-unit-/{sub(/.*Test unit written to /, ""); print s "\t" $0}' "$log" |
        while IFS=$'\t' read -r secs unit; do
            r=-
            if [ -f "$unit" ] && [ $stop -eq 0 ]; then
                t0=$(date +%s%N)
                timeout $((TIMEOUT * 10)) nice -n 19 "$OUT/bin/$BUILD/$t" -rss_limit_mb=2048 "$unit" >/dev/null 2>&1
                ms=$(( ($(date +%s%N) - t0) / 1000000 ))
                r=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
            fi
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$start" "$t" "$BUILD" "$w" "$secs" "$r" "$unit" "$COMMIT" >>"$rec"
            echo "== slow unit: ${secs:-?} s as libFuzzer timed it, $r s replayed: $unit" >>"$OUT/$t.log"
        done
}

for t in $TARGETS; do
    mkdir -p "$OUT/corpus/$t" "$OUT/artifacts/$t"
    while [ $stop -eq 0 ]; do
        done_=$(executed_so_far "$t")
        [ "$done_" -ge "$RUNS" ] && break
        left=$(( (RUNS - done_ + WORKERS - 1) / WORKERS ))
        per=$(( left < SESSION ? left : SESSION ))
        start=$(date -u +%FT%TZ); t0=$(date +%s)
        pids=()
        for i in $(seq 0 $((WORKERS - 1))); do
            nice -n 19 "$OUT/bin/$BUILD/$t" "$OUT/corpus/$t" "$OUT/seeds/$t" -runs="$per" \
                -artifact_prefix="$OUT/artifacts/$t/" -rss_limit_mb=2048 -timeout=$TIMEOUT \
                -report_slow_units=$SLOW_UNIT -print_final_stats=1 >"$OUT/$t.w$i.log" 2>&1 &
            pids+=($!)
        done
        codes=()
        for p in "${pids[@]}"; do
            # A trapped signal ends `wait` early, with 128 + its number: wait again for the
            # worker's own status. (Waiting until it is gone was not enough: a worker that exits
            # at once on the interrupt was gone by then, and the 143 of the interrupted wait was
            # recorded as its exit, a crash in the README's table.) Bash keeps an exited
            # worker's status, so a worker that did exit with 128 + n gives the same again.
            wait "$p"; c=$?
            while [ "$c" -gt 128 ]; do
                wait "$p"; c2=$?
                [ "$c2" -eq "$c" ] && break
                c=$c2
            done
            codes+=("$c")
        done
        pids=()
        secs=$(( $(date +%s) - t0 )); end=$(date -u +%FT%TZ)
        crashed=0
        for i in $(seq 0 $((WORKERS - 1))); do
            log=$OUT/$t.w$i.log
            n=$(grep -m1 '^stat::number_of_executed_units' "$log" | awk '{print $2}')
            rss=$(grep -m1 '^stat::peak_rss_mb' "$log" | awk '{print $2}')
            code=${codes[$i]}
            # A timeout whose input runs well within the limit when replayed was a stall of the
            # host (the process paused, or starved of CPU), not a finding: recorded as
            # "70:stall", its input kept as artifacts/<target>/stall-*, the campaign goes on.
            # Checked after a stop too: 70 is libFuzzer's timeout exit, never its interrupt's
            # (72), so a worker that timed out before the stop came had a timeout like any other.
            if [ "$code" -eq 70 ] && stalled "$t" "$log"; then code=70:stall; fi
            slow_units "$t" "$log" "$start" "$i"
            # After `stop`, a non-zero code is libFuzzer's interrupt exit (72), not a finding.
            if [ "$code" != 0 ] && [ "$code" != 70:stall ] && [ $stop -eq 0 ]; then crashed=1; fi
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$start" "$end" "$t" "$BUILD" "$i" "$per" "${n:-0}" "$code" "$secs" "${rss:-}" "$COMMIT" "$HOST" >>"$RESULTS"
            {
                echo "== $start .. $end $t build=$BUILD worker=$i runs=$per exit=$code"
                grep -E '^#[0-9]+' "$log" | tail -1
                grep -E '^stat::|ERROR|panicked|SUMMARY|Test unit written' "$log"
            } >>"$OUT/$t.log"
            if [ "$code" = 70:stall ]; then
                cp "$log" "$OUT/$t.stall.$start.w$i.log"
            elif [ "$code" != 0 ] && { [ $stop -eq 0 ] || [ "$code" = 70 ]; }; then
                cp "$log" "$OUT/$t.crash.$start.w$i.log"
            fi
        done
        # A crash ends this target's campaign (the input is in artifacts/<target>/): fix first.
        [ $crashed -eq 1 ] && { echo "$t: crash, see $OUT/artifacts/$t/" >>"$OUT/$t.log"; crashes=$((crashes + 1)); break; }
    done
    [ $stop -eq 1 ] && break
    [ "$(executed_so_far "$t")" -ge "$RUNS" ] && asan_replay "$t"
    [ $stop -eq 1 ] && break
done
# Stopped: a marker (so a script chaining campaigns stops too), exit 130. A crash: exit 1.
[ $stop -eq 1 ] && { date -u +%FT%TZ >"$OUT/stopped"; exit 130; }
[ $crashes -eq 0 ]
