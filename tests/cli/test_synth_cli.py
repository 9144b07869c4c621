"""`smbwire synth` as a new user meets it: the scenarios in --help, the format by file name."""

from __future__ import annotations

import subprocess
import sys

import pytest

from smbwire import engine


def smbwire(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smbwire", *args], capture_output=True, text=True)


def test_help_lists_every_scenario_and_only_transports_that_work():
    r = smbwire("synth", "--help")
    assert r.returncode == 0, r.stderr
    names = [s["name"] for s in engine.synth_scenarios()]
    assert names == ["mirror2", "nested4", "six", "redirect4", "read-nonowner", "read-owner"]
    assert "Scenarios" in r.stdout
    for n in names:
        assert f"  {n}" in r.stdout, n
    assert "smbdirect" not in r.stdout
    # Every transport the help names is accepted.
    for t in ("tcp", "rocev2", "rocev1", "infiniband", "iwarp"):
        assert t in r.stdout


@pytest.mark.parametrize("name,magic", [("x.pcapng", b"\x0a\x0d\x0d\x0a"), ("x.pcap", b"\x4d\x3c\xb2\xa1")])
def test_output_format_follows_the_file_name(tmp_path, name, magic):
    out = tmp_path / name
    r = smbwire("synth", "mirror2", "-o", str(out), "--bytes", "1MiB")
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:4] == magic
    # tshark reads it as that format, and the analysis is the same either way.
    kind = subprocess.run(["capinfos", "-t", "-M", str(out)], capture_output=True, text=True).stdout
    assert ("pcapng" in kind) == name.endswith(".pcapng"), kind
    res = engine.analyze([str(out)])
    assert res["totals"]["payload_bytes"] == 1 << 20
