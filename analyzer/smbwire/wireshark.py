"""Wireshark display filters that show the sends of one duplicated payload.

Each send lists its frames as `[first, last]`; the filter uses the *last* frame, because that
is the frame where Wireshark/tshark show the reassembled SMB2 message (TCP reassembly puts
the SMB2 tree on the frame that completes the PDU). An RDMA send also names its
`header_frame`: the frame of the SMB2 WRITE/READ message whose buffer the RDMA transfer moved,
so the filter shows the request and its data. One filter per input file, since frame numbers
are per file.
"""

from __future__ import annotations

from typing import Any, Iterable


def last_frame(send: Any) -> int | None:
    """The last frame number of a send, or None when the send does not carry one."""
    frames = send.get("frames") if isinstance(send, dict) else None
    if isinstance(frames, (list, tuple)) and frames:
        last = frames[-1]
        if isinstance(last, int) and not isinstance(last, bool) and last > 0:
            return last
    return None


def header_frame(send: Any) -> int | None:
    """The frame of the SMB2 message an RDMA send belongs to, when the evidence names one."""
    f = send.get("header_frame") if isinstance(send, dict) else None
    return f if isinstance(f, int) and not isinstance(f, bool) and f > 0 else None


def frame_filter(frames: Iterable[int]) -> str:
    """`frame.number in {12, 40, 77}` (sorted, each frame once). Wireshark 4 wants the set's
    elements separated by commas; the whitespace-only form of 3.x is refused there."""
    return "frame.number in {" + ", ".join(str(f) for f in sorted(set(frames))) + "}"


def filters_by_input(sends: Iterable[Any]) -> dict[int, str]:
    """Input-file index -> display filter over the last frame (and an RDMA send's header
    frame) of every send in that file. Sends without a file index or a frame are left out."""
    per_file: dict[int, list[int]] = {}
    for send in sends:
        if not isinstance(send, dict):
            continue
        idx = send.get("file", 0)
        frame = last_frame(send)
        if frame is None or not isinstance(idx, int) or isinstance(idx, bool) or idx < 0:
            continue
        per_file.setdefault(idx, []).append(frame)
        header = header_frame(send)
        if header is not None:
            per_file[idx].append(header)
    return {idx: frame_filter(frames) for idx, frames in sorted(per_file.items())}
