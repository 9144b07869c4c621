"""The terminal report and the JSON writer, on hand-written result dicts.

These are unit tests of the renderer: the dicts below are written by hand to the schema in
docs/json-schema.md, not produced by the engine (end-to-end tests live with the engine). Their
`findings` come from the engine's own rule (`_core.derive_findings`, the function every result
gets its findings from), so the renderer is shown what the engine would have found.
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import stat
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from smbwire.findings import findings
from smbwire.jsonout import dumps, write_json
from smbwire.errors import UserError
from smbwire.report import build_report, render_report
from smbwire.units import fmt_bytes, fmt_count, fmt_counted, fmt_ratio, parse_size
from smbwire.wireshark import filters_by_input, frame_filter


ADDRESS = {"client": "198.18.0.10", "s2d-a": "198.18.1.1", "s2d-b": "198.18.1.2", "s2d-c": "198.18.1.3"}


def _send(file: int, first: int, last: int, t: float, src: str, dst: str, offset: int) -> dict:
    return {
        "file": file, "frames": [first, last], "time": t, "src": ADDRESS[src], "dst": ADDRESS[dst],
        "src_node": src, "dst_node": dst, "kind": "write", "time_ns": int(t * 1e9),
        "session": "0000040000000005", "tree": 5, "file_id": "000000080000000500000000ffffffff",
        "file_name": "vm01\\disk.vhdx", "share": "\\\\s2d\\ClusterStorage$", "offset": offset,
        "transport": "tcp",
    }


def sample_result() -> dict:
    """A two-input S2D-like result: a client writes to s2d-a, which replicates to b and c."""
    edge = lambda src, dst, cls, payload, unique, ratio, sends: {  # noqa: E731
        "src": src, "dst": dst, "class": cls, "payload_bytes": payload, "nontrivial_bytes": payload - 4096,
        "unique_bytes": unique, "sends": sends, "trivial_bytes": 4096,
        "per_copy_duplicate_bytes": payload - 4096 - unique, "repeated_content_bytes": 0,
        "dup_ratio": ratio, "decided_by": {"inference": payload - 2**20, "rule": 2**20, "forwarded": 0},
    }
    return {
        "schema": "smbwire/1",
        "smbwire_version": "0.1.0",
        "inputs": [
            {"path": "/captures/node-a/mirror-port-a.pcapng", "size_bytes": 1_234_567_890, "frames": 912_345},
            {"path": "/captures/node-b/mirror-port-b.pcap", "size_bytes": 1_000, "frames": 10},
        ],
        "window_seconds": 60.0,
        "capture": {"first_ts": 1_700_000_000.0, "last_ts": 1_700_000_042.5, "duration_seconds": 42.5},
        "edges": [
            edge("client", "s2d-a", "client", 1_073_745_920, 1_073_741_824, 1.0, 256),
            edge("s2d-a", "s2d-b", "replication", 3_221_229_568, 1_073_741_824, 3.0, 768),
            edge("s2d-a", "s2d-c", "redirection", 2_147_487_744, 1_073_741_824, 2.0, 512),
        ],
        "totals": {
            "payload_bytes": 6_442_463_232, "nontrivial_bytes": 6_442_450_944, "unique_bytes": 3_221_225_472,
            "sends": 1536, "trivial_bytes": 12_288, "per_copy_duplicate_bytes": 3_221_225_472,
            "repeated_content_bytes": 0, "dup_ratio": 2.0, "amplification": 2.41,
            "globally_unique_bytes": 1_073_741_824,
            "decided_by": {"inference": 6_442_463_232 - 3 * 2**20, "rule": 3 * 2**20, "forwarded": 0},
        },
        "nodes": [
            {"name": "client", "addresses": ["198.18.0.10"], "member": False},
            {"name": "s2d-a", "addresses": ["198.18.1.1", "198.19.1.1"], "member": True},
            {"name": "s2d-b", "addresses": ["198.18.1.2"], "member": True},
            {"name": "s2d-c", "addresses": ["198.18.1.3"], "member": True},
        ],
        "top_duplicates": [
            {
                "digest": "3fa2" + "ab" * 30,
                "size": 1_048_576,
                "sends_total": 5,
                "duplicate_bytes": 4 * 1_048_576,
                "sends": [
                    _send(0, 101, 140, 1_700_000_001.25, "client", "s2d-a", 0),
                    _send(0, 150, 190, 1_700_000_001.5, "s2d-a", "s2d-b", 0),
                    _send(1, 7, 9, 1_700_000_001.75, "s2d-a", "s2d-c", 0),
                    _send(0, 77, 77, 1_700_000_002.0, "s2d-a", "s2d-b", 1_048_576),
                ],
            },
            {"digest": "77" * 32, "size": 4096, "sends": [_send(0, 5, 5, 1_700_000_003.0, "s2d-a", "s2d-b", 4096)]},
        ],
        "index": {"window_seconds": 60.0, "peak_live_sends": 1200, "peak_live_blocks": 300_000,
                  "peak_bytes_estimate": 48_000_000, "max_live_blocks": 16_777_216, "early_expiries": 0,
                  "other_node_lookups": 0},
        "accounting": {
            "categories": {"capture_format": 14_598_000, "protocol_headers": 60_000_000,
                           "smb_payload": 1_150_000_000, "smb_metadata": 9_969_890, "smb_encrypted": 1000},
            "total_bytes": 1_234_568_890, "input_bytes": 1_234_568_890, "reconciled": True,
        },
        "anomalies": {"smb2.write.data_offset_out_of_range": 3, "tcp.bad_header_length": 1},
        "tcp": {"segments": 900_000, "retransmitted_bytes": 14_600, "retransmitted_segments": 10,
                "out_of_order_segments": 4, "gap_bytes": 2920, "gaps": 2, "mirror_duplicate_frames": 17,
                "peak_buffered_bytes": 1_000_000, "flows": 6},
        "smb2": {"commands": {"WRITE.request": 1536, "WRITE.response": 1536, "READ.request": 3},
                 "write_req_pdus": 1536, "write_bytes": 6_442_463_232, "read_resp_pdus": 3, "read_bytes": 12_288,
                 "files": ["vm01\\disk.vhdx"], "dialects": ["3.1.1"], "encrypted_messages": 1,
                 "compressed_messages": 0, "payload_incomplete": 0},
        # A finding the figures do not give (the engine's input findings come first).
        "findings": [{"code": "input_skipped", "path": "/captures/c.pcap",
                      "message": "/captures/c.pcap: not a pcap or pcapng capture file: skipped; the report covers the 2 other inputs"}],
        "warnings": [],
        "analysis": {"elapsed_seconds": 3.2, "frames": 912_355, "bytes_per_second": 385_802_778.0},
    }


def with_findings(r: dict) -> dict:
    """`r` with the findings the engine derives from its figures after its input findings
    (those the sample lists), and `warnings` their sentences, as a result has them."""
    from smbwire.engine import load_core

    inputs = [f for f in r.get("findings", []) if f.get("code") == "input_skipped"]
    derived = json.loads(load_core().derive_findings(json.dumps(r)))
    r["findings"] = inputs + derived
    r["warnings"] = [f["message"] for f in r["findings"]]
    return r


def render(result, width: int, top=None, derive: bool = True) -> str:
    if derive:
        result = with_findings(result)
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None, force_terminal=False)
    render_report(result, console, top=top)
    return console.export_text()


# ------------------------------------------------------------------------------ renderer


@pytest.mark.parametrize("width", [80, 200])
def test_report_shows_key_figures(width):
    text = render(sample_result(), width)
    # Headline: each edge with its ratio (2 decimals), and the amplification.
    for src, dst, ratio in (("client", "s2d-a", "1.00"), ("s2d-a", "s2d-b", "3.00"), ("s2d-a", "s2d-c", "2.00")):
        assert any(f"{src} → {dst}" in line and ratio in line for line in text.splitlines()), (src, dst)
    assert "Amplification 2.41×" in text
    assert "6.00 GiB on all edges for 1.00 GiB unique" in text  # globally unique bytes, not the per-edge sum
    assert "replication" in text and "redirection" in text
    # Human-readable bytes.
    assert "3.00 GiB" in text and "1.00 GiB" in text
    # Byte accounting: exact counts that reconcile with the input size.
    assert "1,234,568,890" in text and "reconciled" in text
    assert "smb_payload" in text and "1,150,000,000" in text
    # Warnings: the engine's findings, input findings first, then those of the figures.
    assert "/captures/c.pcap: not a pcap or pcapng capture file" in text
    assert "2920 bytes missing from TCP streams in 2 gaps" in text
    assert "17 frames seen twice on the mirror port were removed" in text
    assert "14600 retransmitted TCP bytes in 10 segments" in text
    assert "1000 bytes of encrypted SMB3 messages" in text
    assert "smb2.write.data_offset_out_of_range ×3" in text


@pytest.mark.parametrize("width", [80, 200])
def test_wireshark_filters_use_last_frame_per_input(width):
    text = render(sample_result(), width)
    lines = text.splitlines()
    # Input 0: sends with frames [101,140], [150,190], [77,77] -> last frames, sorted.
    assert any(line.rstrip().endswith("frame.number in {77, 140, 190}") and "[0]" in line for line in lines)
    assert any(line.rstrip().endswith("frame.number in {9}") and "[1]" in line for line in lines)
    assert any(line.rstrip().endswith("frame.number in {5}") for line in lines)


@pytest.mark.parametrize("width", [80, 200])
def test_report_fits_the_width(width):
    for line in render(sample_result(), width).splitlines():
        if "frame.number in" in line:
            continue  # filters are never broken, the terminal soft-wraps them
        assert len(line) <= width, line


def test_narrow_and_wide_layouts_differ_as_designed():
    narrow, wide = render(sample_result(), 80), render(sample_result(), 200)
    assert "Duplicate breakdown per edge" in narrow and "Duplicate breakdown per edge" not in wide
    digest = "3fa2" + "ab" * 30
    assert digest in wide and digest not in narrow and digest[:12] + "…" in narrow
    assert "/captures/node-a/mirror-port-a.pcapng" in wide
    assert "mirror-port-a.pcapng" in narrow


@pytest.mark.parametrize("width", [80, 140, 200])
def test_duplicate_headings_are_not_broken_mid_phrase(width):
    """A heading too long for the width gives its digest a line of its own; the rest of the
    heading, its transport and the "digest <hex>" pair stay whole on their lines."""
    lines = render(sample_result(), width).split("Top duplicated")[1].split("Byte accounting")[0].splitlines()
    heads = [i for i, line in enumerate(lines) if line[:3] in ("1. ", "2. ")]
    assert len(heads) == 2
    for i in heads:
        head = lines[i]
        assert head.rstrip().endswith(("MiB", "KiB", "B", "…")) or "  digest " in head, head
        if "  digest " not in head:
            assert lines[i + 1].startswith("   digest "), lines[i + 1]
    narrow = render(sample_result(), 80)
    assert "2. 4.00 KiB, sent 1 time via tcp  digest 777777777777…" in narrow
    assert "1. 1.00 MiB, sent 5 times via tcp (first 4 listed), repeats 4.00 MiB\n   digest 3fa2abababab…" in narrow
    wide = render(sample_result(), 140)
    assert "repeats 4.00 MiB\n   digest 3fa2" + "ab" * 30 + "\n" in wide


def test_duplicate_sends_show_node_names_and_totals():
    narrow, wide = render(sample_result(), 80), render(sample_result(), 200)
    assert "sent 5 times via tcp (first 4 listed), repeats 4.00 MiB" in narrow
    assert "client → s2d-a" in narrow and "198.18.0.10" not in narrow.split("Top duplicated")[1].split("Byte")[0]
    assert "client (198.18.0.10) → s2d-a (198.18.1.1)" in wide


def test_null_ratio_is_explained():
    r = sample_result()
    r["edges"][0]["dup_ratio"] = None
    assert "Ratio —: none of the bytes was first on the edge" in render(r, 80)


def test_index_bound_and_other_node_are_warnings():
    r = sample_result()
    r["index"].update(early_expiries=12, other_node_lookups=3)
    text = render(r, 80)
    assert "12 sends left the dedupe index before their window ended" in text
    assert "lumped into node 'other'" in text


def test_top_limits_the_duplicates_shown():
    text = render(sample_result(), 120, top=1)
    assert "Top duplicated payloads (1 of 2)" in text
    assert "frame.number in {5}" not in text


def test_missing_sections_are_named_not_fatal():
    r = sample_result()
    for key in ("accounting", "top_duplicates", "tcp"):
        del r[key]
    r["edges"][0].pop("dup_ratio")
    text = render(r, 80)
    assert "result has no 'top_duplicates', 'accounting', 'tcp'" in text
    assert "Amplification 2.41×" in text
    assert "—" in text  # the edge without a ratio


def test_unknown_keys_and_wrong_types_are_shown():
    r = sample_result()
    r["future_section"] = {"x": 1}
    r["schema"] = "smbwire/2"
    r["tcp"]["new_counter"] = 5
    r["edges"][1]["payload_bytes"] = "lots"
    text = render(r, 200)
    assert "Also in the result (see --json): future_section" in text
    assert "result schema is 'smbwire/2'" in text
    assert "new counter 5" in text
    assert "lots" in text


@pytest.mark.parametrize("capture", ["redirect4-1MiB.pcap", "read-owner.pcap", "public/smb311-compress-lz77-lz77huff-lznt1.pcap",
                                     "public/smbdirect-iwarp-win2012-smb300.pcap"])
def test_every_key_of_an_engine_result_is_rendered(capture):
    """The report's "Also in the result" line is for keys a newer engine adds: every key this
    engine writes (`tunnels` even when empty, `rdma`, `series`, ...) has its place."""
    from smbwire.engine import analyze
    from paths import CAPTURES

    r = analyze([str(CAPTURES / capture)])
    assert "tunnels" in r and "rdma" in r
    text = render(r, 120, derive=False)
    assert "Also in the result" not in text, text[-400:]


def test_accounting_that_does_not_reconcile_is_a_warning():
    r = sample_result()
    r["accounting"]["reconciled"] = False
    r["accounting"]["total_bytes"] = 5
    text = render(r, 80)
    assert "does NOT reconcile" in text
    assert "byte accounting does not reconcile: 5 accounted" in text


def test_clean_result_has_no_warnings():
    r = sample_result()
    r["warnings"] = []
    r["anomalies"] = {}
    r["tcp"].update(gaps=0, gap_bytes=0, retransmitted_bytes=0, retransmitted_segments=0, mirror_duplicate_frames=0)
    r["smb2"]["encrypted_messages"] = 0
    del r["accounting"]["categories"]["smb_encrypted"]
    r["findings"] = []
    assert findings(with_findings(r)) == []
    assert "none" in render(r, 80).split("Warnings", 1)[1]


def test_empty_edges_says_so():
    r = sample_result()
    r["edges"], r["top_duplicates"] = [], []
    assert "no SMB2 WRITE/READ payload found" in render(r, 80)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


def _mutate(result: dict, data) -> dict:
    """Replace a few values anywhere in the result with arbitrary JSON values, or delete them."""
    r = copy.deepcopy(result)
    for _ in range(data.draw(st.integers(1, 6))):
        node, path = r, []
        while isinstance(node, (dict, list)) and node and data.draw(st.booleans()):
            key = data.draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
            path.append((node, key))
            node = node[key]
        if not path:
            continue
        parent, key = path[-1]
        if isinstance(parent, dict) and data.draw(st.booleans()):
            del parent[key]
        else:
            parent[key] = data.draw(json_values)
    return r


@settings(max_examples=150, deadline=None)
@given(st.data(), st.sampled_from([40, 80, 200]))
def test_renderer_never_raises_on_damaged_results(data, width):
    # Damaged as it stands (findings included): no engine rule is applied to it first.
    render(_mutate(with_findings(sample_result()), data), width, derive=False)


@settings(max_examples=50, deadline=None)
@given(json_values)
def test_renderer_never_raises_on_any_json(value):
    render(value, 80, derive=False)


# ------------------------------------------------------------------------------ pieces


def test_frame_filter_sorted_unique():
    assert frame_filter([40, 12, 77, 12]) == "frame.number in {12, 40, 77}"


def test_filters_by_input_skips_sends_without_frames():
    sends = [{"file": 0, "frames": [1, 3]}, {"file": 2, "frames": [8, 9]}, {"file": 0}, {"file": 0, "frames": []},
             {"file": "x", "frames": [4, 4]}, "junk"]
    assert filters_by_input(sends) == {0: "frame.number in {3}", 2: "frame.number in {9}"}


def test_rdma_send_filter_names_its_header_frame():
    # An RDMA send's data frames and the frame of the SMB2 message it belongs to.
    sends = [{"file": 0, "frames": [20, 31], "header_frame": 12, "transport": "rocev2"},
             {"file": 0, "frames": [40, 52], "header_frame": 35, "transport": "rocev2"},
             {"file": 0, "frames": [60, 61], "header_frame": True}]
    assert filters_by_input(sends) == {0: "frame.number in {12, 31, 35, 52, 61}"}


@pytest.mark.parametrize("value,text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.00 KiB"), (1536, "1.50 KiB"),
                                        (3 * 2**30, "3.00 GiB"), (None, "—"), ("x", "x"), (math.inf, "inf")])
def test_fmt_bytes(value, text):
    assert fmt_bytes(value) == text


def test_fmt_count_and_ratio():
    assert fmt_count(1234567) == "1,234,567"
    assert fmt_ratio(3) == "3.00"
    assert fmt_ratio(2.456, "×") == "2.46×"
    assert fmt_ratio(True) == "True"


@pytest.mark.parametrize("value,text", [(1, "1 interval"), (0, "0 intervals"), (2, "2 intervals"),
                                        (1234, "1,234 intervals"), (1.0, "1 interval"), (None, "— intervals"),
                                        (True, "True intervals"), ("x", "x intervals")])
def test_fmt_counted(value, text):
    assert fmt_counted(value, "interval") == text
    assert fmt_counted(1, "live block") == "1 live block"
    assert fmt_counted(3, "index", "indices") == "3 indices"


def test_footer_counts_one_of_a_thing_in_the_singular():
    # A run with one interval, one row, one live send and block: "1 intervals" read as a slip.
    r = sample_result()
    r["inputs"] = r["inputs"][:1]
    r["inputs"][0]["frames"] = 1
    r["analysis"]["frames"] = 1
    r["index"].update(peak_live_sends=1, peak_live_blocks=1)
    r["series"] = {"interval_seconds": 1.0, "intervals": 1, "rows": [{}]}
    text = " ".join(render(r, 200).split())
    for phrase in ("1 frame in", "peak 1 live send, 1 live block,", "Time series: 1 interval of 1 s with payload, 1 row ",
                   "1 input ·"):
        assert phrase in text, (phrase, text)
    assert "1 intervals" not in text and "1 rows" not in text and "1 frames" not in text


@pytest.mark.parametrize("text,n", [("4096", 4096), ("64k", 65536), ("64KiB", 65536), ("1MiB", 2**20),
                                    ("1.5GiB", 3 * 2**29), ("10MB", 10_000_000), ("2 g", 2 * 2**30)])
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "-1", "lots", "1.5", "5XB"])
def test_parse_size_refuses(text):
    with pytest.raises(ValueError):
        parse_size(text)


# ------------------------------------------------------------------------------ JSON writer


def test_write_json_roundtrip_file(tmp_path):
    out = tmp_path / "r.json"
    write_json(sample_result(), str(out))
    text = out.read_text(encoding="utf-8")
    assert json.loads(text) == sample_result()
    assert text.startswith('{\n  "schema": "smbwire/1"') and text.endswith("}\n")
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left behind


def test_write_json_gives_a_new_file_the_mode_open_gives(tmp_path):
    out = tmp_path / "r.json"
    umask = os.umask(0o022)
    try:
        write_json({"a": 1}, str(out))
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        os.umask(0o077)
        write_json({"a": 2}, str(out))  # replaced: the mode a plain open() gives a new file
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
    finally:
        os.umask(umask)
    assert json.loads(out.read_text()) == {"a": 2}


def test_write_json_writes_through_a_link_and_into_a_pipe_in_place(tmp_path):
    # A symbolic link stays a link; its target gets the result (atomically).
    target = tmp_path / "target.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_json({"a": 1}, str(link))
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}
    # A named pipe (as /dev/null or /dev/stdout, which a test must not touch) is written
    # into, not replaced by a regular file.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_json({"b": 2}, str(fifo))
    reader.join(timeout=10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(got[0]) == {"b": 2}
    # Through a link to the pipe, the same.
    fifo_link = tmp_path / "fifo-link"
    fifo_link.symlink_to(fifo)
    got.clear()
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_json({"c": 3}, str(fifo_link))
    reader.join(timeout=10)
    assert fifo_link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(got[0]) == {"c": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "fifo-link", "link.json", "target.json"]


def test_write_json_stdout():
    buf = io.StringIO()
    write_json({"a": "é"}, "-", stdout=buf)
    assert buf.getvalue() == '{\n  "a": "é"\n}\n'


def test_write_json_refuses_nan_and_bad_paths(tmp_path):
    with pytest.raises(ValueError):
        dumps({"x": math.nan})
    with pytest.raises(UserError, match="does not exist"):
        write_json({}, str(tmp_path / "no" / "r.json"))
    with pytest.raises(UserError, match="is a directory"):
        write_json({}, str(tmp_path))


def test_findings_are_shown_in_the_engines_order_and_words():
    r = with_findings(sample_result())
    codes = [f["code"] for f in r["findings"]]
    assert codes == ["input_skipped", "tcp_gaps", "mirror_duplicates", "retransmitted", "smb_encrypted", "anomalies"]
    got = findings(r)
    messages = [f["message"] for f in r["findings"]]
    # Each finding's sentence, the anomalies one followed by its names (a table line).
    assert got == messages + ["anomalies by name: smb2.write.data_offset_out_of_range ×3, tcp.bad_header_length ×1"]
    assert r["warnings"] == messages


def test_a_result_without_findings_shows_its_warnings():
    r = sample_result()
    del r["findings"]
    r["warnings"] = ["an older engine's sentence"]
    got = findings(r)
    assert got[0] == "an older engine's sentence"
    assert "result has no 'findings': not shown" in got


def test_build_report_embeds_in_other_layouts():
    # The live view puts the same renderables inside its own layout.
    from rich.console import Group
    from rich.panel import Panel

    console = Console(width=100, file=io.StringIO(), record=True, color_system=None)
    console.print(Panel(Group(*build_report(sample_result(), 96)), title="live"))
    text = console.export_text()
    assert "Amplification 2.41×" in text and "live" in text
    assert all(len(line) <= 100 for line in text.splitlines() if "frame.number" not in line)


def test_a_ratio_without_non_trivial_payload_is_a_dash_not_1_00():
    """Only trivial payload (all-zero writes), or none: the engine's ratio of 1.0 is a
    convention, not a measurement; the headline shows a dash and says why, in the terminal
    and in the HTML page (whose data-value keeps the result's exact value)."""
    from smbwire.html import render_html

    r = sample_result()
    for e in r["edges"]:
        e["trivial_bytes"] += e["nontrivial_bytes"]
        e["nontrivial_bytes"] = e["unique_bytes"] = e["per_copy_duplicate_bytes"] = 0
        e["dup_ratio"] = 1.0
    r["totals"].update(nontrivial_bytes=0, unique_bytes=0, globally_unique_bytes=0, dup_ratio=1.0, amplification=1.0)
    text = render(r, 200)
    assert "Amplification —  (no non-trivial payload on any edge: nothing to compare)" in text
    head = text.split("Duplicate-payload ratio per edge")[1].split("Amplification")[0]
    assert "1.00" not in head and head.count("—") == len(r["edges"]), head
    page = render_html(r)
    assert 'data-value="1.0">—</span>' in page and "nothing to compare" in page
    # With payload the figure is shown as before.
    assert "Amplification 1.00×" not in text and "Amplification" in render(sample_result(), 200)


def test_iso_times_keep_nanoseconds():
    """Capture times are ns: an ISO 8601 bound copied from Wireshark (nine digits) is not cut
    to the microsecond; a comma is a decimal sign too; an offset still applies."""
    from smbwire.units import parse_time

    assert parse_time("2025-01-30T12:00:00.123456789Z") == 1_738_238_400_123_456_789
    assert parse_time("2025-01-30T12:00:00.123456789") == parse_time("1738238400.123456789")
    assert parse_time("2025-01-30 13:00:00,5+01:00") == 1_738_238_400_500_000_000
    assert parse_time("2025-01-30T12:00:00.1234567891Z") == 1_738_238_400_123_456_789
    assert parse_time("2025-01-30T12:00:00Z") == 1_738_238_400 * 10**9
    with pytest.raises(ValueError):
        parse_time("2025-01-30T25:00:00.5Z")
