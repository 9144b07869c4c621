"""How much more work two CPUs of this host do than one: the ceiling of any two-thread design.

Issue 7 asks `--threads 2` for >= 1.7x the rate of `--threads 1`: 85% of a perfect doubling.
Two independent processes of the same single-thread job share nothing in the program (no
hand-off between threads, no shared buffers, no ordered stage), so the rate they reach together
bounds what a two-thread engine can reach on this host. What they do share is the host's: the
last-level cache and memory bandwidth, the hypervisor's placement and time slicing of the vCPUs,
the cores' clock under load.

Jobs (each a child process, its wall time measured):
  compute   `hashbench --mib 1`: BLAKE3 over 1 MiB that stays in a core's L2
  memory    `hashbench --mib 512`: the same over 512 MiB, generated then read through memory
  engine    `smbwire analyze CAPTURE --quiet --threads 1`, for each capture given (default: the
            `bench/run.py --keep` row captures in bench/out)
Each round runs, in an order rotated from round to round:
  alone     one process of the job;
  pair      two processes of the job started together (wall time: until both ended);
  threads   (engine jobs) one process with `--threads 2`.
Figures (medians over the rounds):
  host scaling      2 x alone / pair: work per second of two processes against one
  threads scaling   alone / threads: what `--threads 2` gets, as bench/run.py measures it
  share             threads scaling / host scaling
The core-to-core round trip (`machine.core_round_trip_ns`) is measured before each round: the
host places the vCPUs near each other or far apart, and moves them.

Usage: python bench/host_scaling.py [--repeat 5] [--capture FILE ...] [--no-reference]
Results: a Markdown table on stdout, bench/out/host_scaling.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE))
import machine  # noqa: E402


def run_together(cmds: list[list[str]]) -> tuple[float, list[float]]:
    """Start every command at once; wall seconds until the last ended, and each one's CPU
    seconds (user + system). A command that fails ends the benchmark."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in cmds]
    cpu = []
    for p, c in zip(procs, cmds):
        _, status, usage = os.wait4(p.pid, 0)
        err = p.stderr.read().decode(errors="replace") if p.stderr else ""
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise SystemExit(f"{' '.join(c)} exited {code}: {err.strip()[:500]}")
        cpu.append(usage.ru_utime + usage.ru_stime)
    return time.perf_counter() - t0, cpu


def figures(alone: list[float], pair: list[float], threads: list[float] | None) -> dict:
    """Medians and the scaling figures of one job's rounds (wall seconds per round)."""
    a, p = statistics.median(alone), statistics.median(pair)
    out = {"alone_s": a, "pair_s": p, "host_scaling": 2 * a / p,
           "host_scaling_rounds": [2 * x / y for x, y in zip(alone, pair)]}
    if threads:
        t = statistics.median(threads)
        out.update(threads_s=t, threads_scaling=a / t,
                   threads_scaling_rounds=[x / y for x, y in zip(alone, threads)],
                   share=(a / t) / (2 * a / p))
    return out


def table(rows: list[dict]) -> str:
    """The Markdown table of `figures` rows (each with a `job` name)."""
    lines = ["| job | alone | pair | host scaling (rounds) | `--threads 2` | threads scaling (rounds) | share of the host's |",
             "|---|---:|---:|---|---:|---|---:|"]
    for r in rows:
        hs = ", ".join(f"{x:.2f}" for x in r["host_scaling_rounds"])
        if "threads_s" in r:
            ts = ", ".join(f"{x:.2f}" for x in r["threads_scaling_rounds"])
            t = (f"{r['threads_s']:.3f} s", f"{r['threads_scaling']:.2f}x ({ts})", f"{100 * r['share']:.0f}%")
        else:
            t = ("-", "-", "-")
        lines.append(f"| {r['job']} | {r['alone_s']:.3f} s | {r['pair_s']:.3f} s | {r['host_scaling']:.2f}x ({hs}) "
                     f"| {t[0]} | {t[1]} | {t[2]} |")
    return "\n".join(lines)


def hashbench() -> str:
    """The hashbench example, built in release mode."""
    subprocess.run(["cargo", "build", "--quiet", "--release", "--example", "hashbench", "-p", "smbwire-dissectors"],
                   cwd=ROOT, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return str(target / "release" / "examples" / "hashbench")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeat", type=int, default=5, help="rounds; medians are reported")
    ap.add_argument("--capture", action="append", type=Path, default=None,
                    help="a capture for the engine jobs (repeatable; default: bench/out/rows-*.pcap)")
    ap.add_argument("--no-reference", action="store_true", help="skip the compute and memory jobs")
    args = ap.parse_args()
    caps = args.capture or sorted(OUT.glob("rows-*.pcap"))
    if not caps:
        raise SystemExit("no capture: give --capture, or run `python bench/run.py --rows-only --keep` first")
    smbwire = shutil.which("smbwire") or str(Path(sys.executable).parent / "smbwire")
    host = machine.describe()
    jobs: dict[str, tuple[list[str], list[str] | None]] = {}
    if not args.no_reference:
        hb = hashbench()
        jobs["compute (BLAKE3, 1 MiB in L2)"] = ([hb, "--mib", "1", "--repeat", "3000"], None)
        jobs["memory (BLAKE3, 512 MiB)"] = ([hb, "--mib", "512", "--repeat", "1"], None)
    for c in caps:
        base = [smbwire, "analyze", str(c), "--quiet"]
        jobs[f"engine, {c.name}"] = (base + ["--threads", "1"], base + ["--threads", "2"])
    for c in caps:
        with open(c, "rb") as f:  # warm the page cache: no run pays for the disk
            while f.read(8 << 20):
                pass
    rows = []
    for name, (one, two) in jobs.items():
        alone: list[float] = []
        pair: list[float] = []
        threads: list[float] = []
        trips: list[float | None] = []
        for r in range(max(1, args.repeat)):
            trips.append(machine.core_round_trip_ns())
            steps = ["alone", "pair"] + (["threads"] if two else [])
            k = r % len(steps)
            for step in steps[k:] + steps[:k]:
                if step == "alone":
                    alone.append(run_together([one])[0])
                elif step == "pair":
                    pair.append(run_together([one, one])[0])
                else:
                    threads.append(run_together([two])[0])
        row = {"job": name, "command": one, **figures(alone, pair, threads or None),
               "alone_rounds_s": alone, "pair_rounds_s": pair, "threads_rounds_s": threads,
               "core_round_trip_ns": trips}
        print(f"{name}: host {row['host_scaling']:.2f}x"
              + (f", --threads 2 {row['threads_scaling']:.2f}x" if threads else ""), file=sys.stderr)
        rows.append(row)
    OUT.mkdir(exist_ok=True)
    (OUT / "host_scaling.json").write_text(json.dumps({"machine": host, "rows": rows}, indent=2))
    print(table(rows))
    print(f"\n(python bench/host_scaling.py {' '.join(sys.argv[1:])}; {host['utc']}; {machine.line(host)})")


if __name__ == "__main__":
    main()
