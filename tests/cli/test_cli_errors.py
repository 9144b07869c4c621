"""CLI error paths: a user error is one line on stderr and exit 2, an internal error one line
and exit 70 (traceback only with SMBWIRE_DEBUG=1). None of these needs the Rust engine: the
inputs are checked before it is loaded, and the engine's own failures are simulated with a
stand-in module (see `fake_core`)."""

from __future__ import annotations

import json

import sys
import types

import pytest
from click.testing import CliRunner

import smbwire
from smbwire.cli import cli


def run(*args: str, env: dict | None = None):
    return CliRunner(env=env).invoke(cli, list(args), prog_name="smbwire")


def assert_one_line_error(result, code: int, *needles: str) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("smbwire: error: "), lines[0]
    assert "Traceback" not in result.output
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture
def capture(tmp_path):
    """A non-empty file: the CLI's own checks pass it to the engine."""
    p = tmp_path / "c.pcap"
    p.write_bytes(b"\xd4\xc3\xb2\xa1" + bytes(20))
    return p


def install_core(monkeypatch, module):
    """Make `from smbwire import _core` return `module` (None: the import fails)."""
    monkeypatch.setitem(sys.modules, "smbwire._core", module)
    if module is None:
        monkeypatch.delattr(smbwire, "_core", raising=False)
    else:
        monkeypatch.setattr(smbwire, "_core", module, raising=False)


#: The real extension, for what a stand-in keeps from it (the topology reader, the tables).
try:
    from smbwire import _core as REAL_CORE
except ImportError:  # pragma: no cover - the suite needs the built extension
    REAL_CORE = None

#: What a stand-in engine takes from the real one: the topology file and the exported tables
#: are the engine's rules, not analysis.
KEPT = ("TopologyError", "load_topology", "parse_topology", "check_topology", "topology_to_toml",
        "check_outputs", "check_writable", "write_output", "byte_categories", "traffic_classes", "derive_findings", "finding_codes")


def fake_core(analyze=None, synth=None):
    m = types.ModuleType("smbwire._core")
    for name in KEPT:
        if REAL_CORE is not None and hasattr(REAL_CORE, name):
            setattr(m, name, getattr(REAL_CORE, name))
    m.analyze = analyze
    m.synth = synth
    m.version = lambda: "fake-engine"
    return m


def test_missing_file(tmp_path):
    r = run("analyze", str(tmp_path / "nope.pcap"))
    assert_one_line_error(r, 2, "nope.pcap: no such file")


def test_directory_is_not_a_capture(tmp_path):
    assert_one_line_error(run("analyze", str(tmp_path)), 2, "is a directory")


def test_empty_file(tmp_path):
    p = tmp_path / "empty.pcap"
    p.write_bytes(b"")
    assert_one_line_error(run("analyze", str(p)), 2, "empty.pcap: empty file")


def test_same_capture_twice(capture):
    assert_one_line_error(run("analyze", str(capture), str(capture)), 2, "same file as")


def test_bad_topology(capture, tmp_path):
    topo = tmp_path / "topology.toml"
    topo.write_text('[nodes.a]\naddresses = ["10.0.0.1"]\n[nodes.b]\naddresses = ["10.0.0.1"]\n')
    line = assert_one_line_error(run("analyze", str(capture), "--topology", str(topo)), 2)
    assert line == f"smbwire: error: {topo}: line 4: nodes.b.addresses: address 10.0.0.1 is also in node 'a'"


@pytest.mark.parametrize(
    "text,expected",
    [
        ('[nodes.a]\naddresses = ["10.0.0.1"]\nadresses = ["10.0.0.2"]\n',
         "line 3: unknown field `adresses`, expected `addresses` or `member`"),
        ('[nodes.a]\n\naddresses = []\n', "line 3: nodes.a.addresses: expected a non-empty list of IP addresses"),
        ('[[rules]]\nclass = "client"\nfile = "disk{1,2.vhdx"\n', "line 3: rules.0.file: invalid glob 'disk{1,2.vhdx'"),
        ('[[rules]]\nclass = "client"\nshare = ""\n', "line 3: rules.0.share: empty glob pattern"),
        ('[nodes.a]\naddresses = ["10.0.0.1", "fe80::zz"]\n', "line 2: nodes.a.addresses: 'fe80::zz' is not an IP address"),
    ],
    ids=["unknown-key", "empty-addresses", "bad-glob", "empty-glob", "bad-address"],
)
@pytest.mark.parametrize("command", ["analyze", "attribute", "live"])
def test_topology_errors_name_the_line_for_every_command(capture, tmp_path, text, expected, command):
    """The engine's one reader, through each command that takes --topology: one line with the
    file and the line, exit 2, before any capture or ledger is opened."""
    topo = tmp_path / "topology.toml"
    topo.write_text(text)
    target = {"analyze": [str(capture)], "attribute": [str(capture)], "live": ["-i", "lo"]}[command]
    line = assert_one_line_error(run(command, *target, "--topology", str(topo)), 2)
    assert line.startswith(f"smbwire: error: {topo}: {expected}"), line


def test_missing_topology_file(capture, tmp_path):
    assert_one_line_error(run("analyze", str(capture), "-t", str(tmp_path / "t.toml")), 2, "t.toml: no such file")


def test_json_output_directory_missing(capture, tmp_path):
    r = run("analyze", str(capture), "--json", str(tmp_path / "no" / "out.json"))
    assert_one_line_error(r, 2, "does not exist")


def test_evidence_output_directory_missing(capture, tmp_path, monkeypatch):
    install_core(monkeypatch, fake_core(analyze=lambda *a: pytest.fail("engine must not run")))
    r = run("analyze", str(capture), "--evidence", str(tmp_path / "no" / "ev.jsonl"))
    assert_one_line_error(r, 2, "does not exist")


@pytest.mark.parametrize(
    "args,needle",
    [
        (["analyze"], "Missing argument"),
        (["analyze", "x.pcap", "--window", "0"], "--window"),
        # nan passes click's FloatRange (it compares false with both bounds) and neither nan
        # nor inf can be written in the engine's JSON config: refused by the option itself.
        (["analyze", "x.pcap", "--window", "inf"], "'inf' is not a finite number"),
        (["analyze", "x.pcap", "--window", "nan"], "'nan' is not a finite number"),
        (["analyze", "x.pcap", "--interval", "nan"], "'nan' is not a finite number"),
        (["attribute", "l.parquet", "--window", "inf"], "'inf' is not a finite number"),
        (["live", "lo", "--duration", "nan"], "'nan' is not a finite number"),
        (["synth", "s", "-o", "x.pcap", "--reorder", "nan"], "'nan' is not a finite number"),
        # The seed is the synthesizer's u64: out of it, the engine's JSON error leaked
        # ("invalid value: integer `-1`, expected u64 at line 1 column 55").
        (["synth", "s", "-o", "x.pcap", "--seed", "-1"], "-1 is not in the range 0<=x<=18446744073709551615"),
        (["synth", "s", "-o", "x.pcap", "--seed", str(2**64)], "--seed"),
        (["analyze", "x.pcap", "--top", "-1"], "--top"),
        (["analyze", "x.pcap", "--bogus"], "No such option"),
        (["frobnicate"], "No such command"),
        (["synth", "s2d-2way"], "Missing option"),
        (["synth", "s", "-o", "x.pcap", "--bytes", "lots"], "is not a size"),
        (["synth", "s", "-o", "x.pcap", "--retransmit", "1.5"], "--retransmit"),
    ],
)
def test_usage_errors_are_one_line(args, needle):
    assert_one_line_error(run(*args), 2, needle, "--help")


@pytest.mark.parametrize("args,command", [
    (["analyze", "x.pcap", "--json"], "smbwire analyze"),
    (["analyze", "--json"], "smbwire analyze"),
    (["attribute", "l.parquet", "--evidence"], "smbwire attribute"),
    (["--bogus"], "smbwire"),
])
def test_a_usage_error_points_at_its_commands_help(args, command):
    # An option missing its value is refused before click has the command's context; the
    # pointer must still name the command whose help explains the option.
    line = assert_one_line_error(run(*args), 2)
    assert line.endswith(f"(see '{command} --help')"), line


def test_engine_not_built(capture, monkeypatch):
    install_core(monkeypatch, None)
    assert_one_line_error(run("analyze", str(capture)), 70, "smbwire._core is not available", "maturin develop")


def test_engine_refuses_input_is_a_user_error(capture, monkeypatch):
    def analyze(paths, config_json, evidence, progress):
        raise ValueError(f"{paths[0]}: not a capture file\n(unknown magic 0x00000000)")

    install_core(monkeypatch, fake_core(analyze=analyze))
    line = assert_one_line_error(run("analyze", str(capture)), 2)
    assert line == f"smbwire: error: {capture}: not a capture file (unknown magic 0x00000000)"


def test_internal_error_is_one_line_exit_70(capture, monkeypatch):
    def analyze(*a):
        raise RuntimeError("index invariant broken")

    install_core(monkeypatch, fake_core(analyze=analyze))
    assert_one_line_error(run("analyze", str(capture)), 70, "internal error: RuntimeError: index invariant broken",
                          "SMBWIRE_DEBUG=1")


def test_internal_error_traceback_with_debug(capture, monkeypatch):
    def analyze(*a):
        raise RuntimeError("index invariant broken")

    install_core(monkeypatch, fake_core(analyze=analyze))
    r = run("analyze", str(capture), env={"SMBWIRE_DEBUG": "1"})
    assert r.exit_code == 70
    assert "Traceback" in r.stderr and "index invariant broken" in r.stderr
    assert r.stderr.splitlines()[-1].startswith("smbwire: error: internal error")


def test_engine_returning_garbage_is_internal(capture, monkeypatch):
    install_core(monkeypatch, fake_core(analyze=lambda *a: "[1, 2]"))
    assert_one_line_error(run("analyze", str(capture)), 70, "not a JSON object")


def test_synth_engine_refusal_is_a_user_error(tmp_path, monkeypatch):
    def synth(spec, out):
        raise ValueError("unknown scenario 'nope' (known: s2d-2way, s2d-3way)")

    install_core(monkeypatch, fake_core(synth=synth))
    r = run("synth", "nope", "-o", str(tmp_path / "x.pcap"))
    assert_one_line_error(r, 2, "unknown scenario 'nope'")


def test_synth_compression_reaches_the_engine(tmp_path, monkeypatch):
    """--compression and --zero-fill go into the spec (compression implies dialect 3.1.1); a
    name the engine refuses is one line, exit 2."""
    seen = []

    def synth(spec, out):
        seen.append(json.loads(spec) if isinstance(spec, str) else dict(spec))
        if seen[-1].get("compression") == "zip":
            raise ValueError('compression must be one of ["none", "lznt1", "lz77", "lz77huffman", "chained"], got "zip"')
        return "{}"

    install_core(monkeypatch, fake_core(synth=synth))
    out = str(tmp_path / "x.pcap")
    r = run("synth", "mirror2", "-o", out, "--compression", "lz77huffman", "--zero-fill", "0.5")
    assert r.exit_code == 0, r.stderr
    assert seen[-1]["compression"] == "lz77huffman" and seen[-1]["dialect"] == "3.1.1"
    assert seen[-1]["zero_fill"] == 0.5
    run("synth", "mirror2", "-o", out)
    assert "compression" not in seen[-1] and "dialect" not in seen[-1]
    assert_one_line_error(run("synth", "mirror2", "-o", out, "--compression", "zip"), 2, "compression must be one of")


def test_version():
    r = run("--version")
    assert r.exit_code == 0 and r.stdout == f"smbwire {smbwire.__version__}\n"


def test_version_command_with_and_without_engine(monkeypatch):
    install_core(monkeypatch, fake_core())
    r = run("version")
    assert r.exit_code == 0 and r.stdout == f"smbwire {smbwire.__version__}\nengine fake-engine\n"
    install_core(monkeypatch, None)
    r = run("version")
    assert r.exit_code == 0 and "engine not built" in r.stdout


def _interpreter_start_up(err: str) -> bool:
    """A traceback the interpreter printed before any module of ours ran: its own start-up
    (`site` and the .pth hooks of installed packages, `<frozen site>` in the frames), the
    check of the script's path ("Failed checking if argv[0] is an import path entry"), or an
    interrupt CPython reported from the import system's lock callback and carried on after
    ("Exception ignored in": no frame of ours can be in it), or `python -m`'s own import of
    `runpy` ("Could not import runpy module", CPython's message when that import fails: the
    module named after `-m` has not been looked for yet; an interrupt there may land in a
    meta-path hook a .pth file installed, such as setuptools' `_distutils_hack`). Outside the
    program: before `smbwire.__main__` replaces the SIGINT handler, an interrupt is the
    interpreter's."""
    frames = [ln.strip() for ln in err.splitlines() if ln.strip().startswith("File ")]
    if any("/smbwire/" in f for f in frames):
        return False
    if "<frozen site>" in err or err.startswith("Failed checking if argv[0] is an import path entry"):
        return True
    if err.startswith("Could not import runpy module\n"):
        return True
    if err.startswith("Exception ignored in: <function _get_module_lock.<locals>.cb"):
        return all(f.startswith('File "<frozen importlib._bootstrap>"') for f in frames)
    # Anything else must not be in a library's code (only ours loads libraries, after the
    # handler is in place).
    return not any("site-packages" in f for f in frames)


@pytest.mark.parametrize("entry", ["module", "script"])
def test_ctrl_c_while_the_command_starts_is_one_line_not_a_traceback(entry):
    """SIGINT at moments spread over the first 0.3 s (while Python loads the CLI's modules, then
    while the command runs): exit 130 with the one-line message, or -SIGINT when it lands before
    Python has a handler; never a traceback through smbwire's or its libraries' code. (The
    interpreter's own start-up, before any module of ours, may print one and end, or carry
    on: `_interpreter_start_up`, outside the program.) Both entry points: `python -m smbwire`
    and the console script (`smbwire.__main__:main`)."""
    import shutil
    import signal
    import subprocess
    import time
    from pathlib import Path

    if entry == "module":
        argv = [sys.executable, "-m", "smbwire"]
    else:
        script = Path(sys.executable).with_name("smbwire")
        argv = [str(script) if script.exists() else shutil.which("smbwire")]
        assert argv[0], "the console script is installed"
    capture = Path(__file__).resolve().parents[2] / "captures" / "nested4-1MiB-mirrordup-retx-reorder.pcap"
    outcomes = []
    for i in range(16):
        p = subprocess.Popen([*argv, "analyze", str(capture), "-q", "--threads", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(i * 0.02)
        p.send_signal(signal.SIGINT)
        err = p.communicate(timeout=60)[1].decode()
        if "Traceback" in err or "KeyboardInterrupt" in err:
            assert _interpreter_start_up(err), err
            outcomes.append("interpreter start-up")
            continue
        assert p.returncode in (130, -signal.SIGINT, 0), (p.returncode, err)
        if p.returncode == 130:
            assert err.strip() == "smbwire: error: interrupted", err
        outcomes.append(p.returncode)
    assert 130 in outcomes, outcomes


@pytest.mark.parametrize("when", ["before main", "as the CLI loads"])
def test_an_interrupt_noted_while_the_modules_load_ends_the_run_in_one_line(when):
    """The moments the test above hits by chance, made certain: SIGINT once
    `smbwire.__main__` is loaded and before `main` (or while `main` loads the CLI, from a
    module imported in its place) is noted, not raised, and `main` ends the run with the
    one-line message and 130, before any command runs (nothing is written). Python's handler
    is back for the command."""
    import subprocess

    code = """
import os, signal, sys
import smbwire.__main__ as entry
if sys.argv[1] == "before main":
    os.kill(os.getpid(), signal.SIGINT)
else:
    import importlib.abc
    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "smbwire.cli":
                os.kill(os.getpid(), signal.SIGINT)
            return None
    sys.meta_path.insert(0, Finder())
sys.argv = ["smbwire", "version"]
entry.main()
"""
    r = subprocess.run([sys.executable, "-c", code, when], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr.strip(), r.stdout) == (130, "smbwire: error: interrupted", ""), r
    # Without a signal the command runs, and Python's own handler is back for it.
    code = """
import signal, sys
import smbwire.__main__ as entry
sys.argv = ["smbwire", "version"]
import smbwire.cli
orig = smbwire.cli.main
def main():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    orig()
smbwire.cli.main = main
entry.main()
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("smbwire "), r


def test_the_entry_module_loads_nothing_of_ours_before_its_ctrl_c_handling():
    """Loading `smbwire.__main__` (both entry points start there) runs no module of ours but
    the package's one-line `__init__`: an interrupt while one loaded at its top would be a
    traceback through it (`errors`, imported there once, was; the test above caught it about
    once in a few dozen runs)."""
    import subprocess

    code = "import sys, smbwire.__main__; print(sorted(m for m in sys.modules if m.startswith('smbwire')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "['smbwire', 'smbwire.__main__']", out


@pytest.mark.parametrize("window,shown", [("1e-300", "1e-300"), ("86401", "86401.0"), ("1e300", "1e+300")])
def test_a_window_out_of_range_is_refused_by_the_engine_in_one_line(capture, window, shown):
    # The engine checks the range (the CLI only refuses what JSON cannot carry); a window
    # that would round to 0 ns is refused, and a huge one is shown as given, not in 301 digits.
    line = assert_one_line_error(run("analyze", str(capture), "--window", window), 2)
    assert line == f"smbwire: error: the window must be between 0.000001 and 86400 seconds, got {shown}", line


@pytest.mark.parametrize("kw", [{"window": float("inf")}, {"window": float("nan")}, {"interval": float("nan")},
                                {"interval": float("-inf")}])
def test_the_python_api_refuses_what_json_cannot_carry(kw):
    from smbwire import engine
    from smbwire.errors import UserError

    with pytest.raises(UserError, match="finite number of seconds"):
        engine.build_config(**kw)
