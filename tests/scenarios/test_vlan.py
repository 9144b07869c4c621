"""Tagged frames: a mirror port on a trunk delivers the frames with their 802.1Q tag (SMB Direct
over RoCE runs in a tagged VLAN, its priority carrying priority flow control), or with an
802.1ad service tag around it (QinQ). The figures must be those of the same traffic untagged,
on every Ethernet transport and inside a remote mirror session's tunnel; the tags are
protocol headers. The capture is `smbwire synth --vlan`, whose tags are written by the
engine's Ethernet encoder; tshark, the independent oracle, must read every frame's tags as
written and find the same SMB2 and SMB Direct messages as in the untagged capture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tshark_oracle import field_rows, pdu_counts, smb_direct_counts

TAGS = {"dot1q": [("0x8100", "100", "3")], "qinq": [("0x88a8", "200", "3"), ("0x8100", "100", "3")]}
# tshark gives TCP port 5445 (SMB Direct over iWARP) to ActiveMQ Artemis unless told not to.
IWARP_OPTS = ["--disable-protocol", "artemis"]
FIGURES = ("edges", "totals", "smb2", "tcp", "rdma", "anomalies", "duplicated_payloads", "series")


def smbwire(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smbwire", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def synth_and_analyze(tmp: Path, transport: str, vlan: str, *extra: str) -> tuple[Path, dict, dict]:
    cap, truth, out = tmp / f"{transport}-{vlan}.pcap", tmp / f"{transport}-{vlan}.truth.json", tmp / f"{transport}-{vlan}.json"
    r = smbwire("synth", "nested4", "-o", cap, "--bytes", "2MiB", "--io-size", "64KiB", "--seed", "9",
                "--transport", transport, "--vlan", vlan, "--truth-out", truth, *extra)
    assert r.returncode == 0, r.stderr
    r = smbwire("analyze", cap, "-q", "--json", out)
    assert r.returncode == 0, r.stderr
    return cap, json.loads(out.read_text()), json.loads(truth.read_text())


@pytest.fixture(scope="module")
def untagged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("untagged")
    return {t: synth_and_analyze(tmp, t, "none") for t in ("tcp", "rocev1", "rocev2", "iwarp")}


@pytest.mark.parametrize("vlan", ["dot1q", "qinq"])
@pytest.mark.parametrize("transport", ["tcp", "rocev1", "rocev2", "iwarp"])
def test_tagged_frames_give_the_untagged_figures(transport, vlan, untagged, tmp_path):
    plain_cap, plain, truth = untagged[transport]
    cap, r, tagged_truth = synth_and_analyze(tmp_path, transport, vlan)
    # The same traffic: only the capture file's size and times (the tags take time on the link) differ.
    assert {k: v for k, v in tagged_truth.items() if k != "capture"} == {k: v for k, v in truth.items() if k != "capture"}
    assert tagged_truth["capture"]["frames"] == truth["capture"]["frames"]
    assert {k: r.get(k) for k in FIGURES} == {k: plain.get(k) for k in FIGURES}
    # The generator's truth: nested4 sends every write twice to its partner.
    (e,) = [e for e in r["edges"] if e["payload_bytes"]]
    assert e["payload_bytes"] == sum(t["payload_bytes"] for t in truth["edges"])
    assert e["dup_ratio"] == 2.0
    # Every byte in one category: 4 bytes of tags per tag per frame, all protocol headers.
    frames = r["inputs"][0]["frames"]
    assert frames == plain["inputs"][0]["frames"]
    extra = r["accounting"]["input_bytes"] - plain["accounting"]["input_bytes"]
    assert extra == 4 * len(TAGS[vlan]) * frames
    assert r["accounting"]["reconciled"] is True
    assert r["accounting"]["categories"]["protocol_headers"] - plain["accounting"]["categories"]["protocol_headers"] == extra
    # tshark reads every frame's tags as written, and the same messages as untagged.
    rows = field_rows(cap, [], ["vlan.etype", "vlan.id", "vlan.priority", "ieee8021ad.id"])
    assert len(rows) == frames
    want_ids = [t[1] for t in TAGS[vlan] if t[0] == "0x8100"]
    want_s = [t[1] for t in TAGS[vlan] if t[0] == "0x88a8"]
    assert all(row[1] == want_ids and row[2] == ["3"] and row[3] == want_s for row in rows), rows[:3]
    assert pdu_counts(cap) == pdu_counts(plain_cap)
    if transport != "tcp":
        opts = IWARP_OPTS if transport == "iwarp" else []
        smbd = smb_direct_counts(cap, opts)
        assert smbd == smb_direct_counts(plain_cap, opts)
        assert smbd["data_messages"] > 0


def test_tagged_frames_inside_a_remote_mirror_session(untagged, tmp_path):
    """ERSPAN carries the mirrored frames with their tags: both are opened."""
    _, plain, _ = untagged["rocev2"]
    cap, r, _ = synth_and_analyze(tmp_path, "rocev2", "qinq", "--encap", "erspan2")
    assert {k: r.get(k) for k in FIGURES} == {k: plain.get(k) for k in FIGURES}
    assert r["accounting"]["reconciled"] is True
    assert list(r["tunnels"]) == ["erspan2"]
    first = field_rows(cap, [], ["frame.protocols"])[0][0][0]
    assert first.startswith("eth:ethertype:ip:gre:erspan:eth:ethertype:ieee8021ad:ethertype:vlan:ethertype:ip:udp")


def test_infiniband_has_no_tags(tmp_path):
    r = smbwire("synth", "nested4", "-o", tmp_path / "ib.pcap", "--transport", "infiniband", "--vlan", "dot1q")
    assert r.returncode != 0
    assert "vlan (--vlan) applies to Ethernet transports" in r.stderr
    r = smbwire("synth", "nested4", "-o", tmp_path / "x.pcap", "--vlan", "dot2q")
    assert r.returncode != 0 and 'unknown vlan "dot2q"' in r.stderr
