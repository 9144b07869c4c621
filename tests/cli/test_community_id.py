"""Evidence sends carry their connection's ports and Community ID v1. Checked against tshark
(the ports of the send's frames) and against a second Community ID implementation here
(hashlib, from the spec), itself checked on the spec's published vectors. tshark 4.0 has no
Community ID field (`tshark -G fields` lists none), so it cannot be the oracle for the hash."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import synth_oracle as oracle
from paths import CAPTURES, ROOT

pytestmark = [pytest.mark.tshark, pytest.mark.usefixtures("tshark_required")]


def community_id(src: str, sport: int, dst: str, dport: int, proto: int = 6, seed: int = 0) -> str:
    a, b = ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed
    if (b, dport) < (a, sport):
        a, sport, b, dport = b, dport, a, sport
    digest = hashlib.sha1(struct.pack(">H", seed) + a + b + bytes([proto, 0]) + struct.pack(">HH", sport, dport)).digest()
    return "1:" + base64.b64encode(digest).decode()


def test_reference_implementation_on_spec_vectors():
    assert community_id("1.2.3.4", 1122, "5.6.7.8", 3344) == "1:wCb3OG7yAFWelaUydu0D+125CLM="
    assert community_id("5.6.7.8", 3344, "1.2.3.4", 1122) == "1:wCb3OG7yAFWelaUydu0D+125CLM="
    assert community_id("1.2.3.4", 1122, "5.6.7.8", 3344, proto=17) == "1:0Mu9InQx6z4ZiCZM/7HXi2WMhOg="
    assert community_id("1.2.3.4", 1122, "5.6.7.8", 3344, seed=1) == "1:HhA1B+6CoLbiKPEs5nhNYN4XWfk="


def sends_of(cap: Path, topo: Path, tmp: Path) -> list[dict]:
    ev = tmp / "ev.jsonl"
    r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", str(cap), "-t", str(topo), "--evidence", str(ev), "-q"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return [s for l in ev.read_text().splitlines() for s in json.loads(l)["sends"]]


def tcp_ports(cap: Path) -> dict[int, tuple[str, str, int, int]]:
    rows = oracle.fields(cap, "tcp", ["frame.number", "ip.src", "ip.dst", "tcp.srcport", "tcp.dstport"])
    return {int(r[0]): (r[1], r[2], int(r[3]), int(r[4])) for r in rows}


def test_tcp_sends_ports_agree_with_tshark(tmp_path):
    cap = CAPTURES / "redirect4-1MiB.pcap"
    sends = sends_of(cap, CAPTURES / "s2d-two-node.toml", tmp_path)
    ports = tcp_ports(cap)
    assert sends
    for s in sends:
        for n in s["frames"]:
            assert ports[n] == (s["src"], s["dst"], s["src_port"], s["dst_port"]), (n, s)
        assert s["community_id"] == community_id(s["src"], s["src_port"], s["dst"], s["dst_port"])
    # Both directions of a connection, one ID; the sends here ride more than one connection.
    assert len({s["community_id"] for s in sends}) == len({s["conn"] for s in sends}) >= 2


@pytest.mark.parametrize("transport", ["iwarp", "rocev2"])
def test_rdma_sends(synth, tmp_path, transport):
    cap, topo = tmp_path / "r.pcap", tmp_path / "r.toml"
    r = subprocess.run([sys.executable, "-m", "smbwire", "synth", "nested4", "-o", str(cap), "--bytes", "2MiB",
                        "--io-size", "1MiB", "--transport", transport, "--topology-out", str(topo)],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    sends = sends_of(cap, topo, tmp_path)
    assert sends
    if transport == "rocev2":
        # A queue pair has no port pair: no ports, no Community ID.
        assert all(s["src_port"] is None and s["dst_port"] is None and s["community_id"] is None for s in sends)
        return
    ports = tcp_ports(cap)
    for s in sends:
        # The RDMA data frames are TCP (MPA/DDP) frames of the iWARP connection.
        for n in s["frames"]:
            assert ports[n] == (s["src"], s["dst"], s["src_port"], s["dst_port"]), (n, s)
        assert s["community_id"] == community_id(s["src"], s["src_port"], s["dst"], s["dst_port"])
