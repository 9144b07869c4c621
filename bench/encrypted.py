"""`smbwire analyze --keys` on encrypted multichannel SMB 3.1.1 traffic, 1 and N threads,
against tshark decrypting the same file with the same keys: MB/s, peak RSS, CPU.

Writes (once, in bench/out/) a capture of one SMB 3.1.1 session over `--channels` TCP
connections (wire-size frames, MSS 1448): NEGOTIATE with the preauth-integrity and
encryption (AES-128-GCM) contexts and a two-leg SESSION_SETUP on the first connection, a
two-leg binding on each other one, then WRITE requests of `--io-size` and their responses,
every one encrypted (TRANSFORM, MS-SMB2 §2.2.41), round-robin over the channels. The keys
derive from the session key and the setup's preauth hash (§3.2.5.3.1, SP800-108 with
HMAC-SHA256), computed here with Python's hashlib/hmac and `cryptography`, independently of
the engine. smbwire gets the session key alone (so every channel but the first needs the
hash the first channel's worker computed); tshark gets the directional keys.

Then times, alternating, `--repeat` rounds each (medians; peak RSS and CPU from wait4()):
  smbwire analyze FILE --keys K --threads 1 -q --json OUT
  smbwire analyze FILE --keys K --threads N -q --json OUT
  tshark -n -q -r FILE -z smb2,srt -o uat:smb2_seskey_list:...
and checks that smbwire decrypted every message (and the same JSON for 1 and N threads apart
from `analysis`) and that tshark's SRT table counts every WRITE.

Usage: python bench/encrypted.py [--bytes 1GiB] [--io-size 1MiB] [--channels 2] [--threads 2]
                                 [--repeat 3] [--keep]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import random
import re
import statistics
import struct
import sys
import time
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE))
import machine  # noqa: E402
from run import run_measured  # noqa: E402

SMBWIRE = str(HERE.parent / ".venv" / "bin" / "smbwire")
SID = 0x0000_2C00_0000_0041
MSS = 1448
NEGOTIATE, SESSION_SETUP, WRITE = 0, 1, 9
MORE_PROCESSING = 0xC000_0016


def size(s: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMG]i?B)?", s.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {s}")
    unit = {None: 1, "kib": 1 << 10, "kb": 1 << 10, "mib": 1 << 20, "mb": 1 << 20, "gib": 1 << 30, "gb": 1 << 30}
    return int(m.group(1)) * unit[(m.group(2) or "").lower() or None]


def header(cmd: int, mid: int, sid: int, response: bool, status: int = 0, flags: int = 0) -> bytes:
    """A 64-byte sync SMB2 header (§2.2.1.2)."""
    fl = flags | (1 if response else 0)
    return struct.pack("<4sHHIHHIIQIIQ16s", b"\xfeSMB", 64, 1, status, cmd, 1, fl, 0, mid, 0xFEFF, 1, sid, b"\0" * 16)


def contexts(entries: list[tuple[int, bytes]], start: int) -> bytes:
    """Negotiate contexts (§2.2.3.1), the first at `start` (a multiple of 8) in the message."""
    out = b""
    for i, (kind, data) in enumerate(entries):
        out += struct.pack("<HHI", kind, len(data), 0) + data
        if i + 1 < len(entries):
            out += b"\0" * (-(start + len(out)) % 8)
    return out


def negotiate_request() -> bytes:
    ctx_at = 64 + 36 + 2 + 2  # header, fixed part, one dialect, padding to 8
    ctx = contexts([(1, struct.pack("<HHH", 1, 32, 1) + bytes(range(32))), (2, struct.pack("<HH", 1, 2))], ctx_at)
    body = struct.pack("<HHHHI16sIHH", 36, 1, 1, 0, 0x48, b"C" * 16, ctx_at, 2, 0) + struct.pack("<H", 0x0311) + b"\0\0"
    return header(NEGOTIATE, 0, 0, False) + body + ctx


def negotiate_response() -> bytes:
    ctx_at = 64 + 64 + 8  # header, fixed part, 8 bytes of security buffer
    ctx = contexts([(1, struct.pack("<HHH", 1, 32, 1) + bytes(range(32, 64))), (2, struct.pack("<HH", 1, 2))], ctx_at)
    big = 8 << 20
    body = struct.pack("<HHHH16sIIIIQQHHI", 65, 1, 0x0311, 2, b"S" * 16, 0x48, big, big, big, 0, 0, 128, 8, ctx_at)
    return header(NEGOTIATE, 0, 0, True) + body + b"\x60\x06" + b"\0" * 6 + ctx


def setup_request(mid: int, sid: int, binding: bool) -> bytes:
    body = struct.pack("<HBBIIHHQ", 25, 1 if binding else 0, 1, 0, 0, 88, 16, 0) + bytes([mid]) * 16
    return header(SESSION_SETUP, mid, sid, False, flags=8 if binding else 0) + body


def setup_response(mid: int, status: int) -> bytes:
    return header(SESSION_SETUP, mid, SID, True, status) + struct.pack("<HHHH", 9, 0, 72, 16) + bytes([0x80 | mid]) * 16


def write_request(mid: int, offset: int, data: bytes) -> bytes:
    body = struct.pack("<HHIQ16sIIHHI", 49, 0x70, len(data), offset, b"\x01" * 16, 0, 0, 0, 0, 0)
    return header(WRITE, mid, SID, False) + body + data


def write_response(mid: int, n: int) -> bytes:
    return header(WRITE, mid, SID, True) + struct.pack("<HHIIHH", 17, 0, n, 0, 0, 0)


def kdf(key: bytes, label: bytes, context: bytes) -> bytes:
    """SP800-108 counter mode, HMAC-SHA256, one block, L = 128 (§3.1.4.2)."""
    return hmac.new(key, struct.pack(">I", 1) + label + b"\0" + context + struct.pack(">I", 128), hashlib.sha256).digest()[:16]


def transform(key: bytes, plain: bytes, nonce: int) -> bytes:
    """A TRANSFORM message (§2.2.41) around `plain`, AES-128-GCM."""
    n = struct.pack("<Q", nonce) + b"\0" * 8
    aad = n + struct.pack("<IHHQ", len(plain), 0, 1, SID)
    sealed = AESGCM(key).encrypt(n[:12], plain, aad)
    return b"\xfdSMB" + sealed[-16:] + aad + sealed[:-16]


class Conn:
    """One TCP connection's frames (Ethernet, IPv4, TCP) into a pcap file."""

    def __init__(self, out, clock: list[int], client: int, port: int, server: int):
        self.out, self.clock = out, clock
        self.ends = ((bytes([198, 18, 0, client]), port), (bytes([198, 18, 1, server]), 445))
        self.seq = [1000, 900_000]

    def frame(self, to_server: bool, flags: int, payload: bytes) -> None:
        d = 0 if to_server else 1
        (sa, sp), (da, dp) = self.ends if to_server else self.ends[::-1]
        tcp = struct.pack(">HHIIBBHHH", sp, dp, self.seq[d], self.seq[1 - d], 5 << 4, flags, 65535, 0, 0)
        self.seq[d] = (self.seq[d] + len(payload) + (1 if flags & 3 else 0)) & 0xFFFFFFFF
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 0, 0x4000, 64, 6, 0, sa, da)
        eth = b"\x02\0\0\0\0" + da[3:] + b"\x02\0\0\0\0" + sa[3:] + b"\x08\x00"
        f = eth + ip + tcp + payload
        self.clock[0] += 1200  # ns: 1514-byte frames at about 10 Gbit/s
        t = self.clock[0]
        self.out.write(struct.pack("<IIII", t // 10**9, t % 10**9, len(f), len(f)) + f)

    def handshake(self) -> None:
        self.frame(True, 0x02, b"")
        self.frame(False, 0x12, b"")
        self.frame(True, 0x10, b"")

    def send(self, to_server: bool, msg: bytes) -> None:
        m = struct.pack(">I", len(msg)) + msg
        for i in range(0, len(m), MSS):
            self.frame(to_server, 0x18, m[i:i + MSS])


def make(path: Path, total: int, io: int, channels: int, seed: int | None = None) -> dict:
    """Writes the capture; its session's keys and counts. `seed`: the WRITEs' data from it
    (else random)."""
    session_key = bytes(range(0x30, 0x40))
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))  # nanosecond pcap
        clock = [1_764_000_000 * 10**9]
        conns = [Conn(out, clock, 1 + i, 50001 + i, 1 + i) for i in range(channels)]
        nreq, nresp = negotiate_request(), negotiate_response()
        preauth = b"\0" * 64
        first = conns[0]
        first.handshake()
        for to_server, m in [(True, nreq), (False, nresp), (True, setup_request(1, 0, False)),
                             (False, setup_response(1, MORE_PROCESSING)), (True, setup_request(2, SID, False))]:
            preauth = hashlib.sha512(preauth + m).digest()
            first.send(to_server, m)
        first.send(False, setup_response(2, 0))
        c2s = kdf(session_key, b"SMBC2SCipherKey\0", preauth)
        s2c = kdf(session_key, b"SMBS2CCipherKey\0", preauth)
        for c in conns[1:]:
            c.handshake()
            for to_server, m in [(True, nreq), (False, nresp), (True, setup_request(1, SID, True)),
                                 (False, setup_response(1, MORE_PROCESSING)), (True, setup_request(2, SID, True)),
                                 (False, setup_response(2, 0))]:
                c.send(to_server, m)
        writes = total // io
        block = os.urandom(io + 4096 * 64) if seed is None else random.Random(seed).randbytes(io + 4096 * 64)
        nonce = 0
        for i in range(writes):
            c = conns[i % channels]
            mid = 10 + i // channels
            at = (i * 4096) % (4096 * 64)
            nonce += 1
            c.send(True, transform(c2s, write_request(mid, i * io, block[at:at + io]), nonce))
            nonce += 1
            c.send(False, transform(s2c, write_response(mid, io), nonce))
    return {"writes": writes, "messages": 2 * writes, "sid": struct.pack("<Q", SID).hex(), "session_key": session_key.hex(),
            "keys_line": f"{struct.pack('<Q', SID).hex()},{session_key.hex()}",
            "s2c": s2c.hex(), "c2s": c2s.hex()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bytes", type=size, default=size("1GiB"))
    ap.add_argument("--io-size", type=size, default=size("1MiB"))
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="reuse the capture of an earlier run")
    a = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    cap = OUT / f"encrypted-311-{a.channels}ch-{a.io_size >> 10}KiB-{a.bytes >> 20}MiB.pcap"
    meta_path = cap.with_suffix(".json")
    if a.keep and cap.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
    else:
        t = time.perf_counter()
        meta = make(cap, a.bytes, a.io_size, a.channels)
        meta_path.write_text(json.dumps(meta))
        print(f"wrote {cap} ({cap.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    mb = cap.stat().st_size / 1e6
    keys = OUT / "encrypted-keys.txt"
    keys.write_text(f"{meta['sid']},{meta['session_key']}\n")
    uat = f"uat:smb2_seskey_list:{meta['sid']},{meta['session_key']},{meta['s2c']},{meta['c2s']}"
    cmds = {
        "smbwire --threads 1": [SMBWIRE, "analyze", str(cap), "--keys", str(keys), "--threads", "1", "-q", "--json", str(OUT / "enc-1.json")],
        f"smbwire --threads {a.threads}": [SMBWIRE, "analyze", str(cap), "--keys", str(keys), "--threads", str(a.threads), "-q",
                                           "--json", str(OUT / f"enc-{a.threads}.json")],
        "tshark -z smb2,srt": ["tshark", "-n", "-q", "-r", str(cap), "-z", "smb2,srt", "-o", uat],
    }
    with open(cap, "rb") as f:  # the page cache, before every round
        while f.read(1 << 24):
            pass
    got: dict[str, dict[str, list[float]]] = {k: {"wall": [], "rss": [], "cpu": []} for k in cmds}
    for _ in range(a.repeat):
        for name, cmd in cmds.items():
            cpu: list[float] = []
            out = str(OUT / "tshark-srt.txt") if name.startswith("tshark") else os.devnull
            wall, rss = run_measured(cmd, out, cpu)
            got[name]["wall"].append(wall)
            got[name]["rss"].append(rss)
            got[name]["cpu"].append(cpu[0])
    one, many = (json.loads((OUT / f"enc-{n}.json").read_text()) for n in (1, a.threads))
    s = one["smb2"]
    assert (s["decrypted_messages"], s["decrypt_failed"], s["encrypted_without_key"]) == (meta["messages"], 0, 0), s
    assert many["analysis"]["threads"] == a.threads
    one.pop("analysis"), many.pop("analysis")
    assert one == many, "1 and N threads differ"
    srt = (OUT / "tshark-srt.txt").read_text()
    row = re.search(r"^\s*9\s+Write\s+(\d+)", srt, re.M)
    assert row and int(row.group(1)) == meta["writes"], f"tshark's SRT WRITE row: {row and row.group(0)}"
    print(f"# {cap.name}: {mb:.0f} MB, {meta['writes']} encrypted WRITEs of {a.io_size >> 10} KiB over {a.channels} channels; "
          f"{machine.line(machine.describe())}")
    print("| command | median s | MB/s | CPU s | peak RSS MiB | vs tshark |")
    print("|---|---|---|---|---|---|")
    base = statistics.median(got["tshark -z smb2,srt"]["wall"])
    for name, g in got.items():
        w = statistics.median(g["wall"])
        print(f"| `{name}` | {w:.2f} | {mb / w:.0f} | {statistics.median(g['cpu']):.2f} | {max(g['rss']) / 2**20:.0f} | {base / w:.1f}x |")


if __name__ == "__main__":
    main()
