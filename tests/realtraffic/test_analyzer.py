"""smbwire on real Samba traffic: for every workload the analyzer's JSON must show, per
node→node edge, the figures the workload produces by construction (`workloads.py`)."""

from __future__ import annotations

import pytest

from .analyzer_cli import analyze, edge_sum
from .workloads import ALL

pytestmark = pytest.mark.netns

NAMES = sorted(ALL)
NODES = ("n1", "n2")


@pytest.fixture(scope="module")
def reports(workload_runs, tmp_path_factory):
    cache: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in cache:
            run = workload_runs(name)
            out = tmp_path_factory.mktemp(f"an-{name}") / "report.json"
            cache[name] = analyze(run.capture.path, run.topology, out)
        return cache[name]

    return get


@pytest.mark.parametrize("name", NAMES)
def test_edge_figures(reports, name):
    report = reports(name)
    assert report.get("schema") == "smbwire/1"
    for t in ALL[name].truth:
        e = edge_sum(report, t.src, t.dst)
        where = f"{name} {t.src}->{t.dst}"
        assert e["payload_bytes"] == t.payload_bytes, where
        assert e["unique_bytes"] == t.unique_bytes, where
        assert e["sends"] == t.sends, where
        assert e["trivial_bytes"] == t.trivial_bytes, where
        assert e["per_copy_duplicate_bytes"] == t.per_copy_duplicate_bytes, where
        assert e["repeated_content_bytes"] == t.repeated_content_bytes, where
        if t.cls is not None:
            # All of the edge's payload is in the one class the workload implies.
            assert e["classes"] == {t.cls: t.payload_bytes}, where
        rows = [r for r in report["edges"] if r["payload_bytes"]]
        ratios = {r.get("dup_ratio") for r in rows
                  if r["src"] in (t.src, _addr(t.src)) and r["dst"] in (t.dst, _addr(t.dst))}
        if t.dup_ratio is None:
            # Only trivial blocks: nothing to call a duplicate.
            assert ratios <= {None, 1.0}, where
        else:
            assert ratios and all(r == pytest.approx(t.dup_ratio, rel=1e-3) for r in ratios), where


@pytest.mark.parametrize("name", NAMES)
def test_no_other_edges_carry_payload(reports, name):
    report = reports(name)
    expected = {(t.src, t.dst) for t in ALL[name].truth}
    for src in NODES:
        for dst in NODES:
            if src != dst and (src, dst) not in expected:
                assert edge_sum(report, src, dst)["payload_bytes"] == 0, f"{name} {src}->{dst}"


@pytest.mark.parametrize("name, amplification", [("copies3", 3.0), ("distinct", 1.0)])
def test_totals_amplification(reports, name, amplification):
    assert reports(name)["totals"]["amplification"] == pytest.approx(amplification, rel=1e-3)


def test_mirror_duplicates_change_nothing(reports):
    """The same workload captured with every frame twice (ingress + egress mirroring) gives
    the same edge figures; the extra frames are counted as mirror duplicates."""
    single, double = reports("distinct"), reports("distinct+dupmirror")
    for src, dst in (("n1", "n2"), ("n2", "n1")):
        assert edge_sum(double, src, dst) == edge_sum(single, src, dst)
    assert double["tcp"]["mirror_duplicate_frames"] > 2000
    assert single["tcp"]["mirror_duplicate_frames"] == 0


def _addr(node: str) -> str:
    from .netlab import ADDRESSES

    return ADDRESSES[node]
