"""`pip install .` in a fresh virtualenv builds the engine and installs a working `smbwire`
console script (issue 2: the package must install the ordinary way, not only through make)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from paths import ROOT


def test_pip_install_in_a_fresh_venv_gives_a_working_console_script(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(ROOT)],
                         capture_output=True, text=True, timeout=1200)
    assert pip.returncode == 0, pip.stderr[-4000:]
    smbwire = venv / "bin" / "smbwire"
    assert smbwire.exists()
    out = tmp_path / "r.json"
    run = subprocess.run([str(smbwire), "analyze", str(ROOT / "captures" / "nested4-1MiB.pcap"),
                          "--topology", str(ROOT / "captures" / "s2d-two-node.toml"), "--json", str(out)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    # The installed engine is the real one: the nested mirror puts every write on the wire twice.
    edges = json.loads(out.read_text())["edges"]
    assert [(e["class"], round(e["dup_ratio"], 2)) for e in edges] == [("replication", 2.0)]
