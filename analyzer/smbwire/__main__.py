"""`python -m smbwire` = the `smbwire` command.

`main` is also the console script's entry point. An interrupt while the modules load (the
first ~0.1 s) ends the process with the one-line message and exit status 130, not a
traceback, and is never lost: loading this module replaces Python's SIGINT handler (which
raises KeyboardInterrupt wherever the interpreter happens to be) with one that only notes the
signal, and `main` restores it once the CLI is loaded and then acts on a noted one. Raised
during the imports, KeyboardInterrupt came out of whichever frame checked for signals first:
our modules' own first lines (a traceback through them), or a callback of the import system,
where CPython reports it as "Exception ignored" and carries on (the run went to its end with
exit status 0). Nothing of ours but this module and the package's one-line `__init__` loads
before the handler is in place (`errors` only in `main`)."""

# First, before anything else of ours runs: SIGINT noted, not raised. The handler is a
# built-in method (no Python frame to interrupt; a signal handler gets two arguments), and
# `_signal` is the interpreter's built-in module (`signal` loads `enum`, ~10 ms of Python
# code where an interrupt would still raise).
import _signal

_noted: dict = {}
_previous = None
try:
    # Only over Python's own handler: an ignored SIGINT (a background job) stays ignored.
    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _previous = _signal.signal(_signal.SIGINT, _noted.__setitem__)
except ValueError:  # not the main thread (imported by a program, not run): nothing to do
    pass

import sys  # noqa: E402 (after the handler)


def main() -> None:
    try:
        # No cyclic collection while the modules load (they make tens of thousands of
        # objects and no garbage), and what they made is left out of later collections
        # (`gc.freeze`): a few ms of every run's start and end, which no second thread
        # shortens.
        import gc

        gc.disable()
        from .cli import main as cli_main

        gc.freeze()
        gc.enable()
        if _previous is not None:
            _signal.signal(_signal.SIGINT, _previous)
        if _noted:
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        from .errors import EXIT_INTERRUPTED, error_line

        sys.stderr.write(error_line("interrupted") + "\n")
        sys.exit(EXIT_INTERRUPTED)
    cli_main()


if __name__ == "__main__":
    main()
