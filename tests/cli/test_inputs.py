"""Inputs a storage engineer has besides a plain file, with the real engine: a capture piped
on standard input (`tcpdump -w - | smbwire analyze -`), a FIFO (with Ctrl-C honoured while it
has no writer), gzip/zstd/xz compressed captures recognised by content, paths that can never
be a capture (one line), and `--from`/`--to` time bounds.

A capture read any of these ways gives the same figures as the plain file; the accounting
counts the capture's own (decompressed) bytes and `inputs` says how they were read."""

from __future__ import annotations

import gzip
import json
import lzma
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from paths import CAPTURES

CAPTURE = CAPTURES / "nested4-1MiB.pcap"
TOPOLOGY = CAPTURES / "s2d-two-node.toml"


def smbwire(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smbwire", *map(str, args)], capture_output=True, **kw)


def figures(r: dict) -> dict:
    """What must not depend on how the capture was read."""
    return {k: r[k] for k in ("edges", "totals", "capture", "accounting", "anomalies", "tcp", "smb2", "top_duplicates")}


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    out = tmp_path_factory.mktemp("plain") / "r.json"
    r = smbwire("analyze", CAPTURE, "--topology", TOPOLOGY, "-q", "--json", out)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def zstd_compress(data: bytes) -> bytes:
    exe = shutil.which("zstd")
    assert exe, "zstd (Debian package zstd) is needed: `make test` installs it"
    return subprocess.run([exe, "-q", "-c"], input=data, capture_output=True, check=True).stdout


@pytest.mark.parametrize("kind", ["gzip", "zstd", "xz"])
def test_compressed_capture_gives_the_plain_figures(kind, plain, tmp_path):
    data = CAPTURE.read_bytes()
    packed = {"gzip": gzip.compress, "xz": lzma.compress, "zstd": zstd_compress}[kind](data)
    # A name that says nothing: the format is recognised by content, as Wireshark does.
    path = tmp_path / "capture.bin"
    path.write_bytes(packed)
    out = tmp_path / "r.json"
    r = smbwire("analyze", path, "--topology", TOPOLOGY, "-q", "--json", out)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert figures(res) == figures(plain)
    (inp,) = res["inputs"]
    assert inp["compression"] == kind
    assert inp["compressed_bytes"] == len(packed)
    # Accounting counts the decompressed capture bytes, and reconciles with them.
    assert inp["size_bytes"] == len(data) == res["accounting"]["input_bytes"]
    assert res["accounting"]["reconciled"] is True
    # The report says so.
    r = smbwire("analyze", path, "--topology", TOPOLOGY)
    assert r.returncode == 0, r.stderr
    assert f"({kind} " in r.stdout.decode() and "decompressed)" in r.stdout.decode()


def test_stdin(plain, tmp_path):
    out = tmp_path / "r.json"
    r = smbwire("analyze", "-", "--topology", TOPOLOGY, "-q", "--json", out, input=CAPTURE.read_bytes())
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert figures(res) == figures(plain)
    assert res["inputs"] == [{"path": "-", "size_bytes": CAPTURE.stat().st_size,
                              "frames": plain["inputs"][0]["frames"], "source": "stdin", "tunnels": {}}]
    # Compressed on stdin too (`tcpdump -w - | gzip | ...`).
    r = smbwire("analyze", "-", "--topology", TOPOLOGY, "-q", "--json", out, input=gzip.compress(CAPTURE.read_bytes()))
    assert r.returncode == 0, r.stderr
    assert figures(json.loads(out.read_text())) == figures(plain)


def test_stdin_errors():
    r = smbwire("analyze", "-", input=b"")
    assert r.returncode == 2 and r.stderr.decode().strip() == "smbwire: error: -: empty file (0 bytes), not a capture"
    r = smbwire("analyze", "-", "-", input=b"")
    assert r.returncode == 2 and "standard input given twice" in r.stderr.decode()


def test_fifo_read_as_it_is_written(plain, tmp_path):
    fifo = tmp_path / "cap.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "r.json"
    data = CAPTURE.read_bytes()

    def writer():
        time.sleep(0.5)  # smbwire is already waiting for the writer
        with open(fifo, "wb") as w:
            for i in range(0, len(data), 65536):  # in pieces, with pauses, as tcpdump writes
                w.write(data[i:i + 65536])
                w.flush()
                time.sleep(0.01)

    t = threading.Thread(target=writer)
    t.start()
    r = smbwire("analyze", fifo, "--topology", TOPOLOGY, "-q", "--json", out, timeout=60)
    t.join()
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert figures(res) == figures(plain)
    assert res["inputs"][0]["source"] == "fifo"
    assert res["inputs"][0]["size_bytes"] == len(data)


def _sigint_default():
    # Children of a non-interactive shell may start with SIGINT ignored; a user's shell does not.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("writer", ["none", "stalled"])
def test_ctrl_c_while_a_fifo_waits(writer, tmp_path):
    fifo = tmp_path / "cap.fifo"
    os.mkfifo(fifo)
    p = subprocess.Popen([sys.executable, "-m", "smbwire", "analyze", str(fifo), "-q"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_sigint_default)
    w = None
    try:
        if writer == "stalled":
            # A writer that sent part of a capture and then went quiet (a silent network).
            w = open(fifo, "wb")  # noqa: SIM115
            w.write(CAPTURE.read_bytes()[:100_000])
            w.flush()
        time.sleep(1.5)
        assert p.poll() is None, "smbwire should still be waiting"
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=10)
        assert time.monotonic() - sent < 2, "Ctrl-C took too long to be honoured"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if w is not None:
            w.close()
    assert p.returncode == 130, err
    assert err.decode().strip() == "smbwire: error: interrupted"


def test_paths_that_can_never_be_a_capture(tmp_path):
    sock_path = tmp_path / "s.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock_path))
    try:
        for path, why in [(sock_path, "is a socket, not a capture file"),
                          (tmp_path, "is a directory, not a capture file")]:
            r = smbwire("analyze", path, timeout=10)
            assert r.returncode == 2
            assert r.stderr.decode().strip() == f"smbwire: error: {path}: {why}"
    finally:
        s.close()
    # Beside a usable capture, it is skipped with a warning and the rest is analysed.
    r = smbwire("analyze", tmp_path, CAPTURE, "-q", timeout=30)
    assert r.returncode == 0
    assert "is a directory" in r.stderr.decode()


def test_time_bounds(plain, tmp_path):
    first, last = plain["capture"]["first_ts"], plain["capture"]["last_ts"]
    size = plain["accounting"]["input_bytes"]

    def run(*bounds):
        out = tmp_path / "r.json"
        r = smbwire("analyze", CAPTURE, "--topology", TOPOLOGY, "-q", "--json", out, *bounds)
        assert r.returncode == 0, r.stderr
        return json.loads(out.read_text())

    # Bounds around the whole capture: the same figures, nothing outside.
    res = run("--from", f"{first - 1:.6f}", "--to", f"{last + 1:.6f}")
    assert figures(res) == figures(plain)
    # A bound after the last frame: no frame analysed, every frame byte outside the bounds.
    res = run("--from", f"{last + 1:.6f}")
    cats = res["accounting"]["categories"]
    assert res["totals"]["payload_bytes"] == 0
    assert cats["outside_time_bounds"] + cats["capture_format"] == size
    assert res["accounting"]["reconciled"] is True
    # A slice in the middle (ISO 8601 for one end): fewer bytes, all accounted.
    mid = (first + last) / 2
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(mid))) + f".{int((mid % 1) * 1e6):06d}Z"
    res = run("--from", f"{first:.9f}", "--to", iso)
    assert 0 < res["accounting"]["categories"]["outside_time_bounds"] < size
    assert res["capture"]["last_ts"] < mid
    assert res["accounting"]["reconciled"] is True
    # Nonsense and an empty interval: one line each.
    for bounds, needle in [(("--from", "yesterday"), "is not a time"),
                           (("--from", "20", "--to", "10"), "--from time must be before the --to time"),
                           (("--to", "99999999999999999999"), "is after 2554-07-21"),
                           (("--from", "2600-01-01T00:00:00Z"), "is after 2554-07-21")]:
        r = smbwire("analyze", CAPTURE, *bounds)
        assert r.returncode == 2 and needle in r.stderr.decode(), r.stderr


def test_evidence_to_stdout(tmp_path):
    """`--evidence -` writes the evidence lines to stdout (the report goes to stderr), the same
    lines as `--evidence FILE`; with `--json -` too, one line refuses the pair."""
    capture = CAPTURES / "redirect4-1MiB.pcap"
    to_file = tmp_path / "e.jsonl"
    r = smbwire("analyze", capture, "-q", "--evidence", to_file)
    assert r.returncode == 0, r.stderr
    r = smbwire("analyze", capture, "--evidence", "-", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == to_file.read_bytes() and r.stdout.count(b"\n") >= 1
    assert b"Duplicate-payload ratio per edge" in r.stderr
    assert not (tmp_path / "-").exists(), "a file named '-' was written"
    r = smbwire("analyze", capture, "--evidence", "-", "--json", "-")
    assert r.returncode == 2
    assert r.stderr.decode().strip() == "smbwire: error: --json and --evidence cannot both be '-' (standard output)"


@pytest.mark.parametrize("fault", ["missing", "empty", "directory"])
def test_one_fault_has_one_wording_alone_or_beside_other_inputs(fault, tmp_path):
    """The error for a file given alone and the warning for the same file skipped beside a
    good one say the same thing about it."""
    bad = tmp_path / f"{fault}.pcap"
    if fault == "empty":
        bad.write_bytes(b"")
    elif fault == "directory":
        bad.mkdir()
    alone = smbwire("analyze", str(bad))
    assert alone.returncode == 2
    error = alone.stderr.decode().strip()
    assert error.startswith("smbwire: error: "), error
    reason = error[len("smbwire: error: "):]
    beside = smbwire("analyze", str(bad), str(CAPTURE), "-q", "--json", str(tmp_path / "r.json"))
    assert beside.returncode == 0, beside.stderr
    warning = beside.stderr.decode().strip()
    assert warning == f"smbwire: warning: {reason}: skipped; the report covers the 1 other input"
    want = {"missing": "no such file", "empty": "empty file (0 bytes), not a capture",
            "directory": "is a directory, not a capture file"}[fault]
    assert reason == f"{bad}: {want}"


def test_option_files_and_numbers_that_cannot_be_are_one_line(tmp_path, monkeypatch):
    """A keys file that is not text (a capture given in its place) or is too large to be one,
    and a --top past the engine's bound: one line each, exit 2 (the keys error quoted Python's
    codec; --top 20000 was cut to 10,000 without a word)."""
    binary = tmp_path / "keys.bin"
    binary.write_bytes(b"\xd4\xc3\xb2\xa1" + bytes(100))
    for args, line in [
        (("--keys", binary), f"smbwire: error: --keys {binary}: not UTF-8 text (byte 0); a keys file is lines of hex"),
        (("--top", "20000"), "smbwire: error: top must be a whole number from 0 to 10000, got 20000"),
    ]:
        r = smbwire("analyze", CAPTURE, *args, "-q")
        assert r.returncode == 2 and r.stderr.decode().strip() == line, r.stderr
    # The size bound, small here: the file is not read whole.
    from smbwire import engine
    from smbwire.errors import UserError

    big = tmp_path / "big.txt"
    big.write_text("0" * 2000)
    monkeypatch.setattr(engine, "MAX_KEYS_FILE", 1000)
    with pytest.raises(UserError, match=r"--keys .*big.txt: larger than 1,000 bytes, not a keys file"):
        engine.build_config(keys=str(big))


def _split_capture(src, n: int, out_dir) -> list[str]:
    """`src` (pcap) as `n` pcap files of consecutive records (as `tcpdump -C` rotates)."""
    import struct

    data = src.read_bytes()
    header, off, records = data[:24], 24, []
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8:off + 12])[0]
        records.append(data[off:off + 16 + incl])
        off += 16 + incl
    per = -(-len(records) // n)
    paths = []
    for i in range(n):
        p = out_dir / f"rot{i:05d}.pcap"
        p.write_bytes(header + b"".join(records[i * per:(i + 1) * per]))
        paths.append(str(p))
    return paths


def test_more_captures_than_the_soft_open_file_limit(tmp_path):
    """Every input stays open for the merge. Under the usual soft limit of 1,024 descriptors,
    the files past it were skipped ("Too many open files") and the result covered only the
    others; the engine now raises the soft limit up to the hard one, and when the hard limit
    is too low says so in one line before reading anything."""
    import resource

    paths = _split_capture(CAPTURE, 300, tmp_path)
    whole = json.loads(smbwire("analyze", CAPTURE, "-q", "--json", "-", timeout=60).stdout)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

    def limited(soft, hard_limit):
        return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard_limit))

    r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", *paths, "-q", "--json", "-"], capture_output=True,
                       timeout=120, preexec_fn=limited(100, hard))
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert len(res["inputs"]) == 300 and not [f for f in res["findings"] if f["code"] == "input_skipped"]
    assert res["totals"] == whole["totals"] and res["edges"] == whole["edges"]
    r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", *paths, "-q"], capture_output=True, timeout=120,
                       preexec_fn=limited(100, 200))
    assert r.returncode == 2
    assert r.stderr.decode() == ("smbwire: error: 300 capture files: too many to hold open at once: the open-file limit "
                                 "is 200 (ulimit -Hn), 364 are needed; merge them first (captures: mergecap -w "
                                 "merged.pcapng FILE...) or raise the limit\n")
    # `attribute` holds every ledger open likewise.
    import shutil as sh

    ledger = tmp_path / "l.parquet"
    assert smbwire("analyze", CAPTURE, "-q", "--ledger", ledger, timeout=60).returncode == 0
    ledgers = []
    for i in range(150):
        ledgers.append(str(tmp_path / f"l{i:03d}.parquet"))
        sh.copyfile(ledger, ledgers[-1])
    r = subprocess.run([sys.executable, "-m", "smbwire", "attribute", *ledgers, "-q"], capture_output=True, timeout=120,
                       preexec_fn=limited(100, 200))
    assert r.returncode == 2 and r.stderr.decode().startswith(
        "smbwire: error: 150 ledgers: too many to hold open at once: the open-file limit is 200 (ulimit -Hn), 214 are needed"), r.stderr


def test_file_names_that_are_not_utf8_are_one_line(tmp_path):
    """The engine takes file names as UTF-8 text (they appear in the JSON result): a capture,
    output or topology name holding other bytes (a Latin-1 name from an old share) is refused
    in one line naming it with the byte escaped, before anything is read or written; the same
    file through a UTF-8 symbolic link works."""
    latin1 = tmp_path / os.fsdecode(b"caf\xe9.pcap")
    shutil.copyfile(CAPTURE, latin1)
    out = tmp_path / os.fsdecode(b"r\xe9sultat.json")
    topo = tmp_path / os.fsdecode(b"topolog\xeda.toml")
    shutil.copyfile(TOPOLOGY, topo)
    cases = [
        (["analyze", latin1, "-q"], "caf\\xe9.pcap"),
        (["analyze", CAPTURE, "-q", "--json", out], "r\\xe9sultat.json"),
        (["analyze", CAPTURE, "-q", "--html", out], "r\\xe9sultat.json"),
        (["analyze", CAPTURE, "-q", "--topology", topo], "topolog\\xeda.toml"),
        (["attribute", latin1], "caf\\xe9.pcap"),
    ]
    for args, shown in cases:
        r = smbwire(*args)
        err = r.stderr.decode()
        assert r.returncode == 2, (args, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and f"{shown}: the file name is not UTF-8" in lines[0], (args, err)
        assert "symbolic link" in lines[0] and "Traceback" not in err
    assert not out.exists()
    link = tmp_path / "cafe.pcap"
    link.symlink_to(latin1)
    r = smbwire("analyze", link, "-q", "--json", tmp_path / "r.json")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "r.json").read_text())["inputs"][0]["path"] == str(link)


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_terminal_that_is_not_utf8_gets_the_report_in_its_encoding(tmp_path, encoding):
    """Under a locale whose encoding lacks the report's arrows and dashes (an ssh session in
    Latin-1, PYTHONIOENCODING=ascii), the report was an internal error on its first arrow:
    now the symbols have ASCII stand-ins, other characters (a file name) are escaped, and
    `--json -` stays UTF-8 JSON."""
    cafe = tmp_path / "café.pcap"
    shutil.copyfile(CAPTURE, cafe)
    env = {**os.environ, "PYTHONIOENCODING": encoding, "COLUMNS": "100"}
    r = smbwire("analyze", cafe, env=env)
    assert r.returncode == 0, r.stderr
    text = r.stdout.decode(encoding)
    assert "198.18.0.1 -> 198.18.0.2" in text or "198.18.0.1 → 198.18.0.2" not in text
    assert "Amplification 2.00" in text and not r.stderr
    if encoding == "ascii":
        assert "198.18.0.1 -> 198.18.0.2" in text and "caf\\xe9.pcap" in text
    else:
        assert "café.pcap" in text
    r = smbwire("analyze", cafe, "-q", "--json", "-", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.decode("utf-8"))["inputs"][0]["path"] == str(cafe)
    r = smbwire("analyze", cafe, "--topology", tmp_path / "nope-é.toml", env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert b"no such file" in r.stderr


def test_standard_input_that_is_a_terminal_is_refused():
    """`smbwire analyze -` typed at a terminal waited for a capture from the keyboard."""
    import pty

    main, sub = pty.openpty()
    try:
        r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", "-"], stdin=sub, capture_output=True,
                           timeout=60)
    finally:
        os.close(main)
        os.close(sub)
    assert r.returncode == 2, r.stderr
    assert r.stderr.decode().strip() == ("smbwire: error: -: standard input is a terminal, not a capture: "
                                         "pipe one in (tcpdump -w - ... | smbwire analyze -)")
