"""Typed wrapper around the Rust engine `smbwire._core`.

The engine speaks JSON strings; this module speaks Python: it checks the inputs the user can
get wrong before the engine starts (so the error is one clear line, and comes before a long
run), builds the config JSON, and turns the engine's `ValueError` into `InputError`.
Importing this module does not load `_core`; the first call does.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .errors import EngineUnavailable, InputError, SmbwireError, UserError

if TYPE_CHECKING:
    from .topology import Topology

#: `progress(done_bytes, total_bytes)`, called by the engine every few MB.
ProgressFn = Callable[[int, int], None]

DEFAULT_WINDOW_SECONDS = 60.0
DEFAULT_TOP_N = 10
#: The result's `series` interval (`--interval`); the engine accepts 0.000001 to 86400 s.
DEFAULT_INTERVAL_SECONDS = 1.0
#: Largest --keys file read (a line per session, under 300 bytes: about 200,000 sessions); a
#: larger one is some other file, and is not read whole.
MAX_KEYS_FILE = 64 << 20

def load_core() -> ModuleType:
    try:
        from . import _core  # type: ignore[attr-defined]
    except ImportError as e:
        raise EngineUnavailable(
            f"the engine extension smbwire._core is not available ({e}); build it with `maturin develop -r`"
        ) from None
    return _core


def engine_version() -> str | None:
    """The engine's version (with its build fingerprint), or None when `_core` is not built."""
    try:
        core = load_core()
    except EngineUnavailable:
        return None
    build = getattr(core, "build_id", None)
    return f"{core.version()} (build {build()})" if build is not None else str(core.version())


def _stdin_is_terminal() -> bool:
    """Standard input is a terminal (sys.stdin, which a test harness may replace)."""
    try:
        return bool(sys.stdin is not None and sys.stdin.isatty())
    except (OSError, ValueError):
        return False


def check_inputs(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """The paths as strings, after checking that at least one names something readable as a
    capture and none is given twice. Raises `InputError`.

    `-` is standard input (once at most); a FIFO or a character device is read as a stream
    (`tcpdump -w fifo`). A path that cannot be used (missing, a directory or socket,
    unreadable, empty) is an error only when no path is usable; among usable ones it is
    passed on, and the engine skips it with a warning naming it (as it does a file that is
    not a capture)."""
    if not paths:
        raise InputError("no capture file given")
    out: list[str] = []
    problems: list[str] = []
    seen: dict[tuple[int, int], str] = {}
    for p in paths:
        path = text_path(p)
        out.append(path)
        if path == "-":
            if out.count("-") > 1:
                raise InputError("-: standard input given twice")
            if _stdin_is_terminal():
                raise InputError("-: standard input is a terminal, not a capture: pipe one in "
                                 "(tcpdump -w - ... | smbwire analyze -)")
            continue
        try:
            st = os.stat(path)
        except FileNotFoundError:
            problems.append(f"{path}: no such file")
            continue
        except OSError as e:
            problems.append(f"{path}: {e.strerror or e}")
            continue
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            problems.append(f"{path}: is a directory, not a capture file")
        elif stat.S_ISSOCK(mode):
            problems.append(f"{path}: is a socket, not a capture file")
        elif stat.S_ISBLK(mode):
            problems.append(f"{path}: is a block device, not a capture file")
        elif not os.access(path, os.R_OK):
            problems.append(f"{path}: permission denied")
        elif st.st_size == 0 and stat.S_ISREG(mode):
            problems.append(f"{path}: empty file (0 bytes), not a capture")
        if not stat.S_ISREG(mode):
            continue  # a FIFO or device: no identity to compare
        key = (st.st_dev, st.st_ino)
        if key in seen:
            raise InputError(
                f"{path}: same file as {seen[key]} (a capture given twice would count every payload as duplicated)"
            )
        seen[key] = path
    if len(problems) == len(out):
        raise InputError(problems[0])
    return out


def default_threads() -> int:
    """Decoding threads when `--threads` is not given: the CPUs this process may run on."""
    try:
        return max(1, min(len(os.sched_getaffinity(0)), 256))
    except (AttributeError, OSError):
        return max(1, min(os.cpu_count() or 1, 256))


def _finite_number(v: Any) -> bool:
    """An int or a float JSON can carry (not a bool, nan or an infinity)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def build_config(
    *,
    topology: Topology | Mapping[str, Any] | None = None,
    window: float = DEFAULT_WINDOW_SECONDS,
    top_n: int = DEFAULT_TOP_N,
    ledger: str | None = None,
    from_ns: int | None = None,
    to_ns: int | None = None,
    reorder_buffer: int | None = None,
    assume_members: bool = False,
    interval: float | None = None,
    max_index_memory: int | None = None,
    keys: str | os.PathLike[str] | None = None,
    max_memory: int | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """The engine's config object (serialised as `config_json`). `from_ns`/`to_ns`: analyse
    only frames captured in [from, to) (ns since the epoch). `assume_members`: with no nodes in
    the topology, treat every address as a cluster member (else membership is unknown and only
    forwarding seen on the wire decides a class)."""
    if from_ns is not None and to_ns is not None and from_ns >= to_ns:
        raise UserError("the --from time must be before the --to time")
    # Only what JSON cannot carry is refused here (nan, inf: their text is not JSON); the
    # engine checks the range (`Config::from_json`).
    if not _finite_number(window) or not window > 0:
        raise UserError(f"window must be a positive, finite number of seconds, got {window!r}")
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 0:
        raise UserError(f"top must be a non-negative integer, got {top_n!r}")
    if topology is None:
        topo: dict[str, Any] = {}  # engine default: every address its own node, membership unknown
    else:
        # The topology module (dataclasses, inspect) is imported only when a topology is given.
        from .topology import Topology

        if isinstance(topology, Topology):
            topo = topology.to_config()
        else:
            topo = Topology.from_config(topology).to_config()
    if assume_members:
        topo = {**topo, "assume_members": True}
    config: dict[str, Any] = {"window_seconds": float(window), "topology": topo, "top_n": top_n}
    if ledger is not None:
        config["ledger"] = ledger
    if threads is not None:
        config["threads"] = threads
    if from_ns is not None:
        config["from_ns"] = from_ns
    if to_ns is not None:
        config["to_ns"] = to_ns
    if reorder_buffer is not None:
        config["reorder_buffer_bytes"] = reorder_buffer
    if interval is not None:
        if not _finite_number(interval):
            raise UserError(f"interval must be a finite number of seconds, got {interval!r}")
        config["series_interval_seconds"] = float(interval)
    if max_index_memory is not None:
        config["max_index_memory_bytes"] = max_index_memory
    if max_memory is not None:
        config["max_memory_bytes"] = max_memory
    if keys is not None:
        # The engine parses and checks the text (docs/decryption.md); read here, before live
        # capture drops privileges.
        name = os.fspath(keys)
        try:
            with open(keys, "rb") as f:
                raw = f.read(MAX_KEYS_FILE + 1)
        except OSError as e:
            raise UserError(f"--keys {name}: cannot read: {e.strerror or e}") from None
        if len(raw) > MAX_KEYS_FILE:
            raise UserError(f"--keys {name}: larger than {MAX_KEYS_FILE:,} bytes, not a keys file")
        try:
            config["keys"] = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserError(f"--keys {name}: not UTF-8 text (byte {e.start}); a keys file is lines of hex") from None
    return config


def text_path(path: str | os.PathLike[str]) -> str:
    """`path` as text, when it is: the engine takes file names as UTF-8 text (they appear in
    the JSON result). A name with bytes that are not UTF-8 (a file copied from an old share in
    Latin-1) is refused with one line naming it. Raises `UserError`."""
    text = os.fspath(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raw = os.fsencode(text)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            shown = raw.decode("utf-8", "backslashreplace")
            raise UserError(f"{shown}: the file name is not UTF-8 (byte {e.start}, 0x{raw[e.start]:02x}); smbwire "
                            "names files in its JSON result: rename it, or name it through a symbolic link "
                            "whose name is UTF-8") from None
        raise UserError(f"{text!a}: the file name cannot be encoded") from None
    return text


def check_writable(out: str | os.PathLike[str]) -> None:
    """Before a run: UserError with one line when `out` cannot be an output file (a
    directory, a directory that does not exist, no permission; the engine's
    `outputs::check_writable`). `-` (standard output) always can."""
    path = text_path(out)
    if path == "-":
        return
    try:
        load_core().check_writable(path)
    except ValueError as e:
        raise UserError(_one_line(e)) from None


def write_output(out: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` as the whole output file `out`, atomically (a reader never sees half a
    file; a device or pipe is written in place): the engine's `outputs::write_whole`, the one
    writer of the command line's `--json`, `--csv` and `--html`. UserError with one line."""
    path = text_path(out)
    try:
        load_core().write_output(path, data)
    except ValueError as e:
        raise UserError(_one_line(e)) from None


def check_outputs(outputs: Sequence[tuple[str, str | None]], inputs: Sequence[str | None]) -> None:
    """Before a run: no output (`(option, path)`, None for an option not given) is one of the
    run's inputs or another output, by any name (the engine's rule, `outputs::check`).
    UserError with the engine's one line."""
    given = [(o, text_path(p)) for o, p in outputs if p is not None]
    if not given:
        return
    try:
        load_core().check_outputs(given, [text_path(p) for p in inputs if p is not None])
    except ValueError as e:
        raise UserError(_one_line(e)) from None


def check_annotate(paths: Sequence[str], out: str | os.PathLike[str]) -> None:
    """`--annotate` reads the inputs a second time: standard input and FIFOs cannot be."""
    for p in paths:
        try:
            regular = p != "-" and stat.S_ISREG(os.stat(p).st_mode)
        except OSError:
            regular = True  # analyze reports a missing file itself
        if not regular:
            raise UserError(f"--annotate needs capture files it can read twice; {p} is a stream")
    check_writable(out)


def annotate(result: Mapping[str, Any], evidence: str | os.PathLike[str], out: str | os.PathLike[str]) -> dict[str, Any]:
    """Write OUT (pcapng): the analysed inputs' frames merged in time order, with a comment on
    each frame of each send listed in the evidence file (docs/attribution.md). Returns the
    counts (`frames_written`, `frames_commented`, `sends`, `interfaces`)."""
    inputs = [str(i["path"]) for i in result.get("inputs", [])]
    core = load_core()
    try:
        text = core.annotate(inputs, text_path(evidence), text_path(out))
    except ValueError as e:
        raise InputError(_one_line(e)) from None
    stats: dict[str, Any] = json.loads(text)
    return stats


def analyze(
    paths: Sequence[str | os.PathLike[str]],
    *,
    topology: Topology | Mapping[str, Any] | None = None,
    window: float = DEFAULT_WINDOW_SECONDS,
    evidence: str | os.PathLike[str] | None = None,
    progress: ProgressFn | None = None,
    top_n: int = DEFAULT_TOP_N,
    ledger: str | os.PathLike[str] | None = None,
    from_ns: int | None = None,
    to_ns: int | None = None,
    reorder_buffer: int | None = None,
    assume_members: bool = False,
    interval: float | None = None,
    max_index_memory: int | None = None,
    keys: str | os.PathLike[str] | None = None,
    max_memory: int | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Analyse capture files together; returns the result dict (schema "smbwire/1",
    docs/json-schema.md). `evidence`: path of the JSON-lines evidence file the engine writes.
    `ledger`: path of the send ledger (Parquet, docs/ledger.md) the engine writes.

    Raises `InputError` / `UserError` for what the user can fix, `EngineUnavailable` when
    `_core` is not built, `SmbwireError` when the engine returns something that is not a
    result object."""
    files = check_inputs(paths)
    ledger_path = None
    if ledger is not None:
        ledger_path = text_path(ledger)
        check_writable(ledger_path)
    config = build_config(topology=topology, window=window, top_n=top_n, ledger=ledger_path,
                          from_ns=from_ns, to_ns=to_ns, reorder_buffer=reorder_buffer, interval=interval,
                          assume_members=assume_members, max_index_memory=max_index_memory, keys=keys,
                          max_memory=max_memory, threads=default_threads() if threads is None else threads)
    evidence_path = None
    if evidence is not None:
        evidence_path = text_path(evidence)
        check_writable(evidence_path)
    core = load_core()
    try:
        text = core.analyze(files, json.dumps(config), evidence_path, progress)
    except ValueError as e:
        raise InputError(_one_line(e)) from None
    except OSError as e:
        raise InputError(_one_line(e)) from None
    return _parse_result(text)


def attribute(
    ledgers: Sequence[str | os.PathLike[str]],
    *,
    topology: Topology | Mapping[str, Any] | None = None,
    window: float = DEFAULT_WINDOW_SECONDS,
    evidence: str | os.PathLike[str] | None = None,
    top_n: int = DEFAULT_TOP_N,
    assume_members: bool = False,
    interval: float | None = None,
    max_index_memory: int | None = None,
    max_memory: int | None = None,
) -> dict[str, Any]:
    """Rerun dedupe and attribution from send ledgers written by `analyze(..., ledger=...)`
    (several are merged as one analysis of all their captures); returns the result dict, as
    `analyze` on the captures with the same options would (docs/ledger.md)."""
    if not ledgers:
        raise InputError("no ledger file given")
    files = [text_path(p) for p in ledgers]
    seen: dict[tuple[int, int], str] = {}
    for f in files:
        try:
            st = os.stat(f)
        except FileNotFoundError:
            raise InputError(f"{f}: no such file") from None
        except OSError as e:
            raise InputError(f"{f}: {e.strerror or e}") from None
        if os.path.isdir(f):
            raise InputError(f"{f}: is a directory, not a ledger file")
        key = (st.st_dev, st.st_ino)
        if key in seen:
            raise InputError(f"{f}: same file as {seen[key]} (a ledger given twice would count every payload as duplicated)")
        seen[key] = f
    config = build_config(topology=topology, window=window, top_n=top_n, interval=interval,
                          assume_members=assume_members, max_index_memory=max_index_memory,
                          max_memory=max_memory)
    evidence_path = None
    if evidence is not None:
        evidence_path = text_path(evidence)
        check_writable(evidence_path)
    core = load_core()
    try:
        text = core.attribute(files, json.dumps(config), evidence_path)
    except (ValueError, OSError) as e:
        raise InputError(_one_line(e)) from None
    return _parse_result(text)


def skipped_inputs(result: Mapping[str, Any], files: Sequence[str]) -> list[str]:
    """The sentence of the engine's `input_skipped` finding for each of `files` it skipped
    as unusable."""
    wanted = set(files)
    return [str(f.get("message")) for f in result.get("findings") or []
            if isinstance(f, dict) and f.get("code") == "input_skipped" and f.get("path") in wanted]


def synth_scenarios() -> list[dict[str, str]]:
    """The scenarios `synth` knows: `[{"name", "description"}]` (the synthesizer's own list)."""
    return list(json.loads(load_core().synth_scenarios()))


def synth(spec: Mapping[str, Any], out_path: str | os.PathLike[str]) -> dict[str, Any]:
    """Generate a scenario capture at `out_path`; returns the truth dict."""
    out = text_path(out_path)
    check_writable(out)
    core = load_core()
    try:
        text = core.synth(json.dumps(dict(spec)), out)
    except (ValueError, OSError) as e:
        raise UserError(_one_line(e)) from None
    return _parse_result(text, what="truth")


def _parse_result(text: Any, what: str = "result") -> dict[str, Any]:
    try:
        result = json.loads(text)
    except (TypeError, ValueError) as e:
        raise SmbwireError(f"the engine returned a {what} that is not JSON: {e}") from None
    if not isinstance(result, dict):
        raise SmbwireError(f"the engine returned a {what} that is not a JSON object")
    return result


def _one_line(e: BaseException) -> str:
    msg = " ".join(str(e).split())
    return msg or type(e).__name__
