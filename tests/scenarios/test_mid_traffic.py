"""A capture that starts mid-traffic (a live capture of a running cluster, a file cut from a
longer one) holds READ responses whose READ requests it does not: the response does not say
the file offset it carries, so the evidence says null, not 0 (found on 2026-12-07 by the
differential's cut check: the tail of a capture named a send at offset 0 that the whole capture
had at offset 1,250,000). `smbwire verify` does not compare what the evidence does not know,
and `--annotate` says "offset unknown"."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from paths import ROOT
from tshark_oracle import field_rows

# READ responses of repeated content (half the 4 KiB blocks zeros: many 5,000-byte payloads are
# the same), so that the evidence, which lists duplicated payloads, holds them.
SPEC = {"scenario": "read-nonowner", "transport": "tcp", "io_size": 5000, "bytes": 1 << 20, "zero_fill": 0.5,
        "mss": 536, "seed": 959163380}


def smbwire(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smbwire", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def records(data: bytes) -> list[int]:
    """Where each record of a generated pcap starts (fuzz/differential.py's walk)."""
    spec = importlib.util.spec_from_file_location("differential", ROOT / "fuzz" / "differential.py")
    d = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(d)
    return d.records(data)


def sends(evidence: Path) -> dict:
    out = {}
    for line in evidence.read_text().splitlines():
        for s in json.loads(line)["sends"]:
            out[(s["src_port"], s["dst_port"], s["kind"], s["message_id"])] = s
    return out


def test_a_read_response_without_its_request_has_no_offset(tmp_path):
    from smbwire import _core

    cap = tmp_path / "whole.pcap"
    _core.synth(json.dumps(SPEC), str(cap))
    data = cap.read_bytes()
    starts = records(data)
    r = smbwire("analyze", cap, "-q", "--json", tmp_path / "whole.json", "--evidence", tmp_path / "whole.jsonl")
    assert r.returncode == 0, r.stderr
    whole = sends(tmp_path / "whole.jsonl")
    assert whole and all(isinstance(s["offset"], int) for s in whole.values())
    # Cut right after READ requests: the capture starts with their responses.
    requests = [int(row[0][0]) for row in field_rows(cap, [], ["frame.number"], "smb2.cmd == 8 && smb2.flags.response == 0")]
    unknown = 0
    checked = None
    for n in requests[2:12]:
        tail = tmp_path / f"tail-{n}.pcap"
        tail.write_bytes(data[:24] + data[starts[n]:])
        evidence = tmp_path / f"tail-{n}.jsonl"
        r = smbwire("analyze", tail, "-q", "--json", tmp_path / "tail.json", "--evidence", evidence)
        assert r.returncode == 0, r.stderr
        result = json.loads((tmp_path / "tail.json").read_text())
        for key, s in sends(evidence).items():
            # The same send as in the whole capture, at the same offset or at one not known.
            assert whole[key]["offset"] == s["offset"] or s["offset"] is None, (key, s, whole[key])
            if s["offset"] is None:
                unknown += 1
                assert s["kind"] == "read" and result["anomalies"].get("smb2.read_response_without_request")
                checked = checked or (tail, evidence)
    assert unknown > 0
    # verify (once: each run starts tshark through pyshark): Wireshark agrees on everything the
    # evidence says, and the send whose offset is not known is not compared on it.
    tail, evidence = checked
    v = smbwire("verify", evidence, tail, "--all")
    assert v.returncode == 0, v.stdout + v.stderr
    a = smbwire("analyze", tail, "-q", "--annotate", tmp_path / "tail-annotated.pcapng")
    assert a.returncode == 0, a.stderr
    comments = field_rows(tmp_path / "tail-annotated.pcapng", [], ["frame.comment"], "frame.comment")
    assert any("offset unknown" in c for row in comments for c in row[0]), comments[:3]
