"""The Prometheus collector over a live snapshot (no capture needed: tests/live/test_metrics.py
scrapes a real one)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest  # installed by `make setup`

from smbwire.metrics import SnapshotCollector


def test_analysed_fraction_is_a_gauge_of_the_engines_figure():
    c = SnapshotCollector(frozenset({"smb_encrypted"}))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(c)
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
    c = SnapshotCollector(frozenset())
    reg = CollectorRegistry(auto_describe=False)
    reg.register(c)
    snap = {"edges": [], "totals": {}, "accounting": {"categories": {}}}
    c.update(snap)
    assert "smbwire_tunnel" not in generate_latest(reg).decode()
    snap["tunnels"] = {"erspan2": {"frames": 7, "bytes": 350}, "vxlan+erspan2": {"frames": 2, "bytes": 200}}
    c.update(snap)
    text = generate_latest(reg).decode()
    assert 'smbwire_tunnel_frames_total{kind="erspan2"} 7.0' in text
    assert 'smbwire_tunnel_frames_total{kind="vxlan+erspan2"} 2.0' in text
    assert 'smbwire_tunnel_bytes_total{kind="erspan2"} 350.0' in text
