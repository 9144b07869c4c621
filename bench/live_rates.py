"""Highest packet and byte rates each live backend sustains without loss, on a veth pair.

`blast` (dissectors/examples/blast.rs, sendmmsg batches on an AF_PACKET socket) sends storage
frames from namespace A — RoCEv2 (UDP 4791) and SMB (TCP 445) flows, alternating, all of one
size — at a paced rate or at top speed; `livecat` captures on namespace B's end of the veth
with one backend (eBPF TCX + ring buffer, or AF_PACKET TPACKET_V3). Frames go to a MAC that is
not B's, like mirrored frames on a SPAN port, so B's stack drops them right after capture.

A step is lossless when: no kernel drop, no ring drop, no copy error, delivered == sent, the
veth carried every frame sent, and, for eBPF, the exact per-flow counters equal what was sent
on each flow. For each placement, backend and frame size the script first runs
at top speed; if that is lossless the result is "≥ top speed (generator limit)", otherwise it
bisects the offered rate between 0 and top speed and confirms the best rate with a second
run (stepping down 10 % until a confirmation passes).

Where the CPU goes (2 cores). On a veth the receive path — the TCX program and its ring
buffer copy, or AF_PACKET's copy into its ring — runs in softirq on the CPU that processes
the receive backlog:
- `split`: blast on CPU 0, livecat on CPU 1, no RPS. The receive softirq runs on CPU 0
  inside blast's sendmmsg, so the capture's kernel half slows the generator down and only the
  user-space consumer has CPU 1 to itself. Usually generator-bound: it measures the kernel
  cost per packet of each backend (compare with the generator alone).
- `rps`: as split, but RPS moves B's receive processing to CPU 1, so CPU 1 is a capture CPU
  (softirq + consumer), as a NIC's receive CPU is on a real mirror port, and blast has CPU 0
  alone. When CPU 1 falls behind by more than netdev_max_backlog frames its receive backlog
  refuses frames before the capture point (the veth counts them dropped, sendmmsg says
  ENOBUFS and blast sends them again, so they are not in `sent`). They are reported
  ("refused") but do not fail the step: on a real port they are NIC drops, outside either
  backend; here they come in bursts whenever CPU 1 is briefly busy (a 1000-frame backlog is
  3 ms at 300 kpps), at rates well below what CPU 1 sustains. `--strict-backlog` counts them
  as loss instead (then the rps limits measure jitter tolerance as much as throughput).
Other work on the machine (shared with builds) adds noise; each result is confirmed once.

Overload: besides the top-speed steps, one step per backend stalls the reader (`livecat
--stall`) with a small ring while blast runs at top speed, so the ring overflows on purpose,
and checks that the counters stay exact: eBPF per-flow counters equal what was sent and
frames_matched = delivered + ring_drops; AF_PACKET delivered + socket drops = sent; for both,
the source's interface_drops equal the veth's own rx_dropped count.

Needs root. Usage: python bench/live_rates.py [--seconds 3] [--sizes 128,1514]
    [--placements split,rps] [--bisect 5] [--budget 1200] [--repeat 1]
Traffic stays in 198.18.0.0/15 inside two namespaces this script makes and removes (also on
SIGTERM, SIGHUP and Ctrl-C); every child has a timeout and the whole run stops (and tears down)
after --budget seconds.
Writes bench/out/live_rates.json (live_rates_strict.json with --strict-backlog) and
bench/out/live_rates.md, and prints Markdown: first a summary ready to paste into the README
(packets/s and bytes/s per backend and frame size), then the detailed tables.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vethpair import VethPair  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "target" / "release" / "examples"
LIVECAT, BLAST = EXAMPLES / "livecat", EXAMPLES / "blast"
LAB = VethPair("swr")
NS_A, NS_B = LAB.ns_a, LAB.ns_b
VA, VB = LAB.va, LAB.vb
# Locally administered, not B's: B receives in promiscuous mode, as on a mirror port.
SPAN_DST_MAC = "02:00:5e:c6:12:02"


class Backend(NamedTuple):
    args: tuple[str, ...]  # livecat's options
    ready: str  # how livecat's "ready" line starts
    overload: tuple[str, ...]  # the overload step's options: the reader stalls, the buffer is small
    env: tuple[str, ...] = ()  # livecat's environment
    xdp_copy: str | None = None  # the copy livecat must report (None: not XDP, or not checked)
    ring_copy: str | None = None  # "direct" or "staged", which livecat must report (None: not eBPF)


_EBPF_OVERLOAD = ("--stall", "2", "--ring-bytes", str(1 << 20))
# `ebpf` takes the hook `auto` picks (TCX on 6.6+); `ebpf-xdp` the XDP entry point, which `auto`
# picks on 5.9-6.5 (Debian 12's 6.1): native XDP on a veth, frames passed on (XDP_PASS), copied
# with bpf_xdp_load_bytes where the kernel has it (5.18+); `ebpf-xdp-loop` the same with the
# copy kernels before 5.18 get (8-byte loads, SMBWIRE_XDP_COPY=loop). The overload steps stall
# the reader with a ring or block count this small: it overflows at any rate blast reaches.
# `ebpf-staged` and `ebpf-xdp-staged` are `ebpf` and `ebpf-xdp` with the frame copied twice,
# into a per-CPU slot and then into the ring (SMBWIRE_BPF_COPY=staged, the program before
# 2026-12-01), to measure the direct copy by. `ebpf-shed` and `ebpf-xdp-shed` let the program
# shed a connection itself once its ring is nearly full (livecat --shed), as `smbwire live`
# runs it: at a lossless rate it never does, and the pair measures what asking costs a frame
# against `ebpf` and `ebpf-xdp`; their overload steps shed instead of dropping.
BACKENDS = {
    "ebpf": Backend(("--require-ebpf",), "ready ebpf", _EBPF_OVERLOAD, ring_copy="direct"),
    "ebpf-shed": Backend(("--require-ebpf", "--shed"), "ready ebpf", _EBPF_OVERLOAD, ring_copy="direct"),
    "ebpf-xdp-shed": Backend(("--require-ebpf", "--hook", "xdp", "--shed"), "ready ebpf xdp", _EBPF_OVERLOAD,
                             xdp_copy="helper", ring_copy="direct"),
    "ebpf-staged": Backend(("--require-ebpf",), "ready ebpf", _EBPF_OVERLOAD,
                           env=("SMBWIRE_BPF_COPY=staged",), ring_copy="staged"),
    "ebpf-xdp": Backend(("--require-ebpf", "--hook", "xdp"), "ready ebpf xdp", _EBPF_OVERLOAD,
                        xdp_copy="helper", ring_copy="direct"),
    "ebpf-xdp-staged": Backend(("--require-ebpf", "--hook", "xdp"), "ready ebpf xdp", _EBPF_OVERLOAD,
                               env=("SMBWIRE_BPF_COPY=staged",), xdp_copy="helper", ring_copy="staged"),
    "ebpf-xdp-loop": Backend(("--require-ebpf", "--hook", "xdp"), "ready ebpf xdp", _EBPF_OVERLOAD,
                             env=("SMBWIRE_XDP_COPY=loop",), xdp_copy="loop", ring_copy="staged"),
    "af-packet": Backend(("--af-packet",), "ready af-packet", ("--stall", "2", "--blocks", "2")),
}
# placement: (blast CPU, livecat CPU, RPS mask for B's veth rx queue or "0" for none)
PLACEMENTS = {"split": ("0", "1", "0"), "rps": ("0", "1", "2")}
# --strict-backlog: a frame refused before the capture point fails the step too.
STRICT_BACKLOG = False
# A paced step counts as reaching its target when it achieved this share of it.
REACHED = 0.97
# time.monotonic() after which no new step starts (--budget).
DEADLINE = float("inf")


class OutOfTime(Exception):
    pass


def sh(*args, check=True, timeout=60, **kw):
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=timeout, **kw)


setup = LAB.setup
teardown = LAB.teardown
veth_counters = LAB.counters


class Capture:
    """One livecat run; started before the generator, stopped by closing its stdin."""

    def __init__(self, backend: str, cpu: str, extra: tuple[str, ...] = ()):
        b = BACKENDS[backend]
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", NS_B, "env", *b.env, "taskset", "-c", cpu, str(LIVECAT), VB,
             "--seconds", "600", "--stdin-stop", *b.args, *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        if not line.startswith(b.ready):
            self.kill()
            raise RuntimeError(f"livecat did not start {backend}: {line.strip()} {self.proc.stderr.read()}")

    def stop(self) -> dict:
        out, err = self.proc.communicate(input="", timeout=60)
        if self.proc.returncode != 0:
            raise RuntimeError(f"livecat failed: {err.strip()}")
        return json.loads(out)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # our own child, by its PID
            self.proc.wait()


def bpf_prog_stats() -> dict | None:
    """run_cnt and run_time_ns of livecat's eBPF program, whichever hook it is at (the only
    smbwire program loaded while a step runs); None with AF_PACKET, which loads none."""
    progs = [p for p in json.loads(sh("bpftool", "prog", "show", "-j").stdout or "[]")
             if p.get("name", "").startswith("smbwire_")]
    if len(progs) > 1:
        raise RuntimeError(f"expected one smbwire program loaded, found {len(progs)}")
    return {"run_cnt": progs[0].get("run_cnt", 0), "run_time_ns": progs[0].get("run_time_ns", 0)} if progs else None


def set_rps(mask: str) -> None:
    # `ip netns exec` mounts B's own sysfs, where B's veth is visible.
    sh("ip", "netns", "exec", NS_B, "sh", "-c", f"echo {mask} > /sys/class/net/{VB}/queues/rx-0/rps_cpus")


def step(backend: str, size: int, pps: float, seconds: float, placement: str,
         extra: tuple[str, ...] = ()) -> dict:
    if time.monotonic() > DEADLINE:
        raise OutOfTime(f"--budget exhausted before a {backend} {size} B step")
    gen_cpu, cap_cpu, rps = PLACEMENTS[placement]
    set_rps(rps)
    cap = Capture(backend, cap_cpu, extra)
    try:
        before = veth_counters()
        gen = json.loads(sh("ip", "netns", "exec", NS_A, "taskset", "-c", gen_cpu, str(BLAST), VA,
                            "--dst-mac", SPAN_DST_MAC, "--size", str(size), "--pps", str(int(pps)),
                            "--seconds", str(seconds), timeout=seconds + 30).stdout)
        after = veth_counters()
        prog = bpf_prog_stats()
        r = cap.stop()
    finally:
        cap.kill()
    want_copy = BACKENDS[backend].xdp_copy
    # (A build before 2026-11-30, given with --livecat, does not say: it has the loop only.)
    if want_copy and "xdp_copy" in r and r["xdp_copy"] != want_copy:
        raise RuntimeError(f"{backend}: livecat copied with {r.get('xdp_copy')!r}, not {want_copy!r}")
    want_ring = BACKENDS[backend].ring_copy
    if want_ring and "ring_copy" in r and r["ring_copy"] != want_ring:
        raise RuntimeError(f"{backend}: livecat copied into the ring {r.get('ring_copy')!r}, not {want_ring!r}")
    st = r["stats"]
    sent = gen["sent"]
    wire = after["rx"] - before["rx"]
    sent_by_flow = {(f["sport"], f["dport"]): f["packets"] for f in gen["flows"]}
    counted_by_flow = {}
    for f in st["flows"]:
        # "198.18.0.1:49152 > 198.18.0.2:4791 rocev2"
        src, _, dst = f["flow"].split()[:3]
        counted_by_flow[(int(src.rsplit(":", 1)[1]), int(dst.rsplit(":", 1)[1]))] = f["packets"]
    # kernel_drops = the interface's rx drop counters (here: B's receive backlog refusing a
    # frame, which blast then sends again, so it is not in `sent`) + AF_PACKET socket drops.
    # The backend's own losses leave the interface part out; that part must equal what the
    # veth itself reports.
    if_drops = st.get("interface_drops")
    socket_drops = st["kernel_drops"] - (if_drops or 0)
    drops = socket_drops + st["ring_drops"] + st["copy_errors"]
    if_drops_match = if_drops == after["rx_dropped"] - before["rx_dropped"]
    if backend.startswith("ebpf"):
        # The kernel's per-flow counters are exact wire totals whatever user space does.
        # Frames of connections the program shed (`--shed` only) are counted apart.
        shed_frames = st.get("shed_frames", 0)
        counters_exact = (counted_by_flow == sent_by_flow and st["packets_matched"] == sent
                          and st["frames_matched"] == r["delivered"] + st["ring_drops"] + st["copy_errors"] + shed_frames
                          and (shed_frames == 0 or "--shed" in BACKENDS[backend].args))
    else:
        # AF_PACKET counts in user space what it was handed, the kernel counts the rest.
        counters_exact = r["delivered"] + socket_drops == sent
    counters_exact = counters_exact and if_drops_match
    row = {
        "backend": backend,
        "hook": r.get("hook"),
        "xdp_mode": r.get("xdp_mode"),
        "xdp_copy": r.get("xdp_copy"),
        "ring_copy": r.get("ring_copy"),
        "placement": placement,
        "size": size,
        "target_pps": round(pps),
        "achieved_pps": round(gen["pps"]),
        "achieved_gbit_s": round(gen["gbit_s"], 3),
        "sent": sent,
        "veth_rx": wire,
        "veth_dropped": (after["rx_dropped"] - before["rx_dropped"]) + (after["tx_dropped"] - before["tx_dropped"]),
        "delivered": r["delivered"],
        "packets_matched": st["packets_matched"],
        "kernel_drops": st["kernel_drops"],
        "interface_drops": if_drops,
        "ring_drops": st["ring_drops"],
        "copy_errors": st["copy_errors"],
        "shed_frames": st.get("shed_frames", 0),
        "counters_exact": counters_exact,
        # The kernel's own accounting of the eBPF program (kernel.bpf_stats_enabled): runs
        # (every frame the hook saw) and nanoseconds per run, helpers (ring copy) included.
        "bpf_runs": prog and prog["run_cnt"],
        "bpf_ns_per_frame": prog and prog["run_cnt"] and round(prog["run_time_ns"] / prog["run_cnt"], 1),
        "frames_ok": r["numbers_ok"] and r["all_delivered_match"] and r["truncated"] == 0,
    }
    # A frame the veth refused (receive backlog of the capture CPU full, netdev_max_backlog)
    # never reached the capture point; sendmmsg reports ENOBUFS and blast sends it again, so
    # it is not in `sent`. It is recorded (`veth_dropped`), not counted against the backend:
    # on a real mirror port it would be a NIC drop, which no capture backend sees.
    row["lossless"] = (drops == 0 and r["delivered"] == sent and wire == sent and row["frames_ok"]
                       and not (STRICT_BACKLOG and row["veth_dropped"])
                       and (not backend.startswith("ebpf") or counters_exact))
    row["reached"] = pps == 0 or gen["pps"] >= REACHED * pps
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def find_limit(backend: str, size: int, seconds: float, placement: str, bisect: int) -> dict:
    top = step(backend, size, 0, seconds, placement)
    runs = [top]
    if top["lossless"]:
        # With refusals, blast was held back by the capture CPU, not by its own CPU.
        limit = "generator" if top["veth_dropped"] == 0 else "capture CPU (backlog pushed back)"
        return {"backend": backend, "placement": placement, "size": size, "limit": limit,
                "pps": top["achieved_pps"], "gbit_s": top["achieved_gbit_s"], "top": top, "best": top,
                "runs": runs}
    lo, hi = 0.0, float(top["achieved_pps"])
    for _ in range(bisect):
        mid = (lo + hi) / 2
        r = step(backend, size, mid, seconds, placement)
        runs.append(r)
        if r["lossless"] and r["reached"]:
            lo = mid
        elif r["lossless"]:  # the generator could not reach `mid` with this capture running
            hi = r["achieved_pps"]
        else:
            hi = mid
    # Confirm: the same offered rate must pass again; step down until it does.
    rate = lo
    confirmed = None
    for _ in range(4):
        if rate <= 0:
            break
        r = step(backend, size, rate, seconds, placement)
        runs.append(r)
        if r["lossless"] and r["reached"]:
            confirmed = r
            break
        rate *= 0.9
    res = {"backend": backend, "placement": placement, "size": size, "limit": "capture",
           "top": top, "runs": runs}
    if confirmed is None:
        res.update(pps=0, gbit_s=0.0, limit="capture (no lossless rate confirmed)")
    else:
        res.update(pps=confirmed["achieved_pps"], gbit_s=confirmed["achieved_gbit_s"], best=confirmed)
    return res



def top_note(t: dict) -> str:
    parts = []
    if t["veth_dropped"]:
        parts.append(f"{t['veth_dropped']:,} refused by the capture CPU's backlog (before capture)")
    lost = t["sent"] - t["delivered"]
    own = t["kernel_drops"] - (t.get("interface_drops") or 0) + t["ring_drops"] + t["copy_errors"]
    if lost or own:
        parts.append(f"{lost:,} of {t['sent']:,} not delivered, {own:,} counted as drops")
    if not parts:
        return "no loss"
    return "; ".join(parts) + ("; counters exact" if t["counters_exact"] else "; counters NOT exact")


def _on_signal(signum, frame):
    # Unwind through main's `finally`, which removes the namespaces.
    raise SystemExit(f"live_rates: {signal.Signals(signum).name}, tearing down")


def fmt_bytes_s(v: float) -> str:
    return f"{v / 1e6:,.1f} MB/s" if v < 1e9 else f"{v / 1e9:,.2f} GB/s"


def bpf_cost_table(results: list[dict]) -> list[str]:
    """Nanoseconds per frame in the eBPF program (the kernel's bpf_stats, helpers included),
    per backend and frame size: median and range over every lossless step's run."""
    groups: dict[tuple, list[float]] = {}
    for res in results:
        for st in res["runs"]:
            if st.get("bpf_ns_per_frame") and st["lossless"]:
                groups.setdefault((res["backend"], res["size"]), []).append(st["bpf_ns_per_frame"])
    if not groups:
        return []
    out = ["", "eBPF program time per frame (kernel.bpf_stats_enabled; classify, count, copy into the "
           "ring; lossless steps):", "",
           "| backend | frame | ns per frame, median | range | steps |", "|---|---|---|---|---|"]
    for (backend, size), v in sorted(groups.items()):
        v.sort()
        out.append(f"| {backend} | {size} B | {v[(len(v) - 1) // 2]:.0f} | {v[0]:.0f} – {v[-1]:.0f} | {len(v)} |")
    return out


def summary(results: list[dict], baseline: dict, seconds: float, load: tuple, when: str) -> list[str]:
    """The README table: one row per placement, backend and frame size; with --repeat, the
    median run of each and the range over runs."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r["placement"], r["backend"], r["size"]), []).append(r)
    repeat = max(len(g) for g in groups.values()) if groups else 1
    out = [
        "| capture CPU | backend | frame | packets/s | bytes/s | Gbit/s | limited by |"
        + (f" range over {repeat} runs (packets/s) |" if repeat > 1 else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if repeat > 1 else ""),
    ]
    where = {"split": "shared (softirq on sender's CPU)", "rps": "own CPU (RPS)"}
    for (placement, backend, size), g in groups.items():
        g = sorted(g, key=lambda r: r["pps"])
        r = g[(len(g) - 1) // 2]  # the median run (the lower one of an even count)
        ge = "≥ " if r["limit"] == "generator" else ""
        bps = r["pps"] * r["size"]
        row = (f"| {where.get(placement, placement)} | {backend} | {size} B | {ge}{r['pps']:,} "
               f"| {ge}{fmt_bytes_s(bps)} | {ge}{r['gbit_s']:.2f} | {r['limit']} |")
        if repeat > 1:
            row += f" {g[0]['pps']:,} – {g[-1]['pps']:,} |"
        out.append(row)
    gen = ", ".join(f"{s} B {b['pps']:,} pps" for s, b in baseline.items())
    out.append("")
    out.append(f"Highest rates with no frame lost (no kernel or ring drop, every frame delivered, "
               f"exact per-flow counters), bench/live_rates.py, {when}: veth pair in two network "
               f"namespaces, {seconds:g} s steps, 2 CPUs shared with other work (load average "
               f"{load[0]:.2f} before), so figures are noisy"
               + (f"; median of {repeat} runs" if repeat > 1 else "") + ". \"≥\": the generator (blast, "
               f"sendmmsg on AF_PACKET; alone: {gen}) was the limit, not the capture. Bytes are "
               f"Ethernet frames without FCS.")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="length of one step")
    ap.add_argument("--sizes", default="128,1514",
                    help="frame sizes in bytes without FCS, as blast takes them (above 1514 the veth's MTU is raised; "
                         "XDP on a veth refuses an MTU above a page, so jumbo sizes are for ebpf and af-packet)")
    ap.add_argument("--backends", default="ebpf,af-packet",
                    help="of ebpf (the hook auto picks), ebpf-xdp, ebpf-xdp-loop, af-packet, and "
                         "ebpf-staged, ebpf-xdp-staged (the copy through a per-CPU slot)")
    ap.add_argument("--placements", default="split,rps")
    ap.add_argument("--bisect", type=int, default=5, help="bisection steps when top speed loses frames")
    ap.add_argument("--budget", type=float, default=1200, help="stop (and tear down) after this many seconds")
    ap.add_argument("--repeat", type=int, default=1,
                    help="measure every row this many times; the summary shows the median run and the range")
    ap.add_argument("--no-build", action="store_true", help="use the examples already in target/release")
    ap.add_argument("--strict-backlog", action="store_true",
                    help="count frames the capture CPU's backlog refused as loss")
    ap.add_argument("--livecat", type=Path, metavar="PATH",
                    help="another build's livecat (an experiment: the same steps against an older eBPF program)")
    args = ap.parse_args()
    global STRICT_BACKLOG, DEADLINE, LIVECAT
    if args.livecat:
        LIVECAT = args.livecat.resolve()
    STRICT_BACKLOG = args.strict_backlog
    if os.geteuid() != 0:
        print("live_rates: needs root (network namespaces, BPF)", file=sys.stderr)
        return 1
    if (os.cpu_count() or 1) < 2:
        print("live_rates: needs 2 CPUs", file=sys.stderr)
        return 1
    sizes = [int(s) for s in args.sizes.split(",")]
    backends = args.backends.split(",")
    if not args.no_build:
        sh("cargo", "build", "--quiet", "--release", "--example", "livecat", "--example", "blast",
           cwd=ROOT, timeout=1800)
    results, overload = [], []
    load = os.getloadavg()
    when = time.strftime("%Y-%m-%d", time.gmtime())
    t0 = time.monotonic()
    DEADLINE = t0 + args.budget
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    teardown()
    # The kernel times every eBPF program run while this is 1 (about two clock reads a run).
    stats_before = sh("sysctl", "-n", "kernel.bpf_stats_enabled").stdout.strip()
    sh("sysctl", "-qw", "kernel.bpf_stats_enabled=1")
    try:
        # Frames above 1514 bytes (jumbo: 9014) need the veth's MTU raised to carry them.
        setup(mtu=max(sizes) - 14 if max(sizes) > 1514 else None)
        # Generator alone, no capture: what the sender does by itself (receive softirq on CPU 0).
        baseline = {}
        set_rps("0")
        for size in sizes:
            before = veth_counters()
            g = json.loads(sh("ip", "netns", "exec", NS_A, "taskset", "-c", "0", str(BLAST), VA,
                              "--dst-mac", SPAN_DST_MAC, "--size", str(size),
                              "--seconds", str(args.seconds), timeout=args.seconds + 30).stdout)
            after = veth_counters()
            baseline[size] = {"pps": round(g["pps"]), "gbit_s": round(g["gbit_s"], 3),
                              "veth_rx": after["rx"] - before["rx"], "sent": g["sent"]}
        for run in range(args.repeat):
            for placement in args.placements.split(","):
                for backend in backends:
                    for size in sizes:
                        res = find_limit(backend, size, args.seconds, placement, args.bisect)
                        res["run"] = run + 1
                        results.append(res)
        for backend in backends:
            overload.append(step(backend, max(sizes), 0, args.seconds, "split", BACKENDS[backend].overload))
    except OutOfTime as e:
        print(f"live_rates: {e} (ran {time.monotonic() - t0:.0f} s); partial results below",
              file=sys.stderr)
    finally:
        teardown()
        sh("sysctl", "-qw", f"kernel.bpf_stats_enabled={stats_before}", check=False)
    elapsed = time.monotonic() - t0
    for r in results:
        r["bytes_s"] = r["pps"] * r["size"]

    md = ["### Live capture: highest lossless rates (eBPF ring buffer vs AF_PACKET)", ""]
    md += summary(results, baseline, args.seconds, load, when)
    md += ["", "<details><summary>Details</summary>", ""]
    md.append("| run | placement | backend | frame | highest lossless rate | Gbit/s (L2) | limited by "
              "| refused before capture | at top speed |")
    md.append("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        ge = "≥ " if r["limit"] == "generator" else ""
        t = r["top"]
        b = r.get("best")
        refused = f"{b['veth_dropped']:,} ({100 * b['veth_dropped'] / max(1, b['sent']):.1f} %)" if b else "-"
        md.append(f"| {r['run']} | {r['placement']} | {r['backend']} | {r['size']} B | {ge}{r['pps']:,} pps | {ge}{r['gbit_s']:.2f} "
                  f"| {r['limit']} | {refused} | offered {t['achieved_pps']:,} pps: {top_note(t)} |")
    md += bpf_cost_table(results)
    if overload:
        md += ["", f"Overload (reader stalled 2 s, small ring, top speed, {max(sizes)} B frames):", ""]
        md.append("| backend | sent | delivered | kernel drops | ring drops | per-flow/total counters |")
        md.append("|---|---|---|---|---|---|")
        for o in overload:
            md.append(f"| {o['backend']} | {o['sent']:,} | {o['delivered']:,} | {o['kernel_drops']:,} "
                      f"| {o['ring_drops']:,} | {'exact' if o['counters_exact'] else 'NOT exact'} |")
    steps = sum(len(r["runs"]) for r in results) + len(overload) + len(baseline)
    md += ["", f"({steps} steps of {args.seconds:g} s, {elapsed:.0f} s in all; load average before "
           f"{load[0]:.2f}; Gbit/s counts Ethernet frames without FCS)", "", "</details>"]
    text = "\n".join(md) + "\n"
    print(text)
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / ("live_rates_strict.md" if STRICT_BACKLOG else "live_rates.md")).write_text(text)
    (out / ("live_rates_strict.json" if STRICT_BACKLOG else "live_rates.json")).write_text(json.dumps(
        {"seconds_per_step": args.seconds, "strict_backlog": STRICT_BACKLOG, "span_dst_mac": SPAN_DST_MAC,
         "placements": PLACEMENTS, "load_average_before": load, "elapsed_seconds": elapsed,
         "repeat": args.repeat, "livecat": str(LIVECAT),
         "complete": len(results) == args.repeat * len(sizes) * len(backends) * len(args.placements.split(",")),
         "generator_alone": baseline, "results": results, "overload": overload}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
