"""SMB Direct over native InfiniBand (`transport: "infiniband"`): ERF InfiniBand records
(LINKTYPE_ERF, as ibdump writes them; tshark 4 reads no LINKTYPE_INFINIBAND file) holding LRH
(IBA local, the nodes' LIDs 1 and 2) / BTH ... / ICRC / VCRC.

(a) tshark is the oracle for the generated records: every one is an ERF InfiniBand record whose
packet has an LRH with the two LIDs, dissects without a malformed or warning item, and tshark's
counts agree with the generator's Truth (BTH opcodes, RDMA CM messages, SMB Direct messages, SMB2
WRITE requests / READ responses and the bytes they move by RDMA). The ICRC (IBTA vol. 1 §7.8.1,
LRH with VL as ones, BTH resv8a as ones) and VCRC (§7.8.2) are recomputed here from the bytes and
compared with the packet and with the values tshark shows.

(b) The analyzer names the nodes by LID (fe80::ffff:0:LID) and finds the generator's edges. That
the figures equal RoCEv2's for the same spec (edges, totals, the RDMA section, byte categories
but headers, anomalies; with noise too) is checked through the engine's Pipeline in
synth/src/tests/infiniband.rs."""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from pathlib import Path

import pytest

from smbwire.engine import analyze
from synth_oracle import CM_FIELDS, check_smbd_smb2_counts, fields, problems, synth, values

MiB = 1 << 20
LIDS = {"1", "2"}


def records(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert struct.unpack_from("<IHH", data) == (0xA1B23C4D, 2, 4)
    assert struct.unpack_from("<I", data, 20)[0] == 197, "LINKTYPE_ERF"
    out, off = [], 24
    while off < len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        out.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return out


def vcrc(data: bytes) -> int:
    c = 0xFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0xD008 if c & 1 else c >> 1
    return c ^ 0xFFFF


def icrc(lrh_to_pad: bytes) -> int:
    p = bytearray(lrh_to_pad)
    p[0] |= 0xF0
    p[8 + 4] = 0xFF
    return zlib.crc32(bytes(p))


def check_records(path: Path) -> None:
    recs = records(path)
    shown = fields(path, "", ["erf.types.type", "erf.wlen", "infiniband.lrh.lnh", "infiniband.lrh.slid",
                              "infiniband.lrh.dlid", "infiniband.invariant.crc", "infiniband.variant.crc"])
    assert len(shown) == len(recs)
    for rec, (rtype, wlen, lnh, slid, dlid, icrc_shown, vcrc_shown) in zip(recs, shown):
        assert (rtype, lnh) == ("21", "0x02") and {slid, dlid} == LIDS
        assert rec[8] == 21 and len(rec) % 8 == 0 and struct.unpack_from(">H", rec, 10)[0] == len(rec)
        pkt = rec[16:16 + int(wlen)]
        words = struct.unpack_from(">H", pkt, 4)[0] & 0x7FF
        assert words * 4 + 2 == len(pkt)
        body, crc, v = pkt[:-6], pkt[-6:-2], pkt[-2:]
        assert crc == icrc(body).to_bytes(4, "little")
        assert v == vcrc(pkt[:-2]).to_bytes(2, "little")
        assert int(icrc_shown, 16) == int.from_bytes(crc, "big"), "tshark shows the ICRC in wire order"
        assert int(vcrc_shown, 16) == int.from_bytes(v, "big")


def check_counts(path: Path, truth: dict) -> None:
    rdma = truth["rdma"]
    assert rdma["transport"] == "infiniband"
    assert problems(path) == []
    check_records(path)
    assert dict(Counter(values(path, "infiniband.bth.opcode"))) == rdma["opcodes"]
    cm = {name: len(values(path, f)) for name, f in CM_FIELDS.items()}
    assert cm == rdma["cm"]
    assert len(fields(path, "infiniband.ieth", ["frame.number"])) == rdma["send_with_invalidate"]
    req = fields(path, "infiniband.bth.opcode == 12", ["infiniband.reth.dmalen"])
    assert sum(int(r[0]) for r in req) == rdma["rdma_read_bytes"]
    check_smbd_smb2_counts(path, truth)


TABLE = {"mirror2": 1, "redirect4": 3, "read-nonowner": 1}


@pytest.mark.tshark
@pytest.mark.usefixtures("tshark_required")
@pytest.mark.parametrize("mtu", [4096, 1024])
@pytest.mark.parametrize("scenario", list(TABLE))
def test_tshark_dissects_infiniband_and_counts_agree(tmp_path, scenario, mtu):
    w = 2 * MiB
    path = tmp_path / f"{scenario}-{mtu}.pcap"
    truth = synth({"scenario": scenario, "bytes": w, "io_size": MiB, "seed": 5, "transport": "infiniband",
                   "mtu": mtu}, path)
    check_counts(path, truth)
    moved = truth["rdma"]["rdma_read_bytes"] + truth["rdma"]["rdma_write_bytes"]
    assert moved == TABLE[scenario] * w


@pytest.mark.tshark
@pytest.mark.usefixtures("tshark_required")
def test_tshark_fragments_invalidate_descriptors_and_noise(tmp_path):
    spec = {"scenario": "redirect4", "bytes": 2 * MiB, "seed": 2, "dialect": "3.1.1", "transport": "infiniband",
            "max_send_size": 128, "send_with_invalidate": True, "descriptors": 2, "qps": 2, "mtu": 1024}
    path = tmp_path / "frag.pcap"
    truth = synth(spec, path)
    assert truth["rdma"]["smbd_fragmented_messages"] > 0
    check_counts(path, truth)
    noisy = tmp_path / "noisy.pcap"
    t2 = synth({**spec, "retransmit": 0.02, "reorder": 0.02}, noisy)
    assert t2["rdma"]["retransmitted_packets"] > 0 and t2["rdma"]["reordered_pairs"] > 0
    assert problems(noisy) == []
    check_records(noisy)
    assert len(records(noisy)) == len(records(path)) + t2["rdma"]["retransmitted_packets"]


def test_analysis_names_nodes_by_lid(tmp_path):
    path = tmp_path / "ib.pcap"
    truth = synth({"scenario": "redirect4", "bytes": 2 * MiB, "io_size": MiB, "seed": 5,
                   "transport": "infiniband"}, path)
    topo = {"nodes": [{"name": "owner", "addresses": ["fe80::ffff:0:1"], "member": True},
                      {"name": "partner", "addresses": ["fe80::ffff:0:2"], "member": True}]}
    # The scenario's topology (smbwire synth --topology-out) names each node by LID as well.
    assert [n["addresses"][1:] for n in truth["topology"]["nodes"]] == [["fe80::ffff:0:1"], ["fe80::ffff:0:2"]]
    r = analyze([str(path)], topology=topo)
    assert r["accounting"]["reconciled"] and r["anomalies"] == {}
    assert r["rdma"]["infiniband"]["bth_opcodes"] == {k: v for k, v in truth["rdma"]["opcodes"].items()}
    got = sorted((e["src"], e["dst"], e["class"], e["payload_bytes"]) for e in r["edges"] if e["payload_bytes"])
    want = sorted((e["src"], e["dst"], e["class"], e["payload_bytes"]) for e in truth["edges"])
    assert got == want
