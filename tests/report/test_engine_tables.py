"""What the engine exports for the views, checked against real captures and the docs: the
findings (codes and figures) a capture gives, the byte categories and the traffic classes.
The engine is their one source (dissectors/src/findings.rs, accounting.rs, attribution.rs);
docs/json-schema.md must list the same sets."""

from __future__ import annotations

import json
import re

import pytest

from smbwire.engine import analyze, load_core
from smbwire.tables import byte_categories, categories_with, traffic_classes

from paths import CAPTURES, PUBLIC, ROOT

SCHEMA_DOC = (ROOT / "docs" / "json-schema.md").read_text(encoding="utf-8")


def codes() -> dict[str, list[str]]:
    return {c["code"]: c["fields"] for c in json.loads(load_core().finding_codes())}


def doc_table(heading: str) -> list[str]:
    """First-column names of the first table after `heading` in docs/json-schema.md."""
    section = SCHEMA_DOC.split(heading, 1)[1]
    rows = re.findall(r"^\| `([a-z0-9_]+)` \|", section.split("\n### ", 1)[0], re.M)
    assert rows, heading
    return rows


# ------------------------------------------------------------------------------ findings

#: Captures and findings they must give (code, or (code, category)); `None`: no finding at all.
CASES = [
    # Analysed without a topology: what is not forwarded on the wire is unclassified.
    (CAPTURES / "nested4-1MiB.pcap", {"membership_unknown"}),
    (CAPTURES / "nested4-1MiB-mirrordup-retx-reorder.pcap", {"mirror_duplicates", "retransmitted", "membership_unknown"}),
    (PUBLIC / "smb300-aes128ccm-wiki.pcap", {"smb_encrypted", "no_payload"}),
    # Decompressed: three READ responses whose requests are not in the capture.
    (PUBLIC / "smb311-compress-lz77-lz77huff-lznt1.pcap", {"anomalies", "membership_unknown"}),
    # Its one old-looking 1-byte segment is a keep-alive (tshark: tcp.analysis.keep_alive 1,
    # retransmission 0), not a retransmission.
    (PUBLIC / "smbdirect-iwarp-win2012-smb300.pcap", {"tcp_gaps", "anomalies", "membership_unknown"}),
    (PUBLIC / "rdma-iwarp-read-write-long-run-markers.pcap",
     # Framed as its sender placed the markers (no rdma_unparsed since the markers fix).
     {"anomalies", ("not_analysed", "rdma_other_ulp"), "no_payload"}),
]


def _key(f: dict) -> object:
    return (f["code"], f["category"]) if "category" in f else f["code"]


@pytest.mark.parametrize("capture,expected", CASES, ids=[c.name for c, _ in CASES])
def test_captures_give_their_findings(capture, expected):
    r = analyze([str(capture)])
    got = r["findings"]
    assert {_key(f) for f in got} == (expected or set()), got
    known = codes()
    for f in got:
        # Every finding has a documented code, exactly its documented figures, and a sentence.
        assert list(f)[0] == "code" and list(f)[-1] == "message"
        assert [k for k in f if k not in ("code", "message")] == known[f["code"]], f
        assert f["message"] and "\n" not in f["message"]
    # The sentences are the `warnings`, in the same order.
    assert r["warnings"] == [f["message"] for f in got]
    # The figures are the result's own.
    by = {_key(f): f for f in got}
    if "tcp_gaps" in by:
        assert (by["tcp_gaps"]["gaps"], by["tcp_gaps"]["bytes"]) == (r["tcp"]["gaps"], r["tcp"]["gap_bytes"])
    if "anomalies" in by:
        assert by["anomalies"]["names"] == r["anomalies"]
        assert by["anomalies"]["total"] == sum(r["anomalies"].values())
    if "smb_encrypted" in by:
        assert by["smb_encrypted"]["bytes"] == r["accounting"]["categories"]["smb_encrypted"] > 0
        assert by["smb_encrypted"]["messages"] == r["smb2"]["encrypted_without_key"] > 0
    if "mirror_duplicates" in by:
        assert by["mirror_duplicates"]["frames"] == r["tcp"]["mirror_duplicate_frames"] > 0
    for f in got:
        if f["code"] == "not_analysed":
            assert f["category"] in categories_with("not_analysed")
            assert f["bytes"] == r["accounting"]["categories"][f["category"]] > 0


def test_findings_reach_the_report():
    from io import StringIO

    from rich.console import Console

    from smbwire.report import render_report

    r = analyze([str(PUBLIC / "smbdirect-iwarp-win2012-smb300.pcap")])
    console = Console(width=300, file=StringIO(), record=True, color_system=None)
    render_report(r, console)
    text = console.export_text().split("\nWarnings\n", 1)[1]
    for f in r["findings"]:
        assert f["message"] in text
    assert "anomalies by name: " in text


# ------------------------------------------------------------------------------ tables


def test_every_category_has_a_description_and_the_docs_list_the_same():
    cats = byte_categories()
    names = [c["name"] for c in cats]
    assert len(names) == len(set(names)) == 27
    for c in cats:
        assert c["description"] and "\n" not in c["description"], c
        assert c["disposition"] in ("overhead", "payload", "removed", "not_analysed", "other"), c
    assert doc_table("The categories (the engine's table") == names


def test_categories_seen_in_captures_are_in_the_table():
    known = {c["name"] for c in byte_categories()}
    for cap in [*CAPTURES.glob("*.pcap"), *PUBLIC.glob("*.pcap*")]:
        seen = set(analyze([str(cap)])["accounting"]["categories"])
        assert seen <= known, (cap.name, seen - known)


def test_finding_codes_are_documented():
    assert doc_table("### `findings`") == list(codes())


def test_classes_come_from_the_engine():
    classes = traffic_classes()
    assert [c["name"] for c in classes] == ["client", "redirection", "replication", "redirected-read", "write", "read"]
    assert all(c["label"] and c["description"] for c in classes)
    assert [c["name"] for c in classes if c["rule"]] == ["client", "redirection", "replication", "redirected-read"]
    # The docs name every class (a topology rule may use all but write and read).
    topo_doc = (ROOT / "docs" / "topology.md").read_text(encoding="utf-8")
    for c in classes:
        assert f"`{c['name']}`" in topo_doc


# ------------------------------------------------------------------------------ tunnel kinds


def test_tunnel_kinds_are_the_documented_ones_and_the_views_use_their_labels():
    from smbwire.tables import tunnel_kinds
    from smbwire.units import tunnel_sentence

    kinds = tunnel_kinds()
    section = SCHEMA_DOC.split("### `tunnels`", 1)[1].split("\n| key |", 1)[0]
    documented = re.findall(r"`([a-z0-9_]+)`", section.split("a tunnel inside", 1)[0])
    assert [k["name"] for k in kinds] == list(dict.fromkeys(documented))
    assert all(k["label"] and k["label"] != k["name"] for k in kinds)
    # Every kind, alone and inside another, reads with the engine's label, the inner one first.
    for outer in kinds:
        s = tunnel_sentence({"tunnels": {outer["name"]: {"frames": 3, "bytes": 150}}})
        assert s == f"tunnelled: 3 frames in {outer['label']} (150 B of tunnel headers)", s
        for inner in kinds:
            s = tunnel_sentence({"tunnels": {f"{outer['name']}+{inner['name']}": {"frames": 1, "bytes": 90}}})
            assert f"in {inner['label']} inside {outer['label']} (" in s, s
    # A kind this build does not know (a newer engine's result) is shown by its name.
    assert "in teleport (" in tunnel_sentence({"tunnels": {"teleport": {"frames": 1, "bytes": 1}}})
