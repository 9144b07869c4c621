"""`smbwire live` gives up its privileges once the capture is attached: no capability in any
thread (effective, permitted, inheritable, ambient, bounding), no_new_privs, and with
`--user` another uid/gid, read from /proc while it captures; the capture still counts and
delivers exactly. On the veth pair of tests/live/test_sources.py (198.18.0.0/15 only).

Needs root (CI runs as root); nothing here skips.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from live.test_live_stop import Live
from live.test_sources import Lab
from realtraffic.analyzer_cli import analyzer_command

CAP_SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")




def task_status(pid: int) -> dict[int, dict[str, str]]:
    """/proc/PID/task/*/status of every thread, as {tid: {field: value}}."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        out[int(tid)] = dict(l.split(":\t", 1) for l in text.splitlines() if ":\t" in l)
    return out


def check_no_privilege(pid: int, uid: int, gid: int) -> None:
    threads = task_status(pid)
    assert len(threads) >= 2, "the Python thread and the capture thread"
    for tid, st in threads.items():
        for s in CAP_SETS:
            assert int(st[s], 16) == 0, (tid, s, st[s])
        assert st["NoNewPrivs"].strip() == "1", (tid, st["NoNewPrivs"])
        assert st["Uid"].split() == [str(uid)] * 4, (tid, st["Uid"])
        assert st["Gid"].split() == [str(gid)] * 4, (tid, st["Gid"])


def capture_and_check(lab: Lab, live: Live, uid: int, gid: int) -> dict:
    check_no_privilege(live.p.pid, uid, gid)
    before = lab.tcp_insegs()
    lab.tcp_transfer(445, 1 << 20)
    segs = lab.tcp_insegs() - before
    live.wait_status(2)
    check_no_privilege(live.p.pid, uid, gid)  # also with the pipeline's threads, if any
    live.p.send_signal(signal.SIGTERM)
    assert live.wait() == 0, live.err()
    r = live.result()
    st = r["live"]["stats"]
    assert st["packets_matched"] == segs == st["packets_delivered"], (st, segs)
    assert st["flow_count"] == 1 and st["ring_drops"] == 0
    assert r["analysis"]["frames"] == segs
    p = r["live"]["privileges"]
    assert p["dropped"] and p["kept"] == [] and p["threads_with_capabilities"] == 0, p
    assert p["bounding_set_empty"] and p["no_new_privs"] and (p["uid"], p["gid"]) == (uid, gid), p
    return r


@pytest.mark.parametrize("backend", ["tcx", "xdp", "af-packet"])
def test_capabilities_are_dropped_while_capturing_exactly(lab, tmp_path, backend):
    args = ["--backend", "af-packet"] if backend == "af-packet" else ["--require-ebpf", "--hook", backend]
    live = Live(lab, tmp_path, *args)
    r = capture_and_check(lab, live, 0, 0)
    assert r["live"]["backend"] == ("af-packet" if backend == "af-packet" else "ebpf")
    assert r["live"]["hook"] == (None if backend == "af-packet" else backend)
    assert r["live"]["privileges"]["user"] is None


@pytest.mark.parametrize("backend", ["tcx", "xdp"])
def test_user_switches_uid_and_gid_like_tcpdump_z(lab, tmp_path, backend):
    """`--user nobody`: every thread runs as nobody with no capability. The --json directory
    is the user's (the result is written after the drop); the --write file, created before
    the drop, is given to the user."""
    nobody = pwd.getpwnam("nobody")
    # pytest's tmp_path is under a 0700 root directory nobody cannot enter.
    with tempfile.TemporaryDirectory(prefix="smbwire-priv-", dir="/tmp") as tmp:
        top = Path(tmp)
        top.chmod(0o755)
        out = top / "out"
        out.mkdir()
        os.chown(out, nobody.pw_uid, nobody.pw_gid)
        live = Live(lab, out, "--require-ebpf", "--hook", backend, "--user", "nobody",
                    "--write", str(top / "cap.pcapng"))
        r = capture_and_check(lab, live, nobody.pw_uid, nobody.pw_gid)
        assert r["live"]["privileges"]["user"] == "nobody"
        cap = top / "cap.pcapng"
        assert (cap.stat().st_uid, cap.stat().st_gid) == (nobody.pw_uid, nobody.pw_gid)
        w = r["live"]["write"]
        assert w["frames_written"] == r["analysis"]["frames"] and w["error"] is None, w
        assert (out / "live.json").stat().st_uid == nobody.pw_uid


def test_unknown_user_is_one_line(lab, tmp_path):
    r = subprocess.run(["ip", "netns", "exec", lab.b, *analyzer_command(), "live", "-i", lab.vb, "--plain",
                        "--duration", "1", "--user", "smbwire-no-such-user"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no such user: smbwire-no-such-user" in lines[0], r.stderr


def test_json_the_user_cannot_write_is_refused_at_start(lab, tmp_path):
    """The result is written after the drop: a --json path only root may write fails at
    start, in one line, not after the capture."""
    with tempfile.TemporaryDirectory(prefix="smbwire-priv-", dir="/tmp") as tmp:
        Path(tmp).chmod(0o755)  # nobody may enter, not write
        out = Path(tmp) / "live.json"
        r = subprocess.run(["ip", "netns", "exec", lab.b, *analyzer_command(), "live", "-i", lab.vb, "--plain",
                            "--duration", "30", "--user", "nobody", "--json", str(out)],
                           capture_output=True, text=True, timeout=60)
        assert not out.exists()
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"--json {out}: not writable by nobody once privileges are dropped" in lines[0], r.stderr


def test_rotation_in_a_directory_the_user_cannot_write_is_refused_at_start(lab):
    """With --write-size, files after a rotation are created after the drop: the directory
    must be writable by --user. Checked at start, one line."""
    with tempfile.TemporaryDirectory(prefix="smbwire-priv-", dir="/tmp") as tmp:
        Path(tmp).chmod(0o755)  # root's: nobody may enter, not create files
        r = subprocess.run(["ip", "netns", "exec", lab.b, *analyzer_command(), "live", "-i", lab.vb, "--plain",
                            "--duration", "30", "--user", "nobody", "--write", f"{tmp}/cap.pcapng",
                            "--write-size", "1MiB"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"--write: {tmp} is not writable by nobody" in lines[0], r.stderr
