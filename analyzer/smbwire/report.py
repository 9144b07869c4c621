"""The terminal report: a function of the result dict (schema "smbwire/1", docs/json-schema.md).

`build_report(result, width)` returns rich renderables, so the same report can be printed
(`render_report`) or embedded in the live view; `width` picks the layout: below
`WIDE` columns the widest tables are split in two and long identifiers are shortened.

The renderer is tolerant: a missing section is skipped (and named in the warnings), a value
of an unexpected type is shown as text, unknown keys are listed at the end. It never raises
on a dict that came out of `json.loads`.
"""

from __future__ import annotations

import os
from typing import Any

from rich import box
from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from .findings import EXPECTED_SECTIONS, findings, section
from .tables import category_description, traffic_classes
from .units import (DASH, fmt_bytes, fmt_count, fmt_counted, fmt_percent, fmt_ratio, fmt_seconds, ratio_of, is_number, NO_PAYLOAD,
                    printable_tree, tunnel_sentence)
from .wireshark import filters_by_input

#: Console width from which every table shows all its columns in one piece.
WIDE = 140

#: Colours of the traffic classes, in the engine's report order (client, redirection,
#: replication, redirected-read, write, read: `smbwire.tables.traffic_classes()`).
CLASS_COLOURS = ("green", "magenta", "blue", "yellow", "white", "cyan")


def class_style(cls: Any) -> str:
    """The colour of an engine traffic class ("" for anything else)."""
    names = [c["name"] for c in traffic_classes()]
    return CLASS_COLOURS[names.index(cls) % len(CLASS_COLOURS)] if cls in names else ""


TCP_LABELS = {
    "flows": "flows",
    "segments": "segments",
    "retransmitted_segments": "retransmitted segments",
    "retransmitted_bytes": "retransmitted bytes",
    "out_of_order_segments": "out-of-order segments",
    "gaps": "gaps",
    "gap_bytes": "gap bytes",
    "mirror_duplicate_frames": "mirror-duplicate frames",
    "peak_buffered_bytes": "peak reassembly buffer",
    "reorder_overflow_gaps": "holes given up (reorder buffer full)",
    "reordered_late_segments": "late segments",
    "reordered_late_bytes": "late bytes",
    "keepalive_segments": "keep-alives",
}

SMB2_LABELS = {
    "write_req_pdus": "WRITE requests",
    "write_bytes": "WRITE data in messages",
    "read_resp_pdus": "READ responses",
    "read_bytes": "READ data in messages",
    "encrypted_messages": "encrypted messages",
    "decrypted_messages": "decrypted messages (--keys)",
    "decrypted_bytes": "decrypted bytes",
    "encrypted_without_key": "left encrypted (no key)",
    "decrypt_failed": "failed to decrypt (wrong key)",
    "compressed_messages": "compressed messages",
    "decompressed_messages": "decompressed messages",
    "decompressed_wire_bytes": "decompressed: wire bytes",
    "decompressed_bytes": "decompressed: bytes",
    "decompressed_payload_bytes": "decompressed: payload (hashed)",
    "decompress_failed": "failed to decompress",
    "payload_incomplete": "incomplete payloads",
    "payload_incomplete_bytes": "incomplete payload bytes",
    "sessions": "sessions",
    "trees": "tree connects",
    "resyncs": "resynchronisations",
    "payloads_sent": "payloads hashed",
    "payload_bytes_sent": "payload bytes hashed",
    "session_bindings": "session bindings",
    "smb1_messages": "SMB1 messages",
}


def render_report(result: Any, console: Console, *, top: int | None = None) -> None:
    """Print the whole report into `console` (any width). Into a pipe or a file the lines
    carry no trailing padding."""
    parts = build_report(result, console.width, top=top)
    if console.is_terminal:
        for part in parts:
            console.print(part, soft_wrap=isinstance(part, FilterLine))
        return
    with console.capture() as captured:
        for part in parts:
            console.print(part, soft_wrap=isinstance(part, FilterLine))
    text = "\n".join(line.rstrip() for line in captured.get().splitlines())
    console.out(text, highlight=False)


def build_report(result: Any, width: int = 80, *, top: int | None = None) -> list[RenderableType]:
    """The report as a list of renderables, top to bottom."""
    # Names from the wire (shares, files) and the user (paths, nodes) are shown, never acted
    # on: no terminal sequence, no bidi override (`printable`), no rich markup (`_Table`).
    result = printable_tree(result, skip=("series",))
    if not isinstance(result, dict):
        return [_heading("Warnings"), *_warning_lines(findings(result))]
    wide = width >= WIDE
    parts: list[RenderableType] = []
    parts += _header(result, wide)
    parts += _headline(result)
    parts += _edges(result, wide)
    parts += _nodes(result)
    parts += _top_duplicates(result, wide, top, width)
    parts += _accounting(result, wide)
    parts += _traffic(result, width)
    parts += [_heading("Warnings"), *_warning_lines(findings(result))]
    parts += _footer(result)
    return parts


# ---------------------------------------------------------------------------- sections


def _header(r: dict[str, Any], wide: bool) -> list[RenderableType]:
    inputs = [i for i in _list(r, "inputs") if isinstance(i, dict)]
    cap = section(r, "capture")
    line = Text()
    line.append("smbwire", style="bold")
    if r.get("smbwire_version") is not None:
        line.append(f" {r.get('smbwire_version')}")
    total = sum(i.get("size_bytes", 0) for i in inputs if is_number(i.get("size_bytes")))
    frames = sum(i.get("frames", 0) for i in inputs if is_number(i.get("frames")))
    line.append(
        f" · {fmt_counted(len(inputs), 'input')} · {fmt_bytes(total)} · {fmt_counted(frames, 'frame')}",
        style="dim",
    )
    out: list[RenderableType] = [line]
    span = []
    if "duration_seconds" in cap:
        span.append(f"capture {fmt_seconds(cap.get('duration_seconds'))}")
    if is_number(cap.get("first_ts")):
        span.append(f"from {_utc(cap['first_ts'])}")
    if "window_seconds" in r:
        span.append(f"window {fmt_seconds(r.get('window_seconds'))}")
    if span:
        out.append(Text("  " + " · ".join(span), style="dim"))
    tunnels = tunnel_sentence(r)
    if tunnels:
        out.append(Padding(Text(tunnels, style="dim"), (0, 0, 0, 2)))
    if inputs:
        grid = _Table.grid(padding=(0, 2))
        grid.add_column()
        grid.add_column(overflow="fold")
        grid.add_column(justify="right", no_wrap=True)
        grid.add_column(justify="right", no_wrap=True)
        for idx, i in enumerate(inputs):
            size = fmt_bytes(i.get("size_bytes"))
            if i.get("compression"):
                # The accounting counts the capture's own bytes, after decompression.
                size += f" ({i['compression']} {fmt_bytes(i.get('compressed_bytes'))}, decompressed)"
            elif i.get("source") in ("stdin", "fifo", "character_device"):
                size += f" (read from {str(i['source']).replace('_', ' ')})"
            grid.add_row(f"[{idx}]", _path(i.get("path"), wide), size, fmt_counted(i.get('frames'), 'frame'))
        out.append(Padding(grid, (0, 0, 0, 2)))
    return out


def _headline(r: dict[str, Any]) -> list[RenderableType]:
    edges = _edges_sorted(r)
    totals = section(r, "totals")
    if not edges and not totals:
        return []
    out: list[RenderableType] = [_heading("Duplicate-payload ratio per edge  (payload ÷ unique, non-trivial blocks)")]
    if edges:
        grid = _Table.grid(padding=(0, 2))
        grid.add_column()
        grid.add_column()
        grid.add_column(justify="right")
        grid.add_column()
        for e in edges:
            grid.add_row(
                _edge_name(e), _class_text(e.get("class")),
                Text(fmt_ratio(ratio_of(e, "dup_ratio")), style="bold"),
                f"{fmt_bytes(e.get('nontrivial_bytes'))} for {fmt_bytes(e.get('unique_bytes'))} unique",
            )
        out.append(Padding(grid, (0, 0, 0, 2)))
    if totals:
        amp = Text("Amplification ")
        amp.append(fmt_ratio(ratio_of(totals, "amplification"), "×"), style="bold")
        unique = totals.get("globally_unique_bytes", totals.get("unique_bytes"))
        detail = (f"{fmt_bytes(totals.get('nontrivial_bytes'))} on all edges for {fmt_bytes(unique)} unique"
                  if ratio_of(totals, "amplification") is not None else NO_PAYLOAD)
        amp.append(f"  ({detail})", style="dim")
        out.append(Padding(amp, (0, 0, 0, 2)))
    note = MEMBERSHIP_NOTES.get(r.get("membership"))  # type: ignore[arg-type]
    if note:
        out.append(_note(note))
    return out


#: What the headline says about where the classes come from (`membership` in the result).
MEMBERSHIP_NOTES = {
    "unknown": ("No topology: classes come from the wire only. Forwarding seen on the wire proves redirection "
                "and replication; other payload is write/read (unclassified). Give --topology nodes.toml "
                "(docs/topology.md), or --assume-members to treat every address as a cluster member."),
    "assumed": "Every address is assumed to be a cluster member (--assume-members).",
    "topology": "Cluster membership from the topology file.",
}


def _edges(r: dict[str, Any], wide: bool) -> list[RenderableType]:
    edges = _edges_sorted(r)
    totals = section(r, "totals")
    if not edges:
        return []
    main = [
        ("Payload", "payload_bytes", fmt_bytes),
        ("Unique", "unique_bytes", fmt_bytes),
        ("Ratio", "dup_ratio", fmt_ratio),
        ("Sends", "sends", fmt_count),
    ]
    detail = [
        ("Non-trivial", "nontrivial_bytes", fmt_bytes),
        ("Trivial", "trivial_bytes", fmt_bytes),
        ("Per-copy dup", "per_copy_duplicate_bytes", fmt_bytes),
        ("Repeated", "repeated_content_bytes", fmt_bytes),
    ]
    # Narrow: the breakdown is a second table whose rows are linked to the first by number.
    if wide:
        tables = [("Edges", main + detail, True, True)]
    else:
        tables = [("Edges", main, False, True), ("Duplicate breakdown per edge", detail, True, False)]
    out: list[RenderableType] = []
    for title, cols, with_decided, with_names in tables:
        t = _table()
        t.add_column("#", justify="right", style="dim")
        if with_names:
            t.add_column("Edge", overflow="fold")
            t.add_column("Class")
        for name, _, _ in cols:
            t.add_column(name, justify="right")
        if with_decided:
            t.add_column("Decided by: inference/rule/forwarded" if wide else "inf/rule/fwd", justify="right")
        for n, e in enumerate(edges, 1):
            row: list[RenderableType] = [str(n)]
            if with_names:
                row += [_edge_name(e), _class_text(e.get("class"))]
            row += [fmt(e.get(key)) for _, key, fmt in cols]
            if with_decided:
                row.append(_decided_by(e.get("decided_by")))
            t.add_row(*row)
        if totals:
            t.add_section()
            row = ["", Text("all edges", style="bold"), ""] if with_names else [Text("all", style="bold")]
            row += [fmt(totals.get(key)) for _, key, fmt in cols]
            if with_decided:
                row.append(_decided_by(totals.get("decided_by")) if "decided_by" in totals else "")
            t.add_row(*row)
        out += [_heading(title), t]
    if any(e.get("dup_ratio", 0) is None for e in edges):
        out.append(_note("Ratio —: none of the bytes was first on the edge (all counted as unique under "
                         "another class of the same edge)."))
    shown = {e.get("class") for e in edges if isinstance(e.get("class"), str)}
    for c in traffic_classes():
        if c["name"] in shown:
            out.append(_note(f"{c['name']}: {c['description']}."))
    out.append(_note("Decided by: payload bytes whose class came from membership (inference), a topology "
                     "rule, or forwarding seen on the wire."))
    return out


def _nodes(r: dict[str, Any]) -> list[RenderableType]:
    nodes = [n for n in _list(r, "nodes") if isinstance(n, dict)]
    if not nodes:
        return []
    membership = r.get("membership")
    t = _table()
    t.add_column("Node", no_wrap=True)
    t.add_column("Member")
    t.add_column("Addresses", overflow="fold")
    for n in nodes:
        addrs = n.get("addresses")
        if isinstance(addrs, list) and isinstance(n.get("ranges"), list):
            addrs = addrs + n["ranges"]
        if membership == "unknown":
            member = "unknown"
        elif n.get("member") is True:
            member = "assumed" if membership == "assumed" else "yes"
        else:
            member = "no" if n.get("member") is False else _text(n.get("member"))
        t.add_row(
            str(n.get("name", DASH)),
            member,
            ", ".join(map(str, addrs)) if isinstance(addrs, list) else _text(addrs),
        )
    return [_heading("Nodes"), t]


def _top_duplicates(r: dict[str, Any], wide: bool, top: int | None, width: int) -> list[RenderableType]:
    dups = [d for d in _list(r, "top_duplicates") if isinstance(d, dict)]
    shown = dups if top is None else dups[: max(top, 0)]
    if not shown:
        return []
    inputs = [i for i in _list(r, "inputs") if isinstance(i, dict)]
    first_ts = section(r, "capture").get("first_ts")
    # How many there are in all comes from the engine (the result keeps only the first --top).
    total = r.get("duplicated_payloads")
    of = total if is_number(total) and total >= len(dups) else len(dups)
    out: list[RenderableType] = [_heading(f"Top duplicated payloads ({len(shown)} of {fmt_count(of)})")]
    for rank, d in enumerate(shown, 1):
        raw_sends = d.get("sends")
        sends = [s for s in raw_sends if isinstance(s, dict)] if isinstance(raw_sends, list) else []
        digest = _text(d.get("digest"))
        title = Text(f"{rank}. ", style="bold")
        title.append(fmt_bytes(d.get("size")), style="bold")
        if wide and is_number(d.get("size")) and d["size"] >= 1024:
            title.append(f" ({fmt_count(d['size'])} B)", style="dim")
        total = d.get("sends_total", len(sends))
        title.append(f", sent {fmt_counted(total, 'time')}", style="bold")
        # Narrow: one transport for every send goes into the heading line instead of a column.
        vias = {s.get("transport") for s in sends}
        show_via = wide or len(vias) > 1
        if sends and not show_via:
            title.append(f" via {_text(next(iter(vias)))}", style="dim")
        if is_number(total) and total != len(sends):
            title.append(f" (first {len(sends)} listed)", style="dim")
        if "duplicate_bytes" in d:
            title.append(f", repeats {fmt_bytes(d.get('duplicate_bytes'))}", style="dim")
        # Narrow: 12 hex digits (48 bits tell a top list apart; the wide layout and --evidence
        # give the whole digest), on a line of its own when the heading has no room for it.
        mark = f"digest {digest if wide else _short(digest, 12)}"
        if title.cell_len + 2 + len(mark) <= width:
            title.append(f"  {mark}", style="dim")
            out.append(title)
        else:
            out += [title, Text(f"   {mark}", style="dim")]
        if sends:
            t = _table()
            t.add_column("#", justify="right", style="dim")
            t.add_column("Time", justify="right", no_wrap=True)
            pairs = [f"{_end(s, 'src', wide)} → {_end(s, 'dst', wide)}" for s in sends]
            # The edge is what the reader scans for; the file name may fold instead.
            t.add_column("Src → dst", overflow="fold", min_width=min(max(map(len, pairs)), 31))
            t.add_column("Offset", justify="right")
            if wide:
                t.add_column("Session")
                t.add_column("Tree", justify="right")
                t.add_column("FileId")
            if show_via:
                t.add_column("Via")
            t.add_column("Frames", justify="right", no_wrap=True)
            # Narrow: the file's last path component, cut with an ellipsis rather than folded
            # mid-name (the wide layout and --evidence have the whole path).
            t.add_column("Share and file" if wide else "File", overflow="fold" if wide else "ellipsis",
                         no_wrap=not wide, min_width=None if wide else 8)
            for n, (s, pair) in enumerate(zip(sends, pairs), 1):
                row = [str(n), _time(s.get("time"), first_ts), pair, fmt_count(s.get("offset"))]
                if wide:
                    row += [_text(s.get("session")), _tree(s.get("tree")), _text(s.get("file_id"))]
                if show_via:
                    row.append(_text(s.get("transport")))
                row += [_frames(s, multi=len(inputs) > 1), _file(s, wide)]
                t.add_row(*row)
            out.append(Padding(t, (0, 0, 0, 3 if wide else 1)))
        for idx, filt in filters_by_input(sends).items():
            line = FilterLine(f"   Wireshark {_input_label(inputs, idx, wide)}: ", style="dim")
            line.append(filt, style="cyan")
            out.append(line)
    return out


def _accounting(r: dict[str, Any], wide: bool) -> list[RenderableType]:
    acc = section(r, "accounting")
    cats = acc.get("categories")
    if not acc:
        return []
    t = _table()
    t.add_column("Category", no_wrap=True)
    t.add_column("Bytes", justify="right")
    t.add_column("", justify="right")
    t.add_column("Share", justify="right")
    if wide:
        t.add_column("Meaning")
    total = acc.get("total_bytes")
    whole = total if is_number(total) else acc.get("input_bytes")
    if isinstance(cats, dict):
        order = sorted(cats.items(), key=lambda kv: (-(kv[1] if is_number(kv[1]) else 0), kv[0]))
        for name, v in order:
            row = [str(name), fmt_count(v), fmt_bytes(v), fmt_percent(v, whole)]
            if wide:
                row.append(Text(category_description(str(name)), style="dim"))
            t.add_row(*row)
    t.add_section()
    total_row = [Text("total", style="bold"), fmt_count(total), fmt_bytes(total), ""]
    input_row = ["input files", fmt_count(acc.get("input_bytes")), fmt_bytes(acc.get("input_bytes")), ""]
    rec = acc.get("reconciled")
    status = (Text("reconciled", style="green") if rec is True
              else Text("does NOT reconcile", style="bold red") if rec is False else None)
    if wide:
        total_row.append(status or "")
        input_row.append("")
    t.add_row(*total_row)
    t.add_row(*input_row)
    out: list[RenderableType] = [_heading("Byte accounting (every input byte in one category)"), t]
    if not wide and status is not None:
        out.append(Text("  ").append(status))
    return out


RDMA_LABELS = {
    "smbdirect_connections": "SMB Direct connections",
    "qps": "queue pairs",
    "linked_transfers": "RDMA transfers linked to WRITE/READ",
    "linked_bytes": "linked bytes",
    "unlinked_bytes": "unlinked bytes",
    "incomplete_transfers": "incomplete transfers",
    "unseen_transfers": "transfers not seen",
    "gaps": "gaps",
    "retransmitted_bytes": "retransmitted bytes",
    "cm_connections": "CM connections",
    "inferred_connections": "inferred connections",
    "buffer_pairings": "queue pairs paired by buffer",
    "other_ulp_connections": "other-ULP connections",
}

SMBDIRECT_LABELS = {
    "negotiate_requests": "negotiate requests",
    "negotiate_responses": "negotiate responses",
    "data_messages": "data messages",
    "data_length_sum": "data bytes",
}

IWARP_LABELS = {
    "mpa_requests": "MPA requests",
    "mpa_replies": "MPA replies",
    "mpa_fpdus": "FPDUs",
    "markers": "markers",
    "crc_errors": "CRC errors",
    "terminates": "terminates",
    "resyncs": "resynchronisations",
}

INFINIBAND_LABELS = {
    "packets": "packets",
    "cm_requests": "CM requests",
    "cm_replies": "CM replies",
}


def _nonzero(d: dict[str, Any]) -> bool:
    """Whether a counter section counted anything (nested sections included)."""
    for v in d.values():
        if isinstance(v, dict) and _nonzero(v):
            return True
        if is_number(v) and v:
            return True
    return False


def _opcodes(d: Any) -> list[str]:
    if not isinstance(d, dict) or not d:
        return []
    order = sorted(d.items(), key=lambda kv: (-(kv[1] if is_number(kv[1]) else 0), str(kv[0])))
    return ["opcodes " + ", ".join(f"{k} ×{fmt_count(v)}" for k, v in order)]


def _traffic(r: dict[str, Any], width: int = 80) -> list[RenderableType]:
    tcp, smb2, rdma = section(r, "tcp"), section(r, "smb2"), section(r, "rdma")
    if not tcp and not smb2 and not rdma:
        return []
    grid = _grid()
    # Facts are packed into lines between items, so "decrypted messages 44" never breaks:
    # the row label (up to 10 columns) and the paddings take 16.
    room = max(width - 16, 24)

    def _facts(d: dict[str, Any], labels: dict[str, str], extra: list[str] | None = None) -> str:
        return _pack(_fact_items(d, labels) + (extra or []), room)

    # Each transport that carried something shows its own figures (an RDMA-only capture
    # has no TCP line; a TCP-only one no RDMA lines).
    if tcp and (_nonzero(tcp) or not _nonzero(rdma)):
        grid.add_row("TCP", _facts(tcp, TCP_LABELS))
    if rdma and _nonzero(rdma):
        top = {k: v for k, v in rdma.items() if not isinstance(v, dict)}
        grid.add_row("RDMA", _facts(top, RDMA_LABELS))
        for key, label, labels in (("smbdirect", "SMB Direct", SMBDIRECT_LABELS), ("iwarp", "iWARP", IWARP_LABELS),
                                   ("infiniband", "InfiniBand", INFINIBAND_LABELS)):
            sub = rdma.get(key)
            if isinstance(sub, dict) and _nonzero(sub):
                opcodes = sub.get("opcodes", sub.get("bth_opcodes"))
                grid.add_row(label, _facts(sub, labels, _opcodes(opcodes)))
    if smb2:
        grid.add_row("SMB2", _facts(smb2, SMB2_LABELS))
        for key in ("dialects", "files"):
            v = smb2.get(key)
            if isinstance(v, list) and v:
                shown = ", ".join(map(str, v[:20])) + (f", … ({len(v)} in all)" if len(v) > 20 else "")
                grid.add_row(key, shown)
        cmds = smb2.get("commands")
        if isinstance(cmds, dict) and cmds:
            order = sorted(cmds.items(), key=lambda kv: (-(kv[1] if is_number(kv[1]) else 0), str(kv[0])))
            grid.add_row("commands", _pack([f"{k} {fmt_count(v)}" for k, v in order], room))
    return [_heading("Traffic"), Padding(grid, (0, 0, 0, 2))]


def _footer(r: dict[str, Any]) -> list[RenderableType]:
    out: list[RenderableType] = [Text("")]
    a, idx = section(r, "analysis"), section(r, "index")
    if a:
        dask = a.get("dask") if isinstance(a.get("dask"), dict) else None
        if dask:
            where = "a local Dask cluster" if dask.get("scheduler") == "local" else f"Dask scheduler {dask.get('scheduler')}"
            how = (f", {fmt_counted(dask.get('shards'), 'task')} on {fmt_counted(dask.get('workers'), 'worker')} of {where};"
                   f" merge {fmt_seconds(dask.get('merge_seconds'))}")
        elif is_number(a.get("threads")) and a["threads"] > 1:
            how = f", {a['threads']} decoding threads"
        else:
            how = ""
        out.append(Text(
            f"Analysed {fmt_counted(a.get('frames'), 'frame')} in {fmt_seconds(a.get('elapsed_seconds'))}"
            f" ({fmt_bytes(a.get('bytes_per_second'))}/s" + how + ")",
            style="dim",
        ))
    if idx:
        out.append(Text(
            f"Dedupe index (window {fmt_seconds(idx.get('window_seconds'))}): peak "
            f"{fmt_counted(idx.get('peak_live_sends'), 'live send')}, {fmt_counted(idx.get('peak_live_blocks'), 'live block')}, ~{fmt_bytes(idx.get('peak_bytes_estimate'))}"
            + (f" (bound {fmt_counted(idx.get('max_live_blocks'), 'block')})" if "max_live_blocks" in idx else ""),
            style="dim",
        ))
    series = section(r, "series")
    if series:
        rows = series.get("rows")
        out.append(Text(
            f"Time series: {fmt_counted(series.get('intervals'), 'interval')} of {fmt_seconds(series.get('interval_seconds'))}"
            f" with payload, {fmt_counted(len(rows) if isinstance(rows, list) else None, 'row')} (--csv, --html, --json)",
            style="dim",
        ))
    live = section(r, "live")
    analysed = section(live, "analysed")
    if is_number(analysed.get("fraction")):
        stats = section(live, "stats")
        out.append(Text(
            f"Live capture: analysed {analysed['fraction'] * 100:.1f}% of {fmt_bytes(analysed.get('storage_bytes'))} "
            f"of storage traffic matched (kernel drops {fmt_count(stats.get('kernel_drops', 0))}, "
            f"ring drops {fmt_count(stats.get('ring_drops', 0))})",
            style="dim",
        ))
        shed = section(live, "shed")
        if is_number(shed.get("connections")) and shed["connections"] > 0:
            listed = [str(c) for c in shed.get("listed") or []]
            more = shed["connections"] - len(listed)
            by_kernel = shed.get("connections_shed_by_capture_point")
            kernel = (f"; {fmt_count(by_kernel)} of them shed by the capture point itself, its queue nearly full "
                      "while the analysis did not run" if is_number(by_kernel) and by_kernel > 0 else "")
            out.append(Text(
                f"Shed under overload: {fmt_counted(shed['connections'], 'connection')} not analysed from the moment the capture queues filled up "
                f"({fmt_bytes(analysed.get('shed_bytes'))} in {fmt_counted(shed.get('frames'), 'frame')}; counted, "
                f"never split into scattered frames{kernel}): {', '.join(listed)}" + (f" and {fmt_count(more)} more" if more > 0 else ""),
                style="yellow",
            ))
    rendered = ("smbwire_version", "window_seconds", "index", "rdma", "membership", "duplicated_payloads", "series",
                "tunnels", "live")
    unknown = [k for k in r if k not in EXPECTED_SECTIONS and k not in rendered]
    if unknown:
        out.append(Text(f"Also in the result (see --json): {', '.join(map(str, unknown))}", style="dim"))
    return out


# ---------------------------------------------------------------------------- helpers


class FilterLine(Text):
    """A line the console must not break or crop (print it with `soft_wrap=True`): a
    display filter is copied and pasted whole."""


class _Table(Table):
    """A rich table whose string cells are plain text: rich would read `[bold]` or `[/]` in a
    file name as markup (styling the rest, or failing on a closing tag with nothing open) and
    `:smile:` as an emoji code, whatever the console's settings."""

    def add_row(self, *cells: Any, **kwargs: Any) -> None:
        super().add_row(*(Text(c) if isinstance(c, str) else c for c in cells), **kwargs)


def _table(title: str | None = None) -> Table:
    return _Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                 collapse_padding=True, pad_edge=False)


def _note(text: str) -> Padding:
    return Padding(Text(text, style="dim"), (0, 0, 0, 2))


def _heading(title: str) -> Text:
    return Text("\n" + title, style="bold")


def _warning_lines(items: list[str]) -> list[RenderableType]:
    if not items:
        return [Text("  none", style="green")]
    grid = _Table.grid(padding=(0, 1))
    grid.add_column(style="bold yellow")
    grid.add_column(overflow="fold")
    for w in items:
        grid.add_row("!", w)
    return [Padding(grid, (0, 0, 0, 2))]


def _list(r: dict[str, Any], key: str) -> list[Any]:
    v = r.get(key)
    return v if isinstance(v, list) else []


def _edges_sorted(r: dict[str, Any]) -> list[dict[str, Any]]:
    edges = [e for e in _list(r, "edges") if isinstance(e, dict)]
    return sorted(edges, key=lambda e: -(e.get("payload_bytes") if is_number(e.get("payload_bytes")) else 0))


def _edge_name(e: dict[str, Any]) -> str:
    return f"{_text(e.get('src'))} → {_text(e.get('dst'))}"


def _class_text(cls: Any) -> Text:
    return Text(_text(cls), style=class_style(cls))


def _decided_by(d: Any) -> str:
    if not isinstance(d, dict):
        return _text(d)
    known = [fmt_bytes(d.get(k)) for k in ("inference", "rule", "forwarded")]
    extra = [f"{k} {fmt_bytes(v)}" for k, v in d.items() if k not in ("inference", "rule", "forwarded")]
    return "/".join(known) + (" " + " ".join(extra) if extra else "")


def _end(s: dict[str, Any], which: str, wide: bool) -> str:
    """A send's end: node name, with the address in wide layout when they differ."""
    node, addr = s.get(f"{which}_node"), s.get(which)
    if node is None:
        return _text(addr)
    if wide and addr is not None and str(addr) != str(node):
        return f"{node} ({addr})"
    return str(node)


def _text(v: Any) -> str:
    return DASH if v is None else str(v)


def _short(s: str, n: int) -> str:
    return s if len(s) <= n + 1 else s[:n] + "…"


def _path(p: Any, wide: bool) -> str:
    if not isinstance(p, str):
        return _text(p)
    return p if wide else (os.path.basename(p) or p)


def _input_label(inputs: list[dict[str, Any]], idx: int, wide: bool) -> str:
    if 0 <= idx < len(inputs):
        return f"[{idx}] {_path(inputs[idx].get('path'), wide)}"
    return f"[{idx}]"


def _time(t: Any, first_ts: Any) -> str:
    if not is_number(t):
        return _text(t)
    if is_number(first_ts):
        # Microseconds: sends of one burst are often a few µs apart and must stay in order.
        return f"+{t - first_ts:.6f} s"
    return f"{t:.6f}"


def _tree(v: Any) -> str:
    """A TreeId as tshark shows it (0x00000001)."""
    return f"0x{v:08x}" if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else _text(v)


def _file(s: dict[str, Any], wide: bool) -> str:
    name, share = s.get("file_name"), s.get("share")
    if wide and share is not None:
        return f"{share}\\{name}" if name is not None else str(share)
    if not wide and isinstance(name, str):
        return name.rsplit("\\", 1)[-1] or name
    return _text(name)


def _frames(s: dict[str, Any], multi: bool) -> str:
    f = s.get("frames")
    if isinstance(f, list) and len(f) == 2 and f[0] != f[1]:
        text = f"{f[0]}–{f[1]}"
    elif isinstance(f, list) and f:
        text = str(f[-1])
    else:
        text = _text(f)
    if multi:
        text += f" [{_text(s.get('file'))}]"
    return text


def _pack(items: list[str], width: int) -> str:
    """`a · b · c` in lines of at most `width` columns, broken only between items (an item
    longer than a line stands alone)."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 3 + len(item) <= width:
            lines[-1] += " · " + item
        else:
            lines.append(item)
    return "\n".join(lines)


def _fact_items(d: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """`segments 1,234`, `gaps 0`, …: known keys first (labelled), then any other scalar
    the engine added."""
    parts: list[str] = []
    for key, label in labels.items():
        if key in d:
            parts.append(f"{label} {_scalar(key, d[key])}")
    for key, v in d.items():
        if key not in labels and not isinstance(v, (dict, list)):
            parts.append(f"{str(key).replace('_', ' ')} {_scalar(key, v)}")
    return parts


def _scalar(key: Any, v: Any) -> str:
    return fmt_bytes(v) if "bytes" in str(key).split("_") else fmt_count(v)


def _grid() -> Table:
    grid = _Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    return grid


def _utc(ts: float) -> str:
    import datetime as dt

    try:
        return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return f"{ts:.6f}"
