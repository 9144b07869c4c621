"""The `smbwire` command. Each command parses options, calls one library function that
returns plain data, and renders it.

Exit codes: 0 done (warnings about a partially analysable capture are in the report),
2 something the user can fix (one line on stderr), 70 an internal error (one line;
`SMBWIRE_DEBUG=1` shows the traceback), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""

from __future__ import annotations

import errno
import math
import os
import sys
from typing import Any

import click

from . import __version__, engine, jsonout
from .errors import EXIT_INTERRUPTED, SmbwireError, ToolFailure, UserError, error_line, warning_line
from .units import fmt_count, fmt_counted, parse_size, parse_time


# rich (the report) is imported only by a command that renders something: `analyze -q --json`
# and `attribute -q` start about 50 ms sooner without it.
def Console(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - stands for rich.console.Console
    from rich.console import Console as RichConsole

    return RichConsole(*args, **kwargs)


def load_topology(path: str) -> Any:
    # Only with --topology: the topology module (dataclasses, inspect) costs start-up time.
    from .topology import load_topology as load

    return load(path)


def render_report(*args: Any, **kwargs: Any) -> None:
    from .report import render_report as render

    render(*args, **kwargs)

EXIT_USER = 2
#: An outside program (tshark) failed each time it was run (EX_UNAVAILABLE, sysexits.h).
EXIT_TOOL = 69
EXIT_INTERNAL = 70


def _fail(message: str) -> None:
    click.echo(error_line(message), err=True)


def _debug() -> bool:
    return os.environ.get("SMBWIRE_DEBUG", "") not in ("", "0")


#: What the report's symbols become on a terminal whose encoding lacks them (an ssh session
#: under `LANG=en_US` in Latin-1, `PYTHONIOENCODING=ascii`, a C locale with coercion off).
_ASCII_FALLBACK = {"→": "->", "·": "|", "÷": "/", "—": "-", "–": "-", "…": "...", "×": "x", "µ": "u",
                   "▁": "_", "▂": ".", "▃": ":", "▄": "-", "▅": "=", "▆": "+", "▇": "*", "█": "#"}


def _ascii_fallback(e: UnicodeError) -> tuple[str, int]:
    """Codec error handler: the report's symbols as ASCII, anything else (a file name from the
    wire) as a backslash escape, so output never fails on the terminal's encoding."""
    if not isinstance(e, UnicodeEncodeError):
        raise e
    text = e.object[e.start:e.end]
    return "".join(_ASCII_FALLBACK.get(c) or c.encode("ascii", "backslashreplace").decode("ascii")
                   for c in text), e.end


def _legible_streams() -> None:
    """Standard output and error in an encoding that is not UTF-8 get `_ascii_fallback` for
    what they cannot encode (it was an internal error: UnicodeEncodeError on the first arrow)."""
    import codecs

    codecs.register_error("smbwire-ascii", _ascii_fallback)
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding.startswith("utf") or not hasattr(stream, "reconfigure"):
            continue
        try:
            stream.reconfigure(errors="smbwire-ascii")
        except (ValueError, OSError):  # a stream that cannot (closed, or replaced by a test)
            pass


class _Cli(click.Group):
    """Turns every failure into one line on stderr and an exit code, in one place."""

    def _command_of(self, argv: Any) -> str:
        """The command a usage error belongs to when click gives no context (an option
        missing its value is refused by the parser before the command's context exists)."""
        for arg in (argv if argv is not None else sys.argv[1:]):
            if arg in self.commands:
                return f"smbwire {arg}"
            if not str(arg).startswith("-"):
                break
        return "smbwire"

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:  # type: ignore[override]
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        _legible_streams()
        previous = _stop_on_sigterm()
        try:
            return self._main(*args, **kwargs)
        finally:
            _restore_sigterm(previous)

    def _main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.NoArgsIsHelpError as e:  # `smbwire` alone: help, not an error
            click.echo(e.ctx.get_help() if e.ctx else str(e), err=True)
            sys.exit(EXIT_USER)
        except click.UsageError as e:
            cmd = e.ctx.command_path if e.ctx else self._command_of(args[0] if args else kwargs.get("args"))
            _fail(f"{e.format_message()} (see '{cmd} --help')")
            sys.exit(EXIT_USER)
        except click.ClickException as e:
            _fail(e.format_message())
            sys.exit(e.exit_code)
        except UserError as e:
            _fail(str(e))
            sys.exit(EXIT_USER)
        except (click.Abort, KeyboardInterrupt):
            if _terminated:
                _fail("terminated")
                sys.exit(EXIT_TERMINATED)
            _fail("interrupted")
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            # The reader of stdout went away (`smbwire analyze ... | head`): not an error of ours.
            _silence_stdout()
            sys.exit(1)
        except OSError as e:
            if e.errno not in _OUTPUT_FULL:
                self._internal(e)
            # A write no file writer caught: the report or JSON on standard output, to a full
            # disk or a device that refuses it (`> /dev/full`).
            where = f"{e.filename}: " if e.filename else "standard output: "
            _silence_stdout()
            _fail(f"{where}cannot write: {e.strerror or e}")
            sys.exit(EXIT_USER)
        except ToolFailure as e:
            _fail(str(e))
            sys.exit(EXIT_TOOL)
        except SmbwireError as e:
            if _debug():
                import traceback

                traceback.print_exc()
            _fail(str(e))
            sys.exit(EXIT_INTERNAL)
        except Exception as e:  # noqa: BLE001 - the last line of defence
            self._internal(e)
        sys.exit(rv if isinstance(rv, int) else 0)

    @staticmethod
    def _internal(e: BaseException) -> None:
        if _debug():
            import traceback

            traceback.print_exception(e)
        _fail(
            f"internal error: {type(e).__name__}: {' '.join(str(e).split())} "
            "(run with SMBWIRE_DEBUG=1 for the traceback; please report it)"
        )
        sys.exit(EXIT_INTERNAL)


#: SIGTERM (a scheduler, `timeout`, `kill`) received: the run stops as on Ctrl-C, the
#: engine removing what it had half written (`outputs::Staged`), and the exit code says so.
_terminated: list[int] = []
EXIT_TERMINATED = 143


def _on_sigterm(signum: int, frame: Any) -> None:
    _terminated.append(signum)
    raise KeyboardInterrupt


def _stop_on_sigterm() -> Any:
    """Make SIGTERM stop the command like Ctrl-C (by default it ended the process on the spot,
    leaving the engine's temporary output files behind). `live` installs its own handler.
    (`_signal`, the built-in module: `signal` loads `enum` and more, see `__main__`.)"""
    import _signal

    try:
        # Only over the default: a SIGTERM the caller chose to ignore stays ignored.
        if _signal.getsignal(_signal.SIGTERM) != _signal.SIG_DFL:
            return None
        return _signal.signal(_signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: leave the process's handling alone
        return None


def _restore_sigterm(previous: Any) -> None:
    if previous is None:
        return
    import _signal

    try:
        _signal.signal(_signal.SIGTERM, previous)
    except ValueError:
        pass


def _silence_stdout() -> None:
    """Standard output cannot take more: what is buffered is dropped (not flushed at exit)."""
    try:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces the stream for the exit
    except OSError:
        pass


#: Errors of a write the user can do something about (disk full, quota, file too large, a
#: read-only file system, an I/O error of the device).
_OUTPUT_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="smbwire", message="%(prog)s %(version)s")
def cli() -> None:
    """Wire analyzer for SMB3 and SMB Direct storage traffic: how many times did the same
    payload cross each node-to-node edge?"""


@cli.command()
def version() -> None:
    """Show the versions of smbwire and of its engine."""
    click.echo(f"smbwire {__version__}")
    ev = engine.engine_version()
    click.echo(f"engine {ev}" if ev is not None else "engine not built (smbwire._core missing)")


class _Time(click.ParamType):
    name = "TIME"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_time(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


class _Size(click.ParamType):
    name = "SIZE"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


class _Finite(click.FloatRange):
    """A float option in a range, refusing `nan` and `inf`: click's FloatRange passes `nan`
    (it compares false with both bounds), and neither can reach the engine's JSON config."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        v = click.types.FloatParamType.convert(self, value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(v, param, ctx)


def _output_options(f: Any) -> Any:
    """--interval, --csv, --edges-csv and --html (analyze, attribute, live)."""
    for opt in reversed((
        # Not given: the engine's default (engine.DEFAULT_INTERVAL_SECONDS, 1 s).
        click.option("--interval", "series_interval", type=_Finite(min=0.000001, max=86400),
                     metavar="SECONDS", help="Interval of the time series (JSON 'series', --csv, --html); default 1."),
        click.option("--csv", "csv_out", metavar="OUT.csv",
                     help="Write the time series as CSV: one row per interval, edge and class (docs/csv.md)."),
        click.option("--edges-csv", "edges_csv_out", metavar="OUT.csv",
                     help="Write the edge table as CSV: one row per edge and class (docs/csv.md)."),
        click.option("--html", "html_out", metavar="OUT.html",
                     help="Write a self-contained HTML report with the charts (works offline)."),
    )):
        f = opt(f)
    return f


# Options several commands share (analyze, attribute, live): one definition each.
_TOPOLOGY = click.option("--topology", "-t", metavar="TOML", help="Topology file: nodes, their addresses, rules (docs/topology.md).")
_ASSUME_MEMBERS = click.option("--assume-members", is_flag=True,
                               help="Without a topology, treat every address as a cluster member (WRITEs between them are replication, READs redirected reads); otherwise only forwarding seen on the wire classifies.")
_WINDOW = click.option("--window", "-w", type=_Finite(min=0, min_open=True), default=engine.DEFAULT_WINDOW_SECONDS,
                       show_default=True, metavar="SECONDS", help="Sliding window within which a repeated block is a duplicate.")
_JSON = click.option("--json", "json_out", metavar="OUT", help="Write the result as JSON to OUT ('-' = stdout; the report then goes to stderr).")
_EVIDENCE = click.option("--evidence", metavar="OUT", help="Write every duplicated payload with the frames of each send (JSON lines; '-' = stdout, the report then goes to stderr).")
_TOP = click.option("--top", type=click.IntRange(min=0), default=engine.DEFAULT_TOP_N, show_default=True,
                    help="How many top duplicated payloads to keep and show (0-10000).")
_MAX_INDEX_MEMORY = click.option("--max-index-memory", type=_Size(), metavar="SIZE",
                                 help="Bound on the dedupe index's memory (e.g. 512MiB): past it the oldest sends leave the window early, and the report says so.")
_MAX_MEMORY = click.option("--max-memory", type=_Size(), metavar="SIZE",
                           help="Memory budget of the analysis (e.g. 1GiB; at least 16MiB): shared out to the dedupe index, reorder buffers, buffered encrypted/compressed messages and flow state, each of which sheds and reports when its share is reached (docs/architecture.md).")
_KEYS = click.option("--keys", metavar="FILE",
                     help="SMB3 session keys (Wireshark smb2_seskey_list lines: SessionId,SessionKey[,S2CKey,C2SKey]); encrypted messages of these sessions are decrypted and analysed (docs/decryption.md).")


def _result_options(f: Any) -> Any:
    """--topology, --assume-members, --window, --json, --evidence and --top (analyze, attribute)."""
    for opt in reversed((_TOPOLOGY, _ASSUME_MEMBERS, _WINDOW, _JSON, _EVIDENCE, _TOP)):
        f = opt(f)
    return f


def _check_outputs(csv_out: str | None, edges_csv_out: str | None, html_out: str | None) -> None:
    """Before a long run: every output can be written (and plotly is there for --html)."""
    for opt, out in (("--csv", csv_out), ("--edges-csv", edges_csv_out), ("--html", html_out)):
        if out == "-":
            raise UserError(f"{opt} needs a file name (standard output is for --json and --evidence)")
        if out is not None:
            engine.check_writable(out)
    if html_out is not None:
        from . import html

        html.check_available()


def _write_outputs(result: dict[str, Any], csv_out: str | None, edges_csv_out: str | None,
                   html_out: str | None) -> None:
    if csv_out is not None or edges_csv_out is not None:
        from . import csvout

        if csv_out is not None:
            csvout.write_series_csv(result, csv_out)
        if edges_csv_out is not None:
            csvout.write_edges_csv(result, edges_csv_out)
    if html_out is not None:
        from . import html

        html.write_html(result, html_out)


@cli.command()
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@_result_options
@click.option("--ledger", metavar="OUT.parquet",
              help="Also write the send ledger (Parquet, docs/ledger.md) for `smbwire attribute`.")
@click.option("--from", "from_ns", type=_Time(), metavar="TIME",
              help="Analyse only frames captured at or after TIME (epoch seconds or ISO 8601; UTC unless an offset is given).")
@click.option("--to", "to_ns", type=_Time(), metavar="TIME", help="Analyse only frames captured before TIME.")
@click.option("--reorder-buffer", type=_Size(), metavar="SIZE",
              help="Out-of-order TCP bytes held per direction before a hole is given up (default 4MiB; 64KiB-4GiB).")
@_output_options
@_MAX_INDEX_MEMORY
@_MAX_MEMORY
@_KEYS
@click.option("--quiet", "-q", is_flag=True, help="No report and no progress bar (errors only); use with --json.")
@click.option("--annotate", metavar="OUT.pcapng",
              help="Also write the input frames as pcapng with a comment on every frame of every send of a duplicated payload.")
@click.option("--threads", type=click.IntRange(1, 256), metavar="N",
              help="Decoding threads, each taking whole connections; one more thread reads and runs dedupe in capture order. The result is the same for any N (default: the CPUs available). With --dask: the shards (tasks; default: the cluster's worker threads).")
@click.option("--dask", "dask_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
              help="Decode and hash on a Dask cluster, one task per shard of the connections, then dedupe here: the same result. "
                   "ADDRESS: a scheduler (tcp://HOST:8786), whose workers run this smbwire and read the FILEs at the same paths; "
                   "without it (or 'local'): a local cluster, one worker process per CPU. Put it after the FILEs (or write --dask=local). Needs pip install 'smbwire[dask]'; not with --keys or '-'.")
@click.option("--work-dir", metavar="DIR",
              help="With --dask: where the tasks write their ledger parts (a run directory, removed afterwards); one directory every worker and this machine reach at the same path. Required with a scheduler ADDRESS (default: a temporary directory).")
@click.option("--dask-timeout", type=_Finite(min=0, min_open=True), default=10.0, show_default=True, metavar="SECONDS",
              help="With --dask ADDRESS: how long to wait for the scheduler to answer and for a worker to join it.")
def analyze(files: tuple[str, ...], topology: str | None, window: float, json_out: str | None,
            evidence: str | None, top: int, ledger: str | None, from_ns: int | None, to_ns: int | None,
            reorder_buffer: int | None, series_interval: float | None, csv_out: str | None, edges_csv_out: str | None,
            html_out: str | None, quiet: bool, assume_members: bool, annotate: str | None,
            max_index_memory: int | None, keys: str | None, max_memory: int | None, threads: int | None,
            dask_address: str | None, work_dir: str | None, dask_timeout: float) -> int:
    """Analyse capture files (pcap/pcapng, also gzip/zstd/xz compressed) together and report
    duplicate payload per edge. FILE '-' reads a capture from standard input
    (`tcpdump -w - | smbwire analyze -`); a FIFO is read as it is written.

    With --dask the work runs on a Dask cluster (README, "Distributed"); the result is the
    same."""
    if dask_address is None:
        if work_dir is not None:
            raise UserError("--work-dir is for --dask (where the tasks write their ledger parts)")
    else:
        from . import cluster

        cluster.check_address(dask_address)
    paths = engine.check_inputs(files)
    topo = load_topology(topology) if topology is not None else None
    if json_out is not None:
        engine.check_writable(json_out)
    _check_outputs(csv_out, edges_csv_out, html_out)
    engine.check_outputs([("--json", json_out), ("--evidence", evidence), ("--csv", csv_out),
                          ("--edges-csv", edges_csv_out), ("--html", html_out), ("--ledger", ledger),
                          ("--annotate", annotate)], [*paths, topology, keys])
    evidence, evidence_to_stdout = _evidence_target(evidence, json_out)
    annotate_evidence = None
    if annotate is not None:
        engine.check_annotate(paths, annotate)
        if evidence is None:
            evidence = annotate_evidence = _evidence_target("-", None)[0]

    report_to_stderr = json_out == "-" or evidence_to_stdout
    show_progress = not quiet and sys.stderr.isatty()
    try:
        if dask_address is not None:
            result = _analyze_dask(paths, dask_address, work_dir, dask_timeout, quiet, show_progress,
                                   topology=topo, window=window, evidence=evidence, top_n=top, ledger=ledger,
                                   from_ns=from_ns, to_ns=to_ns, reorder_buffer=reorder_buffer,
                                   interval=series_interval, assume_members=assume_members,
                                   max_index_memory=max_index_memory, keys=keys, max_memory=max_memory,
                                   shards=threads)
        elif show_progress:
            result = _with_progress(Console(stderr=True), lambda cb: engine.analyze(
                paths, topology=topo, window=window, evidence=evidence, progress=cb, top_n=top, ledger=ledger,
                from_ns=from_ns, to_ns=to_ns, reorder_buffer=reorder_buffer, interval=series_interval,
                assume_members=assume_members, max_index_memory=max_index_memory, keys=keys, max_memory=max_memory,
                threads=threads))
        else:
            result = engine.analyze(paths, topology=topo, window=window, evidence=evidence, top_n=top, ledger=ledger,
                                    from_ns=from_ns, to_ns=to_ns, reorder_buffer=reorder_buffer,
                                    interval=series_interval, assume_members=assume_members,
                                    max_index_memory=max_index_memory, keys=keys, max_memory=max_memory,
                                    threads=threads)
    except BaseException:
        if (evidence_to_stdout or annotate_evidence) and evidence is not None:
            _remove(evidence)
        raise
    for line in engine.skipped_inputs(result, paths):
        click.echo(warning_line(line), err=True)
    if annotate is not None and evidence is not None:
        try:
            stats = engine.annotate(result, evidence, annotate)
        finally:
            if annotate_evidence is not None:
                _remove(annotate_evidence)
        if not quiet:
            click.echo(f"wrote {annotate}: {fmt_counted(stats['frames_written'], 'frame')}, {fmt_count(stats['frames_commented'])} commented "
                       f"({fmt_counted(stats['sends'], 'send')} of duplicated payloads)", err=True)

    if json_out is not None:
        jsonout.write_json(result, json_out)
    _write_outputs(result, csv_out, edges_csv_out, html_out)
    if evidence_to_stdout:
        _copy_to_stdout(evidence)
    if not quiet:
        console = Console(stderr=True) if report_to_stderr else Console()
        render_report(result, console, top=top)
    return 0


def _analyze_dask(paths: list[str], address: str, work_dir: str | None, timeout: float, quiet: bool,
                  show_progress: bool, **options: Any) -> dict[str, Any]:
    from . import cluster

    console = Console(stderr=True) if show_progress else None

    def on_dashboard(link: str) -> None:
        if quiet:
            return
        if console is not None:  # above the progress bar
            console.print(f"smbwire: dask dashboard: {link}", markup=False, highlight=False, soft_wrap=True)
        else:
            click.echo(f"smbwire: dask dashboard: {link}", err=True)

    def run(progress: Any) -> dict[str, Any]:
        return cluster.analyze_dask(paths, address=None if address == "local" else address, work_dir=work_dir,
                                    connect_timeout=timeout, progress=progress, on_dashboard=on_dashboard, **options)

    if console is None:
        return run(None)
    return _with_dask_progress(console, run)


def _with_dask_progress(console: Any, run: Any) -> dict[str, Any]:
    """Tasks done, bytes read by all tasks (every task reads every input), and per worker."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .units import fmt_bytes

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[figures]}"),
                  TimeElapsedColumn(), console=console, transient=True, refresh_per_second=5) as bar:
        tasks = bar.add_task("shards", total=None, figures="starting the cluster")
        read = bar.add_task("read", total=None, figures="")
        rows: dict[str, Any] = {}

        def on_progress(state: dict[str, Any]) -> None:
            n, k = state["shards"], state["shards_done"]
            if state["stage"] == "merge":
                bar.update(tasks, total=n, completed=n, figures=f"{n}/{n} tasks; merging the parts (dedupe in capture order)")
                bar.update(read, total=1, completed=1)
                return
            bar.update(tasks, total=n, completed=k, figures=f"{k}/{n} tasks")
            total, done = state["total_bytes"], state["read_bytes"]
            bar.update(read, total=total or None, completed=done,
                       figures=f"{fmt_bytes(done)} of {fmt_bytes(total)}" if total else "")
            for worker, b in sorted(state["workers"].items()):
                if worker not in rows:
                    rows[worker] = bar.add_task(f"  {worker}", total=None, figures="")
                bar.update(rows[worker], figures=fmt_bytes(b))

        return run(on_progress)


def _evidence_target(evidence: str | None, json_out: str | None) -> tuple[str | None, bool]:
    """Where the engine writes evidence: `-` (stdout) goes through a private temporary file
    (digests and frame numbers only, never payload bytes), copied to stdout after the run."""
    if evidence != "-":
        return evidence, False
    if json_out == "-":
        raise UserError("--json and --evidence cannot both be '-' (standard output)")
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix="smbwire-evidence-", suffix=".jsonl")
    os.close(fd)
    return tmp, True


def _copy_to_stdout(path: str) -> None:
    try:
        with open(path, "rb") as f:
            sys.stdout.flush()
            for chunk in iter(lambda: f.read(1 << 16), b""):
                sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
    finally:
        _remove(path)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


@cli.command()
@click.argument("ledgers", nargs=-1, required=True, metavar="LEDGER...")
@_result_options
@_output_options
@_MAX_INDEX_MEMORY
@_MAX_MEMORY
@click.option("--quiet", "-q", is_flag=True, help="No report (errors only); use with --json.")
def attribute(ledgers: tuple[str, ...], topology: str | None, window: float, json_out: str | None,
              evidence: str | None, top: int, series_interval: float | None, csv_out: str | None,
              edges_csv_out: str | None, html_out: str | None, quiet: bool, assume_members: bool,
              max_index_memory: int | None, max_memory: int | None) -> int:
    """Rerun dedupe and attribution from send ledgers (analyze --ledger), without the captures.

    The result is what `analyze` on the captures would give with these options; several
    ledgers (one per capture) are merged as one analysis of all of them (docs/ledger.md)."""
    topo = load_topology(topology) if topology is not None else None
    if json_out is not None:
        engine.check_writable(json_out)
    _check_outputs(csv_out, edges_csv_out, html_out)
    engine.check_outputs([("--json", json_out), ("--evidence", evidence), ("--csv", csv_out),
                          ("--edges-csv", edges_csv_out), ("--html", html_out)], [*ledgers, topology])
    evidence, evidence_to_stdout = _evidence_target(evidence, json_out)
    try:
        result = engine.attribute(ledgers, topology=topo, window=window, evidence=evidence, top_n=top,
                                  interval=series_interval, assume_members=assume_members,
                                  max_index_memory=max_index_memory, max_memory=max_memory)
    except BaseException:
        if evidence_to_stdout and evidence is not None:
            _remove(evidence)
        raise
    if json_out is not None:
        jsonout.write_json(result, json_out)
    _write_outputs(result, csv_out, edges_csv_out, html_out)
    if evidence_to_stdout:
        _copy_to_stdout(evidence)
    if not quiet:
        console = Console(stderr=True) if json_out == "-" or evidence_to_stdout else Console()
        render_report(result, console, top=top)
    return 0


def _with_progress(console: Any, run: Any) -> dict[str, Any]:
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)

    with Progress(TextColumn("analysing"), BarColumn(), DownloadColumn(binary_units=True),
                  TransferSpeedColumn(), TimeRemainingColumn(), console=console, transient=True,
                  auto_refresh=False) as bar:
        # No refresh thread: the engine holds the GIL while it works, so redraw from the
        # callback it makes every few MiB instead.
        task = bar.add_task("analyse", total=None)

        def on_progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None, refresh=True)

        return run(on_progress)


@cli.command()
@click.option("--interface", "-i", "iface", required=True, metavar="IFACE",
              help="Interface cabled to the switch's mirror (SPAN) port; put in promiscuous mode.")
@_TOPOLOGY
@_ASSUME_MEMBERS
@_WINDOW
@click.option("--duration", "-d", type=_Finite(min=0, min_open=True), metavar="SECONDS",
              help="Stop after this long (default: until Ctrl-C or SIGTERM).")
@click.option("--write", metavar="FILE.pcapng", help="Also keep the captured storage traffic in pcapng files.")
@click.option("--write-size", type=_Size(), metavar="SIZE",
              help="Start a new capture file past this size (FILE-00001.pcapng, …); default: one file.")
@click.option("--write-count", type=click.IntRange(min=1), default=10, show_default=True, metavar="N",
              help="With --write-size: keep only the newest N files.")
@click.option("--json", "json_out", metavar="OUT", help="Write the final result as JSON to OUT.")
@_TOP
@click.option("--require-ebpf", is_flag=True, help="Fail instead of falling back to AF_PACKET.")
@click.option("--plain", is_flag=True, help="One status line per interval instead of the live view (default when stdout is not a terminal).")
@click.option("--refresh", type=_Finite(min=0.05, max=3600), default=1.0, hidden=True,
              help="Seconds between live snapshots (tests).")
@_output_options
@click.option("--backend", type=click.Choice(["auto", "ebpf", "af-packet"]), default=None, hidden=True,
              help="Force a capture backend (tests); also SMBWIRE_LIVE_BACKEND.")
@click.option("--port", "ports", type=click.IntRange(1, 65535), multiple=True, metavar="PORT",
              help="Also capture TCP PORT as storage traffic (SMB or iWARP), besides 445 and 5445 (repeatable).")
@click.option("--hook", type=click.Choice(["auto", "tcx", "xdp"]), default="auto", show_default=True,
              help="Where the eBPF program attaches: TCX (Linux 6.6+) or XDP (5.9+); auto: TCX if the kernel has it, else XDP.")
@click.option("--xdp-drop", is_flag=True,
              help="With --hook xdp: drop storage frames after counting and copying them (a mirror port only: this host never sees them).")
@click.option("--user", "-Z", "user", metavar="NAME",
              help="After setup, also switch to this user (uid, gid, groups), like tcpdump -Z. Capabilities are always dropped.")
@_KEYS
@click.option("--keep-privileges", is_flag=True, hidden=True,
              help="Do not drop capabilities after setup (debugging).")
@click.option("--metrics", "metrics_at", metavar="HOST:PORT",
              help="Serve the live figures for Prometheus at http://HOST:PORT/metrics (docs/live.md).")
@_MAX_INDEX_MEMORY
@_MAX_MEMORY
@click.option("--threads", type=click.IntRange(1, 256), metavar="N",
              help="Decoding threads, each taking whole connections, beside the capture and the ordered stage; the result is the same for any N (default: the CPUs available).")
@click.option("--queues", type=click.IntRange(1, 16), metavar="N",
              help="Capture queues: eBPF ring buffers or AF_PACKET fanout sockets, each taking whole connections, read in capture time order (default: one per decoding thread).")
@click.option("--shed/--no-shed", default=True, show_default=True,
              help="When the capture queues fill up, stop analysing whole connections (counted, and shown as the analysed fraction) instead of letting the queues drop scattered frames (docs/live.md, Shedding).")
@click.option("--ring-size", "ring_bytes", type=_Size(), metavar="SIZE",
              help="Buffer of each capture queue: an eBPF ring buffer (rounded up to a power of two; default 32MiB) or AF_PACKET's 1 MiB blocks (default 64).")
@click.option("--test-frame-delay-us", type=_Finite(0, 1e6), default=None, hidden=True,
              help="Test aid: spend this long on every frame before analysing it (puts the analysis below the capture rate).")
def live(iface: str, topology: str | None, window: float, duration: float | None, write: str | None,
         write_size: int | None, write_count: int, json_out: str | None, top: int, require_ebpf: bool,
         plain: bool, refresh: float, series_interval: float | None, csv_out: str | None, edges_csv_out: str | None,
         html_out: str | None, backend: str | None, ports: tuple[int, ...], hook: str,
         xdp_drop: bool, user: str | None, keep_privileges: bool, assume_members: bool, metrics_at: str | None,
         max_index_memory: int | None, keys: str | None, max_memory: int | None, threads: int | None,
         queues: int | None, shed: bool, ring_bytes: int | None, test_frame_delay_us: float | None) -> int:
    """Capture storage traffic on IFACE and show the duplicate-payload ratio live.

    Ctrl-C, SIGTERM or the end of --duration stops it and prints the same report as
    `analyze`. Needs CAP_BPF, CAP_NET_ADMIN and CAP_NET_RAW (eBPF), or CAP_NET_RAW (AF_PACKET),
    and gives every capability up once the capture is attached, before any packet is parsed."""
    import signal
    import time

    from . import live as live_mod
    from .tui import build_live_view, status_line

    # Everything used after the privilege drop is imported before it: the installation (a
    # venv or pyenv under /root, say) may not be readable by --user, nor by root without
    # CAP_DAC_READ_SEARCH.
    from rich.live import Live

    from . import csvout, report  # noqa: F401  (the final report and outputs)
    import tempfile  # noqa: F401  (jsonout imports it lazily; after the drop it may be unreadable)

    if html_out is not None:
        from . import html

        html.preload()

    if write_size is not None and write is None:
        raise UserError("--write-size is for --write FILE.pcapng (when to start a new capture file)")
    topo = load_topology(topology) if topology is not None else None
    if json_out is not None:
        engine.check_writable(json_out)
    if write is not None:
        engine.check_writable(write)
    _check_outputs(csv_out, edges_csv_out, html_out)
    engine.check_outputs([("--json", json_out), ("--write", write), ("--csv", csv_out),
                          ("--edges-csv", edges_csv_out), ("--html", html_out)], [topology, keys])
    # Listening before the capture starts (and before the privilege drop): a port in use is
    # one line, not a capture that runs without its exporter.
    exporter = None
    if metrics_at is not None:
        from .metrics import MetricsServer

        exporter = MetricsServer(metrics_at)
    run = live_mod.start(iface, topology=topo, window=window, top_n=top, max_index_memory=max_index_memory, write=write,
                         write_size=write_size or 0, write_count=write_count, require_ebpf=require_ebpf,
                         backend=backend, interval=refresh, series_interval=series_interval, tcp_ports=list(ports) or None, hook=hook,
                         xdp_drop=xdp_drop, drop_privileges=not keep_privileges, user=user,
                         assume_members=assume_members, keys=keys, max_memory=max_memory, threads=threads,
                         queues=queues, shed=shed, ring_bytes=ring_bytes, test_frame_delay_us=test_frame_delay_us)
    for opt, out_path in (("--json", json_out), ("--csv", csv_out), ("--edges-csv", edges_csv_out),
                          ("--html", html_out)):
        if out_path is None or out_path == "-":
            continue
        # The result is written after the privilege drop, with the rights left (another
        # user, or root without CAP_DAC_OVERRIDE): check those now, not with the result in hand.
        parent = os.path.dirname(os.path.abspath(out_path))
        if not os.access(parent, os.W_OK | os.X_OK) or (os.path.exists(out_path) and not os.access(out_path, os.W_OK)):
            run.stop()
            who = user or "root without capabilities"
            raise UserError(f"{opt} {out_path}: not writable by {who} once privileges are dropped "
                            f"(the result is written after the drop); choose a directory {who} may write")
    if run.fallback_reason:
        click.echo(f"smbwire: eBPF not used ({run.fallback_reason}); capturing with AF_PACKET", err=True)

    stopping: dict[str, Any] = {"why": None, "signals": 0}

    def on_stop(signum: int, frame: Any) -> None:
        # No exception: the loop sees the flag within one tick (0.25 s) and stops cleanly.
        stopping["signals"] += 1
        if stopping["why"] is None:
            stopping["why"] = signal.Signals(signum).name

    stop_signals = (signal.SIGINT, signal.SIGTERM)
    for s in stop_signals:
        signal.signal(s, on_stop)
    tui = not plain and sys.stdout.isatty()
    deadline = None if duration is None else time.monotonic() + duration
    out = Console()
    latest: dict[str, Any] | None = None
    try:
        if tui:
            with Live(build_live_view(None, out.width, out.height), console=out, screen=True,
                      auto_refresh=False, redirect_stdout=False, redirect_stderr=False) as view:
                while not _live_should_stop(stopping, deadline, run):
                    snap = run.poll(_live_wait(deadline))
                    if snap is not None:
                        latest = snap
                        if exporter is not None:
                            exporter.update(snap)
                    # Redraw on every tick (also picks up a resized terminal).
                    view.update(build_live_view(latest, out.width, out.height), refresh=True)
        else:
            hook_note = f" at {run.hook}" if run.hook else ""
            click.echo(f"smbwire: capturing on {iface} with {run.backend}{hook_note}", err=True)
            while not _live_should_stop(stopping, deadline, run):
                snap = run.poll(_live_wait(deadline))
                if snap is not None:
                    latest = snap
                    if exporter is not None:
                        exporter.update(snap)
                    click.echo(status_line(snap))
    except KeyboardInterrupt:  # raised by code that was not ours (a library) before the flag
        stopping["why"] = "SIGINT"
    # Stopping: the drain, the JSON and the final report are not interrupted by a second
    # Ctrl-C or SIGTERM; SIGKILL is the way to abandon them. Ignored (not our handler, not the
    # default) until the process ends: Python puts the default action back at exit only for
    # signals it was handling, and a Ctrl-C then would kill it with the report half written.
    for s in stop_signals:
        signal.signal(s, signal.SIG_IGN)
    result = run.stop()
    if exporter is not None:
        exporter.update(result)
    if json_out is not None:
        jsonout.write_json(result, json_out)
    _write_outputs(result, csv_out, edges_csv_out, html_out)
    render_report(result, out if not tui else Console(), top=top)
    errors = (result.get("live") or {}).get("errors") or []
    for e in errors:
        _fail(str(e))
    return 1 if errors else 0


def _live_should_stop(stopping: dict[str, Any], deadline: float | None, run: Any) -> bool:
    import time

    if stopping["why"] is not None or run.finished:
        return True
    return deadline is not None and time.monotonic() >= deadline


def _live_wait(deadline: float | None) -> float:
    import time

    # Short waits: signals are handled between them.
    if deadline is None:
        return 0.25
    return max(0.0, min(0.25, deadline - time.monotonic()))


class _SynthCommand(click.Command):
    """`synth --help` lists the scenarios, from the synthesizer itself (loaded only for help)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        try:
            rows = [(s["name"], s["description"]) for s in engine.synth_scenarios()]
        except SmbwireError:
            rows = []
        if rows:
            with formatter.section("Scenarios"):
                formatter.write_dl(rows)
        super().format_epilog(ctx, formatter)


@cli.command(cls=_SynthCommand)
@click.argument("scenario")
@click.option("-o", "--output", "out", required=True, metavar="FILE",
              help="The capture to write: pcapng when FILE ends in .pcapng, else pcap (nanosecond).")
@click.option("--bytes", "nbytes", type=_Size(), metavar="N", help="Payload bytes the scenario writes (e.g. 64MiB).")
@click.option("--io-size", type=_Size(), metavar="N", help="Size of each WRITE/READ (e.g. 1MiB).")
@click.option("--mirror-dup", is_flag=True, help="Emit every frame twice, as a mirror port that sees both directions.")
@click.option("--retransmit", type=_Finite(0, 1), metavar="P", help="Probability that a segment is retransmitted.")
@click.option("--reorder", type=_Finite(0, 1), metavar="P", help="Probability that a segment is reordered.")
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), help="Random seed, 0 to 2^64-1 (same seed, same capture).")
@click.option("--zero-fill", type=_Finite(0, 1), metavar="P",
              help="Fraction of 4 KiB data blocks that are all zeros (compressible).")
@click.option("--transport", metavar="NAME", help="Transport the scenario uses: tcp, rocev2, rocev1, infiniband (ERF records) or iwarp.")
@click.option("--topology-out", metavar="TOML", help="Write the scenario's topology file here.")
@click.option("--truth-out", metavar="JSON", help="Write the ground truth (expected figures) here.")
@click.option("--compression", metavar="ALG",
              help="SMB 3.1.1 compression of WRITE requests and READ responses: none, lznt1, lz77, "
                   "lz77huffman or chained (Pattern_V1 + LZ77); implies dialect 3.1.1.")
@click.option("--encap", metavar="KIND",
              help="Deliver the frames as a remote mirror session does: gretap, erspan1, erspan2, erspan3 "
                   "(GRE), vxlan (UDP 4789) or geneve (UDP 6081); none (default) is a local mirror port.")
@click.option("--vlan", metavar="KIND",
              help="Deliver the frames tagged, as a mirror port on a trunk does: dot1q (VLAN 100, priority 3, "
                   "as SMB Direct over RoCE runs) or qinq (an 802.1ad service tag, VLAN 200, around it); "
                   "none (default) is untagged.")
@click.option("--ipv6", is_flag=True, help="IPv6 (2001:2::1 and ::2, RFC 5180's benchmarking prefix) in place of IPv4.")
def synth(scenario: str, out: str, nbytes: int | None, io_size: int | None, mirror_dup: bool,
          retransmit: float | None, reorder: float | None, seed: int | None, zero_fill: float | None,
          transport: str | None, topology_out: str | None, truth_out: str | None,
          compression: str | None, encap: str | None, vlan: str | None, ipv6: bool) -> int:
    """Generate a capture of SCENARIO with known duplicate figures."""
    for path in (topology_out, truth_out):
        if path is not None:
            engine.check_writable(path)
    engine.check_outputs([("--output", out), ("--topology-out", topology_out), ("--truth-out", truth_out)], [])
    spec: dict[str, Any] = {"scenario": scenario, "mirror_dup": mirror_dup}
    if ipv6:
        spec["ipv6"] = True
    # Options not given are left out: the synthesizer's defaults apply.
    for key, value in (("bytes", nbytes), ("io_size", io_size), ("retransmit", retransmit),
                       ("reorder", reorder), ("seed", seed), ("zero_fill", zero_fill),
                       ("transport", transport), ("encap", encap), ("vlan", vlan)):
        if value is not None:
            spec[key] = value
    if compression is not None:
        # The engine checks the name; compression exists from SMB 3.1.1 on.
        spec["compression"] = compression
        if compression != "none":
            spec["dialect"] = "3.1.1"
    truth = engine.synth(spec, out)
    if truth_out is not None:
        jsonout.write_json(truth, truth_out)
    if topology_out is not None:
        if "topology" not in truth:
            raise SmbwireError("the synthesizer returned no 'topology' for this scenario")
        from .topology import Topology

        text = Topology.from_config(truth["topology"], source="synthesizer topology").to_toml()
        jsonout.write_text(text, topology_out)
    click.echo(f"wrote {out}", err=True)
    return 0


@cli.command()
@click.argument("evidence", metavar="EVIDENCE")
@click.argument("captures", nargs=-1, required=True, metavar="CAPTURE...")
@click.option("--all", "all_rows", is_flag=True, help="List every send (default: every failure and the first 50 passes).")
def verify(evidence: str, captures: tuple[str, ...], all_rows: bool) -> int:
    """Re-dissect every send named in an EVIDENCE file (analyze --evidence) with Wireshark's
    dissectors (tshark, through pyshark) and check its command, file, offset, length and
    frames. CAPTURE...: the inputs of that analysis, in the same order. Exit 1 on a mismatch."""
    from . import verify as verify_mod

    try:
        import pyshark  # noqa: F401
        from pyshark.tshark.tshark import TSharkNotFoundException, get_process_path
    except ImportError:
        raise UserError("verify needs pyshark and tshark: pip install 'smbwire[verify]'") from None
    try:
        get_process_path()
    except TSharkNotFoundException:
        raise UserError("verify needs tshark (Wireshark's command line) on PATH: apt install tshark, "
                        "or put the directory holding it on PATH") from None
    for c in captures:
        if not os.path.isfile(c):
            raise UserError(f"{c}: not a capture file")
    checks = verify_mod.verify(evidence, list(captures))
    verify_mod.render(checks, Console(), all_rows=all_rows)
    return 1 if any(not c.ok for c in checks) else 0


def main() -> None:
    """The command, once its modules are loaded (the entry point is `smbwire.__main__:main`)."""
    cli(prog_name="smbwire")


if __name__ == "__main__":
    main()
