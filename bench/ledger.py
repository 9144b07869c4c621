"""What `smbwire attribute` saves: rerunning dedupe and attribution from a send ledger instead
of re-reading the capture.

Makes (once) a nested-mirror capture with wire-size frames (MSS 1448, 1 MiB writes, the
scenario generator's default), then, in one run:
  1. smbwire analyze FILE --ledger L --json A     (the capture read, decoded, hashed; ledger written)
  2. smbwire analyze FILE --json B                (the same without the ledger: its cost)
  3. smbwire attribute L --topology T --json C    (dedupe and attribution from the ledger alone)
Each --repeat times in its own child (median wall time, peak RSS from wait4), and checks that
C equals analyze FILE --topology T (apart from `analysis`). Prints a Markdown table; results
also in bench/out/ledger.json.

Usage: python bench/ledger.py [--bytes N] [--repeat 3] [--keep]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import OUT, run_measured, warm  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=512 << 20, help="bytes the VM writes (W); nested4 puts 2W on the wire")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    cap = OUT / f"nested4-{args.bytes >> 20}MiB-ledger.pcap"
    topo = OUT / "nested4.toml"
    smbwire = [sys.executable, "-m", "smbwire"]
    if not cap.exists() or not topo.exists():
        subprocess.run([*smbwire, "synth", "nested4", "-o", str(cap), "--bytes", str(args.bytes),
                        "--io-size", "1MiB", "--seed", "1", "--topology-out", str(topo)], check=True, stdout=subprocess.DEVNULL)
    warm(cap)
    ledger = OUT / "bench.ledger.parquet"
    rows = {}
    for name, cmd in [
        ("analyze --ledger", [*smbwire, "analyze", str(cap), "--ledger", str(ledger), "-q", "--json", str(OUT / "a.json")]),
        ("analyze", [*smbwire, "analyze", str(cap), "-q", "--json", str(OUT / "b.json")]),
        ("attribute --topology", [*smbwire, "attribute", str(ledger), "-t", str(topo), "-q", "--json", str(OUT / "c.json")]),
        ("analyze --topology", [*smbwire, "analyze", str(cap), "-t", str(topo), "-q", "--json", str(OUT / "d.json")]),
    ]:
        samples = [run_measured(cmd) for _ in range(args.repeat)]
        rows[name] = {"seconds": statistics.median(s[0] for s in samples), "peak_rss": max(s[1] for s in samples)}
    c = json.loads((OUT / "c.json").read_text())
    d = json.loads((OUT / "d.json").read_text())
    c.pop("analysis"), d.pop("analysis")
    assert c == d, "attribute differs from analyze with the same topology"
    size = cap.stat().st_size
    lsize = ledger.stat().st_size
    print(f"capture {size / 2**20:.0f} MiB, ledger {lsize / 2**20:.1f} MiB ({lsize / size:.2%} of the capture); "
          f"sends {d['totals']['sends']}; median of {args.repeat}; {time.strftime('%Y-%m-%d')}")
    print("| command | seconds | peak RSS |\n|---|---|---|")
    for name, r in rows.items():
        print(f"| `smbwire {name}` | {r['seconds']:.2f} | {r['peak_rss'] / 2**20:.0f} MiB |")
    frac = rows["attribute --topology"]["seconds"] / rows["analyze --topology"]["seconds"]
    print(f"\nattribute takes {frac:.1%} of analyze's time; the ledger costs analyze "
          f"{rows['analyze --ledger']['seconds'] / rows['analyze']['seconds'] - 1:+.1%}.")
    (OUT / "ledger.json").write_text(json.dumps({"capture_bytes": size, "ledger_bytes": lsize, "rows": rows}, indent=1))
    if not args.keep:
        cap.unlink()
        topo.unlink()
        ledger.unlink()


if __name__ == "__main__":
    main()
