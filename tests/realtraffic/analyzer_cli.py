"""Run the smbwire analyzer CLI on a capture and pick edges out of its JSON (`smbwire/1`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from .netlab import ADDRESSES


def analyzer_command() -> list[str]:
    """The installed console script when there is one, else the module."""
    exe = shutil.which("smbwire")
    return [exe] if exe else [sys.executable, "-m", "smbwire.cli"]


def analyze(capture: Path, topology: Path, out: Path, *extra: str) -> dict:
    cmd = [*analyzer_command(), "analyze", str(capture), "--topology", str(topology), "--json", str(out), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(
            f"analyzer failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}"
        )
    return json.loads(out.read_text())


def _is(node_field: object, node: str) -> bool:
    # The topology names the nodes, so edges should carry names; accept the address too.
    return node_field in (node, ADDRESSES[node])


def edges_between(report: dict, src: str, dst: str) -> list[dict]:
    return [e for e in report["edges"] if _is(e["src"], src) and _is(e["dst"], dst)]


NUMERIC = ("payload_bytes", "unique_bytes", "sends", "trivial_bytes", "per_copy_duplicate_bytes",
           "repeated_content_bytes")


def edge_sum(report: dict, src: str, dst: str) -> dict:
    """The edge's figures summed over its rows (the report may split an edge by class) and
    the classes seen; a missing edge is all zeros with no classes."""
    rows = edges_between(report, src, dst)
    total = {k: sum(r.get(k, 0) or 0 for r in rows) for k in NUMERIC}
    total["classes"] = {r["class"]: r["payload_bytes"] for r in rows}
    return total
