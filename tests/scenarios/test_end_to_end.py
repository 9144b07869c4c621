"""The real engine behind the real CLI: evidence, several mirror-port files, damaged input."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from smbwire.engine import analyze

from paths import ROOT
CAPTURES = ROOT / "captures"
NESTED4 = CAPTURES / "nested4-1MiB.pcap"
TOPOLOGY = CAPTURES / "s2d-two-node.toml"


def smbwire(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smbwire", *args], capture_output=True, text=True, timeout=300)


def _records(path: Path) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """pcap global header and (record header, data) pairs (little-endian files only)."""
    raw = path.read_bytes()
    head, off, recs = raw[:24], 24, []
    while off + 16 <= len(raw):
        caplen = struct.unpack_from("<I", raw, off + 8)[0]
        recs.append((raw[off:off + 16], raw[off + 16:off + 16 + caplen]))
        off += 16 + caplen
    return head, recs


def _edges(result: dict) -> list[tuple]:
    return sorted((e["src"], e["dst"], e["class"], e["payload_bytes"], e["unique_bytes"], e["sends"])
                  for e in result["edges"])


def test_evidence_names_every_duplicated_payload_and_holds_no_payload_bytes(tmp_path):
    ev = tmp_path / "dups.jsonl"
    out = tmp_path / "r.json"
    p = smbwire("analyze", str(NESTED4), "--topology", str(TOPOLOGY), "--json", str(out), "--evidence", str(ev), "--quiet")
    assert p.returncode == 0, p.stderr
    result = json.loads(out.read_text())
    lines = [json.loads(line) for line in ev.read_text().splitlines()]
    # nested4 with W = 1 MiB in 256 KiB I/Os: 4 payloads, each sent twice to the partner.
    assert len(lines) == 4
    for d in lines:
        assert len(d["digest"]) == 64 and int(d["digest"], 16) >= 0
        assert d["size"] == 256 * 1024
        assert len(d["sends"]) == 2
        for s in d["sends"]:
            assert s["frames"][0] <= s["frames"][1]
            assert s["offset"] % (256 * 1024) == 0
            assert s["file_name"]
    # Only digests: the evidence file is tiny next to the payload it describes.
    assert ev.stat().st_size < 16 * 1024
    assert result["top_duplicates"][0]["digest"] in {d["digest"] for d in lines}


def test_two_mirror_ports_seeing_the_same_frames_give_the_same_figures(tmp_path):
    copy = tmp_path / "port2.pcap"
    shutil.copy(NESTED4, copy)
    one = analyze([str(NESTED4)])
    two = analyze([str(NESTED4), str(copy)])
    assert _edges(two) == _edges(one)
    assert two["tcp"]["mirror_duplicate_frames"] == one["analysis"]["frames"]
    assert two["accounting"]["reconciled"]
    assert two["accounting"]["input_bytes"] == 2 * NESTED4.stat().st_size


def test_snaplen_truncated_frames_are_gaps_and_the_rest_still_analysed(tmp_path):
    head, recs = _records(NESTED4)
    # Cut one full-size data frame in the middle of the second WRITE's data to 100 bytes.
    big = [i for i, (_, d) in enumerate(recs) if len(d) > 1400]
    victim = big[len(big) // 3]
    rh, data = recs[victim]
    ts_s, ts_f, _, orig = struct.unpack("<IIII", rh)
    recs[victim] = (struct.pack("<IIII", ts_s, ts_f, 100, orig), data[:100])
    cut = tmp_path / "snaplen.pcap"
    cut.write_bytes(head + b"".join(h + d for h, d in recs))
    out = tmp_path / "r.json"
    p = smbwire("analyze", str(cut), "--json", str(out), "--quiet")
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    assert r["anomalies"].get("capture.snaplen_truncated_frame") == 1
    assert r["tcp"]["gap_bytes"] == orig - 100  # declared TCP payload minus what was captured
    assert r["smb2"]["payload_incomplete"] == 1
    assert r["accounting"]["reconciled"]
    # The other seven sends are still hashed: 3 of 4 payloads still cross twice.
    e = r["edges"][0]
    assert e["sends"] == 7
    assert any("gap" in w for w in r["warnings"])
    # The cause is named first: the snapshot length, with the frame count.
    assert r["findings"][0]["code"] == "snaplen_truncated" and r["findings"][0]["frames"] == 1
    assert "tcpdump -s 0" in r["warnings"][0]


def test_truncated_last_packet_is_a_warning_not_an_error(tmp_path):
    cut = tmp_path / "cut.pcap"
    raw = NESTED4.read_bytes()
    cut.write_bytes(raw[: len(raw) - 700])
    out = tmp_path / "r.json"
    p = smbwire("analyze", str(cut), "--json", str(out), "--quiet")
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    assert r["anomalies"].get("capture.truncated_record") == 1
    assert r["accounting"]["categories"]["truncated_tail"] > 0
    assert r["accounting"]["reconciled"]


@pytest.mark.parametrize("content,message", [
    (b"", "empty"),
    (b"this is a text file, not a capture\n" * 3, "not a pcap or pcapng"),
    (b"\xd4\xc3\xb2\xa1\x02\x00", "damaged capture header"),
])
def test_unusable_input_is_one_line_and_exit_2(tmp_path, content, message):
    f = tmp_path / "bad.pcap"
    f.write_bytes(content)
    p = smbwire("analyze", str(f))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("smbwire: error:"), p.stderr
    assert message in lines[0]
    assert "Traceback" not in p.stderr


def test_unusable_input_beside_a_good_one_is_a_warning_and_the_rest_is_analysed(tmp_path):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"this is a text file, not a capture\n" * 3)
    alone = analyze([str(NESTED4)], topology=None)
    out = tmp_path / "r.json"
    p = smbwire("analyze", str(garbage), str(NESTED4), "--json", str(out))
    assert p.returncode == 0, p.stderr
    # One warning line on stderr naming the unusable file, and no error.
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("smbwire: warning: "), p.stderr
    assert f"{garbage}: not a pcap or pcapng capture file" in lines[0] and "skipped" in lines[0]
    # The full report went to stdout, its warnings naming the file too.
    assert "Duplicate-payload ratio per edge" in p.stdout and "Warnings" in p.stdout
    assert "garbage.bin" in p.stdout.split("Warnings", 1)[1]
    r = json.loads(out.read_text())
    assert any(w.startswith(f"{garbage}: not a pcap or pcapng capture file: skipped") for w in r["warnings"]), r["warnings"]
    assert r["anomalies"].get("capture.unusable_input") == 1
    # Exactly the figures of the good file alone; only it is an input.
    assert _edges(r) == _edges(alone) and r["edges"]
    assert r["totals"] == alone["totals"]
    assert [i["path"] for i in r["inputs"]] == [str(NESTED4)]
    assert r["inputs"][0]["frames"] == alone["inputs"][0]["frames"] > 0
    assert r["accounting"]["reconciled"]
    # Every input byte is accounted, the skipped file's too.
    assert r["accounting"]["categories"]["unusable_input"] == garbage.stat().st_size
    assert r["accounting"]["input_bytes"] == NESTED4.stat().st_size + garbage.stat().st_size


def test_missing_and_empty_inputs_beside_a_good_one_are_skipped(tmp_path):
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    missing = tmp_path / "missing.pcap"
    r = analyze([str(empty), str(NESTED4), str(missing)])
    alone = analyze([str(NESTED4)])
    assert _edges(r) == _edges(alone)
    assert r["anomalies"].get("capture.unusable_input") == 2
    skipped = [w for w in r["warnings"] if ": skipped; " in w]
    assert len(skipped) == 2
    assert skipped[0].startswith(f"{empty}: empty file") and skipped[1] == f"{missing}: no such file: skipped; the report covers the 1 other input"
    # Frames still name the usable file as input 0 (evidence and the report index inputs).
    assert [i["path"] for i in r["inputs"]] == [str(NESTED4)]


def test_no_usable_input_among_several_is_one_line_and_exit_2(tmp_path):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00" * 100)
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    p = smbwire("analyze", str(garbage), str(empty))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("smbwire: error:"), p.stderr
    assert "garbage.bin" in lines[0]
    assert "Traceback" not in p.stderr


def test_missing_file_is_one_line_and_exit_2():
    p = smbwire("analyze", "/nonexistent/capture.pcap")
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1


def test_random_garbage_after_a_valid_header_never_crashes(tmp_path):
    import random
    rng = random.Random(5)
    head, recs = _records(NESTED4)
    for trial in range(20):
        raw = bytearray(head + b"".join(h + d for h, d in recs[:400]))
        for _ in range(200):
            raw[rng.randrange(24, len(raw))] = rng.randrange(256)
        f = tmp_path / f"garbled{trial}.pcap"
        f.write_bytes(bytes(raw))
        r = analyze([str(f)])
        assert r["accounting"]["reconciled"], r["accounting"]
