"""Writing the result dict as JSON (`--json OUT`, `-` = stdout), and any text output atomically."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

from .errors import UserError


def dumps(result: Any) -> str:
    """Indented JSON text with a final newline. NaN/Infinity are refused (not JSON)."""
    return json.dumps(result, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def check_writable(out: str) -> None:
    """Fail early (before a long analysis) if `out` cannot be written."""
    if out == "-":
        return
    if os.path.isdir(out):
        raise UserError(f"{out}: is a directory")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise UserError(f"{out}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(out) and not os.access(out, os.W_OK)):
        raise UserError(f"{out}: permission denied")


def write_json(result: Any, out: str, *, stdout: TextIO | None = None) -> None:
    """Write `result` to the file `out` (atomically: a reader never sees half a file) or to
    stdout when `out` is `-`."""
    write_text(dumps(result), out, stdout=stdout, suffix=".json.tmp")


def write_text(text: str, out: str, *, stdout: TextIO | None = None, suffix: str = ".tmp") -> None:
    """Write `text` to the file `out` (atomically, mode as a plain open() would give) or to
    stdout when `out` is `-` (the CSV and HTML writers use it too)."""
    if out == "-":
        stream = stdout if stdout is not None else sys.stdout
        stream.write(text)
        stream.flush()
        return
    check_writable(out)
    parent = os.path.dirname(os.path.abspath(out))
    try:
        import tempfile  # only here: it costs start-up time (random, shutil)

        fd, tmp = tempfile.mkstemp(prefix=".smbwire-", suffix=suffix, dir=parent)
    except OSError as e:
        raise UserError(f"{out}: cannot write: {e.strerror or e}") from None
    try:
        # mkstemp makes the file 0600; give the result the mode a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise UserError(f"{out}: cannot write: {e.strerror or e}") from None
