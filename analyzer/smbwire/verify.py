"""`smbwire verify EVIDENCE CAPTURE...`: re-dissect every send named in an evidence file with
Wireshark's dissectors (tshark, through pyshark) and check what smbwire said about it.

Per send, at the frame where Wireshark shows its SMB2 message (the last payload frame over
TCP, where the reassembled PDU is; the header frame over SMB Direct):

- command: an SMB2 WRITE request (kind `write`) or READ response (kind `read`) with the
  send's MessageId;
- file: `smb2.fid` (raw 16 bytes) is the send's `file_id`, when Wireshark shows one;
- offset: `smb2.file_offset` is the send's `offset`, when Wireshark shows one (READ
  responses carry none);
- length: the WRITE's / READ's data length (`smb2.write_length` / `smb2.read_length`, or
  RemainingBytes / DataRemaining when the data moved by RDMA) is the payload's `size`;
- frames: over TCP, the first payload frame is among the frames Wireshark reassembled the
  message from (`tcp.segment`, or the frame itself); over RDMA, the first and last payload
  frames exist in the capture.

Frames are batched: one tshark run per input file with `frame.number in {...}` over every
frame needed, however many sends the evidence names. Only digests, numbers and names are
read; payload bytes are never printed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from .errors import ToolFailure, UserError, warning_line
from .units import fmt_count, fmt_counted, printable
from .wireshark import frame_filter


@dataclass
class Check:
    """One send's verdict."""

    digest: str
    index: int  # 1-based position among the payload's listed sends
    file: int
    frames: tuple[int, int]
    transport: str
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass
class Smb2Msg:
    cmd: int
    response: bool
    msg_id: int
    fid: str | None
    offset: int | None
    length: int | None
    remaining: int | None


@dataclass
class FrameView:
    number: int
    messages: list[Smb2Msg]
    segments: list[int]
    layers: list[str]


#: Longest evidence line read: a line lists at most 1,000 sends of some hundred bytes each,
#: so a longer one is not smbwire's (and reading it whole could take any amount of memory).
MAX_EVIDENCE_LINE = 16 << 20


#: Wireshark numbers frames in 32 bits (`frame.number`); a larger number names no frame and
#: is refused in tshark's display filter.
MAX_FRAME_NUMBER = 2**32 - 1


def read_evidence(path: str) -> Iterator[dict[str, Any]]:
    for _, v in read_evidence_lines(path):
        yield v


def read_evidence_lines(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """`read_evidence` with each line's number."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise UserError(f"{path}: cannot read evidence: {e.strerror or e}") from None
    with f:
        n = 0
        while raw := f.readline(MAX_EVIDENCE_LINE + 1):
            n += 1
            if len(raw) > MAX_EVIDENCE_LINE:
                raise UserError(f"{path}:{n}: not an smbwire evidence line (longer than {MAX_EVIDENCE_LINE:,} bytes)")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{path}:{n}: not an smbwire evidence line (not UTF-8 text at byte {e.start})") from None
            if not line.strip():
                continue
            try:
                v = json.loads(line)
                if not isinstance(v, dict) or not isinstance(v.get("sends"), list):
                    raise ValueError("no 'sends' list")
            except ValueError as e:
                raise UserError(f"{path}:{n}: not an smbwire evidence line ({e})") from None
            yield n, v


def _shown(v: Any) -> str:
    """A value from the evidence file in an error line: printable, at most 60 characters."""
    text = printable(repr(v))
    return text if len(text) <= 60 else text[:59] + "…"


def _frame(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_FRAME_NUMBER


def _checked_send(where: str, s: Any, size: Any, captures: int, evidence: str) -> dict[str, Any]:
    """A send of an evidence line as smbwire writes it (docs/json-schema.md, Evidence), else a
    one-line `UserError` naming the line and the send: values of another shape (a frame
    number past 32 bits, a send that is not an object) made tshark's filter or this module
    fail with an internal error."""
    if not isinstance(s, dict):
        raise UserError(f"{where}: not an smbwire evidence send (not an object)")
    f = s.get("file", 0)
    if not isinstance(f, int) or isinstance(f, bool) or f < 0 or f >= captures:
        raise UserError(f"{evidence}: a send names input {_shown(f)}; {captures} capture(s) given")
    fr = s.get("frames")
    if not isinstance(fr, list) or len(fr) != 2 or not all(_frame(x) for x in fr) or fr[0] > fr[1]:
        raise UserError(f"{where}: 'frames' must be [first, last] frame numbers (1 to {MAX_FRAME_NUMBER:,}), "
                        f"got {_shown(fr)}")
    h = s.get("header_frame")
    if h is not None and not _frame(h):
        raise UserError(f"{where}: 'header_frame' must be a frame number (1 to {MAX_FRAME_NUMBER:,}), "
                        f"got {_shown(h)}")
    for key, allowed, default in (("kind", ("write", "read"), None), ("transport", ("tcp", "rdma"), "tcp")):
        if s.get(key, default) not in allowed:
            raise UserError(f"{where}: '{key}' must be {' or '.join(allowed)}, got {_shown(s.get(key))}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise UserError(f"{where}: the payload's 'size' must be a byte count, got {_shown(size)}")
    return s


def _int(v: Any) -> int | None:
    try:
        return int(str(v), 0)
    except (TypeError, ValueError):
        return None


def _all(layer: Any, name: str) -> list[Any]:
    """Every occurrence of field `name` in a pyshark layer (one per SMB2 element)."""
    f = layer.get_field(name)
    if f is None:
        return []
    return list(getattr(f, "all_fields", [f]))


def _messages(pkt: Any) -> list[Smb2Msg]:
    out = []
    for layer in pkt.get_multiple_layers("smb2"):
        cmds = _all(layer, "smb2.cmd")
        n = len(cmds)

        def col(name: str, raw: bool = False) -> list[Any]:
            vals = _all(layer, name)
            got = [(v.raw_value if raw else v.show) for v in vals]
            return got + [None] * (n - len(got)) if len(got) <= n else got[:n]

        flags = col("smb2.flags.response")
        mids = col("smb2.msg_id")
        fids = col("smb2.fid", raw=True)
        offs = col("smb2.file_offset")
        wlen = col("smb2.write_length")
        rlen = col("smb2.read_length")
        rem = col("smb2.remaining_bytes")
        drem = col("smb2.data_remaining")
        for i, c in enumerate(cmds):
            length = _int(wlen[i]) if _int(c.show) == 9 else _int(rlen[i])
            out.append(Smb2Msg(cmd=_int(c.show) or 0, response=str(flags[i]) in ("1", "True"),
                               msg_id=_int(mids[i]) or -1, fid=fids[i], offset=_int(offs[i]), length=length,
                               remaining=_int(rem[i]) or _int(drem[i])))
    return out


#: Runs of tshark on one capture before `verify` gives up: pyshark's tshark child is sometimes
#: reaped by asyncio's child watcher before pyshark sees it end ("Unknown child process pid N,
#: will report returncode 255"), which pyshark reports as a crash of a tshark that read the
#: file; a crash that comes again on the same file is tshark's own.
TSHARK_RUNS = 3


def dissect(capture: str, frames: set[int]) -> dict[int, FrameView]:
    """The needed frames of one capture, in one tshark run, run again when it ends abnormally
    (`TSHARK_RUNS` in all; each rerun is a warning on stderr)."""
    from pyshark.capture.capture import TSharkCrashException

    for n in range(1, TSHARK_RUNS + 1):
        try:
            return _dissect_once(capture, frames)
        except TSharkCrashException as e:
            why = " ".join(str(e).split())[:300]
            if n == TSHARK_RUNS:
                raise ToolFailure(f"{capture}: tshark ended abnormally in each of {TSHARK_RUNS} runs "
                                  f"(last: {why}); 'tshark -r' on the file shows why") from None
            print(warning_line(f"{capture}: tshark ended abnormally ({why}); running it again ({n + 1} of {TSHARK_RUNS})"),
                  file=sys.stderr)
    raise AssertionError("unreachable")


def _dissect_once(capture: str, frames: set[int]) -> dict[int, FrameView]:
    import pyshark  # the optional extra `smbwire[verify]`

    # Artemis's heuristic claims SMB Direct over iWARP (TCP 5445) before iWARP's does.
    cap = pyshark.FileCapture(capture, display_filter=frame_filter(frames), keep_packets=False,
                              disable_protocol="artemis", override_prefs={"tcp.reassemble_out_of_order": "TRUE"})
    views: dict[int, FrameView] = {}
    try:
        for pkt in cap:
            n = int(pkt.frame_info.number)
            segs: list[int] = []
            # The reassembled PDU's frames (`tcp.segment`) sit in the pseudo-layer after TCP.
            for layer in pkt.layers:
                seg = layer.get_field("tcp.segment") if layer.layer_name != "tcp" else None
                if seg is not None:
                    segs.extend(int(s.show) for s in getattr(seg, "all_fields", [seg]))
            views[n] = FrameView(n, _messages(pkt), segs, [layer.layer_name for layer in pkt.layers])
    finally:
        try:
            cap.close()
        finally:
            # A close that raised leaves the ended tshark in pyshark's list, and its `__del__`
            # would close again and print the same exception at exit.
            getattr(cap, "_running_processes", set()).clear()
    return views


def _check(send: dict[str, Any], size: int, view: dict[int, FrameView], c: Check) -> None:
    first, last = c.frames
    header = send.get("header_frame")
    # Where Wireshark shows the SMB2 message: the header frame over RDMA, else the last frame.
    at = header if c.transport == "rdma" and header else last
    fv = view.get(at)
    if fv is None:
        c.failures.append(f"frame {at} is not in the capture")
        return
    want_cmd, want_resp = (9, False) if send.get("kind") == "write" else (8, True)
    msgs = [m for m in fv.messages if m.cmd == want_cmd and m.response == want_resp]
    name = "WRITE request" if want_cmd == 9 else "READ response"
    if not msgs:
        c.failures.append(f"command: frame {at} has no SMB2 {name}")
        return
    mid = send.get("message_id")
    match = [m for m in msgs if m.msg_id == mid]
    if not match:
        c.failures.append(f"command: frame {at} has no SMB2 {name} with MessageId {mid} "
                          f"(has {sorted({m.msg_id for m in msgs})})")
        return
    m = match[0]
    fid = send.get("file_id")
    if m.fid is not None and fid is not None and m.fid.lower() != str(fid).lower():
        c.failures.append(f"file: Wireshark's FileId {m.fid} is not {fid}")
    # An offset the evidence does not know (null: a READ response without its request) is not compared.
    if m.offset is not None and send.get("offset") is not None and m.offset != send.get("offset"):
        c.failures.append(f"offset: Wireshark says {m.offset}, evidence {send.get('offset')}")
    # Over RDMA the message's own data length is 0; RemainingBytes / DataRemaining say how
    # much moved by RDMA.
    length = m.remaining if c.transport == "rdma" and m.remaining is not None else m.length
    if length is not None and length != size:
        c.failures.append(f"length: Wireshark says {length}, evidence {size}")
    if c.transport == "rdma":
        for n in (first, last):
            if n not in view:
                c.failures.append(f"frames: payload frame {n} is not in the capture")
    else:
        segs = fv.segments or [at]
        if first not in segs:
            c.failures.append(f"frames: first frame {first} is not among the frames Wireshark reassembled "
                              f"the message from ({segs[0]}..{segs[-1]})")


def verify(evidence: str, captures: list[str]) -> list[Check]:
    # Every line is checked before tshark runs: a malformed send is one line naming it.
    lines = [(ev, [_checked_send(f"{evidence}:{n}: send {k}", s, ev.get("size", 0), len(captures), evidence)
                   for k, s in enumerate(ev["sends"], 1)])
             for n, ev in read_evidence_lines(evidence)]
    need: dict[int, set[int]] = {}
    for _, sends in lines:
        for s in sends:
            fr = s["frames"]
            need.setdefault(s.get("file", 0), set()).update(
                x for x in (fr[0], fr[-1], s.get("header_frame")) if x is not None)
    views = {f: dissect(captures[f], frames) for f, frames in sorted(need.items()) if frames}
    checks = []
    for ev, sends in lines:
        for i, s in enumerate(sends, 1):
            fr = s["frames"]
            c = Check(digest=str(ev.get("digest", ""))[:16], index=i, file=s.get("file", 0),
                      frames=(fr[0], fr[-1]), transport=s.get("transport", "tcp"))
            _check(s, ev.get("size", 0), views.get(c.file, {}), c)
            checks.append(c)
    return checks


def render(checks: Iterable[Check], console: Any, *, all_rows: bool = False) -> None:
    from rich.table import Table
    from rich.text import Text

    checks = list(checks)
    t = Table(title="smbwire verify: evidence re-dissected by Wireshark", show_lines=False)
    for col in ("payload", "send", "file", "frames", "transport", "result"):
        t.add_column(col)
    shown = 0
    for c in checks:
        if c.ok and not all_rows and shown >= 50:
            continue
        shown += 1
        # Text, not markup: a failure quotes values from the wire and the evidence file.
        result = (Text("pass", style="green") if c.ok
                  else Text.assemble(("FAIL", "red"), " " + printable("; ".join(c.failures))))
        cells = (c.digest, str(c.index), str(c.file), f"{c.frames[0]}-{c.frames[1]}", c.transport)
        t.add_row(*(Text(printable(x)) for x in cells), result)
    console.print(t)
    bad = sum(not c.ok for c in checks)
    console.print(f"{fmt_counted(len(checks), 'send')} checked: {fmt_count(len(checks) - bad)} pass, {fmt_count(bad)} fail")
