"""The published Storage Spaces Direct experiments over SMB Direct (RoCEv2, RoCEv1, native
InfiniBand in ERF records, and iWARP),
reproduced from packets alone: the same edges, classes and figures as over TCP
(tests/scenarios/test_scenarios.py), because the S2D table does not depend on the transport. The WRITE
data travels in RDMA Read Responses and the READ data in RDMA Writes; the analyzer has to
find it through the SMB2 requests' buffer descriptors.

Captures come from the scenario generator; the expected figures are the issue's table,
written out here, not read back from the generator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smbwire import _core
from smbwire.engine import analyze
from scenario_support import TOPOLOGY, edge, payload_edges

MiB = 1 << 20
W = 8 * MiB


TRANSPORTS = {
    "rocev2": {"transport": "rocev2"},
    "rocev2-mtu1024": {"transport": "rocev2", "mtu": 1024},
    "iwarp": {"transport": "iwarp"},
    "rocev1": {"transport": "rocev1"},
    "infiniband": {"transport": "infiniband"},
}
# Mirror-port copies, plus: RoCEv2 data packets lost and resent later (same PSN); RoCEv1 data
# packets retransmitted and reordered; iWARP TCP segments retransmitted, reordered and
# lost-then-resent.
NOISE = {
    "rocev2": {"mirror_dup": True, "loss": 0.01},
    "rocev2-mtu1024": {"mirror_dup": True, "loss": 0.01},
    "iwarp": {"mirror_dup": True, "retransmit": 0.01, "reorder": 0.01, "loss": 0.01},
    "rocev1": {"mirror_dup": True, "retransmit": 0.01, "reorder": 0.01},
    "infiniband": {"mirror_dup": True, "retransmit": 0.01, "reorder": 0.01, "loss": 0.01},
}


def _run(tmp_path: Path, scenario: str, transport: str, **opts) -> dict:
    spec = {"scenario": scenario, "bytes": W, "io_size": MiB, "seed": 7, **TRANSPORTS[transport], **opts}
    cap = tmp_path / f"{scenario}-{transport}.pcap"
    _core.synth(json.dumps(spec), str(cap))
    return analyze([str(cap)], topology=TOPOLOGY)


@pytest.fixture(params=list(TRANSPORTS))
def transport(request) -> str:
    return request.param


@pytest.fixture(params=[False, True], ids=["clean", "noisy"])
def noise(request, transport) -> dict:
    return NOISE[transport] if request.param else {}


@pytest.mark.parametrize("scenario,copies", [("mirror2", 1), ("nested4", 2), ("six", 3)])
def test_vm_on_owner_writes(tmp_path, transport, noise, scenario, copies):
    r = _run(tmp_path, scenario, transport, **noise)
    assert payload_edges(r) == [("owner", "partner", "replication")]
    e = edge(r, "owner", "partner", "replication")
    assert e["payload_bytes"] == copies * W
    assert e["unique_bytes"] == W
    assert e["sends"] == copies * (W // MiB)
    assert e["dup_ratio"] == pytest.approx(float(copies), abs=1e-9)
    assert e["per_copy_duplicate_bytes"] == (copies - 1) * W
    assert e["repeated_content_bytes"] == 0
    assert r["totals"]["amplification"] == pytest.approx(float(copies), abs=1e-9)


def test_vm_on_non_owner_writes_is_redirected_then_replicated(tmp_path, transport, noise):
    r = _run(tmp_path, "redirect4", transport, **noise)
    assert payload_edges(r) == [("owner", "partner", "replication"), ("partner", "owner", "redirection")]
    red = edge(r, "partner", "owner", "redirection")
    assert (red["payload_bytes"], red["unique_bytes"]) == (W, W)
    assert red["dup_ratio"] == pytest.approx(1.0)
    rep = edge(r, "owner", "partner", "replication")
    assert (rep["payload_bytes"], rep["unique_bytes"]) == (2 * W, W)
    assert rep["dup_ratio"] == pytest.approx(2.0)
    assert r["totals"]["payload_bytes"] == 3 * W
    assert r["totals"]["amplification"] == pytest.approx(3.0)


def test_vm_on_non_owner_reads_is_redirected_read(tmp_path, transport, noise):
    r = _run(tmp_path, "read-nonowner", transport, **noise)
    assert payload_edges(r) == [("owner", "partner", "redirected-read")]
    e = edge(r, "owner", "partner", "redirected-read")
    assert (e["payload_bytes"], e["unique_bytes"]) == (W, W)
    assert e["dup_ratio"] == pytest.approx(1.0)


def test_vm_on_owner_reads_puts_no_payload_on_the_wire(tmp_path, transport, noise):
    r = _run(tmp_path, "read-owner", transport, **noise)
    assert payload_edges(r) == []
    assert r["totals"]["payload_bytes"] == 0
    assert r["accounting"]["reconciled"]


@pytest.mark.parametrize("transport_name", ["rocev2", "iwarp"])
def test_multichannel_fragments_invalidate_and_descriptors_change_nothing(tmp_path, transport_name):
    r = _run(tmp_path, "redirect4", transport_name, qps=2, max_send_size=128, send_with_invalidate=True,
             descriptors=3, dialect="3.1.1")
    red = edge(r, "partner", "owner", "redirection")
    rep = edge(r, "owner", "partner", "replication")
    assert (red["payload_bytes"], red["unique_bytes"], rep["payload_bytes"], rep["unique_bytes"]) == (W, W, 2 * W, W)


@pytest.mark.parametrize("transport_name", ["rocev2", "iwarp", "rocev1"])
def test_packets_the_capture_dropped_are_reported_not_invented(tmp_path, transport_name):
    """With `loss_mode: drop` some RDMA data packets are missing for good: the analyzer still
    finds every WRITE, reports the gaps, and counts no byte it never saw."""
    spec = {"scenario": "nested4", "bytes": W, "io_size": MiB, "seed": 7, "transport": transport_name,
            "loss": 0.01, "loss_mode": "drop"}
    cap = tmp_path / "drop.pcap"
    truth = json.loads(_core.synth(json.dumps(spec), str(cap)))
    assert truth["rdma"]["dropped_packets"] > 0
    r = analyze([str(cap)], topology=TOPOLOGY)
    assert r["smb2"]["write_req_pdus"] == 2 * (W // MiB)
    assert r["smb2"]["payload_incomplete"] > 0
    assert r["rdma"]["gaps"] > 0
    assert sum(e["payload_bytes"] for e in r["edges"]) <= 2 * W - truth["rdma"]["dropped_bytes"] // 2
    assert r["accounting"]["reconciled"]


# Byte accounting over SMB Direct, from the generator's Truth (clean captures: no mirror copies,
# loss or retransmission). Wire sizes used: SMB Direct Negotiate Request 20 B and Response 32 B
# (MS-SMBD §2.2.1-2), data transfer header 24 B up to DataOffset (§2.2.3; the generator pads
# nothing more); a RoCE CM MAD packet is BTH 12 + DETH 8 + MAD 256 + ICRC 4 = 280 B; an IB ACK is
# BTH 12 + AETH 4 + ICRC 4 = 20 B; an MPA Request/Reply is 20 B + 8 B of private data.
@pytest.mark.parametrize("scenario", ["nested4", "read-nonowner"])
@pytest.mark.parametrize("extra", [{}, {"max_send_size": 128, "qps": 2}], ids=["plain", "fragmented-2qps"])
def test_accounting_categories_match_the_truth(tmp_path, transport, scenario, extra):
    spec = {"scenario": scenario, "bytes": W, "io_size": MiB, "seed": 7, **TRANSPORTS[transport], **extra}
    cap = tmp_path / "acct.pcap"
    truth = json.loads(_core.synth(json.dumps(spec), str(cap)))
    t = truth["rdma"]
    r = analyze([str(cap)], topology=TOPOLOGY)
    cats = r["accounting"]["categories"]
    assert r["accounting"]["reconciled"]
    # RDMA-moved payload: exactly the linked bytes, which are the bytes the generator moved by
    # RDMA Read (WRITE data) and RDMA Write (READ data), which are the payload on the edges.
    moved = t["rdma_read_bytes"] + t["rdma_write_bytes"]
    assert moved == truth["totals"]["payload_bytes"] > 0
    assert cats["rdma_payload"] == r["rdma"]["linked_bytes"] == moved
    assert sum(e["payload_bytes"] for e in r["edges"]) == moved
    assert cats.get("smb_payload", 0) == 0  # nothing inline
    # SMB Direct control: negotiate messages plus one 24-byte header per data transfer message
    # (each fragment has its own).
    control = 20 * t["smbd_negotiate_requests"] + 32 * t["smbd_negotiate_responses"] + 24 * t["smbd_data_messages"]
    assert t["smbd_negotiate_requests"] == t["connections"]
    assert cats["smbdirect_control"] == control
    # The SMB2 messages inside (every byte metadata: the data went by RDMA).
    assert cats["smb_metadata"] == t["smbd_data_length"]
    if transport.startswith("roce") or transport == "infiniband":
        mads = sum(t["cm"].values())
        assert t["cm"]["ConnectRequest"] == t["connections"]
        assert cats["rdma_cm"] == 280 * mads
        assert cats["rdma_ack"] == 20 * t["acks"] > 0
    else:
        assert cats["rdma_cm"] == 2 * t["connections"] * (20 + 8)
        assert cats.get("rdma_ack", 0) == 0
    for k in ("rdma_unlinked", "rdma_other_ulp", "rdma_retransmitted", "rdma_unparsed", "smb_unparsed", "malformed"):
        assert cats.get(k, 0) == 0, k
