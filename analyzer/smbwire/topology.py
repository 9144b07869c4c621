"""The topology file: which addresses belong to which node, and share/file rules.

The engine owns the file (dissectors/src/dedupe/topology.rs, docs/topology.md): it parses
the TOML, checks it and normalises it, and names the line of any error. This module only
calls it and holds the result as Python data; it decides nothing about what is valid.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from .errors import TopologyError


@dataclass(frozen=True)
class Node:
    name: str
    #: Normalised textual form, in file order.
    addresses: tuple[str, ...]
    #: A member is part of the storage cluster; a non-member is a client of it.
    member: bool = True


@dataclass(frozen=True)
class Rule:
    #: An engine traffic class (`smbwire.tables.traffic_classes()`).
    cls: str
    #: Glob over the share path (`\\server\share`), or None for any share.
    share: str | None = None
    #: Glob over the file name (as opened by CREATE), or None for any file.
    file: str | None = None


@dataclass(frozen=True)
class Topology:
    """A topology the engine has checked (build one with `load_topology`, `parse_topology`
    or `Topology.from_config`)."""

    nodes: tuple[Node, ...] = ()
    rules: tuple[Rule, ...] = ()

    def to_config(self) -> dict[str, Any]:
        """The `"topology"` object of the engine's config JSON."""
        return {
            "nodes": [
                {"name": n.name, "addresses": list(n.addresses), "member": n.member}
                for n in self.nodes
            ],
            "rules": [{"share": r.share, "file": r.file, "class": r.cls} for r in self.rules],
        }

    def to_toml(self) -> str:
        """The same topology as a file `load_topology` reads back unchanged (written by the engine)."""
        return str(_core().topology_to_toml(json.dumps(self.to_config())))

    @classmethod
    def from_config(cls, config: Any, source: str = "topology") -> Topology:
        """Check an engine-shaped object (`{"nodes": [{"name": ..}], "rules": [..]}`), e.g. the
        topology the synthesizer returns with its truth. Raises `TopologyError`."""
        try:
            text = json.dumps(config)
        except (TypeError, ValueError) as e:
            raise TopologyError(f"{source}: not a JSON object: {e}") from None
        return _from_engine(lambda core: core.check_topology(text, source))


def load_topology(path: str | os.PathLike[str]) -> Topology:
    """Read and check a topology TOML file. Raises `TopologyError` (one line: file, line, what)."""
    from .engine import text_path

    source = text_path(path)
    return _from_engine(lambda core: core.load_topology(source))


def parse_topology(text: str, source: str = "topology.toml") -> Topology:
    """Parse and check topology TOML text; `source` names it in error messages."""
    return _from_engine(lambda core: core.parse_topology(text, source))


def _core() -> Any:
    from .engine import load_core

    return load_core()


def _from_engine(call: Any) -> Topology:
    core = _core()
    try:
        config = json.loads(call(core))
    except core.TopologyError as e:
        raise TopologyError(" ".join(str(e).split())) from None
    return Topology(
        nodes=tuple(Node(n["name"], tuple(n["addresses"]), n["member"]) for n in config["nodes"]),
        rules=tuple(Rule(r["class"], r["share"], r["file"]) for r in config["rules"]),
    )
