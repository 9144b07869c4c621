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


def being_written(pid: int, directory) -> int | None:
    """Bytes of the file process `pid` is writing in `directory`: the unnamed one it created
    there (O_TMPFILE: `/proc/PID/fd` shows it as `DIR/#INODE (deleted)`), or a temporary name
    beside the output on a filesystem without O_TMPFILE; None before it exists."""
    import os

    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            target = os.readlink(f"{fds}/{fd}")
            if target.startswith(f"{directory}/#") or target.startswith(f"{directory}/.smbwire-"):
                return os.stat(f"{fds}/{fd}").st_size
        except OSError:
            continue
    return None


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_ctrl_c_stops_a_long_synth_and_leaves_the_path_as_it_was(tmp_path, how):
    """`synth --bytes 4GiB`: Ctrl-C was honoured only when the whole capture had been written
    (a 1 TiB one: hours). The writer now asks every 64 MiB; the capture takes its name only
    once complete, so the earlier file at the path stays and no temporary file is left. Killed
    outright (SIGKILL, the OOM killer), the run leaves nothing either: the capture being
    written has no name until it is complete, and the kernel frees it with the process."""
    import os
    import signal
    import time

    out = tmp_path / "big.pcap"
    out.write_bytes(b"earlier")
    p = subprocess.Popen([sys.executable, "-m", "smbwire", "synth", "nested4", "-o", str(out), "--bytes", "4GiB"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # Until the capture being written has passed 128 MiB (or the run ended).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and p.poll() is None:
            size = being_written(p.pid, tmp_path)
            if size is not None and size > 128 << 20:
                # Nothing of it is visible in the directory meanwhile.
                assert sorted(os.listdir(tmp_path)) == ["big.pcap"]
                break
            time.sleep(0.05)
        assert p.poll() is None, "synth ended before it was interrupted"
        sent = time.monotonic()
        p.send_signal(getattr(signal, how))
        _, err = p.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if how == "SIGINT":
        assert p.returncode == 130 and err.strip() == "smbwire: error: interrupted", err
        assert took < 5, f"Ctrl-C took {took:.1f} s to be honoured"
    else:
        assert p.returncode == -signal.SIGKILL
    assert out.read_bytes() == b"earlier"
    assert sorted(os.listdir(tmp_path)) == ["big.pcap"]
