"""Writing the result dict as JSON (`--json OUT`, `-` = stdout), and any text output."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from .engine import write_output


def dumps(result: Any) -> str:
    """Indented JSON text with a final newline. NaN/Infinity are refused (not JSON)."""
    return json.dumps(result, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(result: Any, out: str, *, stdout: TextIO | None = None) -> None:
    """Write `result` to the file `out` (atomically: a reader never sees half a file) or to
    stdout when `out` is `-`."""
    write_text(dumps(result), out, stdout=stdout)


def write_text(text: str, out: str, *, stdout: TextIO | None = None) -> None:
    """Write `text` to the file `out` or to stdout when `out` is `-` (the CSV and HTML writers
    use it too). A file is written by the engine's one writer (`engine.write_output`):
    atomically, a device or pipe in place. Raises `UserError` with one line."""
    if out == "-":
        stream = stdout if stdout is not None else sys.stdout
        encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("-", "").replace("_", "")
        buffer = getattr(stream, "buffer", None)
        if buffer is not None and not encoding.startswith("utf"):
            # JSON is UTF-8 (RFC 8259), whatever the terminal's locale says.
            stream.flush()
            buffer.write(text.encode("utf-8"))
            buffer.flush()
            return
        stream.write(text)
        stream.flush()
        return
    write_output(out, text.encode("utf-8"))
