#!/usr/bin/env python3
"""The README's long-run table from the results file `fuzz/long.sh` writes (one line per worker
session): executions per target and sanitizer as libFuzzer counted them, crashes, the rate, dates.

    python3 fuzz/long_table.py /work/fuzzlong/results.tsv [--goal 100000000] [--asan-goal 10000000]
                               [--slow /work/fuzzlong/slow-units.tsv]

`--goal` is the campaign's goal per target without a sanitizer, `--asan-goal` the ASan
campaign's (README, "Fuzzing"): each row's "goal reached" is against its own sanitizer's goal.
`--slow` is the slow units' file `long.sh` writes (default: slow-units.tsv beside the results,
when there): the last column counts them per target and sanitizer, and how many of them took
at least a second when replayed (the others were the host's stalls); "-" without the file.
"""
import argparse
import csv
import os
from collections import OrderedDict

# Exit values in results.tsv that are not findings: a clean end; 72, libFuzzer's exit on SIGINT
# (the campaign was stopped); STALL, a timeout whose input ran well within the limit when
# replayed (`long.sh`, `stalled`), counted apart.
STALL = "70:stall"
NOT_FINDINGS = ("0", "72", STALL)


def slow_counts(path: str | None) -> dict | None:
    """(target, sanitizer) -> [slow units, of them replayed in >= 1 s] from slow-units.tsv."""
    if path is None or not os.path.exists(path):
        return None
    counts: dict = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f, delimiter="\t"):
            c = counts.setdefault((r["target"], r["sanitizer"]), [0, 0])
            c[0] += 1
            try:
                c[1] += float(r["replay_s"]) >= 1.0
            except ValueError:  # "-": not replayed (the campaign was stopping); counts as slow
                c[1] += 1
    return counts


def table(path: str, goal: int, asan_goal: int | None = None, slow: str | None = None) -> str:
    if slow is None:
        slow = os.path.join(os.path.dirname(path), "slow-units.tsv")
    slows = slow_counts(slow)
    rows = OrderedDict()
    with open(path, newline="") as f:
        for r in csv.DictReader(f, delimiter="\t"):
            k = (r["target"], r["sanitizer"])
            a = rows.setdefault(k, {"n": 0, "crash": 0, "stall": 0, "secs": {}, "first": r["start_utc"], "last": r["end_utc"], "commits": set(), "workers": set()})
            a["n"] += int(r["executed"] or 0)
            a["crash"] += int(r["exit"] not in NOT_FINDINGS)
            a["stall"] += int(r["exit"] == STALL)
            # Workers of one session run side by side: a session's wall time counts once.
            a["secs"][r["start_utc"]] = int(r["seconds"])
            a["last"] = max(a["last"], r["end_utc"])
            a["commits"].add(r["commit"])
            a["workers"].add(r["worker"])
    out = [
        "| target | sanitizer | executions | goal reached | crashes | stalls (timeouts not reproduced) | exec/s (all workers) | from .. to (UTC) | commit | slow units (replayed >= 1 s) |",
        "|---|---|---:|---|---:|---:|---:|---|---|---:|",
    ]
    for (t, san), a in rows.items():
        secs = sum(a["secs"].values())
        rate = f"{a['n'] / secs:,.0f}" if secs else "-"
        g = asan_goal if san == "address" and asan_goal is not None else goal
        reached = "yes" if a["n"] >= g else f"no ({a['n'] / g:.1%})"
        sl = "-" if slows is None else "{} ({})".format(*slows.get((t, san), [0, 0]))
        out.append(
            f"| {t} | {san} | {a['n']:,} | {reached} | {a['crash']} | {a['stall']} | {rate} | {a['first'][:16]} .. {a['last'][:16]} | {', '.join(sorted(a['commits']))} | {sl} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("results")
    p.add_argument("--goal", type=int, default=100_000_000)
    p.add_argument("--asan-goal", type=int, default=10_000_000)
    p.add_argument("--slow", default=None, help="slow-units.tsv (default: beside the results)")
    a = p.parse_args()
    print(table(a.results, a.goal, a.asan_goal, a.slow))
