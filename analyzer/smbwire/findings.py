"""The Warnings section: the engine's findings as lines (shared by the report and the live view).

The engine decides what is worth a finding and words it (dissectors/src/findings.rs): each
finding in the result's `findings` has a stable `code`, its figures and its `message`. Here
they only become lines, in the engine's order; the `anomalies` finding is followed by its
names and counts. The only things said here are about the result as read: not an object, a
schema this version does not render, sections missing.
"""

from __future__ import annotations

from typing import Any

from .units import fmt_count, is_number

SCHEMA = "smbwire/1"

#: Sections a complete "smbwire/1" result has; a missing one is reported, not fatal.
EXPECTED_SECTIONS = (
    "schema", "inputs", "capture", "edges", "totals", "nodes", "top_duplicates",
    "accounting", "anomalies", "tcp", "smb2", "findings", "warnings", "analysis",
)


def section(result: Any, name: str) -> dict[str, Any]:
    """`result[name]` if it is an object, else an empty one."""
    v = result.get(name) if isinstance(result, dict) else None
    return v if isinstance(v, dict) else {}


def findings(result: Any) -> list[str]:
    """The Warnings lines of a result."""
    if not isinstance(result, dict):
        return [f"the result is not an object ({type(result).__name__}): nothing to show"]
    out: list[str] = []
    records = result.get("findings")
    if isinstance(records, list):
        for f in records:
            if not isinstance(f, dict):
                continue
            out.append(str(f.get("message", f.get("code", ""))))
            names = f.get("names")
            if f.get("code") == "anomalies" and isinstance(names, dict) and names:
                out.append("anomalies by name: " + _by_count(names))
    else:
        # A result without findings (written before they existed): its sentences as they are.
        warnings = result.get("warnings")
        out += [str(w) for w in warnings] if isinstance(warnings, list) else []

    schema = result.get("schema")
    if schema != SCHEMA:
        out.append(f"result schema is {schema!r}, this smbwire renders {SCHEMA!r}: figures may be missing")
    missing = [s for s in EXPECTED_SECTIONS if s not in result]
    if missing:
        out.append(f"result has no {', '.join(repr(m) for m in missing)}: not shown")
    return out


def _by_count(counts: dict[str, Any]) -> str:
    order = sorted(counts.items(), key=lambda kv: (-(kv[1] if is_number(kv[1]) else 0), kv[0]))
    return ", ".join(f"{k} ×{fmt_count(v)}" for k, v in order)
