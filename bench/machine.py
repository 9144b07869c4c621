"""The machine a benchmark ran on, as its figures must name it.

This project's machine kind (2 vCPU AMD EPYC, 24 GiB) is not one machine: on 2026-11-28 and
2026-11-29 the same benchmarks ran about three times faster on the second, whose CPU has
AVX-512, which BLAKE3 uses. So each run records the CPU, the SIMD level BLAKE3 gets on it (the
blake3 crate's run-time choice: AVX-512 with AVX512F and AVX512VL, else AVX2, else SSE4.1,
else SSE2), the CPUs this process may use, memory, OS, kernel and the load before the run.

And the vCPUs move: the host places them near each other or far apart (`core_latency.c`), and
runs with several threads cost up to half as much again when they are far apart. So the
benchmarks measure the core-to-core round trip (`core_round_trip_ns`) next to each timed run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

_PROBE_SRC = Path(__file__).resolve().with_name("core_latency.c")
_probe: int | None = None


def blake3_simd(flags: set[str]) -> str:
    """The widest BLAKE3 implementation the blake3 crate picks on a CPU with `flags`."""
    if {"avx512f", "avx512vl"} <= flags:
        return "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    if "sse4_1" in flags:
        return "SSE4.1"
    return "SSE2"


def _field(text: str, key: str) -> str | None:
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == key:
            return value.strip()
    return None


def describe(cpuinfo: str | None = None, meminfo: str | None = None, os_release: str | None = None) -> dict:
    """What the figures of this run depend on; the arguments stand in for /proc and /etc files."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if cpuinfo is None else cpuinfo
    meminfo = Path("/proc/meminfo").read_text() if meminfo is None else meminfo
    if os_release is None:
        p = Path("/etc/os-release")
        os_release = p.read_text() if p.exists() else ""
    flags = set((_field(cpuinfo, "flags") or "").split())
    mem_kib = (_field(meminfo, "MemTotal") or "0 kB").split()[0]
    pretty = next((l.split("=", 1)[1].strip('"') for l in os_release.splitlines() if l.startswith("PRETTY_NAME=")), "")
    return {
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu_model": _field(cpuinfo, "model name") or "unknown",
        "cpus": len(os.sched_getaffinity(0)),
        "blake3_simd": blake3_simd(flags),
        "memory_gib": round(int(mem_kib) / 2**20, 1),
        "os": pretty,
        "kernel": os.uname().release,
        "load_average_before": round(os.getloadavg()[0], 2),
    }


def line(m: dict) -> str:
    """One line for a table's caption: "2 CPUs, AMD EPYC (BLAKE3: AVX-512), 23.4 GiB, ..."."""
    return (f"{m['cpus']} CPUs, {m['cpu_model']} (BLAKE3: {m['blake3_simd']}), {m['memory_gib']} GiB, "
            f"{m['os']}, kernel {m['kernel']}, load average before {m['load_average_before']:.2f}"
            + (f", core-to-core round trip {m['core_round_trip_ns']:.0f} ns" if m.get("core_round_trip_ns") else ""))


def _probe_binary() -> int | None:
    """`core_latency.c` built once per process (None without a C compiler): an open descriptor
    of the binary, whose directory is removed as soon as it is built, so nothing is left on
    disk however the process ends (an exit handler does not run when a process is killed, and
    runs of the whole test suite left a directory behind). Run it as `/proc/self/fd/N`."""
    global _probe
    if _probe is None:
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            return None
        with tempfile.TemporaryDirectory(prefix="smbwire-bench-") as d:
            out = Path(d) / "core_latency"
            subprocess.run([cc, "-O2", "-pthread", str(_PROBE_SRC), "-o", str(out)], check=True)
            _probe = os.open(out, os.O_RDONLY | os.O_CLOEXEC)
    return _probe


def core_round_trip_ns(cpus: tuple[int, int] | None = None, trips: int = 200_000) -> float | None:
    """Median ns for a cache line to go from one CPU to another and back (`core_latency.c`),
    between the first two CPUs this process may use (or `cpus`); None with fewer than two
    CPUs or no C compiler."""
    if cpus is None:
        mine = sorted(os.sched_getaffinity(0))
        if len(mine) < 2:
            return None
        cpus = (mine[0], mine[1])
    probe = _probe_binary()
    if probe is None:
        return None
    out = subprocess.run([f"/proc/self/fd/{probe}", str(cpus[0]), str(cpus[1]), str(trips)], check=True,
                         capture_output=True, text=True, pass_fds=(probe,))
    return float(out.stdout)
