"""SMB Direct over RoCEv1 (`transport: "rocev1"`): Ethernet (EtherType 0x8915) / IB Global Route
Header / BTH ... / ICRC, the GIDs being the IPv4-mapped addresses of the nodes (::ffff:198.18.0.x).

(a) tshark is the oracle for the generated frames: every frame is RoCEv1 with a GRH (IPVer 6,
NxtHdr 0x1B = BTH), dissects without a malformed or warning item, and tshark's counts agree with
the generator's Truth (BTH opcodes, RDMA CM messages, SMB Direct messages, SMB2 WRITE requests /
READ responses and the bytes they move by RDMA). tshark 4.0 shows the ICRC without checking it:
here each one is recomputed from the frame bytes (IBTA vol. 1 §7.8.1 for a packet with a GRH:
8 bytes of ones for the LRH, GRH TClass/FlowLabel/HopLmt and BTH resv8a as ones) and compared with
the frame and with the value tshark shows.

(b) Loss and resend on top of retransmission and reordering, through the analyzer (the S2D
scenario table, clean and noisy, and dropped packets run over RoCEv1 in
tests/scenarios/test_scenarios_rdma.py)."""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from pathlib import Path

import pytest

from smbwire.engine import analyze
from scenario_support import TOPOLOGY, edge
from synth_oracle import CM_FIELDS, check_smbd_smb2_counts, fields, problems, synth, values

MiB = 1 << 20
NODES = {"::ffff:198.18.0.1", "::ffff:198.18.0.2"}


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
    rdma = truth["rdma"]
    assert rdma["transport"] == "rocev1"
    assert problems(path) == []
    check_frames(path)
    assert dict(Counter(values(path, "infiniband.bth.opcode"))) == rdma["opcodes"]
    cm = {name: len(values(path, f)) for name, f in CM_FIELDS.items()}
    assert cm == rdma["cm"]
    assert len(fields(path, "infiniband.ieth", ["frame.number"])) == rdma["send_with_invalidate"]
    req = fields(path, "infiniband.bth.opcode == 12", ["infiniband.reth.dmalen"])
    assert sum(int(r[0]) for r in req) == rdma["rdma_read_bytes"]
    check_smbd_smb2_counts(path, truth)


TABLE = {"mirror2": 1, "nested4": 2, "six": 3, "redirect4": 3, "read-nonowner": 1, "read-owner": 0}


@pytest.mark.tshark
@pytest.mark.usefixtures("tshark_required")
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
@pytest.mark.usefixtures("tshark_required")
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


@pytest.mark.usefixtures("tshark_required")
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


def test_lost_then_resent_on_top_of_retransmission_and_reordering(tmp_path):
    """Resent packets change nothing (dropped ones: test_scenarios_rdma.py)."""
    r = _run(tmp_path, "redirect4", **NOISE, loss=0.01)
    rep = edge(r, "owner", "partner", "replication")
    assert (rep["payload_bytes"], rep["unique_bytes"]) == (2 * W, W)
