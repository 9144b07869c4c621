"""Every bundled capture, analysed by the real engine, against the figures in its
`NAME.expected.json` (captures/README.md).

The expected files are the synthesizer's Truth for each capture, computed while it wrote the
frames, not by the analyzer. They were produced for the topology in `captures/s2d-two-node.toml`
(their `"topology"` says so, and is checked against the file); a capture whose expected file
has no topology is analysed without one. Edges are compared field by field, then the totals,
SMB2 and TCP counters and the capture size that have the same meaning on both sides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smbwire.engine import analyze
from smbwire.topology import load_topology

from paths import ROOT
CAPTURES = ROOT / "captures"
TOPOLOGY_FILE = CAPTURES / "s2d-two-node.toml"
EXPECTED = sorted(CAPTURES.glob("*.expected.json"))

#: Edge fields of the Truth that the analyzer reports under the same name and meaning.
EDGE_FIELDS = ("payload_bytes", "trivial_bytes", "unique_bytes", "sends", "dup_ratio",
               "per_copy_duplicate_bytes", "repeated_content_bytes")


def _pcap_of(expected: Path) -> Path:
    return expected.with_name(expected.name.removesuffix(".expected.json") + ".pcap")


def test_every_bundled_capture_has_its_expected_file_and_the_other_way_round():
    pcaps = sorted(CAPTURES.glob("*.pcap"))
    assert len(EXPECTED) >= 7, EXPECTED
    assert sorted(_pcap_of(e) for e in EXPECTED) == pcaps


def _topology_for(truth: dict):
    """The topology the expected file was produced for: captures/s2d-two-node.toml when it
    names nodes (checked to be the same nodes), none otherwise."""
    want = truth.get("topology")
    if not want or not want.get("nodes"):
        return None
    topo = load_topology(TOPOLOGY_FILE)
    have = [{"name": n["name"], "addresses": n["addresses"], "member": n["member"]}
            for n in topo.to_config()["nodes"]]
    assert sorted(have, key=lambda n: n["name"]) == sorted(want["nodes"], key=lambda n: n["name"]), \
        f"{TOPOLOGY_FILE.name} is not the topology the expected file was produced for"
    assert not topo.rules and not want.get("rules")
    return topo


@pytest.fixture(scope="module", params=EXPECTED, ids=[e.name.removesuffix(".expected.json") for e in EXPECTED])
def case(request) -> tuple[dict, dict, dict]:
    expected_path: Path = request.param
    truth = json.loads(expected_path.read_text())
    topo = _topology_for(truth)
    result = analyze([str(_pcap_of(expected_path))], topology=topo)
    nodes = {n["name"]: n for n in (truth.get("topology") or {}).get("nodes", [])}
    return truth, result, nodes


def _key(e: dict) -> tuple[str, str, str]:
    return (e["src"], e["dst"], e["class"])


def test_edges_field_by_field(case):
    truth, result, nodes = case
    want = {_key(e): e for e in truth["edges"]}
    got = {_key(e): e for e in result["edges"]}
    assert len(want) == len(truth["edges"]) and len(got) == len(result["edges"]), "an edge is listed twice"
    assert sorted(got) == sorted(want)
    for k, w in want.items():
        g = got[k]
        for f in EDGE_FIELDS:
            if f == "dup_ratio" and w[f] is not None:
                assert g[f] == pytest.approx(w[f], abs=1e-9), (k, f, g[f], w[f])
            else:
                assert g[f] == w[f], (k, f, g[f], w[f])
        # The Truth names the addresses of each edge: they are the nodes' in the topology.
        if nodes:
            assert w["src_address"] in nodes[w["src"]]["addresses"]
            assert w["dst_address"] in nodes[w["dst"]]["addresses"]


def test_totals(case):
    truth, result, _ = case
    t, r = truth["totals"], result["totals"]
    assert r["payload_bytes"] == t["payload_bytes"]
    assert r["payload_bytes"] == sum(e["payload_bytes"] for e in result["edges"])
    if t["payload_bytes"]:
        # The Truth divides by the bytes the VM wrote or read (logical); the analyzer by the
        # distinct bytes it saw on all edges. On these captures every logical byte crossed
        # the wire.
        assert r["globally_unique_bytes"] == t["logical_bytes"]
        assert r["amplification"] == pytest.approx(t["amplification"], abs=1e-9)


def test_smb2_counters(case):
    truth, result, _ = case
    t, r = truth["smb2"], result["smb2"]
    assert r["write_req_pdus"] == t["write_requests"]
    assert r["write_bytes"] == t["write_data_bytes"]
    assert r["read_resp_pdus"] == t["read_responses"]
    assert r["read_bytes"] == t["read_data_bytes"]
    assert sum(r["commands"].values()) == t["messages"]
    assert r["payload_incomplete"] == 0 and r["resyncs"] == 0


def test_tcp_and_capture(case):
    truth, result, _ = case
    tcp, cap = truth["tcp"], truth["capture"]
    assert result["tcp"]["flows"] == tcp["connections"]
    assert result["tcp"]["retransmitted_segments"] == tcp["retransmitted_segments"]
    assert result["tcp"]["mirror_duplicate_frames"] == cap["mirror_duplicate_frames"]
    assert result["tcp"]["gap_bytes"] == 0
    assert result["analysis"]["frames"] == cap["frames"]
    assert [i["size_bytes"] for i in result["inputs"]] == [cap["file_bytes"]]
    assert result["capture"]["first_ts"] == pytest.approx(cap["first_ts_ns"] / 1e9, abs=1e-6)
    assert result["capture"]["last_ts"] == pytest.approx(cap["last_ts_ns"] / 1e9, abs=1e-6)
    assert result["accounting"]["reconciled"]
