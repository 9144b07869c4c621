"""`smbwire live --metrics HOST:PORT`: the live session's figures for Prometheus.

The engine hands the live view a snapshot every interval (analyzer/smbwire/live.py); this
module serves the newest one at `http://HOST:PORT/metrics` (prometheus_client, the optional
extra `smbwire[metrics]`). Every figure is the engine's: edges, classes and health are read
from the snapshot, nothing is recomputed. After the capture stops, the final result replaces the last
snapshot, so a scrape during the report sees the final figures.

Metrics (labels `src`, `dst` are node names, `class` a traffic class):

- `smbwire_payload_bytes_total{src,dst,class,kind}` — counter; `kind` is `unique`,
  `per_copy`, `repeated` or `trivial` (the edge's `unique_bytes`, `per_copy_duplicate_bytes`,
  `repeated_content_bytes`, `trivial_bytes`; they sum to its `payload_bytes`).
- `smbwire_sends_total{src,dst,class}` — counter.
- `smbwire_dup_ratio{src,dst,class}` — gauge, the edge entry's `dup_ratio` (absent when null).
- `smbwire_total_dup_ratio`, `smbwire_amplification` — gauges, from `totals`.
- `smbwire_kernel_drops_total`, `smbwire_ring_drops_total`, `smbwire_copy_errors_total` —
  counters, `live.stats`.
- `smbwire_tcp_gaps_total`, `smbwire_tcp_gap_bytes_total`, `smbwire_rdma_psn_gaps_total` —
  counters, holes in TCP streams and RDMA packets never seen.
- `smbwire_analysed_fraction` — gauge: the engine's `live.analysed.fraction`.
- `smbwire_not_analysed_bytes_total`, `smbwire_input_bytes_total` — counters: storage bytes
  smbwire could not analyse (the `not_analysed` byte categories) and every byte seen.
- `smbwire_shed_connections` (gauge), `smbwire_shed_bytes_total` (counter): connections shed
  under overload and their wire bytes (`live.shed`, `live.analysed.shed_bytes`).
- `smbwire_tunnel_frames_total{kind}`, `smbwire_tunnel_bytes_total{kind}` — counters: frames
  that came inside a remote mirror session or tunnel, and the bytes around them, by the
  engine's kind (`tunnels`: `erspan2`, `vxlan`, ...); absent for a local mirror port.
- `smbwire_snapshot_timestamp_seconds` — gauge, when the figures were taken.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

from .errors import UserError

KINDS = (("unique", "unique_bytes"), ("per_copy", "per_copy_duplicate_bytes"),
         ("repeated", "repeated_content_bytes"), ("trivial", "trivial_bytes"))


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:9100` for IPv6, `:9100` for every address) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--metrics {text!r}: expected HOST:PORT (e.g. 127.0.0.1:9464)")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


class SnapshotCollector:
    """A prometheus_client collector over the newest snapshot (thread-safe swap)."""

    def __init__(self, not_analysed: frozenset[str]):
        self._snap: dict[str, Any] | None = None
        self._at = 0.0
        self._lock = threading.Lock()
        self._not_analysed = not_analysed

    def update(self, snap: dict[str, Any]) -> None:
        with self._lock:
            self._snap, self._at = snap, time.time()

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            snap, at = self._snap, self._at
        if snap is None:
            return
        payload = CounterMetricFamily("smbwire_payload_bytes", "Payload bytes per edge, class and kind.",
                                      labels=["src", "dst", "class", "kind"])
        sends = CounterMetricFamily("smbwire_sends", "Sends per edge and class.", labels=["src", "dst", "class"])
        ratio = GaugeMetricFamily("smbwire_dup_ratio", "Non-trivial / unique bytes per edge and class.",
                                  labels=["src", "dst", "class"])
        for e in snap.get("edges") or []:
            if not isinstance(e, dict):
                continue
            src, dst, cls = str(e.get("src")), str(e.get("dst")), str(e.get("class"))
            for kind, key in KINDS:
                payload.add_metric([src, dst, cls, kind], _num(e.get(key)) or 0.0)
            sends.add_metric([src, dst, cls], _num(e.get("sends")) or 0.0)
            r = _num(e.get("dup_ratio"))
            if r is not None:
                ratio.add_metric([src, dst, cls], r)
        yield from (payload, sends, ratio)
        totals = _d(snap.get("totals"))
        for name, key, doc in (("smbwire_total_dup_ratio", "dup_ratio", "Non-trivial / unique bytes over all edges."),
                               ("smbwire_amplification", "amplification", "Non-trivial / globally unique bytes.")):
            v = _num(totals.get(key))
            if v is not None:
                yield GaugeMetricFamily(name, doc, value=v)
        stats = _d(_d(snap.get("live")).get("stats"))
        tcp, rdma = _d(snap.get("tcp")), _d(snap.get("rdma"))
        cats = _d(_d(snap.get("accounting")).get("categories"))
        not_analysed = sum(v for k, v in cats.items() if k in self._not_analysed and _num(v) is not None)
        for name, v, doc in (
            ("smbwire_kernel_drops", stats.get("kernel_drops"), "Frames the kernel dropped before the capture saw them."),
            ("smbwire_ring_drops", stats.get("ring_drops"), "Frames lost because the ring buffer was full."),
            ("smbwire_copy_errors", stats.get("copy_errors"), "Frames the capture could not copy."),
            ("smbwire_tcp_gaps", tcp.get("gaps"), "Holes in TCP streams."),
            ("smbwire_tcp_gap_bytes", tcp.get("gap_bytes"), "Bytes of holes in TCP streams."),
            ("smbwire_rdma_psn_gaps", rdma.get("gaps"), "RDMA packets never seen (PSN gaps)."),
            ("smbwire_not_analysed_bytes", not_analysed, "Storage bytes smbwire could not analyse."),
            ("smbwire_input_bytes", _d(snap.get("accounting")).get("input_bytes"), "Bytes seen."),
            ("smbwire_shed_bytes", _d(_d(snap.get("live")).get("analysed")).get("shed_bytes"),
             "Wire bytes of connections shed under overload (not analysed)."),
        ):
            yield CounterMetricFamily(name, doc, value=_num(v) or 0.0)
        analysed = _num(_d(_d(snap.get("live")).get("analysed")).get("fraction"))
        if analysed is not None:
            yield GaugeMetricFamily("smbwire_analysed_fraction",
                                    "Share of the storage bytes the capture point matched that were analysed (engine's live.analysed).",
                                    value=analysed)
        shed = _num(_d(_d(snap.get("live")).get("shed")).get("connections"))
        if shed is not None:
            yield GaugeMetricFamily("smbwire_shed_connections", "Connections shed under overload so far.", value=shed)
        tunnels = {k: _d(v) for k, v in _d(snap.get("tunnels")).items()}
        if tunnels:
            for key, doc in (("frames", "Frames that came inside a remote mirror session or tunnel, by kind."),
                             ("bytes", "Bytes around the mirrored frames (tunnel headers), by kind.")):
                fam = CounterMetricFamily(f"smbwire_tunnel_{key}", doc, labels=["kind"])
                for kind, c in sorted(tunnels.items()):
                    fam.add_metric([str(kind)], _num(c.get(key)) or 0.0)
                yield fam
        yield GaugeMetricFamily("smbwire_snapshot_timestamp_seconds", "When the figures were taken.", value=at)


class MetricsServer:
    """The HTTP endpoint; `update(snapshot)` after each poll, `close()` at the end."""

    def __init__(self, address: str):
        try:
            # All of it now: the scrapes run after the privilege drop (the installation may
            # not be readable then).
            import prometheus_client.core  # noqa: F401
            import prometheus_client.exposition  # noqa: F401
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            raise UserError("--metrics needs prometheus_client: pip install 'smbwire[metrics]'") from None
        from .tables import categories_with

        host, port = parse_address(address)
        self.collector = SnapshotCollector(categories_with("not_analysed"))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        try:
            started = start_http_server(port, addr=host, registry=registry)
        except OSError as e:
            raise UserError(f"--metrics {address}: cannot listen: {e.strerror or e}") from None
        self._server = started[0] if isinstance(started, tuple) else None
        self.address = f"{host}:{port}"

    def update(self, snap: dict[str, Any] | None) -> None:
        if snap is not None:
            self.collector.update(snap)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
