"""A second, independent generator of the S2D scenarios: SMB2 over TCP built with scapy's own
SMB2, NetBIOS, TCP/IP and Ethernet layers and written with scapy's pcap writer.

It shares no code with the Rust synthesizer or the engine's encoders (`synth/`, `dissectors/`):
it is a cross-implementation check. If both generators agree with the analyzer on the figures
each scenario defines, a layout mistake made once in our encoders and mirrored by our parsers
cannot hide.

A scenario is a list of flows between the two nodes of captures/s2d-two-node.toml. Per I/O,
the first flow's client sends its WRITEs, then every later flow's client forwards the same data
(the owner replicates a redirected write before it answers), then the responses come back in
reverse order, as write-through storage must. The figures each scenario defines (`truth`) are
computed here from the scenario alone, never from an analysis.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.layers.smb2 import (
    SMB2_FILEID,
    SMB2_Close_Request,
    SMB2_Close_Response,
    SMB2_Create_Request,
    SMB2_Create_Response,
    SMB2_Header,
    SMB2_Negotiate_Protocol_Request,
    SMB2_Negotiate_Protocol_Response,
    SMB2_Session_Setup_Request,
    SMB2_Session_Setup_Response,
    SMB2_Tree_Connect_Request,
    SMB2_Tree_Connect_Response,
    SMB2_Write_Request,
    SMB2_Write_Response,
)
from scapy.utils import PcapWriter

BLOCK = 4096
NODES = {
    "owner": {"ip": "198.18.0.1", "mac": "02:00:00:00:01:01"},
    "partner": {"ip": "198.18.0.2", "mac": "02:00:00:00:01:02"},
}
DIALECT_302 = 0x0302
# MS-SMB2 2.2.1: command codes.
NEGOTIATE, SESSION_SETUP, TREE_CONNECT, CREATE, CLOSE, WRITE = 0x00, 0x01, 0x03, 0x05, 0x06, 0x09
SERVER_TO_REDIR = 0x00000001


@dataclass
class Flow:
    client: str
    server: str
    copies: int
    cls: str
    share: str
    files: list[str]


def _replication(copies: int) -> Flow:
    files = [f"Slab\\copy-{i + 1}.dat" for i in range(copies)]
    return Flow("owner", "partner", copies, "replication", "SBL$", files)


SCENARIOS: dict[str, list[Flow]] = {
    # Two-way mirror: one copy on the partner.
    "mirror2": [_replication(1)],
    # Nested mirror, 4 copies (2 per node): every write crosses to the partner twice.
    "nested4": [_replication(2)],
    # Three copies on the partner.
    "six": [_replication(3)],
    # VM on the non-owner: the partner redirects to the owner, which replicates twice.
    "redirect4": [
        Flow("partner", "owner", 1, "redirection", "ClusterStorage$", ["Volume1\\VM01\\disk0.vhdx"]),
        _replication(2),
    ],
}


@dataclass
class Options:
    scenario: str
    ios: int = 8
    io_size: int = 256 * 1024
    # Every n-th 4 KiB block of an I/O is all zeros (trivial); 0 = none.
    trivial_every: int = 0
    mss: int = 1448
    seed: int = 7


class _Conn:
    """One TCP connection: sequence numbers, frames written in order, pure ACKs now and then."""

    def __init__(self, w: PcapWriter, clock: list[float], client: str, server: str, sport: int):
        self.w, self.clock = w, clock
        self.ends = {"c": (NODES[client], sport, 0x1000_0000), "s": (NODES[server], 445, 0x7000_0000)}
        self.seq = {"c": 0x1000_0000, "s": 0x7000_0000}
        self.unacked = {"c": 0, "s": 0}
        self.frames = 0

    def _frame(self, side: str, flags: str, payload: bytes = b"") -> None:
        other = "s" if side == "c" else "c"
        (node, port, _), (onode, oport, _) = self.ends[side], self.ends[other]
        pkt = (
            Ether(src=node["mac"], dst=onode["mac"])
            / IP(src=node["ip"], dst=onode["ip"], ttl=64)
            / TCP(sport=port, dport=oport, seq=self.seq[side], ack=self.seq[other], flags=flags, window=65535)
        )
        if payload:
            pkt = pkt / payload
        self.clock[0] += 10e-6
        pkt.time = self.clock[0]
        self.w.write(pkt)
        self.frames += 1
        self.seq[side] = (self.seq[side] + len(payload) + (1 if ("S" in flags or "F" in flags) else 0)) & 0xFFFFFFFF

    def open(self) -> None:
        self._frame("c", "S")
        self._frame("s", "SA")
        self._frame("c", "A")

    def send(self, side: str, message: bytes, mss: int) -> None:
        """One NetBIOS-framed SMB2 message, cut into MSS-sized segments; the peer ACKs every
        second segment, as delayed ACK does."""
        other = "s" if side == "c" else "c"
        for i in range(0, len(message), mss):
            self._frame(side, "PA" if i + mss >= len(message) else "A", message[i : i + mss])
            self.unacked[side] += 1
            if self.unacked[side] >= 2:
                self._frame(other, "A")
                self.unacked[side] = 0

    def close(self) -> None:
        self._frame("c", "FA")
        self._frame("s", "FA")
        self._frame("c", "A")


def _nb(hdr: SMB2_Header, body) -> bytes:
    """MS-SMB2 2.1 Direct TCP transport: a zero byte and a 24-bit big-endian length. scapy's
    NBTSession is RFC 1002's session message, whose length has 17 bits: a 256 KiB WRITE would
    be framed wrongly, so only the SMB2 layers come from scapy here."""
    msg = bytes(hdr / body)
    assert len(msg) < 1 << 24
    return struct.pack(">I", len(msg)) + msg


class _Session:
    """An SMB 3.0.2 session over one connection: negotiate, session setup, tree connect, opens."""

    def __init__(self, conn: _Conn, flow: Flow, session_id: int, mss: int):
        self.conn, self.flow, self.mss = conn, flow, mss
        self.sid, self.tid, self.mid = session_id, 0, 0
        self.fids: list[SMB2_FILEID] = []

    def _req(self, command: int, body, credit_charge: int = 1) -> int:
        mid = self.mid
        self.mid += credit_charge
        hdr = SMB2_Header(Command=command, MID=mid, CreditCharge=credit_charge, CreditRequest=64,
                          TID=self.tid, SessionId=self.sid if command != NEGOTIATE else 0)
        self.conn.send("c", _nb(hdr, body), self.mss)
        return mid

    def _resp(self, command: int, mid: int, body, credit_charge: int = 1) -> None:
        hdr = SMB2_Header(Command=command, MID=mid, CreditCharge=credit_charge, CreditRequest=64,
                          Flags=SERVER_TO_REDIR, TID=self.tid,
                          SessionId=self.sid if command != NEGOTIATE else 0)
        self.conn.send("s", _nb(hdr, body), self.mss)

    def setup(self) -> None:
        f = self.flow
        mid = self._req(NEGOTIATE, SMB2_Negotiate_Protocol_Request(Dialects=[DIALECT_302]))
        self._resp(NEGOTIATE, mid, SMB2_Negotiate_Protocol_Response(
            DialectRevision=DIALECT_302, MaxTransactionSize=8 << 20, MaxReadSize=8 << 20, MaxWriteSize=8 << 20))
        mid = self._req(SESSION_SETUP, SMB2_Session_Setup_Request())
        self._resp(SESSION_SETUP, mid, SMB2_Session_Setup_Response())
        mid = self._req(TREE_CONNECT, SMB2_Tree_Connect_Request(Buffer=[("Path", f"\\\\{f.server}\\{f.share}")]))
        self.tid = 1
        self._resp(TREE_CONNECT, mid, SMB2_Tree_Connect_Response(ShareType=1))
        for i, name in enumerate(f.files):
            mid = self._req(CREATE, SMB2_Create_Request(CreateDisposition=3, Buffer=[("Name", name)]))
            fid = SMB2_FILEID(Persistent=0x100 + i, Volatile=0x200 + i)
            self.fids.append(fid)
            self._resp(CREATE, mid, SMB2_Create_Response(FileId=fid))

    def write(self, copy: int, offset: int, data: bytes) -> int:
        charge = (len(data) - 1) // 65536 + 1
        return self._req(WRITE, SMB2_Write_Request(Offset=offset, FileId=self.fids[copy], Buffer=[("Data", data)]),
                         credit_charge=charge)

    def write_done(self, mid: int, length: int) -> None:
        self._resp(WRITE, mid, SMB2_Write_Response(Count=length), credit_charge=(length - 1) // 65536 + 1)

    def teardown(self) -> None:
        for fid in self.fids:
            mid = self._req(CLOSE, SMB2_Close_Request(FileId=fid))
            self._resp(CLOSE, mid, SMB2_Close_Response())


def _io_data(rng: random.Random, opts: Options) -> bytes:
    blocks = []
    for b in range(opts.io_size // BLOCK):
        if opts.trivial_every and b % opts.trivial_every == opts.trivial_every - 1:
            blocks.append(bytes(BLOCK))
        else:
            blocks.append(rng.randbytes(BLOCK))
    return b"".join(blocks)


def truth(opts: Options) -> dict:
    """The figures the scenario defines, from the scenario alone."""
    assert opts.io_size % BLOCK == 0, "the truth below assumes whole blocks"
    blocks = opts.io_size // BLOCK
    trivial_blocks = blocks // opts.trivial_every if opts.trivial_every else 0
    per_io_trivial = trivial_blocks * BLOCK
    per_io_unique = opts.io_size - per_io_trivial
    edges = []
    for f in SCENARIOS[opts.scenario]:
        payload = opts.ios * opts.io_size * f.copies
        trivial = opts.ios * per_io_trivial * f.copies
        unique = opts.ios * per_io_unique
        edges.append({
            "src": f.client, "dst": f.server, "class": f.cls,
            "payload_bytes": payload, "trivial_bytes": trivial, "nontrivial_bytes": payload - trivial,
            "unique_bytes": unique, "sends": opts.ios * f.copies,
            "per_copy_duplicate_bytes": unique * (f.copies - 1), "dup_ratio": float(f.copies),
        })
    total = sum(e["payload_bytes"] for e in edges)
    writes = sum(e["sends"] for e in edges)
    return {"edges": edges, "payload_bytes": total, "write_requests": writes,
            "amplification": total / (opts.ios * opts.io_size)}


def generate(path: str, opts: Options) -> dict:
    """Writes the capture; returns the truth and the number of frames written."""
    rng = random.Random(opts.seed)
    flows = SCENARIOS[opts.scenario]
    clock = [1_700_000_000.0]
    w = PcapWriter(path, linktype=1, sync=False)
    sessions = []
    for i, f in enumerate(flows):
        conn = _Conn(w, clock, f.client, f.server, 50_000 + i)
        conn.open()
        s = _Session(conn, f, session_id=0x4000_0000_0000_0001 + i, mss=opts.mss)
        s.setup()
        sessions.append(s)
    for io in range(opts.ios):
        data = _io_data(rng, opts)
        offset = io * opts.io_size
        pending = []
        for s in sessions:
            for copy in range(s.flow.copies):
                pending.append((s, s.write(copy, offset, data)))
        for s, mid in reversed(pending):
            s.write_done(mid, len(data))
    for s in sessions:
        s.teardown()
        s.conn.close()
    w.close()
    t = truth(opts)
    t["frames"] = sum(s.conn.frames for s in sessions)
    return t
