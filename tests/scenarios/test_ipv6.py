"""IPv6: the same traffic over IPv6 gives the IPv4 figures on every Ethernet transport (SMB2
over TCP, iWARP, RoCEv2 over UDP/IPv6, RoCEv1 whose GIDs are the IPv6 addresses themselves),
with a topology of IPv6 addresses (redirection and replication decided by node) and without
one (edges named by address). The captures are `smbwire synth --ipv6` (RFC 5180's benchmarking
prefix, 2001:2::/48); tshark, the independent oracle, must find the generator's SMB2 and SMB
Direct messages in them, as in the IPv4 capture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from synth_oracle import check_smbd_smb2_counts
from tshark_oracle import field_rows, pdu_counts

# tshark gives TCP port 5445 (SMB Direct over iWARP) to ActiveMQ Artemis unless told not to.
IWARP_OPTS = ["--disable-protocol", "artemis"]
FIGURES = ("edges", "totals", "smb2", "tcp", "rdma", "anomalies", "duplicated_payloads", "series", "membership")
OWNER, PARTNER = "2001:2::1", "2001:2::2"


def smbwire(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smbwire", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def run(tmp: Path, transport: str, ipv6: bool, topology: bool) -> tuple[Path, dict, dict]:
    name = f"{transport}-{'v6' if ipv6 else 'v4'}"
    cap, truth, topo, out = (tmp / f"{name}{ext}" for ext in (".pcap", ".truth.json", ".toml", ".json"))
    r = smbwire("synth", "redirect4", "-o", cap, "--bytes", "2MiB", "--io-size", "64KiB", "--seed", "3",
                "--transport", transport, "--truth-out", truth, "--topology-out", topo, *(["--ipv6"] if ipv6 else []))
    assert r.returncode == 0, r.stderr
    r = smbwire("analyze", cap, "-q", "--json", out, *(["-t", topo] if topology else []))
    assert r.returncode == 0, r.stderr
    return cap, json.loads(out.read_text()), json.loads(truth.read_text())


@pytest.mark.parametrize("topology", [True, False], ids=["topology", "addresses"])
@pytest.mark.parametrize("transport", ["tcp", "rocev1", "rocev2", "iwarp"])
def test_ipv6_gives_the_ipv4_figures(transport, topology, tmp_path):
    cap4, r4, _ = run(tmp_path, transport, False, topology)
    cap6, r6, truth = run(tmp_path, transport, True, topology)
    assert [n["addresses"] for n in truth["topology"]["nodes"]] == [[OWNER], [PARTNER]]
    if topology:
        assert {k: r6.get(k) for k in FIGURES} == {k: r4.get(k) for k in FIGURES}
        assert {(e["src"], e["dst"], e["class"]) for e in r6["edges"] if e["payload_bytes"]} == \
            {("partner", "owner", "redirection"), ("owner", "partner", "replication")}
    else:
        # Nodes are the addresses: the IPv4 figures with the addresses renamed.
        text = json.dumps({k: r4.get(k) for k in FIGURES})
        text = text.replace("198.18.0.1", OWNER).replace("198.18.0.2", PARTNER)
        assert {k: r6.get(k) for k in FIGURES} == json.loads(text)
        assert {(e["src"], e["dst"]) for e in r6["edges"] if e["payload_bytes"]} == {(PARTNER, OWNER), (OWNER, PARTNER)}
    # The generator's truth, per edge.
    want = {(e["src_address"], e["dst_address"]): e["payload_bytes"] for e in truth["edges"]}
    got: dict = {}
    names = {n["name"]: n["addresses"][0] for n in truth["topology"]["nodes"]}
    for e in r6["edges"]:
        key = (names.get(e["src"], e["src"]), names.get(e["dst"], e["dst"]))
        got[key] = got.get(key, 0) + e["payload_bytes"]
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v}
    # The IPv6 header is 20 bytes longer than IPv4's (less the padding a 54-byte IPv4 frame
    # needed to reach 60), and a protocol header: only that category differs.
    frames = r6["inputs"][0]["frames"]
    assert frames == r4["inputs"][0]["frames"]
    a4, a6 = r4["accounting"], r6["accounting"]
    assert a6["reconciled"] is True
    extra = a6["input_bytes"] - a4["input_bytes"]
    if transport == "rocev1":
        # Its GRH is the same 40 bytes with IPv4-mapped or IPv6 GIDs.
        assert extra == 0
    else:
        assert 14 * frames <= extra <= 20 * frames
    c4, c6 = dict(a4["categories"]), dict(a6["categories"])
    assert c6.pop("protocol_headers") - c4.pop("protocol_headers") == extra
    assert c6 == c4
    if not topology:
        return
    # tshark: every frame IPv6 (RoCEv1: its GRH carries the addresses), the same messages.
    opts = IWARP_OPTS if transport == "iwarp" else []
    addresses = ["infiniband.grh.sgid", "infiniband.grh.dgid"] if transport == "rocev1" else ["ipv6.src", "ipv6.dst"]
    rows = field_rows(cap6, opts, addresses)
    assert len(rows) == frames
    assert all({row[0][0], row[1][0]} == {OWNER, PARTNER} for row in rows), rows[:3]
    assert pdu_counts(cap6, opts) == pdu_counts(cap4, opts)
    if transport != "tcp":
        check_smbd_smb2_counts(cap6, truth, opts)


def test_infiniband_has_no_ipv6_option(tmp_path):
    r = smbwire("synth", "nested4", "-o", tmp_path / "ib.pcap", "--transport", "infiniband", "--ipv6")
    assert r.returncode != 0
    assert "ipv6 (--ipv6) applies to Ethernet transports" in r.stderr
