"""bench/host_scaling.py: the scaling figures, their table, and processes run together."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_host_scaling", ROOT / "bench" / "host_scaling.py")
hs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hs)


def test_figures_of_a_job_with_a_threaded_run():
    # One process 1.0 s; two together 1.25 s (1.6x the work per second); --threads 2 0.8 s.
    f = hs.figures([1.0, 1.2, 0.9], [1.25, 1.5, 1.0], [0.8, 0.9, 0.75])
    assert f["alone_s"] == 1.0 and f["pair_s"] == 1.25 and f["threads_s"] == 0.8
    assert f["host_scaling"] == pytest.approx(1.6)
    assert f["host_scaling_rounds"] == pytest.approx([1.6, 1.6, 1.8])
    assert f["threads_scaling"] == pytest.approx(1.25)
    assert f["threads_scaling_rounds"] == pytest.approx([1.25, 1.2 / 0.9, 1.2])
    assert f["share"] == pytest.approx(1.25 / 1.6)


def test_figures_of_a_reference_job_and_the_table():
    ref = {"job": "compute", **hs.figures([2.0], [2.5], None)}
    assert "threads_s" not in ref and "share" not in ref
    eng = {"job": "engine, x.pcap", **hs.figures([1.0], [1.25], [0.8])}
    lines = hs.table([ref, eng]).splitlines()
    assert len(lines) == 4
    assert lines[2] == "| compute | 2.000 s | 2.500 s | 1.60x (1.60) | - | - | - |"
    assert lines[3] == "| engine, x.pcap | 1.000 s | 1.250 s | 1.60x (1.60) | 0.800 s | 1.25x (1.25) | 78% |"


def test_run_together_starts_all_and_counts_their_cpu():
    wall, cpu = hs.run_together([[sys.executable, "-c", "import time; time.sleep(0.3)"]] * 2)
    # Started together: the sleeps overlap (one after the other would take 0.6 s or more).
    assert 0.3 <= wall < 0.6
    assert len(cpu) == 2 and all(c >= 0 for c in cpu)
    with pytest.raises(SystemExit, match="exited 3"):
        hs.run_together([[sys.executable, "-c", "raise SystemExit(3)"]])
