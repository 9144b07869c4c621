"""The workloads of the real-traffic tests, each with the figures the analyzer must find.

A workload is a list of client runs (which namespace runs the client, which node's share it
talks to, which ops in which order) plus files placed on a share beforehand, and its truth:
the per-edge figures it produces by construction. Data is described by seeds, never stored:
`client.py` derives the bytes from the same seed in the namespace.

Sizes: W = 4 MiB per workload, moved in 64 KiB WRITEs/READs (Samba's MaxWriteSize is 8 MiB).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Callable

from smb2_images import (
    create_request,
    negotiate_request,
    negotiate_response,
    read_response,
    session_setup_request,
    session_setup_response,
    write_request,
)

KIB = 1024
CHUNK = 64 * KIB
BLOCK = 4 * KIB  # smbwire's hashing block
W = 4 * 1024 * KIB
CHUNKS = W // CHUNK

# Class names of the analyzer's JSON (`edges[].class`).
REDIRECTION = "redirection"
REPLICATION = "replication"
REDIRECTED_READ = "redirected-read"


@dataclasses.dataclass
class ClientRun:
    node: str  # namespace the client runs in
    server: str  # node whose share [data] it uses
    ops: list[dict]


@dataclasses.dataclass
class EdgeTruth:
    """What the analyzer must report for the payload that crossed ``src`` → ``dst``.

    ``None`` means "not asserted" (e.g. the class of a plain single-edge write)."""

    src: str
    dst: str
    payload_bytes: int
    unique_bytes: int
    sends: int
    trivial_bytes: int = 0
    per_copy_duplicate_bytes: int = 0
    repeated_content_bytes: int = 0
    cls: str | None = None

    @property
    def dup_ratio(self) -> float | None:
        return self.payload_bytes / self.unique_bytes if self.unique_bytes else None


@dataclasses.dataclass
class Workload:
    name: str
    runs: list[ClientRun]
    truth: list[EdgeTruth]
    put_files: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)  # (node, file) -> seed
    put_size: int = 0
    # The bytes of a placed file from its seed and size.
    put_bytes: Callable[[str, int], bytes] = dataclasses.field(default=lambda seed, n: seeded(seed, n))

    def write_totals(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(client node, server node) -> (WRITE requests, bytes) the capture must hold."""
        out: dict[tuple[str, str], tuple[int, int]] = {}
        for r in self.runs:
            writes = [op for op in r.ops if op["op"] == "write"]
            n, b = out.get((r.node, r.server), (0, 0))
            out[(r.node, r.server)] = (n + len(writes), b + sum(op["length"] for op in writes))
        return out

    def read_totals(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(client node, server node) -> (READ requests, bytes requested)."""
        out: dict[tuple[str, str], tuple[int, int]] = {}
        for r in self.runs:
            reads = [op for op in r.ops if op["op"] == "read"]
            if reads:
                n, b = out.get((r.node, r.server), (0, 0))
                out[(r.node, r.server)] = (n + len(reads), b + sum(op["length"] for op in reads))
        return out


def seeded(seed: str, length: int) -> bytes:
    """Same derivation as client.op_data for ``data_seed``."""
    return random.Random(seed).randbytes(length)


def _write(file: str, offset: int, length: int, **data) -> dict:
    return {"op": "write", "file": file, "offset": offset, "length": length, **data}


def copies(k: int = 3) -> Workload:
    """n1 writes W of distinct data k times to n2; the k copies of each 64 KiB chunk are sent
    back-to-back to copy1.bin … copyk.bin (like S2D mirror copies)."""
    ops = [
        _write(f"copy{j}.bin", i * CHUNK, CHUNK, data_seed=f"copies/{i}")
        for i in range(CHUNKS)
        for j in range(1, k + 1)
    ]
    return Workload(
        name=f"copies{k}",
        runs=[ClientRun("n1", "n2", ops)],
        truth=[EdgeTruth("n1", "n2", payload_bytes=k * W, unique_bytes=W, sends=k * CHUNKS,
                         per_copy_duplicate_bytes=(k - 1) * W, cls=REPLICATION)],
    )


def redirect() -> Workload:
    """n1 (not the owner) writes W to n2 (the owner); n2 then writes the same data to n1
    twice, the two copies of each chunk back-to-back. n2 sending on what it received makes
    n1→n2 redirection; n2→n1 is replication with two copies."""
    first = [_write("redirect.bin", i * CHUNK, CHUNK, data_seed=f"redirect/{i}") for i in range(CHUNKS)]
    second = [
        _write(f"mirror{j}.bin", i * CHUNK, CHUNK, data_seed=f"redirect/{i}")
        for i in range(CHUNKS)
        for j in (1, 2)
    ]
    return Workload(
        name="redirect",
        runs=[ClientRun("n1", "n2", first), ClientRun("n2", "n1", second)],
        truth=[
            EdgeTruth("n1", "n2", payload_bytes=W, unique_bytes=W, sends=CHUNKS, cls=REDIRECTION),
            EdgeTruth("n2", "n1", payload_bytes=2 * W, unique_bytes=W, sends=2 * CHUNKS,
                      per_copy_duplicate_bytes=W, cls=REPLICATION),
        ],
    )


def distinct() -> Workload:
    """n1 writes W of distinct data once to n2: nothing is duplicated."""
    ops = [_write("distinct.bin", i * CHUNK, CHUNK, data_seed=f"distinct/{i}") for i in range(CHUNKS)]
    return Workload(
        name="distinct",
        runs=[ClientRun("n1", "n2", ops)],
        truth=[EdgeTruth("n1", "n2", payload_bytes=W, unique_bytes=W, sends=CHUNKS)],
    )


def zeros(k: int = 3) -> Workload:
    """n1 writes zero-filled W k times (copies layout): trivial blocks are never duplicates."""
    ops = [
        _write(f"zero{j}.bin", i * CHUNK, CHUNK, zero=True)
        for i in range(CHUNKS)
        for j in range(1, k + 1)
    ]
    return Workload(
        name=f"zeros{k}",
        runs=[ClientRun("n1", "n2", ops)],
        truth=[EdgeTruth("n1", "n2", payload_bytes=k * W, unique_bytes=0, sends=k * CHUNKS,
                         trivial_bytes=k * W)],
    )


def template(count: int = 64) -> Workload:
    """One 4 KiB template block written at ``count`` offsets of one file, each followed by a
    60 KiB write of distinct data (every write completes before the next is sent): the
    template's repeats are repeated content, not per-copy sends."""
    fill = CHUNK - BLOCK
    ops = []
    for i in range(count):
        ops.append(_write("template.bin", i * CHUNK, BLOCK, data_seed="template/block"))
        ops.append(_write("template.bin", i * CHUNK + BLOCK, fill, data_seed=f"template/fill/{i}"))
    payload = count * CHUNK
    return Workload(
        name="template",
        runs=[ClientRun("n1", "n2", ops)],
        truth=[EdgeTruth("n1", "n2", payload_bytes=payload, unique_bytes=BLOCK + count * fill,
                         sends=2 * count,
                         repeated_content_bytes=(count - 1) * BLOCK)],
    )


def reads() -> Workload:
    """n1 reads back a W-byte file that lives on n2 (placed on disk, no SMB write): the READ
    responses carry W from n2 to n1, all of it redirected-read."""
    ops = [{"op": "read", "file": "read.bin", "offset": i * CHUNK, "length": CHUNK} for i in range(CHUNKS)]
    return Workload(
        name="reads",
        runs=[ClientRun("n1", "n2", ops)],
        truth=[EdgeTruth("n2", "n1", payload_bytes=W, unique_bytes=W, sends=CHUNKS,
                         cls=REDIRECTED_READ)],
        put_files={("n2", "read.bin"): "reads/file"},
        put_size=W,
    )


# Where the bait file holds SMB2 message images, by 64 KiB chunk: each image starts 3000 bytes
# into its chunk and the file's random bytes follow it.
BAIT_CHUNKS = {2: "negotiate", 5: "session", 9: "write", 14: "read"}
BAIT_SESSION = 0xBA17_0000_0000_0041


def _planted(seed: str, length: int, chunks: dict[int, str],
             images: dict[str, Callable[[random.Random, bytearray], bytes]]) -> bytes:
    """`length` random bytes from `seed` with, 3000 bytes into each chunk of `chunks`, the
    image its kind names (made from the generator and the bytes so far)."""
    rng = random.Random(seed)
    data = bytearray(rng.randbytes(length))
    for chunk, kind in chunks.items():
        image = images[kind](rng, data)
        at = chunk * CHUNK + 3000
        data[at:at + len(image)] = image
    return bytes(data)


def bait_file(seed: str, length: int) -> bytes:
    """A capture file's worth of bait: random bytes with the images of SMB2 messages a server
    sends (a NEGOTIATE response offering 64 KiB sizes, a successful SESSION_SETUP response, a
    READ response) and of a WRITE request, each inside one of `BAIT_CHUNKS`."""
    return _planted(seed, length, BAIT_CHUNKS, {
        "negotiate": lambda rng, data: negotiate_response(b"\xba" * 16, 64 * KIB),
        "session": lambda rng, data: session_setup_response(7, BAIT_SESSION),
        "write": lambda rng, data: write_request(0xBA17, 0, rng.randbytes(8 * KIB)),
        "read": lambda rng, data: read_response(0xBA17, rng.randbytes(8 * KIB)),
    })


def bait() -> Workload:
    """n1 reads a file of n2's that holds SMB2 message images (a capture copied to a share):
    32 READs of 64 KiB, then one of 2 MiB. The whole capture reads the images as data; a cut
    of it inside a chunk that holds one (`test_bait.py`) finds the image first, which must
    leave nothing behind: no session, no dialect, no sizes (the 2 MiB READ is believed), no
    send."""
    half = W // 2
    ops = [{"op": "read", "file": "bait.bin", "offset": i * CHUNK, "length": CHUNK} for i in range(half // CHUNK)]
    ops.append({"op": "read", "file": "bait.bin", "offset": half, "length": half})
    return Workload(
        name="bait",
        runs=[ClientRun("n1", "n2", ops)],
        truth=[EdgeTruth("n2", "n1", payload_bytes=W, unique_bytes=W, sends=len(ops), cls=REDIRECTED_READ)],
        put_files={("n2", "bait.bin"): "bait/file"},
        put_size=W,
        put_bytes=bait_file,
    )


# The same for the file a client writes: the images of requests (and of a response, in the
# client's direction). The WRITE image's data is a copy of the start of chunk 25.
BAIT_WRITE_CHUNKS = {2: "negotiate", 5: "binding", 9: "create", 14: "write", 20: "read"}
BAIT_WRITE_NAME = "bait-image.vhdx"


def bait_write_file(seed: str, length: int) -> bytes:
    """Random bytes with a request's image inside each of `BAIT_WRITE_CHUNKS`."""
    return _planted(seed, length, BAIT_WRITE_CHUNKS, {
        "negotiate": lambda rng, data: negotiate_request(),
        "binding": lambda rng, data: session_setup_request(4, BAIT_SESSION, binding=True),
        "create": lambda rng, data: create_request(5, BAIT_SESSION, BAIT_WRITE_NAME),
        "write": lambda rng, data: write_request(0xBA17, 1 << 30, bytes(data[25 * CHUNK:25 * CHUNK + 8 * KIB])),
        "read": lambda rng, data: read_response(0xBA17, rng.randbytes(8 * KIB)),
    })


def bait_write() -> Workload:
    """n1 writes a file that holds request images to n2 (a capture copied to a share): 32
    WRITEs of 64 KiB. A cut inside an image must leave no file name, no session, no send."""
    half = W // 2
    data = bait_write_file("bait/write", half)
    ops = [_write("bait-write.bin", i * CHUNK, CHUNK, data_hex=data[i * CHUNK:(i + 1) * CHUNK].hex())
           for i in range(half // CHUNK)]
    return Workload(
        name="bait-write",
        runs=[ClientRun("n1", "n2", ops)],
        truth=[EdgeTruth("n1", "n2", payload_bytes=half, unique_bytes=half, sends=len(ops))],
    )


ALL = {w.name: w for w in (copies(3), redirect(), distinct(), zeros(3), template(), reads(), bait(), bait_write())}
