"""A remote mirror session on real Samba traffic: the switch mirrors every frame into a VXLAN
tunnel (the Linux kernel's encapsulation, not smbwire's encoders) and the monitor captures the
tunnel. smbwire opens it and finds the workload's truth, as on a local span port; tshark, the
oracle, opens the same tunnel to the same SMB2 WRITEs. (This machine's kernel has no GRE or
GENEVE, so ERSPAN, gretap and GENEVE are checked on synthesized captures,
tests/scenarios/test_remote_span.py, and on other implementations' tunnel captures,
tests/oracle/test_tunnels_tshark.py and tests/live/test_sources.py.)"""

from __future__ import annotations

import pytest

from .analyzer_cli import analyze, edge_sum
from .capture_check import smb2_io, tshark
from .workloads import ALL

pytestmark = pytest.mark.netns

NAME = "copies3"


@pytest.fixture(scope="module")
def runs(workload_runs):
    return workload_runs(NAME), workload_runs(f"{NAME}+vxlanspan")


def test_the_capture_holds_every_tunnelled_frame(runs):
    _, run = runs
    c = run.capture
    assert c.packets_dropped == 0 and c.packets_received == c.packets_captured, c
    protocols = {row[0] for row in tshark(c.path, "-e", "frame.protocols")}
    # Every frame is a tunnel packet (the probe datagrams too): nothing reached the span bare.
    assert protocols and all(p.startswith("eth:ethertype:ip:udp:vxlan:eth:") for p in protocols), protocols


def test_through_the_tunnel_the_figures_are_the_truth_and_the_local_spans(runs, tmp_path):
    local_run, run = runs
    local = analyze(local_run.capture.path, local_run.topology, tmp_path / "local.json")
    r = analyze(run.capture.path, run.topology, tmp_path / "vxlan.json")
    for t in ALL[NAME].truth:
        e = edge_sum(r, t.src, t.dst)
        assert (e["payload_bytes"], e["unique_bytes"], e["sends"]) == (t.payload_bytes, t.unique_bytes, t.sends)
        assert e == edge_sum(local, t.src, t.dst), f"{t.src}->{t.dst}"
    assert r["totals"]["amplification"] == pytest.approx(local["totals"]["amplification"], rel=1e-9)
    assert r["tcp"]["gaps"] == 0 and r["smb2"]["payload_incomplete"] == 0
    assert r["accounting"]["reconciled"] is True
    # The tunnel's bytes are protocol headers; the payload is the same.
    cats, base = r["accounting"]["categories"], local["accounting"]["categories"]
    assert cats["smb_payload"] == base["smb_payload"]
    assert cats["protocol_headers"] > base["protocol_headers"]
    # The result says every frame came in VXLAN: outer Ethernet, IPv4, UDP and VXLAN headers,
    # 50 bytes a frame over the lab's IPv4 underlay.
    frames = r["inputs"][0]["frames"]
    assert r["tunnels"] == {"vxlan": {"frames": frames, "bytes": 50 * frames}}
    assert local["tunnels"] == {}
    # tshark opens the kernel's tunnel to the WRITEs smbwire counted. The tunnel, like a local
    # span, may deliver a sender's segments out of order: smb2_io has tshark reassemble them and
    # counts each (connection, MessageId) once (a CI run counted 191 of 192 WRITEs without it).
    io = smb2_io(run.capture.path)
    assert sum(p.write_requests for p in io.values()) == r["smb2"]["write_req_pdus"]
