"""The machine a benchmark ran on, as its figures must name it.

This project's machine kind (2 vCPU AMD EPYC, 24 GiB) is not one machine: on 2026-11-28 and
2026-11-29 the same benchmarks ran about three times faster on the second, whose CPU has
AVX-512, which BLAKE3 uses. So each run records the CPU, the SIMD level BLAKE3 gets on it (the
blake3 crate's run-time choice: AVX-512 with AVX512F and AVX512VL, else AVX2, else SSE4.1,
else SSE2), the CPUs this process may use, memory, OS, kernel and the load before the run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


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
            f"{m['os']}, kernel {m['kernel']}, load average before {m['load_average_before']:.2f}")
