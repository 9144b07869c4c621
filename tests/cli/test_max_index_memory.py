"""`--max-index-memory SIZE` (analyze, attribute): past the bound the oldest sends leave the
dedupe index early, and the result says so (finding `index_memory_cap`, anomaly
`dedupe.index_memory_cap`, `index.memory_early_expiries`, `index.shortest_window_seconds`).

On the bundled nested-mirror capture each I/O's two copies are adjacent sends, so even the
smallest bound (1 KiB: one send at a time) still pairs them: the figures stay the same while
the window shrinks to well under a millisecond. A large bound changes nothing at all.
(`dissectors/src/dedupe/tests.rs::index_memory_cap_shortens_the_window` shows a bound that
makes repeats further apart go missing.)"""

from __future__ import annotations

import json

from click.testing import CliRunner

from smbwire.cli import cli
from paths import CAPTURES

CAPTURE = CAPTURES / "nested4-1MiB.pcap"


def analyze(tmp_path, *args) -> dict:
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"
    r = CliRunner().invoke(cli, ["analyze", *[str(a) for a in args], "-q", "--json", str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


def test_small_bound_shortens_the_window_and_says_so(tmp_path):
    free = analyze(tmp_path, CAPTURE)
    capped = analyze(tmp_path, CAPTURE, "--max-index-memory", "1KiB")
    idx = capped["index"]
    assert idx["max_index_bytes"] == 1024
    assert idx["memory_early_expiries"] > 0
    assert 0 <= idx["shortest_window_seconds"] < 0.001 < idx["window_seconds"]
    assert capped["anomalies"]["dedupe.index_memory_cap"] == idx["memory_early_expiries"]
    finding = [f for f in capped["findings"] if f["code"] == "index_memory_cap"]
    assert len(finding) == 1
    assert finding[0]["sends"] == idx["memory_early_expiries"]
    assert finding[0]["max_index_bytes"] == 1024
    assert any("memory bound" in w for w in capped["warnings"])
    # One send at a time stays: peaks drop, figures (adjacent copies) stay.
    assert idx["peak_live_sends"] <= 2 < free["index"]["peak_live_sends"]
    assert capped["totals"] == free["totals"]
    assert capped["edges"] == free["edges"]
    # Without the option nothing is said.
    assert "max_index_bytes" not in free["index"]
    assert free["index"]["memory_early_expiries"] == 0
    assert "shortest_window_seconds" not in free["index"]
    assert not [f for f in free["findings"] if f["code"] == "index_memory_cap"]


def test_large_bound_changes_nothing(tmp_path):
    free = analyze(tmp_path, CAPTURE)
    big = analyze(tmp_path, CAPTURE, "--max-index-memory", "1GiB")
    assert big["index"].pop("max_index_bytes") == 1 << 30
    big.pop("analysis")
    free.pop("analysis")
    assert big == free


def test_attribute_takes_the_bound(tmp_path):
    ledger = tmp_path / "sends.parquet"
    analyze(tmp_path, CAPTURE, "--ledger", ledger)
    out = tmp_path / "a.json"
    r = CliRunner().invoke(cli, ["attribute", str(ledger), "--max-index-memory", "1KiB", "-q", "--json", str(out)])
    assert r.exit_code == 0, r.output
    replayed = json.loads(out.read_text())
    direct = analyze(tmp_path, CAPTURE, "--max-index-memory", "1KiB")
    assert replayed["index"] == direct["index"]
    assert replayed["totals"] == direct["totals"]
    assert [f["code"] for f in replayed["findings"]].count("index_memory_cap") == 1


def test_bound_below_one_kib_is_refused(tmp_path):
    r = CliRunner().invoke(cli, ["analyze", str(CAPTURE), "-q", "--max-index-memory", "100"])
    assert r.exit_code == 2
    assert "1 KiB" in r.output
