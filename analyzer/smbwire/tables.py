"""Tables the engine exports, for the views: the byte accounting categories and the traffic
classes, each with its description, and the tunnel kinds with their labels. The engine is their
one source (dissectors/src/accounting.rs `CATEGORIES`, dissectors/src/dedupe/attribution.rs
`Class`, dissectors/src/wire/mod.rs `Tunnel`); the report and the live view render from here
and keep no list of their own.
"""

from __future__ import annotations

import json
from functools import cache
from typing import TypedDict


class Category(TypedDict):
    name: str
    description: str
    #: overhead, payload, removed, not_analysed or other.
    disposition: str


class TrafficClass(TypedDict):
    name: str
    label: str
    description: str


@cache
def byte_categories() -> tuple[Category, ...]:
    """Every accounting category the engine can produce, in the docs' order."""
    from .engine import load_core

    return tuple(json.loads(load_core().byte_categories()))


@cache
def traffic_classes() -> tuple[TrafficClass, ...]:
    """The attribution classes, in the order reports list them."""
    from .engine import load_core

    return tuple(json.loads(load_core().traffic_classes()))


class TunnelKind(TypedDict):
    #: as in the result's `tunnels` keys and the metrics' `kind` label.
    name: str
    label: str


@cache
def tunnel_kinds() -> tuple[TunnelKind, ...]:
    """The tunnel kinds the engine opens (a remote mirror session's or another tunnel's)."""
    from .engine import load_core

    return tuple(json.loads(load_core().tunnel_kinds()))


def tunnel_label(name: str) -> str:
    """A tunnel kind as a network engineer names it; an unknown name (a result written by a
    newer engine) as it stands."""
    return next((k["label"] for k in tunnel_kinds() if k["name"] == name), name)


def category_description(name: str) -> str:
    return next((c["description"] for c in byte_categories() if c["name"] == name), "")


def categories_with(disposition: str) -> frozenset[str]:
    return frozenset(c["name"] for c in byte_categories() if c["disposition"] == disposition)
