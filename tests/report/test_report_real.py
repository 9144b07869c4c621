"""The terminal report of the real engine on real captures (test_report.py renders hand-made
results): the headline, the warnings a user must see, and the Wireshark display filters it
prints, which tshark must resolve to exactly the SMB2 WRITEs the report names."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import tshark_oracle as oracle

from paths import ROOT
from paths import PUBLIC
NOISY = ROOT / "captures" / "nested4-1MiB-mirrordup-retx-reorder.pcap"
TOPOLOGY = ROOT / "captures" / "s2d-two-node.toml"


def report(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "120"}
    run = subprocess.run([sys.executable, "-m", "smbwire", "analyze", *args], capture_output=True, text=True,
                         timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_headline_warnings_and_filters_of_a_noisy_mirror_capture() -> None:
    out = report(str(NOISY), "--topology", str(TOPOLOGY))
    assert re.search(r"owner → partner\s+replication\s+2\.00\s+2\.00 MiB for 1\.00 MiB unique", out)
    assert "Amplification 2.00×" in out
    warnings = out.split("\nWarnings\n", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"2249 frames seen twice on the mirror port were removed", warnings)
    assert re.search(r"retransmitted TCP bytes in \d+ segments were removed", warnings)
    filters = re.findall(r"frame\.number in \{([\d, ]+)\}", out)
    assert len(filters) == 4  # four 256 KiB payloads, each sent twice
    for f in filters:
        frames = f.split(", ")
        assert len(frames) == 2
        rows = oracle.field_rows(NOISY, [], ["frame.number", "smb2.cmd", "smb2.write_length"],
                                 f"frame.number in {{{f}}} && smb2.cmd == 9 && smb2.flags.response == 0")
        # tshark shows each WRITE on the frame the report names, with the 256 KiB it carries.
        assert sorted(r[0][0] for r in rows) == sorted(frames)
        assert all(r[2] == ["262144"] for r in rows)


def test_encrypted_capture_warns_and_names_the_bytes() -> None:
    cap = PUBLIC / "smb300-aes128ccm-wiki.pcap"
    out = report(str(cap))
    warnings = out.split("\nWarnings\n", 1)[1].split("\n\n", 1)[0]
    m = re.search(r"(\d+) bytes of encrypted SMB3 messages \(TRANSFORM header\) were not analysed", warnings)
    assert m and int(m.group(1)) > 0
    assert "no SMB2 WRITE/READ payload found" in warnings
