"""CSV views of the result (docs/csv.md): the engine's time series (`--csv OUT`, one row per
interval, edge and class) and its edge table (`--edges-csv OUT`, one row per edge and class).

Both are the result's own figures, column for column: nothing is computed here but the
interval's start written as UTC text beside its epoch seconds. RFC 4180 CSV (comma, CRLF line
ends, a header line); a missing number is an empty cell.
"""

from __future__ import annotations

import csv
import io
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

from .jsonout import write_text

#: The figures of an edge entry and of a series row (docs/json-schema.md, `edges`), in order.
FIGURES = (
    "payload_bytes", "nontrivial_bytes", "unique_bytes", "per_copy_duplicate_bytes",
    "repeated_content_bytes", "trivial_bytes", "sends",
)

SERIES_COLUMNS = ("t", "time_utc", "interval_seconds", "src", "dst", "class", *FIGURES)

EDGE_COLUMNS = (
    "src", "dst", "class", *FIGURES, "dup_ratio",
    "decided_by_inference", "decided_by_rule", "decided_by_forwarded",
)


def utc(t: Any) -> str:
    """Epoch seconds as ISO 8601 UTC with microseconds (`2025-01-30T12:00:00.000000Z`)."""
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return ""
    try:
        return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    except (OverflowError, OSError, ValueError):
        return ""


def series_rows(result: Any) -> list[list[Any]]:
    """The series' rows as CSV cells, in the result's order."""
    series = result.get("series") if isinstance(result, dict) else None
    if not isinstance(series, dict):
        return []
    interval = series.get("interval_seconds")
    out = []
    rows = series.get("rows")
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        out.append([row.get("t"), utc(row.get("t")), interval, row.get("src"), row.get("dst"),
                    row.get("class"), *(row.get(k) for k in FIGURES)])
    return out


def edge_rows(result: Any) -> list[list[Any]]:
    """The edge table as CSV cells, in the result's order (largest payload first)."""
    edges = result.get("edges") if isinstance(result, dict) else None
    out = []
    for e in edges if isinstance(edges, list) else []:
        if not isinstance(e, dict):
            continue
        decided = e.get("decided_by") if isinstance(e.get("decided_by"), dict) else {}
        out.append([e.get("src"), e.get("dst"), e.get("class"), *(e.get(k) for k in FIGURES),
                    e.get("dup_ratio"), decided.get("inference"), decided.get("rule"), decided.get("forwarded")])
    return out


def to_csv(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    w.writerow(header)
    for r in rows:
        w.writerow(["" if v is None else _cell(v) for v in r])
    return buf.getvalue()


def _cell(v: Any) -> Any:
    # Floats as Python prints them (shortest exact form), integers as they are.
    return repr(v) if isinstance(v, float) else v


def write_series_csv(result: Any, out: str) -> None:
    write_text(to_csv(SERIES_COLUMNS, series_rows(result)), out)


def write_edges_csv(result: Any, out: str) -> None:
    write_text(to_csv(EDGE_COLUMNS, edge_rows(result)), out)
