"""The eBPF hook in use is shown: status line (`hook=`) and the live view's header. Pure
rendering, no capture (no root needed)."""

from __future__ import annotations

import pytest

from report.test_live_tui import SIZES, check_fits, render, snapshot
from smbwire.tui import status_line


def with_hook(hook, mode=None, backend="ebpf"):
    snap = snapshot([], backend=backend)
    snap["live"]["hook"] = hook
    snap["live"]["xdp_mode"] = mode
    return snap


def test_status_line_names_the_hook():
    assert "backend=ebpf hook=xdp " in status_line(with_hook("xdp", "native"))
    assert "backend=ebpf hook=tcx " in status_line(with_hook("tcx"))
    line = status_line(with_hook(None, backend="af-packet"))
    assert "backend=af-packet " in line and "hook=" not in line


@pytest.mark.parametrize("width,height", SIZES)
@pytest.mark.parametrize("hook,mode,shown", [("tcx", None, "ebpf/tcx"), ("xdp", "native", "ebpf/xdp "),
                                             ("xdp", "generic", "ebpf/xdp-generic")])
def test_header_names_the_hook(width, height, hook, mode, shown):
    text = render(with_hook(hook, mode), width, height)
    check_fits(text, width, height)
    assert shown in text.splitlines()[0] + " ", text.splitlines()[0]
