"""The veth lab every live test shares (tests/live/test_sources.py: `Lab`)."""

from __future__ import annotations

import os

import pytest

from live.test_sources import Lab


@pytest.fixture
def lab():
    """A fresh veth pair in namespaces, torn down after the test (root only)."""
    assert os.geteuid() == 0, "tests/live needs root: network namespaces and BPF"
    lab = Lab()
    lab.down()
    try:
        lab.up()
        yield lab
    finally:
        lab.down()
