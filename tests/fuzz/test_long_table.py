"""fuzz/long_table.py, the README's long-run table: executions summed over sessions and workers,
libFuzzer's interrupt exit (72) not counted as a crash nor a timeout that did not reproduce
(70:stall, counted apart), a session's wall time counted once."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("long_table", ROOT / "fuzz" / "long_table.py")
long_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(long_table)

HEADER = "start_utc\tend_utc\ttarget\tsanitizer\tworker\truns_asked\texecuted\texit\tseconds\tpeak_rss_mb\tcommit\thost\n"


def line(start, target, san, worker, executed, code, secs, commit="abc1234"):
    return f"{start}\t{start}\t{target}\t{san}\t{worker}\t1000\t{executed}\t{code}\t{secs}\t30\t{commit}\thost\n"


def rows(tmp_path, lines, goal, asan_goal=None, slow=None):
    p = tmp_path / "results.tsv"
    p.write_text(HEADER + "".join(lines))
    out = long_table.table(str(p), goal, asan_goal, slow).splitlines()
    return {r.split("|")[1].strip() + "/" + r.split("|")[2].strip(): [c.strip() for c in r.split("|")[1:-1]] for r in out[2:]}


def test_sums_workers_and_sessions_and_counts_time_once(tmp_path):
    r = rows(tmp_path, [
        line("2026-01-01T00:00:00Z", "a", "none", 0, 1000, 0, 10),
        line("2026-01-01T00:00:00Z", "a", "none", 1, 1000, 0, 10),
        line("2026-01-01T00:00:10Z", "a", "none", 0, 300, 72, 5, commit="def5678"),
        line("2026-01-01T00:00:10Z", "a", "none", 1, 200, 72, 5, commit="def5678"),
    ], goal=2500)
    # target, sanitizer, executions, goal reached, crashes, stalls, exec/s, dates, commits
    assert r["a/none"][2] == "2,500"
    assert r["a/none"][3] == "yes"
    assert r["a/none"][4] == "0"  # 72 is the interrupt exit of a stopped campaign
    assert r["a/none"][5] == "0"
    assert r["a/none"][6] == "167"  # 2,500 executions over 15 s of wall time, not 30
    assert r["a/none"][8] == "abc1234, def5678"


def test_crash_counted_and_goal_not_reached(tmp_path):
    r = rows(tmp_path, [
        line("2026-01-01T00:00:00Z", "b", "address", 0, 40, 77, 2),
        line("2026-01-01T00:00:00Z", "b", "none", 0, 50, 0, 2),
    ], goal=100)
    assert r["b/address"][4] == "1"
    assert r["b/address"][3] == "no (40.0%)"
    assert r["b/none"][3] == "no (50.0%)"
    assert r["b/none"][4] == "0"


def test_stall_counted_apart_from_crashes(tmp_path):
    r = rows(tmp_path, [
        line("2026-01-01T00:00:00Z", "c", "none", 0, 40, "70:stall", 2),
        line("2026-01-01T00:00:00Z", "c", "none", 1, 40, 70, 2),
        line("2026-01-01T00:00:02Z", "c", "none", 0, 40, "70:stall", 2),
    ], goal=100)
    assert r["c/none"][4] == "1"  # the timeout without the replay's verdict is a finding
    assert r["c/none"][5] == "2"


def test_asan_rows_reach_their_own_goal(tmp_path):
    """The ASan campaign's goal is 10^7 against 10^8 without a sanitizer: each row is measured
    against its sanitizer's goal."""
    lines = [
        line("2026-01-01T00:00:00Z", "d", "address", 0, 60, 0, 2),
        line("2026-01-01T00:00:00Z", "d", "none", 0, 60, 0, 2),
        line("2026-01-01T00:00:00Z", "e", "address", 0, 30, 72, 2),
    ]
    r = rows(tmp_path, lines, goal=100, asan_goal=50)
    assert r["d/address"][3] == "yes"
    assert r["d/none"][3] == "no (60.0%)"
    assert r["e/address"][3] == "no (60.0%)"
    # Without an ASan goal every row is measured against --goal, as before.
    assert rows(tmp_path, lines, goal=100)["d/address"][3] == "no (60.0%)"


SLOW_HEADER = "start_utc\ttarget\tsanitizer\tworker\treported_s\treplay_s\tfile\tcommit\n"


def test_slow_units_counted_with_those_that_replay_slowly(tmp_path):
    """The last column: slow units per target and sanitizer, and in brackets those that took a
    second or more replayed (or were not replayed); "-" when the campaign has no slow-units file."""
    lines = [line("2026-01-01T00:00:00Z", "f", "none", 0, 60, 0, 2), line("2026-01-01T00:00:00Z", "g", "none", 0, 60, 0, 2)]
    (tmp_path / "slow-units.tsv").write_text(SLOW_HEADER + "".join(
        f"2026-01-01T00:00:00Z\tf\tnone\t0\t12\t{r}\t/x/slow-unit-{i}\tabc1234\n" for i, r in enumerate(["0.004", "3.500", "-"])))
    r = rows(tmp_path, lines, goal=100)  # found beside the results
    assert r["f/none"][9] == "3 (2)"
    assert r["g/none"][9] == "0 (0)"
    assert rows(tmp_path, lines, goal=100, slow=str(tmp_path / "none.tsv"))["f/none"][9] == "-"
