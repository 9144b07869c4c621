"""TCP keep-alive probes (RFC 1122 §4.2.3.6) on SMB connections: smbwire counts the ones
tshark marks `tcp.analysis.keep_alive`, and never as retransmitted bytes (the public capture
smb300-dac-getinfo-setinfo.pcap has 29, which were once reported as 29 retransmitted bytes)."""

from __future__ import annotations

import subprocess

import pytest

from paths import PUBLIC
from smbwire.engine import analyze

pytestmark = pytest.mark.usefixtures("tshark_required")

SMB_PORTS = "tcp.port in {445, 139}"


def tshark_count(path, filt: str) -> int:
    r = subprocess.run(["tshark", "-r", str(path), "-Y", f"{SMB_PORTS} && {filt}", "-T", "fields", "-e", "frame.number"],
                       capture_output=True, text=True, check=True)
    return len([x for x in r.stdout.splitlines() if x.strip()])


@pytest.mark.parametrize("name", ["smb300-dac-getinfo-setinfo.pcap"])
def test_keepalives_agree_with_tshark_and_are_not_retransmissions(name):
    path = PUBLIC / name
    r = analyze([str(path)])
    keepalives = tshark_count(path, "tcp.analysis.keep_alive")
    assert keepalives == 29
    assert r["tcp"]["keepalive_segments"] == keepalives
    assert r["tcp"]["retransmitted_bytes"] == 0 == tshark_count(path, "tcp.analysis.retransmission")
    assert "retransmitted" not in r["accounting"]["categories"]
    assert r["accounting"]["reconciled"]
