"""The Prometheus collector over a live snapshot (no capture needed: tests/live/test_metrics.py
scrapes a real one)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest  # installed by `make setup`

from smbwire.metrics import SnapshotCollector


def collector(not_analysed=frozenset()) -> tuple[SnapshotCollector, CollectorRegistry]:
    """A collector registered alone, as `live --metrics` serves it."""
    c = SnapshotCollector(frozenset(not_analysed))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(c)
    return c, reg


def test_analysed_fraction_is_a_gauge_of_the_engines_figure():
    c, reg = collector({"smb_encrypted"})
    snap = {"edges": [], "totals": {"dup_ratio": 1.0, "amplification": 1.0},
            "accounting": {"categories": {"smb_encrypted": 100}, "input_bytes": 1000},
            "live": {"stats": {"kernel_drops": 0, "ring_drops": 3},
                     "analysed": {"storage_bytes": 2000, "delivered_bytes": 1000, "not_analysed_bytes": 100,
                                  "fraction": 0.45}}}
    c.update(snap)
    text = generate_latest(reg).decode()
    assert "smbwire_analysed_fraction 0.45" in text
    assert "smbwire_ring_drops_total 3.0" in text
    assert "smbwire_not_analysed_bytes_total 100.0" in text


def test_tunnels_are_counters_by_kind_and_absent_for_a_local_port():
    c, reg = collector()
    snap = {"edges": [], "totals": {}, "accounting": {"categories": {}}}
    c.update(snap)
    assert "smbwire_tunnel" not in generate_latest(reg).decode()
    snap["tunnels"] = {"erspan2": {"frames": 7, "bytes": 350}, "vxlan+erspan2": {"frames": 2, "bytes": 200}}
    c.update(snap)
    text = generate_latest(reg).decode()
    assert 'smbwire_tunnel_frames_total{kind="erspan2"} 7.0' in text
    assert 'smbwire_tunnel_frames_total{kind="vxlan+erspan2"} 2.0' in text
    assert 'smbwire_tunnel_bytes_total{kind="erspan2"} 350.0' in text


def test_the_grafana_dashboard_asks_only_for_what_the_collector_exports():
    """docs/grafana/smbwire-live.json: every metric its queries name is one the collector
    serves, with the labels the queries group, filter and label by; counters are read with
    rate(), gauges as they are; every query parses as PromQL; the panels fill the grid without
    overlapping and all use the dashboard's Prometheus data source variable."""
    import json
    import re
    from pathlib import Path

    import promql_parser  # installed by `make setup`: PromQL as Prometheus parses it
    from prometheus_client.parser import text_string_to_metric_families

    from smbwire.metrics import KINDS

    dash = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana" / "smbwire-live.json").read_text())
    c, reg = collector({"smb_encrypted"})
    c.update({"edges": [{"src": "n1", "dst": "n2", "class": "replication", "sends": 3, "dup_ratio": 2.0,
                         "unique_bytes": 1, "per_copy_duplicate_bytes": 1, "repeated_content_bytes": 0, "trivial_bytes": 0}],
              "totals": {"dup_ratio": 2.0, "amplification": 2.0}, "tunnels": {"erspan2": {"frames": 1, "bytes": 50}},
              "tcp": {"gaps": 0, "gap_bytes": 0}, "rdma": {"gaps": 0},
              "accounting": {"categories": {"smb_encrypted": 0}, "input_bytes": 10},
              "live": {"stats": {}, "analysed": {"fraction": 1.0, "shed_bytes": 0}, "shed": {"connections": 0}}})
    served: dict[str, tuple[str, set[str]]] = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            served.setdefault(s.name, (fam.type, set()))[1].update(s.labels)
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not (mine & cells), f"{p['title']} overlaps another panel"
        cells |= mine
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        for t in p["targets"]:
            expr, legend = t["expr"], t["legendFormat"]
            # Valid PromQL once Grafana has put an interval in place of its macro.
            promql_parser.parse(expr.replace("$__rate_interval", "1m"))
            names = re.findall(r"\bsmbwire_[a-z_]+", expr)
            assert names, expr
            for name in names:
                assert name in served, f"{name} is not served"
                kind, labels = served[name]
                rated = re.search(rf"rate\({name}\b", expr) is not None
                assert rated == (kind == "counter"), f"{name} ({kind}) in {expr}"
                used = set(re.findall(r"by \(([^)]*)\)", expr)[0].replace(" ", "").split(",")) if " by " in f" {expr}" else set()
                used |= set(re.findall(r"([a-z_]+)=\"", expr)) | set(re.findall(r"\{\{(\w+)\}\}", legend))
                assert used <= labels, f"{expr}: labels {used - labels} not on {name}"
                for value in re.findall(r'kind="([a-z_]+)"', expr):
                    assert value in {k for k, _ in KINDS}, value
    assert dash["templating"]["list"][0]["type"] == "datasource"
