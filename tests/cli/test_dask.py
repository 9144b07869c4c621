"""`analyze --dask`: decoding and hashing as Dask tasks (one per shard of the connections),
the ordered stage once over their ledger parts, and the result one process gives: the same
JSON apart from `analysis` (timing, shard count, the cluster) and the same evidence file,
byte for byte.

The cluster is real: a `dask scheduler` and two `dask worker` processes (one thread each) that
this module starts on 127.0.0.1 with free ports, once, and ends by their PIDs; one test runs a
LocalCluster (worker processes). The inputs are cut and copied from synthesizer captures with a
small pcap writer: several rotated files per port, a second port holding SPAN copies of part of
the first's frames, connections cut by file boundaries, RDMA and TCP together."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from smbwire import _core, cluster, engine
from smbwire.cli import cli
from smbwire.errors import InputError
from cli.test_cli_errors import assert_one_line_error
from paths import CAPTURES, PUBLIC

MiB = 1 << 20
TOPOLOGY = CAPTURES / "s2d-two-node.toml"
DASK = [sys.executable, "-m", "dask"]


# --- inputs -----------------------------------------------------------------------------------


def read_pcap(path: Path) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """(global header, [(record header, frame bytes)]) of a little-endian pcap."""
    data = path.read_bytes()
    assert data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"), "little-endian pcap expected"
    head, off, frames = data[:24], 24, []
    while off < len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        frames.append((data[off:off + 16], data[off + 16:off + 16 + incl]))
        off += 16 + incl
    return head, frames


def write_pcap(path: Path, head: bytes, frames: list[tuple[bytes, bytes]]) -> Path:
    with open(path, "wb") as f:
        f.write(head)
        for rec, frame in frames:
            f.write(rec)
            f.write(frame)
    return path


def shifted(rec: bytes, ns: int, nanosecond: bool) -> bytes:
    """The record header `ns` nanoseconds later (a SPAN copy seen on another port)."""
    sec, frac, incl, orig = struct.unpack("<IIII", rec)
    unit = 1_000_000_000 if nanosecond else 1_000_000
    frac += ns if nanosecond else ns // 1000
    return struct.pack("<IIII", sec + frac // unit, frac % unit, incl, orig)


def rotate(src: Path, prefix: Path, parts: int) -> list[Path]:
    """SRC cut into PARTS files of about the same number of frames (PREFIX-0.pcap, ...): every
    connection of SRC crosses the boundaries."""
    head, frames = read_pcap(src)
    step = -(-len(frames) // parts)
    return [write_pcap(Path(f"{prefix}-{i}.pcap"), head, frames[i * step:(i + 1) * step]) for i in range(parts)]


def span_copies(src: Path, prefix: Path, start: float, end: float, parts: int) -> list[Path]:
    """A second mirror port: copies of the frames of SRC from fraction START to END of it,
    1 µs later, rotated into PARTS files."""
    head, frames = read_pcap(src)
    nano = head[:4] == b"\x4d\x3c\xb2\xa1"
    copies = [(shifted(rec, 1000, nano), f) for rec, f in frames[int(len(frames) * start):int(len(frames) * end)]]
    whole = write_pcap(Path(f"{prefix}-all.pcap"), head, copies)
    out = rotate(whole, prefix, parts)
    whole.unlink()
    return out


def retimed(src: Path, dst: Path, start: float) -> Path:
    """SRC with every frame moved by the same amount so that the first is at START (epoch
    seconds): a capture of other hosts interleaved with a generated one."""
    head, frames = read_pcap(src)
    nano = head[:4] == b"\x4d\x3c\xb2\xa1"
    sec, frac = struct.unpack_from("<II", frames[0][0])
    first = sec * 10**9 + frac * (1 if nano else 1000)
    delta = int(start * 10**9) - first
    out = []
    for rec, f in frames:
        sec, frac, incl, orig = struct.unpack("<IIII", rec)
        t = sec * 10**9 + frac * (1 if nano else 1000) + delta
        out.append((struct.pack("<IIII", t // 10**9, t % 10**9 // (1 if nano else 1000), incl, orig), f))
    return write_pcap(dst, head, out)


def first_time(path: Path) -> float:
    head, frames = read_pcap(path)
    sec, frac = struct.unpack_from("<II", frames[0][0])
    return sec + frac / (1e9 if head[:4] == b"\x4d\x3c\xb2\xa1" else 1e6)


def synth(tmp: Path, name: str, **spec) -> Path:
    path = tmp / f"{name}.pcap"
    _core.synth(json.dumps({"seed": 3, "io_size": 256 << 10, **spec}), str(path))
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, list[Path]]:
    tmp = tmp_path_factory.mktemp("dask-inputs")
    tcp = synth(tmp, "tcp", scenario="nested4", bytes=4 * MiB, channels=2, retransmit=0.01, reorder=0.01)
    roce = synth(tmp, "roce", scenario="redirect4", bytes=2 * MiB, transport="rocev2", channels=2)
    port_a = rotate(tcp, tmp / "porta", 3)
    # Port B reaches the collector through an ERSPAN session (a remote mirror): the same frames
    # inside GRE, whose tunnel counts every path must sum alike.
    tcp_erspan = synth(tmp, "tcp-erspan", scenario="nested4", bytes=4 * MiB, channels=2, retransmit=0.01,
                       reorder=0.01, encap="erspan2")
    port_b = span_copies(tcp_erspan, tmp / "portb", 0.3, 0.7, 2)
    # Other hosts' traffic moved into the RoCE capture's time span: SMB 3.0.2 over TCP (Windows)
    # and iWARP. (Two generated captures would reuse one server's SessionIds and TreeIds at once,
    # which no server does.)
    start = first_time(roce)
    smb = retimed(PUBLIC / "smb302-reads-writes.pcap", tmp / "smb302.pcap", start)
    iwarp = retimed(PUBLIC / "rdma-iwarp-read-write-long-run-markers.pcap", tmp / "iwarp.pcap", start + 0.0005)
    return {
        # Port A rotated 3 times, port B (SPAN copies of the middle 40 % of A, over ERSPAN) twice.
        "rotated-span": port_a + port_b,
        # RoCEv2 rotated twice, SMB over TCP rotated twice and iWARP, interleaved in time.
        "rdma-tcp": rotate(roce, tmp / "roce", 2) + rotate(smb, tmp / "smb", 2) + [iwarp],
    }


# --- the cluster ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(procs: list[subprocess.Popen]) -> None:
    """End the processes this module started, by their PIDs."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@contextlib.contextmanager
def dask_cluster(logs: Path, workers: int = 2):
    """`dask scheduler` and `workers` `dask worker` processes (one thread each, each under its
    nanny, which starts it again if it dies) on 127.0.0.1; yields the scheduler's address and
    the worker processes. Ends them by PID."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    try:
        procs.append(subprocess.Popen(
            DASK + ["scheduler", "--host", "127.0.0.1", "--port", str(port), "--dashboard-address", f"127.0.0.1:{free_port()}"],
            stdout=subprocess.DEVNULL, stderr=open(logs / "scheduler.log", "wb"), env=env))
        started = []
        for i in range(workers):
            w = subprocess.Popen(
                DASK + ["worker", address, "--host", "127.0.0.1", "--nthreads", "1", "--nworkers", "1",
                        "--no-dashboard", "--name", f"w{i}", "--death-timeout", "60"],
                stdout=subprocess.DEVNULL, stderr=open(logs / f"worker{i}.log", "wb"), env=env)
            procs.append(w)
            started.append(w)
        from distributed import Client

        with Client(address, timeout=30) as c:
            c.wait_for_workers(workers, timeout=60)
            assert sum(c.nthreads().values()) == workers
        yield {"address": address, "workers": started, "logs": logs}
    finally:
        stop(procs[::-1])


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """A cluster of two one-thread workers for the module's tests."""
    with dask_cluster(tmp_path_factory.mktemp("dask-logs")) as c:
        yield c


@pytest.fixture(scope="module")
def long_input(tmp_path_factory) -> Path:
    """A capture whose shard tasks run long enough to be interrupted: 8 channels of 1 MiB writes,
    MSS 1448.
    (2026-11-27, 2 cores: its 4 tasks take 0.8-1.4 s each on two one-thread workers; the run
    ends about 2.4 s after it starts, and the Ctrl-C test's SIGINT lands at 1.0-1.4 s.)"""
    tmp = tmp_path_factory.mktemp("dask-long")
    path = tmp / "long.pcap"
    _core.synth(json.dumps({"seed": 5, "scenario": "nested4", "bytes": 384 * MiB, "channels": 8, "mss": 1448}), str(path))
    return path


def shard_tasks(client) -> dict[str, list[str]]:
    """The smbwire shard tasks each worker is running now."""
    return {w: [k for k in keys if "smbwire-shard-" in str(k)] for w, keys in client.processing().items()}


# --- running ----------------------------------------------------------------------------------


def run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


def analyse(tmp_path, name, files, *options):
    out, ev = tmp_path / f"{name}.json", tmp_path / f"{name}.jsonl"
    run("analyze", *files, *options, "--json", out, "--evidence", ev, "-q")
    r = json.loads(out.read_text())
    return r, r.pop("analysis"), ev.read_bytes()


def assert_same_as_one_process(tmp_path, files, dask_options, *options):
    one, _, ev1 = analyse(tmp_path, "one", files, "--threads", "1", *options)
    many, analysis, evn = analyse(tmp_path, "dask", files, *dask_options, *options)
    diff = sorted(k for k in set(one) | set(many) if one.get(k) != many.get(k))
    assert not diff, {k: (one.get(k), many.get(k)) for k in diff[:3]}
    assert list(many) == list(one)
    assert evn == ev1
    assert one["accounting"]["reconciled"]
    return one, analysis


@pytest.mark.parametrize("case", ["rotated-span", "rdma-tcp"])
def test_a_scheduler_with_two_worker_processes_gives_the_one_process_result(tmp_path, scheduler, inputs, case):
    files = inputs[case]
    work = tmp_path / "work"
    work.mkdir()
    r, analysis = assert_same_as_one_process(
        tmp_path, files, ("--dask", scheduler["address"], "--work-dir", work, "--threads", "3"), "-t", TOPOLOGY)
    assert analysis["threads"] == 3
    d = analysis["dask"]
    assert (d["scheduler"], d["workers"], d["shards"]) == (scheduler["address"], 2, 3)
    assert len(d["task_seconds"]) == 3 and d["part_bytes"] > 0 and d["part_rows"] > 0
    assert list(work.iterdir()) == []  # the run directory is removed
    assert r["totals"]["payload_bytes"] > 0 and r["totals"]["dup_ratio"] > 1
    assert [i["path"] for i in r["inputs"]] == [str(f) for f in files]
    if case == "rotated-span":  # port B's frames came over ERSPAN, and were found duplicates of A's
        assert set(r["tunnels"]) == {"erspan2"} and r["tunnels"]["erspan2"]["frames"] > 0
        # By input: port A's three files came in none, port B's two in ERSPAN, summing to it.
        per = [i["tunnels"] for i in r["inputs"]]
        assert per[:3] == [{}, {}, {}] and all(set(t) == {"erspan2"} for t in per[3:]), per
        assert sum(t["erspan2"]["frames"] for t in per[3:]) == r["tunnels"]["erspan2"]["frames"]
        assert sum(t["erspan2"]["bytes"] for t in per[3:]) == r["tunnels"]["erspan2"]["bytes"]
        assert r["tcp"]["mirror_duplicate_frames"] >= r["tunnels"]["erspan2"]["frames"] // 2
    if case == "rdma-tcp":  # both transports carried payload
        assert r["rdma"]["linked_transfers"] > 0 and r["tcp"]["flows"] > 0
        assert {e["src"] for e in r["edges"] if e["payload_bytes"] > 0} >= {"owner", "127.0.0.1"}


def test_relative_paths_are_named_as_given_and_the_ledger_replays(tmp_path, scheduler, inputs, monkeypatch):
    """Tasks read absolute paths; the result names the inputs as given. The ledger the merge
    writes gives the same result through `smbwire attribute`; shards default to the
    cluster's threads."""
    files = inputs["rotated-span"]
    monkeypatch.chdir(files[0].parent)
    rel = [f.name for f in files]
    work = tmp_path / "work"
    work.mkdir()
    ledger = tmp_path / "l.parquet"
    # A missing file beside usable ones is skipped with a warning naming it as given.
    one, _ = assert_same_as_one_process(tmp_path, rel + ["missing.pcap"],
                                        ("--dask", scheduler["address"], "--work-dir", work, "--ledger", ledger))
    assert [i["path"] for i in one["inputs"]] == rel
    assert [f["path"] for f in one["findings"] if f["code"] == "input_skipped"] == ["missing.pcap"]
    run("attribute", ledger, "--json", tmp_path / "a.json", "--evidence", tmp_path / "a.jsonl", "-q")
    got = json.loads((tmp_path / "a.json").read_text())
    analysis = got.pop("analysis")
    assert "threads" in analysis
    want = json.loads((tmp_path / "dask.json").read_text())
    from io import StringIO

    from rich.console import Console
    from smbwire.report import render_report

    text = StringIO()
    render_report(want, Console(file=text, width=200), top=3)
    assert f"2 tasks on 2 workers of Dask scheduler {scheduler['address']}" in text.getvalue()
    assert want.pop("analysis")["threads"] == 2
    # The ledger keeps the absolute paths the tasks read.
    got = json.loads(json.dumps(got).replace(str(files[0].parent) + "/", ""))
    assert {k for k in want if want[k] != got.get(k)} == set()
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "dask.jsonl").read_bytes()


def test_a_local_cluster_of_worker_processes_gives_the_one_process_result(tmp_path, inputs):
    r, analysis = assert_same_as_one_process(tmp_path, inputs["rdma-tcp"], ("--dask",), "--assume-members")
    assert analysis["dask"]["scheduler"] == "local"
    assert analysis["dask"]["workers"] == engine.default_threads()
    assert analysis["threads"] == engine.default_threads()


def test_progress_reports_tasks_bytes_and_workers(tmp_path, scheduler, inputs):
    states = []
    links = []
    files = inputs["rdma-tcp"]
    r = cluster.analyze_dask(files, address=scheduler["address"], work_dir=tmp_path, shards=4,
                             progress=states.append, on_dashboard=links.append)
    size = sum(f.stat().st_size for f in files)
    assert r["analysis"]["threads"] == 4
    assert links and links[0].startswith("http://127.0.0.1:")
    decode = [s for s in states if s["stage"] == "decode"]
    assert decode[-1]["shards_done"] == 4 and decode[-1]["read_bytes"] == decode[-1]["total_bytes"] == 4 * size
    # Both worker processes ran tasks (4 tasks on 2 idle one-thread workers).
    assert len(decode[-1]["workers"]) == 2 and all(w.startswith("tcp://127.0.0.1:") for w in decode[-1]["workers"])
    assert sum(decode[-1]["workers"].values()) == 4 * size
    assert states[-1]["stage"] == "merge"
    assert [s["shards_done"] for s in decode] == sorted(s["shards_done"] for s in decode)


# --- errors -----------------------------------------------------------------------------------


def test_an_unreachable_scheduler_is_one_line(tmp_path):
    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens
    t0 = time.monotonic()
    r = CliRunner().invoke(cli, ["analyze", str(CAPTURES / "mirror2-1MiB.pcap"), "--dask", address,
                                 "--work-dir", str(tmp_path), "--dask-timeout", "1", "-q"])
    assert_one_line_error(r, 2, address, "unreachable within 1 s")
    assert time.monotonic() - t0 < 20


def test_a_file_no_worker_can_decode_is_one_line_naming_the_worker(tmp_path, scheduler):
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"this is not a capture file\n" * 10)
    r = CliRunner().invoke(cli, ["analyze", str(junk), "--dask", scheduler["address"], "--work-dir",
                                 str(tmp_path), "-q"])
    line = assert_one_line_error(r, 2, "worker tcp://127.0.0.1:", str(junk))
    assert "Traceback" not in line


def test_a_file_the_workers_cannot_read_is_one_line_naming_the_worker(tmp_path, scheduler, monkeypatch):
    """A file this machine has and the workers do not (here: removed after the client's check)."""
    gone = tmp_path / "gone.pcap"
    monkeypatch.setattr(engine, "check_inputs", lambda paths: [os.fspath(p) for p in paths])
    with pytest.raises(InputError) as e:
        cluster.analyze_dask([gone], address=scheduler["address"], work_dir=tmp_path)
    msg = str(e.value)
    assert msg.startswith("worker tcp://127.0.0.1:") and str(gone) in msg and "\n" not in msg
    assert [p.name for p in tmp_path.iterdir()] == []  # the run directory is removed


def test_workers_of_another_engine_build_are_refused_in_one_line(tmp_path, scheduler, monkeypatch):
    """The package version is the same on every build: the engine's source fingerprint tells
    builds apart. Here this process claims another build than the worker processes run."""
    real = cluster._engine(_core)
    assert re.fullmatch(r"\d+\.\d+\.\d+\+[0-9a-f]{16}", real), real
    monkeypatch.setattr(cluster, "_engine", lambda core: "0.1.0+0000000000000000")
    with pytest.raises(cluster.UserError) as e:
        cluster.analyze_dask([CAPTURES / "mirror2-1MiB.pcap"], address=scheduler["address"], work_dir=tmp_path)
    msg = str(e.value)
    assert msg.startswith("worker tcp://127.0.0.1:") and f"runs engine {real}" in msg and "\n" not in msg
    assert "this machine 0.1.0+0000000000000000" in msg


@pytest.mark.parametrize("args,needles", [
    (["--dask", "ADDR", "--keys", "K"], ["--keys cannot run with --dask"]),
    (["--dask", "ADDR"], ["needs --work-dir"]),
    (["--dask", "ADDR", "--work-dir", "MISSING"], ["--work-dir", "not a directory"]),
    (["--work-dir", "WORK"], ["--work-dir is for --dask"]),
    (["--dask", "not an address"], ["not a scheduler address"]),
    # As root access() calls it writable but nothing can be made in it ("cannot make the run
    # directory there"; it was an internal error, FileNotFoundError); otherwise "not writable".
    (["--dask", "ADDR", "--work-dir", "/proc"],
     ["--work-dir /proc: " + ("cannot make the run directory there" if os.geteuid() == 0 else "not writable")]),
])
def test_options_it_cannot_honour_are_refused_in_one_line(tmp_path, args, needles):
    keys = tmp_path / "keys.txt"
    keys.write_text("0x0000000000000001,00112233445566778899aabbccddeeff\n")
    subst = {"ADDR": "tcp://127.0.0.1:9", "K": str(keys), "MISSING": str(tmp_path / "nope"), "WORK": str(tmp_path)}
    r = CliRunner().invoke(cli, ["analyze", str(CAPTURES / "mirror2-1MiB.pcap")] + [subst.get(a, a) for a in args])
    assert_one_line_error(r, 2, *needles)


def test_standard_input_is_refused(tmp_path):
    r = CliRunner().invoke(cli, ["analyze", "-", "--dask", "-q"], input=b"")
    assert_one_line_error(r, 2, "standard input")


def test_without_dask_the_cli_does_not_import_it():
    code = "import sys; import smbwire.cli; assert 'distributed' not in sys.modules and 'dask' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_ctrl_c_stops_the_run_and_the_tasks_and_removes_the_run_directory(tmp_path, scheduler, long_input):
    """SIGINT while shard tasks run: exit 130 with one line, the tasks stop on the cluster (the
    run's cancel flag, looked at every second by each task), the run directory is gone."""
    from distributed import Client

    work = tmp_path / "work"
    work.mkdir()
    err = tmp_path / "err.txt"
    p = subprocess.Popen([sys.executable, "-m", "smbwire", "analyze", str(long_input), "--dask", scheduler["address"],
                          "--work-dir", str(work), "--threads", "4", "-q", "--json", str(tmp_path / "out.json")],
                         stdout=subprocess.DEVNULL, stderr=open(err, "wb"))
    try:
        with Client(scheduler["address"], timeout=30) as c:
            deadline = time.monotonic() + 60
            while not any(shard_tasks(c).values()):
                assert p.poll() is None and time.monotonic() < deadline, err.read_text()
                time.sleep(0.05)
            p.send_signal(signal.SIGINT)
            assert p.wait(timeout=30) == 130
            deadline = time.monotonic() + 20
            while any(shard_tasks(c).values()):
                assert time.monotonic() < deadline, f"tasks still running: {shard_tasks(c)}"
                time.sleep(0.1)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    lines = err.read_text().strip().splitlines()
    assert lines == ["smbwire: error: interrupted"] and "Traceback" not in err.read_text(), lines
    assert list(work.iterdir()) == []
    assert not (tmp_path / "out.json").exists()


def test_a_worker_killed_while_running_a_task_is_replaced_and_the_result_is_exact(tmp_path_factory, long_input):
    """SIGKILL to a worker process in the middle of a shard task: its nanny starts it again,
    the scheduler runs the task again, and the result is the one-process result."""
    import psutil
    from distributed import Client

    tmp = tmp_path_factory.mktemp("dask-kill")
    one = tmp / "one.json"
    run("analyze", long_input, "--threads", "1", "-q", "--json", one)
    with dask_cluster(tmp) as cl, Client(cl["address"], timeout=30) as c:
        pids = c.run(os.getpid)  # worker address -> the worker process (the nanny's child)
        out = tmp / "dask.json"
        p = subprocess.Popen([sys.executable, "-m", "smbwire", "analyze", str(long_input), "--dask", cl["address"],
                              "--work-dir", str(tmp), "--threads", "4", "-q", "--json", str(out)],
                             stdout=subprocess.DEVNULL, stderr=open(tmp / "err.txt", "wb"))
        try:
            deadline = time.monotonic() + 60
            while True:
                busy = [w for w, keys in shard_tasks(c).items() if keys]
                if busy:
                    break
                assert p.poll() is None and time.monotonic() < deadline, (tmp / "err.txt").read_text()
                time.sleep(0.02)
            victim = pids[busy[0]]
            assert psutil.Process(victim).parent().pid in [w.pid for w in cl["workers"]]  # under a nanny we started
            os.kill(victim, signal.SIGKILL)
            assert p.wait(timeout=300) == 0, (tmp / "err.txt").read_text()
            # The scheduler saw the worker go while the run went on.
            assert f"Remove worker addr: {busy[0]} " in (tmp / "scheduler.log").read_text()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        # The worker came back (its nanny started it again) under a new process.
        c.wait_for_workers(2, timeout=60)
        assert victim not in c.run(os.getpid).values()
    a, b = json.loads(one.read_text()), json.loads(out.read_text())
    a.pop("analysis"), b.pop("analysis")
    assert a == b


def test_a_worker_that_died_on_every_try_is_one_line_naming_the_shard():
    """Dask reruns a task whose worker died; after its allowed failures it gives KilledWorker."""
    from types import SimpleNamespace

    from distributed import KilledWorker

    class Died:
        key = "smbwire-shard-2-of-4-abcdef"
        status = "error"

        def exception(self):
            return KilledWorker(self.key, SimpleNamespace(address="tcp://10.0.0.7:4000"), 3)

    import distributed

    e = cluster._task_error(distributed, Died(), None)
    assert isinstance(e, cluster.UserError)
    assert str(e).startswith("shard 2: worker died while running it") and "tcp://10.0.0.7:4000" in str(e)


def test_without_distributed_installed_it_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` raises ImportError
    r = CliRunner().invoke(cli, ["analyze", str(CAPTURES / "mirror2-1MiB.pcap"), "--dask", "-q"])
    assert_one_line_error(r, 2, "pip install 'smbwire[dask]'")
