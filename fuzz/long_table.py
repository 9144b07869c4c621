#!/usr/bin/env python3
"""The README's long-run table from the results file `fuzz/long.sh` writes (one line per worker
session): executions per target and sanitizer as libFuzzer counted them, crashes, the rate, dates.

    python3 fuzz/long_table.py /work/fuzzlong/results.tsv [--goal 100000000] [--asan-goal 10000000]

`--goal` is the campaign's goal per target without a sanitizer, `--asan-goal` the ASan
campaign's (README, "Fuzzing"): each row's "goal reached" is against its own sanitizer's goal.
"""
import argparse
import csv
from collections import OrderedDict

# Exit values in results.tsv that are not findings: a clean end; 72, libFuzzer's exit on SIGINT
# (the campaign was stopped); STALL, a timeout whose input ran well within the limit when
# replayed (`long.sh`, `stalled`), counted apart.
STALL = "70:stall"
NOT_FINDINGS = ("0", "72", STALL)


def table(path: str, goal: int, asan_goal: int | None = None) -> str:
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
        "| target | sanitizer | executions | goal reached | crashes | stalls (timeouts not reproduced) | exec/s (all workers) | from .. to (UTC) | commit |",
        "|---|---|---:|---|---:|---:|---:|---|---|",
    ]
    for (t, san), a in rows.items():
        secs = sum(a["secs"].values())
        rate = f"{a['n'] / secs:,.0f}" if secs else "-"
        g = asan_goal if san == "address" and asan_goal is not None else goal
        reached = "yes" if a["n"] >= g else f"no ({a['n'] / g:.1%})"
        out.append(
            f"| {t} | {san} | {a['n']:,} | {reached} | {a['crash']} | {a['stall']} | {rate} | {a['first'][:16]} .. {a['last'][:16]} | {', '.join(sorted(a['commits']))} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("results")
    p.add_argument("--goal", type=int, default=100_000_000)
    p.add_argument("--asan-goal", type=int, default=10_000_000)
    a = p.parse_args()
    print(table(a.results, a.goal, a.asan_goal))
