"""`smbwire live --metrics`: Prometheus scrapes during a live capture and at its end agree with
the final JSON.

The veth lab (tests/live/conftest.py `lab`): the frames of a bundled capture
(captures/nested4-1MiB.pcap: owner -> partner, four 256 KiB payloads written twice) are sent
out of A's end; `smbwire live` captures on B's end with the bundled topology and serves
/metrics on 127.0.0.1 inside B's namespace. Needs root (namespaces, BPF): fails, never skips.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path

from paths import CAPTURES, ROOT

PORT = 19464
KINDS = {"unique": "unique_bytes", "per_copy": "per_copy_duplicate_bytes",
         "repeated": "repeated_content_bytes", "trivial": "trivial_bytes"}


def pcap_frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    assert magic in (0xA1B2C3D4, 0xA1B23C4D), "a little-endian pcap"
    off, out = 24, []
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8:off + 12])[0]
        out.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return out


def scrape(lab) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Sample name and sorted labels -> value, from B's namespace."""
    from prometheus_client.parser import text_string_to_metric_families

    code = f"import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:{PORT}/metrics',timeout=5).read().decode())"
    text = lab.ns(lab.b, sys.executable, "-c", code).stdout
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def payload_of(samples, src, dst, cls, kind):
    return samples.get(("smbwire_payload_bytes_total",
                        tuple(sorted({"src": src, "dst": dst, "class": cls, "kind": kind}.items()))))


def test_metrics_follow_the_capture_and_equal_the_final_json(lab, tmp_path):
    out_json = tmp_path / "live.json"
    err = open(tmp_path / "live.stderr", "w+")
    cmd = ["ip", "netns", "exec", lab.b, sys.executable, "-m", "smbwire", "live", "-i", lab.vb, "--plain",
           "--json", str(out_json), "--topology", str(CAPTURES / "s2d-two-node.toml"), "--duration", "15",
           "--metrics", f"127.0.0.1:{PORT}"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 30
        while "capturing on" not in (tmp_path / "live.stderr").read_text():
            assert p.poll() is None and time.monotonic() < deadline, (tmp_path / "live.stderr").read_text()
            time.sleep(0.05)
        time.sleep(1.5)  # a first snapshot
        before = scrape(lab)
        assert before.get(("smbwire_kernel_drops_total", ())) == 0
        assert not [k for k in before if k[0] == "smbwire_payload_bytes_total"]
        frames = pcap_frames(CAPTURES / "nested4-1MiB.pcap")
        half = len(frames) // 2
        # In batches: the veth backlog must not overflow (B would never see those frames).
        for i in range(0, half, 200):
            lab.inject(frames[i:min(i + 200, half)])
            time.sleep(0.05)
        time.sleep(1.5)
        during = scrape(lab)
        mid = payload_of(during, "owner", "partner", "replication", "unique") or 0
        assert 0 < mid <= 1 << 20, during
        for i in range(half, len(frames), 200):
            lab.inject(frames[i:i + 200])
            time.sleep(0.05)
        time.sleep(2.0)
        end = scrape(lab)
        assert p.wait(timeout=40) == 0, (tmp_path / "live.stderr").read_text()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        err.close()
    result = json.loads(out_json.read_text())
    assert result["live"]["stats"]["kernel_drops"] == 0 and result["live"]["stats"]["ring_drops"] == 0
    edges = {(e["src"], e["dst"], e["class"]): e for e in result["edges"]}
    assert set(edges) == {("owner", "partner", "replication")}
    e = edges[("owner", "partner", "replication")]
    assert e["payload_bytes"] == 2 << 20 and e["unique_bytes"] == 1 << 20
    assert payload_of(during, "owner", "partner", "replication", "unique") <= e["unique_bytes"]
    for kind, key in KINDS.items():
        assert payload_of(end, "owner", "partner", "replication", kind) == e[key], kind
    labels = tuple(sorted({"src": "owner", "dst": "partner", "class": "replication"}.items()))
    assert end[("smbwire_sends_total", labels)] == e["sends"]
    assert end[("smbwire_dup_ratio", labels)] == e["dup_ratio"] == 2.0
    assert end[("smbwire_total_dup_ratio", ())] == result["totals"]["dup_ratio"]
    assert end[("smbwire_amplification", ())] == result["totals"]["amplification"]
    assert end[("smbwire_tcp_gap_bytes_total", ())] == result["tcp"]["gap_bytes"] == 0
    assert end[("smbwire_ring_drops_total", ())] == 0


def test_bad_metrics_address_is_one_line(lab):
    r = subprocess.run([sys.executable, "-m", "smbwire", "live", "-i", lab.vb, "--metrics", "nohost"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "--metrics 'nohost': expected HOST:PORT" in r.stderr, r.stderr
