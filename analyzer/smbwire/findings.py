"""What the user must know about the quality of an analysis, derived from the result dict.

The engine's own `warnings` come first, verbatim; then what the counters say (unless an
engine warning already covers that topic): bytes that were
not analysed (encrypted, compressed, gaps, unparsed), bytes that were removed before hashing
(mirror-port duplicates, retransmissions), anomalies, and defects of the result itself
(unknown schema, missing sections, accounting that does not reconcile). Shared by the
terminal report and the live view.
"""

from __future__ import annotations

from typing import Any

from .units import fmt_bytes, fmt_count, is_number

SCHEMA = "smbwire/1"

#: Sections a complete "smbwire/1" result has; a missing one is reported, not fatal.
EXPECTED_SECTIONS = (
    "schema", "inputs", "capture", "edges", "totals", "nodes", "top_duplicates",
    "accounting", "anomalies", "tcp", "smb2", "warnings", "analysis",
)


def section(result: Any, name: str) -> dict[str, Any]:
    """`result[name]` if it is an object, else an empty one."""
    v = result.get(name) if isinstance(result, dict) else None
    return v if isinstance(v, dict) else {}


def _num(d: dict[str, Any], key: str) -> float:
    v = d.get(key)
    return v if is_number(v) else 0


def findings(result: Any) -> list[str]:
    if not isinstance(result, dict):
        return [f"the result is not an object ({type(result).__name__}): nothing to show"]
    out: list[str] = []
    engine = result.get("warnings")
    engine = [str(w) for w in engine] if isinstance(engine, list) else []
    out += engine

    def covered(topic: str) -> bool:
        # The engine already warns about some of these (pipeline.rs); say it once.
        return any(topic in w.lower() for w in engine)

    schema = result.get("schema")
    if schema != SCHEMA:
        out.append(f"result schema is {schema!r}, this smbwire renders {SCHEMA!r}: figures may be missing")
    missing = [s for s in EXPECTED_SECTIONS if s not in result]
    if missing:
        out.append(f"result has no {', '.join(repr(m) for m in missing)}: not shown")

    acc = section(result, "accounting")
    cats = acc.get("categories") if isinstance(acc.get("categories"), dict) else {}
    cat = lambda name: cats.get(name) if is_number(cats.get(name)) else 0  # noqa: E731
    tcp = section(result, "tcp")
    smb2 = section(result, "smb2")

    if acc.get("reconciled") is False and not covered("reconcile"):
        out.append(
            f"byte accounting does not reconcile: {fmt_count(acc.get('total_bytes'))} bytes accounted "
            f"for {fmt_count(acc.get('input_bytes'))} input bytes (a bug: please report it)"
        )
    gaps, gap_bytes = _num(tcp, "gaps"), _num(tcp, "gap_bytes")
    if (gaps or gap_bytes) and not covered("gap"):
        out.append(
            f"{fmt_count(gaps)} TCP gaps ({fmt_bytes(gap_bytes)} missing from the capture): "
            "SMB2 messages across a gap are not hashed"
        )
    enc_msgs, enc_bytes = _num(smb2, "encrypted_messages"), cat("smb_encrypted")
    if (enc_msgs or enc_bytes) and not covered("encrypt"):
        out.append(
            f"{fmt_bytes(enc_bytes)} in {fmt_count(enc_msgs)} encrypted SMB3 messages not analysed "
            "(payload behind a TRANSFORM header cannot be hashed)"
        )
    cmp_msgs, cmp_bytes = _num(smb2, "compressed_messages"), cat("smb_compressed")
    if (cmp_msgs or cmp_bytes) and not covered("compress"):
        out.append(
            f"{fmt_bytes(cmp_bytes)} in {fmt_count(cmp_msgs)} compressed SMB3 messages not analysed"
        )
    incomplete = _num(smb2, "payload_incomplete")
    if incomplete:
        out.append(f"{fmt_count(incomplete)} WRITE/READ payloads incomplete in the capture: not hashed")
    mirror = _num(tcp, "mirror_duplicate_frames")
    if mirror and not covered("mirror"):
        size = f" ({fmt_bytes(cat('mirror_duplicate'))})" if cat("mirror_duplicate") else ""
        out.append(
            f"{fmt_count(mirror)} mirror-duplicate frames removed{size}: "
            "the capture saw them twice; they are not counted as duplicate payload"
        )
    rtx_bytes, rtx_segs = _num(tcp, "retransmitted_bytes"), _num(tcp, "retransmitted_segments")
    if (rtx_bytes or rtx_segs) and not covered("retransmit"):
        out.append(
            f"{fmt_bytes(rtx_bytes)} in {fmt_count(rtx_segs)} retransmitted TCP segments removed "
            "before hashing"
        )
    for name, what in (
        ("smb_unparsed", "in SMB streams could not be framed (skipped until resynchronised)"),
        ("tcp_undelivered", "of TCP payload never became contiguous (out of order, not delivered)"),
        ("malformed", "in frames that could not be decoded"),
        ("truncated_tail", "at the end of a capture file do not form a whole record (truncated file?)"),
    ):
        if cat(name):
            out.append(f"{fmt_bytes(cat(name))} {what}")

    index = section(result, "index")
    early = _num(index, "early_expiries")
    if early:
        out.append(
            f"{fmt_count(early)} sends left the dedupe index before their window ended (live-block bound "
            f"{fmt_count(index.get('max_live_blocks'))} reached): duplicates of them may be missed"
        )
    other = _num(index, "other_node_lookups")
    if other:
        out.append(
            f"{fmt_count(other)} sends from/to unlisted addresses were lumped into node 'other' "
            "(too many distinct addresses): use a topology file"
        )

    anomalies = result.get("anomalies")
    if isinstance(anomalies, dict) and anomalies:
        total = sum(v for v in anomalies.values() if is_number(v))
        names = ", ".join(
            f"{k} ×{fmt_count(v)}"
            for k, v in sorted(anomalies.items(), key=lambda kv: (-(kv[1] if is_number(kv[1]) else 0), kv[0]))
        )
        if covered("anomal"):
            out.append(f"anomalies by name: {names}")
        else:
            out.append(f"{fmt_count(total)} anomalies (input the decoders refused or did not expect): {names}")

    edges = result.get("edges")
    if isinstance(edges, list) and not edges and "edges" in result:
        out.append("no SMB2 WRITE/READ payload found: nothing to compare")
    return out
