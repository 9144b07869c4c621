"""fuzz/sweep.py: every capture under a directory analysed on its own; a capture the engine
refuses in one line is an outcome, not a finding; an exception of another kind, accounting
that does not reconcile or a slow file is a finding, and the exit status says so."""

from __future__ import annotations

import subprocess
import sys

from paths import CAPTURES, ROOT

SWEEP = ROOT / "fuzz" / "sweep.py"


def run(*args):
    return subprocess.run([sys.executable, str(SWEEP), *map(str, args)], capture_output=True, text=True, timeout=300)


def test_bundled_tunnel_captures_sweep_clean():
    p = run(CAPTURES / "tunnels")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1] == "27 files: 27 analysed; 0 findings"


def test_a_refused_file_is_an_outcome_and_a_slow_one_a_finding(tmp_path):
    (tmp_path / "garbage.pcap").write_bytes(b"not a capture at all")
    (tmp_path / "notes.txt").write_text("ignored: not a capture's name")
    p = run(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1] == "1 files: 1 refused (InputError); 0 findings"
    p = run(CAPTURES / "tunnels" / "vxlan.pcap", CAPTURES / "tunnels" / "geneve.pcap", "--slow", "0")
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[-1] == "2 files: 2 analysed; 2 findings"
    assert all("(over 0 s)" in line for line in lines[:-1]) and len(lines) == 3
