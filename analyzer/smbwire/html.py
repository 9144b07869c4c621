"""The HTML report (`--html OUT.html`): one self-contained page, a function of the result
dict (schema "smbwire/1", docs/json-schema.md), that works offline.

The page has the headline (duplicate-payload ratio per edge, amplification), the edge table,
payload bytes/s over time per edge and class (the engine's `series`, stacked unique /
per-copy duplicate / repeated content / trivial), the top duplicated payloads with their
frames and Wireshark filters, the byte accounting and the warnings. The chart is plotly's
(its JavaScript inlined in the page: nothing is fetched); everything else is plain HTML.

Like the terminal report it renders only what the result holds: every figure shown carries
the result's exact value in a `data-value` attribute (and each chart point its interval's
bytes in `customdata`), which is what tests/report/test_html.py compares with the JSON.
Text that comes from a capture or a topology (node, share and file names) is escaped.
"""

from __future__ import annotations

import html
import math
from functools import cache
from datetime import datetime, timezone
from typing import Any

from .errors import UserError
from .findings import findings, section
from .jsonout import write_text
from .tables import category_description, traffic_classes
from .units import (DASH, fmt_bytes, fmt_count, fmt_counted, fmt_percent, fmt_ratio, fmt_seconds, ratio_of, is_number, NO_PAYLOAD,
                    printable_tree, tunnel_sentence)
from .wireshark import filters_by_input

#: The parts of a (edge, class) figure the chart stacks, bottom to top, with their colours.
STACK = (
    ("unique_bytes", "unique", "#2f6fb3"),
    ("per_copy_duplicate_bytes", "per-copy duplicate", "#d9622b"),
    ("repeated_content_bytes", "repeated content", "#8d5cb8"),
    ("trivial_bytes", "trivial", "#9e9e9e"),
)

#: (edge, class) pairs charted, largest payload first; the others are in --csv and the JSON.
MAX_CHARTS = 12

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.5em auto;
       max-width: 1200px; padding: 0 1em; color: #1d1d1f; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.2em; margin-top: 1.8em;
     border-bottom: 1px solid #ddd; padding-bottom: .2em; } h3 { font-size: 1em; margin: 1.2em 0 .3em; }
.dim { color: #666; } .ratio { font-weight: 600; font-size: 1.1em; }
table { border-collapse: collapse; margin: .4em 0; } th, td { padding: .2em .7em; text-align: left; }
th { border-bottom: 1px solid #bbb; font-weight: 600; } td.n, th.n { text-align: right;
     font-variant-numeric: tabular-nums; white-space: nowrap; } td.edge { white-space: nowrap; } tr.total td { border-top: 1px solid #bbb; font-weight: 600; }
tbody tr:nth-child(even) { background: #f6f6f8; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; background: #f2f2f4; padding: .1em .3em;
       word-break: break-all; }
ul.warnings li { margin: .2em 0; } .ok { color: #1a7f37; } .bad { color: #c62828; font-weight: 600; }
"""


def check_available() -> None:
    """Fail early (before a long analysis) when the chart library is missing."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise UserError("--html needs plotly (pip install 'smbwire[html]')") from None


def preload() -> None:
    """Load everything the page needs from plotly's package (modules, templates, validators,
    its JavaScript) now: `smbwire live` writes the page after dropping privileges, when the
    installation may no longer be readable."""
    check_available()
    row = {"t": 0.0, "payload_bytes": 1, "unique_bytes": 1}
    _plotly({("a", "b", "c"): [row]}, [("a", "b", "c")], 1.0)


def write_html(result: Any, out: str) -> None:
    """Write the page to `out` (atomically)."""
    write_text(render_html(result), out)


def render_html(result: Any) -> str:
    """The whole page as a string."""
    # As in the terminal: a right-to-left override or a zero-width character in a name from
    # the wire is shown as an escape, not obeyed.
    r = printable_tree(result) if isinstance(result, dict) else {}
    body = [
        _header(r),
        _headline(r),
        _edges(r),
        _chart(r),
        _top_duplicates(r),
        _accounting(r),
        _warnings(result),
    ]
    title = "smbwire report"
    inputs = [i for i in _list(r, "inputs") if isinstance(i, dict)]
    if inputs:
        title += " · " + ", ".join(str(i.get("path", "")) for i in inputs[:3]) + (" …" if len(inputs) > 3 else "")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{_e(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        + "\n".join(b for b in body if b)
        + "\n</body>\n</html>\n"
    )


# ---------------------------------------------------------------------------- sections


def _header(r: dict[str, Any]) -> str:
    inputs = [i for i in _list(r, "inputs") if isinstance(i, dict)]
    cap = section(r, "capture")
    facts = []
    if r.get("smbwire_version") is not None:
        facts.append(f"smbwire {_e(r['smbwire_version'])}")
    if "duration_seconds" in cap:
        facts.append(f"capture {_e(fmt_seconds(cap.get('duration_seconds')))}")
    if is_number(cap.get("first_ts")):
        facts.append(f"from {_e(_utc(cap['first_ts']))}")
    if "window_seconds" in r:
        facts.append(f"window {_e(fmt_seconds(r.get('window_seconds')))}")
    series = section(r, "series")
    if "interval_seconds" in series:
        facts.append(f"interval {_e(fmt_seconds(series.get('interval_seconds')))}")
    rows = "".join(
        f"<tr><td class=\"n dim\">[{n}]</td><td>{_e(i.get('path'))}</td>"
        f"{_num(i.get('size_bytes'), fmt_bytes)}{_num(i.get('frames'), fmt_count)}<td class=\"dim\">frames</td></tr>"
        for n, i in enumerate(inputs)
    )
    table = f"<table id=\"inputs\"><tbody>{rows}</tbody></table>" if rows else ""
    tunnels = tunnel_sentence(r)
    how = f"<p class=\"dim\" id=\"tunnels\">{_e(tunnels)}</p>\n" if tunnels else ""
    return f"<h1>smbwire report</h1>\n<p class=\"dim\">{' · '.join(facts)}</p>\n{how}{table}"


def _headline(r: dict[str, Any]) -> str:
    edges = _edges_of(r)
    totals = section(r, "totals")
    if not edges and not totals:
        return ""
    out = ["<h2>Duplicate-payload ratio per edge <span class=\"dim\">(payload ÷ unique, non-trivial blocks)</span></h2>",
           "<table id=\"headline\"><tbody>"]
    for e in edges:
        out.append(
            f"<tr {_edge_attrs(e)}><td>{_e(_edge_name(e))}</td><td>{_e(e.get('class'))}</td>"
            f"<td class=\"n ratio\" data-key=\"dup_ratio\" data-value=\"{_attr(e.get('dup_ratio'))}\">{_e(fmt_ratio(ratio_of(e, 'dup_ratio')))}</td>"
            f"<td class=\"dim\">{_e(fmt_bytes(e.get('nontrivial_bytes')))} for {_e(fmt_bytes(e.get('unique_bytes')))} unique</td></tr>"
        )
    out.append("</tbody></table>")
    if totals:
        unique = totals.get("globally_unique_bytes", totals.get("unique_bytes"))
        detail = (f"{fmt_bytes(totals.get('nontrivial_bytes'))} on all edges for {fmt_bytes(unique)} unique"
                  if ratio_of(totals, "amplification") is not None else NO_PAYLOAD)
        out.append(
            f"<p id=\"amplification\">Amplification <span class=\"ratio\" data-key=\"amplification\" "
            f"data-value=\"{_attr(totals.get('amplification'))}\">{_e(fmt_ratio(ratio_of(totals, 'amplification'), '×'))}</span> "
            f"<span class=\"dim\">({_e(detail)})</span></p>"
        )
    return "\n".join(out)


EDGE_COLUMNS = (
    ("Payload", "payload_bytes", fmt_bytes),
    ("Unique", "unique_bytes", fmt_bytes),
    ("Ratio", "dup_ratio", fmt_ratio),
    ("Per-copy dup", "per_copy_duplicate_bytes", fmt_bytes),
    ("Repeated", "repeated_content_bytes", fmt_bytes),
    ("Trivial", "trivial_bytes", fmt_bytes),
    ("Sends", "sends", fmt_count),
)


def _edges(r: dict[str, Any]) -> str:
    edges = _edges_of(r)
    if not edges:
        return ""
    head = "".join(f"<th class=\"n\">{_e(name)}</th>" for name, _, _ in EDGE_COLUMNS)
    out = ["<h2>Edges</h2>", f"<table id=\"edges\"><thead><tr><th>Edge</th><th>Class</th>{head}"
           "<th class=\"n\">Decided by inference / rule / forwarded</th></tr></thead><tbody>"]
    for e in edges:
        cells = "".join(_num(e.get(key), fmt, key) for _, key, fmt in EDGE_COLUMNS)
        out.append(f"<tr {_edge_attrs(e)}><td class=\"edge\">{_e(_edge_name(e))}</td><td>{_e(e.get('class'))}</td>{cells}"
                   f"<td class=\"n\">{_e(_decided_by(e.get('decided_by')))}</td></tr>")
    totals = section(r, "totals")
    if totals:
        cells = "".join(_num(totals.get(key), fmt, key) for _, key, fmt in EDGE_COLUMNS)
        out.append(f"<tr class=\"total\" data-total=\"1\"><td>all edges</td><td></td>{cells}"
                   f"<td class=\"n\">{_e(_decided_by(totals.get('decided_by')))}</td></tr>")
    out.append("</tbody></table>")
    shown = {e.get("class") for e in edges if isinstance(e.get("class"), str)}
    notes = [f"<b>{_e(c['name'])}</b>: {_e(c['description'])}." for c in traffic_classes() if c["name"] in shown]
    out.append("<p class=\"dim\">" + "<br>".join(notes) + "</p>")
    return "\n".join(out)


def _chart(r: dict[str, Any]) -> str:
    series = section(r, "series")
    rows = [x for x in _list(series, "rows") if isinstance(x, dict) and is_number(x.get("t"))]
    interval = series.get("interval_seconds")
    out = ["<h2>Payload bytes/s over time, per edge and class</h2>"]
    if not series:
        out.append("<p class=\"dim\">The result has no time series.</p>")
        return "\n".join(out)
    if not rows or not is_number(interval) or interval <= 0:
        out.append("<p class=\"dim\">No payload crossed any edge: nothing to chart.</p>")
        return "\n".join(out)
    note = f"Intervals of {_e(fmt_seconds(interval))}"
    if series.get("coarsenings"):
        note += (f" ({_e(fmt_seconds(series.get('requested_interval_seconds')))} asked for; coarsened "
                 f"{_e(fmt_counted(series.get('coarsenings'), 'time'))} to stay within {_e(fmt_counted(series.get('max_intervals'), 'interval'))})")
    note += ", aligned to the epoch, at the time of each send's first payload byte, with its final class."
    pairs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for x in rows:
        pairs.setdefault((str(x.get("src")), str(x.get("dst")), str(x.get("class"))), []).append(x)
    order = sorted(pairs, key=lambda k: (-sum(_int(x.get("payload_bytes")) for x in pairs[k]), k))
    shown = order[:MAX_CHARTS]
    if len(order) > len(shown):
        note += f" The {len(shown)} largest of {len(order)} (edge, class) pairs are charted; --csv has all."
    out.append(f"<p class=\"dim\">{note}</p>")
    out.append(_plotly(pairs, shown, float(interval)))
    return "\n".join(out)


def _plotly(pairs: dict[tuple[str, str, str], list[dict[str, Any]]], shown: list[tuple[str, str, str]],
            interval: float) -> str:
    try:
        import plotly.io as pio
        from plotly.subplots import make_subplots
    except ImportError:
        raise UserError("--html needs plotly (pip install 'smbwire[html]')") from None
    titles = [_e(f"{s} → {d} · {c}") for s, d, c in shown]
    fig = make_subplots(rows=len(shown), cols=1, shared_xaxes=True, subplot_titles=titles,
                        vertical_spacing=min(0.08, 0.3 / max(len(shown), 1)))
    for n in range(1, len(shown) + 1):
        fig.update_yaxes(title_text="B/s", tickformat=".3s", rangemode="tozero", row=n, col=1)
    fig.update_xaxes(type="date")
    fig.update_layout(height=140 + 220 * len(shown), margin={"l": 70, "r": 20, "t": 60, "b": 40},
                      legend={"title": {"text": "payload bytes"}, "traceorder": "reversed"}, template="plotly_white",
                      hovermode="x unified")
    # The layout goes through plotly's validation; the traces (up to 10,000 points each) are
    # plain scatter traces written directly, which plotly.js reads as they are: validating
    # them point by point took 30 s for 12 pairs of 10,000 intervals.
    spec = fig.to_plotly_json()
    traces = []
    for n, key in enumerate(shown, 1):
        xs, parts = _steps(pairs[key], interval)
        axis = "" if n == 1 else str(n)
        for field, label, colour in STACK:
            ys = parts[field]
            traces.append({
                "type": "scatter", "x": xs, "y": [b / interval for b in ys], "customdata": ys,
                "name": label, "legendgroup": label, "showlegend": n == 1, "stackgroup": f"pair{n}",
                "mode": "lines", "line": {"shape": "hv", "width": 0.5, "color": colour}, "fillcolor": colour,
                "meta": [*key, field], "xaxis": f"x{axis}", "yaxis": f"y{axis}",
                "hovertemplate": "%{x}<br>" + label + ": %{y:.4s}B/s (%{customdata:,} B)<extra></extra>",
            })
    spec["data"] = traces
    # The library is inlined, before the chart: the page fetches nothing.
    div = pio.to_html(spec, validate=False, full_html=False, include_plotlyjs=False, div_id="series-chart",
                      config={"displaylogo": False, "responsive": True})
    return f"<script type=\"text/javascript\">{_plotlyjs()}</script>\n{div}"


@cache
def _plotlyjs() -> str:
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


def _steps(rows: list[dict[str, Any]], interval: float) -> tuple[list[float], dict[str, list[int]]]:
    """One (edge, class)'s rows as a step line: each interval's bytes from its start, and 0
    from the end of an interval not followed by the next one (an interval without a row
    carried nothing). Times are epoch milliseconds, which a plotly date axis reads as UTC."""
    rows = sorted(rows, key=lambda x: x["t"])
    xs: list[float] = []
    parts: dict[str, list[int]] = {f: [] for f, _, _ in STACK}
    columns = list(parts.items())
    for i, x in enumerate(rows):
        t = float(x["t"])
        xs.append(t * 1000.0)
        for f, col in columns:
            col.append(_int(x.get(f)))
        nxt = rows[i + 1]["t"] if i + 1 < len(rows) else None
        if nxt is None or float(nxt) - t > interval * 1.5:
            xs.append((t + interval) * 1000.0)
            for _, col in columns:
                col.append(0)
    return xs, parts


def _int(v: Any) -> int:
    """A byte count as an integer (anything else in a damaged result: 0)."""
    if type(v) is int:
        return v
    return int(v) if isinstance(v, float) and math.isfinite(v) else 0


def _top_duplicates(r: dict[str, Any]) -> str:
    dups = [d for d in _list(r, "top_duplicates") if isinstance(d, dict)]
    if not dups:
        return ""
    inputs = [i for i in _list(r, "inputs") if isinstance(i, dict)]
    out = [f"<h2>Top duplicated payloads ({len(dups)})</h2>"]
    for rank, d in enumerate(dups, 1):
        sends = [s for s in d.get("sends") or [] if isinstance(s, dict)] if isinstance(d.get("sends"), list) else []
        total = d.get("sends_total", len(sends))
        listed = f" (first {len(sends)} listed)" if is_number(total) and total != len(sends) else ""
        out.append(
            f"<div class=\"dup\" data-digest=\"{_attr(d.get('digest'))}\">"
            f"<h3>{rank}. <span data-key=\"size\" data-value=\"{_attr(d.get('size'))}\">{_e(fmt_bytes(d.get('size')))}</span>, "
            f"sent <span data-key=\"sends_total\" data-value=\"{_attr(total)}\">{_e(fmt_count(total))}</span> times{_e(listed)}, "
            f"repeats <span data-key=\"duplicate_bytes\" data-value=\"{_attr(d.get('duplicate_bytes'))}\">"
            f"{_e(fmt_bytes(d.get('duplicate_bytes')))}</span></h3>"
            f"<p class=\"dim\">digest <code>{_e(d.get('digest'))}</code></p>"
        )
        if sends:
            out.append("<table class=\"sends\"><thead><tr><th class=\"n\">#</th><th>Time (UTC)</th><th>Src → dst</th>"
                       "<th class=\"n\">Offset</th><th>Via</th><th class=\"n\">Frames</th><th>Input</th>"
                       "<th>Share and file</th></tr></thead><tbody>")
            for n, s in enumerate(sends, 1):
                frames = s.get("frames") if isinstance(s.get("frames"), list) else []
                frame_text = "–".join(str(f) for f in frames[:2]) if frames else DASH
                if is_number(s.get("header_frame")):
                    frame_text += f" (header {s['header_frame']})"
                file_idx = s.get("file")
                inp = inputs[file_idx].get("path") if isinstance(file_idx, int) and 0 <= file_idx < len(inputs) else file_idx
                where = " ".join(str(x) for x in (s.get("share"), s.get("file_name")) if x)
                out.append(
                    f"<tr><td class=\"n dim\">{n}</td><td>{_e(_utc(s.get('time')) if is_number(s.get('time')) else DASH)}</td>"
                    f"<td>{_e(s.get('src_node', s.get('src')))} ({_e(s.get('src'))}) → {_e(s.get('dst_node', s.get('dst')))} "
                    f"({_e(s.get('dst'))})</td>{_num(s.get('offset'), fmt_count)}<td>{_e(s.get('transport'))}</td>"
                    f"<td class=\"n\">{_e(frame_text)}</td><td>{_e(inp)}</td><td>{_e(where or DASH)}</td></tr>"
                )
            out.append("</tbody></table>")
        for idx, filt in filters_by_input(sends).items():
            label = inputs[idx].get("path") if 0 <= idx < len(inputs) else f"input {idx}"
            out.append(f"<p>Wireshark ({_e(label)}): <code class=\"filter\">{_e(filt)}</code></p>")
        out.append("</div>")
    return "\n".join(out)


def _accounting(r: dict[str, Any]) -> str:
    acc = section(r, "accounting")
    if not acc:
        return ""
    cats = acc.get("categories") if isinstance(acc.get("categories"), dict) else {}
    total = acc.get("total_bytes")
    whole = total if is_number(total) else acc.get("input_bytes")
    out = ["<h2>Byte accounting <span class=\"dim\">(every input byte in one category)</span></h2>",
           "<table id=\"accounting\"><thead><tr><th>Category</th><th class=\"n\">Bytes</th><th class=\"n\"></th>"
           "<th class=\"n\">Share</th><th>Meaning</th></tr></thead><tbody>"]
    for name, v in sorted(cats.items(), key=lambda kv: (-(kv[1] if is_number(kv[1]) else 0), kv[0])):
        out.append(f"<tr data-category=\"{_attr(name)}\"><td>{_e(name)}</td>{_num(v, fmt_count)}"
                   f"<td class=\"n dim\">{_e(fmt_bytes(v))}</td><td class=\"n\">{_e(fmt_percent(v, whole))}</td>"
                   f"<td class=\"dim\">{_e(category_description(str(name)))}</td></tr>")
    rec = acc.get("reconciled")
    status = ("<span class=\"ok\">reconciled</span>" if rec is True
              else "<span class=\"bad\">does NOT reconcile</span>" if rec is False else "")
    out.append(f"<tr class=\"total\" data-total=\"1\"><td>total</td>{_num(total, fmt_count, 'total_bytes')}"
               f"<td class=\"n\">{_e(fmt_bytes(total))}</td><td></td><td>{status}</td></tr>")
    out.append(f"<tr data-input=\"1\"><td>input files</td>{_num(acc.get('input_bytes'), fmt_count, 'input_bytes')}"
               f"<td class=\"n\">{_e(fmt_bytes(acc.get('input_bytes')))}</td><td></td><td></td></tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _warnings(result: Any) -> str:
    lines = findings(result)
    items = "".join(f"<li>{_e(x)}</li>" for x in lines) or "<li class=\"dim\">none</li>"
    return f"<h2>Warnings</h2>\n<ul id=\"warnings\" class=\"warnings\">{items}</ul>"


# ---------------------------------------------------------------------------- helpers


def _e(v: Any) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _attr(v: Any) -> str:
    """A figure as an attribute value: integers exactly, floats in their shortest exact
    form, null as empty."""
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return _e(v)


def _num(v: Any, fmt: Any, key: str | None = None) -> str:
    k = f" data-key=\"{_e(key)}\"" if key else ""
    return f"<td class=\"n\"{k} data-value=\"{_attr(v)}\">{_e(fmt(v))}</td>"


def _list(r: Any, key: str) -> list[Any]:
    v = r.get(key) if isinstance(r, dict) else None
    return v if isinstance(v, list) else []


def _edges_of(r: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in _list(r, "edges") if isinstance(e, dict)]


def _edge_name(e: dict[str, Any]) -> str:
    return f"{e.get('src', DASH)} → {e.get('dst', DASH)}"


def _edge_attrs(e: dict[str, Any]) -> str:
    return (f"data-src=\"{_attr(e.get('src'))}\" data-dst=\"{_attr(e.get('dst'))}\" "
            f"data-class=\"{_attr(e.get('class'))}\"")


def _decided_by(d: Any) -> str:
    if not isinstance(d, dict):
        return DASH
    return " / ".join(fmt_bytes(d.get(k)) for k in ("inference", "rule", "forwarded"))


def _utc(ts: Any) -> str:
    try:
        return datetime.fromtimestamp(float(ts), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ts)
