"""Fixtures every test module may use."""

from __future__ import annotations

import pytest

import synth_oracle


@pytest.fixture
def tshark_required():
    """For tshark oracle tests (`pytestmark = pytest.mark.usefixtures("tshark_required")`):
    without tshark every test fails, never skips."""
    if synth_oracle.TSHARK is None:
        pytest.fail("tshark is not installed: run `make test`, which installs it")


@pytest.fixture(scope="session")
def synth():
    """The scenario generator: (spec dict, path) -> Truth dict."""
    return synth_oracle.synth
