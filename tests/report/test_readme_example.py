"""README's worked example is what the command prints: the command line in its code block is
run (the real engine, on the bundled capture, a 100-column terminal) and every line the README
shows before its closing "..." must be the command's line at that place."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def example() -> tuple[list[str], list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Worked example"):]
    block = section[section.index("```\n") + 4:]
    block = block[: block.index("```\n")]
    lines = block.rstrip("\n").splitlines()
    assert lines[0].startswith("$ smbwire analyze "), lines[0]
    assert lines[-1] == "...", lines[-1]
    return shlex.split(lines[0][2:]), lines[1:-1]


def test_readme_worked_example_is_what_the_command_prints():
    argv, shown = example()
    assert len(shown) > 40  # the headline, edges, breakdown, nodes and one duplicated payload
    env = dict(os.environ, COLUMNS="100", NO_COLOR="1", TERM="dumb")
    r = subprocess.run([sys.executable, "-m", "smbwire", *argv[1:]], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    printed = [line.rstrip() for line in r.stdout.splitlines()]
    assert printed[: len(shown)] == shown
