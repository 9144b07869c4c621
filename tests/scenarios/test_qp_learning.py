"""How the analyzer learns which RoCE queue pairs carry SMB Direct, end to end on generated
captures:

(a) with the RDMA CM REQ/REP present (service ID port 445), every connection is learned from
    the CM, none by inference (the counters say which path named each connection);
(b) a CM exchange for another upper layer (service ID port 4420, NVMe-oF) marks its QPs as not
    SMB Direct: all their RC bytes land in `rdma_other_ulp`, exactly the generator's count, and
    the SMB Direct figures are untouched;
(c) a capture that starts mid-connection (no CM REQ/REP, no SMB Direct negotiate: cut at the
    first SMB2 WRITE request) still links every payload, by inference from the first Send."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from pcap_split import split
from smbwire import _core
from smbwire.engine import analyze
from scenario_support import TOPOLOGY

MiB = 1 << 20
W = 4 * MiB


def synth(tmp_path: Path, name: str, **opts) -> tuple[Path, dict]:
    spec = {"scenario": "nested4", "bytes": W, "io_size": MiB, "seed": 11, "transport": "rocev2", **opts}
    cap = tmp_path / f"{name}.pcap"
    truth = json.loads(_core.synth(json.dumps(spec), str(cap)))
    return cap, truth


def is_io_request(rec: bytes) -> bool:
    """An SMB2 WRITE or READ request header (0xFE 'SMB', Command 9 or 8, not a response) in the frame."""
    i = rec.find(b"\xfeSMB")
    while i >= 0:
        if i + 20 <= len(rec):
            cmd, flags = struct.unpack_from("<H", rec, i + 12)[0], struct.unpack_from("<I", rec, i + 16)[0]
            if cmd in (8, 9) and not flags & 1:
                return True
        i = rec.find(b"\xfeSMB", i + 1)
    return False


def test_cm_names_every_smb_direct_connection(tmp_path):
    cap, truth = synth(tmp_path, "cm", qps=2)
    conns = truth["rdma"]["connections"]
    assert conns >= 2
    assert truth["rdma"]["cm"]["ConnectRequest"] == conns
    r = analyze([str(cap)], topology=TOPOLOGY)
    rd = r["rdma"]
    assert (rd["infiniband"]["cm_requests"], rd["infiniband"]["cm_replies"]) == (conns, conns)
    assert (rd["cm_connections"], rd["inferred_connections"], rd["smbdirect_connections"]) == (conns, 0, conns)
    assert rd["other_ulp_connections"] == 0
    assert rd["linked_bytes"] == 2 * W
    assert r["accounting"]["categories"].get("rdma_other_ulp", 0) == 0


def test_cm_for_another_port_puts_its_traffic_in_other_ulp(tmp_path):
    cap, truth = synth(tmp_path, "nvme", other_ulp_port=4420)
    plain, plain_truth = synth(tmp_path, "plain")
    assert truth["rdma"]["other_ulp_connections"] == 1 and truth["rdma"]["other_ulp_bytes"] > 8192
    r = analyze([str(cap)], topology=TOPOLOGY)
    p = analyze([str(plain)], topology=TOPOLOGY)
    rd = r["rdma"]
    assert rd["other_ulp_connections"] == 1
    assert rd["cm_connections"] == truth["rdma"]["connections"] == plain_truth["rdma"]["connections"]
    assert rd["inferred_connections"] == 0
    cats = r["accounting"]["categories"]
    assert cats["rdma_other_ulp"] == truth["rdma"]["other_ulp_bytes"]
    assert r["accounting"]["reconciled"]
    # The NVMe-oF connection changes nothing of SMB Direct's figures.
    for k in ("linked_transfers", "linked_bytes", "smbdirect_connections"):
        assert rd[k] == p["rdma"][k], k
    assert [(e["src"], e["dst"], e["class"], e["payload_bytes"]) for e in r["edges"]] == \
        [(e["src"], e["dst"], e["class"], e["payload_bytes"]) for e in p["edges"]]
    # Its 4 KiB RDMA Writes are not SMB Direct payload: rdma_payload is the same.
    assert cats["rdma_payload"] == p["accounting"]["categories"]["rdma_payload"] == 2 * W


@pytest.mark.parametrize("opts", [{}, {"qps": 2, "max_send_size": 128}, {"qps": 2, "scenario": "read-nonowner"},
                                  {"descriptors": 16, "mtu": 256},
                                  {"descriptors": 16, "mtu": 256, "scenario": "read-nonowner"}],
                         ids=["writes", "writes-2qps-fragmented", "reads-2qps",
                              # Sends of several packets: a WRITE or READ request with 16 buffer
                              # descriptors does not fit a 256-byte path MTU. Its queue pair is
                              # adopted at a Send's FIRST packet (before 2026-12-07 only at a
                              # whole Send: no WRITE of these was found, no byte linked).
                              "writes-multipacket-sends", "reads-multipacket-sends"])
def test_capture_starting_mid_connection_is_learned_by_inference(tmp_path, opts):
    full, truth = synth(tmp_path, "full", **opts)
    reads = opts.get("scenario") == "read-nonowner"
    head, recs = split(full.read_bytes())
    first = next(i for i, rec in enumerate(recs) if is_io_request(rec))
    cut = tmp_path / "mid.pcap"
    cut.write_bytes(head + b"".join(recs[first:]))
    r = analyze([str(cut)], topology=TOPOLOGY)
    rd = r["rdma"]
    conns = truth["rdma"]["connections"]
    # Neither the CM REQ/REP nor the SMB Direct negotiate is in the cut capture.
    assert (rd["infiniband"]["cm_requests"], rd["infiniband"]["cm_replies"]) == (0, 0)
    assert (rd["smbdirect"]["negotiate_requests"], rd["smbdirect"]["negotiate_responses"]) == (0, 0)
    assert rd["cm_connections"] == 0
    # Each QP pair is adopted at its first SMB Direct Send, its reverse QP paired by address at
    # the first Send, RDMA Read Request or RDMA Write it receives (the Read Request for the
    # first WRITE, the RDMA Write for the first READ, come before any Send in that direction)...
    assert rd["inferred_connections"] == conns
    # ...and every payload is still linked and attributed as with the whole capture.
    moved = W if reads else 2 * W
    assert rd["linked_bytes"] == moved and rd["unlinked_bytes"] == 0
    e = [x for x in r["edges"] if x["payload_bytes"]]
    want = ("owner", "partner", "redirected-read", W, W) if reads else ("owner", "partner", "replication", 2 * W, W)
    assert [(x["src"], x["dst"], x["class"], x["payload_bytes"], x["unique_bytes"]) for x in e] == [want]
    assert r["accounting"]["reconciled"]


@pytest.mark.parametrize("opts,tenth", [({"qps": 2}, 1), ({"qps": 2, "scenario": "read-nonowner"}, 0.7), ({"qps": 4}, 1)],
                         ids=["writes-2qps", "reads-2qps", "writes-4qps"])
def test_capture_starting_mid_traffic_pairs_queue_pairs_by_their_buffers(tmp_path, opts, tenth):
    """A capture that starts while several channels between the same two addresses carry I/O
    (SMB multichannel over one pair of RDMA NICs: Windows opens two connections per NIC): the
    first Sends of both directions come in any order, so pairing a queue pair with the latest
    half-open connection between its addresses is often wrong, and then no payload of either
    connection was linked: before `buffer_pairings`, 0 of 462 WRITEs, 0 of 239 READs and 116
    of 463 WRITEs were linked in these three cases. An RDMA operation names the buffer its WRITE or READ
    request registered, and that request's connection is the operation's (`rdma::roce::claim`,
    `repair`): every I/O whose request is in the capture is linked."""
    full, truth = synth(tmp_path, "full", io_size=65536, bytes=16 * MiB, seed=5, **opts)
    head, recs = split(full.read_bytes())
    cut = tmp_path / "mid.pcap"
    rest = recs[int(len(recs) * tenth) // 10:]
    cut.write_bytes(head + b"".join(rest))
    r = analyze([str(cut)], topology=TOPOLOGY)
    rd = r["rdma"]
    assert rd["cm_connections"] == 0 and rd["inferred_connections"] == truth["rdma"]["connections"] == opts["qps"]
    assert rd["buffer_pairings"] >= 1
    requests = sum(is_io_request(rec) for rec in rest)
    assert rd["linked_transfers"] == requests > 0
    assert r["accounting"]["reconciled"]
