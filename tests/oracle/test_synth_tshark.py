"""tshark is the oracle for the scenario generator: every capture it writes must dissect cleanly
(no malformed packet, no SMB2/NetBIOS warning, good IPv4 and TCP checksums), and tshark's own
counts of WRITE requests, READ responses and their data lengths, per direction, must equal the
figures the generator returns (its Truth).

TCP analysis notes and warnings (retransmission, out-of-order, duplicate ACK, "previous segment
not captured") are expected in the noisy variants and are allowed; nothing else is.

The generator is reached through `smbwire._core.synth` (the `synth` fixture)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import synth_oracle as oracle

pytestmark = [pytest.mark.tshark, pytest.mark.usefixtures("tshark_required")]

from paths import ROOT
MiB = 1 << 20
W = 4 * MiB
OWNER, PARTNER = "198.18.0.1", "198.18.0.2"
NOISE = {"mirror_dup": True, "retransmit": 0.01, "reorder": 0.01}
SCENARIOS = ["mirror2", "nested4", "six", "redirect4", "read-nonowner", "read-owner"]


def checksum_opts(checksums: bool) -> list[str]:
    check = "TRUE" if checksums else "FALSE"
    return ["-o", f"ip.check_checksum:{check}", "-o", f"tcp.check_checksum:{check}",
            # Without this tshark loses a PDU whose first segment arrives after its second.
            "-o", "tcp.reassemble_out_of_order:TRUE"]


def tshark_fields(path: Path, display_filter: str, fields: list[str], checksums: bool = True) -> list[list[str]]:
    return oracle.fields(path, display_filter, fields, checksum_opts(checksums))


def problems(path: Path, checksums: bool = True) -> list[str]:
    """Expert items that are not TCP sequence analysis, and every malformed/error item."""
    return oracle.problems(path, checksum_opts(checksums))


def smb2_counts(path: Path) -> dict:
    """tshark's view of the data-carrying SMB2 messages."""
    rows = tshark_fields(path, "smb2.cmd == 9 || smb2.cmd == 8",
                         ["tcp.stream", "ip.src", "ip.dst", "smb2.cmd", "smb2.flags.response", "smb2.msg_id",
                          "smb2.write_length", "smb2.olb.length"])
    c = {"write_rows": 0, "read_rows": 0, "writes": set(), "reads": set(), "write_bytes": 0, "read_bytes": 0,
         "by_edge": defaultdict(int)}
    for stream, src, dst, cmd, resp, msg_id, wlen, olb in rows:
        if cmd == "9" and resp == "0":
            c["write_rows"] += 1
            if (stream, msg_id) not in c["writes"]:
                c["writes"].add((stream, msg_id))
                c["write_bytes"] += int(wlen)
                c["by_edge"][(src, dst)] += int(wlen)
        elif cmd == "8" and resp == "1":
            c["read_rows"] += 1
            if (stream, msg_id) not in c["reads"]:
                n = int(olb.split("|")[0])
                c["reads"].add((stream, msg_id))
                c["read_bytes"] += n
                c["by_edge"][(src, dst)] += n
    return c


def ip_of(node: str) -> str:
    return {"owner": OWNER, "partner": PARTNER}[node]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("synth")


@pytest.mark.parametrize("noisy", [False, True], ids=["clean", "mirror-dup+retx+reorder"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_tshark_dissects_and_counts_agree(synth, workdir, scenario, noisy):
    spec = {"scenario": scenario, "bytes": W, "io_size": MiB, "seed": 11, **(NOISE if noisy else {})}
    path = workdir / f"{scenario}-{'noisy' if noisy else 'clean'}.pcap"
    truth = synth(spec, path)
    assert path.stat().st_size == truth["capture"]["file_bytes"]

    assert problems(path) == []

    c = smb2_counts(path)
    smb = truth["smb2"]
    assert len(c["writes"]) == smb["write_requests"]
    assert c["write_rows"] == smb["write_requests"], "tshark dissected a WRITE request twice"
    assert c["write_bytes"] == smb["write_data_bytes"]
    assert len(c["reads"]) == smb["read_responses"]
    assert c["read_rows"] == smb["read_responses"]
    assert c["read_bytes"] == smb["read_data_bytes"]

    # Data bytes per direction agree with the truth's edges (one class per edge here).
    expected = Counter()
    for e in truth["edges"]:
        expected[(ip_of(e["src"]), ip_of(e["dst"]))] += e["payload_bytes"]
    assert dict(c["by_edge"]) == dict(expected)

    # The published table, independent of the generator's own arithmetic.
    table = {
        "mirror2": {(OWNER, PARTNER): W},
        "nested4": {(OWNER, PARTNER): 2 * W},
        "six": {(OWNER, PARTNER): 3 * W},
        "redirect4": {(PARTNER, OWNER): W, (OWNER, PARTNER): 2 * W},
        "read-nonowner": {(OWNER, PARTNER): W},
        "read-owner": {},
    }[scenario]
    assert dict(c["by_edge"]) == table
    for e in truth["edges"]:
        assert e["unique_bytes"] == W
        assert e["dup_ratio"] == pytest.approx(e["payload_bytes"] / W)


def test_smb311_multichannel_dissects(synth, workdir):
    spec = {"scenario": "redirect4", "bytes": W, "seed": 2, "dialect": "3.1.1", "channels": 2}
    path = workdir / "redirect4-311-mc.pcap"
    truth = synth(spec, path)
    assert problems(path) == []
    rows = tshark_fields(path, "smb2.cmd == 0 && smb2.flags.response == 1", ["tcp.stream", "smb2.dialect"])
    assert len(rows) == truth["tcp"]["connections"] == 4
    assert all(d == "0x0311" for _, d in rows)
    streams = {s for s, *_ in tshark_fields(path, "smb2.cmd == 9", ["tcp.stream"])}
    assert len(streams) == 4, "copies and redirected writes use both channels of each session"
    c = smb2_counts(path)
    assert len(c["writes"]) == truth["smb2"]["write_requests"]


def test_reference_captures_match_their_expected_json(synth, workdir):
    """captures/*.pcap are regenerated byte for byte from the spec stored in their
    .expected.json (the Truth plus the "spec" that produced it)."""
    caps = sorted((ROOT / "captures").glob("*.pcap"))
    assert caps, "no reference captures in captures/"
    for cap in caps:
        expected = json.loads(cap.with_suffix(".expected.json").read_text())
        spec = expected.pop("spec")
        out = workdir / cap.name
        truth = synth(spec, out)
        assert out.read_bytes() == cap.read_bytes(), f"{cap.name} is not what the generator writes"
        assert truth == expected
        assert problems(cap) == []


def test_the_oracle_notices_damage(synth, workdir):
    """The checks above can fail: one flipped payload byte is a bad TCP checksum, and a
    damaged SMB2 WRITE header is malformed."""
    path = workdir / "damage.pcap"
    synth({"scenario": "mirror2", "bytes": MiB, "seed": 1}, path)
    data = bytearray(path.read_bytes())
    frame = int(tshark_fields(path, "smb2.cmd == 9 && smb2.flags.response == 0", ["frame.number"])[0][0])
    # Walk the pcap records to that frame (24-byte file header, 16-byte record headers).
    off = 24
    for _ in range(frame - 1):
        off += 16 + int.from_bytes(data[off + 8:off + 12], "little")
    # The frame holds the last segment of the WRITE request; its first frame carries the header.
    flipped = bytearray(data)
    flipped[off + 16 + 100] ^= 0xFF
    (workdir / "flipped.pcap").write_bytes(flipped)
    assert any("checksum" in p.lower() for p in problems(workdir / "flipped.pcap"))

    # Shrink the NetBIOS length of the first WRITE request below its fixed part (MS-SMB2 §2.1).
    first = data.find(b"\xfeSMB\x40\x00")
    while int.from_bytes(data[first + 12:first + 14], "little") != 9:
        first = data.find(b"\xfeSMB\x40\x00", first + 1)
    broken = bytearray(data)
    broken[first - 3:first] = (64 + 20).to_bytes(3, "big")
    (workdir / "broken.pcap").write_bytes(broken)
    found = problems(workdir / "broken.pcap", checksums=False)
    assert found and not any("checksum" in p.lower() for p in found), found
