"""The live view of `smbwire live`: a function of one snapshot dict and the screen size.

`build_live_view(snapshot, width, height)` returns one renderable that fits `width` x
`height` exactly: every line is cut to the width (never wrapped) and sections get rows by
priority — header and capture health always, then the bytes/s history per class, then the
duplicate-payload ratio per edge (as many edges as fit, "… N more" after), then top
duplicated payloads with whatever is left. `status_line(snapshot)` is the one-line form of
the plain mode (non-terminals, systemd).

The snapshot is the engine's result so far (schema "smbwire/1", sends still in the window
counted provisionally) with a "live" section: backend, counters, rate history.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from .report import class_style
from .tables import categories_with, traffic_classes
from .units import DASH, fmt_bytes, fmt_count, fmt_ratio, fmt_seconds, ratio_of, is_number, printable_tree, tunnel_sentence

SPARK = " ▁▂▃▄▅▆▇█"


def build_live_view(snap: dict[str, Any] | None, width: int, height: int) -> RenderableType:
    lines = live_lines(snap, width, height)
    return Group(*lines)


def live_lines(snap: dict[str, Any] | None, width: int, height: int) -> list[Text]:
    """The view as at most `height` lines of at most `width` cells."""
    width, height = max(width, 20), max(height, 4)
    snap = printable_tree(snap, skip=("series",)) if isinstance(snap, dict) else {}  # names shown, never acted on
    live = _dict(snap.get("live"))
    head = _header(snap, live, width)
    health = _health(snap, live, width)
    rates = _rates(live, width)
    budget = height - len(head) - len(health)
    body: list[Text] = []
    if budget >= len(rates) + 4:
        # Rates only when at least a title, a header and two edge rows still fit.
        body += rates
        budget -= len(rates)
    edges_block = _edges(snap, width, budget)
    body += edges_block
    budget -= len(edges_block)
    if budget >= 3:
        body += _top(snap, width, budget)
    out = head + body + health
    for line in out:
        line.no_wrap = True
        line.overflow = "ellipsis"
        line.truncate(width, overflow="ellipsis")
    return out[:height]


# ------------------------------------------------------------------ sections


def _header(snap: dict[str, Any], live: dict[str, Any], width: int) -> list[Text]:
    t = Text()
    t.append("smbwire live", style="bold")
    t.append(f" · {live.get('iface', DASH)}")
    backend = live.get("backend")
    t.append(f" · {backend or DASH}{_hook_note(live)}", style="green" if backend == "ebpf" else "yellow")
    t.append(f" · up {fmt_seconds(live.get('uptime_seconds'))}")
    t.append(f" · window {fmt_seconds(snap.get('window_seconds'))}", style="dim")
    stats = _dict(live.get("stats"))
    t.append(f" · {fmt_count(stats.get('packets_matched'))} pkts, {fmt_bytes(stats.get('bytes_matched'))}",
             style="dim")
    out = [t]
    tunnels = tunnel_sentence(snap)
    if tunnels:
        out.append(Text(tunnels, style="dim"))
    why = live.get("fallback_reason")
    if backend != "ebpf" and why:
        out.append(Text(f"eBPF not used: {why}", style="yellow"))
    for err in live.get("errors") or []:
        out.append(Text(f"error: {err}", style="bold red"))
    return out


def _hook_note(live: dict[str, Any]) -> str:
    """"/tcx", "/xdp" or "/xdp-generic": where the eBPF program is attached."""
    hook = live.get("hook")
    if not hook:
        return ""
    mode = live.get("xdp_mode")
    return f"/{hook}" + (f"-{mode}" if hook == "xdp" and mode not in (None, "native") else "")


def _health(snap: dict[str, Any], live: dict[str, Any], width: int) -> list[Text]:
    stats = _dict(live.get("stats"))
    tcp = _dict(snap.get("tcp"))
    not_analysed = _not_analysed(snap)
    kd, rd = stats.get("kernel_drops", 0), stats.get("ring_drops", 0)
    tcp_gaps, rdma_gaps = _num(tcp.get("gaps")), _num(_dict(snap.get("rdma")).get("gaps"))
    bad = any(is_number(x) and x > 0 for x in (kd, rd, stats.get("copy_errors"), tcp.get("gap_bytes"), rdma_gaps))
    # Gaps: holes in TCP streams (their bytes) and RDMA packets never seen (PSN gaps).
    gaps = f"gaps {fmt_count(int(tcp_gaps + rdma_gaps))} ({fmt_bytes(tcp.get('gap_bytes', 0))} TCP"
    gaps += f", {fmt_count(int(rdma_gaps))} RDMA PSN)" if rdma_gaps else ")"
    parts = [
        f"kernel drops {fmt_count(kd)}",
        f"ring drops {fmt_count(rd)}",
        gaps,
        f"not analysed {fmt_bytes(not_analysed)}",
    ]
    fraction = _dict(live.get("analysed")).get("fraction")
    if is_number(fraction):
        # The engine's share of matched storage bytes that was analysed (live.analysed).
        parts.insert(0, f"analysed {fraction * 100:.1f}%")
    if stats.get("copy_errors"):
        parts.append(f"copy errors {fmt_count(stats.get('copy_errors'))}")
    shed = _dict(live.get("shed"))
    if _num(shed.get("connections")) > 0:
        # Whole connections no longer analysed because the capture queues filled up.
        parts.append(f"shed {fmt_count(shed.get('connections'))} conn "
                     f"({fmt_bytes(_dict(live.get('analysed')).get('shed_bytes', 0))})")
    t = Text()
    t.append("Capture health ", style="bold")
    t.append("OK " if not bad else "LOSS ", style="green" if not bad else "bold red")
    # Greedy packing: on a narrow screen the health facts take two lines, never get cut.
    out = [t]
    first = True
    for part in parts:
        sep = "" if first else " · "
        if not first and t.cell_len + len(sep) + len(part) > width:
            t = Text("  ")
            out.append(t)
            sep = ""
        t.append(sep + part)
        first = False
    w = _dict(live.get("write"))
    if w:
        files = w.get("files") or []
        line = Text(f"writing {len(files)} file{'s' if len(files) != 1 else ''}, "
                    f"{fmt_bytes(w.get('bytes_written'))}", style="dim")
        if files:
            line.append(f" → {files[-1]}", style="dim")
        if w.get("error"):
            # What it means for the run is in live.errors, the lines below the header.
            line.append("  stopped", style="bold red")
        out.append(line)
    return out


def _rates(live: dict[str, Any], width: int) -> list[Text]:
    """Bytes/s per class over the whole history (300 one-second samples by default), each
    column the average of `per` seconds so the graph spans the history at any width."""
    rates = _dict(live.get("rates"))
    samples = [s for s in rates.get("samples") or [] if isinstance(s, dict)]
    label_w, value_w = 16, 22
    spark_w = max(width - label_w - value_w - 2, 8)
    columns, per = downsample(samples, spark_w)
    span = sum(c["seconds"] for c in columns)
    title = f"  last {fmt_seconds(span)}" if columns else "  no samples yet"
    if per > 1:
        title += f", {per} s per column"
    out = [Text.assemble(("Payload bytes/s per class", "bold"), (f"{title}, now / peak", "dim"))]
    rows = _rate_rows()
    series = {cls: [_num(c["classes"].get(cls)) for c in columns] for cls, _ in rows}
    # Now and peak are one-second figures, whatever the column width.
    raw = {cls: [_num(_dict(s.get("classes")).get(cls)) for s in samples] for cls, _ in rows}
    scale = max([max(v) for v in series.values() if v] + [1.0])
    for cls, label in rows:
        vals = raw[cls]
        t = Text(f"{label:<{label_w}}", style=class_style(cls))
        t.append(_spark(series[cls], scale, spark_w), style=class_style(cls))
        now = vals[-1] if vals else 0.0
        peak = max(vals) if vals else 0.0
        t.append(f" {fmt_bytes(now) + '/s':>11}", style="bold")
        t.append(f" {fmt_bytes(peak):>10}", style="dim")
        out.append(t)
    wire = [c["wire_bytes"] for c in columns]
    last_wire = _num(samples[-1].get("wire_bytes")) if samples else 0.0
    t = Text(f"{'wire (storage)':<{label_w}}", style="dim")
    t.append(_spark(wire, max(wire + [1.0]), spark_w), style="dim")
    t.append(f" {fmt_bytes(last_wire) + '/s':>11}", style="dim")
    out.append(t)
    return out


def downsample(samples: list[dict[str, Any]], width: int) -> tuple[list[dict[str, Any]], int]:
    """At most `width` columns covering all of `samples`, oldest first, and how many samples
    each column stands for. A column is the time-weighted mean rate of its samples; columns
    are aligned on the samples' end times (`t`), so they do not shift as new samples arrive."""
    width = max(width, 1)
    per = max(1, -(-len(samples) // width))  # ceil
    # Samples are one interval apart (1 s by default): bucket by time when stamped, else by
    # position.
    intervals = sorted(_num(s.get("seconds", 1.0)) for s in samples)
    step = max(round(intervals[len(intervals) // 2], 2), 0.05) if intervals else 1.0
    cols: list[dict[str, Any]] = []
    key_prev: Any = object()
    for i, s in enumerate(samples):
        secs = _num(s.get("seconds", 1.0)) or step
        t = s.get("t")
        key = int(_num(t) // (per * step)) if per > 1 and is_number(t) else i // per
        if not cols or key != key_prev:
            cols.append({"seconds": 0.0, "wire_bytes": 0.0, "classes": {}, "n": 0})
            key_prev = key
        c = cols[-1]
        c["seconds"] += secs
        c["n"] += 1
        c["wire_bytes"] += _num(s.get("wire_bytes")) * secs
        for cls, v in _dict(s.get("classes")).items():
            c["classes"][cls] = c["classes"].get(cls, 0.0) + _num(v) * secs
    for c in cols:
        c["wire_bytes"] /= c["seconds"]
        c["classes"] = {k: v / c["seconds"] for k, v in c["classes"].items()}
    return cols[-width:], per


def _edges(snap: dict[str, Any], width: int, budget: int) -> list[Text]:
    if budget < 1:
        return []
    edges = [e for e in snap.get("edges") or [] if isinstance(e, dict)]
    edges.sort(key=lambda e: -_num(e.get("payload_bytes")))
    totals = _dict(snap.get("totals"))
    title = Text("Duplicate-payload ratio per edge and class", style="bold")
    if totals:
        title.append(f"  all edges {fmt_ratio(ratio_of(totals, 'dup_ratio'))}, amplification "
                     f"{fmt_ratio(ratio_of(totals, 'amplification'), '×')}", style="dim")
    out = [title]
    if not edges:
        if budget >= 2:
            out.append(Text("  no SMB payload seen yet", style="dim"))
        return out[:budget]
    wide = width >= 120
    # Pending: bytes of WRITEs still in the window whose class may yet change (their receiver
    # may forward them: redirection); the engine says which (`pending_bytes`).
    any_pending = any(_num(e.get("pending_bytes")) for e in edges)
    cols = [("Ratio", 7), ("Class", 15), ("Payload", 11)] + ([("Pending", 11)] if any_pending else []) + [("Unique", 11)]
    if wide:
        cols += [("Sends", 9), ("Per-copy dup", 13), ("Repeated", 11), ("Trivial", 11)]
    fixed = sum(w + 1 for _, w in cols)
    name_w = max(width - fixed - 2, 10)
    header = Text("  " + f"{'Edge':<{name_w}}", style="dim")
    for name, w in cols:
        header.append(" " + (f"{name:<{w}}" if name == "Class" else f"{name:>{w}}"), style="dim")
    out.append(header)
    room = budget - len(out)
    show = edges if len(edges) <= room else edges[: max(room - 1, 0)]
    for e in show:
        name = _pair(str(e.get("src", DASH)), str(e.get("dst", DASH)), name_w)
        cls = str(e.get("class", DASH))
        t = Text("  " + f"{name:<{name_w}}")
        t.append(" " + f"{fmt_ratio(ratio_of(e, 'dup_ratio')):>7}", style="bold")
        t.append(" " + f"{cls[:15]:<15}", style=class_style(cls))
        t.append(f" {fmt_bytes(e.get('payload_bytes')):>11}")
        if any_pending:
            pending = _num(e.get("pending_bytes"))
            t.append(f" {fmt_bytes(pending) if pending else DASH:>11}", style="italic" if pending else "dim")
        t.append(f" {fmt_bytes(e.get('unique_bytes')):>11}")
        if wide:
            t.append(f" {fmt_count(e.get('sends')):>9}"
                     f" {fmt_bytes(e.get('per_copy_duplicate_bytes')):>13}"
                     f" {fmt_bytes(e.get('repeated_content_bytes')):>11}"
                     f" {fmt_bytes(e.get('trivial_bytes')):>11}")
        out.append(t)
    if len(show) < len(edges):
        out.append(Text(f"  … {len(edges) - len(show)} more edge rows (see the final report / --json)",
                        style="dim"))
    elif any_pending and len(out) < budget:
        out.append(Text("  pending: WRITEs still in the window; their class is decided when they leave it "
                        "(a forward seen later makes them redirection)", style="dim"))
    return out


def _top(snap: dict[str, Any], width: int, budget: int) -> list[Text]:
    dups = [d for d in snap.get("top_duplicates") or [] if isinstance(d, dict)]
    if not dups:
        return []
    out = [Text("Top duplicated payloads", style="bold")]
    for i, d in enumerate(dups[: budget - 1], 1):
        sends = [s for s in d.get("sends") or [] if isinstance(s, dict)]
        pairs: list[str] = []
        for s in sends:
            p = f"{s.get('src_node', s.get('src', DASH))}→{s.get('dst_node', s.get('dst', DASH))}"
            if p not in pairs:
                pairs.append(p)
        f = next((s.get("file_name") for s in sends if s.get("file_name")), None)
        t = Text(f"  {i}. ")
        t.append(f"{fmt_bytes(d.get('size'))} × {fmt_count(d.get('sends_total'))}", style="bold")
        t.append(f"  repeats {fmt_bytes(d.get('duplicate_bytes'))}  {', '.join(pairs[:3])}"
                 + (f" +{len(pairs) - 3}" if len(pairs) > 3 else ""))
        if f:
            t.append(f"  {f}", style="dim")
        # What tells payloads of one size and edge apart: where they were written and when.
        first = sends[0] if sends else {}
        if is_number(first.get("offset")):
            t.append(f" @{fmt_count(first['offset'])}", style="dim")
        frames = first.get("frames")
        if isinstance(frames, list) and frames:
            t.append(f"  frame {frames[-1]}", style="dim")
        out.append(t)
    return out


# ------------------------------------------------------------------ plain mode


def status_line(snap: dict[str, Any] | None, now: float | None = None) -> str:
    """One line per interval for logs: time, backend, rates, ratios, capture health."""
    snap = printable_tree(snap, skip=("series",)) if isinstance(snap, dict) else {}
    live = _dict(snap.get("live"))
    stats = _dict(live.get("stats"))
    tcp = _dict(snap.get("tcp"))
    totals = _dict(snap.get("totals"))
    samples = [s for s in _dict(live.get("rates")).get("samples") or [] if isinstance(s, dict)]
    last = samples[-1] if samples else {}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now if now is not None else time.time()))
    parts = [
        stamp,
        f"iface={live.get('iface', DASH)}",
        f"backend={live.get('backend', DASH)}",
        *([f"hook={live['hook']}"] if live.get("hook") else []),
        f"pkts={stats.get('packets_matched', 0)}",
        f"wire={fmt_bytes(_num(last.get('wire_bytes')))}/s",
    ]
    for cls, _ in _rate_rows():
        parts.append(f"{cls}={fmt_bytes(_num(_dict(last.get('classes')).get(cls)))}/s")
    parts.append(f"ratio={fmt_ratio(totals.get('dup_ratio'))}")
    parts.append(f"amplification={fmt_ratio(totals.get('amplification'))}")
    edges = [e for e in snap.get("edges") or [] if isinstance(e, dict)]
    edges.sort(key=lambda e: -_num(e.get("payload_bytes")))
    for e in edges[:3]:
        parts.append(f"{e.get('src')}->{e.get('dst')}:{e.get('class')}={fmt_ratio(e.get('dup_ratio'))}")
    if len(edges) > 3:
        parts.append(f"+{len(edges) - 3}edges")
    parts.append(f"kernel_drops={stats.get('kernel_drops', 0)}")
    parts.append(f"ring_drops={stats.get('ring_drops', 0)}")
    parts.append(f"gap_bytes={tcp.get('gap_bytes', 0)}")
    parts.append(f"rdma_gaps={_dict(snap.get('rdma')).get('gaps', 0)}")
    parts.append(f"not_analysed={int(_not_analysed(snap))}")
    shed = _dict(live.get("shed"))
    if "connections" in shed:
        parts.append(f"shed_connections={int(_num(shed.get('connections')))}")
        parts.append(f"shed_bytes={int(_num(_dict(live.get('analysed')).get('shed_bytes')))}")
    fraction = _dict(live.get("analysed")).get("fraction")
    if is_number(fraction):
        parts.append(f"analysed={fraction:.4f}")
    index = _dict(snap.get("index"))
    if is_number(index.get("peak_bytes_estimate")):
        parts.append(f"index_peak_bytes={int(index['peak_bytes_estimate'])}")
    for err in live.get("errors") or []:
        parts.append(f"error={' '.join(str(err).split())!r}")
    return " ".join(str(p).replace("\n", " ") for p in parts)


# ------------------------------------------------------------------ helpers


def _pair(src: str, dst: str, width: int) -> str:
    """`src → dst` in at most `width` cells, shortening both ends alike (both must stay
    recognisable)."""
    name = f"{src} → {dst}"
    if len(name) <= width:
        return name
    side = max((width - 3) // 2, 2)
    cut = lambda s: s if len(s) <= side else s[: side - 1] + "…"  # noqa: E731
    return f"{cut(src)} → {cut(dst)}"[:width]


def _spark(vals: list[float], scale: float, width: int) -> str:
    vals = vals[-width:]
    chars = []
    for v in vals:
        if v <= 0:
            chars.append(" " if v == 0 else SPARK[1])
            continue
        i = 1 + int((len(SPARK) - 2) * min(v / scale, 1.0) + 0.5)
        chars.append(SPARK[min(i, len(SPARK) - 1)])
    return "".join(chars).rjust(width, " ")


def _not_analysed(snap: dict[str, Any]) -> float:
    cats = _dict(_dict(snap.get("accounting")).get("categories"))
    # Storage traffic smbwire could not analyse: the engine's "not_analysed" categories.
    not_analysed = categories_with("not_analysed")
    return sum(v for k, v in cats.items() if k in not_analysed and is_number(v))


def _rate_rows() -> list[tuple[str, str]]:
    """(class, label) per rate row, in the engine's report order."""
    return [(c["name"], c["label"]) for c in traffic_classes()]


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _num(v: Any) -> float:
    return float(v) if is_number(v) else 0.0
