"""Human formatting of byte counts, counts and ratios, and parsing of sizes like `64MiB`.

Formatters accept anything (the result dict comes from an engine that may be newer or
older than this package): a value that is not a number is shown as-is, None as an em dash.
"""

from __future__ import annotations

import math
import re
from typing import Any

DASH = "—"

_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def fmt_bytes(v: Any) -> str:
    """`1536` -> `1.50 KiB`; below 1 KiB exact (`512 B`)."""
    if v is None:
        return DASH
    if not is_number(v):
        return str(v)
    n = float(v)
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < 1024:
        return f"{sign}{int(n) if n == int(n) else n:g} B"
    unit = 0
    while n >= 1024 and unit < len(_BINARY) - 1:
        n /= 1024
        unit += 1
    return f"{sign}{n:.2f} {_BINARY[unit]}"


def fmt_count(v: Any) -> str:
    """Exact integer with thousands separators: `1234567` -> `1,234,567`."""
    if v is None:
        return DASH
    if not is_number(v):
        return str(v)
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.2f}"
    return f"{int(v):,}"


def fmt_counted(v: Any, noun: str, plural: str | None = None) -> str:
    """A count and its noun, singular for exactly one: `1, "frame"` -> `1 frame`, `1234, "frame"` ->
    `1,234 frames` (`plural`: when it is not the noun and an s). Unknown counts take the plural."""
    one = is_number(v) and v == 1
    return f"{fmt_count(v)} {noun if one else (plural or noun + 's')}"


def fmt_ratio(v: Any, suffix: str = "") -> str:
    """Two decimals: `3` -> `3.00`."""
    if v is None:
        return DASH
    if not is_number(v):
        return str(v)
    return f"{float(v):.2f}{suffix}"


#: The amplification's note when no non-trivial payload crossed (its ratio shown as a dash).
NO_PAYLOAD = "no non-trivial payload on any edge: nothing to compare"


def ratio_of(figures: Any, key: str) -> Any:
    """`figures[key]` (an edge's `dup_ratio`, the totals' `amplification`), or None when no
    non-trivial payload crossed (`nontrivial_bytes` 0): the engine's 1.0 there is a
    convention, not a measurement, and is shown as a dash."""
    if not isinstance(figures, dict):
        return None
    if figures.get("nontrivial_bytes") == 0:
        return None
    return figures.get(key)


def fmt_seconds(v: Any) -> str:
    if v is None:
        return DASH
    if not is_number(v):
        return str(v)
    s = float(v)
    if s < 1:
        return f"{s * 1000:.1f} ms"
    if s < 120:
        return f"{int(s)} s" if s.is_integer() else f"{s:.2f} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{int(m)} min {s:.0f} s"
    h, m = divmod(m, 60)
    return f"{int(h)} h {int(m)} min"


def fmt_percent(part: Any, whole: Any) -> str:
    if not (is_number(part) and is_number(whole)) or whole == 0:
        return DASH
    share = 100.0 * part / whole
    if 0 < share < 0.05:
        return "<0.1%"
    return f"{share:.1f}%"


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)(b?)\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_size(text: str) -> int:
    """`4096`, `64k`, `64KiB`, `1.5GB`, `10MiB` -> bytes. `k`/`KiB` are 1024-based, `KB` is
    1000-based (as in IEC 80000-13). Raises ValueError."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a size (examples: 4096, 64KiB, 1GiB)")
    number, prefix, iec, b = m.groups()
    power = _POWERS[prefix.lower()]
    decimal = prefix != "" and iec == "" and b != ""  # "KB", "MB": SI
    value = float(number) * (1000 if decimal else 1024) ** power
    if value != int(value):
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(value)


_EPOCH = re.compile(r"^\s*(\d+)(?:\.(\d{1,9}))?\s*$")
#: The seconds of an ISO 8601 time and their fraction (`12:00:00.123456789`).
_ISO_FRACTION = re.compile(r"(\d{2}:\d{2}:\d{2})[.,](\d+)")


def parse_time(text: str) -> int:
    """A point in time -> ns since the epoch: seconds since the epoch (`1738238400.25`, as
    tshark's frame.time_epoch prints them) or ISO 8601 (`2025-01-30T12:00:00.5Z`,
    `2025-01-30 12:00:00+01:00`; without an offset the time is UTC, as the report prints
    capture times). Raises ValueError."""
    m = _EPOCH.match(text)
    if m:
        whole, frac = m.groups()
        return _in_64_bits(text, int(whole) * 1_000_000_000 + int((frac or "0").ljust(9, "0")))
    from datetime import datetime, timezone

    s = text.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    # Fractions to the nanosecond (Wireshark prints nine digits; datetime keeps six).
    frac_ns = 0
    m = _ISO_FRACTION.search(s)
    if m:
        frac_ns = int(m.group(2)[:9].ljust(9, "0"))
        s = s[:m.start()] + m.group(1) + s[m.end():]
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time (examples: 1738238400.25, 2025-01-30T12:00:00Z)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    delta = dt - datetime(1970, 1, 1, tzinfo=timezone.utc)
    ns = (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000 + frac_ns
    if ns < 0:
        raise ValueError(f"{text!r} is before 1970")
    return _in_64_bits(text, ns)


def _in_64_bits(text: str, ns: int) -> int:
    """Capture times are ns since 1970 in 64 bits: up to 2554-07-21."""
    if ns >= 1 << 64:
        raise ValueError(f"{text!r} is after 2554-07-21 (the last time in 64-bit nanoseconds)")
    return ns


def printable(s: str) -> str:
    """`s` with every character a terminal or page would act on or hide shown as an escape:
    control characters (ESC starts terminal sequences), format characters (right-to-left
    overrides reorder what follows, zero-width ones hide), separators other than space.
    Share and file names come from the wire and paths from the user: `evil\\x1b[2J` is shown,
    not run."""
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else _escape(c) for c in s)


def _escape(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def printable_tree(v: Any, *, skip: tuple[str, ...] = ()) -> Any:
    """A result (or snapshot) with `printable` applied to every string in it, keys too;
    the value itself when nothing needed it (no copy of a clean result). Top-level keys in
    `skip` are left as they are (the time series, whose up to 262,144 rows the terminal
    report and the live view only count: walking them takes about 0.4 s)."""
    if skip and isinstance(v, dict):
        rest_in = {k: x for k, x in v.items() if k not in skip}
        rest = printable_tree(rest_in)
        if rest is rest_in:
            return v
        if len(rest) != len(rest_in):  # two keys the same once shown: order as it comes
            return rest | {k: v[k] for k in skip if k in v}
        out: dict[Any, Any] = {}
        fixed = iter(rest.items())  # in rest_in's order: the result's, less the skipped keys
        for k in v:
            if k in skip:
                out[k] = v[k]
            else:
                k2, x2 = next(fixed)
                out[k2] = x2
        return out
    if isinstance(v, str):
        return printable(v)
    if isinstance(v, dict):
        out: dict[Any, Any] | None = None
        for i, (k, x) in enumerate(v.items()):
            k2, x2 = printable_tree(k), printable_tree(x)
            if out is None and (k2 is not k or x2 is not x):
                out = dict(list(v.items())[:i])
            if out is not None:
                out[k2] = x2
        return v if out is None else out
    if isinstance(v, list):
        lst: list[Any] | None = None
        for i, x in enumerate(v):
            x2 = printable_tree(x)
            if lst is None and x2 is not x:
                lst = v[:i]
            if lst is not None:
                lst.append(x2)
        return v if lst is None else lst
    return v


def tunnel_sentence(result: Any) -> str | None:
    """How the frames arrived when a remote mirror session (ERSPAN, gretap, VXLAN) or another
    tunnel carried them (the JSON's `tunnels`, decided by the engine): one sentence, or None
    when no frame came in a tunnel (a local mirror port, a host capture)."""
    tunnels = result.get("tunnels") if isinstance(result, dict) else None
    if not isinstance(tunnels, dict) or not tunnels:
        return None
    from .tables import tunnel_label

    def kinds(counts: dict, with_bytes: bool) -> list[str]:
        out = []
        for key, c in sorted(counts.items(), key=lambda kv: -(kv[1].get("frames", 0) if isinstance(kv[1], dict) else 0)):
            if not isinstance(c, dict):
                continue
            kind = " inside ".join(tunnel_label(k) for k in reversed(str(key).split("+")))
            out.append(f"{fmt_counted(c.get('frames'), 'frame')} in {kind}"
                       + (f" ({fmt_bytes(c.get('bytes'))} of tunnel headers)" if with_bytes else ""))
        return out

    parts = kinds(tunnels, True)
    if not parts:
        return None
    sentence = "tunnelled: " + "; ".join(parts)
    # Several inputs (captures of several mirror sessions, say): which came how, as the engine
    # counted them per input (`inputs[].tunnels`; absent in results from older ledgers).
    inputs = [i for i in result.get("inputs") or [] if isinstance(i, dict)]
    if len(inputs) > 1 and all(isinstance(i.get("tunnels"), dict) for i in inputs):
        import os.path
        each = [f"{os.path.basename(str(i.get('path')))}: {', '.join(kinds(i['tunnels'], False)) or 'none'}"
                for i in inputs]
        sentence += " (by input: " + "; ".join(each) + ")"
    return sentence
