"""fuzz/long.sh on a timeout: an input that runs quickly when replayed was a stall of the host
(a paused or starved process) and the campaign goes on; one that times out again is a finding
and ends the target's campaign. A slow unit libFuzzer reports is replayed and recorded in
slow-units.tsv, and the campaign goes on. A target at its goal has its corpus replayed once through its
ASan build, unless the corpus is not on this machine. Run with stand-ins for the libFuzzer
binaries (shell scripts that answer like them), so no fuzz build is needed."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The stand-in. Fuzzing (called with -artifact_prefix=): the first session of worker 0 writes a
# timeout input and exits 70 as libFuzzer does; every other session runs what it was asked.
# Replaying (called with an input file): exits 0, or 70 when REPLAY_TIMES_OUT is set.
FAKE = r"""#!/usr/bin/env bash
runs=0; prefix=""; file=""
for a in "$@"; do
    case "$a" in
        -runs=*) runs=${a#-runs=} ;;
        -artifact_prefix=*) prefix=${a#-artifact_prefix=} ;;
        -*) ;;
        *) [ -f "$a" ] && file=$a ;;
    esac
done
state=$(dirname "$0")/../../state
if [ -z "$prefix" ]; then
    echo "replayed $file" >>"$state.replays"
    [ -n "${REPLAY_TIMES_OUT:-}" ] && { echo "==1== ERROR: libFuzzer: timeout after 7 seconds"; exit 70; }
    exit 0
fi
# Workers start together: one at a time through the count.
exec 9>>"$state.lock"; flock 9
n=$(cat "$state" 2>/dev/null || echo 0); echo $((n + 1)) >"$state"
flock -u 9; exec 9>&-
if [ "$n" -eq 0 ] && [ -n "${FAKE_SLOW:-}" ]; then
    printf 'y' >"${prefix}slow-unit-feedbeef"
    echo "Slowest unit: 12 s:"
    echo "artifact_prefix='$prefix'; Test unit written to ${prefix}slow-unit-feedbeef"
    echo "stat::number_of_executed_units: $runs"
    echo "stat::peak_rss_mb: 30"
    exit 0
fi
if [ "$n" -eq 1 ] && [ -n "${FAKE_HOLD:-}" ]; then
    # The second worker of the first session: runs until interrupted, then prints its stats and
    # exits 72, as libFuzzer does (in Python: a shell run in the background cannot trap the
    # SIGINT it was started ignoring; libFuzzer installs its handler anyway).
    exec python3 -c '
import signal, sys, time
def stop(*_):
    print("stat::number_of_executed_units: 5"); print("stat::peak_rss_mb: 30"); sys.exit(72)
signal.signal(signal.SIGINT, stop)
open(sys.argv[1], "w").write("running")
while True:
    time.sleep(0.05)
' "$state.held"
fi
if [ "$n" -eq 0 ]; then
    printf 'x' >"${prefix}timeout-0123abcd"
    echo "ALARM: working on the last Unit for 300 seconds"
    echo "artifact_prefix='$prefix'; Test unit written to ${prefix}timeout-0123abcd"
    echo "==1== ERROR: libFuzzer: timeout after 300 seconds"
    echo "stat::number_of_executed_units: 7"
    echo "stat::peak_rss_mb: 30"
    exit 70
fi
echo "stat::number_of_executed_units: $runs"
echo "stat::peak_rss_mb: 30"
exit 0
"""


def campaign_dir(tmp_path: Path, workers: int = 1, build: str = "none", **fake_env: str) -> tuple[Path, dict]:
    """A campaign directory with the stand-in for target `t` as build `build` (bin/<build>/t),
    and the environment to run long.sh on it with `workers` workers (`fake_env`: the
    stand-in's switches)."""
    out = tmp_path / "long"
    (out / "bin" / build).mkdir(parents=True)
    (out / "seeds" / "t").mkdir(parents=True)
    (out / "seeds" / "t" / "seed").write_bytes(b"s")
    fake = out / "bin" / build / "t"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    (out / "bin" / build / "COMMIT").write_text("abc1234\n")
    env = dict(os.environ, FUZZ_PREBUILT="1", FUZZ_LONG_DIR=str(out), FUZZ_TARGETS="t", FUZZ_RUNS="40",
               FUZZ_SESSION_RUNS="10", FUZZ_WORKERS=str(workers))
    for k in ("REPLAY_TIMES_OUT", "FAKE_SLOW", "FAKE_HOLD"):
        env.pop(k, None)
    env.update(fake_env)
    return out, env


def results(out: Path) -> list[dict]:
    with open(out / "results.tsv", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def campaign(tmp_path: Path, replay_times_out: bool, slow: bool = False) -> tuple[int, list[dict], Path]:
    switches = {"FAKE_SLOW": "1"} if slow else {}
    if replay_times_out:
        switches["REPLAY_TIMES_OUT"] = "1"
    out, env = campaign_dir(tmp_path, **switches)
    # Its own session: the script renices its scheduler autogroup, which is not the tests'.
    p = subprocess.run(["bash", str(ROOT / "fuzz" / "long.sh")], env=env, capture_output=True, text=True,
                       timeout=120, start_new_session=True)
    return p.returncode, results(out), out


def test_timeout_that_does_not_reproduce_is_a_stall_and_the_campaign_goes_on(tmp_path):
    rc, rows, out = campaign(tmp_path, replay_times_out=False)
    assert rc == 0
    assert [r["exit"] for r in rows] == ["70:stall", "0", "0", "0", "0"]
    assert sum(int(r["executed"]) for r in rows) == 40  # 7 before the stall, then sessions to the goal
    arts = sorted(p.name for p in (out / "artifacts" / "t").iterdir())
    assert arts == ["stall-0123abcd"]
    assert (out / "state.replays").read_text().count("replayed") == 1
    assert list(out.glob("t.stall.*.w0.log")) and not list(out.glob("t.crash.*"))


def test_a_build_without_comparison_tracing_is_a_campaign_of_its_own(tmp_path):
    # The traced build of `t` already reached the goal; the untraced one (only its binary is
    # there at first) runs to the goal on its own, recorded as "none+nocmp", its stall replayed with its
    # own binary.
    out, env = campaign_dir(tmp_path, build="none+nocmp", FUZZ_TRACE_COMPARES="0")
    header = "start_utc\tend_utc\ttarget\tsanitizer\tworker\truns_asked\texecuted\texit\tseconds\tpeak_rss_mb\tcommit\thost\n"
    (out / "results.tsv").write_text(header + "a\tb\tt\tnone\t0\t40\t40\t0\t1\t30\tabc1234\th\n")
    p = subprocess.run(["bash", str(ROOT / "fuzz" / "long.sh")], env=env, capture_output=True, text=True,
                       timeout=120, start_new_session=True)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = results(out)
    assert [(r["sanitizer"], r["exit"]) for r in rows[1:]] == [("none+nocmp", "70:stall")] + [("none+nocmp", "0")] * 4
    assert sum(int(r["executed"]) for r in rows[1:]) == 40
    assert (out / "state.replays").read_text().count("replayed") == 1
    # Traced: the goal was reached, nothing runs.
    (out / "bin" / "none").mkdir()
    for name in ("t", "COMMIT"):
        (out / "bin" / "none" / name).write_bytes((out / "bin" / "none+nocmp" / name).read_bytes())
    (out / "bin" / "none" / "t").chmod(0o755)
    env["FUZZ_TRACE_COMPARES"] = "1"
    p = subprocess.run(["bash", str(ROOT / "fuzz" / "long.sh")], env=env, capture_output=True, text=True,
                       timeout=120, start_new_session=True)
    assert p.returncode == 0 and len(results(out)) == 6


def test_timeout_that_reproduces_is_a_finding_and_stops_the_target(tmp_path):
    rc, rows, out = campaign(tmp_path, replay_times_out=True)
    assert rc == 1
    assert [r["exit"] for r in rows] == ["70"]
    assert sorted(p.name for p in (out / "artifacts" / "t").iterdir()) == ["timeout-0123abcd"]
    assert list(out.glob("t.crash.*.w0.log")) and not list(out.glob("t.stall.*"))


def test_a_stall_before_the_campaign_is_stopped_is_still_a_stall(tmp_path):
    # Two workers: the first times out (a stall: its input replays fast) while the second runs
    # on; then the campaign is stopped. The timeout came before the stop, so it is checked as
    # any other (it was recorded as a plain 70, a crash in the README's table, before).
    out, env = campaign_dir(tmp_path, workers=2, FAKE_HOLD="1")
    p = subprocess.Popen(["bash", str(ROOT / "fuzz" / "long.sh")], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not ((out / "state.held").exists() and list((out / "artifacts" / "t").glob("timeout-*"))):
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    rows = results(out)
    assert rc == 130
    # (Which worker times out depends on which starts first.)
    assert sorted((r["exit"], r["executed"]) for r in rows) == [("70:stall", "7"), ("72", "5")]
    assert sorted(x.name for x in (out / "artifacts" / "t").iterdir()) == ["stall-0123abcd"]
    assert len(list(out.glob("t.stall.*.w*.log"))) == 1 and not list(out.glob("t.crash.*"))


def test_a_slow_unit_is_replayed_and_recorded_and_the_campaign_goes_on(tmp_path):
    rc, rows, out = campaign(tmp_path, replay_times_out=False, slow=True)
    assert rc == 0
    assert [r["exit"] for r in rows] == ["0"] * 4
    with open(out / "slow-units.tsv", newline="") as f:
        slow = list(csv.DictReader(f, delimiter="\t"))
    unit = out / "artifacts" / "t" / "slow-unit-feedbeef"
    assert [(r["target"], r["sanitizer"], r["worker"], r["reported_s"], r["file"], r["commit"]) for r in slow] == [
        ("t", "none", "0", "12", str(unit), "abc1234")]
    assert 0 <= float(slow[0]["replay_s"]) < 10
    assert (out / "state.replays").read_text() == f"replayed {unit}\n"
    assert f"slow unit: 12 s as libFuzzer timed it, {slow[0]['replay_s']} s replayed: {unit}" in (out / "t.log").read_text()
    # A campaign without slow units writes only the header.
    rc, _, out = campaign(tmp_path / "quiet", replay_times_out=False)
    assert (out / "slow-units.tsv").read_text().count("\n") == 1


# An ASan build's stand-in: replays the inputs of the directory it is given, 0 unless one is
# named "crash".
FAKE_ASAN = r"""#!/usr/bin/env bash
for a in "$@"; do
    case "$a" in
        -*) ;;
        *) [ -d "$a" ] && ls "$a" | grep -qx crash && { echo "==1==ERROR: AddressSanitizer"; exit 1; } ;;
    esac
done
exit 0
"""


def replay_campaign(tmp_path: Path, corpus: list[str]) -> tuple[int, list[list[str]], str]:
    """A target already at its goal, an ASan stand-in beside it, a corpus of `corpus` files."""
    out = tmp_path / "long"
    (out / "bin" / "none").mkdir(parents=True)
    (out / "bin" / "address").mkdir(parents=True)
    (out / "seeds" / "t").mkdir(parents=True)
    (out / "corpus" / "t").mkdir(parents=True)
    for name in corpus:
        (out / "corpus" / "t" / name).write_bytes(b"x")
    for san, text in (("none", FAKE), ("address", FAKE_ASAN)):
        b = out / "bin" / san / "t"
        b.write_text(text)
        b.chmod(0o755)
    (out / "bin" / "none" / "COMMIT").write_text("abc1234\n")
    header = "start_utc\tend_utc\ttarget\tsanitizer\tworker\truns_asked\texecuted\texit\tseconds\tpeak_rss_mb\tcommit\thost\n"
    (out / "results.tsv").write_text(header + "a\tb\tt\tnone\t0\t40\t40\t0\t1\t30\tabc1234\th\n")
    env = dict(os.environ, FUZZ_PREBUILT="1", FUZZ_LONG_DIR=str(out), FUZZ_TARGETS="t", FUZZ_RUNS="40",
               FUZZ_SESSION_RUNS="10", FUZZ_WORKERS="1")
    p = subprocess.run(["bash", str(ROOT / "fuzz" / "long.sh")], env=env, capture_output=True, text=True,
                       timeout=120, start_new_session=True)
    rec = out / "asan-replay.tsv"
    lines = [l.split("\t") for l in rec.read_text().splitlines()] if rec.exists() else []
    return p.returncode, lines, (out / "t.log").read_text() if (out / "t.log").exists() else ""


def test_a_finished_target_s_corpus_is_replayed_under_asan(tmp_path):
    rc, lines, _ = replay_campaign(tmp_path, ["a", "b", "c"])
    assert rc == 0
    assert [(l[0], l[2], l[3]) for l in lines] == [("t", "3", "0")]


def test_an_asan_finding_in_the_replay_fails_the_campaign(tmp_path):
    rc, lines, _ = replay_campaign(tmp_path, ["a", "crash"])
    assert rc == 1
    assert [(l[0], l[2], l[3]) for l in lines] == [("t", "2", "1")]


def test_an_empty_corpus_is_not_recorded_as_replayed(tmp_path):
    rc, lines, log = replay_campaign(tmp_path, [])
    assert rc == 0
    assert lines == []
    assert "not replayed" in log
