"""A block is a block whatever carried it: the same payload sent once inline over SMB2/TCP and
once by RDMA (SMB Direct) on the same edge is one duplicate, hashed identically."""

from __future__ import annotations

import json

import pytest

from smbwire import _core
from smbwire.engine import analyze
from scenario_support import TOPOLOGY

MiB = 1 << 20
W = 4 * MiB


def _capture(tmp_path, transport: str) -> str:
    path = tmp_path / f"mirror2-{transport}.pcap"
    spec = {"scenario": "mirror2", "bytes": W, "io_size": MiB, "seed": 11, "transport": transport}
    _core.synth(json.dumps(spec), str(path))
    return str(path)


@pytest.mark.parametrize("rdma", ["rocev2", "iwarp"])
def test_same_payload_over_tcp_and_rdma_is_one_duplicate(tmp_path, rdma):
    tcp, over_rdma = _capture(tmp_path, "tcp"), _capture(tmp_path, rdma)
    alone = [analyze([p], topology=TOPOLOGY) for p in (tcp, over_rdma)]
    for r in alone:
        (e,) = [e for e in r["edges"] if e["payload_bytes"]]
        assert (e["src"], e["dst"], e["class"], e["payload_bytes"], e["unique_bytes"]) == \
            ("owner", "partner", "replication", W, W)
    # Alone, nothing is duplicated.
    assert [r["top_duplicates"] for r in alone] == [[], []]
    both = analyze([tcp, over_rdma], topology=TOPOLOGY, top_n=100)
    (e,) = [e for e in both["edges"] if e["payload_bytes"]]
    assert (e["payload_bytes"], e["unique_bytes"]) == (2 * W, W)
    assert e["dup_ratio"] == pytest.approx(2.0)
    # Each of the W/io_size payloads is named once, with one send over each transport.
    assert len(both["top_duplicates"]) == W // MiB
    for d in both["top_duplicates"]:
        assert sorted(s["transport"] for s in d["sends"]) == ["rdma", "tcp"]
    assert both["accounting"]["reconciled"]
