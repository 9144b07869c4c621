"""SMB Direct over RoCEv1 (`transport: "rocev1"`): Ethernet (EtherType 0x8915) / IB Global Route
Header / BTH ... / ICRC, the GIDs being the IPv4-mapped addresses of the nodes (::ffff:198.18.0.x).

(a) tshark is the oracle for the generated frames: every frame is RoCEv1 with a GRH (IPVer 6,
NxtHdr 0x1B = BTH), dissects without a malformed or warning item, and tshark's counts agree with
the generator's Truth (BTH opcodes, RDMA CM messages, SMB Direct messages, SMB2 WRITE requests /
READ responses and the bytes they move by RDMA). tshark 4.0 shows the ICRC without checking it:
here each one is recomputed from the frame bytes (IBTA vol. 1 §7.8.1 for a packet with a GRH:
8 bytes of ones for the LRH, GRH TClass/FlowLabel/HopLmt and BTH resv8a as ones) and compared with
the frame and with the value tshark shows.

(b) The S2D scenario table through the analyzer over RoCEv1, clean and with capture noise
(mirror-port copies, RDMA data packets retransmitted and reordered), with the figures of
tests/test_scenarios_rdma.py written out again here, not read back from the generator."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from pathlib import Path

import pytest

from smbwire import _core
from smbwire.engine import analyze
from scenario_support import TOPOLOGY, edge, payload_edges

MiB = 1 << 20
TSHARK = shutil.which("tshark")
SEVERITY_WARN = 0x00600000
GROUP_SEQUENCE = 0x02000000
GROUP_MALFORMED = 0x07000000
CM_FIELDS = {"ConnectRequest": "infiniband.cm.req", "ConnectReply": "infiniband.cm.rep",
             "ReadyToUse": "infiniband.cm.rtu.localcommid", "DisconnectRequest": "infiniband.cm.dreq.localcommid",
             "DisconnectReply": "infiniband.cm.drsp.localcommid"}
NODES = {"::ffff:198.18.0.1", "::ffff:198.18.0.2"}


def synth(spec: dict, path: Path) -> dict:
    return json.loads(_core.synth(json.dumps(spec), str(path)))


# --- (a) tshark -------------------------------------------------------------------------------

def fields(path: Path, flt: str, names: list[str]) -> list[list[str]]:
    cmd = [TSHARK, "-n", "-r", str(path), "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|"]
    if flt:
        cmd += ["-Y", flt]
    for n in names:
        cmd += ["-e", n]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


def values(path: Path, name: str) -> list[str]:
    return [v for row in fields(path, name, [name]) for v in row[0].split("|") if v]


def ints(vals: list[str]) -> list[int]:
    return [int(v, 0) for v in vals]


def problems(path: Path) -> list[str]:
    bad = []
    for frame, sev, group, msg, malformed in fields(
            path, "_ws.expert || _ws.malformed",
            ["frame.number", "_ws.expert.severity", "_ws.expert.group", "_ws.expert.message", "_ws.malformed"]):
        if malformed:
            bad.append(f"frame {frame}: malformed")
        for s, g, m in zip(sev.split("|"), group.split("|"), msg.split("|")):
            if not s:
                continue
            s, g = int(s), int(g)
            if g == GROUP_MALFORMED or (s >= SEVERITY_WARN and g != GROUP_SEQUENCE):
                bad.append(f"frame {frame}: {m}")
    return bad


def pcap_frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert struct.unpack_from("<IHH", data) == (0xA1B23C4D, 2, 4)
    assert struct.unpack_from("<I", data, 20)[0] == 1, "Ethernet"
    out, off = [], 24
    while off < len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        out.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return out


def icrc(grh_to_payload: bytes) -> int:
    """ICRC of a RoCEv1 packet (GRH through the pad, without the ICRC), written independently of the
    generator: the variant fields set to ones, 8 bytes of ones standing for the LRH."""
    p = bytearray(grh_to_payload)
    p[0] |= 0x0F
    p[1:4] = b"\xff\xff\xff"
    p[7] = 0xFF
    p[40 + 4] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(p))


def check_frames(path: Path) -> None:
    """Every frame is RoCEv1 with a good ICRC, and tshark sees it so."""
    frames = pcap_frames(path)
    shown = fields(path, "", ["eth.type", "infiniband.grh.ipver", "infiniband.grh.nxthdr", "infiniband.grh.sgid",
                              "infiniband.grh.dgid", "ip.version", "udp.port", "infiniband.invariant.crc"])
    assert len(shown) == len(frames)
    for raw, (etype, ipver, nxt, sgid, dgid, ip, udp, crc) in zip(frames, shown):
        assert (etype, ipver, nxt, ip, udp) == ("0x8915", "6", "27", "", "")
        assert {sgid, dgid} == NODES
        paylen = struct.unpack_from(">H", raw, 14 + 4)[0]
        pkt = raw[14:14 + 40 + paylen]
        want = icrc(pkt[:-4])
        assert pkt[-4:] == want.to_bytes(4, "little")
        assert int(crc, 16) == int.from_bytes(pkt[-4:], "big"), "tshark shows the ICRC in wire order"


def check_counts(path: Path, truth: dict) -> None:
    rdma, smb = truth["rdma"], truth["smb2"]
    assert rdma["transport"] == "rocev1"
    assert problems(path) == []
    check_frames(path)
    assert dict(Counter(values(path, "infiniband.bth.opcode"))) == rdma["opcodes"]
    cm = {name: len(values(path, f)) for name, f in CM_FIELDS.items()}
    assert cm == rdma["cm"]
    assert len(fields(path, "infiniband.ieth", ["frame.number"])) == rdma["send_with_invalidate"]
    req = fields(path, "infiniband.bth.opcode == 12", ["infiniband.reth.dmalen"])
    assert sum(int(r[0]) for r in req) == rdma["rdma_read_bytes"]
    # SMB Direct.
    assert len(values(path, "smb_direct.negotiate_request")) == rdma["smbd_negotiate_requests"] == rdma["connections"]
    assert len(values(path, "smb_direct.negotiate_response")) == rdma["smbd_negotiate_responses"]
    dl = ints(values(path, "smb_direct.data_length"))
    assert (len(dl), sum(dl)) == (rdma["smbd_data_messages"], rdma["smbd_data_length"])
    # SMB2 WRITE requests and READ responses, the data moved by RDMA.
    assert len(values(path, "smb2.cmd")) == smb["messages"]
    writes = fields(path, "smb2.cmd == 9 && smb2.flags.response == 0",
                    ["smb2.channel", "smb2.remaining_bytes", "smb2.write_length", "smb2.buffer_descriptor.length"])
    assert len(writes) == smb["write_requests"]
    assert all(int(c, 0) in (1, 2) and int(n) == 0 for c, _, n, _ in writes)
    assert sum(int(r) for _, r, _, _ in writes) == smb["write_data_bytes"]
    assert sum(sum(ints(d.split("|"))) for *_, d in writes) == smb["write_data_bytes"]
    reads = fields(path, "smb2.cmd == 8 && smb2.flags.response == 1", ["smb2.read_remaining", "smb2.read_data"])
    assert len(reads) == smb["read_responses"]
    assert sum(int(r) for r, _ in reads) == smb["read_data_bytes"]
    assert all(d == "" for _, d in reads), "no inline READ data"


TABLE = {"mirror2": 1, "nested4": 2, "six": 3, "redirect4": 3, "read-nonowner": 1, "read-owner": 0}


@pytest.mark.tshark
@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
@pytest.mark.parametrize("mtu", [4096, 1024])
@pytest.mark.parametrize("scenario", list(TABLE))
def test_tshark_dissects_rocev1_and_counts_agree(tmp_path, scenario, mtu):
    w = 2 * MiB
    path = tmp_path / f"{scenario}-{mtu}.pcap"
    truth = synth({"scenario": scenario, "bytes": w, "io_size": MiB, "seed": 5, "transport": "rocev1",
                   "mtu": mtu}, path)
    check_counts(path, truth)
    moved = truth["rdma"]["rdma_read_bytes"] + truth["rdma"]["rdma_write_bytes"]
    assert moved == TABLE[scenario] * w


@pytest.mark.tshark
@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_tshark_fragments_invalidate_descriptors_multichannel_noise(tmp_path):
    spec = {"scenario": "redirect4", "bytes": 2 * MiB, "seed": 2, "dialect": "3.1.1", "transport": "rocev1",
            "max_send_size": 128, "send_with_invalidate": True, "descriptors": 2, "qps": 2, "mtu": 1024}
    path = tmp_path / "frag.pcap"
    truth = synth(spec, path)
    assert truth["rdma"]["smbd_fragmented_messages"] > 0
    assert truth["rdma"]["send_with_invalidate"] == truth["smb2"]["write_requests"] > 0
    check_counts(path, truth)
    # Retransmitted and reordered data packets: tshark sees one more frame per retransmission.
    noisy = tmp_path / "noisy.pcap"
    t2 = synth({**spec, "retransmit": 0.02, "reorder": 0.02}, noisy)
    extra = t2["rdma"]["retransmitted_packets"]
    assert extra > 0 and t2["rdma"]["reordered_pairs"] > 0
    assert problems(noisy) == []
    check_frames(noisy)
    assert len(pcap_frames(noisy)) == len(pcap_frames(path)) + extra


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_the_oracle_notices_a_bad_icrc(tmp_path):
    path = tmp_path / "ok.pcap"
    synth({"scenario": "mirror2", "bytes": MiB, "seed": 1, "transport": "rocev1"}, path)
    data = bytearray(path.read_bytes())
    i = data.rfind(b"\xfeSMB")
    data[i + 20] ^= 0x01
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(data)
    with pytest.raises(AssertionError):
        check_frames(bad)


# --- (b) the analyzer ------------------------------------------------------------------------

W = 8 * MiB
NOISE = {"mirror_dup": True, "retransmit": 0.01, "reorder": 0.01}


def _run(tmp_path: Path, scenario: str, **opts) -> dict:
    spec = {"scenario": scenario, "bytes": W, "io_size": MiB, "seed": 7, "transport": "rocev1", **opts}
    cap = tmp_path / f"{scenario}.pcap"
    truth = synth(spec, cap)
    if opts.get("retransmit"):
        assert truth["rdma"]["retransmitted_packets"] > 0 and truth["rdma"]["reordered_pairs"] > 0
    return analyze([str(cap)], topology=TOPOLOGY)


@pytest.fixture(params=[{}, NOISE], ids=["clean", "noisy"])
def noise(request) -> dict:
    return request.param


@pytest.mark.parametrize("scenario,copies", [("mirror2", 1), ("nested4", 2)])
def test_vm_on_owner_writes(tmp_path, noise, scenario, copies):
    r = _run(tmp_path, scenario, **noise)
    assert payload_edges(r) == [("owner", "partner", "replication")]
    e = edge(r, "owner", "partner", "replication")
    assert e["payload_bytes"] == copies * W
    assert e["unique_bytes"] == W
    assert e["sends"] == copies * (W // MiB)
    assert e["dup_ratio"] == pytest.approx(float(copies), abs=1e-9)
    assert e["per_copy_duplicate_bytes"] == (copies - 1) * W
    assert e["repeated_content_bytes"] == 0
    assert r["totals"]["amplification"] == pytest.approx(float(copies), abs=1e-9)
    assert r["accounting"]["reconciled"]


def test_vm_on_non_owner_writes_is_redirected_then_replicated(tmp_path, noise):
    r = _run(tmp_path, "redirect4", **noise)
    assert payload_edges(r) == [("owner", "partner", "replication"), ("partner", "owner", "redirection")]
    red = edge(r, "partner", "owner", "redirection")
    assert (red["payload_bytes"], red["unique_bytes"]) == (W, W)
    assert red["dup_ratio"] == pytest.approx(1.0)
    rep = edge(r, "owner", "partner", "replication")
    assert (rep["payload_bytes"], rep["unique_bytes"]) == (2 * W, W)
    assert rep["dup_ratio"] == pytest.approx(2.0)
    assert r["totals"]["payload_bytes"] == 3 * W
    assert r["totals"]["amplification"] == pytest.approx(3.0)
    assert r["accounting"]["reconciled"]


def test_vm_on_non_owner_reads_is_redirected_read(tmp_path, noise):
    r = _run(tmp_path, "read-nonowner", **noise)
    assert payload_edges(r) == [("owner", "partner", "redirected-read")]
    e = edge(r, "owner", "partner", "redirected-read")
    assert (e["payload_bytes"], e["unique_bytes"]) == (W, W)
    assert e["dup_ratio"] == pytest.approx(1.0)
    assert r["accounting"]["reconciled"]


def test_lost_then_resent_and_dropped_packets(tmp_path):
    """Loss on top of the noise: resent packets change nothing; dropped ones leave gaps, not bytes."""
    r = _run(tmp_path, "redirect4", **NOISE, loss=0.01)
    rep = edge(r, "owner", "partner", "replication")
    assert (rep["payload_bytes"], rep["unique_bytes"]) == (2 * W, W)
    spec = {"scenario": "nested4", "bytes": W, "io_size": MiB, "seed": 7, "transport": "rocev1",
            "loss": 0.01, "loss_mode": "drop"}
    cap = tmp_path / "drop.pcap"
    truth = synth(spec, cap)
    assert truth["rdma"]["dropped_packets"] > 0
    d = analyze([str(cap)], topology=TOPOLOGY)
    assert d["smb2"]["write_req_pdus"] == 2 * (W // MiB)
    assert d["rdma"]["gaps"] > 0
    assert sum(e["payload_bytes"] for e in d["edges"]) <= 2 * W - truth["rdma"]["dropped_bytes"] // 2
    assert d["accounting"]["reconciled"]
