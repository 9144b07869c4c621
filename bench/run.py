"""Throughput and peak memory of `smbwire analyze` against tshark, on the same file, in one run.

Makes (once) a capture of at least 1 GiB with the scenario generator: nested mirror (4 copies,
2 per node), 1 MiB sequential writes, so every payload crosses the wire twice. Then times:
  1. smbwire analyze FILE --json OUT           (hashing on: every payload block is digested)
  2. tshark -q -z smb2,srt -r FILE
  3. tshark -Y smb2.cmd==9 -T fields -e smb2.write_length -r FILE
Each runs --repeat times (median wall time, after warming the page cache) in its own child process; peak RSS comes from wait4()'s rusage of that child.
The same run also generates the SAME workload (scenario, bytes, I/O size, seed) over each
--also transport (default rocev2, SMB Direct over RoCEv2, itself >= 1 GiB) and times
`smbwire analyze` on it the same way, its runs interleaved with those on the --transport
capture (so both meet the same load on a shared machine), reporting its MB/s, peak RSS, CPU
time and the ratio of its MB/s to the --transport capture's (issue 3: RoCEv2 must be no
slower than TCP, ratio >= 1), and checks that both captures give the same duplicate-payload
ratios.
Then the per-workload rows (issue 7; skip with --no-rows): wire-size frames (nested mirror,
1 MiB writes, MSS 1448 and jumbo MSS 8948) and a VMFleet-like 4 KiB random I/O capture (70%
reads / 30% writes by count: a redirected-read capture and a nested-mirror write capture of
4 KiB I/Os, >= 256 MiB of I/O together, merged by time with mergecap), each timed against
`tshark -q -z smb2,srt`: MB/s, SMB2 messages/s, peak RSS, the index's bytes per live block.
(The synthesizer's offsets are sequential, not random; smbwire's work does not depend on them.)
Results go to stdout (a Markdown table) and bench/out/results.json.

Usage: python bench/run.py [--bytes N] [--scenario nested4] [--transport tcp] [--also rocev2] [--keep]
                          [--rows-bytes N] [--no-rows | --rows-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE))
import machine  # noqa: E402


def run_measured(cmd: list[str], stdout_path: str = os.devnull, cpu: list[float] | None = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one child process; its CPU seconds (user + system)
    are appended to `cpu` when given."""
    with open(stdout_path, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {code}: {err.strip()[:500]}")
    if cpu is not None:
        cpu.append(usage.ru_utime + usage.ru_stime)
    return wall, usage.ru_maxrss * 1024


def make_capture(path: Path, scenario: str, nbytes: int, transport: str) -> dict:
    from smbwire import _core

    spec = {"scenario": scenario, "bytes": nbytes, "io_size": 1 << 20, "seed": 1, "transport": transport}
    t0 = time.perf_counter()
    truth = json.loads(_core.synth(json.dumps(spec), str(path)))
    print(f"generated {path.name}: {path.stat().st_size / 2**30:.2f} GiB in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    return truth


def warm(path: Path) -> None:
    """Read the file once so no tool pays for the first read from disk."""
    with open(path, "rb") as f:
        while f.read(8 << 20):
            pass


def summarize(samples: list[tuple[float, int]], cpu: list[float], size: int, name: str) -> dict:
    """Median wall time, max peak RSS, median CPU time of the runs of one tool on one file."""
    samples = sorted(samples)
    wall, rss = samples[len(samples) // 2][0], max(r for _, r in samples)
    c = sorted(cpu)[len(cpu) // 2] if cpu else None
    print(f"{name}: {wall:.2f} s, {size / 1e6 / wall:.0f} MB/s, peak RSS {rss / 2**20:.0f} MiB"
          + (f", CPU {c:.2f} s" if c else ""), file=sys.stderr)
    return {"seconds": wall, "mb_per_s": size / 1e6 / wall, "peak_rss_bytes": rss, "samples_s": [w for w, _ in samples],
            "cpu_seconds": c, "mb_per_cpu_s": size / 1e6 / c if c else None}


# Core-to-core round trips below this are the host's near placement of the vCPUs (on
# 2026-11-29: 95-160 ns near, 375-475 ns far, sometimes about 210-280 ns between).
NEAR_NS = 200.0


def round_trips_of(r: dict) -> list[float]:
    """The round trips measured for a round: before its pair of runs and, when recorded, after."""
    return [x for x in (r.get("core_round_trip_ns"), r.get("core_round_trip_ns_after")) if x is not None]


def placement_of(r: dict) -> str | None:
    """ "near" (every round trip measured for the round under `NEAR_NS`), "far" (all at or
    above it), "moved" (the host moved the vCPUs between the probes), None (not measured)."""
    rts = round_trips_of(r)
    if not rts:
        return None
    if all(rt < NEAR_NS for rt in rts):
        return "near"
    if all(rt >= NEAR_NS for rt in rts):
        return "far"
    return "moved"


def by_placement(rounds: list[dict], threads: int) -> dict:
    """Per placement (`placement_of`: near, far, or moved during the round), the rounds run
    there and the medians of their wall times and of their pairs' scaling."""
    out = {}
    for name in ("near", "far", "moved"):
        rs = [r for r in rounds if placement_of(r) == name]
        if rs:
            out[name] = {"rounds": len(rs),
                         "seconds_1": statistics.median(r["seconds_1"] for r in rs),
                         f"seconds_{threads}": statistics.median(r[f"seconds_{threads}"] for r in rs),
                         "threads_speedup": statistics.median(r["threads_speedup"] for r in rs)}
    return out


def placement_cell(row: dict) -> str:
    """ "1.55x (3) / 1.20x (2)": the median scaling of the rounds at each placement; rounds
    during which the host moved the vCPUs follow, as "; moved 1.30x (1)"."""
    bp = row.get("by_placement", {})
    cell = " / ".join(f"{bp[k]['threads_speedup']:.2f}x ({bp[k]['rounds']})" if k in bp else "-" for k in ("near", "far"))
    if "moved" in bp:
        cell += f"; moved {bp['moved']['threads_speedup']:.2f}x ({bp['moved']['rounds']})"
    return cell


def round_trip_range(row: dict) -> str:
    """The core-to-core round trips measured around a row's rounds, as "low-high"."""
    rts = [rt for r in row.get("rounds", []) for rt in round_trips_of(r)]
    if not rts:
        return "-"
    lo, hi = min(rts), max(rts)
    return f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}"


def measure(cmd: list[str], sink: str, size: int, repeat: int, name: str) -> dict:
    """Median wall time of `repeat` runs, max peak RSS."""
    cpu: list[float] = []
    samples = [run_measured(cmd, sink, cpu) for _ in range(max(1, repeat))]
    return summarize(samples, cpu, size, name)


def make_spec_capture(path: Path, spec: dict) -> None:
    from smbwire import _core

    t0 = time.perf_counter()
    _core.synth(json.dumps({"seed": 1, **spec}), str(path))
    print(f"generated {path.name}: {path.stat().st_size / 2**20:.0f} MiB in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)


def workload_captures(io_bytes: int) -> dict[str, Path]:
    """The issue-7 workloads (made once, reused): name -> capture."""
    caps: dict[str, Path] = {}
    for mss in (1448, 8948):
        p = OUT / f"rows-nested4-1MiB-mss{mss}-{io_bytes >> 20}MiB.pcap"
        if not p.exists():
            make_spec_capture(p, {"scenario": "nested4", "bytes": io_bytes, "io_size": 1 << 20, "mss": mss})
        caps[f"nested4 1 MiB writes, MSS {mss}"] = p
    # The same with SMB multichannel (4 TCP connections, as S2D uses between two nodes):
    # `--threads` shards by connection, so one connection keeps one worker busy at most.
    p = OUT / f"rows-nested4-1MiB-mss1448-4ch-{io_bytes >> 20}MiB.pcap"
    if not p.exists():
        make_spec_capture(p, {"scenario": "nested4", "bytes": io_bytes, "io_size": 1 << 20, "mss": 1448, "channels": 4})
    caps["nested4 1 MiB writes, MSS 1448, 4 channels"] = p
    mix = OUT / f"rows-vmfleet-4KiB-70r30w-{io_bytes >> 20}MiB.pcap"
    if not mix.exists():
        reads, writes = OUT / "rows-part-reads.pcap", OUT / "rows-part-writes.pcap"
        make_spec_capture(reads, {"scenario": "read-nonowner", "bytes": io_bytes * 7 // 10, "io_size": 4096, "seed": 2})
        make_spec_capture(writes, {"scenario": "nested4", "bytes": io_bytes * 3 // 10, "io_size": 4096, "seed": 3})
        mergecap = shutil.which("mergecap")
        if mergecap is None:
            raise SystemExit("mergecap is not installed (wireshark-common; make bench installs it)")
        subprocess.run([mergecap, "-F", "pcap", "-w", str(mix), str(reads), str(writes)], check=True)
        reads.unlink()
        writes.unlink()
    caps["VMFleet-like 4 KiB random I/O, 70% read / 30% write"] = mix
    return caps


def tshark_cells(row: dict) -> str:
    """The tshark columns of a row: its MB/s and the two speedups, "not run" with --no-tshark."""
    t = row.get("tshark_srt")
    if not t:
        return "not run | -"
    return f"{t['mb_per_s']:.0f} | {row['speedup_vs_tshark_srt']:.1f}x / {row['speedup_vs_tshark_srt_threads']:.1f}x"


def workload_rows(smbwire: str, tshark: str | None, io_bytes: int, repeat: int, threads: int) -> list[dict]:
    """smbwire analyze --threads 1, --threads N and tshark -z smb2,srt on each workload,
    alternating runs; the two smbwire results must be equal (apart from `analysis`)."""
    rows = []
    for name, cap in workload_captures(io_bytes).items():
        size = cap.stat().st_size
        warm(cap)
        js = {n: OUT / f"rows-result-{cap.stem}-t{n}.json" for n in (1, threads)}
        ours: dict[int, list[tuple[float, int]]] = {1: [], threads: []}
        ours_cpu: dict[int, list[float]] = {1: [], threads: []}
        theirs: list[tuple[float, int]] = []
        theirs_cpu: list[float] = []
        round_trips: list[float | None] = []
        round_trips_after: list[float | None] = []
        for _ in range(max(1, repeat)):
            # tshark's gigabytes of RSS can push the capture out of the page cache: each
            # round starts warm again, so neither smbwire run pays for disk reads.
            warm(cap)
            # Where the host put the vCPUs this round (`machine.core_round_trip_ns`).
            round_trips.append(machine.core_round_trip_ns())
            for n in (1, threads):
                ours[n].append(run_measured([smbwire, "analyze", str(cap), "--quiet", "--threads", str(n),
                                             "--json", str(js[n])], os.devnull, ours_cpu[n]))
            # The host can move them within a round: again after the pair.
            round_trips_after.append(machine.core_round_trip_ns())
            if tshark:
                theirs.append(run_measured([tshark, "-n", "-q", "-z", "smb2,srt", "-r", str(cap)], os.devnull, theirs_cpu))
        results = {n: json.loads(js[n].read_text()) for n in (1, threads)}
        for res in results.values():
            res.pop("analysis")
        if results[1] != results[threads]:
            raise SystemExit(f"{cap.name}: --threads {threads} gave another result than --threads 1")
        result = results[1]
        messages = sum((result.get("smb2") or {}).get("commands", {}).values())
        row = {"workload": name, "capture": cap.name, "capture_bytes": size, "smb2_messages": messages,
               "index_bytes_per_live_block": result["index"].get("bytes_per_live_block"),
               "index_block_bytes_per_live_block": result["index"].get("block_bytes_per_live_block"),
               "index_send_bytes_per_live_send": result["index"].get("send_bytes_per_live_send"),
               "index_peak_bytes_estimate": result["index"].get("peak_bytes_estimate"), "threads": threads}
        for n, key in ((1, "smbwire"), (threads, "smbwire_threads")):
            r = summarize(ours[n], ours_cpu[n], size, f"smbwire analyze --threads {n} ({name})")
            row[key] = r
            row[f"messages_per_s_{key}"] = messages / r["seconds"]
        row["messages_per_s"] = row["messages_per_s_smbwire"]
        row["threads_speedup"] = row["smbwire"]["seconds"] / row["smbwire_threads"]["seconds"]
        # Each round's pair, with the core-to-core round trips measured just before and just
        # after it: two threads' figures depend on them (machine.py).
        row["rounds"] = [{"core_round_trip_ns": rt, "core_round_trip_ns_after": rt2, "seconds_1": a[0],
                          f"seconds_{threads}": b[0], "threads_speedup": a[0] / b[0]}
                         for rt, rt2, a, b in zip(round_trips, round_trips_after, ours[1], ours[threads])]
        row["by_placement"] = by_placement(row["rounds"], threads)
        if tshark:
            t = summarize(theirs, theirs_cpu, size, f"tshark -z smb2,srt ({name})")
            row["tshark_srt"] = t
            row["speedup_vs_tshark_srt"] = t["seconds"] / row["smbwire"]["seconds"]
            row["speedup_vs_tshark_srt_threads"] = t["seconds"] / row["smbwire_threads"]["seconds"]
        rows.append(row)
    print(f"\n| workload | capture (MiB) | --threads 1 MB/s | --threads {threads} MB/s | scaling | "
          f"SMB2 messages/s ({threads} threads) | peak RSS 1 / {threads} (MiB) | index B/block (blocks' part, sends' part B/send) | "
          "tshark -z smb2,srt MB/s | speedup 1 / {threads} threads | core round trip (ns) | scaling near / far vCPUs (rounds) |\n|---|---|---|---|---|---|---|---|---|---|---|---|".replace("{threads}", str(threads)))
    for row in rows:
        r, m = row["smbwire"], row["smbwire_threads"]
        print(f"| {row['workload']} | {row['capture_bytes'] / 2**20:.0f} | {r['mb_per_s']:.0f} | {m['mb_per_s']:.0f} | "
              f"{row['threads_speedup']:.2f}x | {row['messages_per_s_smbwire_threads']:.0f} | "
              f"{r['peak_rss_bytes'] / 2**20:.0f} / {m['peak_rss_bytes'] / 2**20:.0f} | "
              f"{row['index_bytes_per_live_block']:.0f} ({row['index_block_bytes_per_live_block']:.0f}, "
              f"{row['index_send_bytes_per_live_send']:.0f}) | {tshark_cells(row)} | {round_trip_range(row)} | "
              f"{placement_cell(row)} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=512 << 20, help="bytes the VM writes (W); nested4 puts 2W on the wire")
    ap.add_argument("--scenario", default="nested4")
    ap.add_argument("--transport", default="tcp")
    ap.add_argument("--also", default="rocev2",
                    help="comma-separated transports to run the same workload over with smbwire only ('' = none)")
    ap.add_argument("--no-tshark", action="store_true", help="time smbwire only")
    ap.add_argument("--keep", action="store_true", help="keep the generated capture")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool; the median is reported")
    ap.add_argument("--rows-bytes", type=int, default=512 << 20,
                    help="I/O bytes of each per-workload row's capture (wire-size frames, 4 KiB mix)")
    ap.add_argument("--no-rows", action="store_true", help="skip the per-workload rows")
    ap.add_argument("--rows-only", action="store_true", help="only the per-workload rows")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="the second smbwire row's --threads (default: the CPUs available)")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    # Figures name the machine they were measured on (`machine.py`).
    host = machine.describe()
    host["core_round_trip_ns"] = machine.core_round_trip_ns()
    print(f"machine: {machine.line(host)}", file=sys.stderr)
    if args.rows_only:
        smbwire = shutil.which("smbwire") or str(Path(sys.executable).parent / "smbwire")
        rows = workload_rows(smbwire, None if args.no_tshark else shutil.which("tshark"), args.rows_bytes, args.repeat, args.threads)
        (OUT / "rows.json").write_text(json.dumps({"machine": host, "rows": rows}, indent=2))
        print(f"\n(python bench/run.py {' '.join(sys.argv[1:])}; {host['utc']}; {machine.line(host)})")
        return
    cap = OUT / f"bench-{args.scenario}-{args.transport}-{args.bytes >> 20}MiB.pcap"
    if not cap.exists():
        make_capture(cap, args.scenario, args.bytes, args.transport)
    size = cap.stat().st_size
    if size < (1 << 30):
        print(f"warning: capture is {size / 2**30:.2f} GiB (< 1 GiB)", file=sys.stderr)
    smbwire = shutil.which("smbwire") or str(Path(sys.executable).parent / "smbwire")
    tshark = shutil.which("tshark")
    if tshark is None and not args.no_tshark:
        raise SystemExit("tshark is not installed (make bench installs it)")
    also = [t for t in args.also.split(",") if t and t != args.transport]
    caps = {args.transport: cap}
    for t in also:
        caps[t] = OUT / f"bench-{args.scenario}-{t}-{args.bytes >> 20}MiB.pcap"
        if not caps[t].exists():
            make_capture(caps[t], args.scenario, args.bytes, t)
        if caps[t].stat().st_size < (1 << 30):
            print(f"warning: {t} capture is {caps[t].stat().st_size / 2**30:.2f} GiB (< 1 GiB)", file=sys.stderr)
    results = {}
    if not args.no_tshark:
        tools = {
            "tshark -z smb2,srt": [tshark, "-n", "-q", "-z", "smb2,srt", "-r", str(cap)],
            "tshark -T fields write_length": [tshark, "-n", "-Y", "smb2.cmd==9", "-T", "fields", "-e",
                                              "smb2.write_length", "-r", str(cap)],
        }
        warm(cap)
        for name, cmd in tools.items():
            results[name] = measure(cmd, os.devnull, size, args.repeat, name)
    # smbwire on every transport, runs interleaved (tcp, rocev2, tcp, rocev2, ...) so that both
    # see the same machine: on a shared machine, load that comes and goes would otherwise land
    # on one transport's runs only and decide the ratio.
    js = {t: OUT / ("bench-result.json" if t == args.transport else f"bench-result-{t}.json") for t in caps}
    samples: dict[str, list] = {t: [] for t in caps}
    cpu: dict[str, list] = {t: [] for t in caps}
    for t, c in caps.items():
        warm(c)
    for _ in range(max(1, args.repeat)):
        for t, c in caps.items():
            samples[t].append(run_measured([smbwire, "analyze", str(c), "--quiet", "--json", str(js[t])], os.devnull, cpu[t]))
    per = {t: summarize(samples[t], cpu[t], caps[t].stat().st_size,
                        "smbwire analyze" + ("" if t == args.transport else f" ({t})")) for t in caps}
    ours = per[args.transport]
    results = {"smbwire analyze": ours, **results}
    report = json.loads(js[args.transport].read_text())
    summary = {
        "capture": cap.name,
        "capture_bytes": size,
        "runs": results,
        "smbwire_dup_ratio": [(e["src"], e["dst"], e["class"], e["dup_ratio"]) for e in report["edges"]],
        "smbwire_index_peak": report.get("index"),
    }
    if not args.no_tshark:
        summary["speedup_vs_tshark_srt"] = results["tshark -z smb2,srt"]["seconds"] / ours["seconds"]
        summary["speedup_vs_tshark_fields"] = results["tshark -T fields write_length"]["seconds"] / ours["seconds"]
        summary["rss_ratio_vs_tshark_srt"] = ours["peak_rss_bytes"] / results["tshark -z smb2,srt"]["peak_rss_bytes"]

    # The same workload over the other transports (SMB Direct).
    transports = {args.transport: {"capture": cap.name, "capture_bytes": size, **ours,
                                   "dup_ratio": summary["smbwire_dup_ratio"]}}
    for t in also:
        r = per[t]
        rep = json.loads(js[t].read_text())
        dup = [(e["src"], e["dst"], e["class"], e["dup_ratio"]) for e in rep["edges"]]
        linked = (rep.get("rdma") or {}).get("linked_bytes")
        transports[t] = {"capture": caps[t].name, "capture_bytes": caps[t].stat().st_size, **r, "dup_ratio": dup,
                         "rdma_linked_payload_bytes": linked,
                         "mb_per_s_ratio_vs_" + args.transport: r["mb_per_s"] / ours["mb_per_s"],
                         "mb_per_cpu_s_ratio_vs_" + args.transport: r["mb_per_cpu_s"] / ours["mb_per_cpu_s"]}
        if sorted(dup) != sorted(summary["smbwire_dup_ratio"]):
            print(f"WARNING: {t} duplicate ratios {dup} differ from {args.transport} {summary['smbwire_dup_ratio']}",
                  file=sys.stderr)
        print(f"{t}/{args.transport} MB/s ratio: {r['mb_per_s'] / ours['mb_per_s']:.2f} (wall), "
              f"{r['mb_per_cpu_s'] / ours['mb_per_cpu_s']:.2f} (CPU time)", file=sys.stderr)
    summary["transports"] = transports
    # Memory is bounded by the window, not the capture: the same workload at half and full length
    # with a short window must peak at about the same RSS and live-block count.
    half = OUT / f"bench-{args.scenario}-{args.transport}-{args.bytes >> 21}MiB.pcap"
    if not half.exists():
        make_capture(half, args.scenario, args.bytes // 2, args.transport)
    bounded = {}
    pairs = [half, cap]
    for t in also:
        thalf = OUT / f"bench-{args.scenario}-{t}-{args.bytes >> 21}MiB.pcap"
        if not thalf.exists():
            make_capture(thalf, args.scenario, args.bytes // 2, t)
        pairs += [thalf, OUT / f"bench-{args.scenario}-{t}-{args.bytes >> 20}MiB.pcap"]
    for f in pairs:
        js = OUT / f"bounded-{f.stem}.json"
        wall, rss = run_measured([smbwire, "analyze", str(f), "--quiet", "--window", "0.05", "--json", str(js)])
        idx = json.loads(js.read_text())["index"]
        bounded[f.name] = {"capture_bytes": f.stat().st_size, "peak_rss_bytes": rss,
                           "peak_live_blocks": idx["peak_live_blocks"], "peak_bytes_estimate": idx["peak_bytes_estimate"]}
        print(f"window 0.05 s, {f.name}: peak RSS {rss / 2**20:.0f} MiB, peak live blocks {idx['peak_live_blocks']}",
              file=sys.stderr)
    summary["bounded_memory_window_0.05s"] = bounded
    if not args.no_rows:
        summary["rows"] = workload_rows(smbwire, None if args.no_tshark else tshark, args.rows_bytes, args.repeat, args.threads)
    summary["machine"] = host
    (OUT / "results.json").write_text(json.dumps(summary, indent=2))
    print("\n| tool | seconds | MB/s | peak RSS (MiB) |\n|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['seconds']:.2f} | {r['mb_per_s']:.0f} | {r['peak_rss_bytes'] / 2**20:.0f} |")
    if not args.no_tshark:
        print(f"\ncapture {size / 2**30:.2f} GiB; smbwire is {summary['speedup_vs_tshark_srt']:.1f}x faster than "
              f"tshark -z smb2,srt and uses {summary['rss_ratio_vs_tshark_srt']:.2%} of its peak memory")
    print(f"\nSame workload ({args.scenario}, {args.bytes >> 20} MiB written), smbwire analyze per transport:\n"
          f"\n| transport | capture (GiB) | seconds | MB/s | peak RSS (MiB) | MB/s vs {args.transport} | CPU s | "
          f"MB per CPU s vs {args.transport} |\n|---|---|---|---|---|---|---|---|")
    for t, r in transports.items():
        print(f"| {t} | {r['capture_bytes'] / 2**30:.2f} | {r['seconds']:.2f} | {r['mb_per_s']:.0f} | "
              f"{r['peak_rss_bytes'] / 2**20:.0f} | {r['mb_per_s'] / ours['mb_per_s']:.2f} | {r['cpu_seconds']:.2f} | "
              f"{r['mb_per_cpu_s'] / ours['mb_per_cpu_s']:.2f} |")
    if not args.keep:
        pass  # the capture is reused by later runs; `make clean` or rm bench/out removes it


if __name__ == "__main__":
    main()
