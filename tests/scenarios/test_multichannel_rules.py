"""Multichannel and topology rules, end to end on generated captures.

Multichannel: with `channels: 2` the generator binds a second TCP connection to each session
(SESSION_SETUP with the binding flag) and sends TREE_CONNECT and CREATE on the first one only;
WRITEs then alternate between the channels. A send on the second channel can only name its
file and share if the analyzer keys state by SessionId/TreeId/FileId across connections. What
was opened where is read from the capture with tshark (required, as in test_oracle_tshark.py),
not from the analyzer.

Rules: a `[[rules]]` share pattern in a topology file decides the class of the sends on that
share, and the result says so in `decided_by`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from smbwire import _core
from smbwire.engine import analyze
from scenario_support import TOPOLOGY

MiB = 1 << 20


def _synth(tmp_path: Path, name: str, **spec) -> tuple[Path, dict]:
    cap = tmp_path / f"{name}.pcap"
    truth = json.loads(_core.synth(json.dumps({"bytes": MiB, "io_size": 256 * 1024, "seed": 11, **spec}), str(cap)))
    return cap, truth


def _tshark(cap: Path, display_filter: str, *fields: str) -> list[list[str]]:
    tshark = shutil.which("tshark")
    assert tshark, "tshark is required (apt install tshark): it tells what was opened on which connection"
    args = [tshark, "-n", "-r", str(cap), "-T", "fields", "-E", "occurrence=f"]
    if display_filter:
        args += ["-Y", display_filter]
    for f in fields:
        args += ["-e", f]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return [line.split("\t") for line in p.stdout.splitlines() if line.strip()]


def _guid(raw_hex: str) -> str:
    """An SMB2 FileId's 16 bytes (evidence: hex of the wire bytes) as tshark prints them."""
    b = bytes.fromhex(raw_hex)
    return "-".join([b[3::-1].hex(), b[5:3:-1].hex(), b[7:5:-1].hex(), b[8:10].hex(), b[10:].hex()])


def _edges(result: dict) -> list[dict]:
    return sorted(result["edges"], key=lambda e: (e["src"], e["dst"], e["class"]))


@pytest.mark.parametrize("scenario,sends", [("nested4", 8), ("redirect4", 12)])
def test_second_channel_sends_carry_what_the_first_channel_opened(tmp_path, scenario, sends):
    cap, truth = _synth(tmp_path, scenario, scenario=scenario, channels=2)
    assert truth["channels"] == 2
    evidence = tmp_path / "dups.jsonl"
    result = analyze([str(cap)], topology=TOPOLOGY, evidence=evidence)

    # What the capture says, by tshark: the stream of every frame, the names each session
    # opened (CREATE request + response on the same stream and MessageId), its share, and the
    # FileId each WRITE request names.
    stream_of = {int(n): int(s) for n, s in _tshark(cap, "tcp", "frame.number", "tcp.stream")}
    create_req = {(int(s), int(m)): name for s, m, name in
                  _tshark(cap, "smb2.cmd == 5 && smb2.flags.response == 0", "tcp.stream", "smb2.msg_id", "smb2.filename")}
    name_of_fid: dict[str, str] = {}
    open_streams = set()
    for s, m, fid in _tshark(cap, "smb2.cmd == 5 && smb2.flags.response == 1", "tcp.stream", "smb2.msg_id", "smb2.fid"):
        name_of_fid[fid] = create_req[(int(s), int(m))]
        open_streams.add(int(s))
    share_of_session = {sid: tree for _, sid, tree in
                        _tshark(cap, "smb2.cmd == 3 && smb2.flags.response == 0", "tcp.stream", "smb2.sesid", "smb2.tree")}
    write_fid = {(int(s), int(m)): (fid, sid) for s, m, fid, sid in
                 _tshark(cap, "smb2.cmd == 9 && smb2.flags.response == 0", "tcp.stream", "smb2.msg_id", "smb2.fid", "smb2.sesid")}
    all_streams = set(stream_of.values())
    bound = all_streams - open_streams
    assert len(all_streams) == 2 * len(share_of_session) and len(bound) == len(share_of_session), \
        "each session has one channel with its opens and one bound channel without"

    lines = [json.loads(line) for line in evidence.read_text().splitlines()]
    checked = defaultdict(int)
    conns = defaultdict(set)
    for d in lines:
        for s in d["sends"]:
            stream = stream_of[s["frames"][0]]
            assert stream_of[s["frames"][1]] == stream
            conns[stream in bound].add(s["conn"])
            fid, sid = write_fid[(stream, s["message_id"])]
            assert _guid(s["file_id"]) == fid
            assert s["session"] == sid
            # The name and share come from the other connection of the session.
            assert s["file_name"] == name_of_fid[fid], (s, stream)
            assert s["share"] == share_of_session[sid], (s, stream)
            checked[stream in bound] += 1
    # Every send is in the evidence (every payload here crossed an edge more than once), and
    # the second channels carried their share of them.
    assert sum(checked.values()) == sends == result["totals"]["sends"]
    assert checked[True] == sends // 2, checked
    assert conns[True].isdisjoint(conns[False])

    # The figures do not depend on how many channels carried the sends.
    one_cap, _ = _synth(tmp_path, f"{scenario}-1ch", scenario=scenario, channels=1)
    one = analyze([str(one_cap)], topology=TOPOLOGY)
    assert _edges(result) == _edges(one)
    assert result["totals"] == one["totals"]
    assert result["smb2"]["session_bindings"] == len(share_of_session)
    assert result["smb2"]["sessions"] == len(share_of_session)


RULES_TOPOLOGY = """\
[nodes.owner]
addresses = ["198.18.0.1"]

[nodes.partner]
addresses = ["198.18.0.2"]

[[rules]]
share = '{pattern}'
class = "client"
"""


@pytest.mark.parametrize("pattern,matches", [
    (r"*\clusterstorage$", True),   # the redirected I/O's share, matched case-insensitively
    (r"\\owner\ClusterStorage$", True),
    (r"*\OtherShare$", False),
])
def test_share_rule_decides_the_class(tmp_path, pattern, matches):
    # redirect4 over two channels: partner→owner WRITEs go to \\owner\ClusterStorage$ (inferred
    # redirection), owner→partner copies to \\partner\SBL$ (inferred replication).
    cap, truth = _synth(tmp_path, "redirect4", scenario="redirect4", channels=2)
    topo = tmp_path / "topology.toml"
    topo.write_text(RULES_TOPOLOGY.format(pattern=pattern))
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "smbwire", "analyze", str(cap), "--topology", str(topo),
                        "--json", str(out), "--quiet"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    edges = {(e["src"], e["dst"]): e for e in r["edges"]}
    assert sorted(edges) == [("owner", "partner"), ("partner", "owner")], r["edges"]
    red, rep = edges[("partner", "owner")], edges[("owner", "partner")]

    if matches:
        assert red["class"] == "client"
        assert red["decided_by"] == {"inference": 0, "rule": MiB, "forwarded": 0}
    else:
        assert red["class"] == "redirection"
        assert red["decided_by"]["rule"] == 0
    # The other share is not touched by the rule.
    assert rep["class"] == "replication"
    assert rep["decided_by"]["rule"] == 0 and rep["decided_by"]["inference"] == 2 * MiB
    assert r["totals"]["decided_by"]["rule"] == (MiB if matches else 0)
    # A rule changes classes, never the figures.
    for e in (red, rep):
        t = next(x for x in truth["edges"] if (x["src"], x["dst"]) == (e["src"], e["dst"]))
        for f in ("payload_bytes", "unique_bytes", "sends", "per_copy_duplicate_bytes", "repeated_content_bytes"):
            assert e[f] == t[f], (e, f)
        assert e["dup_ratio"] == pytest.approx(t["dup_ratio"])
