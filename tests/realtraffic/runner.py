"""Run one workload in a fresh lab and keep what the tests look at: the span capture, the
topology file, the clients' summaries and the capture counters."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from pathlib import Path

from .netlab import ADDRESSES, CaptureResult, Lab
from .workloads import Workload


@dataclasses.dataclass
class RunResult:
    workload: Workload
    capture: CaptureResult
    topology: Path
    summaries: list[dict]  # one per ClientRun, in order
    put_sha256: dict[str, str]  # file name -> SHA-256 of the data placed on the share
    lab_namespaces: list[str]
    lab_pids: list[int]
    seconds: float


def run_workload(workload: Workload, out_dir: Path, *, mirror_egress: bool = False,
                 encrypted: bool = False, remote_span: str | None = None) -> RunResult:
    """With ``encrypted`` every client uses share [enc] (``server smb encrypt = required``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    put_sha: dict[str, str] = {}
    with Lab(capture_dir=out_dir, mirror_egress=mirror_egress, encrypted_share=encrypted,
             remote_span=remote_span) as lab:
        for (node, name), seed in workload.put_files.items():
            data = workload.put_bytes(seed, workload.put_size)
            put_sha[name] = hashlib.sha256(data).hexdigest()
            lab.put_file(node, name, data)
            del data
        summaries = [lab.run_client(r.node, r.server, r.ops, share="enc" if encrypted else "data", encrypt=encrypted)
                     for r in workload.runs]
        capture = lab.stop_capture()
        topology = out_dir / f"{workload.name}.topology.toml"
        topology.write_text(lab.topology_toml())
        namespaces = list(lab.namespaces)
        pids = list(lab.pids)
    return RunResult(workload, capture, topology, summaries, put_sha, namespaces, pids,
                     time.monotonic() - started)


def address(node: str) -> str:
    return ADDRESSES[node]
