"""bench/run.py's table: what a row without tshark (--no-tshark) shows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)


def test_tshark_columns_say_not_run_without_tshark():
    # Before: "nan | nanx / nanx".
    assert run.tshark_cells({}) == "not run | -"
    row = {"tshark_srt": {"mb_per_s": 216.4}, "speedup_vs_tshark_srt": 11.94, "speedup_vs_tshark_srt_threads": 19.61}
    assert run.tshark_cells(row) == "216 | 11.9x / 19.6x"
