"""`smbwire analyze --annotate OUT.pcapng`, checked with tshark: the frames whose comment
contains "smbwire" (`-Y 'frame.comment contains "smbwire"'`) are exactly the frames of the
sends named in `--evidence` (their first and last frame, their SMB2 header frame, and the
frames between that go from sender to receiver with payload on the send's connection), and
the output is the input frame for frame, byte for byte (editcap back to the input's pcap
flavour gives the input's records exactly)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import synth_oracle as oracle
from paths import CAPTURES, ROOT

pytestmark = [pytest.mark.tshark, pytest.mark.usefixtures("tshark_required")]


def smbwire(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smbwire", *args], cwd=ROOT, capture_output=True, text=True)


def annotate(cap: Path, topo: Path, tmp: Path) -> tuple[Path, list[dict]]:
    ev, out = tmp / "ev.jsonl", tmp / "out.pcapng"
    r = smbwire("analyze", str(cap), "-t", str(topo), "--evidence", str(ev), "--annotate", str(out), "-q")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(l) for l in ev.read_text().splitlines() if l.strip()]
    assert lines, "no duplicated payload"
    return out, lines


def commented(out: Path) -> dict[int, str]:
    rows = oracle.fields(out, 'frame.comment contains "smbwire"', ["frame.number", "frame.comment"])
    return {int(r[0]): r[1] for r in rows}


def test_tcp_comments_exactly_the_sends_frames_and_keeps_every_byte(tmp_path):
    cap = CAPTURES / "nested4-1MiB.pcap"
    out, lines = annotate(cap, CAPTURES / "s2d-two-node.toml", tmp_path)
    got = commented(out)
    # What the evidence names, from the input as tshark dissects it.
    rows = oracle.fields(cap, "", ["frame.number", "ip.src", "ip.dst", "tcp.srcport", "tcp.dstport", "tcp.len"])
    info = {int(r[0]): r[1:] for r in rows}
    want: dict[int, list[str]] = {}
    for ev in lines:
        for i, s in enumerate(ev["sends"], 1):
            tag = f"smbwire: payload {ev['digest'][:16]} send {i}/{ev['sends_total']} "
            first, last = s["frames"]
            for n in range(first, last + 1):
                src, dst, sp, dp, tlen = info[n]
                if n in (first, last) or (src, dst, sp, dp) == (s["src"], s["dst"], str(s["src_port"]),
                                                                  str(s["dst_port"])) and int(tlen or 0) > 0:
                    want.setdefault(n, []).append(tag)
    assert set(got) == set(want)
    for n, tags in want.items():
        assert all(t in got[n] for t in tags), (n, got[n])
    sample = got[min(got)]
    assert "replication owner->partner, offset " in sample and (" unique," in sample or " per-copy duplicate," in sample)
    # Byte for byte: the input is a nanosecond pcap.
    back = tmp_path / "back.pcap"
    subprocess.run(["editcap", "-F", "nsecpcap", str(out), str(back)], check=True, capture_output=True)
    assert back.read_bytes()[24:] == cap.read_bytes()[24:]


@pytest.mark.parametrize("transport", ["rocev2", "iwarp"])
def test_rdma_sends_comment_header_and_data_frames(synth, tmp_path, transport):
    cap = tmp_path / f"nested4-{transport}.pcap"
    truth = synth({"scenario": "nested4", "bytes": 2 << 20, "io_size": 1 << 20, "seed": 3, "transport": transport}, cap)
    topo = tmp_path / "topo.toml"
    r = smbwire("synth", "nested4", "-o", str(tmp_path / "again.pcap"), "--bytes", "2MiB", "--io-size", "1MiB",
                "--seed", "3", "--transport", transport, "--topology-out", str(topo))
    assert r.returncode == 0, r.stderr
    assert truth["topology"]
    out, lines = annotate(cap, topo, tmp_path)
    got = commented(out)
    sends = [(ev, i, s) for ev in lines for i, s in enumerate(ev["sends"], 1)]
    assert any(s["transport"] == "rdma" and s.get("header_frame") for _, _, s in sends)
    for ev, i, s in sends:
        tag = f"smbwire: payload {ev['digest'][:16]} send {i}/{ev['sends_total']} "
        for n in [*s["frames"], *([s["header_frame"]] if s.get("header_frame") else [])]:
            assert tag in got.get(n, ""), (n, tag, got.get(n))
    ranges = [tuple(s["frames"]) for _, _, s in sends]
    headers = {s.get("header_frame") for _, _, s in sends}
    for n in got:
        assert n in headers or any(a <= n <= b for a, b in ranges), n
    # Data frames between first and last are commented too, not only the named ones.
    named = {n for _, _, s in sends for n in s["frames"]} | headers
    assert len(set(got) - named) > 0
    total = len(oracle.fields(cap, "", ["frame.number"]))
    assert len(oracle.fields(out, "", ["frame.number"])) == total


def test_annotate_refuses_a_stream(tmp_path):
    r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", "-", "--annotate", str(tmp_path / "o.pcapng")],
                       cwd=ROOT, capture_output=True, text=True, input="")
    assert r.returncode == 2 and "--annotate needs capture files it can read twice; - is a stream" in r.stderr, r.stderr


def test_the_summary_line_counts_with_separators_and_plurals(tmp_path):
    # Was "wrote OUT: 2,234 frames, 1456 commented (8 sends ...)": one count with a separator,
    # one without.
    out = tmp_path / "out.pcapng"
    r = smbwire("analyze", str(CAPTURES / "nested4-1MiB.pcap"), "-t", str(CAPTURES / "s2d-two-node.toml"),
                "--annotate", str(out), "--json", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}: 2,234 frames, 1,456 commented (8 sends of duplicated payloads)" in r.stderr, r.stderr
