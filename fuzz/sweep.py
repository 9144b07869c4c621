"""Analyse every capture file under the given directories (or given itself), each on its own,
and report any that does not end as hostile input must: an exception other than a one-line `SmbwireError` (a
capture the engine refuses), accounting that does not reconcile, or a run over `--slow`
seconds. For corpora of odd and malformed captures written by others, such as tcpdump's
`tests/` (its crash reproducers among them):

    python fuzz/sweep.py /path/to/tcpdump/tests

Prints one line per finding and a summary; exit status 1 when there is a finding."""

from __future__ import annotations

import argparse
import collections
import sys
import time
import traceback
from pathlib import Path

from smbwire.engine import analyze
from smbwire.errors import SmbwireError

SUFFIXES = (".pcap", ".pcapng", ".cap", ".gz", ".zst", ".xz")


def sweep(dirs: list[Path], slow: float) -> tuple[collections.Counter, list[str]]:
    outcomes: collections.Counter = collections.Counter()
    findings: list[str] = []
    files = sorted({p for d in dirs for p in ([d] if d.is_file() else d.rglob("*"))
                    if p.is_file() and p.name.endswith(SUFFIXES)})
    for path in files:
        start = time.perf_counter()
        try:
            result = analyze([str(path)])
        except SmbwireError as e:
            outcomes[f"refused ({type(e).__name__})"] += 1
            if len(str(e).strip().splitlines()) != 1:
                findings.append(f"{path}: {type(e).__name__} of more than one line: {str(e)[:300]!r}")
        except BaseException as e:  # noqa: BLE001 - any other exception is the finding
            if isinstance(e, KeyboardInterrupt):
                raise
            outcomes["exception"] += 1
            findings.append(f"{path}: {type(e).__name__}: {traceback.format_exc()[-400:]!r}")
        else:
            outcomes["analysed"] += 1
            if not result["accounting"]["reconciled"]:
                findings.append(f"{path}: accounting does not reconcile: {result['accounting']}")
        elapsed = time.perf_counter() - start
        if elapsed > slow:
            findings.append(f"{path}: {elapsed:.1f} s (over {slow:g} s)")
    return outcomes, findings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--slow", type=float, default=1.0, help="seconds a file may take (default 1)")
    args = ap.parse_args()
    outcomes, findings = sweep(args.dirs, args.slow)
    for f in findings:
        print(f)
    total = sum(outcomes.values())
    print(f"{total} files: " + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())) + f"; {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
