"""Writing the result dict as JSON (`--json OUT`, `-` = stdout), and any text output atomically."""

from __future__ import annotations

import json
import os
import stat
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
    """Write `text` to the file `out` or to stdout when `out` is `-` (the CSV and HTML writers
    use it too).

    A regular file (new, or replaced: through a symbolic link, its target) is written
    atomically, with the mode a plain open() would give: a reader never sees half a file.
    Anything else that exists (/dev/null, /dev/stdout, a named pipe) is written in place: a
    rename would put a regular file where the device or pipe was (as root, /dev/null)."""
    if out == "-":
        stream = stdout if stdout is not None else sys.stdout
        stream.write(text)
        stream.flush()
        return
    check_writable(out)
    try:
        regular = stat.S_ISREG(os.stat(out).st_mode)
    except FileNotFoundError:
        regular = True
    except OSError as e:
        raise cannot_write(out, e) from None
    if not regular:
        try:
            with open(out, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise cannot_write(out, e) from None
        return
    target = os.path.realpath(out)
    fd, tmp = _create_beside(target, suffix, out)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise cannot_write(out, e) from None


def _create_beside(target: str, suffix: str, out: str) -> tuple[int, str]:
    """A new file in `target`'s directory, opened for writing, with a name no one else has:
    (descriptor, path). Its mode is what open() gives (0666 less the umask). (Not
    tempfile.mkstemp: importing tempfile costs every run start-up time, and its files are
    0600.)"""
    parent = os.path.dirname(target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = os.path.join(parent, f".smbwire-{os.urandom(6).hex()}{suffix}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as e:
            raise cannot_write(out, e) from None
    raise cannot_write(out, f"no free temporary name in {parent}")


def cannot_write(out: str, why: OSError | str) -> UserError:
    """The one-line error for an output that cannot be written."""
    if isinstance(why, OSError):
        why = why.strerror or str(why)
    return UserError(f"{out}: cannot write: {why}")
