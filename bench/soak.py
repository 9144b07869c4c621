"""Soak: `smbwire live` for a long run on a replayed loop of storage traffic plus noise flows,
with its resident memory and dedupe index sampled every --sample seconds (issue 12).

Two network namespaces joined by a veth (198.18.0.0/15 only, made and removed by this script,
also on SIGTERM/SIGINT): namespace A replays a generated nested-mirror capture
(`smbwire synth nested4`, wire-size frames) in a loop at --rate-mbps, each loop as a new TCP
connection (the client port and the sequence numbers change, so every loop is new traffic,
not retransmissions), with one noise frame (a SYN to port 445 from a random address and port)
every --noise-every storage frames; `smbwire live --plain` captures in namespace B with the
capture's topology. Every --sample seconds: the process's VmRSS (/proc), and from its status
line the matched packets, drops and the dedupe index's peak size. RSS counts the eBPF ring
buffer's pages once the kernel has written them: 32 MiB, which the kernel maps twice (so a
record can wrap around), so up to 64 MiB of RSS; the anonymous part (RssAnon) is the process's
own memory.

Memory is flat when the RSS after warm-up (the first window plus a minute) stays within
--flat-tolerance of its value at the end of warm-up. The result (bench/out/soak.json and a
Markdown table on stdout) says so, and also whether any frame was lost (kernel or ring drops).

The table on stdout has a row every --table-every seconds (all samples are in soak.json). The
generated capture and its hex copy (about 0.4 GB) are removed at the end.

Needs root. Usage: python bench/soak.py [--minutes 30] [--rate-mbps 400] [--sample 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
TAG = f"swsoak{os.getpid() % 100000}"
NS_A, NS_B, VA, VB = f"{TAG}a", f"{TAG}b", f"{TAG}va", f"{TAG}vb"

SENDER = r"""
import random, socket, struct, sys, time
frames = [bytes.fromhex(l) for l in open(sys.argv[1]).read().split()]
rate = float(sys.argv[2]) * 1e6 / 8   # bytes per second
noise_every = int(sys.argv[3])
dev = sys.argv[4]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((dev, 0))
rnd = random.Random(7)
t0, sent = time.monotonic(), 0
def csum(b):
    if len(b) % 2: b += b"\0"
    x = sum(struct.unpack(f"!{len(b)//2}H", b)); x = (x >> 16) + (x & 0xFFFF); x += x >> 16
    return ~x & 0xFFFF
loop = 0
while True:
    loop += 1
    port = 20000 + loop % 40000
    shift = (loop * 7919 * 65536) & 0xFFFFFFFF
    for i, f in enumerate(frames):
        if len(f) >= 54 and f[12:14] == b"\x08\x00" and f[23] == 6:
            ihl = (f[14] & 15) * 4
            t = 14 + ihl
            sp, dp = struct.unpack_from("!HH", f, t)
            b = bytearray(f)
            if dp in (445, 5445):
                struct.pack_into("!H", b, t, port)
                seq = (struct.unpack_from("!I", b, t + 4)[0] + shift) & 0xFFFFFFFF
                struct.pack_into("!I", b, t + 4, seq)
            elif sp in (445, 5445):
                struct.pack_into("!H", b, t + 2, port)
                ack = (struct.unpack_from("!I", b, t + 8)[0] + shift) & 0xFFFFFFFF
                struct.pack_into("!I", b, t + 8, ack)
            f = bytes(b)
        s.send(f)
        sent += len(f)
        if noise_every and i % noise_every == 0:
            src = bytes([198, 19, rnd.randrange(256), rnd.randrange(1, 255)])
            tcp = struct.pack("!HHIIBBHHH", rnd.randrange(1024, 65535), 445, rnd.getrandbits(32), 0, 5 << 4, 2, 65535, 0, 0)
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 0, 0, 64, 6, 0, src, bytes([198, 18, 0, 2]))
            ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
            s.send(frames[0][:12] + b"\x08\x00" + ip + tcp)
        ahead = sent / rate - (time.monotonic() - t0)
        if ahead > 0.002:
            time.sleep(ahead)
"""


def sh(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=120, **kw)


def setup() -> None:
    sh("ip", "netns", "add", NS_A)
    sh("ip", "netns", "add", NS_B)
    sh("ip", "link", "add", VA, "netns", NS_A, "type", "veth", "peer", "name", VB, "netns", NS_B)
    for ns, dev in ((NS_A, VA), (NS_B, VB)):
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "link", "set", dev, "up")


def teardown() -> None:
    sh("ip", "netns", "del", NS_A, check=False)
    sh("ip", "netns", "del", NS_B, check=False)


def rss_bytes(pid: int, field: str = "VmRSS") -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def status_fields(line: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in line.split() if "=" in p)


def pcap_frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert struct.unpack("<I", data[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D), "a little-endian pcap"
    off, out = 24, []
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8:off + 12])[0]
        out.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate-mbps", type=float, default=400.0, help="offered storage rate (Mbit/s)")
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--noise-every", type=int, default=20, help="one noise SYN per N storage frames (0: none)")
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--flat-tolerance", type=float, default=0.10)
    ap.add_argument("--table-every", type=float, default=60.0, help="seconds between rows of the printed table")
    args = ap.parse_args()
    assert os.geteuid() == 0, "needs root (namespaces, BPF)"
    smbwire = [sys.executable, "-m", "smbwire"]
    OUT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="smbwire-soak-"))
    procs: list[subprocess.Popen] = []

    def stop(*_: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.kill()
        teardown()
        sys.exit(1)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        cap, topo = work / "loop.pcap", work / "loop.toml"
        sh(*smbwire, "synth", "nested4", "-o", str(cap), "--bytes", "64MiB", "--topology-out", str(topo), cwd=ROOT)
        hexfile = work / "frames.hex"
        hexfile.write_text("\n".join(f.hex() for f in pcap_frames(cap)))
        setup()
        seconds = args.minutes * 60
        live = subprocess.Popen(
            ["ip", "netns", "exec", NS_B, *smbwire, "live", "-i", VB, "--plain", "--topology", str(topo),
             "--window", str(args.window), "--duration", str(seconds), "--json", str(work / "live.json")],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(live)
        time.sleep(3)
        sender = subprocess.Popen(["ip", "netns", "exec", NS_A, sys.executable, "-c", SENDER, str(hexfile),
                                   str(args.rate_mbps), str(args.noise_every), VA],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(sender)
        os.set_blocking(live.stdout.fileno(), False)
        samples, last, t0, buf = [], {}, time.monotonic(), ""
        while live.poll() is None:
            time.sleep(args.sample)
            try:
                buf += live.stdout.read() or ""
            except (TypeError, BlockingIOError):
                pass
            lines = [l for l in buf.splitlines() if "pkts=" in l]
            if lines:
                last = status_fields(lines[-1])
                buf = buf[buf.rfind("\n") + 1:]
            rss = rss_bytes(live.pid)
            if rss is None:
                break
            samples.append({"t": round(time.monotonic() - t0), "rss": rss, "rss_anon": rss_bytes(live.pid, "RssAnon") or 0,
                            "index_peak": int(last.get("index_peak_bytes", 0)), "pkts": int(last.get("pkts", 0)),
                            "kernel_drops": int(last.get("kernel_drops", 0)), "ring_drops": int(last.get("ring_drops", 0))})
            print(f"t={samples[-1]['t']}s rss={rss >> 20} MiB anon={samples[-1]['rss_anon'] >> 20} MiB index_peak={samples[-1]['index_peak'] >> 20} MiB "
                  f"pkts={samples[-1]['pkts']} drops={samples[-1]['kernel_drops']}+{samples[-1]['ring_drops']}",
                  file=sys.stderr, flush=True)
        sender.kill()
        live.wait(timeout=120)
        result = json.loads((work / "live.json").read_text())
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        teardown()
        shutil.rmtree(work, ignore_errors=True)
    warm = args.window + 60
    after = [s for s in samples if s["t"] >= warm]
    base = after[0]["rss"] if after else None
    flat = bool(after) and all(abs(s["rss"] - base) <= args.flat_tolerance * base for s in after)
    stats = result["live"]["stats"]
    summary = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "minutes": args.minutes,
        "rate_mbps": args.rate_mbps, "window_seconds": args.window, "samples": samples,
        "rss_flat_after_warmup": flat, "warmup_seconds": warm,
        "kernel_drops": stats["kernel_drops"], "ring_drops": stats["ring_drops"],
        "analysed_fraction": result["live"].get("analysed", {}).get("fraction"),
        "payload_bytes": result["totals"]["payload_bytes"], "load": os.getloadavg(),
    }
    (OUT / "soak.json").write_text(json.dumps(summary, indent=2))
    print("| t (s) | RSS (MiB) | of it anonymous (MiB) | index peak (MiB) | packets | drops |\n|---|---|---|---|---|---|")
    next_row = 0.0
    for i, s in enumerate(samples):
        if s["t"] < next_row and i != len(samples) - 1:
            continue
        next_row = s["t"] - s["t"] % args.table_every + args.table_every
        print(f"| {s['t']} | {s['rss'] / 2**20:.1f} | {s['rss_anon'] / 2**20:.1f} | {s['index_peak'] / 2**20:.1f} | "
              f"{s['pkts']:,} | {s['kernel_drops'] + s['ring_drops']} |")
    print(f"\nRSS flat after {warm:.0f} s warm-up (±{args.flat_tolerance:.0%}): {flat}; kernel drops "
          f"{stats['kernel_drops']}, ring drops {stats['ring_drops']}; analysed fraction "
          f"{summary['analysed_fraction']}; payload {result['totals']['payload_bytes'] / 2**30:.2f} GiB")
    return 0 if flat and stats["kernel_drops"] == 0 and stats["ring_drops"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
