"""Fixtures every test module may use."""

from __future__ import annotations

import signal

import pytest

import synth_oracle


@pytest.fixture(autouse=True)
def _signal_dispositions_restored():
    """A command run in-process (`smbwire live` through CliRunner) leaves SIGINT and SIGTERM
    ignored, as it must in a real process that is about to exit; restored after every test,
    because an ignored signal is inherited by every process the suite starts later (a
    `livecat` that then ignores the SIGTERM a later test sends)."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


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
