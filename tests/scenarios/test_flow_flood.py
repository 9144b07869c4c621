"""Hostile traffic beside real storage traffic: a million one-packet flows and a SYN flood to
port 445, in bursts of 200,000 new flows between the frames of a bundled nested-mirror
capture, analysed under an address-space limit (`prlimit --as`). smbwire must exit 0, give
the storage connections' figures exactly as without the flood (they are never evicted in
favour of noise), and count the flood (issue 12)."""

from __future__ import annotations

import json
import time
import random
import shutil
import struct
import subprocess
import sys

from paths import CAPTURES

CAPTURE = CAPTURES / "nested4-1MiB.pcap"
FLOOD = 1_000_000
BURSTS = 5
# Address space for the whole process (Python, the engine, its threads): far below what
# the flood took before flow state was made small (1.4 GB resident).
AS_LIMIT = 1_500_000_000


def _csum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def _flood_frame(i: int, rnd: random.Random) -> bytes:
    src = bytes([198, 19, (i >> 16) & 0xFF, (i >> 8) & 0xFF])
    dst = bytes([198, 18, 0, 2])
    syn = i % 2 == 0  # half a SYN flood, half one-byte segments
    tcp = struct.pack("!HHIIBBHHH", 1024 + (i & 0xFF) * 200 + (i % 200), 445, rnd.getrandbits(32), 0, 5 << 4,
                      0x02 if syn else 0x18, 65535, 0, 0) + (b"" if syn else b"x")
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0, 64, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    return b"\x02\x00\x00\x00\x00\x09" + b"\x02\x00\x00\x00\x00\x08" + b"\x08\x00" + ip + tcp


def _records(path):
    data = path.read_bytes()
    header, off = data[:24], 24
    while off < len(data):
        sec, frac, caplen, orig = struct.unpack_from("<IIII", data, off)
        yield sec, frac, data[off + 16:off + 16 + caplen], orig
        off += 16 + caplen
    assert header[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"), "little-endian pcap (µs or ns)"


def test_a_million_flows_beside_storage_traffic(tmp_path):
    records = list(_records(CAPTURE))
    # Bursts after the storage connections are set up (their NEGOTIATE seen).
    at = {len(records) * k // (BURSTS + 1) for k in range(1, BURSTS + 1)}
    rnd = random.Random(12)
    flooded = tmp_path / "flooded.pcap"
    n = 0
    with open(flooded, "wb") as out:
        out.write(CAPTURE.read_bytes()[:24])
        for idx, (sec, frac, frame, orig) in enumerate(records):
            if idx in at:
                for _ in range(FLOOD // BURSTS):
                    f = _flood_frame(n, rnd)
                    out.write(struct.pack("<IIII", sec, frac, len(f), len(f)) + f)
                    n += 1
            out.write(struct.pack("<IIII", sec, frac, len(frame), orig) + frame)
    assert n == FLOOD

    prlimit = shutil.which("prlimit")
    assert prlimit, "prlimit (util-linux) is needed"

    peak_rss: dict[str, int] = {}

    def run(path, limited: bool, *extra: str) -> dict:
        out = tmp_path / f"{path.stem}{len(extra)}.json"
        cmd = [sys.executable, "-m", "smbwire", "analyze", str(path), "-q", "--json", str(out), *extra]
        if limited:
            cmd = [prlimit, f"--as={AS_LIMIT}", "--"] + cmd
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # The process's own peak (VmHWM of its image; prlimit execs it, so the pid is the
        # analysis). Not wait4's ru_maxrss: a child forked from this (large) test process
        # starts with the parent's high-water mark.
        hwm = 0
        while p.poll() is None:
            try:
                for line in open(f"/proc/{p.pid}/status"):
                    if line.startswith("VmHWM:"):
                        hwm = max(hwm, int(line.split()[1]) * 1024)
            except OSError:
                pass
            time.sleep(0.01)
        stderr = p.stderr.read()
        p.stderr.close()
        assert p.returncode == 0, stderr
        peak_rss[" ".join(extra)] = hwm
        return json.loads(out.read_text())

    plain = run(CAPTURE, limited=False)
    flood = run(flooded, limited=True)
    # The storage connections' figures are exact.
    for key in ("edges", "totals"):
        assert flood[key] == plain[key], key

    def without_frames(tops):  # frame numbers shift by the flood frames in between
        return [{**t, "sends": [{k: v for k, v in s.items() if k != "frames"} for s in t["sends"]]} for t in tops]

    assert without_frames(flood["top_duplicates"]) == without_frames(plain["top_duplicates"])
    for key in ("write_req_pdus", "write_bytes", "payloads_sent", "payload_bytes_sent", "payload_incomplete"):
        assert flood["smb2"][key] == plain["smb2"][key], key
    # The flood is counted: every flow seen, evictions named, no storage flow given up.
    assert flood["tcp"]["flows"] >= FLOOD + plain["tcp"]["flows"]
    assert flood["anomalies"].get("tcp.flow_table_full", 0) >= FLOOD - 100_000
    assert flood["anomalies"].get("tcp.storage_flow_evicted", 0) == 0
    assert flood["accounting"]["reconciled"]
    # A memory budget: the flow table holds fewer flows (32 MiB: 1,638), the storage
    # figures stay exact, and the process stays smaller.
    budget = run(flooded, True, "--max-memory", "32MiB")
    for key in ("edges", "totals"):
        assert budget[key] == plain[key], key
    assert budget["anomalies"].get("tcp.storage_flow_evicted", 0) == 0
    assert budget["anomalies"]["tcp.flow_table_full"] > flood["anomalies"]["tcp.flow_table_full"]
    assert budget["accounting"]["reconciled"]
    assert 0 < peak_rss["--max-memory 32MiB"] < peak_rss[""], peak_rss
    print("peak RSS", peak_rss)
