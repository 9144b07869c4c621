"""`smbwire analyze --keys` on encrypted multichannel SMB 3.1.1 traffic, 1 and N threads,
against tshark decrypting the same file with the same keys: MB/s, peak RSS, CPU.

Writes (once, in bench/out/) a capture of one SMB 3.1.1 session over `--channels` TCP
connections (wire-size frames, MSS 1448), WRITEs of `--io-size` and their responses, every
message encrypted (tests/encrypted_capture.py: the keys derived there, independently of the
engine). smbwire gets the session key alone (so every channel but the first needs the
hash the first channel's worker computed); tshark gets the directional keys.

Then times, alternating, `--repeat` rounds each (medians; peak RSS and CPU from wait4()):
  smbwire analyze FILE --keys K --threads 1 -q --json OUT
  smbwire analyze FILE --keys K --threads N -q --json OUT
  tshark -n -q -r FILE -z smb2,srt -o uat:smb2_seskey_list:...
and checks that smbwire decrypted every message (and the same JSON for 1 and N threads apart
from `analysis`) and that tshark's SRT table counts every WRITE.

Usage: python bench/encrypted.py [--bytes 1GiB] [--io-size 1MiB] [--channels 2] [--threads 2]
                                 [--repeat 3] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import machine  # noqa: E402
from encrypted_capture import make  # noqa: E402
from run import run_measured  # noqa: E402
from smbwire.units import parse_size  # noqa: E402

SMBWIRE = str(HERE.parent / ".venv" / "bin" / "smbwire")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bytes", type=parse_size, default="1GiB")
    ap.add_argument("--io-size", type=parse_size, default="1MiB")
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="reuse the capture of an earlier run")
    a = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    cap = OUT / f"encrypted-311-{a.channels}ch-{a.io_size >> 10}KiB-{a.bytes >> 20}MiB.pcap"
    meta_path = cap.with_suffix(".json")
    if a.keep and cap.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
    else:
        t = time.perf_counter()
        meta = make(cap, a.bytes, a.io_size, a.channels)
        meta_path.write_text(json.dumps(meta))
        print(f"wrote {cap} ({cap.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    mb = cap.stat().st_size / 1e6
    keys = OUT / "encrypted-keys.txt"
    keys.write_text(f"{meta['sid']},{meta['session_key']}\n")
    uat = f"uat:smb2_seskey_list:{meta['sid']},{meta['session_key']},{meta['s2c']},{meta['c2s']}"
    cmds = {
        "smbwire --threads 1": [SMBWIRE, "analyze", str(cap), "--keys", str(keys), "--threads", "1", "-q", "--json", str(OUT / "enc-1.json")],
        f"smbwire --threads {a.threads}": [SMBWIRE, "analyze", str(cap), "--keys", str(keys), "--threads", str(a.threads), "-q",
                                           "--json", str(OUT / f"enc-{a.threads}.json")],
        "tshark -z smb2,srt": ["tshark", "-n", "-q", "-r", str(cap), "-z", "smb2,srt", "-o", uat],
    }
    with open(cap, "rb") as f:  # the page cache, before every round
        while f.read(1 << 24):
            pass
    got: dict[str, dict[str, list[float]]] = {k: {"wall": [], "rss": [], "cpu": []} for k in cmds}
    for _ in range(a.repeat):
        for name, cmd in cmds.items():
            cpu: list[float] = []
            out = str(OUT / "tshark-srt.txt") if name.startswith("tshark") else os.devnull
            wall, rss = run_measured(cmd, out, cpu)
            got[name]["wall"].append(wall)
            got[name]["rss"].append(rss)
            got[name]["cpu"].append(cpu[0])
    one, many = (json.loads((OUT / f"enc-{n}.json").read_text()) for n in (1, a.threads))
    s = one["smb2"]
    assert (s["decrypted_messages"], s["decrypt_failed"], s["encrypted_without_key"]) == (meta["messages"], 0, 0), s
    assert many["analysis"]["threads"] == a.threads
    one.pop("analysis"), many.pop("analysis")
    assert one == many, "1 and N threads differ"
    srt = (OUT / "tshark-srt.txt").read_text()
    row = re.search(r"^\s*9\s+Write\s+(\d+)", srt, re.M)
    assert row and int(row.group(1)) == meta["writes"], f"tshark's SRT WRITE row: {row and row.group(0)}"
    print(f"# {cap.name}: {mb:.0f} MB, {meta['writes']} encrypted WRITEs of {a.io_size >> 10} KiB over {a.channels} channels; "
          f"{machine.line(machine.describe())}")
    print("| command | median s | MB/s | CPU s | peak RSS MiB | vs tshark |")
    print("|---|---|---|---|---|---|")
    base = statistics.median(got["tshark -z smb2,srt"]["wall"])
    for name, g in got.items():
        w = statistics.median(g["wall"])
        print(f"| `{name}` | {w:.2f} | {mb / w:.0f} | {statistics.median(g['cpu']):.2f} | {max(g['rss']) / 2**20:.0f} | {base / w:.1f}x |")


if __name__ == "__main__":
    main()
