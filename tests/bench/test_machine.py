"""bench/machine.py: the machine the benchmark figures name, read from /proc and /etc."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_machine", ROOT / "bench" / "machine.py")
machine = importlib.util.module_from_spec(spec)
spec.loader.exec_module(machine)

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9B14
flags\t\t: fpu sse4_1 avx avx2 avx512f avx512bw avx512vl sha_ni
"""


def test_blake3_gets_the_widest_simd_the_crate_would_pick():
    assert machine.blake3_simd({"avx2", "avx512f", "avx512vl"}) == "AVX-512"
    # AVX512F without AVX512VL: the blake3 crate stays on AVX2.
    assert machine.blake3_simd({"avx2", "avx512f"}) == "AVX2"
    assert machine.blake3_simd({"sse4_1"}) == "SSE4.1"
    assert machine.blake3_simd(set()) == "SSE2"


def test_describe_reads_the_cpu_memory_and_os():
    m = machine.describe(CPUINFO, "MemTotal:       24641872 kB\n",
                         'NAME="Debian GNU/Linux"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')
    assert m["cpu_model"] == "AMD EPYC 9B14"
    assert m["blake3_simd"] == "AVX-512"
    assert m["memory_gib"] == 23.5
    assert m["os"] == "Debian GNU/Linux 12 (bookworm)"
    assert m["cpus"] == len(os.sched_getaffinity(0))
    assert m["kernel"] == os.uname().release
    line = machine.line(m)
    assert line.startswith(f"{m['cpus']} CPUs, AMD EPYC 9B14 (BLAKE3: AVX-512), 23.5 GiB, Debian GNU/Linux 12")


def test_this_machine_is_described():
    m = machine.describe()
    assert m["cpu_model"] and m["cpus"] >= 1 and m["memory_gib"] > 0
    assert m["blake3_simd"] in {"AVX-512", "AVX2", "SSE4.1", "SSE2"}


def test_core_round_trip_is_measured_between_two_cpus():
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        assert machine.core_round_trip_ns() is None
        return
    ns = machine.core_round_trip_ns(trips=20_000)
    # A cache line's round trip between two cores: tens to a few thousand ns, never zero.
    assert 5 < ns < 100_000
    assert machine.core_round_trip_ns((mine[1], mine[0]), trips=20_000) > 5


def test_round_trip_range_names_the_rounds():
    run = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    m = importlib.util.module_from_spec(run)
    run.loader.exec_module(m)
    rounds = [{"core_round_trip_ns": x} for x in (120.4, 410.0, 208.2)]
    assert m.round_trip_range({"rounds": rounds}) == "120-410"
    assert m.round_trip_range({"rounds": rounds[:1]}) == "120"
    assert m.round_trip_range({"rounds": [{"core_round_trip_ns": None}]}) == "-"


def test_rounds_are_summarised_by_placement():
    run = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    m = importlib.util.module_from_spec(run)
    run.loader.exec_module(m)
    rounds = [{"core_round_trip_ns": rt, "seconds_1": a, "seconds_2": b, "threads_speedup": a / b}
              for rt, a, b in [(100, 0.6, 0.4), (110, 0.6, 0.5), (420, 0.6, 0.6), (None, 0.6, 0.3)]]
    bp = m.by_placement(rounds, 2)
    assert bp["near"]["rounds"] == 2 and bp["far"]["rounds"] == 1
    assert bp["near"]["seconds_2"] == 0.45 and bp["far"]["threads_speedup"] == 1.0
    assert m.placement_cell({"by_placement": bp}) == "1.35x (2) / 1.00x (1)"
    assert m.placement_cell({"by_placement": m.by_placement(rounds[:2], 2)}) == "1.35x (2) / -"


def test_a_round_whose_probes_disagree_is_neither_near_nor_far():
    run = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    m = importlib.util.module_from_spec(run)
    run.loader.exec_module(m)
    rounds = [{"core_round_trip_ns": rt, "core_round_trip_ns_after": rt2, "seconds_1": a, "seconds_2": b,
               "threads_speedup": a / b}
              for rt, rt2, a, b in [(100, 120, 0.6, 0.4), (110, 400, 0.6, 0.5), (420, 380, 0.6, 0.6),
                                    (450, 150, 0.6, 0.48), (None, None, 0.6, 0.3), (130, None, 0.6, 0.4)]]
    assert [m.placement_of(r) for r in rounds] == ["near", "moved", "far", "moved", None, "near"]
    bp = m.by_placement(rounds, 2)
    assert (bp["near"]["rounds"], bp["far"]["rounds"], bp["moved"]["rounds"]) == (2, 1, 2)
    assert m.placement_cell({"by_placement": bp}) == "1.50x (2) / 1.00x (1); moved 1.23x (2)"
    assert m.round_trip_range({"rounds": rounds}) == "100-450"


def test_the_probe_is_built_once_and_leaves_nothing_on_disk_even_when_killed():
    """The core round-trip probe is compiled once per process into a temporary directory that
    is removed at once (the process keeps the binary open and runs it through /proc/self/fd):
    a benchmark process killed before its exit handlers run leaves no directory behind."""
    assert shutil.which("cc") or shutil.which("gcc"), "the machine kind has gcc"
    before = set(Path(tempfile.gettempdir()).glob("smbwire-bench-*"))
    code = ("import importlib.util, os, signal, sys; s = importlib.util.spec_from_file_location('m', sys.argv[1]); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "a = m._probe_binary(); b = m._probe_binary(); assert a == b; "
            "assert m.core_round_trip_ns(trips=2000) > 0 and m.core_round_trip_ns(trips=2000) > 0; "
            "print(os.readlink(f'/proc/self/fd/{a}'), flush=True); os.kill(os.getpid(), signal.SIGKILL)")
    p = subprocess.run([sys.executable, "-c", code, str(ROOT / "bench" / "machine.py")],
                       capture_output=True, text=True)
    assert p.returncode == -signal.SIGKILL, p.stderr
    target = p.stdout.strip()
    # The open binary's directory was already gone while the process ran.
    assert target.endswith("/core_latency (deleted)"), target
    assert Path(target.removesuffix(" (deleted)")).parent.name.startswith("smbwire-bench-")
    assert set(Path(tempfile.gettempdir()).glob("smbwire-bench-*")) <= before
