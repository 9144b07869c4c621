"""Remote mirror sessions: a switch that sends its SPAN copies to a collector inside a tunnel
(ERSPAN types I-III and `gretap` over GRE, VXLAN over UDP 4789, GENEVE over UDP 6081) must
give the figures the same traffic gives from a local mirror port. The capture is `smbwire
synth --encap`, whose tunnel headers are written by the engine's encoders (`wire::gre`,
`wire::erspan`, `wire::vxlan`, `wire::geneve`); tshark, the independent oracle, must open
every tunnel to the same SMB2 messages, and must read the session's fields as written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tshark_oracle import SMB2_WRITE, field_rows, pdu_counts, write_length_sum

KINDS = ["gretap", "erspan1", "erspan2", "erspan3", "vxlan", "geneve"]
PROTOCOLS = {
    "gretap": "eth:ethertype:ip:gre:eth:ethertype:ip:tcp",
    "erspan1": "eth:ethertype:ip:gre:erspan:eth:ethertype:ip:tcp",
    "erspan2": "eth:ethertype:ip:gre:erspan:eth:ethertype:ip:tcp",
    "erspan3": "eth:ethertype:ip:gre:erspan:eth:ethertype:ip:tcp",
    "vxlan": "eth:ethertype:ip:udp:vxlan:eth:ethertype:ip:tcp",
    "geneve": "eth:ethertype:ip:udp:geneve:eth:ethertype:ip:tcp",
}


def smbwire(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smbwire", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def synth_and_analyze(tmp: Path, encap: str, *extra: str) -> tuple[Path, dict]:
    cap = tmp / f"{encap}.pcap"
    r = smbwire("synth", "nested4", "-o", cap, "--bytes", "4MiB", "--io-size", "256KiB", "--seed", "7",
                "--encap", encap, *extra)
    assert r.returncode == 0, r.stderr
    out = tmp / f"{encap}.json"
    r = smbwire("analyze", cap, "-q", "--json", out)
    assert r.returncode == 0, r.stderr
    return cap, json.loads(out.read_text())


def figures(r: dict) -> dict:
    """What the traffic decides, apart from where its bytes went in the capture file."""
    return {k: r[k] for k in ("edges", "totals", "smb2", "tcp", "anomalies", "duplicated_payloads", "series")}


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    return synth_and_analyze(tmp_path_factory.mktemp("local"), "none")


@pytest.mark.parametrize("encap", KINDS)
def test_a_remote_mirror_session_gives_the_local_figures(encap, local, tmp_path):
    local_cap, plain = local
    cap, r = synth_and_analyze(tmp_path, encap)
    assert figures(r) == figures(plain)
    assert r["edges"] and r["edges"][0]["dup_ratio"] == 2.0
    # Every byte in one category: the tunnel's headers are protocol headers.
    acc, base = r["accounting"], plain["accounting"]
    assert acc["reconciled"] is True
    extra = acc["input_bytes"] - base["input_bytes"]
    assert extra > 0
    assert acc["categories"]["protocol_headers"] - base["categories"]["protocol_headers"] == extra
    # The result says how the frames came: every frame in this kind of tunnel, and the tunnel's
    # bytes are exactly what the session added to the capture.
    frames = r["inputs"][0]["frames"]
    assert frames == plain["inputs"][0]["frames"]
    assert r["tunnels"] == {encap: {"frames": frames, "bytes": extra}}
    assert plain["tunnels"] == {}
    # tshark opens the same tunnel to the same SMB2 messages.
    first = field_rows(cap, [], ["frame.protocols"])[0][0][0]
    assert first == PROTOCOLS[encap]
    assert pdu_counts(cap) == pdu_counts(local_cap)
    assert write_length_sum(cap) == write_length_sum(local_cap) == r["smb2"]["write_bytes"]
    assert pdu_counts(cap)[(SMB2_WRITE, False)] == r["smb2"]["write_req_pdus"]


def test_tshark_reads_the_session_fields_as_written(tmp_path):
    """The headers the engine's encoders write mean, to tshark, what the encoders say."""
    cap, _ = synth_and_analyze(tmp_path, "erspan2")
    rows = field_rows(cap, [], ["erspan.version", "erspan.spanid", "gre.sequence_number"])
    assert rows and {(r[0][0], r[1][0]) for r in rows} == {("1", "42")}
    assert [int(r[2][0]) for r in rows[:3]] == [1, 2, 3]
    cap, _ = synth_and_analyze(tmp_path, "erspan3")
    rows = field_rows(cap, [], ["erspan.version", "erspan.spanid", "erspan.ft"])
    assert {(r[0][0], r[1][0], r[2][0]) for r in rows} == {("2", "42", "0")}
    cap, _ = synth_and_analyze(tmp_path, "vxlan")
    rows = field_rows(cap, [], ["vxlan.vni", "udp.dstport"])
    assert {(r[0][0], r[1][0]) for r in rows} == {("42", "4789")}
    cap, _ = synth_and_analyze(tmp_path, "geneve")
    rows = field_rows(cap, [], ["geneve.version", "geneve.vni", "geneve.proto_type", "geneve.option.class",
                                "geneve.option.length", "udp.dstport"])
    assert {tuple(c[0] for c in r) for r in rows} == {("0", "0x00002a", "0x6558", "0x0102", "8", "6081")}


def test_mirror_duplicates_through_a_tunnel_are_removed(local, tmp_path):
    """A SPAN session that copies both directions, delivered over ERSPAN: each frame twice,
    with different tunnel sequence numbers but the same mirrored frame, removed as on a
    local port."""
    _, plain = local
    _, r = synth_and_analyze(tmp_path, "erspan2", "--mirror-dup")
    assert r["tcp"]["mirror_duplicate_frames"] > 0
    assert r["edges"] == plain["edges"]


def test_encap_is_refused_where_it_cannot_apply(tmp_path):
    r = smbwire("synth", "nested4", "-o", tmp_path / "x.pcap", "--encap", "gre6")
    assert r.returncode == 2 and "unknown encap" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = smbwire("synth", "nested4", "-o", tmp_path / "x.pcap", "--encap", "vxlan", "--transport", "infiniband")
    assert r.returncode == 2 and "not infiniband" in r.stderr


def test_a_frame_the_switch_cut_to_fit_its_tunnel_is_named(tmp_path):
    """ERSPAN's T flag: the switch cut the mirrored frame to its tunnel's MTU. The frame is
    decoded as far as it goes, its message counted incomplete, and the finding names the
    cause and the fix, before the gaps it leaves."""
    import struct

    cap, _ = synth_and_analyze(tmp_path, "erspan2")
    data = bytearray(cap.read_bytes())
    out, off, cut_done = bytearray(data[:24]), 24, 0
    while off + 16 <= len(data):
        ts_s, ts_ns, caplen, _ = struct.unpack_from("<IIII", data, off)
        frame = bytearray(data[off + 16:off + 16 + caplen])
        off += 16 + caplen
        if cut_done < 2 and len(frame) > 1400:
            frame[42 + 2] |= 0x04  # ERSPAN II: T
            frame = frame[:1000]
            struct.pack_into("!H", frame, 14 + 2, len(frame) - 14)  # the outer IPv4 total length
            frame[14 + 10:14 + 12] = b"\0\0"
            cut_done += 1
        out += struct.pack("<IIII", ts_s, ts_ns, len(frame), len(frame)) + frame
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(bytes(out))
    r = smbwire("analyze", cut, "-q", "--json", "-")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["anomalies"]["erspan.truncated_frame"] == 2
    first = res["findings"][0]
    assert (first["code"], first["frames"]) == ("mirror_truncated", 2) and "MTU" in first["message"]
    assert res["smb2"]["payload_incomplete"] >= 1 and res["accounting"]["reconciled"] is True


def test_the_report_says_how_the_frames_came_and_every_path_agrees(local, tmp_path):
    """The tunnels a result names, in all and per input, are the same whichever way it is
    computed: one thread or two, or replayed from ledgers (`attribute` sums the ledgers'
    counts), and the terminal report and the HTML page say so in words, input by input when
    there are several; a local port's report says nothing of it."""
    erspan, r = synth_and_analyze(tmp_path, "erspan3")
    vxlan, v = synth_and_analyze(tmp_path, "vxlan")
    results = {}
    for threads in (1, 2):
        out = tmp_path / f"t{threads}.json"
        ledger = tmp_path / f"t{threads}.parquet"
        p = smbwire("analyze", erspan, vxlan, local[0], "-q", "--threads", threads, "--json", out, "--ledger", ledger)
        assert p.returncode == 0, p.stderr
        results[threads] = json.loads(out.read_text())
    both = {"erspan3": r["tunnels"]["erspan3"], "vxlan": v["tunnels"]["vxlan"]}
    per_input = [{"erspan3": both["erspan3"]}, {"vxlan": both["vxlan"]}, {}]
    assert r["inputs"][0]["tunnels"] == per_input[0] and v["inputs"][0]["tunnels"] == per_input[1]
    for res in results.values():
        assert res["tunnels"] == both
        assert [i["tunnels"] for i in res["inputs"]] == per_input
    # Two ledgers, one per capture, replayed together.
    ledgers = []
    for cap in (erspan, vxlan):
        ledgers.append(tmp_path / f"{cap.stem}.parquet")
        p = smbwire("analyze", cap, "-q", "--ledger", ledgers[-1])
        assert p.returncode == 0, p.stderr
    p = smbwire("attribute", *ledgers, "--json", "-")
    assert p.returncode == 0, p.stderr
    replayed = json.loads(p.stdout)
    assert replayed["tunnels"] == both and [i["tunnels"] for i in replayed["inputs"]] == per_input[:2]
    # In words.
    p = smbwire("analyze", erspan, vxlan, local[0])
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())
    n_e, n_v = (f"{t['frames']:,}" for t in (both["erspan3"], both["vxlan"]))
    assert f"tunnelled: {n_e} frames in ERSPAN type III (" in text and f"{n_v} frames in VXLAN (" in text
    assert (f"(by input: {erspan.name}: {n_e} frames in ERSPAN type III; {vxlan.name}: {n_v} frames in VXLAN; "
            f"{local[0].name}: none)") in text, text
    html = tmp_path / "r.html"
    p = smbwire("analyze", erspan, "-q", "--html", html)
    assert p.returncode == 0, p.stderr
    assert f'id="tunnels">tunnelled: {n_e} frames in ERSPAN type III' in html.read_text()
    p = smbwire("analyze", local[0])
    assert p.returncode == 0 and "tunnelled" not in p.stdout


def test_copies_through_two_sessions_are_one_frame_mirrored_twice(local, tmp_path):
    """A tunnel's identifiers are not part of a connection's identity (README): when two
    mirror sessions (ERSPAN session 42 and 43, or VXLAN VNI 42 and 43) deliver a copy of each
    frame, the second copy is a mirror duplicate, as on a local port, and the figures are
    the local port's."""
    import struct

    _, plain = local
    for encap, at in (("erspan2", 14 + 20 + 8 + 2), ("vxlan", 14 + 20 + 8 + 4)):
        cap, _ = synth_and_analyze(tmp_path, encap)
        data = cap.read_bytes()
        out, off = bytearray(data[:24]), 24
        while off + 16 <= len(data):
            ts_s, ts_frac, caplen, orig = struct.unpack_from("<IIII", data, off)
            frame = data[off + 16:off + 16 + caplen]
            off += 16 + caplen
            other = bytearray(frame)
            if encap == "erspan2":
                assert struct.unpack_from("!H", other, at)[0] & 0x3FF == 42
                struct.pack_into("!H", other, at, (struct.unpack_from("!H", other, at)[0] & ~0x3FF) | 43)
            else:
                assert other[at:at + 3] == (42).to_bytes(3, "big")
                other[at:at + 3] = (43).to_bytes(3, "big")
            out += struct.pack("<IIII", ts_s, ts_frac, caplen, orig) + frame
            out += struct.pack("<IIII", ts_s, ts_frac + 1, caplen, orig) + bytes(other)
        both = tmp_path / f"{encap}-two-sessions.pcap"
        both.write_bytes(bytes(out))
        p = smbwire("analyze", both, "-q", "--json", "-")
        assert p.returncode == 0, p.stderr
        r = json.loads(p.stdout)
        assert r["tcp"]["mirror_duplicate_frames"] == plain["inputs"][0]["frames"], encap
        assert r["edges"] == plain["edges"] and r["totals"] == plain["totals"], encap
        assert r["tunnels"][encap]["frames"] == 2 * plain["inputs"][0]["frames"]


def _with_cmd(path: Path, out: Path, version: int = 1) -> Path:
    """Every frame of the capture with a Cisco MetaData header (TrustSec's in-line SGT 17)
    between the MAC addresses and the EtherType, as a mirror port of a link that tags in line
    delivers it."""
    import struct

    data = path.read_bytes()
    magic, linktype = data[:4], struct.unpack_from("<I", data, 20)[0]
    assert magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") and linktype == 1, "little-endian Ethernet pcap expected"
    res, off = bytearray(data[:24]), 24
    while off + 16 <= len(data):
        ts_s, ts_frac, caplen, length = struct.unpack_from("<IIII", data, off)
        frame = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        tagged = frame[:12] + b"\x89\x09" + bytes([version, 1, 0, 1, 0, 17]) + frame[12:]
        res += struct.pack("<IIII", ts_s, ts_frac, len(tagged), length + 8) + tagged
    out.write_bytes(bytes(res))
    return out


def test_trustsec_tagged_frames_give_the_local_figures(local, tmp_path):
    """A mirror port of a link with Cisco TrustSec in-line tagging copies every frame with its
    Cisco MetaData header (EtherType 0x8909, the SGT): walked like a VLAN tag, the figures are
    the local port's, the header's bytes are protocol headers, and tshark reads the same SMB2
    messages and the SGT as written. A header of another form is named, not guessed past."""
    local_cap, plain = local
    cap = _with_cmd(local_cap, tmp_path / "cmd.pcap")
    r = json.loads(smbwire("analyze", cap, "-q", "--json", "-").stdout)
    assert figures(r) == figures(plain)
    frames = plain["inputs"][0]["frames"]
    acc, base = r["accounting"], plain["accounting"]
    assert acc["reconciled"] is True and r["tunnels"] == {}
    assert acc["categories"]["protocol_headers"] - base["categories"]["protocol_headers"] == 8 * frames
    assert field_rows(cap, [], ["frame.protocols"])[0][0][0] == "eth:ethertype:cmd:ethertype:ip:tcp"
    assert {tuple(c[0] for c in row) for row in field_rows(cap, [], ["cmd.version", "cmd.sgt", "cmd.type"])} \
        == {("1", "17", "0x0800")}
    assert pdu_counts(cap) == pdu_counts(local_cap)
    assert write_length_sum(cap) == r["smb2"]["write_bytes"] == plain["smb2"]["write_bytes"]
    # With two threads, as with one.
    r2 = json.loads(smbwire("analyze", cap, "-q", "--threads", "2", "--json", "-").stdout)
    assert figures(r2) == figures(r)

    other = _with_cmd(local_cap, tmp_path / "cmd-v2.pcap", version=2)
    r = json.loads(smbwire("analyze", other, "-q", "--json", "-").stdout)
    assert r["anomalies"].get("cmd.unsupported") == frames
    assert r["smb2"]["write_bytes"] == 0 and r["accounting"]["reconciled"] is True


@pytest.mark.parametrize("name", ["smb202-samba-reads-writes.pcap", "smb311-multichannel-zeek.pcap",
                                  "smb311-async-large-reads.pcap", "smbdirect-iwarp-win2012-smb300.pcap"])
def test_trustsec_tags_on_real_captures_change_nothing_but_headers(name, tmp_path):
    """Real SMB2 and SMB Direct captures (captures/public), every frame given a Cisco MetaData
    header: the same figures, the header's 8 bytes per frame counted as link headers."""
    from paths import CAPTURES

    src = CAPTURES / "public" / name
    plain = json.loads(smbwire("analyze", src, "-q", "--json", "-").stdout)
    r = json.loads(smbwire("analyze", _with_cmd(src, tmp_path / name), "-q", "--json", "-").stdout)
    keep = ("edges", "totals", "smb2", "anomalies", "duplicated_payloads")
    assert {k: r[k] for k in keep} == {k: plain[k] for k in keep}
    assert r["totals"]["payload_bytes"] > 0
    # The 8 bytes are protocol headers, or other protocols in a frame that is not IP (ARP...).
    frames = plain["inputs"][0]["frames"]
    (ours, theirs), headers = (r["accounting"]["categories"], plain["accounting"]["categories"]), \
        ("protocol_headers", "other_protocols")
    assert r["accounting"]["reconciled"] is True
    assert sum(ours.get(k, 0) - theirs.get(k, 0) for k in headers) == 8 * frames
    assert {k: v for k, v in ours.items() if k not in headers} == {k: v for k, v in theirs.items() if k not in headers}
