"""`smbwire live` memory stays bounded by the window, not by how long it runs: distinct data
keeps flowing through a short window while the process's resident set is sampled. (An
hours-long soak does not fit CI; this is the same property over a run 4x longer than the
warm-up, with the index's own peak as the direct measure.)"""

from __future__ import annotations

import time
from pathlib import Path

from realtraffic.netlab import Lab, check_prerequisites
from realtraffic.workloads import CHUNK

from .test_live_command import LiveProc

BLOCK = 4096
RUN_BYTES = 16 << 20  # per client run: 256 distinct 64 KiB WRITEs


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def write_run(lab: Lab, i: int) -> None:
    ops = [{"op": "write", "file": f"m{i}.bin", "offset": k * CHUNK, "length": CHUNK, "data_seed": f"mem/{i}/{k}"}
           for k in range(RUN_BYTES // CHUNK)]
    s = lab.run_client("n1", "n2", ops)
    assert s["write_bytes"] == RUN_BYTES
    # Runs 1.1 s apart, so the 1 s window holds at most two of them however fast the host
    # writes one (on a fast host four runs fitted in a second, and the window held them all).
    time.sleep(1.1)


def test_memory_is_bounded_by_the_window_not_the_run_length(tmp_path):
    check_prerequisites()  # raises, never skips
    with Lab(capture=False) as lab:
        live = LiveProc(lab, tmp_path, "--window", "1", "--duration", "600")
        try:
            for i in range(2):
                write_run(lab, i)
            time.sleep(1.5)
            warm = rss_kib(live.p.pid)
            for i in range(2, 10):
                write_run(lab, i)
            time.sleep(1.5)
            late = rss_kib(live.p.pid)
            live.p.terminate()
            assert live.wait() == 0, live.err()
        finally:
            if live.p.poll() is None:
                live.p.kill()
                live.wait()
    result = live.result()
    print(f"RSS warm {warm} KiB, late {late} KiB, index {result['index']}")  # shown on failure
    total_blocks = 10 * RUN_BYTES // BLOCK
    pushed = result["totals"]["payload_bytes"]
    assert pushed == 10 * RUN_BYTES, result["totals"]
    # The index held only what a 1 s window holds, far below everything that went through it ...
    assert result["index"]["window_seconds"] == 1.0
    assert result["index"]["peak_live_blocks"] < total_blocks // 3, result["index"]
    # ... and 128 MiB more of distinct payload (a 600 s window grows it by ~8 MiB here) after the warm-up did not grow the process.
    assert late - warm < 6 * 1024, f"RSS grew from {warm} KiB to {late} KiB"
