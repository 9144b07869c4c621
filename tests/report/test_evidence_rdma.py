"""Evidence over SMB Direct (RoCEv2) names the frames tshark sees: for every send of a duplicated
payload, `header_frame` is the SMB Direct Send that carried the SMB2 header (the WRITE request,
or the READ response that follows the RDMA Writes) and `frames` are the first and last RDMA data
frames of the transfer (RDMA Read Responses for a WRITE, RDMA Writes for a READ).

A nested-mirror write capture and a redirected-read capture of the same content (same seed) are
analysed together, so the same 1 MiB payloads are sent twice as WRITE data (RDMA Read) and once
as READ data (RDMA Write): every evidence line has both kinds. The frame numbers are checked
against tshark's own decode of each file, not against smbwire's."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from smbwire import _core
from smbwire.engine import analyze

pytestmark = pytest.mark.tshark

TSHARK = shutil.which("tshark")
MiB = 1 << 20
READ_RESPONSE = {13, 14, 15, 16}  # RDMA_READ_RESPONSE_FIRST/MIDDLE/LAST/ONLY
RDMA_WRITE = {6, 7, 8, 9, 10, 11}  # RDMA_WRITE_FIRST/MIDDLE/LAST(+imm)/ONLY(+imm)
FIELDS = ["frame.number", "ip.src", "ip.dst", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn",
          "infiniband.reth.r_key", "infiniband.reth.dmalen", "smb2.buffer_descriptor.token", "smb2.cmd",
          "smb2.flags.response", "smb2.msg_id"]


def decode(path: Path) -> dict[int, dict]:
    out = subprocess.run(
        [TSHARK, "-n", "-r", str(path), "--disable-protocol", "artemis", "-T", "fields", "-E", "occurrence=a",
         "-E", "aggregator=|", *[a for f in FIELDS for a in ("-e", f)]],
        capture_output=True, text=True, check=True).stdout
    frames = {}
    for line in out.splitlines():
        num, src, dst, op, qp, psn, rkey, dma, token, cmd, resp, mid = (line.split("\t") + [""] * 12)[:12]
        split = lambda v: [x for x in v.split("|") if x]  # noqa: E731
        smb2 = [(int(c, 0), r in ("1", "True", "true"), int(m)) for c, r, m in zip(split(cmd), split(resp), split(mid))]
        frames[int(num)] = {"src": src, "dst": dst, "op": int(op) if op else None, "qp": qp,
                            "psn": int(psn) if psn else None, "rkey": int(rkey, 0) if rkey else None,
                            "dma": int(dma) if dma else None, "tokens": [int(t, 0) for t in split(token)], "smb2": smb2}
    return frames


@pytest.fixture(scope="module")
def evidence(tmp_path_factory):
    if TSHARK is None:
        pytest.fail("tshark is required (make test installs it)")
    d = tmp_path_factory.mktemp("ev")
    caps = []
    for scenario in ("nested4", "read-nonowner"):
        spec = {"scenario": scenario, "bytes": 2 * MiB, "io_size": MiB, "seed": 3, "transport": "rocev2", "mtu": 4096}
        cap = d / f"{scenario}.pcap"
        _core.synth(json.dumps(spec), str(cap))
        caps.append(cap)
    ev = d / "ev.jsonl"
    result = analyze([str(c) for c in caps], evidence=ev)
    lines = [json.loads(x) for x in ev.read_text().splitlines()]
    return result, lines, [decode(c) for c in caps]


def test_every_rdma_send_names_its_header_send_and_its_data_frames(evidence):
    result, lines, decoded = evidence
    assert len(lines) == 2, lines  # two 1 MiB payloads
    kinds = []
    for line in lines:
        assert line["sends_total"] == 3
        for s in line["sends"]:
            assert s["transport"] == "rdma"
            frames = decoded[s["file"]]
            kinds.append(s["kind"])
            write = s["kind"] == "write"
            # The header frame: an SMB Direct Send (no RDMA data) with the SMB2 WRITE request /
            # READ response of this MessageId.
            hdr = frames[s["header_frame"]]
            want = (9, False, s["message_id"]) if write else (8, True, s["message_id"])
            assert want in hdr["smb2"], (s, hdr)
            assert hdr["op"] not in READ_RESPONSE | RDMA_WRITE
            # The data frames, found from tshark's fields alone: the buffer descriptor's token is
            # the R_Key of the RDMA Read Request (WRITE) or of the RDMA Write FIRST/ONLY (READ)
            # that moves it; the data packets are the Read Responses / Write packets with the
            # PSNs that follow (IBTA: consecutive PSNs from the request's / FIRST's PSN).
            cmd = 9 if write else 8
            req = s["header_frame"] if write else max(
                n for n, f in frames.items() if n < s["header_frame"] and (cmd, False, s["message_id"]) in f["smb2"])
            (token,) = frames[req]["tokens"]
            start_op = {12} if write else {6, 10}
            start = min(n for n, f in frames.items() if n > req and f["op"] in start_op and f["rkey"] == token)
            psn0, npkts = frames[start]["psn"], -(-frames[start]["dma"] // 4096)
            qp = hdr["qp"] if write else frames[start]["qp"]
            ops = READ_RESPONSE if write else RDMA_WRITE
            data = sorted(n for n, f in frames.items() if f["op"] in ops and f["qp"] == qp
                          and (f["psn"] - psn0) % (1 << 24) < npkts and (f["src"], f["dst"]) == (s["src"], s["dst"]))
            assert len(data) == MiB // 4096, (s, len(data))  # one 4 KiB-MTU packet per 4 KiB
            assert s["frames"] == [data[0], data[-1]], s
            # A WRITE's header precedes its data (the server pulls after the request); a READ's
            # response follows it.
            assert (s["header_frame"] < data[0]) if write else (s["header_frame"] > data[-1])
    assert sorted(kinds) == ["read", "read", "write", "write", "write", "write"]
    # The same frames reach the report's top duplicates.
    top = {d["digest"]: d for d in result["top_duplicates"]}
    for line in lines:
        assert [x.get("header_frame") for x in top[line["digest"]]["sends"]] == [x["header_frame"] for x in line["sends"]]
