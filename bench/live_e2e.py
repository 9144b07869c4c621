"""End-to-end live rate: the highest replay rate at which `smbwire live` gives exactly what
`smbwire analyze` gives on the same file, with no frame lost (issue 7, "Benchmarks: Live").

For each frame size (jumbo: TCP MSS 8948 on a 9000-byte MTU; wire-size: MSS 1448 on 1500) the
script generates (once) a capture of known content with the synthesizer (`_core.synth`, as
bench/run.py does: nested mirror, 4 copies, 1 MiB sequential writes, so every payload crosses
the wire twice) and runs `smbwire analyze FILE --json` on it once: the reference. Then, for each
`--threads N`, one step is:
  1. `smbwire live -i VB --plain --json OUT --threads N --duration D` in namespace B (the script
     waits for "capturing on" on its stderr);
  2. `blast VA --pcap FILE --mbps R` in namespace A (dissectors/examples/blast.rs: every frame of
     the file loaded into memory first, then sent once, in order, through an AF_PACKET socket with
     sendmmsg, paced to R megabits of frame bytes per second; 0 = top speed);
  3. SIGTERM to live one second after the send; live drains what is queued and writes OUT.
A step passes when live's `edges` and `totals` equal analyze's, and
`live.stats.kernel_drops == 0 and live.stats.ring_drops == 0`.
Per (frame size, placement, threads) the search runs top speed first; if that passes, the result
is the generator's top speed (a lower bound of what live sustains); else it bisects the offered
rate between 0 and the achieved top speed (--bisect steps). The result is then the highest rate
that passes twice: the passing rates are tried again from the highest down, then, if none passes
again, rates 10 % apart below the lowest.
Placements (2 CPUs): "shared" lets the scheduler place blast, the kernel's receive work and
smbwire's threads (every --threads value); "split" pins blast to CPU 0 (on a veth the receive
softirq, where the TCX program and its ring copy run, follows the sender) and smbwire to CPU 1
(--threads 1 only: more workers would share that one CPU).

CPU cost: the CPU seconds (user + system, every thread) of the smbwire process from the moment
it printed "capturing on" until it exited (from /proc/PID/stat before the send and wait4() at
the end), minus the same for an idle step of the same shape (no frame sent: start-up, polling,
the final report), divided by the frames and by the payload bytes of the capture. The kernel's
half of the capture (the TCX program and its ring buffer copy, in the receive softirq) is not in
that figure: on a veth it runs on the sender's CPU, inside blast's sendmmsg, and is in blast's
system time (blast reports its CPU while sending; minus the same with nothing capturing, per
frame, it estimates the kernel's capture cost). From the threads-1 steps of
the two frame sizes (same payload, different frame counts) the script solves
cpu = a * frames + b * payload_bytes for a (ns per frame) and b (ns per payload byte) and
projects the cores smbwire needs for 25 and 100 Gbit/s of such traffic at each frame size.

Needs root. Usage: python bench/live_e2e.py [--bytes 1GiB] [--threads 1,2] [--sizes jumbo,wire]
    [--placements shared,split] [--channels 1] [--bisect 4] [--budget 1200] [--keep] [--no-build]
    [--live-args "OPTIONS"]   (extra `smbwire live` options, for experiments)
    python bench/live_e2e.py --render bench/out/live_e2e.json   (the tables of a saved run)
    python bench/live_e2e.py --fixed 2700 --sizes jumbo --threads 1,2 --repeat 3
        (no search: every step at one rate, the --threads values alternating; CPU per step)
Two namespaces joined by a veth (no addresses: the replayed frames carry their own, all in
198.18.0.0/15, and are addressed to MACs that are not B's, as on a mirror port), named with this
script's PID, removed on exit, SIGINT, SIGTERM and SIGHUP; only processes this script started
are ended, by their PID. Captures go to bench/out/e2e/ (removed at the end unless --keep).
Writes bench/out/live_e2e.json and bench/out/live_e2e.md and prints the Markdown table.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vethpair import VethPair  # noqa: E402
import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
WORK = OUT / "e2e"
BLAST = ROOT / "target" / "release" / "examples" / "blast"
SMBWIRE = ROOT / ".venv" / "bin" / "smbwire"
PID = os.getpid() % 100000
LAB = VethPair("swe")
NS_A, NS_B = LAB.ns_a, LAB.ns_b
VA, VB = LAB.va, LAB.vb
# frame size name: (TCP MSS, veth MTU)
SIZES = {"jumbo": (8948, 9000), "wire": (1448, 1500)}
# placement: (taskset CPU list for blast, for smbwire live), None = not pinned.
# "shared": the scheduler places everything on the 2 CPUs; "split": blast (and with it the veth's
# receive softirq, where the TCX program and its ring copy run) on CPU 0, smbwire on CPU 1.
PLACEMENTS = {"shared": (None, None), "split": ("0", "1")}
# A paced step counts as reaching its target when it achieved this share of it.
REACHED = 0.97
CLK_TCK = os.sysconf("SC_CLK_TCK")
DEADLINE = float("inf")
# Children alive right now (ours), ended by PID on the way out.
CHILDREN: list[subprocess.Popen] = []
# Extra `smbwire live` options (--live-args), for experiments.
LIVE_ARGS: list[str] = []


class OutOfTime(Exception):
    pass


def sh(*args, check=True, timeout=120, **kw):
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=timeout, **kw)


setup = LAB.setup
teardown = LAB.teardown
veth_counters = LAB.counters


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of every thread of a live process so far."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK  # fields 14 and 15 (utime, stime)


def softirq_seconds() -> float:
    """Softirq time of all CPUs so far (/proc/stat)."""
    f = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(f[7]) / CLK_TCK


def make_capture(name: str, nbytes: int, channels: int = 1) -> tuple[Path, dict]:
    """The capture of one frame size and its `smbwire analyze --json` (made once). `channels`:
    TCP connections of the multichannel session the writes are spread over (1: one
    connection, where `live --threads N` decodes everything on one worker, the others only
    hashing; S2D's SMB multichannel opens several per interface)."""
    mss, _ = SIZES[name]
    ch = f"-{channels}ch" if channels > 1 else ""
    cap = WORK / f"nested4-1MiB-mss{mss}{ch}-{nbytes >> 20}MiB.pcap"
    ref = WORK / f"{cap.stem}.analyze.json"
    if not cap.exists() or not ref.exists():
        from smbwire import _core

        spec = {"scenario": "nested4", "bytes": nbytes, "io_size": 1 << 20, "seed": 1,
                "transport": "tcp", "mss": mss}
        if channels > 1:
            spec["channels"] = channels
        t0 = time.perf_counter()
        _core.synth(json.dumps(spec), str(cap))
        print(f"generated {cap.name}: {cap.stat().st_size / 2**20:.0f} MiB in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        sh(str(SMBWIRE), "analyze", str(cap), "--json", str(ref), timeout=900)
    return cap, json.loads(ref.read_text())


def by_edge(r: dict) -> dict:
    return {(e["src"], e["dst"], e["class"]): e for e in r["edges"]}


def compare(live: dict, ref: dict) -> list[str]:
    """What differs between live's edges/totals and analyze's (empty: equal)."""
    diffs = []
    le, re_ = by_edge(live), by_edge(ref)
    for k in sorted(set(le) | set(re_)):
        if le.get(k) != re_.get(k):
            a, b = le.get(k) or {}, re_.get(k) or {}
            keys = sorted(x for x in set(a) | set(b) if a.get(x) != b.get(x))
            diffs.append(f"edge {'/'.join(k)}: " + ", ".join(f"{x} {a.get(x)} != {b.get(x)}" for x in keys[:4]))
    lt, rt = live.get("totals") or {}, ref["totals"]
    for x in sorted(set(lt) | set(rt)):
        if lt.get(x) != rt.get(x):
            diffs.append(f"totals.{x} {lt.get(x)} != {rt.get(x)}")
    return diffs


class Live:
    """`smbwire live` in namespace B; `ip netns exec` execs it, so the PID is smbwire's."""

    def __init__(self, threads: int, duration: float, tag: str, cpus: str | None):
        self.json = WORK / f"live-{tag}.json"
        self.json.unlink(missing_ok=True)
        self.stderr_path = WORK / f"live-{tag}.stderr"
        self.stderr = open(self.stderr_path, "w+")
        pin = ["taskset", "-c", cpus] if cpus else []  # taskset execs too: the PID stays smbwire's
        cmd = ["ip", "netns", "exec", NS_B, *pin, str(SMBWIRE), "live", "-i", VB, "--plain",
               "--json", str(self.json), "--threads", str(threads), "--duration", f"{duration:.0f}", *LIVE_ARGS]
        self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr)
        CHILDREN.append(self.p)
        deadline = time.monotonic() + 60
        while "capturing on" not in self.err():
            if self.p.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"smbwire live did not start ({self.p.poll()}): {self.err()[-2000:]}")
            time.sleep(0.05)
        self.cpu0 = proc_cpu(self.p.pid)

    def err(self) -> str:
        return self.stderr_path.read_text()

    def stop(self) -> tuple[dict, float]:
        """SIGTERM, wait; the result and the CPU seconds since "capturing on"."""
        self.p.send_signal(signal.SIGTERM)
        _, status, usage = os.wait4(self.p.pid, 0)
        self.p.returncode = os.waitstatus_to_exitcode(status)
        CHILDREN.remove(self.p)
        self.stderr.close()
        if self.p.returncode != 0:
            raise RuntimeError(f"smbwire live exited {self.p.returncode}: {self.err()[-2000:]}")
        cpu = usage.ru_utime + usage.ru_stime - self.cpu0
        return json.loads(self.json.read_text()), cpu

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()  # our own child, by its PID
            self.p.wait()
        if self.p in CHILDREN:
            CHILDREN.remove(self.p)


def blast_measured(cap: Path, mbps: float, timeout: float, cpus: str | None) -> tuple[dict, float]:
    """Replay `cap` from namespace A: blast's JSON and the CPU seconds (user + system) of the
    whole blast process, loading included, from wait4()."""
    pin = ["taskset", "-c", cpus] if cpus else []
    cmd = ["ip", "netns", "exec", NS_A, *pin, str(BLAST), VA, "--pcap", str(cap), "--mbps", f"{mbps:.0f}"]
    with open(WORK / "blast.out", "w+") as out, open(WORK / "blast.err", "w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        CHILDREN.append(p)
        try:
            t_end = time.monotonic() + timeout
            while True:
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() > t_end:
                    p.kill()
                    p.wait()
                    raise RuntimeError(f"blast did not finish in {timeout:.0f} s")
                time.sleep(0.02)
            p.returncode = os.waitstatus_to_exitcode(status)
        finally:
            CHILDREN.remove(p)
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            raise RuntimeError(f"blast exited {p.returncode}: {err.read().strip()[-1000:]}")
        return json.loads(out.read()), usage.ru_utime + usage.ru_stime


def step(name: str, cap: Path, ref: dict, threads: int, mbps: float, idle_cpu: float, placement: str) -> dict:
    if time.monotonic() > DEADLINE:
        raise OutOfTime(f"--budget exhausted before a {name} threads={threads} step")
    size = cap.stat().st_size
    # Long enough for loading and the slowest send the search tries (>= 200 Mbit/s).
    duration = 120 + size * 8 / 200e6
    gen_cpus, live_cpus = PLACEMENTS[placement]
    live = Live(threads, duration, f"{name}-t{threads}", live_cpus)
    try:
        before = veth_counters()
        si0 = softirq_seconds()
        gen, blast_cpu = blast_measured(cap, mbps, timeout=duration, cpus=gen_cpus)
        si1 = softirq_seconds()
        after = veth_counters()
        time.sleep(1.0)
        r, cpu = live.stop()
    finally:
        live.kill()
    lv = r.get("live") or {}
    st = lv.get("stats") or {}
    diffs = compare(r, ref)
    tcp = r.get("tcp") or {}
    row = {
        "size": name,
        "placement": placement,
        "threads": threads,
        "target_mbps": mbps,
        "achieved_gbit_s": round(gen["gbit_s"], 3),
        "achieved_pps": round(gen["pps"]),
        "send_seconds": round(gen["seconds"], 3),
        "sent": gen["sent"],
        "frames": gen["frames"],
        "bytes": gen["bytes"],
        "enobufs": gen["enobufs"],
        "veth_rx": after["rx"] - before["rx"],
        "veth_dropped": (after["rx_dropped"] - before["rx_dropped"]) + (after["tx_dropped"] - before["tx_dropped"]),
        "kernel_drops": st.get("kernel_drops"),
        "interface_drops": st.get("interface_drops"),
        "ring_drops": st.get("ring_drops"),
        "copy_errors": st.get("copy_errors"),
        "packets_matched": st.get("packets_matched"),
        "packets_delivered": st.get("packets_delivered"),
        "tcp_gaps": tcp.get("gaps"),
        "tcp_gap_bytes": tcp.get("gap_bytes"),
        "analysed_fraction": (lv.get("analysed") or {}).get("fraction"),
        "shed_connections": (lv.get("shed") or {}).get("connections", 0),
        "queues": st.get("queues"),
        "equal": not diffs,
        "diffs": diffs[:8],
        "smbwire_cpu_s": round(cpu, 3),
        "smbwire_cpu_s_net": round(cpu - idle_cpu, 3),
        "blast_cpu_s": round(gen["cpu_seconds"], 3),
        "blast_cpu_total_s": round(blast_cpu, 3),
        "softirq_s": round(si1 - si0, 3),
        "load_average": os.getloadavg()[0],
    }
    row["pass"] = (row["equal"] and row["kernel_drops"] == 0 and row["ring_drops"] == 0
                   and row["shed_connections"] == 0 and gen["sent"] == gen["frames"])
    row["reached"] = mbps == 0 or gen["gbit_s"] * 1000 >= REACHED * mbps
    print(json.dumps({k: v for k, v in row.items() if k != "diffs"} | {"diffs": diffs[:2]}),
          file=sys.stderr, flush=True)
    return row


def idle_step(threads: int, seconds: float, placement: str) -> float:
    """CPU seconds of a live run from "capturing on" to exit with no traffic for `seconds`."""
    live = Live(threads, 600, f"idle-t{threads}", PLACEMENTS[placement][1])
    try:
        time.sleep(seconds)
        _, cpu = live.stop()
    finally:
        live.kill()
    return cpu


def limit_of(r: dict) -> str:
    if r.get("shed_connections"):
        return f"shed {r['shed_connections']} connection(s) (analysis behind)"
    if r["ring_drops"]:
        return "ring drops (analysis behind)"
    if r["kernel_drops"]:
        return "kernel drops"
    if r["tcp_gaps"]:
        return "TCP gaps"
    if not r["equal"]:
        return "result differs"
    if r["sent"] != r["frames"]:
        return "generator did not send every frame"
    return "none"


def find_limit(name: str, cap: Path, ref: dict, threads: int, bisect: int, idle_cpu: float,
               placement: str) -> dict:
    run = lambda mbps: step(name, cap, ref, threads, mbps, idle_cpu, placement)  # noqa: E731
    top = run(0)
    runs = [top]
    res = {"size": name, "placement": placement, "threads": threads, "top": top, "runs": runs}
    if top["pass"]:
        res.update(limit="generator top speed", gbit_s=top["achieved_gbit_s"], best=top, at_least=True)
        return res
    lo, hi = 0.0, top["achieved_gbit_s"] * 1000
    fails = [limit_of(top)]
    passed = []  # offered rates (Mbit/s) that passed once
    for _ in range(bisect):
        mid = (lo + hi) / 2
        r = run(mid)
        runs.append(r)
        if r["pass"] and r["reached"]:
            lo = mid
            passed.append(mid)
        elif r["pass"]:  # the generator could not reach `mid` with live running
            hi = r["achieved_gbit_s"] * 1000
        else:
            hi = mid
            fails.append(limit_of(r))
    # Confirm: the best rate is the highest that passes twice; try the passing rates from the
    # highest down, then, if none passes again, step down 10 % below the lowest.
    confirmed = None
    candidates = sorted(passed, reverse=True)[:3]
    rate = min(passed) * 0.9 if passed else lo
    for _ in range(3):
        if rate > 0 and (not passed or rate < min(passed)):
            candidates.append(rate)
            rate *= 0.9
    for c in candidates:
        r = run(c)
        runs.append(r)
        ok = r["pass"] and r["reached"]
        if ok and c not in passed:  # a rate not tried before must pass a second time
            r = run(c)
            runs.append(r)
            ok = r["pass"] and r["reached"]
        if ok:
            confirmed = r
            break
        if not r["pass"]:
            fails.append(limit_of(r))
    # What stopped the faster steps: the most frequent failure.
    limit = max(set(fails), key=fails.count)
    if confirmed is None:
        res.update(limit=f"{limit} (no rate passed twice)", gbit_s=0.0, at_least=False)
    else:
        res.update(limit=limit, gbit_s=confirmed["achieved_gbit_s"], best=confirmed, at_least=False)
    return res


def cost_model(results: list[dict], refs: dict, gen_alone: dict) -> dict:
    """Per placement and threads: ns per frame and per payload byte of the smbwire process,
    solved from the passing steps of both frame sizes (median CPU of each), the cores that
    projects for 25 and 100 Gbit/s, and the kernel's capture cost per frame (blast's CPU while
    sending at top speed with live capturing minus the same with nothing capturing)."""
    out = {}
    for placement, threads in sorted({(r["placement"], r["threads"]) for r in results}):
        pts = []
        m: dict = {"placement": placement, "threads": threads}
        for name in SIZES:
            runs = [x for r in results if r["size"] == name and r["threads"] == threads
                    and r["placement"] == placement for x in r["runs"] if x["pass"]]
            if not runs:
                continue
            cpu = sorted(x["smbwire_cpu_s_net"] for x in runs)[len(runs) // 2]
            # Both unpaced: blast at top speed with live capturing and with nothing capturing.
            top = next(r["top"] for r in results if r["size"] == name and r["threads"] == threads
                       and r["placement"] == placement)
            frames, payload, fbytes = runs[0]["frames"], refs[name]["totals"]["payload_bytes"], runs[0]["bytes"]
            pts.append((name, cpu, frames, payload, fbytes))
            alone = gen_alone.get((placement, name))
            m.setdefault("per_size", {})[name] = {
                "passing_steps": len(runs), "smbwire_cpu_s": cpu, "frames": frames,
                "payload_bytes": payload, "frame_bytes": fbytes,
                "ns_per_frame_all_in": cpu / frames * 1e9, "ns_per_payload_byte_all_in": cpu / payload * 1e9,
                "kernel_capture_ns_per_frame": (top["blast_cpu_s"] - alone["cpu_s"]) / frames * 1e9 if alone else None,
            }
        if len(pts) == 2:
            (_, c1, f1, p1, _), (_, c2, f2, p2, _) = pts
            det = f1 * p2 - f2 * p1
            a = (c1 * p2 - c2 * p1) / det  # seconds per frame
            b = (f1 * c2 - f2 * c1) / det  # seconds per payload byte
            m.update(ns_per_frame=a * 1e9, ns_per_payload_byte=b * 1e9)
            proj = {}
            for n, c, f, p, fb in pts:
                for gbit in (25, 100):
                    fps = gbit * 1e9 / 8 / (fb / f)  # frames per second at this line rate
                    pbs = gbit * 1e9 / 8 * (p / fb)  # payload bytes per second
                    kern = m["per_size"][n]["kernel_capture_ns_per_frame"]
                    proj[f"{n}_{gbit}"] = {"frames_per_s": fps, "payload_bytes_per_s": pbs,
                                           "cores_model": a * fps + b * pbs,
                                           "cores_measured": c / fb * gbit * 1e9 / 8,
                                           "cores_kernel_capture": kern * 1e-9 * fps if kern is not None else None}
            m["projection"] = proj
        out[f"{placement}/t{threads}"] = m
    return out


def markdown(results, model, gen_alone, refs, meta) -> str:
    md = ["| frames | CPUs | `--threads` | highest exact rate | limited by | smbwire CPU s | "
          "ns/frame (all in) | ns/payload byte (all in) | blast CPU s (sending) | at top speed |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    where = {"shared": "shared", "split": "blast 0, live 1"}
    for r in results:
        b = r.get("best")
        ge = "≥ " if r["at_least"] else ""
        mss, mtu = SIZES[r["size"]]
        t = r["top"]
        top = (f"{t['achieved_gbit_s']:.2f} Gbit/s: " + ("exact" if t["pass"] else
               f"{limit_of(t)} (ring drops {t['ring_drops']:,}, kernel drops {t['kernel_drops']:,}, TCP gaps {t['tcp_gaps']:,})"))
        head = f"| {mtu} B MTU (MSS {mss}) | {where[r['placement']]} | {r['threads']} "
        if b:
            md.append(head + f"| {ge}{r['gbit_s']:.2f} Gbit/s "
                      f"({b['achieved_pps']:,} frames/s) | {r['limit']} | {b['smbwire_cpu_s_net']:.2f} "
                      f"| {b['smbwire_cpu_s_net'] / b['frames'] * 1e9:,.0f} "
                      f"| {b['smbwire_cpu_s_net'] / refs[r['size']]['totals']['payload_bytes'] * 1e9:.3f} "
                      f"| {b['blast_cpu_s']:.2f} | {top} |")
        else:
            md.append(head + f"| none | {r['limit']} | - | - | - | - | {top} |")
    md.append("")
    md.append("Generator alone (blast --pcap at top speed, nothing capturing): "
              + "; ".join(f"{where[pl]}, {SIZES[n][1]} B MTU {g['gbit_s']:.2f} Gbit/s ({g['pps']:,.0f} frames/s, "
                          f"{g['cpu_s']:.2f} CPU s sending)" for (pl, n), g in gen_alone.items()) + ".")
    for key, m in model.items():
        if "ns_per_frame" not in m:
            continue
        md.append("")
        md.append(f"Per-core cost, {where[m['placement']]} CPUs, `--threads {m['threads']}` (smbwire process; "
                  f"cpu = a x frames + b x payload bytes solved from both frame sizes): "
                  f"a = {m['ns_per_frame']:,.0f} ns per frame, b = {m['ns_per_payload_byte']:.3f} ns per payload "
                  f"byte; kernel capture (TCX program and ring copy, in blast's CPU): "
                  + ", ".join(f"{SIZES[n][1]} B MTU {v['kernel_capture_ns_per_frame']:,.0f} ns per frame"
                              for n, v in m["per_size"].items() if v["kernel_capture_ns_per_frame"] is not None)
                  + ". Cores needed, smbwire (its CPU per frame byte measured at that frame size; the a/b "
                  "model goes through both points) + kernel capture:")
        md.append("")
        md.append("| frames | 25 Gbit/s | 100 Gbit/s |")
        md.append("|---|---|---|")
        for n in SIZES:
            cells = []
            for g in (25, 100):
                p = m["projection"].get(f"{n}_{g}")
                if p:
                    k = p["cores_kernel_capture"]
                    cells.append(f"{p['cores_measured']:.1f}" + (f" + {k:.1f}" if k is not None else "")
                                 + f" ({p['frames_per_s'] / 1e6:.2f} M frames/s)")
            if cells:
                md.append(f"| {SIZES[n][1]} B MTU | " + " | ".join(cells) + " |")
    md.append("")
    md.append(f"({meta})")
    return "\n".join(md) + "\n"


def _on_signal(signum, frame):
    raise SystemExit(f"live_e2e: {signal.Signals(signum).name}, tearing down")


def parse_size(s: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if s.endswith(u):
            return int(float(s[: -len(u)]) * m)
    return int(s)


def threads_for(placement: str, threads_list: list[int]) -> list[int]:
    """The --threads values a placement runs: with live pinned to one CPU, more decoding
    workers only share that CPU, so just 1."""
    return threads_list if PLACEMENTS[placement][1] is None else [1]


def fixed_steps(args, sizes, placements, threads_list, caps, refs) -> int:
    """`--fixed`: the same replay rate --repeat times per --threads value, alternating, each
    step's row printed (stderr, as in a search) and summed up per value (stdout)."""
    summary = []
    try:
        for placement in placements:
            tl = threads_for(placement, threads_list)
            for name in sizes:
                setup(SIZES[name][1])
                idle = {t: idle_step(t, 2.0, placement) for t in tl}
                rows = {t: [] for t in tl}
                for _ in range(args.repeat):
                    for t in tl:
                        rows[t].append(step(name, caps[name], refs[name], t, args.fixed, idle[t], placement))
                teardown()
                for t in tl:
                    r = rows[t]
                    summary.append(f"{name} {placement} --threads {t} at {args.fixed:.0f} Mbit/s: smbwire CPU s "
                                   + ", ".join(f"{x['smbwire_cpu_s']:.2f}" for x in r)
                                   + f"; achieved {min(x['achieved_gbit_s'] for x in r):.2f}-"
                                   f"{max(x['achieved_gbit_s'] for x in r):.2f} Gbit/s; "
                                   f"{sum(x['pass'] for x in r)} of {len(r)} exact")
    finally:
        teardown()
        if not args.keep:
            for f in WORK.glob("nested4-*"):
                f.unlink()
    print("\n".join(summary))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", default="1GiB", help="payload the scenario writes (the wire carries it twice)")
    ap.add_argument("--threads", default="1,2", help="smbwire live --threads values to measure")
    ap.add_argument("--channels", type=int, default=1,
                    help="TCP connections the session's writes are spread over (SMB multichannel; default 1)")
    ap.add_argument("--sizes", default="jumbo,wire", help="frame sizes: jumbo (MSS 8948), wire (MSS 1448)")
    ap.add_argument("--placements", default="shared,split",
                    help="shared: unpinned; split: blast on CPU 0, smbwire on CPU 1 (threads 1 only)")
    ap.add_argument("--bisect", type=int, default=4, help="bisection steps when top speed fails")
    ap.add_argument("--budget", type=float, default=1200, help="no new step after this many seconds")
    ap.add_argument("--live-args", default="", help="extra smbwire live options (experiments)")
    ap.add_argument("--keep", action="store_true", help="keep the generated captures in bench/out/e2e/")
    ap.add_argument("--no-build", action="store_true", help="use target/release/examples/blast as it is")
    ap.add_argument("--render", metavar="JSON", help="print the tables of a saved live_e2e.json again (no run)")
    ap.add_argument("--fixed", type=float, metavar="MBPS",
                    help="no search: replay at this rate (0 = top speed), --repeat times per --threads value, "
                         "the values alternating, and print each step's row (CPU seconds, pass); for A/B "
                         "comparisons of builds; writes no results file")
    ap.add_argument("--repeat", type=int, default=3, help="with --fixed: steps per --threads value")
    args = ap.parse_args()
    global DEADLINE
    if args.render:
        d = json.loads(Path(args.render).read_text())
        gen = {tuple(k.split("/")): v for k, v in d["generator_alone"].items()}
        refs = d["reference"]
        model = cost_model(d["results"], refs, gen)
        print(markdown(d["results"], model, gen, refs, d.get("meta", "")))
        return 0
    if os.geteuid() != 0:
        print("live_e2e: needs root (network namespaces, BPF)", file=sys.stderr)
        return 1
    nbytes = parse_size(args.bytes)
    threads_list = [int(t) for t in args.threads.split(",")]
    sizes = args.sizes.split(",")
    placements = args.placements.split(",")
    LIVE_ARGS[:] = args.live_args.split()
    WORK.mkdir(parents=True, exist_ok=True)
    if not args.no_build:
        sh("cargo", "build", "--quiet", "--release", "--example", "blast", cwd=ROOT, timeout=1800)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
    load = os.getloadavg()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    # Figures name the machine they were measured on (`machine.py`).
    host = machine.describe()
    host["core_round_trip_ns"] = machine.core_round_trip_ns()
    t0 = time.monotonic()
    results, refs, caps, gen_alone, idle = [], {}, {}, {}, {}
    complete = False
    try:
        for name in sizes:
            caps[name], refs[name] = make_capture(name, nbytes, args.channels)
        cap_mib = {n: caps[n].stat().st_size / 2**20 for n in caps}
        DEADLINE = time.monotonic() + args.budget
        if args.fixed is not None:
            return fixed_steps(args, sizes, placements, threads_list, caps, refs)
        for placement in placements:
            gen_cpus = PLACEMENTS[placement][0]
            tl = threads_for(placement, threads_list)
            for name in sizes:
                setup(SIZES[name][1])
                # The generator alone: its top speed with nothing capturing.
                g, _ = blast_measured(caps[name], 0, timeout=600, cpus=gen_cpus)
                gen_alone[(placement, name)] = {"gbit_s": g["gbit_s"], "pps": g["pps"], "cpu_s": g["cpu_seconds"],
                                                "seconds": g["seconds"]}
                print(json.dumps({"generator_alone": [placement, name]} | gen_alone[(placement, name)]),
                      file=sys.stderr, flush=True)
                for threads in tl:
                    if (placement, threads) not in idle:
                        idle[(placement, threads)] = idle_step(threads, 2.0, placement)
                        print(json.dumps({"idle_cpu_s": idle[(placement, threads)], "threads": threads,
                                          "placement": placement}), file=sys.stderr, flush=True)
                    results.append(find_limit(name, caps[name], refs[name], threads, args.bisect,
                                              idle[(placement, threads)], placement))
                teardown()
        complete = True
    except OutOfTime as e:
        print(f"live_e2e: {e}; partial results below", file=sys.stderr)
    finally:
        for p in list(CHILDREN):
            if p.poll() is None:
                p.kill()  # only our own children, by PID
                p.wait()
        teardown()
        if not args.keep:
            for f in WORK.glob("nested4-*"):
                f.unlink()
    elapsed = time.monotonic() - t0
    model = cost_model(results, refs, gen_alone)
    meta = (f"bench/live_e2e.py --bytes {args.bytes} --threads {args.threads} --placements {args.placements}"
            + (f" --channels {args.channels}" if args.channels > 1 else "") + ", "
            f"{when}; "
            f"{sum(len(r['runs']) for r in results)} steps, {elapsed:.0f} s; load average before {load[0]:.2f}; "
            f"captures: nested4, 1 MiB writes, "
            + (f"{args.channels} channels, " if args.channels > 1 else "") + ", ".join(
                f"{SIZES[n][0]} MSS {cap_mib[n]:.0f} MiB, {refs[n]['totals']['payload_bytes'] / 2**20:.0f} MiB payload"
                for n in cap_mib) + "; Gbit/s count Ethernet frames without FCS; machine: " + machine.line(host))
    text = markdown(results, model, gen_alone, refs, meta)
    print(text)
    OUT.mkdir(exist_ok=True)
    (OUT / "live_e2e.md").write_text(text)
    (OUT / "live_e2e.json").write_text(json.dumps(
        {"when": when, "machine": host, "bytes": nbytes, "threads": threads_list, "sizes": {n: SIZES[n] for n in sizes},
         "load_average_before": load, "elapsed_seconds": elapsed, "complete": complete,
         "placements": {p: PLACEMENTS[p] for p in placements},
         "idle_cpu_s": {f"{p}/t{t}": v for (p, t), v in idle.items()},
         "generator_alone": {f"{p}/{n}": v for (p, n), v in gen_alone.items()},
         "reference": {n: {"totals": refs[n]["totals"], "edges": refs[n]["edges"]} for n in refs},
         "results": results, "cost_model": model, "meta": meta}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
