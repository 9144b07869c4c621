"""What the scenario tests share: the two-node topology of every generated capture, and
lookups into an analysis result's edges."""

from __future__ import annotations

MiB = 1 << 20

# The synthesizer's nodes (captures/s2d-two-node.toml, as the engine's topology dict), and their
# LID addresses (fe80::ffff:0:LID) for the "infiniband" transport, whose packets carry no GRH.
TOPOLOGY = {
    "nodes": [
        {"name": "owner", "addresses": ["198.18.0.1", "fe80::ffff:0:1"], "member": True},
        {"name": "partner", "addresses": ["198.18.0.2", "fe80::ffff:0:2"], "member": True},
    ]
}


def edge(result: dict, src: str, dst: str, cls: str) -> dict:
    """The one edge src -> dst of class `cls` (the test fails if there is none or several)."""
    found = [e for e in result["edges"] if (e["src"], e["dst"], e["class"]) == (src, dst, cls)]
    assert len(found) == 1, f"no single {src}->{dst} {cls} edge in {result['edges']}"
    return found[0]


def payload_edges(result: dict) -> list[tuple[str, str, str]]:
    """(src, dst, class) of every edge that carried payload, sorted."""
    return sorted((e["src"], e["dst"], e["class"]) for e in result["edges"] if e["payload_bytes"] > 0)
