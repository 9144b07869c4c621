"""Live capture: a typed wrapper around the engine's `_core.LiveSession`.

The engine captures (eBPF ring buffer, or AF_PACKET) and analyses on its own thread; this
module starts it, hands out its snapshots as dicts, and stops it. No packet ever passes
through Python.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

from .engine import DEFAULT_TOP_N, DEFAULT_WINDOW_SECONDS, build_config, default_threads, load_core
from .errors import SmbwireError, UserError
from .topology import Topology

#: What a live capture needs; named in the error when one is missing.
CAPABILITIES = "CAP_BPF, CAP_NET_ADMIN and CAP_NET_RAW"
BACKENDS = ("auto", "ebpf", "af-packet")
#: Where the eBPF program attaches: auto (TCX on Linux 6.6+, else XDP on 5.9+), tcx, xdp.
HOOKS = ("auto", "tcx", "xdp")
#: Environment variable that forces a backend (tests, kernels where eBPF misbehaves).
BACKEND_ENV = "SMBWIRE_LIVE_BACKEND"


class LivePermissionError(UserError):
    """The process lacks a capability the capture needs."""


class EbpfRequired(UserError):
    """`--require-ebpf` and eBPF cannot be used."""


class LiveRun:
    """A running capture. `poll()` the latest snapshot, `stop()` for the final result."""

    def __init__(self, session: Any, iface: str):
        self._s = session
        self.iface = iface

    @property
    def backend(self) -> str:
        return str(self._s.backend)

    @property
    def hook(self) -> str | None:
        """The eBPF hook in use ("tcx" or "xdp"); None with AF_PACKET."""
        h = self._s.hook
        return None if h is None else str(h)

    @property
    def fallback_reason(self) -> str | None:
        r = self._s.fallback_reason
        return None if r is None else str(r)

    @property
    def finished(self) -> bool:
        """The capture ended by itself (an error): call `stop`."""
        return bool(self._s.finished)

    def poll(self, timeout: float = 0.0) -> dict[str, Any] | None:
        """The newest snapshot not returned before (waits up to `timeout` s), or None."""
        text = self._s.poll(timeout)
        return None if text is None else _parse(text)

    def stop(self) -> dict[str, Any]:
        """Stop, drain, and return the final result (schema "smbwire/1" + a "live" section)."""
        try:
            return _parse(self._s.stop())
        except OSError as e:
            raise SmbwireError(f"live capture: {_one_line(e)}") from None


def start(
    iface: str,
    *,
    topology: Topology | Mapping[str, Any] | None = None,
    window: float = DEFAULT_WINDOW_SECONDS,
    top_n: int = DEFAULT_TOP_N,
    max_index_memory: int | None = None,
    write: str | None = None,
    write_size: int = 0,
    write_count: int = 10,
    require_ebpf: bool = False,
    backend: str | None = None,
    tcp_ports: list[int] | None = None,
    interval: float = 1.0,
    series_interval: float | None = None,
    history_seconds: int = 300,
    hook: str = "auto",
    xdp_drop: bool = False,
    drop_privileges: bool = True,
    user: str | None = None,
    assume_members: bool = False,
    keys: str | None = None,
    max_memory: int | None = None,
    threads: int | None = None,
    queues: int | None = None,
    shed: bool = True,
    ring_bytes: int | None = None,
    test_frame_delay_us: float | None = None,
) -> LiveRun:
    """Open `iface` and start capturing TCP `tcp_ports` besides 445 and 5445, RoCEv2 and
    RoCEv1, with the eBPF program at `hook` (or AF_PACKET). `interval`: seconds between
    snapshots; `series_interval`: the final result's time series interval (None: the engine's
    default).

    With `drop_privileges` (the default) the process gives up every capability once the
    capture is attached, before any packet is parsed, and with `user` also becomes that user
    (uid, gid, groups), like `tcpdump -Z`; files written later (`--json`, rotated `--write`
    files) are then written with only that user's rights. Raises `LivePermissionError`
    (names the capabilities), `EbpfRequired`, or `UserError` for what the user can fix."""
    if not iface or "/" in iface or len(iface) > 15:
        raise UserError(f"{iface!r} is not a network interface name")
    backend = backend or os.environ.get(BACKEND_ENV) or "auto"
    if backend not in BACKENDS:
        raise UserError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "af-packet" and require_ebpf:
        raise UserError("--require-ebpf and the af-packet backend exclude each other")
    if hook not in HOOKS:
        raise UserError(f"hook must be one of {', '.join(HOOKS)}, got {hook!r}")
    if backend == "af-packet" and hook != "auto":
        raise UserError(f"--hook {hook} needs eBPF, not the af-packet backend")
    if xdp_drop and hook != "xdp":
        raise UserError("--xdp-drop needs --hook xdp")
    if user is not None and not drop_privileges:
        raise UserError("--user switches user as part of the privilege drop")
    config = build_config(topology=topology, window=window, top_n=top_n, interval=series_interval,
                          assume_members=assume_members, max_index_memory=max_index_memory, keys=keys,
                          max_memory=max_memory, threads=default_threads() if threads is None else threads)
    options: dict[str, Any] = {
        "require_ebpf": require_ebpf or backend == "ebpf",
        "force_af_packet": backend == "af-packet",
        "interval_seconds": interval,
        "history_seconds": history_seconds,
        "hook": hook,
        "xdp_drop": xdp_drop,
        "drop_privileges": drop_privileges,
        "user": user,
        # None: one capture queue per decoding worker.
        "queues": queues,
        "shed": shed,
        "ring_bytes": ring_bytes,
        "test_frame_delay_us": test_frame_delay_us,
    }
    # Configured ports add to the engine's defaults (445, 5445: `live::tcp_ports_with`).
    options["tcp_ports"] = list(tcp_ports or ())
    if write is not None:
        options["write"] = {"path": os.fspath(write), "size_limit": int(write_size), "count": int(write_count)}
    core = load_core()
    if not hasattr(core, "LiveSession"):
        raise UserError("live capture needs Linux (this engine was built without it)")
    try:
        session = core.LiveSession(iface, json.dumps(options), json.dumps(config))
    except PermissionError as e:
        raise LivePermissionError(
            f"live capture on {iface} needs {CAPABILITIES} (run as root, or grant them with "
            f"setcap or systemd AmbientCapabilities); missing: {_missing_capabilities()}: {_one_line(e)}"
        ) from None
    except (ValueError, NotImplementedError) as e:
        msg = _one_line(e)
        if options["require_ebpf"]:
            raise EbpfRequired(f"eBPF required but unavailable: {msg}") from None
        raise UserError(msg) from None
    except OSError as e:
        msg = _one_line(e)
        if options["require_ebpf"]:
            raise EbpfRequired(f"eBPF required but unavailable: {msg}") from None
        raise UserError(msg) from None
    return LiveRun(session, iface)


#: Capability bits (linux/capability.h) of what a live capture needs.
_CAP_BITS = {"CAP_BPF": (39, 21), "CAP_NET_ADMIN": (12,), "CAP_NET_RAW": (13,)}  # 21: CAP_SYS_ADMIN


def _missing_capabilities() -> str:
    """Which of CAPABILITIES this process lacks (its effective set); CAP_SYS_ADMIN stands in
    for CAP_BPF as the kernel allows. "unknown" when /proc cannot tell."""
    try:
        with open("/proc/self/status") as f:
            eff = next(int(l.split()[1], 16) for l in f if l.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return "unknown"
    missing = [name for name, bits in _CAP_BITS.items() if not any(eff >> b & 1 for b in bits)]
    return ", ".join(missing) or "none (the kernel refused anyway)"


def _parse(text: Any) -> dict[str, Any]:
    try:
        v = json.loads(text)
    except (TypeError, ValueError) as e:
        raise SmbwireError(f"the engine returned a live snapshot that is not JSON: {e}") from None
    if not isinstance(v, dict):
        raise SmbwireError("the engine returned a live snapshot that is not a JSON object")
    return v


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__
