"""Cross-implementation check: captures from the independent scapy generator (scapy_s2d.py,
no code shared with our Rust encoders) must give the figures their scenario defines, and
tshark must decode them as the generator meant them.

The analysis runs on wire-size frames (MSS 1448), with trivial blocks in the payloads, over
the two-node topology of captures/s2d-two-node.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from smbwire.engine import analyze
from scenario_support import TOPOLOGY, edge, payload_edges
import synth_oracle

from . import scapy_s2d

pytestmark = pytest.mark.usefixtures("tshark_required")

KiB = 1024
# Small enough to generate quickly in pure Python, large enough to span many segments per WRITE.
IOS, IO_SIZE = 3, 128 * KiB


@pytest.fixture(scope="module", params=sorted(scapy_s2d.SCENARIOS))
def generated(request, tmp_path_factory) -> tuple[Path, scapy_s2d.Options, dict]:
    opts = scapy_s2d.Options(request.param, ios=IOS, io_size=IO_SIZE, trivial_every=8, seed=11)
    path = tmp_path_factory.mktemp("scapy") / f"{request.param}.pcap"
    truth = scapy_s2d.generate(str(path), opts)
    return path, opts, truth


EDGE_FIELDS = ["payload_bytes", "trivial_bytes", "nontrivial_bytes", "unique_bytes", "sends",
               "per_copy_duplicate_bytes", "dup_ratio"]


def test_analyzer_gives_the_scenario_figures(generated):
    path, _, truth = generated
    r = analyze([str(path)], topology=TOPOLOGY)
    assert r["anomalies"] == {}, r["anomalies"]
    assert sum(i["frames"] for i in r["inputs"]) == truth["frames"]
    assert payload_edges(r) == sorted((e["src"], e["dst"], e["class"]) for e in truth["edges"])
    for want in truth["edges"]:
        got = edge(r, want["src"], want["dst"], want["class"])
        assert {k: got[k] for k in EDGE_FIELDS} == {k: want[k] for k in EDGE_FIELDS}, (want["src"], want["dst"])
        assert got["repeated_content_bytes"] == 0
    assert r["totals"]["payload_bytes"] == truth["payload_bytes"]
    assert r["totals"]["amplification"] == pytest.approx(truth["amplification"])
    assert r["smb2"]["write_req_pdus"] == truth["write_requests"]
    assert r["smb2"]["dialects"] == ["3.0.2"]
    # Every byte accounted and nothing left unparsed.
    acct = r["accounting"]
    assert acct["reconciled"] and acct["total_bytes"] == path.stat().st_size
    assert acct["categories"]["smb_payload"] == truth["payload_bytes"]
    assert acct["categories"].get("smb_unparsed", 0) == 0


def test_tshark_decodes_what_the_generator_meant(generated):
    path, opts, truth = generated
    assert synth_oracle.problems(path) == []
    writes = synth_oracle.fields(path, "smb2.cmd == 9 && smb2.flags.response == 0",
                                 ["smb2.write_length", "smb2.file_offset"])
    assert len(writes) == truth["write_requests"]
    assert all(int(n) == opts.io_size for n, _ in writes)
    assert sum(int(n) for n, _ in writes) == truth["payload_bytes"]
    offsets = sorted({int(o) for _, o in writes})
    assert offsets == [i * opts.io_size for i in range(opts.ios)]
    frames = synth_oracle.values(path, "frame.number")
    assert len(frames) == truth["frames"]
