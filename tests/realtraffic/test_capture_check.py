"""The span-health check itself: a frame the span never delivered is counted as lost, a frame
it delivered late is not (tshark flags both). Runs on a bundled capture, cut and reordered
here; no lab needed."""

from __future__ import annotations

from pathlib import Path

from pcap_split import split

from .capture_check import frame_health, smb2_io, tshark

CAPTURE = Path(__file__).resolve().parents[2] / "captures" / "nested4-1MiB.pcap"


def write(path: Path, header: bytes, recs: list[bytes]) -> Path:
    path.write_bytes(header + b"".join(recs))
    return path


def data_frames(pcap: Path) -> list[tuple[int, str]]:
    """(frame number, source address) of every frame carrying TCP payload."""
    rows = tshark(pcap, "-Y", "tcp.len > 0", "-e", "frame.number", "-e", "ip.src")
    return [(int(r[0]), r[1]) for r in rows]


def test_the_whole_capture_has_no_hole():
    health = frame_health(CAPTURE)
    assert health.tcp_frames > 1000
    assert health.lost_segments == 0 and health.tshark_gap_flags == 0


def test_a_missing_frame_is_lost_and_a_late_one_is_not(tmp_path):
    data = CAPTURE.read_bytes()
    header, recs = split(data)
    frames = data_frames(CAPTURE)
    writer = max({src for _, src in frames}, key=lambda s: sum(1 for _, x in frames if x == s))
    mine = [n for n, src in frames if src == writer]

    # A segment from the middle of the writes, delivered 6 frames later: all bytes are there.
    k = mine[len(mine) // 2] - 1
    late = recs[:k] + recs[k + 1:k + 7] + [recs[k]] + recs[k + 7:]
    health = frame_health(write(tmp_path / "late.pcap", header, late))
    assert health.tshark_gap_flags >= 1  # tshark takes the overtaking segment for a gap
    assert health.lost_segments == 0
    assert health.frames == len(recs)
    # ... and every WRITE is still whole to tshark's SMB2 dissector.
    want = smb2_io(CAPTURE)
    assert smb2_io(tmp_path / "late.pcap") == want

    # The same segment never delivered: one hole.
    gone = recs[:k] + recs[k + 1:]
    assert frame_health(write(tmp_path / "gone.pcap", header, gone)).lost_segments == 1

    # The writer's last segment never delivered: only the other side's ACK shows it was sent.
    last = mine[-1] - 1
    tail = recs[:last] + recs[last + 1:]
    assert frame_health(write(tmp_path / "tail.pcap", header, tail)).lost_segments == 1
