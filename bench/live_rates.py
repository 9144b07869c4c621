"""Highest packet rate each live backend sustains without loss, on a veth pair.

A paced generator in namespace A injects RoCEv2 frames (UDP to 4791) at a set rate for a few
seconds; `livecat` captures on namespace B's end with each backend. A step passes when every
frame sent was delivered and no drop was counted. Rates go up the ladder until a step fails or
the generator cannot reach the rate (a Python sender on a shared 2-core machine tops out
first, so the last row may say "generator-bound" rather than find the backend's limit).
A second measurement lets the kernel generate: one TCP bulk transfer to port 445 (one
1500-byte frame per skb), as fast as the stack goes, and reports the rate and any loss.

Needs root. Usage: python bench/live_rates.py [--seconds 3] [--size 128] [--rates 50000,...]
Traffic stays in 198.18.0.0/15 inside namespaces this script makes and removes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIVECAT = ROOT / "target" / "release" / "examples" / "livecat"
NS_A, NS_B = f"swr{os.getpid() % 100000}a", f"swr{os.getpid() % 100000}b"
VA, VB = NS_A + "v", NS_B + "v"

GENERATOR = r"""
import socket, sys, time
iface, rate, seconds, frame = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), bytes.fromhex(sys.argv[4])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
send = s.send
slot = 0.001  # pace in 1 ms slots
per_slot = max(1, round(rate * slot))
sent = 0
start = time.perf_counter()
end = start + seconds
nxt = start
while True:
    now = time.perf_counter()
    if now >= end:
        break
    if now < nxt:
        time.sleep(nxt - now)
    for _ in range(per_slot):
        send(frame)
    sent += per_slot
    nxt += slot
elapsed = time.perf_counter() - start
print(sent, sent / elapsed)
"""


def sh(*args, check=True, **kw):
    return subprocess.run(args, check=check, capture_output=True, text=True, **kw)


def setup() -> tuple[str, str]:
    for ns in (NS_A, NS_B):
        sh("ip", "netns", "add", ns)
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
    sh("ip", "link", "add", VA, "netns", NS_A, "type", "veth", "peer", "name", VB, "netns", NS_B)
    for ns, dev in ((NS_A, VA), (NS_B, VB)):
        sh("ip", "-n", ns, "link", "set", dev, "up")
    mac = lambda ns, dev: json.loads(sh("ip", "-n", ns, "-j", "link", "show", dev).stdout)[0]["address"]
    return mac(NS_A, VA), mac(NS_B, VB)


def teardown():
    sh("ip", "netns", "del", NS_A, check=False)
    sh("ip", "netns", "del", NS_B, check=False)


def rocev2_frame(mac_a: str, mac_b: str, size: int) -> bytes:
    payload = bytes(max(0, size - 14 - 20 - 8))
    udp = struct.pack("!HHHH", 49152, 4791, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0x4000, 64, 17, 0,
                     socket.inet_aton("198.18.0.1"), socket.inet_aton("198.18.0.2"))
    eth = bytes.fromhex(mac_b.replace(":", "")) + bytes.fromhex(mac_a.replace(":", "")) + b"\x08\x00"
    return eth + ip + udp


def step(backend: str, rate: int, seconds: float, frame: bytes) -> dict:
    flag = "--af-packet" if backend == "af-packet" else "--require-ebpf"
    cap = subprocess.Popen(
        ["ip", "netns", "exec", NS_B, str(LIVECAT), VB, "--seconds", "600", "--stdin-stop", flag],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert cap.stderr.readline().startswith("ready"), cap.stderr.read()
    gen = sh("ip", "netns", "exec", NS_A, "python3", "-c", GENERATOR, VA, str(rate), str(seconds), frame.hex())
    sent, achieved = gen.stdout.split()
    out, err = cap.communicate(timeout=60)
    r = json.loads(out)
    st = r["stats"]
    return {
        "backend": backend,
        "target_pps": rate,
        "achieved_pps": round(float(achieved)),
        "sent": int(sent),
        "delivered": r["delivered"],
        "matched": st["packets_matched"],
        "drops": st["ring_drops"] + st["kernel_drops"],
        "lossless": r["delivered"] == int(sent) and st["ring_drops"] + st["kernel_drops"] == 0,
        "generator_bound": float(achieved) < 0.95 * rate,
    }


SERVER = r"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('198.18.0.2', 445)); s.listen(1); print('up', flush=True)
c, _ = s.accept()
while c.recv(1 << 20):
    pass
c.close()
"""

CLIENT = r"""
import socket, sys, time
n = int(sys.argv[1])
c = socket.create_connection(('198.18.0.2', 445))
buf = bytes(1 << 20)
t = time.perf_counter()
for _ in range(n >> 20):
    c.sendall(buf)
c.shutdown(socket.SHUT_WR); c.recv(1); c.close()
print(time.perf_counter() - t)
"""


def tcp_bulk(backend: str, nbytes: int) -> dict:
    """One bulk transfer; backend "none" runs it with no capture, as the baseline."""
    cap = None
    if backend != "none":
        flag = "--af-packet" if backend == "af-packet" else "--require-ebpf"
        cap = subprocess.Popen(
            ["ip", "netns", "exec", NS_B, str(LIVECAT), VB, "--seconds", "600", "--stdin-stop", flag],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert cap.stderr.readline().startswith("ready"), cap.stderr.read()
    srv = subprocess.Popen(["ip", "netns", "exec", NS_B, "python3", "-c", SERVER], stdout=subprocess.PIPE, text=True)
    assert srv.stdout.readline().strip() == "up"
    secs = float(sh("ip", "netns", "exec", NS_A, "python3", "-c", CLIENT, str(nbytes)).stdout)
    srv.wait(timeout=60)
    time.sleep(0.3)
    if cap is None:
        segs = -(-nbytes // 1448)  # data segments at the veth's MSS with timestamps
        return {"backend": "none", "tcp_bulk_bytes": nbytes, "pps": round(segs / secs),
                "gbit_s": round(nbytes * 8 / secs / 1e9, 2), "matched": "-", "delivered": "-",
                "drops": "-", "lossless": True}
    out, _ = cap.communicate(timeout=60)
    st = json.loads(out)["stats"]
    return {
        "backend": backend,
        "tcp_bulk_bytes": nbytes,
        "pps": round(st["packets_matched"] / secs),
        "gbit_s": round(st["bytes_matched"] * 8 / secs / 1e9, 2),
        "matched": st["packets_matched"],
        "delivered": st["packets_delivered"],
        "drops": st["ring_drops"] + st["kernel_drops"],
        "lossless": st["packets_delivered"] == st["packets_matched"] and st["ring_drops"] + st["kernel_drops"] == 0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--size", type=int, default=128, help="frame size in bytes (without FCS)")
    ap.add_argument("--rates", default="25000,50000,100000,200000,400000,800000")
    ap.add_argument("--tcp-bytes", type=int, default=512 << 20, help="size of the TCP bulk transfer")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("live_rates: needs root (network namespaces, BPF)", file=sys.stderr)
        return 1
    sh("cargo", "build", "--quiet", "--example", "livecat", "--release", cwd=ROOT)
    rows = []
    teardown()
    try:
        mac_a, mac_b = setup()
        for ns, dev in ((NS_A, VA), (NS_B, VB)):
            sh("ip", "-n", ns, "addr", "add", "198.18.0.%d/24" % (1 if ns == NS_A else 2), "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "gso_max_segs", "1")
        frame = rocev2_frame(mac_a, mac_b, args.size)
        for backend in ("ebpf", "af-packet"):
            for rate in (int(r) for r in args.rates.split(",")):
                row = step(backend, rate, args.seconds, frame)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if not row["lossless"] or row["generator_bound"]:
                    break
        bulk = []
        for backend in ("none", "ebpf", "af-packet"):
            bulk.append(tcp_bulk(backend, args.tcp_bytes))
            print(json.dumps(bulk[-1]), flush=True)
    finally:
        teardown()
    print("\n| backend | highest lossless rate (pps) | frame size | limited by |")
    print("|---|---|---|---|")
    for backend in ("ebpf", "af-packet"):
        mine = [r for r in rows if r["backend"] == backend]
        ok = [r for r in mine if r["lossless"]]
        best = max((r["achieved_pps"] for r in ok), default=0)
        last = mine[-1] if mine else None
        why = "generator" if last and last["lossless"] else "capture (drops)" if last else "-"
        print(f"| {backend} | {best} | {args.size} | {why} |")
    print("\n| backend | TCP bulk pps | Gbit/s | matched | delivered | drops |")
    print("|---|---|---|---|---|---|")
    for b in bulk:
        print(f"| {b['backend']} | {b['pps']} | {b['gbit_s']} | {b['matched']} | {b['delivered']} | {b['drops']} |")
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "live_rates.json").write_text(json.dumps({"paced": rows, "tcp_bulk": bulk}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
