"""`--csv` (the time series) and `--edges-csv` (the edge table), docs/csv.md: the files hold
the result JSON's figures cell for cell, with the documented header, and the options'
mistakes are one line each."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.test_cli_errors import assert_one_line_error
from paths import CAPTURES
from smbwire.cli import cli

TOPOLOGY = CAPTURES / "s2d-two-node.toml"
FIGURES = ["payload_bytes", "nontrivial_bytes", "unique_bytes", "per_copy_duplicate_bytes",
           "repeated_content_bytes", "trivial_bytes", "sends"]
SERIES_HEADER = ["t", "time_utc", "interval_seconds", "src", "dst", "class", *FIGURES]
EDGES_HEADER = ["src", "dst", "class", *FIGURES, "dup_ratio", "decided_by_inference", "decided_by_rule",
                "decided_by_forwarded"]


def read_csv(path: Path) -> list[list[str]]:
    raw = path.read_bytes()
    assert raw.endswith(b"\r\n") and b"\n" not in raw.replace(b"\r\n", b"")  # RFC 4180 line ends
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


@pytest.mark.parametrize("command", ["analyze", "attribute"])
def test_csv_files_hold_the_json_figures(tmp_path: Path, command: str) -> None:
    cap = CAPTURES / "redirect4-1MiB.pcap"
    opts = ["-t", str(TOPOLOGY), "--interval", "0.001", "--json", str(tmp_path / "r.json"),
            "--csv", str(tmp_path / "s.csv"), "--edges-csv", str(tmp_path / "e.csv"), "-q"]
    if command == "analyze":
        args = ["analyze", str(cap), *opts]
    else:
        ledger = tmp_path / "l.parquet"
        assert CliRunner().invoke(cli, ["analyze", str(cap), "--ledger", str(ledger), "-q"]).exit_code == 0
        args = ["attribute", str(ledger), *opts]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    result = json.loads((tmp_path / "r.json").read_text())

    series = read_csv(tmp_path / "s.csv")
    assert series[0] == SERIES_HEADER
    rows = result["series"]["rows"]
    assert len(series) - 1 == len(rows) == 6
    for cells, row in zip(series[1:], rows):
        got = dict(zip(SERIES_HEADER, cells))
        assert float(got["t"]) == row["t"]
        assert float(got["interval_seconds"]) == result["series"]["interval_seconds"] == 0.001
        assert (got["src"], got["dst"], got["class"]) == (row["src"], row["dst"], row["class"])
        assert [int(got[k]) for k in FIGURES] == [row[k] for k in FIGURES]
    assert series[1][:2] == ["1738238400.0", "2025-01-30T12:00:00.000000Z"]
    assert series[-1][:2] == ["1738238400.003", "2025-01-30T12:00:00.003000Z"]

    edges = read_csv(tmp_path / "e.csv")
    assert edges[0] == EDGES_HEADER
    assert len(edges) - 1 == len(result["edges"]) == 2
    for cells, e in zip(edges[1:], result["edges"]):
        got = dict(zip(EDGES_HEADER, cells))
        assert (got["src"], got["dst"], got["class"]) == (e["src"], e["dst"], e["class"])
        assert [int(got[k]) for k in FIGURES] == [e[k] for k in FIGURES]
        assert float(got["dup_ratio"]) == e["dup_ratio"]
        assert [int(got[f"decided_by_{k}"]) for k in ("inference", "rule", "forwarded")] == [
            e["decided_by"][k] for k in ("inference", "rule", "forwarded")]
    # The series sums to the edge table, column for column.
    for e in edges[1:]:
        key = e[:3]
        sums = [sum(int(s[SERIES_HEADER.index(k)]) for s in series[1:] if s[3:6] == key) for k in FIGURES]
        assert sums == [int(x) for x in e[3:10]]


def test_a_null_ratio_is_an_empty_cell() -> None:
    from smbwire.csvout import EDGE_COLUMNS, edge_rows, to_csv

    result = {"edges": [{"src": "a", "dst": "b", "class": "client", "payload_bytes": 1, "dup_ratio": None}]}
    text = to_csv(EDGE_COLUMNS, edge_rows(result))
    assert text.splitlines()[1] == "a,b,client,1,,,,,,,,,,"


@pytest.mark.parametrize("args,message", [
    (["--csv", "-"], "--csv needs a file name"),
    (["--edges-csv", "-"], "--edges-csv needs a file name"),
    (["--html", "/nonexistent/dir/r.html"], "does not exist"),
    (["--interval", "0"], "--interval"),
    (["--interval", "100000"], "--interval"),
])
def test_option_mistakes_are_one_line(args: list[str], message: str) -> None:
    r = CliRunner().invoke(cli, ["analyze", str(CAPTURES / "read-owner.pcap"), *args, "-q"])
    assert_one_line_error(r, 2, message)


def test_live_writes_the_outputs_of_its_final_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`smbwire live` plumbing against a stand-in capture: --interval reaches the engine's
    config as the series interval (the snapshot period is the hidden --refresh), and the final
    result's series, edges and page are written when the capture stops."""
    from smbwire import engine, live

    final = engine.analyze([CAPTURES / "redirect4-1MiB.pcap"], interval=0.001)
    started: dict = {}

    class Run:
        fallback_reason = None
        backend, hook, finished = "ebpf", "tcx", False

        def poll(self, timeout: float) -> None:
            return None

        def stop(self) -> dict:
            self.finished = True
            return final

    def start(iface: str, **kw: object) -> Run:
        started.update(kw, iface=iface)
        return Run()

    monkeypatch.setattr(live, "start", start)
    out = {k: tmp_path / f"{k}.out" for k in ("csv", "edges", "html")}
    r = CliRunner().invoke(cli, ["live", "-i", "eth9", "--duration", "0.05", "--plain", "--interval", "0.001",
                                 "--csv", str(out["csv"]), "--edges-csv", str(out["edges"]), "--html", str(out["html"])])
    assert r.exit_code == 0, r.output
    assert (started["iface"], started["series_interval"], started["interval"]) == ("eth9", 0.001, 1.0)
    from smbwire.csvout import EDGE_COLUMNS, SERIES_COLUMNS, edge_rows, series_rows, to_csv

    assert out["csv"].read_bytes().decode() == to_csv(SERIES_COLUMNS, series_rows(final))
    assert out["edges"].read_bytes().decode() == to_csv(EDGE_COLUMNS, edge_rows(final))
    assert 'id="series-chart"' in out["html"].read_text()
