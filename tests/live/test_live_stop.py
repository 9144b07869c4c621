"""`smbwire live` on the veth pair of tests/live/test_sources.py (namespace B's end, traffic
from A, 198.18.0.0/15 only): stopping with Ctrl-C, plain mode without --plain, --port,
--write rotation, --window.

Needs root (CI runs as root); nothing here skips.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from live.test_sources import Lab
from realtraffic.analyzer_cli import analyzer_command




class Live:
    """`smbwire live` in namespace B on its veth end; `ip netns exec` execs it, so the pid
    is smbwire's own. stdout and stderr are pipes (not a terminal) read into files."""

    def __init__(self, lab: Lab, tmp: Path, *args: str, plain: bool = True):
        self.json = tmp / "live.json"
        self.out_path, self.err_path = tmp / "live.stdout", tmp / "live.stderr"
        self._out, self._err = open(self.out_path, "w+"), open(self.err_path, "w+")
        cmd = ["ip", "netns", "exec", lab.b, *analyzer_command(), "live", "-i", lab.vb, "--json",
               str(self.json), *(["--plain"] if plain else []), *args]
        self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err)
        deadline = time.monotonic() + 30
        while "capturing on" not in self.err():
            if self.p.poll() is not None or time.monotonic() > deadline:
                self.wait(0)
                raise AssertionError(f"smbwire live did not start ({self.p.returncode}): {self.err()}")
            time.sleep(0.05)

    def err(self) -> str:
        return self.err_path.read_text()

    def out(self) -> str:
        return self.out_path.read_text()

    def status_lines(self) -> list[str]:
        return [l for l in self.out().splitlines() if " iface=" in l]

    def wait_status(self, n: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while len(self.status_lines()) < n:
            assert self.p.poll() is None and time.monotonic() < deadline, self.err()
            time.sleep(0.05)

    def wait(self, timeout: float = 60) -> int | None:
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            if self.p.poll() is None:
                self.p.kill()  # our own child, by its pid
                self.p.wait()
            self._out.close()
            self._err.close()

    def result(self) -> dict:
        return json.loads(self.json.read_text())


def test_ctrl_c_prints_the_report_and_writes_json_even_when_pressed_again(lab, tmp_path):
    """SIGINT stops it with exit 0, the final report and --json; more SIGINTs, every 10 ms
    from then on until it exits (so some land in the drain, the JSON write and the report),
    change nothing."""
    live = Live(lab, tmp_path, "--backend", "ebpf", "--require-ebpf")
    lab.tcp_transfer(445, 200_000)
    live.wait_status(2)
    live.p.send_signal(signal.SIGINT)
    sent = 1
    deadline = time.monotonic() + 30
    while live.p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
        try:
            live.p.send_signal(signal.SIGINT)
            sent += 1
        except ProcessLookupError:
            break
    code = live.wait(10)
    assert code == 0, (code, live.err())
    assert sent >= 3, "SIGINTs arrived while it was stopping"
    assert "interrupted" not in live.err()
    out = live.out()
    assert "Byte accounting" in out and "Duplicate-payload ratio" in out, out[-2000:]
    r = live.result()
    assert r["live"]["iface"] == lab.vb and r["live"]["backend"] == "ebpf"
    assert r["live"]["stats"]["packets_matched"] > 200_000 // 1500
    assert r["live"]["errors"] == []


def test_plain_is_the_default_when_stdout_is_not_a_terminal(lab, tmp_path):
    live = Live(lab, tmp_path, "--duration", "3", plain=False)
    assert live.wait() == 0, live.err()
    out = live.out()
    assert "\x1b[?1049h" not in out and "\x1b[" not in out, "no full-screen view on a pipe"
    lines = live.status_lines()
    assert len(lines) >= 2, out
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d iface=" + lab.vb + " ", l) for l in lines), lines
    assert "Byte accounting" in out


def test_write_count_rotation_deletes_old_files(lab, tmp_path):
    """--write-size 256KiB --write-count 2 over ~3 MiB of traffic: many files were made, the
    older ones deleted; the two newest remain on disk, each within the size limit."""
    dest = tmp_path / "w"
    dest.mkdir()
    live = Live(lab, tmp_path, "--write", str(dest / "cap.pcapng"), "--write-size", "256KiB",
                "--write-count", "2")
    lab.tcp_transfer(445, 3 << 20)
    live.wait_status(1)
    time.sleep(1.2)
    live.p.send_signal(signal.SIGTERM)
    assert live.wait() == 0, live.err()
    w = live.result()["live"]["write"]
    on_disk = sorted(p.name for p in dest.iterdir())
    assert len(on_disk) == 2, on_disk
    assert [Path(f).name for f in w["files"]] == on_disk
    numbers = [int(re.fullmatch(r"cap-(\d{5})\.pcapng", n).group(1)) for n in on_disk]
    made = numbers[-1]
    assert made >= 8 and numbers == [made - 1, made], on_disk  # the newest two
    assert w["files_deleted"] == made - 2
    assert all((dest / n).stat().st_size <= 256 << 10 for n in on_disk)
    assert all((dest / n).stat().st_mode & 0o777 == 0o600 for n in on_disk)
    assert w["bytes_written"] > 3 << 20


def test_a_write_that_fails_is_an_error_of_the_run(lab, tmp_path):
    """--write to a device that refuses every byte (/dev/full): the analysis goes on over the
    traffic, but the capture file the user asked for stops short, so the run ends with exit
    status 1 and one error line saying so, after the report; the JSON's live.errors has it
    (the live view's write line only said so in red, and the exit status was 0)."""
    live = Live(lab, tmp_path, "--write", "/dev/full")
    lab.tcp_transfer(445, 1 << 20)
    live.wait_status(1)
    time.sleep(1.2)
    live.p.send_signal(signal.SIGTERM)
    assert live.wait() == 1, live.err()
    r = live.result()
    assert r["live"]["write"]["error"].startswith("/dev/full: No space left on device"), r["live"]["write"]
    assert r["tcp"]["flows"] >= 1 and r["inputs"][0]["frames"] > 0, "the analysis went on"
    frames = r["live"]["write"]["frames_written"]
    want = (f"--write: cannot write {r['live']['write']['error']}: the capture files hold only the "
            f"{frames} frame{'' if frames == 1 else 's'} written before it; the analysis went on")
    assert r["live"]["errors"] == [want]
    assert [l for l in live.err().splitlines() if l.startswith("smbwire: error:")] == [f"smbwire: error: {want}"]
    assert "Byte accounting" in live.out(), "the report is still printed"


def test_window_reaches_the_engine(lab, tmp_path):
    """--window sets the dedupe window of the live pipeline: in the result, in the dedupe
    index and in the report."""
    live = Live(lab, tmp_path, "--window", "7.5", "--duration", "2")
    assert live.wait() == 0, live.err()
    r = live.result()
    assert r["window_seconds"] == 7.5
    index = r.get("index") or {}
    assert index.get("window_seconds", 7.5) == 7.5, index
    assert "window 7.50 s" in live.out(), [l for l in live.out().splitlines() if "window" in l][:3]


@pytest.mark.parametrize("backend", ["ebpf", "af-packet"])
def test_port_adds_to_the_default_ports(lab, tmp_path, backend):
    """`--port 8080` captures 8080 as well as 445; an unlisted port (8081) is not captured."""
    live = Live(lab, tmp_path, "--port", "8080", "--backend", backend)
    for port in (8080, 445, 8081):
        lab.tcp_transfer(port, 100_000)
    live.wait_status(1)
    time.sleep(1.2)
    live.p.send_signal(signal.SIGTERM)
    assert live.wait() == 0, live.err()
    st = live.result()["live"]["stats"]
    ends = sorted(f["flow"].rsplit(":", 1)[1] for f in st["flows"])
    assert ends == ["445 tcp", "8080 tcp"], st["flows"]
    assert all(f["bytes"] > 100_000 for f in st["flows"])


def test_port_is_in_the_help():
    r = subprocess.run([*analyzer_command(), "live", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    help_text = " ".join(r.stdout.split())
    assert "--port PORT" in help_text and "besides 445 and 5445" in help_text, r.stdout
