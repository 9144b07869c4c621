"""The published Storage Spaces Direct experiments, reproduced from packets alone.

Captures come from the scenario generator (`smbwire synth`); the expected figures are the
issue's table, written out here, not read back from the generator."""

from __future__ import annotations

from pathlib import Path

import pytest

from smbwire import _core
from smbwire.engine import analyze
import json
from scenario_support import TOPOLOGY, edge, payload_edges

MiB = 1 << 20
W = 8 * MiB  # bytes the VM writes or reads


NOISE = {"mirror_dup": True, "retransmit": 0.01, "reorder": 0.01}


def _run(tmp_path: Path, scenario: str, **opts) -> dict:
    spec = {"scenario": scenario, "bytes": W, "io_size": MiB, "seed": 7, **opts}
    cap = tmp_path / f"{scenario}.pcap"
    _core.synth(json.dumps(spec), str(cap))
    return analyze([str(cap)], topology=TOPOLOGY)


@pytest.fixture(params=[False, True], ids=["clean", "mirror-dup+retx+reorder"])
def noise(request) -> dict:
    return NOISE if request.param else {}


@pytest.mark.parametrize("scenario,copies", [("mirror2", 1), ("nested4", 2), ("six", 3)])
def test_vm_on_owner_writes(tmp_path, noise, scenario, copies):
    r = _run(tmp_path, scenario, **noise)
    assert payload_edges(r) == [("owner", "partner", "replication")]
    e = edge(r, "owner", "partner", "replication")
    assert e["payload_bytes"] == copies * W
    assert e["unique_bytes"] == W
    assert e["sends"] == copies * (W // MiB)
    assert e["dup_ratio"] == pytest.approx(float(copies), abs=1e-9)
    assert e["per_copy_duplicate_bytes"] == (copies - 1) * W
    assert e["repeated_content_bytes"] == 0
    assert r["totals"]["amplification"] == pytest.approx(float(copies), abs=1e-9)


def test_vm_on_non_owner_writes_is_redirected_then_replicated(tmp_path, noise):
    r = _run(tmp_path, "redirect4", **noise)
    assert payload_edges(r) == [("owner", "partner", "replication"), ("partner", "owner", "redirection")]
    red = edge(r, "partner", "owner", "redirection")
    assert (red["payload_bytes"], red["unique_bytes"]) == (W, W)
    assert red["dup_ratio"] == pytest.approx(1.0)
    rep = edge(r, "owner", "partner", "replication")
    assert (rep["payload_bytes"], rep["unique_bytes"]) == (2 * W, W)
    assert rep["dup_ratio"] == pytest.approx(2.0)
    assert r["totals"]["payload_bytes"] == 3 * W
    assert r["totals"]["amplification"] == pytest.approx(3.0)


def test_vm_on_non_owner_reads_is_redirected_read(tmp_path, noise):
    r = _run(tmp_path, "read-nonowner", **noise)
    assert payload_edges(r) == [("owner", "partner", "redirected-read")]
    e = edge(r, "owner", "partner", "redirected-read")
    assert (e["payload_bytes"], e["unique_bytes"]) == (W, W)
    assert e["dup_ratio"] == pytest.approx(1.0)


def test_vm_on_owner_reads_puts_no_payload_on_the_wire(tmp_path, noise):
    r = _run(tmp_path, "read-owner", **noise)
    assert payload_edges(r) == []
    assert r["totals"]["payload_bytes"] == 0
    assert r["accounting"]["reconciled"]


def test_noise_is_removed_and_reported(tmp_path):
    r = _run(tmp_path, "nested4", **NOISE)
    assert r["tcp"]["mirror_duplicate_frames"] > 0
    assert r["tcp"]["retransmitted_bytes"] > 0
    assert r["tcp"]["gap_bytes"] == 0
    assert r["accounting"]["reconciled"]
    assert r["accounting"]["categories"]["mirror_duplicate"] > 0
