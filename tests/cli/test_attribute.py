"""`smbwire attribute`: dedupe and attribution rerun from send ledgers (analyze --ledger)
give what `analyze` gives on the captures with the same options, with the real engine.

Compared: the whole result JSON, key order included, except `analysis` (timing; it also names
the ledgers), and the evidence files byte for byte."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from smbwire.cli import cli
from cli.test_cli_errors import assert_one_line_error
from paths import CAPTURES, PUBLIC

TOPOLOGY = CAPTURES / "s2d-two-node.toml"
NOISY = CAPTURES / "nested4-1MiB-mirrordup-retx-reorder.pcap"


def run(*args) -> None:
    r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


def result(path):
    r = json.loads(path.read_text())
    analysis = r.pop("analysis")
    return r, analysis


def shape(x):
    """Key order of every object, recursively (dict equality ignores it; the report does not)."""
    if isinstance(x, dict):
        return [(k, shape(v)) for k, v in x.items()]
    if isinstance(x, list):
        return [shape(v) for v in x]
    return None


def assert_same(want_path, got_path):
    want, _ = result(want_path)
    got, analysis = result(got_path)
    diff = [k for k in set(want) | set(got) if want.get(k) != got.get(k)]
    assert not diff, {k: (want.get(k), got.get(k)) for k in diff}
    assert shape(got) == shape(want)
    return got, analysis


def analyze_and_attribute(tmp_path, captures, *options, ledger_options=()):
    """analyze CAPTURES OPTIONS vs attribute (ledger of analyze CAPTURES LEDGER_OPTIONS) OPTIONS."""
    ledger = tmp_path / "l.parquet"
    run("analyze", *captures, *ledger_options, "--ledger", ledger, "-q")
    run("analyze", *captures, *options, "--json", tmp_path / "want.json", "--evidence", tmp_path / "want.ev", "-q")
    run("attribute", ledger, *options, "--json", tmp_path / "got.json", "--evidence", tmp_path / "got.ev", "-q")
    got, analysis = assert_same(tmp_path / "want.json", tmp_path / "got.json")
    assert (tmp_path / "got.ev").read_bytes() == (tmp_path / "want.ev").read_bytes()
    assert analysis["ledgers"] == [str(ledger)]
    return got


@pytest.mark.parametrize("options", [(), ("-t", TOPOLOGY), ("-t", TOPOLOGY, "-w", "0.0005", "--top", "2")],
                         ids=["no-topology", "topology", "topology-short-window"])
def test_attribute_equals_analyze(tmp_path, options):
    got = analyze_and_attribute(tmp_path, [NOISY], *options, ledger_options=options)
    assert got["totals"]["payload_bytes"] > 0
    # The noisy capture's warnings (mirror copies, retransmissions) are rebuilt too.
    assert any("retransmitted" in w for w in got["warnings"])


def test_a_fixed_topology_needs_only_the_ledger(tmp_path):
    """The ledger was written without a topology (every address its own node); attribute with
    the topology gives what analyze with it gives, and it differs from the first analysis."""
    got = analyze_and_attribute(tmp_path, [CAPTURES / "redirect4-1MiB.pcap"], "-t", TOPOLOGY)
    assert {e["class"] for e in got["edges"]} == {"replication", "redirection"}
    assert [n["name"] for n in got["nodes"]] == ["owner", "partner"]
    plain, _ = result(tmp_path / "want.json")
    run("analyze", CAPTURES / "redirect4-1MiB.pcap", "--json", tmp_path / "plain.json", "-q")
    assert result(tmp_path / "plain.json")[0]["nodes"] != plain["nodes"]


def test_one_ledger_of_several_captures(tmp_path):
    caps = [CAPTURES / "mirror2-1MiB.pcap", CAPTURES / "read-owner.pcap"]
    got = analyze_and_attribute(tmp_path, caps, "-t", TOPOLOGY)
    assert len(got["inputs"]) == 2


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is installed by make setup")
@pytest.mark.parametrize("topology", [False, True])
def test_ledgers_of_separate_captures_merge_as_one_analysis(tmp_path, topology):
    """A redirect run split by connection into two files (two mirror ports), each analysed on
    its own with --ledger: attribute of both ledgers = analyze of both captures. Only the
    connection ids are renumbered (here they come out equal)."""
    src = CAPTURES / "redirect4-1MiB.pcap"
    parts = [tmp_path / "r0.pcap", tmp_path / "r1.pcap"]
    for p, f in zip(parts, ["tcp.stream == 0", "tcp.stream != 0"]):
        subprocess.run(["tshark", "-r", str(src), "-Y", f, "-w", str(p)], check=True, capture_output=True)
    opts = ("-t", TOPOLOGY) if topology else ()
    ledgers = [tmp_path / "r0.parquet", tmp_path / "r1.parquet"]
    for p, l in zip(parts, ledgers):
        run("analyze", p, "--ledger", l, "-q")
    run("analyze", *parts, *opts, "--json", tmp_path / "want.json", "--evidence", tmp_path / "want.ev", "-q")
    run("attribute", *ledgers, *opts, "--json", tmp_path / "got.json", "--evidence", tmp_path / "got.ev", "-q")
    got, analysis = assert_same(tmp_path / "want.json", tmp_path / "got.json")
    assert (tmp_path / "got.ev").read_bytes() == (tmp_path / "want.ev").read_bytes()
    assert analysis["ledgers"] == [str(l) for l in ledgers]
    assert [i["path"] for i in got["inputs"]] == [str(p) for p in parts]
    # Both files carry WRITE sends, so the merge had real work to do.
    assert {s["file"] for d in got["top_duplicates"] for s in d["sends"]} == {0, 1}
    if topology:
        assert got["totals"]["dup_ratio"] == 1.5


PUBLIC_CAPTURES = sorted(p for p in PUBLIC.glob("*.pcap*"))


@pytest.mark.parametrize("capture", PUBLIC_CAPTURES + sorted(CAPTURES.glob("*.pcap")), ids=lambda p: p.name)
def test_attribute_equals_analyze_on_every_capture(tmp_path, capture):
    ledger = tmp_path / "l.parquet"
    want = tmp_path / "want.json"
    r = CliRunner().invoke(cli, ["analyze", str(capture), "--ledger", str(ledger), "--json", str(want), "-q"])
    if r.exit_code == 2 and not ledger.exists():
        # Not analysable at all (the analysis refuses it with one line); no ledger either.
        assert "smbwire: error:" in r.stderr
        return
    assert r.exit_code == 0, r.output
    run("attribute", ledger, "--json", tmp_path / "got.json", "-q")
    assert_same(want, tmp_path / "got.json")


def test_refusals_are_one_line(tmp_path):
    r = CliRunner().invoke(cli, ["attribute", str(NOISY)])
    assert_one_line_error(r, 2, str(NOISY), "not a Parquet ledger")
    ledger = tmp_path / "l.parquet"
    run("analyze", NOISY, "--ledger", ledger, "-q")
    r = CliRunner().invoke(cli, ["attribute", str(ledger), str(ledger)])
    assert_one_line_error(r, 2, "same file as")
    r = CliRunner().invoke(cli, ["attribute", str(tmp_path / "missing.parquet")])
    assert_one_line_error(r, 2, "missing.parquet: no such file")
    r = CliRunner().invoke(cli, ["analyze", str(NOISY), "--ledger", str(tmp_path / "no" / "dir" / "l.parquet")])
    assert r.exit_code == 2 and "smbwire: error:" in r.stderr
