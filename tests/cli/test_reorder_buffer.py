"""Reordering within and beyond the TCP reorder buffer (`--reorder-buffer`), end to end on a
bundled capture whose data frames are replayed in reverse order (and shuffled).

Within the buffer every WRITE is reassembled and hashed as in the original; beyond it, the
holes the buffer gave up on are gaps, and their bytes arriving later are their own accounting
category (`tcp_reordered_late`) and counter, never "retransmitted" (nothing was sent twice)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from scapy.all import TCP, PcapReader, wrpcap  # type: ignore[import-untyped]

from paths import CAPTURES

CAPTURE = CAPTURES / "nested4-1MiB.pcap"
HEAD = 40  # handshakes, NEGOTIATE, SESSION_SETUP, TREE_CONNECT, CREATE stay in order


def smbwire_json(path, tmp_path, *args) -> dict:
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", str(path), "-q", "--json", str(out), *args],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def reordered(tmp_path, how: str):
    frames = list(PcapReader(str(CAPTURE)))
    head, rest = frames[:HEAD], frames[HEAD:]
    data = [f for f in rest if TCP in f and len(f[TCP].payload) > 0]
    other = [f for f in rest if not (TCP in f and len(f[TCP].payload) > 0)]
    if how == "reversed":
        data.reverse()
    else:
        random.Random(7).shuffle(data)
    out = head + data + other
    t0 = float(frames[0].time)
    for i, f in enumerate(out):  # file order is capture order
        f.time = t0 + i * 1e-6
    path = tmp_path / f"{how}.pcap"
    wrpcap(str(path), out)
    return path


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    return smbwire_json(CAPTURE, tmp_path_factory.mktemp("orig"))


@pytest.mark.parametrize("how", ["reversed", "shuffled"])
def test_within_and_beyond_the_reorder_buffer(how, original, tmp_path):
    path = reordered(tmp_path, how)
    # Within the default buffer (4 MiB per direction): every WRITE hashed, nothing lost.
    r = smbwire_json(path, tmp_path)
    tcp, cats = r["tcp"], r["accounting"]["categories"]
    assert tcp["gap_bytes"] == 0 and tcp["retransmitted_bytes"] == 0 and tcp["reordered_late_bytes"] == 0
    assert tcp["out_of_order_segments"] > 0
    assert r["smb2"]["payload_bytes_sent"] == original["smb2"]["payload_bytes_sent"] > 0
    assert "tcp_reordered_late" not in cats
    assert r["accounting"]["reconciled"]
    # Beyond a 64 KiB buffer: holes given up, their bytes late, none retransmitted.
    r = smbwire_json(path, tmp_path, "--reorder-buffer", "64KiB")
    tcp, cats = r["tcp"], r["accounting"]["categories"]
    assert tcp["reorder_overflow_gaps"] > 0
    assert r["anomalies"].get("tcp.reorder_beyond_buffer") == tcp["reorder_overflow_gaps"]
    assert tcp["retransmitted_bytes"] == 0, "nothing was sent twice"
    assert "retransmitted" not in cats
    assert tcp["reordered_late_bytes"] == cats["tcp_reordered_late"] > 0
    assert r["smb2"]["payload_bytes_sent"] < original["smb2"]["payload_bytes_sent"]
    assert r["accounting"]["reconciled"]
    # The report says what happened to those bytes.
    assert any(f["code"] == "not_analysed" and f["category"] == "tcp_reordered_late" for f in r["findings"])


def test_reorder_buffer_bounds(tmp_path):
    for size in ("1KiB", "8GiB"):
        r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", str(CAPTURE), "--reorder-buffer", size],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "reorder buffer must be between 64 KiB and 4 GiB" in r.stderr, r.stderr
