"""An SMB2 message's image inside a WRITE's data (a capture file or a TCP dump copied to a
share) where a capture starts mid-stream, or where a resynchronisation after a gap lands.

The stream parser takes the first bytes that look like a NetBIOS + SMB2 header there; before
2026-12-07 it reported the image's WRITE as a send, so a copy of data that crossed the edge
once showed as a duplicate (ratio 2.00 on an edge that carried every payload once). A message
found where framing was not known is now held until the header after it: the image is followed
by more of the file's data, not a header, so it is dropped (`smb2.resync_unconfirmed`, its bytes
`smb_unparsed`) and the next real WRITE, confirmed by the one after it, is the first send.
A response's image (a READ response inside a WRITE's data) is refuted by its direction, even
where the image ends exactly where the WRITE's data does and a real header follows it.

The capture is built here (raw TCP segments, no SMB2 encoder of ours) and analysed with one and
two threads.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import PcapWriter
from smb2_images import negotiate_response, read_response, session_setup_response, write_request

CLIENT, SERVER = "198.18.0.1", "198.18.0.2"


def write_pcap(path, raw: bytes, first_len: int, cut: bool, server_side: bool, ports: tuple[int, int]) -> None:
    """`raw` as TCP segments of 1448 bytes after a first one of `first_len`, from the client
    (or from the server with `server_side`); `cut` drops the first segment."""
    bounds = [0, first_len]
    while bounds[-1] < len(raw):
        bounds.append(min(bounds[-1] + 1448, len(raw)))
    segments = list(zip(bounds, bounds[1:]))
    if cut:
        segments = segments[1:]
    src, dst, sport, dport = (SERVER, CLIENT, ports[1], ports[0]) if server_side else (CLIENT, SERVER, *ports)
    w = PcapWriter(str(path), linktype=1, sync=True)
    t = 1_700_000_000.0
    for i, (a, b) in enumerate(segments):
        p = (Ether(src="02:00:00:00:01:01", dst="02:00:00:00:01:02") / IP(src=src, dst=dst)
             / TCP(sport=sport, dport=dport, flags="PA", seq=1000 + a, ack=1, window=65535) / Raw(raw[a:b]))
        p.time = t + i * 1e-5
        w.write(p)
    w.close()


def build(path, cut: bool, response_image: bool = False, ports: tuple[int, int] = (50000, 445)) -> None:
    """WRITEs 1-4 from client to server; WRITE 2's data holds an image of WRITE 99 (or, with
    `response_image`, of a READ response ending exactly where WRITE 2's data ends, so that
    WRITE 3's real header follows it) whose data WRITE 3 writes again."""
    rng = random.Random(20261207)
    blob = lambda n: bytes(rng.getrandbits(8) for _ in range(n))  # noqa: E731
    copied = blob(16384)
    if response_image:
        w2_data = blob(3000) + read_response(99, copied)
    else:
        w2_data = blob(3000) + write_request(99, 1 << 30, copied) + b"\xaa" * 500 + blob(2000)
    stream = [write_request(1, 0, blob(12288)), write_request(2, 1 << 20, w2_data),
              write_request(3, 2 << 20, copied), write_request(4, 3 << 20, blob(12288))]
    w2_data_at = len(stream[0]) + 4 + 112
    # The first segment ends 100 bytes into w2's data.
    write_pcap(path, b"".join(stream), w2_data_at + 100, cut, False, ports)


def analyze(cap, out, threads: int, *more: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", str(cap), "-q", "--threads", str(threads),
                        "--json", str(out), *more], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def analyze_cut(tmp_path, **kind) -> dict:
    """The capture cut inside WRITE 2's data, analysed with one and two threads (the same
    JSON apart from timing): WRITEs 3 and 4 are its only sends and requests."""
    cap = tmp_path / "cut.pcap"
    build(cap, cut=True, **kind)
    one = analyze(cap, tmp_path / "one.json", 1)
    two = analyze(cap, tmp_path / "two.json", 2)
    one.pop("analysis"), two.pop("analysis")
    assert one == two
    smb2 = one["smb2"]
    assert (smb2["payloads_sent"], smb2["payload_bytes_sent"]) == (2, 16384 + 12288)
    # Nor is the image counted as a request or response.
    assert (smb2["write_req_pdus"], smb2["read_resp_pdus"], smb2["commands"]) == (2, 0, {"WRITE.request": 2})
    assert one["anomalies"].get("smb2.resync_unconfirmed") == 1
    assert one["accounting"]["reconciled"]
    [edge] = one["edges"]
    assert (edge["src"], edge["dst"], edge["sends"]) == (CLIENT, SERVER, 2)
    return one


def test_a_message_image_where_a_capture_starts_is_no_send(tmp_path):
    # WRITE 2 started before the capture; its data holds WRITE 99's image.
    one = analyze_cut(tmp_path)
    [edge] = one["edges"]
    # The file's 16 KiB crossed once: no duplicate (it was 2.00 with the image taken as a send).
    assert edge["dup_ratio"] == 1.0 and edge["unique_bytes"] == edge["nontrivial_bytes"]
    assert not one["duplicated_payloads"]


def test_the_whole_stream_reads_the_image_as_data(tmp_path):
    cap = tmp_path / "whole.pcap"
    build(cap, cut=False)
    one = analyze(cap, tmp_path / "one.json", 1)
    smb2 = one["smb2"]
    assert smb2["payloads_sent"] == 4
    assert "smb2.resync_unconfirmed" not in one["anomalies"]
    assert one["accounting"]["categories"].get("smb_unparsed", 0) == 0
    assert one["edges"][0]["dup_ratio"] == 1.0


def test_a_response_image_is_no_send_even_where_a_real_header_follows_it(tmp_path):
    """A READ response's image at the very end of a WRITE's data is followed by the next real
    WRITE's header, which confirmed it: its data was a send of the server's, and the file's
    16 KiB, written once, showed as crossing twice. A response on the client's side is no
    message (MS-SMB2 2.2.1: SERVER_TO_REDIR is set on responses only)."""
    one = analyze_cut(tmp_path, response_image=True)
    assert one["anomalies"].get("smb2.resync_wrong_direction") == 1
    assert not one["duplicated_payloads"]


def test_with_both_ends_on_smb_ports_the_direction_is_not_checked(tmp_path):
    """Port 445 at both ends: which end is the server is a guess, so a held message's flags
    are not checked against it; the response image is confirmed by the header after it, as
    before the check (the limit of a syntactic test)."""
    cap = tmp_path / "both-445.pcap"
    build(cap, cut=True, response_image=True, ports=(445, 445))
    one = analyze(cap, tmp_path / "one.json", 1)
    assert one["smb2"]["payloads_sent"] == 3
    assert "smb2.resync_wrong_direction" not in one["anomalies"]


def test_a_refuted_response_image_leaves_the_connection_and_its_sessions_as_they_were(tmp_path):
    """A client reads a capture file off a share, and our capture starts inside READ 2's
    data, which holds the images of a NEGOTIATE response (sizes of 64 KiB, a ServerGuid) and
    of a successful SESSION_SETUP response: in the server's direction, so no check of
    direction refutes them; the file's bytes after each do. Before 2026-12-07 the NEGOTIATE
    image's sizes stayed the connection's, so READ 3's real 3 MiB response was not believed
    (`netbios_length_implausible`) and lost; and `--threads 2` counted the image's session
    (its ordered stage counts sessions from the workers' journals) where one thread did not.
    `--dask` (a local cluster, two shards) merges the tasks' journals as `--threads` does."""
    rng = random.Random(20261208)
    big = rng.randbytes(3 << 20)
    r2_data = (rng.randbytes(3000) + negotiate_response(b"\x5a" * 16, 65536) + rng.randbytes(700)
               + session_setup_response(7, 0x4000_0000_0000_0041) + rng.randbytes(2000))
    stream = [read_response(1, rng.randbytes(12288)), read_response(2, r2_data), read_response(3, big),
              read_response(4, rng.randbytes(12288))]
    cap = tmp_path / "reads.pcap"
    write_pcap(cap, b"".join(stream), len(stream[0]) + 4 + 80 + 100, True, True, (50000, 445))
    one = analyze(cap, tmp_path / "one.json", 1)
    two = analyze(cap, tmp_path / "two.json", 2)
    dask = analyze(cap, tmp_path / "dask.json", 2, "--dask")
    for r in (one, two, dask):
        r.pop("analysis")
    assert one == two
    assert {**dask, "inputs": None} == {**one, "inputs": None}
    smb2 = one["smb2"]
    assert (smb2["payloads_sent"], smb2["payload_bytes_sent"]) == (2, (3 << 20) + 12288)
    assert (smb2["read_resp_pdus"], smb2["sessions"], smb2["dialects"]) == (2, 0, [])
    assert one["anomalies"].get("smb2.resync_unconfirmed") == 2
    assert "smb2.netbios_length_implausible" not in one["anomalies"]
    assert one["accounting"]["reconciled"]
