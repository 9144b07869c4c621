"""A capture of one encrypted multichannel SMB 3.1.1 session, for the differential fuzzer
and bench/encrypted.py: pcap (nanoseconds, Ethernet), wire-size frames (MSS 1448).

The first TCP connection carries the NEGOTIATE (preauth integrity and AES-128-GCM contexts)
and a two-leg SESSION_SETUP, each other one a NEGOTIATE and a two-leg binding; then WRITE
requests of `io` bytes and their responses, every one AES-128-GCM encrypted (TRANSFORM,
MS-SMB2 2.2.41), round-robin over the channels. The keys derive from the session key and the
setup's preauth hash (3.2.5.3.1: SP800-108 counter mode with HMAC-SHA256), computed here with
hashlib, hmac and `cryptography`, not by the engine. The messages are tests/smb2_images.py's."""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import struct
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import smb2_images as img

SID = 0x0000_2C00_0000_0041
SESSION_KEY = bytes(range(0x30, 0x40))
MSS = 1448
MORE_PROCESSING = 0xC000_0016


def kdf(key: bytes, label: bytes, context: bytes) -> bytes:
    """SP800-108 counter mode, HMAC-SHA256, one block, L = 128 (MS-SMB2 3.1.4.2)."""
    return hmac.new(key, struct.pack(">I", 1) + label + b"\0" + context + struct.pack(">I", 128), hashlib.sha256).digest()[:16]


def transform(key: bytes, message: bytes, nonce: int) -> bytes:
    """A NetBIOS-framed TRANSFORM message around the SMB2 message `message`, AES-128-GCM."""
    n = struct.pack("<Q", nonce) + b"\0" * 8
    aad = n + struct.pack("<IHHQ", len(message), 0, 1, SID)
    sealed = AESGCM(key).encrypt(n[:12], message, aad)
    out = b"\xfdSMB" + sealed[-16:] + aad + sealed[:-16]
    return struct.pack(">I", len(out)) + out


class Conn:
    """One TCP connection's frames (Ethernet, IPv4, TCP), written to a pcap file."""

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

    def send(self, to_server: bool, framed: bytes) -> None:
        """A NetBIOS-framed message, in segments of at most MSS bytes."""
        for i in range(0, len(framed), MSS):
            self.frame(to_server, 0x18, framed[i:i + MSS])


def make(path: Path, total: int, io: int, channels: int, seed: int | None = None) -> dict:
    """Writes the capture of `total // io` WRITEs; its session's keys and counts. `seed`: the
    WRITEs' data from it (else random)."""
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))  # nanosecond pcap
        clock = [1_764_000_000 * 10**9]
        conns = [Conn(out, clock, 1 + i, 50001 + i, 1 + i) for i in range(channels)]
        nreq, nresp = img.negotiate_request_311(), img.negotiate_response_311(b"S" * 16, 8 << 20)
        first = conns[0]
        first.handshake()
        preauth = b"\0" * 64
        for to_server, m in [(True, nreq), (False, nresp), (True, img.session_setup_request(1, 0, False)),
                             (False, img.session_setup_response(1, SID, MORE_PROCESSING)),
                             (True, img.session_setup_request(2, SID, False))]:
            preauth = hashlib.sha512(preauth + img.unframed(m)).digest()
            first.send(to_server, m)
        first.send(False, img.session_setup_response(2, SID))
        c2s = kdf(SESSION_KEY, b"SMBC2SCipherKey\0", preauth)
        s2c = kdf(SESSION_KEY, b"SMBS2CCipherKey\0", preauth)
        for c in conns[1:]:
            c.handshake()
            for to_server, m in [(True, nreq), (False, nresp), (True, img.session_setup_request(1, SID, True)),
                                 (False, img.session_setup_response(1, SID, MORE_PROCESSING)),
                                 (True, img.session_setup_request(2, SID, True)), (False, img.session_setup_response(2, SID))]:
                c.send(to_server, m)
        writes = total // io
        block = os.urandom(io + 4096 * 64) if seed is None else random.Random(seed).randbytes(io + 4096 * 64)
        nonce = 0
        for i in range(writes):
            c = conns[i % channels]
            mid = 10 + i // channels
            at = (i * 4096) % (4096 * 64)
            nonce += 1
            c.send(True, transform(c2s, img.unframed(img.write_request(mid, i * io, block[at:at + io], SID)), nonce))
            nonce += 1
            c.send(False, transform(s2c, img.unframed(img.write_response(mid, io, SID)), nonce))
    sid = struct.pack("<Q", SID).hex()
    return {"writes": writes, "messages": 2 * writes, "sid": sid, "session_key": SESSION_KEY.hex(), "s2c": s2c.hex(),
            "c2s": c2s.hex(), "keys_line": f"{sid},{SESSION_KEY.hex()}"}
