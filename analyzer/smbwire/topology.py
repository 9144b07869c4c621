"""The topology file: which addresses belong to which node, and share/file rules.

The file is TOML (docs/topology.md):

    [nodes.s2d-a]
    addresses = ["198.18.1.1", "198.19.1.1"]

    [nodes.client]
    addresses = ["198.18.0.10"]
    member = false

    [[rules]]
    share = '*\\ClusterStorage$'
    class = "replication"

It is validated here, completely, so that the engine gets a clean
`{"nodes": [...], "rules": [...]}` object (`Topology.to_config`) and the user gets one line
that names the file, the line and the key when something is wrong.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import tomllib
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, NoReturn

from .errors import TopologyError

#: Traffic classes a rule may force (the engine's attribution classes).
CLASSES: tuple[str, ...] = ("replication", "redirection", "redirected-read", "client")

_NODE_KEYS = ("addresses", "member")
_RULE_KEYS = ("share", "file", "class")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class Node:
    name: str
    #: Normalised textual form (`ipaddress.ip_address(..)` round trip), in file order.
    addresses: tuple[str, ...]
    #: A member is part of the storage cluster; a non-member is a client of it.
    member: bool = True


@dataclass(frozen=True)
class Rule:
    #: One of `CLASSES`.
    cls: str
    #: Glob over the share path (`\\server\share`), or None for any share.
    share: str | None = None
    #: Glob over the file name (as opened by CREATE), or None for any file.
    file: str | None = None


@dataclass(frozen=True)
class Topology:
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
        """The same topology as a file `load_topology` reads back unchanged."""
        out = ["# smbwire topology (docs/topology.md)"]
        for n in self.nodes:
            addrs = ", ".join(_toml_str(a) for a in n.addresses)
            out += ["", f"[nodes.{_toml_key(n.name)}]", f"addresses = [{addrs}]"]
            out.append(f"member = {'true' if n.member else 'false'}")
        for r in self.rules:
            out += ["", "[[rules]]"]
            if r.share is not None:
                out.append(f"share = {_toml_str(r.share)}")
            if r.file is not None:
                out.append(f"file = {_toml_str(r.file)}")
            out.append(f"class = {_toml_str(r.cls)}")
        return "\n".join(out) + "\n"

    @classmethod
    def from_config(cls, config: Any, source: str = "topology") -> Topology:
        """Validate the engine-shaped object (`{"nodes": [{"name":..}], "rules": [..]}`),
        e.g. the topology the synthesizer returns with its truth."""
        if not isinstance(config, Mapping):
            raise TopologyError(f"{source}: expected an object with 'nodes' and 'rules'")
        v = _Validator(source, None)
        v.unknown_keys(config, ("nodes", "rules"), "")
        raw_nodes = config.get("nodes", [])
        if not isinstance(raw_nodes, list):
            v.fail(("nodes",), "expected a list of nodes")
        tables: dict[str, Any] = {}
        for i, raw in enumerate(raw_nodes):
            if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
                v.fail(("nodes", str(i)), "expected an object with a string 'name'")
            if raw["name"] in tables:
                v.fail(("nodes", str(i)), f"node name {raw['name']!r} is used twice")
            tables[raw["name"]] = {k: val for k, val in raw.items() if k != "name"}
        return v.topology({"nodes": tables, "rules": config.get("rules", [])})


def load_topology(path: str | os.PathLike[str]) -> Topology:
    """Read and validate a topology TOML file. Raises `TopologyError` (one line)."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise TopologyError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise TopologyError(f"{source}: is a directory, not a topology file") from None
    except OSError as e:
        raise TopologyError(f"{source}: cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise TopologyError(f"{source}: line {line}: not UTF-8 text") from None
    return parse_topology(text, source)


def parse_topology(text: str, source: str = "topology.toml") -> Topology:
    """Parse and validate topology TOML text; `source` names it in error messages."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TopologyError(f"{source}: {_describe_toml_error(e)}") from None
    v = _Validator(source, _Locator(text))
    v.unknown_keys(doc, ("nodes", "rules"), "")
    return v.topology(doc)


class _Validator:
    def __init__(self, source: str, locator: _Locator | None) -> None:
        self.source = source
        self.locator = locator

    def fail(self, path: tuple[str, ...], message: str) -> NoReturn:
        where = ".".join(path)
        line = self.locator.line_of(path) if self.locator else None
        prefix = f"{self.source}: line {line}: " if line else f"{self.source}: "
        raise TopologyError(f"{prefix}{where + ': ' if where else ''}{message}")

    def unknown_keys(self, table: Mapping[str, Any], allowed: Iterable[str], at: str) -> None:
        allowed = tuple(allowed)
        for key in table:
            if key not in allowed:
                path = (*at.split("."), key) if at else (key,)
                self.fail(path, f"unknown key {key!r} (expected one of: {', '.join(allowed)})")

    def topology(self, doc: Mapping[str, Any]) -> Topology:
        raw_nodes = doc.get("nodes", {})
        if not isinstance(raw_nodes, Mapping):
            self.fail(("nodes",), "expected tables [nodes.NAME]")
        nodes: list[Node] = []
        owner: dict[str, str] = {}
        for name, table in raw_nodes.items():
            node = self.node(name, table)
            for addr in node.addresses:
                if addr in owner:
                    other = owner[addr]
                    what = "twice in this node" if other == name else f"also in node {other!r}"
                    self.fail(("nodes", name, "addresses"), f"address {addr} is {what}")
                owner[addr] = name
            nodes.append(node)
        raw_rules = doc.get("rules", [])
        if not isinstance(raw_rules, list):
            self.fail(("rules",), "expected an array of tables [[rules]]")
        rules = [self.rule(i, r) for i, r in enumerate(raw_rules)]
        return Topology(tuple(nodes), tuple(rules))

    def node(self, name: str, table: Any) -> Node:
        at = ("nodes", name)
        if not name.strip():
            self.fail(at, "a node name must not be empty")
        if not isinstance(table, Mapping):
            self.fail(at, "expected a table with 'addresses' (and optionally 'member')")
        self.unknown_keys(table, _NODE_KEYS, f"nodes.{name}")
        if "addresses" not in table:
            self.fail(at, "missing 'addresses' (a list of IP addresses)")
        raw = table["addresses"]
        if not isinstance(raw, list) or not raw:
            self.fail((*at, "addresses"), "expected a non-empty list of IP addresses")
        addresses = []
        for a in raw:
            addresses.append(self.address(a, (*at, "addresses")))
        member = table.get("member", True)
        if not isinstance(member, bool):
            self.fail((*at, "member"), f"expected true or false, got {member!r}")
        return Node(name, tuple(addresses), member)

    def address(self, a: Any, at: tuple[str, ...]) -> str:
        if not isinstance(a, str):
            self.fail(at, f"expected an IP address string, got {a!r}")
        try:
            return str(ipaddress.ip_address(a.strip()))
        except ValueError:
            hint = " (ranges are not supported: list each address)" if "/" in a else ""
            self.fail(at, f"{a!r} is not an IP address{hint}")

    def rule(self, i: int, r: Any) -> Rule:
        at = ("rules", str(i))
        if not isinstance(r, Mapping):
            self.fail(at, "expected a table [[rules]]")
        self.unknown_keys(r, _RULE_KEYS, f"rules.{i}")
        cls = r.get("class")
        if cls is None:
            self.fail(at, f"missing 'class' (one of: {', '.join(CLASSES)})")
        if cls not in CLASSES:
            self.fail((*at, "class"), f"unknown class {cls!r} (expected one of: {', '.join(CLASSES)})")
        globs: dict[str, str | None] = {}
        for key in ("share", "file"):
            g = r.get(key)
            if g is not None and (not isinstance(g, str) or not g):
                self.fail((*at, key), f"expected a non-empty glob pattern string, got {g!r}")
            globs[key] = g
        if globs["share"] is None and globs["file"] is None:
            self.fail(at, "a rule needs 'share' or 'file' (or both)")
        return Rule(cls, globs["share"], globs["file"])


class _Locator:
    """Best-effort line numbers for validation errors (tomllib reports lines only for
    syntax errors): finds the `[table]` / `[[array]]` header of a key path, then the
    `key =` line inside that table."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*(.+?)\s*\]\]?\s*(#.*)?$")

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        # (path, first line index, end line index exclusive)
        self.tables: list[tuple[tuple[str, ...], int, int]] = []
        counts: dict[tuple[str, ...], int] = {}
        starts: list[tuple[tuple[str, ...], int]] = []
        for i, line in enumerate(self.lines):
            m = self._HEADER.match(line)
            if not m:
                continue
            path = _dotted_key(m.group(2))
            if path is None:
                continue
            if m.group(1) == "[[":
                n = counts.get(path, 0)
                counts[path] = n + 1
                path = (*path, str(n))
            starts.append((path, i))
        for j, (path, i) in enumerate(starts):
            end = starts[j + 1][1] if j + 1 < len(starts) else len(self.lines)
            self.tables.append((path, i, end))

    def line_of(self, path: tuple[str, ...]) -> int | None:
        best = None
        for tpath, start, end in self.tables:
            if path[: len(tpath)] == tpath and (best is None or len(tpath) > len(best[0])):
                best = (tpath, start, end)
        if best is None:
            # A key that only appears as the start of a header (`[node.a]` for "node"), or a
            # key of the root table (before the first header).
            for tpath, start, _ in self.tables:
                if tpath[: len(path)] == path:
                    return start + 1
            root_end = self.tables[0][1] if self.tables else len(self.lines)
            best = ((), -1, root_end)
        tpath, start, end = best
        rest = path[len(tpath) :]
        if len(rest) == 1:
            key = re.compile(r"^\s*[\"']?" + re.escape(rest[0]) + r"[\"']?\s*=")
            for i in range(start + 1, end):
                if key.match(self.lines[i]):
                    return i + 1
        return start + 1 if start >= 0 else None


def _dotted_key(s: str) -> tuple[str, ...] | None:
    # Let tomllib split the dotted key (quotes, escapes) instead of re-implementing it.
    try:
        doc = tomllib.loads(f"{s} = 0")
    except tomllib.TOMLDecodeError:
        return None
    path: list[str] = []
    while isinstance(doc, dict) and len(doc) == 1:
        (k, doc), = doc.items()
        path.append(k)
    return tuple(path)


_TOML_POS = re.compile(r"^(.*?)\s*\(at line (\d+), column (\d+)\)$")


def _describe_toml_error(e: tomllib.TOMLDecodeError) -> str:
    msg = str(e)
    m = _TOML_POS.match(msg)
    if m:
        what = m.group(1)
        return f"line {m.group(2)}, column {m.group(3)}: {what[:1].lower()}{what[1:]} (TOML syntax)"
    m = re.match(r"^(.*?)\s*\(at end of document\)$", msg)
    if m:
        return f"at end of file: {m.group(1)[:1].lower()}{m.group(1)[1:]} (TOML syntax)"
    return f"{msg} (TOML syntax)"


def _toml_str(s: str) -> str:
    # A JSON string is a valid TOML basic string, except that TOML also forbids raw DEL.
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_key(s: str) -> str:
    return s if _BARE_KEY.match(s) else _toml_str(s)
