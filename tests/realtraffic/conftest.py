"""Fixtures of the real-traffic suite: each workload runs once per session in its own lab;
the harness checks and the analyzer checks share that capture."""

from __future__ import annotations

import pytest

from .netlab import check_prerequisites
from .runner import RunResult, run_workload
from .workloads import ALL


@pytest.fixture(scope="session")
def lab_ready() -> None:
    # Raises (test error, never a skip) when not root or smbd/tshark/tcpdump are missing.
    check_prerequisites()


@pytest.fixture(scope="session")
def workload_runs(lab_ready, tmp_path_factory):
    """``workload_runs(name) -> RunResult``, each workload run at most once per session.

    ``NAME+dupmirror`` runs workload NAME with ingress *and* egress mirroring, so the span
    holds every frame twice; ``NAME+encrypted`` runs it on the share that requires SMB3
    encryption (the client summaries then hold the session keys); ``NAME+vxlanspan`` mirrors
    to the monitor inside a VXLAN tunnel (a remote mirror session)."""
    cache: dict[str, RunResult] = {}

    def get(name: str) -> RunResult:
        if name not in cache:
            base, _, variant = name.partition("+")
            if variant not in ("", "dupmirror", "encrypted", "vxlanspan"):
                raise ValueError(f"unknown run variant {variant!r}")
            cache[name] = run_workload(ALL[base], tmp_path_factory.mktemp(f"rt-{base}-{variant}"),
                                       mirror_egress=variant == "dupmirror", encrypted=variant == "encrypted",
                                       remote_span="vxlan" if variant == "vxlanspan" else None)
        return cache[name]

    return get
