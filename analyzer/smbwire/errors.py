"""Error kinds of the Python face, split by who can fix them.

The CLI maps them to exit codes: a `UserError` (the user can fix it: wrong path, bad topology
file, not a capture) is one line on stderr and exit 2; anything else is a bug or a broken
installation and exits 70 (EX_SOFTWARE, sysexits.h). A `ToolFailure` (an outside program smbwire
runs, tshark for `verify`, failed every time it was run) names the program and exits 69
(EX_UNAVAILABLE).
"""

from __future__ import annotations

#: Exit status after Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


def error_line(message: str) -> str:
    """The one line every error is on stderr (also `__main__`'s, before the CLI is loaded).
    A path or name in it is shown, not acted on (`units.printable`: no terminal sequence, and
    a newline in it stays on the line as an escape)."""
    from .units import printable

    return f"smbwire: error: {printable(message)}"


def warning_line(message: str) -> str:
    """A warning's one line on stderr (shown like `error_line`'s message)."""
    from .units import printable

    return f"smbwire: warning: {printable(message)}"


class SmbwireError(Exception):
    """Base of every error smbwire raises on purpose."""


class UserError(SmbwireError):
    """Something the user can fix; the message is one line that says what and where."""


class TopologyError(UserError):
    """The topology file is unreadable or invalid: `"<file>: <line or key>: <message>"`."""


class InputError(UserError):
    """A capture file is missing, unreadable, empty or not a capture."""


class ToolFailure(SmbwireError):
    """An outside program smbwire runs (tshark, for `verify`) failed each time it was run; the
    message names it, the input and its last error line."""


class EngineUnavailable(SmbwireError):
    """The Rust extension `smbwire._core` is not built or does not load."""
