"""Fixtures every test module may use."""

from __future__ import annotations

import signal

import pytest

import synth_oracle

# A suite started in the background by a non-interactive shell (`cmd &`: nohup, some CI
# runners) inherits SIGINT ignored, and every process it starts would too: a program keeps an
# ignored SIGINT ignored (Python installs no KeyboardInterrupt handler then), so the Ctrl-C
# tests would test the shell, not smbwire. A handler here (not SIG_IGN) gives each child the
# default disposition at exec. (Two CI rehearsals of 2026-11-27 ran so, and their Dask Ctrl-C
# test got exit 0.)
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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
