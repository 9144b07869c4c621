"""No command writes over one of its inputs or writes two outputs to one file: the same file
by any name (a symbolic or hard link, `./`) is refused before the run with one line and exit
2, and the input is left as it was. `analyze IN --annotate IN` truncated the capture it was
reading (the process died of SIGBUS and the capture was lost); `--json IN` replaced it with
the report. The engine refuses too when called without the command line."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from paths import CAPTURES
from smbwire import _core
from smbwire.cli import cli

CAP = CAPTURES / "nested4-1MiB.pcap"


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="smbwire")


@pytest.fixture
def cap(tmp_path):
    p = tmp_path / "in.pcap"
    shutil.copyfile(CAP, p)
    return p


def refused(r, *needles: str) -> str:
    assert r.exit_code == 2, (r.exit_code, r.output)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("smbwire: error: "), r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.mark.parametrize("option", ["--json", "--evidence", "--csv", "--edges-csv", "--html", "--ledger", "--annotate"])
@pytest.mark.parametrize("name", ["same", "symlink", "hardlink", "dotted"])
def test_analyze_never_writes_over_a_capture(tmp_path, cap, option, name):
    before = cap.read_bytes()
    out = {"same": str(cap), "dotted": f"{tmp_path}/./in.pcap"}.get(name)
    if name == "symlink":
        os.symlink(cap, tmp_path / "l.pcap")
        out = str(tmp_path / "l.pcap")
    elif name == "hardlink":
        os.link(cap, tmp_path / "h.pcap")
        out = str(tmp_path / "h.pcap")
    line = refused(run("analyze", str(cap), option, out, "-q"), f"{option} {out}: is an input of this run",
                   "never writes over what it reads")
    if name != "same":
        assert f"({cap})" in line
    assert cap.read_bytes() == before


def test_the_topology_and_keys_files_are_inputs_too(tmp_path, cap):
    topo = tmp_path / "t.toml"
    shutil.copyfile(CAPTURES / "s2d-two-node.toml", topo)
    refused(run("analyze", str(cap), "-t", str(topo), "--html", str(topo)), f"--html {topo}: is an input")
    keys = tmp_path / "keys.txt"
    keys.write_text("")
    refused(run("analyze", str(cap), "--keys", str(keys), "--json", str(keys)), f"--json {keys}: is an input")
    assert topo.read_bytes() == (CAPTURES / "s2d-two-node.toml").read_bytes() and keys.read_text() == ""


def test_two_outputs_naming_one_file_are_refused(tmp_path, cap):
    a, b = str(tmp_path / "r.json"), f"{tmp_path}/./r.json"
    refused(run("analyze", str(cap), "--json", a, "--html", b), f"--json {a} and --html {b}: the same file")
    assert not os.path.exists(a)
    refused(run("analyze", str(cap), "--ledger", a, "--evidence", a), "--evidence", "--ledger", "the same file")


def test_attribute_never_writes_over_a_ledger(tmp_path, cap):
    ledger = tmp_path / "l.parquet"
    assert run("analyze", str(cap), "--ledger", str(ledger), "-q").exit_code == 0
    before = ledger.read_bytes()
    for option in ("--json", "--evidence", "--csv", "--html"):
        refused(run("attribute", str(ledger), option, str(ledger)), f"{option} {ledger}: is an input")
    assert ledger.read_bytes() == before
    # Distinct outputs still work.
    r = run("attribute", str(ledger), "--json", str(tmp_path / "r.json"), "-q")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "r.json").read_text())["schema"]


def test_synth_outputs_are_distinct(tmp_path):
    out = str(tmp_path / "x.pcap")
    refused(run("synth", "nested4", "-o", out, "--truth-out", out), f"--output {out} and --truth-out {out}: the same file")
    assert not os.path.exists(out)


def test_streams_and_devices_are_not_files_to_protect(cap):
    r = run("analyze", str(cap), "--json", "-", "--csv", "/dev/null", "--edges-csv", "/dev/null", "-q")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["schema"]


def test_the_engine_refuses_without_the_command_line(tmp_path, cap):
    before = cap.read_bytes()
    ev = tmp_path / "ev.jsonl"
    assert run("analyze", str(cap), "--evidence", str(ev), "-q").exit_code == 0
    with pytest.raises(ValueError, match="--annotate .*: is an input of this run"):
        _core.annotate([str(cap)], str(ev), str(cap))
    with pytest.raises(ValueError, match="--annotate .*: is an input of this run"):
        _core.annotate([str(cap)], str(ev), str(ev))
    with pytest.raises(ValueError, match="--evidence .*: is an input of this run"):
        _core.analyze([str(cap)], "{}", str(cap))
    assert cap.read_bytes() == before
    with pytest.raises(ValueError, match="the same file"):
        _core.check_outputs([("--json", "-"), ("--html", "a.html"), ("--csv", "./a.html")], [])
    _core.check_outputs([("--json", "-"), ("--html", "a.html")], [str(cap), "-"])


def test_live_checks_its_outputs_before_it_captures(tmp_path):
    topo = tmp_path / "t.toml"
    shutil.copyfile(CAPTURES / "s2d-two-node.toml", topo)
    # Refused before the interface (which does not exist) is looked at.
    refused(run("live", "-i", "smbwire-none0", "-t", str(topo), "--json", str(topo)), f"--json {topo}: is an input")
    w = str(tmp_path / "c.pcapng")
    refused(run("live", "-i", "smbwire-none0", "--write", w, "--html", w), f"--write {w} and --html {w}: the same file")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("args", [(), ("--json", "-", "-q"), ("--evidence", "-", "-q")])
def test_standard_output_that_takes_nothing_is_one_line(args):
    """`smbwire analyze ... > /dev/full` (a full disk): one line naming standard output and
    exit 2; it was an internal error (exit 70)."""
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", str(CAP), *args], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == "smbwire: error: standard output: cannot write: No space left on device"


def test_live_write_size_without_write_is_refused():
    """`--write-size` alone was accepted and did nothing."""
    refused(run("live", "-i", "smbwire-none0", "--write-size", "1MiB"), "--write-size is for --write FILE.pcapng")


@pytest.mark.parametrize("sig,code,line", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_a_stopped_run_leaves_no_half_written_ledger_or_evidence(tmp_path, sig, code, line):
    """Ctrl-C or SIGTERM (a scheduler, `timeout`, `kill`) while the capture is still coming (a
    FIFO with part of a capture written): one line, exit 130 or 143, and the ledger and
    evidence paths hold what they held before (an earlier run's file stays whole; a new path
    stays empty), with no temporary file left beside them. Before, Ctrl-C left a ledger
    without its footer and an empty evidence file at the paths, and SIGTERM ended the process
    on the spot."""
    import signal
    import subprocess
    import sys
    import time

    fifo = tmp_path / "cap.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.parquet").write_bytes(b"an earlier ledger")
    args = ["--ledger", str(out / "old.parquet"), "--evidence", str(out / "new.jsonl")]
    p = subprocess.Popen([sys.executable, "-m", "smbwire", "analyze", str(fifo), *args, "-q"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    w = open(fifo, "wb")  # noqa: SIM115
    try:
        w.write(CAP.read_bytes()[:1_500_000])
        w.flush()
        time.sleep(1.5)
        assert p.poll() is None, "smbwire should still be waiting for the rest"
        p.send_signal(getattr(signal, sig))
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        w.close()
    assert p.returncode == code, err
    assert err.decode().strip() == f"smbwire: error: {line}"
    assert sorted(os.listdir(out)) == ["old.parquet"]
    assert (out / "old.parquet").read_bytes() == b"an earlier ledger"


def test_a_complete_run_replaces_earlier_outputs(tmp_path, cap):
    ledger, ev = tmp_path / "l.parquet", tmp_path / "e.jsonl"
    ledger.write_bytes(b"old")
    ev.write_bytes(b"old")
    r = run("analyze", str(cap), "--ledger", str(ledger), "--evidence", str(ev), "--annotate",
            str(tmp_path / "a.pcapng"), "-q")
    assert r.exit_code == 0, r.output
    assert ledger.read_bytes()[:4] == b"PAR1" and ledger.read_bytes()[-4:] == b"PAR1"
    assert json.loads(ev.read_text().splitlines()[0])["sends"]
    assert sorted(os.listdir(tmp_path)) == ["a.pcapng", "e.jsonl", "in.pcap", "l.parquet"]
    assert os.stat(tmp_path / "a.pcapng").st_mode & 0o777 == 0o600


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_an_evidence_file_that_cannot_be_written_fails_the_run_in_one_line(tmp_path, cap):
    """A full disk under --evidence was counted as 39,092 "anomalies in the input" (one per
    duplicated payload tried) and the run exited 0 without the file; now the first error
    stops the writing and the run ends with one line, exit 2, as with a ledger that cannot
    be written (whose message no longer starts "External:")."""
    r = run("analyze", str(cap), "--evidence", "/dev/full", "-q")
    refused(r, "/dev/full: cannot write evidence file: No space left on device")
    r = run("analyze", str(cap), "--ledger", "/dev/full", "-q")
    refused(r, "/dev/full: cannot write ledger: No space left on device")
    ledger = tmp_path / "l.parquet"
    assert run("analyze", str(cap), "--ledger", str(ledger), "-q").exit_code == 0
    refused(run("attribute", str(ledger), "--evidence", "/dev/full", "-q"),
            "/dev/full: cannot write evidence file: No space left on device")


def test_an_ignored_sigterm_stays_ignored(tmp_path):
    """The SIGTERM handler goes only over the default: a caller that ignores SIGTERM for its
    children keeps it ignored (the run goes on to its end)."""
    import signal
    import subprocess
    import sys
    import time

    fifo = tmp_path / "cap.fifo"
    os.mkfifo(fifo)
    p = subprocess.Popen([sys.executable, "-m", "smbwire", "analyze", str(fifo), "-q", "--json", "-"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
    try:
        with open(fifo, "wb") as w:
            data = CAP.read_bytes()
            w.write(data[:1_500_000])
            w.flush()
            time.sleep(1.5)
            p.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            assert p.poll() is None, "an ignored SIGTERM stopped the run"
            w.write(data[1_500_000:])
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert json.loads(out)["totals"]["payload_bytes"] > 0
