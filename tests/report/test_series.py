"""The time series (`series` in the result, `--interval`) of the real engine on bundled,
public and generated captures: its rows sum to the edge totals exactly, `attribute` gives the
same series as `analyze`, and a steady nested-mirror write is a flat line at twice its
unique bytes."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from paths import CAPTURES, PUBLIC
from smbwire import engine
from smbwire.cli import cli
from smbwire.topology import load_topology

TOPOLOGY = CAPTURES / "s2d-two-node.toml"
FIGURES = ("payload_bytes", "nontrivial_bytes", "unique_bytes", "per_copy_duplicate_bytes",
           "repeated_content_bytes", "trivial_bytes", "sends")
BUNDLED = sorted(CAPTURES.glob("*.pcap"))
PUBLIC_CAPTURES = sorted(PUBLIC.glob("*.pcap*"))


def sums_by_edge(series: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, int]]:
    out: dict[tuple[str, str, str], dict[str, int]] = defaultdict(lambda: dict.fromkeys(FIGURES, 0))
    for row in series["rows"]:
        acc = out[(row["src"], row["dst"], row["class"])]
        for k in FIGURES:
            acc[k] += row[k]
    return dict(out)


def assert_series_sums_to_edges(r: dict[str, Any]) -> None:
    series = r["series"]
    sums = sums_by_edge(series)
    edges = {(e["src"], e["dst"], e["class"]): {k: e[k] for k in FIGURES} for e in r["edges"]}
    assert sums == edges
    # Rows: by time, then edge and class; intervals aligned to the interval; one row per key.
    keys = [(row["t"], row["src"], row["dst"], row["class"]) for row in series["rows"]]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    step = series["interval_seconds"]
    assert all(abs(t / step - round(t / step)) < 1e-3 for t, *_ in keys)
    assert series["intervals"] == len({t for t, *_ in keys})
    assert series["start"] == (keys[0][0] if keys else None)
    assert all(any(row[k] for k in FIGURES) for row in series["rows"])


def analyze(path: Path, **kw: Any) -> dict[str, Any]:
    try:
        return engine.analyze([path], **kw)
    except engine.InputError:
        pytest.fail(f"{path.name}: not analysable")


@pytest.mark.parametrize("interval", [0.001, 1.0])
@pytest.mark.parametrize("capture", BUNDLED, ids=lambda p: p.name)
def test_series_sums_to_the_edges_on_bundled_captures(capture: Path, interval: float) -> None:
    r = analyze(capture, topology=load_topology(str(TOPOLOGY)), interval=interval)
    assert_series_sums_to_edges(r)
    assert r["series"]["requested_interval_seconds"] == interval
    assert r["series"]["coarsenings"] == 0
    # read-owner.pcap: the VM reads on the owner, nothing crosses an edge.
    assert bool(r["edges"]) == bool(r["series"]["rows"]) == (capture.name != "read-owner.pcap")
    if interval == 0.001 and r["edges"]:
        # The generated captures last a few ms: several intervals.
        assert r["series"]["intervals"] >= 2


@pytest.mark.parametrize("capture", PUBLIC_CAPTURES, ids=lambda p: p.name)
def test_series_sums_to_the_edges_on_public_captures(capture: Path) -> None:
    try:
        r = engine.analyze([capture], interval=0.01)
    except engine.InputError:
        return  # not a capture smbwire can read at all (tests/cli covers the refusal)
    assert_series_sums_to_edges(r)


def test_redirection_decided_later_is_in_the_writes_interval() -> None:
    """redirect4: the partner's WRITEs are redirection (the owner writes them on after they
    arrive); at 1 ms intervals the series has them as redirection only, never replication."""
    r = analyze(CAPTURES / "redirect4-1MiB.pcap", topology=load_topology(str(TOPOLOGY)), interval=0.001)
    classes = {(row["src"], row["dst"], row["class"]) for row in r["series"]["rows"]}
    assert classes == {("partner", "owner", "redirection"), ("owner", "partner", "replication")}


def run(*args: Any) -> None:
    res = CliRunner().invoke(cli, [str(a) for a in args])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("capture", ["nested4-1MiB-mirrordup-retx-reorder.pcap", "redirect4-1MiB.pcap"])
def test_attribute_gives_the_series_of_analyze(tmp_path: Path, capture: str) -> None:
    ledger = tmp_path / "l.parquet"
    run("analyze", CAPTURES / capture, "--ledger", ledger, "-q")
    opts = ("-t", TOPOLOGY, "--interval", "0.0005")
    run("analyze", CAPTURES / capture, *opts, "--json", tmp_path / "want.json", "-q")
    run("attribute", ledger, *opts, "--json", tmp_path / "got.json", "-q")
    want = json.loads((tmp_path / "want.json").read_text())
    got = json.loads((tmp_path / "got.json").read_text())
    assert got["series"] == want["series"]
    assert want["series"]["interval_seconds"] == 0.0005 and want["series"]["intervals"] >= 4


def test_steady_nested_mirror_is_flat_at_twice_unique(tmp_path: Path, synth: Any) -> None:
    """A nested mirror with 4 copies (2 per node) writes every 1 MiB I/O to the partner twice:
    in every interval of the steady part, owner -> partner carries twice its unique bytes
    (per-copy = unique), to within the one I/O whose two copies straddle an interval edge."""
    io = 1 << 20
    pcap = tmp_path / "nested4.pcap"
    truth = synth({"scenario": "nested4", "bytes": 64 * io, "io_size": io}, pcap)
    r = engine.analyze([pcap], topology=truth["topology"], interval=0.02)
    assert_series_sums_to_edges(r)
    rows = [x for x in r["series"]["rows"] if (x["src"], x["dst"]) == ("owner", "partner")]
    assert {x["class"] for x in rows} == {"replication"}
    assert len(rows) >= 5
    steady = rows[1:-1]
    for x in steady:
        assert abs(x["per_copy_duplicate_bytes"] - x["unique_bytes"]) <= io, x
        assert x["repeated_content_bytes"] == 0
    # The line is flat: every steady interval within one I/O pair of the median.
    payloads = sorted(x["payload_bytes"] for x in steady)
    median = payloads[len(payloads) // 2]
    assert all(abs(p - median) <= 2 * io for p in payloads), payloads
    total = sum(x["unique_bytes"] for x in rows)
    assert sum(x["per_copy_duplicate_bytes"] for x in rows) == total == 64 * io


@pytest.mark.parametrize("interval", [0.0, 1e-7, 86401.0])
def test_the_engine_refuses_an_interval_out_of_range(interval: float) -> None:
    with pytest.raises(engine.UserError, match="interval must be between 0.000001 and 86400 seconds"):
        engine.analyze([CAPTURES / "read-owner.pcap"], interval=interval)
