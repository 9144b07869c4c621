"""A capture that starts inside a READ's (or a WRITE's) data where the file read (or written)
is itself a capture, SMB2 message images in it: the stream parser's scan finds an image first. Each such message is
held until the header after it decides, and refuted there; what it would have said must leave
nothing behind. Before 2026-12-07 a NEGOTIATE response image's 64 KiB sizes stayed the
connection's (the 2 MiB READ after it was not believed and lost), and `--threads 2` counted a
SESSION_SETUP response image's session where one thread did not.

The cuts are made here from the lab's span capture (whole pcap records dropped before a frame,
as a capture started then would hold), and each is checked against the wire: the server's
stream framed from its first byte (the whole capture has it) says which READ responses start
after the cut, and those are the sends."""

from __future__ import annotations

import struct

import pytest
from pcap_split import split

from .analyzer_cli import analyze
from .netlab import ADDRESSES
from .workloads import BAIT_CHUNKS, BAIT_WRITE_CHUNKS, CHUNK, W, bait_file, bait_write_file

pytestmark = pytest.mark.netns

SMB2_READ = 8
SMB2_WRITE = 9


def segment(record: bytes, server: bool) -> tuple[int, bytes] | None:
    """(sequence number, payload) of an untagged IPv4 TCP frame from the server (n2's port
    445), or with `server` false from the client (n1, to port 445)."""
    frame = record[16:]
    if frame[12:14] != b"\x08\x00" or frame[23] != 6:
        return None
    ihl = (frame[14] & 0x0F) * 4
    ip = frame[14:]
    if ip[12:16] != bytes(int(x) for x in ADDRESSES["n2" if server else "n1"].split(".")):
        return None
    tcp = ip[ihl:]
    if struct.unpack_from(">H", tcp, 0 if server else 2)[0] != 445:
        return None
    total = struct.unpack_from(">H", ip, 2)[0]
    return struct.unpack_from(">I", tcp, 4)[0], ip[ihl + (tcp[12] >> 4) * 4:total]


def sender_stream(records: list[bytes], server: bool) -> tuple[bytes, list[tuple[int, int]]]:
    """The server's (or client's) TCP stream, by sequence number from its first byte (the
    capture holds the connection from its start), and each record's (start, end) in it, or
    (-1, -1)."""
    segs = [segment(r, server) for r in records]
    first = next(s[0] for s in segs if s and s[1])
    stream = bytearray()
    where = []
    for s in segs:
        if not s or not s[1]:
            where.append((-1, -1))
            continue
        off = (s[0] - first) % (1 << 32)
        if len(stream) < off + len(s[1]):
            stream.extend(bytes(off + len(s[1]) - len(stream)))
        stream[off:off + len(s[1])] = s[1]
        where.append((off, off + len(s[1])))
    return bytes(stream), where


def messages(stream: bytes) -> list[tuple[int, bytes]]:
    """The server's stream framed from its first byte by the NetBIOS lengths: each message's
    start and its SMB2 bytes."""
    out, at = [], 0
    while at + 4 + 64 <= len(stream):
        length = struct.unpack_from(">I", stream, at)[0] & 0xFFFFFF
        out.append((at, stream[at + 4:at + 4 + length]))
        at += 4 + length
    return out


def data_after(stream: bytes, start: int, command: int) -> tuple[int, int, int]:
    """READ responses (or WRITE requests) that start at or after `start` in the stream: how
    many (an interim STATUS_PENDING response included), how many with status 0, and their
    bytes (DataLength, or Length)."""
    n = ok = total = 0
    for at, smb in messages(stream):
        c, status = struct.unpack_from("<H", smb, 12)[0], struct.unpack_from("<I", smb, 8)[0]
        if at >= start and c == command:
            n += 1
            if status == 0 and len(smb) >= 64 + 16:
                ok += 1
                total += struct.unpack_from("<I", smb, 64 + 4)[0]
    return n, ok, total


CASES = [("bait", kind) for kind in sorted(BAIT_CHUNKS.values())] + [
    ("bait-write", kind) for kind in sorted(BAIT_WRITE_CHUNKS.values())]


@pytest.mark.parametrize("name, kind", CASES)
def test_a_capture_cut_inside_a_message_image_shows_only_the_real_messages(workload_runs, tmp_path, name, kind):
    run = workload_runs(name)
    reads = name == "bait"
    command = SMB2_READ if reads else SMB2_WRITE
    header, records = split(run.capture.path.read_bytes())
    stream, where = sender_stream(records, server=reads)
    # The image of `kind` in the file, and where the sender's stream carries it.
    if reads:
        chunk = next(c for c, k in BAIT_CHUNKS.items() if k == kind)
        data = bait_file("bait/file", W)
    else:
        chunk = next(c for c, k in BAIT_WRITE_CHUNKS.items() if k == kind)
        data = bait_write_file("bait/write", W // 2)
    image = data[chunk * CHUNK + 3000:chunk * CHUNK + 3000 + 64]
    at = stream.find(image)
    assert at > 0 and stream.find(image, at + 1) == -1
    # The capture starts with the record that carries the image's first byte.
    first = next(i for i, (a, b) in enumerate(where) if a <= at < b)
    assert where[first][0] not in {m[0] for m in messages(stream)}
    holder = [m for m in messages(stream) if m[0] < where[first][0]][-1]
    assert struct.unpack_from("<H", holder[1], 12)[0] == command, "the cut is inside a READ's (WRITE's) data"
    cut = tmp_path / f"cut-{kind}.pcap"
    cut.write_bytes(header + b"".join(records[first:]))
    one = analyze(cut, run.topology, tmp_path / "one.json", "--threads", "1")
    two = analyze(cut, run.topology, tmp_path / "two.json", "--threads", "2")
    one.pop("analysis"), two.pop("analysis")
    assert one == two
    messages_after, sends, send_bytes = data_after(stream, where[first][0], command)
    assert sends >= 2
    smb2 = one["smb2"]
    assert (smb2["payloads_sent"], smb2["payload_bytes_sent"]) == (sends, send_bytes)
    if reads:
        assert (smb2["read_resp_pdus"], smb2["read_bytes"], smb2["write_req_pdus"]) == (messages_after, send_bytes, 0)
    else:
        assert (smb2["write_req_pdus"], smb2["write_bytes"], smb2["read_resp_pdus"]) == (messages_after, send_bytes, 0)
    # The CREATE that opened the file came before the cut: no name is listed, not the image's.
    assert (smb2["sessions"], smb2["session_bindings"], smb2["dialects"], smb2["files"]) == (0, 0, [], [])
    assert one["anomalies"].get("smb2.resync_unconfirmed", 0) >= 1
    assert "smb2.netbios_length_implausible" not in one["anomalies"]
    assert one["accounting"]["reconciled"]
    assert not one["duplicated_payloads"]
    assert {e["dup_ratio"] for e in one["edges"] if e["payload_bytes"]} == {1.0}
