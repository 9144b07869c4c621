"""SMB2 over TCP over IP over InfiniBand is analysed like over Ethernet.

The IP packets of a public Ethernet capture are re-wrapped here, by an encoder written for this
test (not the engine's emitters), into the InfiniBand link types smbwire reads: LINKTYPE_IPOIB
(RFC 4391 §6 header), and LINKTYPE_ERF InfiniBand records holding LRH / BTH / DETH (datagram
mode, with a GRH) or LRH / BTH (connected mode, RC Send Only) / IPoIB header / IP / pad / ICRC /
VCRC (IBTA vol. 1 §7.7, §8.3, §9.2, §7.8). The analysis must give the same SMB2 figures, edges
and totals as the Ethernet original, every byte accounted, and tshark must read the wrapped
files' SMB2 as it reads the original's."""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from pathlib import Path

import pytest

import tshark_oracle as oracle
from paths import PUBLIC
from smbwire.engine import analyze

SOURCE = PUBLIC / "smb2-readwrite-midstream-zeek.pcap"


def read_pcap(path: Path) -> tuple[int, list[tuple[int, int, bytes]]]:
    data = path.read_bytes()
    magic, = struct.unpack_from("<I", data)
    assert magic in (0xA1B2C3D4, 0xA1B23C4D)
    linktype, = struct.unpack_from("<I", data, 20)
    out, off = [], 24
    while off < len(data):
        sec, frac, incl, _ = struct.unpack_from("<IIII", data, off)
        out.append((sec, frac, data[off + 16:off + 16 + incl]))
        off += 16 + incl
    return linktype, out


def write_pcap(path: Path, linktype: int, frames: list[tuple[int, int, bytes]]) -> None:
    out = bytearray(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
    for sec, frac, f in frames:
        out += struct.pack("<IIII", sec, frac, len(f), len(f)) + f
    path.write_bytes(bytes(out))


def crc16_vcrc(data: bytes) -> int:
    """IBTA VCRC: polynomial 0x100B, seed 0xFFFF, reflected, complemented."""
    c = 0xFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0xD008 if c & 1 else c >> 1
    return c ^ 0xFFFF


def ib_packet(ip: bytes, slid: int, dlid: int, grh: bool) -> bytes:
    ethertype = 0x86DD if ip[0] >> 4 == 6 else 0x0800
    payload = struct.pack(">HH", ethertype, 0) + ip
    pad = -len(payload) % 4
    if grh:  # UD Send Only to the IPoIB broadcast QP, DETH with the IPoIB Q_Key
        bth = struct.pack(">BBHBBHBBH", 0x64, pad << 4, 0xFFFF, 0, 0xFF, 0xFFFF, 0, 0, 7)
        bth += struct.pack(">IBBH", 0x0000000B, 0, 0x00, 0x0405)
    else:  # RC Send Only (IPoIB connected mode)
        bth = struct.pack(">BBHBBHBBH", 0x04, 0x40 | pad << 4, 0xFFFF, 0, 0xFC, 0x0407, 0, 0, 7)
    body = bth + payload + b"\0" * pad
    words = (8 + (40 if grh else 0) + len(body) + 4) // 4
    lrh = struct.pack(">BBHHH", 0, 0x03 if grh else 0x02, dlid, words, slid)
    if grh:
        g = struct.pack(">IHBB", 6 << 28, len(body) + 4, 0x1B, 1) + bytes(15) + bytes([slid]) + bytes(15) + bytes([dlid])
        masked = bytearray(g + body)
        masked[0] |= 0x0F
        masked[1:4] = b"\xff\xff\xff"
        masked[7] = 0xFF
        masked[40 + 4] = 0xFF
        icrc = zlib.crc32(b"\xff" * 8 + bytes(masked))
        pkt = lrh + g + body
    else:
        masked = bytearray(lrh + body)
        masked[0] |= 0xF0
        masked[8 + 4] = 0xFF
        icrc = zlib.crc32(bytes(masked))
        pkt = lrh + body
    pkt += struct.pack("<I", icrc)
    return pkt + struct.pack("<H", crc16_vcrc(pkt))


def erf_record(sec: int, usec: int, pkt: bytes) -> bytes:
    rlen = (16 + len(pkt) + 7) // 8 * 8
    ts = (sec << 32) | (usec << 32) // 1_000_000
    rec = struct.pack("<Q", ts) + struct.pack(">BBHHH", 21, 0x04, rlen, 0, len(pkt)) + pkt
    return rec + b"\0" * (rlen - len(rec))


def figures(result: dict) -> tuple:
    return (result["smb2"], result["edges"], result["totals"], result["tcp"]["segments"], result["anomalies"])


@pytest.fixture(scope="module")
def original() -> tuple[list, dict]:
    linktype, frames = read_pcap(SOURCE)
    assert linktype == 1
    return frames, analyze([str(SOURCE)])


@pytest.mark.parametrize("form", ["ipoib", "erf-ud-grh", "erf-rc"])
def test_smb2_over_ipoib_is_analysed_like_over_ethernet(tmp_path, original, form):
    frames, want = original
    hosts: dict[bytes, int] = {}
    out = []
    for sec, usec, f in frames:
        assert f[12:14] == b"\x08\x00"
        ip = f[14:14 + struct.unpack_from(">H", f, 16)[0]]
        if form == "ipoib":
            out.append((sec, usec, b"\x08\x00\x00\x00" + ip))
            continue
        lid = [hosts.setdefault(a, len(hosts) + 1) for a in (ip[12:16], ip[16:20])]
        out.append((sec, usec, erf_record(sec, usec, ib_packet(ip, lid[0], lid[1], form == "erf-ud-grh"))))
    path = tmp_path / f"{form}.pcap"
    write_pcap(path, 242 if form == "ipoib" else 197, out)
    got = analyze([str(path)])
    assert got["accounting"]["reconciled"]
    assert figures(got) == figures(want)
    assert want["smb2"]["write_bytes"] > 0
    if form != "ipoib":
        ib = got["rdma"]["infiniband"]
        assert ib["packets"] == ib["ipoib_packets"] == len(frames)
        assert ib["bth_opcodes"] == {"100" if form == "erf-ud-grh" else "4": len(frames)}
        # tshark reads the same SMB2 in the wrapped file (it does not read LINKTYPE_IPOIB).
        assert oracle.pdu_counts(path) == oracle.pdu_counts(SOURCE)
        assert Counter(oracle.histogram(path, [], "infiniband.bth.opcode")) == Counter(ib["bth_opcodes"])
