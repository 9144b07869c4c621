"""`smbwire analyze --dask` against one process, on 8 rotated capture files of >= 512 MiB each.

Makes a nested-mirror capture with the scenario generator bench/run.py uses (1 MiB writes, MSS
1448; --channels SMB multichannel connections, since shards take whole connections), cuts it
into 8 files of about the same size at frame boundaries (a rotated capture: every connection
crosses every file boundary), reads them once into the page cache, then times, each --repeat
times in its own child process, alternating:
  1. smbwire analyze FILES --threads 2                    (one process: a reader, 2 decoding threads)
  2. smbwire analyze FILES --dask                         (LocalCluster: one worker process per CPU)
  3. smbwire analyze FILES --dask tcp://... --work-dir W  (`dask scheduler` + 2 `dask worker --nthreads 1`
                                                           started here, before the timed runs)
checks that 2 and 3 give 1's result (JSON apart from `analysis`), and reports MB/s, the
distributed path's costs (cluster start and connection, the tasks, the merge, the parts'
size) and the read cost of one task: `analyze_shard` of a shard that owns no connection
(every task reads every input in time order, so this is paid once per task). From those, a
projection for W workers with one shard each on W machines reading the inputs at this rate:

    T(W) = start + read + decode / W + merge,   decode = sum(task seconds) - shards x read

Results: a Markdown table on stdout and bench/out/dask.json. The generated captures are
deleted at the end unless --keep.

Usage: python bench/dask_bench.py [--bytes N] [--channels 8] [--repeat 2] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import OUT, run_measured, warm  # noqa: E402

FILES = 8
MIN_FILE = 512 << 20


def generate(args: argparse.Namespace) -> list[Path]:
    from smbwire import _core

    names = [OUT / f"dask-nested4-{i}.pcap" for i in range(FILES)]
    if all(p.exists() and p.stat().st_size >= MIN_FILE for p in names):
        return names
    whole = OUT / "dask-nested4-whole.pcap"
    spec = {"scenario": "nested4", "bytes": args.bytes, "io_size": 1 << 20, "mss": 1448, "seed": 1,
            "channels": args.channels}
    t0 = time.perf_counter()
    _core.synth(json.dumps(spec), str(whole))
    size = whole.stat().st_size
    print(f"generated {whole.name}: {size / 2**30:.2f} GiB in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if size < FILES * MIN_FILE:
        raise SystemExit(f"capture of {size} bytes is too small for {FILES} files of 512 MiB: raise --bytes")
    rotate(whole, names, max(MIN_FILE, size // FILES))
    whole.unlink()
    return names


def rotate(src: Path, names: list[Path], per_file: int) -> None:
    """Cut SRC (pcap) into len(NAMES) files at frame boundaries, a new file once the current one
    holds PER_FILE bytes (the last one takes the rest)."""
    with open(src, "rb") as f:
        head = f.read(24)
        endian = "<" if head[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        i, out = 0, open(names[0], "wb")
        out.write(head)
        written = 24
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                break
            incl = int.from_bytes(rec[8:12], "little" if endian == "<" else "big")
            if written >= per_file and i < len(names) - 1:
                out.close()
                i += 1
                out = open(names[i], "wb")
                out.write(head)
                written = 24
            out.write(rec)
            out.write(f.read(incl))
            written += 16 + incl
        out.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(workers: int) -> tuple[str, list[subprocess.Popen], float]:
    """`dask scheduler` and WORKERS `dask worker --nthreads 1` processes; the address, the
    processes and the seconds until every worker had joined."""
    from distributed import Client

    dask = [sys.executable, "-m", "dask"]
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    t0 = time.perf_counter()
    procs = [subprocess.Popen(dask + ["scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    for i in range(workers):
        procs.append(subprocess.Popen(dask + ["worker", address, "--host", "127.0.0.1", "--nthreads", "1",
                                              "--no-dashboard", "--name", f"bench{i}"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    with Client(address, timeout=30) as c:
        c.wait_for_workers(workers, timeout=60)
    return address, procs, time.perf_counter() - t0


def stop(procs: list[subprocess.Popen]) -> None:
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def read_cost(files: list[Path], work: Path) -> dict:
    """Seconds of `analyze_shard` on a shard that owns no connection (or the fewest frames of a
    few tried): reading every input in time order, numbering frames, keeping the clock."""
    from smbwire import _core, engine

    config = json.dumps(engine.build_config())
    best = None
    for k in (4095, 4094, 4093):
        part = work / f"read-{k}.parquet"
        t0 = time.perf_counter()
        stats = json.loads(_core.analyze_shard([str(f) for f in files], config, k, 4096, str(part), None))
        seconds = time.perf_counter() - t0
        part.unlink(missing_ok=True)
        if best is None or stats["shard_frames"] < best["stats"]["shard_frames"]:
            best = {"seconds": seconds, "stats": stats}
        if stats["shard_frames"] == 0:
            break
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=2000 << 20,
                    help="bytes the VM writes (W); nested4 puts about 2.15 W on the wire with MSS 1448")
    ap.add_argument("--channels", type=int, default=8, help="SMB multichannel connections (shards take whole connections)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    files = generate(args)
    size = sum(f.stat().st_size for f in files)
    for f in files:
        warm(f)
    smbwire = [sys.executable, "-m", "smbwire", "analyze", *map(str, files), "-q"]
    work = Path(tempfile.mkdtemp(prefix="dask-bench-", dir=OUT))
    address, procs, cluster_start = start_cluster(2)
    runs: dict[str, list[dict]] = {"one": [], "local": [], "cluster": []}
    try:
        for _ in range(args.repeat):
            for name, extra in (("one", ["--threads", "2"]), ("local", ["--dask"]),
                                ("cluster", ["--dask", address, "--work-dir", str(work)])):
                out = OUT / f"dask-{name}.json"
                cpu: list[float] = []
                wall, rss = run_measured([*smbwire, *extra, "--json", str(out)], cpu=cpu)
                r = json.loads(out.read_text())
                runs[name].append({"wall": wall, "rss": rss, "cpu": cpu[0], "analysis": r.pop("analysis"), "result": r})
        read = read_cost(files, work)
    finally:
        stop(procs)
    want = runs["one"][0]["result"]
    for name in ("local", "cluster"):
        for run in runs[name]:
            assert run["result"] == want, f"{name}: the result differs from one process"

    def median(name: str, f) -> float:
        return statistics.median(f(r) for r in runs[name])

    rows = {}
    for name in runs:
        wall = median(name, lambda r: r["wall"])
        rows[name] = {"seconds": wall, "mb_per_s": size / wall / 1e6, "walls": [r["wall"] for r in runs[name]],
                      "peak_rss_client": max(r["rss"] for r in runs[name])}
        if name != "one":
            d = [r["analysis"]["dask"] for r in runs[name]]
            rows[name].update({
                "shards": d[0]["shards"],
                "tasks_seconds": statistics.median(x["tasks_seconds"] for x in d),
                "task_seconds": d[0]["task_seconds"],
                "merge_seconds": statistics.median(x["merge_seconds"] for x in d),
                "part_bytes": d[0]["part_bytes"],
                "part_rows": d[0]["part_rows"],
            })
            rows[name]["start_seconds"] = wall - rows[name]["tasks_seconds"] - rows[name]["merge_seconds"]
    c = rows["cluster"]
    shards = c["shards"]
    decode = max(0.0, sum(c["task_seconds"]) - shards * read["seconds"])
    projection = {}
    for w in (2, 4, 8, 16):
        t = c["start_seconds"] + read["seconds"] + decode / w + c["merge_seconds"]
        projection[w] = {"seconds": t, "mb_per_s": size / t / 1e6}
    ceiling = size / (c["start_seconds"] + read["seconds"] + c["merge_seconds"]) / 1e6
    report = {"files": [str(f) for f in files], "input_bytes": size, "channels": args.channels,
              "cluster_start_seconds": cluster_start, "rows": rows, "read_cost": read, "decode_seconds": decode,
              "projection": projection, "ceiling_mb_per_s": ceiling}
    (OUT / "dask.json").write_text(json.dumps(report, indent=2))

    print(f"{FILES} files, {size / 2**20:.0f} MiB in all (smallest {min(f.stat().st_size for f in files) / 2**20:.0f} MiB), "
          f"nested4 1 MiB writes, MSS 1448, {args.channels} connections; medians of {args.repeat}")
    print()
    print("| run | seconds | MB/s | shards | tasks s (each task, first run) | merge s | start + connect s | parts |")
    print("|---|---|---|---|---|---|---|---|")
    labels = {"one": "one process `--threads 2`", "local": "`--dask` (LocalCluster, 2 worker processes)",
              "cluster": "`--dask tcp://...` (scheduler + 2 `dask worker` processes)"}
    for name, r in rows.items():
        if name == "one":
            print(f"| {labels[name]} | {r['seconds']:.2f} | {r['mb_per_s']:.0f} | - | - | - | - | - |")
        else:
            each = ", ".join(f"{s:.2f}" for s in r["task_seconds"])
            print(f"| {labels[name]} | {r['seconds']:.2f} | {r['mb_per_s']:.0f} | {r['shards']} | "
                  f"{r['tasks_seconds']:.2f} ({each}) | {r['merge_seconds']:.2f} | {r['start_seconds']:.2f} | "
                  f"{r['part_bytes'] / 2**20:.1f} MiB, {r['part_rows']} rows |")
    print()
    print(f"read cost of one task (a shard with {read['stats']['shard_frames']} of {read['stats']['frames']} frames): "
          f"{read['seconds']:.2f} s ({size / read['seconds'] / 1e6:.0f} MB/s); decode share of the cluster run: "
          f"{decode:.2f} s over {shards} tasks; the external scheduler and workers started in {cluster_start:.1f} s "
          "(not in the timed runs)")
    print()
    print("| workers | projected seconds | projected MB/s |")
    print("|---|---|---|")
    for w, p in projection.items():
        print(f"| {w} | {p['seconds']:.2f} | {p['mb_per_s']:.0f} |")
    print(f"\nceiling (start + read + merge, any number of workers): {ceiling:.0f} MB/s")
    if not args.keep:
        for f in files:
            f.unlink(missing_ok=True)
    for p in work.iterdir():
        p.unlink()
    work.rmdir()
    os.sync()


if __name__ == "__main__":
    main()
