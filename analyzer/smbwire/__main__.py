"""`python -m smbwire` = the `smbwire` command.

`main` is also the console script's entry point: it imports the CLI inside the same Ctrl-C
handling as the commands, so an interrupt while the modules load (the first ~0.1 s) ends the
process with the one-line message and exit status 130, not a traceback. Nothing of ours is
imported before that handling (`errors` only in it: an interrupt while that module loaded at
the top here was a traceback through it)."""

import sys


def main() -> None:
    # No cyclic collection while the modules load (they make tens of thousands of objects
    # and no garbage), and what they made is left out of later collections (`gc.freeze`):
    # a few ms of every run's start and end, which no second thread shortens.
    import gc

    gc.disable()
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        from .errors import EXIT_INTERRUPTED, error_line

        sys.stderr.write(error_line("interrupted") + "\n")
        sys.exit(EXIT_INTERRUPTED)
    finally:
        gc.freeze()
        gc.enable()
    cli_main()


if __name__ == "__main__":
    main()
