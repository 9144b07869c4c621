"""`smbwire verify EVIDENCE CAPTURE...`: Wireshark's dissectors (tshark through pyshark) agree
with every send the evidence names on bundled captures and an RDMA synth capture; a tampered
line (wrong offset, wrong frame, wrong FileId) fails with exit 1 and the table names it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from paths import CAPTURES, ROOT

pytestmark = [pytest.mark.tshark, pytest.mark.usefixtures("tshark_required")]


def smbwire(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smbwire", *args], cwd=ROOT, capture_output=True, text=True,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def evidence(cap: Path, topo: Path | None, tmp: Path) -> Path:
    ev = tmp / f"{cap.stem}.jsonl"
    r = smbwire("analyze", str(cap), *(["-t", str(topo)] if topo else []), "--evidence", str(ev), "-q")
    assert r.returncode == 0, r.stderr
    return ev


@pytest.mark.parametrize("name", ["nested4-1MiB", "redirect4-1MiB", "six-1MiB",
                                  # Real Samba / Windows traffic with duplicated READ responses.
                                  "public/smb202-samba-reads-writes", "public/smb302-reads-writes"])
def test_bundled_captures_pass(tmp_path, name):
    cap = CAPTURES / f"{name}.pcap"
    ev = evidence(cap, None if name.startswith("public/") else CAPTURES / "s2d-two-node.toml", tmp_path)
    n = sum(len(json.loads(l)["sends"]) for l in ev.read_text().splitlines())
    assert n > 0
    r = smbwire("verify", str(ev), str(cap))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{n:,} send{'s' if n != 1 else ''} checked: {n:,} pass, 0 fail" in r.stdout


@pytest.mark.parametrize("transport", ["rocev2", "iwarp"])
def test_rdma_synth_capture_passes(tmp_path, transport):
    cap, topo = tmp_path / "r.pcap", tmp_path / "r.toml"
    r = smbwire("synth", "nested4", "-o", str(cap), "--bytes", "2MiB", "--io-size", "1MiB", "--transport", transport,
                "--topology-out", str(topo))
    assert r.returncode == 0, r.stderr
    ev = evidence(cap, topo, tmp_path)
    sends = [s for l in ev.read_text().splitlines() for s in json.loads(l)["sends"]]
    assert sends and all(s["transport"] == "rdma" for s in sends)
    r = smbwire("verify", str(ev), str(cap))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{len(sends)} pass, 0 fail" in r.stdout


def test_tampered_lines_fail_and_are_named(tmp_path):
    cap = CAPTURES / "nested4-1MiB.pcap"
    ev = evidence(cap, CAPTURES / "s2d-two-node.toml", tmp_path)
    lines = [json.loads(l) for l in ev.read_text().splitlines()]
    lines[0]["sends"][1]["offset"] += 4096
    lines[1]["sends"][0]["frames"][0] = 3
    lines[2]["sends"][1]["frames"][1] -= 1
    lines[3]["sends"][0]["file_id"] = "00" * 16
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(l) + "\n" for l in lines))
    r = smbwire("verify", str(bad), str(cap))
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout
    assert "4 fail" in out
    assert f"offset: Wireshark says {lines[0]['sends'][1]['offset'] - 4096}, evidence {lines[0]['sends'][1]['offset']}" in out
    assert "frames: first frame 3 is not among the frames Wireshark reassembled" in out
    assert f"command: frame {lines[2]['sends'][1]['frames'][1]} has no SMB2 WRITE request" in out
    assert "file: Wireshark's FileId" in out and "is not 00000000000000000000000000000000" in out


def test_wrong_capture_count_is_one_line(tmp_path):
    cap = CAPTURES / "nested4-1MiB.pcap"
    ev = evidence(cap, CAPTURES / "s2d-two-node.toml", tmp_path)
    lines = [json.loads(l) for l in ev.read_text().splitlines()]
    lines[0]["sends"][0]["file"] = 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(l) + "\n" for l in lines))
    r = smbwire("verify", str(bad), str(cap))
    assert r.returncode == 2 and "a send names input 1; 1 capture(s) given" in r.stderr, r.stderr


@pytest.mark.parametrize("n,bad,line", [(1, 0, "1 send checked: 1 pass, 0 fail"),
                                        (1234, 2, "1,234 sends checked: 1,232 pass, 2 fail")])
def test_summary_line_counts(n, bad, line):
    import io

    from rich.console import Console

    from smbwire.verify import Check, render

    checks = [Check(digest="d", index=1, file=0, frames=(1, 1), transport="tcp",
                    failures=["offset"] if i < bad else []) for i in range(n)]
    out = io.StringIO()
    render(checks, Console(file=out, width=200, color_system=None))
    assert out.getvalue().splitlines()[-1] == line


@pytest.mark.parametrize("content,needle", [
    (b"\xcf\xfa\x00\x01" * 64, "not UTF-8 text at byte 0"),
    (b'{"sends": []}\n\n\xff\n', ":3: not an smbwire evidence line (not UTF-8 text at byte 0)"),
    (b"x" * 64, "not an smbwire evidence line (Expecting value"),
])
def test_an_evidence_file_that_is_not_text_is_one_line(tmp_path, content, needle):
    """A binary file given as EVIDENCE (a capture, say) is a user error naming the line, not an
    internal error (it was a UnicodeDecodeError)."""
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    r = smbwire("verify", str(bad), str(CAPTURES / "nested4-1MiB.pcap"))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("smbwire: error: ") and needle in lines[0], r.stderr


def test_an_evidence_line_longer_than_the_bound_is_refused_unread(tmp_path, monkeypatch):
    """A line is read up to `MAX_EVIDENCE_LINE` bytes, never whole: a file with no newline is
    refused at the bound."""
    from smbwire import verify as v
    from smbwire.errors import UserError

    monkeypatch.setattr(v, "MAX_EVIDENCE_LINE", 1000)
    long = tmp_path / "long.jsonl"
    long.write_bytes(b'{"sends": []}\n' + b" " * 5000)
    it = v.read_evidence(str(long))
    assert next(it) == {"sends": []}
    with pytest.raises(UserError, match=r"long.jsonl:2: .*longer than 1,000 bytes"):
        next(it)


def test_without_tshark_it_is_one_line(tmp_path):
    """pyshark installed, tshark not on PATH: a user error naming what is missing (it was an
    internal error: pyshark's TSharkNotFoundException)."""
    ev = evidence(CAPTURES / "nested4-1MiB.pcap", CAPTURES / "s2d-two-node.toml", tmp_path)
    empty = tmp_path / "bin"
    empty.mkdir()
    r = subprocess.run([sys.executable, "-m", "smbwire", "verify", str(ev), str(CAPTURES / "nested4-1MiB.pcap")],
                       cwd=ROOT, capture_output=True, text=True, env={"PATH": str(empty)})
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("smbwire: error: verify needs tshark (Wireshark's command line) on PATH"), r.stderr


@pytest.mark.parametrize("change,needle", [
    (lambda s: s["frames"].__setitem__(0, 10**30), ":1: send 1: 'frames' must be [first, last] frame numbers (1 to 4,294,967,295), got [1000"),
    (lambda s: s.__setitem__("frames", [-5, 3]), ":1: send 1: 'frames' must be [first, last] frame numbers"),
    (lambda s: s.__setitem__("frames", []), ":1: send 1: 'frames' must be [first, last] frame numbers (1 to 4,294,967,295), got []"),
    (lambda s: s.__setitem__("frames", "12"), ":1: send 1: 'frames' must be [first, last] frame numbers"),
    (lambda s: s.__setitem__("frames", [True, 3]), ":1: send 1: 'frames' must be [first, last] frame numbers"),
    (lambda s: s.__setitem__("frames", list(range(1, 10_000))), "got [1, 2, 3"),
    (lambda s: s.__setitem__("frames", [9, 3]), "got [9, 3]"),
    (lambda s: s.__setitem__("header_frame", 2**32), ":1: send 1: 'header_frame' must be a frame number"),
    (lambda s: s.__setitem__("kind", "delete"), ":1: send 1: 'kind' must be write or read, got 'delete'"),
    (lambda s: s.__setitem__("transport", None), ":1: send 1: 'transport' must be tcp or rdma, got None"),
    (lambda s: s.__setitem__("file", True), "a send names input True; 1 capture(s) given"),
])
def test_a_malformed_send_is_one_line_naming_it(tmp_path, change, needle):
    """Hostile evidence: a frame number past 32 bits made tshark's display filter fail inside
    pyshark (exit 70, a traceback on stderr); a send that is not an object, an
    AttributeError. Every send is checked before tshark runs, and the line names it."""
    cap = CAPTURES / "redirect4-1MiB.pcap"
    ev = evidence(cap, None, tmp_path)
    lines = [json.loads(l) for l in ev.read_text().splitlines()]
    change(lines[0]["sends"][0])
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(l) + "\n" for l in lines))
    r = smbwire("verify", str(bad), str(cap))
    assert r.returncode == 2, r.stdout + r.stderr
    lines_out = r.stderr.splitlines()
    assert len(lines_out) == 1 and lines_out[0].startswith("smbwire: error: "), r.stderr
    assert needle in lines_out[0] and len(lines_out[0]) < 250, lines_out[0]


@pytest.mark.parametrize("line,needle", [
    ({"sends": [None]}, ":1: send 1: not an smbwire evidence send (not an object)"),
    ({"size": "4096", "sends": [{"file": 0, "frames": [1, 2], "kind": "write", "transport": "tcp"}]},
     ":1: send 1: the payload's 'size' must be a byte count, got '4096'"),
])
def test_a_malformed_line_is_one_line_naming_it(tmp_path, line, needle):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(line) + "\n")
    r = smbwire("verify", str(bad), str(CAPTURES / "redirect4-1MiB.pcap"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.splitlines()) == 1 and needle in r.stderr, r.stderr


def _tshark_wrapper(tmp: Path, crashes: int) -> Path:
    """A `tshark` on PATH that runs the real one, except that its first `crashes` reads of a
    capture (`-r`) end with exit 2 and an error line, as a tshark that pyshark saw end
    abnormally."""
    import shutil

    real = shutil.which("tshark", path="/usr/bin:/bin")
    assert real
    bindir = tmp / "bin"
    bindir.mkdir()
    count = tmp / "reads"
    count.write_text("0")
    script = bindir / "tshark"
    script.write_text(f"""#!/bin/sh
case " $* " in
  *" -r "*)
    n=$(cat {count}); echo $((n + 1)) > {count}
    if [ "$n" -lt {crashes} ]; then echo "tshark: the wrapper's crash number $((n + 1))" >&2; exit 2; fi;;
esac
exec {real} "$@"
""")
    script.chmod(0o755)
    return bindir


@pytest.mark.parametrize("crashes,code", [(1, 0), (2, 0), (3, 69)])
def test_a_tshark_that_ends_abnormally_is_run_again_then_named(tmp_path, crashes, code):
    """pyshark's tshark child is sometimes reaped before pyshark sees it end ("Unknown child
    process pid N, will report returncode 255"), seen once in a CI run as verify's internal
    error (exit 70). verify runs tshark again, up to 3 runs, each rerun a warning; when every
    run fails, one line names tshark and the file, exit 69 (EX_UNAVAILABLE)."""
    cap = CAPTURES / "nested4-1MiB.pcap"
    ev = evidence(cap, CAPTURES / "s2d-two-node.toml", tmp_path)
    bindir = _tshark_wrapper(tmp_path, crashes)
    r = subprocess.run([sys.executable, "-m", "smbwire", "verify", str(ev), str(cap)], cwd=ROOT,
                       capture_output=True, text=True, env={"COLUMNS": "200", "PATH": f"{bindir}:/usr/bin:/bin"})
    assert r.returncode == code, r.stdout + r.stderr
    assert int((tmp_path / "reads").read_text()) == min(crashes + 1, 3)
    warnings = [l for l in r.stderr.splitlines() if l.startswith("smbwire: warning: ")]
    assert len(warnings) == min(crashes, 2), r.stderr
    assert all(f"{cap}: tshark ended abnormally" in w and "running it again" in w for w in warnings)
    if code == 0:
        assert r.stderr.splitlines() == warnings, r.stderr
        assert "pass, 0 fail" in r.stdout
    else:
        errors = [l for l in r.stderr.splitlines() if l.startswith("smbwire: error: ")]
        assert errors == [l for l in r.stderr.splitlines() if not l.startswith("smbwire: warning: ")], r.stderr
        assert len(errors) == 1 and f"{cap}: tshark ended abnormally in each of 3 runs" in errors[0]
        assert "the wrapper's crash number 3" in errors[0] and "internal error" not in errors[0]
