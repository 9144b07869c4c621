"""tshark as the oracle for SMB 3.1.1 compression in generated captures (MS-SMB2 §2.2.42, MS-XCA):
with `compression` set, the generator wraps WRITE requests and READ responses in a
COMPRESSION_TRANSFORM_HEADER compressed by the engine's own MS-XCA compressors. tshark (which
decompresses SMB2 by default, with its own decoders) must dissect every message cleanly, count the
WRITE/READ data lengths the generator's Truth states, and export file contents (`--export-objects
smb`) identical to those of the same scenario generated without compression."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import synth_oracle as oracle

pytestmark = [pytest.mark.tshark, pytest.mark.usefixtures("tshark_required")]

KiB = 1 << 10
# 192 KiB I/Os are whole LZ77+Huffman blocks (64 KiB) and LZNT1 chunks (4 KiB); 100,000-byte
# ones end inside both.
SIZES = [(512 * KiB, 192 * KiB), (300_000, 100_000)]
# tshark 4.x does not decompress our LZ77+Huffman messages of more than one 64 KiB block (ours
# start each block's table after the 32-bit read-ahead, as MS-XCA §2.2.4's loop reads it; the
# engine's decoder agrees with the public capture's single-block message): one-block I/Os only,
# a whole block and a part of one (docs/architecture.md, "MS-XCA compression").
HUFFMAN_SIZES = [(256 * KiB, 64 * KiB), (150_000, 50_000)]
ALGORITHM_IDS = {"lznt1": {1}, "lz77": {2}, "lz77huffman": {3}, "chained": {0, 2, 4}}


def exported(path: Path, out: Path) -> dict[str, bytes]:
    """The files tshark rebuilds from the SMB traffic in `path`."""
    out.mkdir()
    subprocess.run([oracle.TSHARK, "-n", "-r", str(path), "-q", "--export-objects", f"smb,{out}"],
                   check=True, capture_output=True)
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def data_counts(path: Path) -> tuple[int, int, int, int]:
    """(WRITE requests, their data bytes, READ responses, their data bytes) as tshark sees them."""
    rows = oracle.fields(path, "smb2.cmd == 9 || smb2.cmd == 8",
                         ["smb2.cmd", "smb2.flags.response", "smb2.write_length", "smb2.olb.length"])
    writes = [int(w) for cmd, resp, w, _ in rows if cmd == "9" and resp == "0"]
    reads = [int(o.split("|")[0]) for cmd, resp, _, o in rows if cmd == "8" and resp == "1"]
    return len(writes), sum(writes), len(reads), sum(reads)


CASES = [(c, n, io) for c in ["lznt1", "lz77", "chained"] for n, io in SIZES] + [
    ("lz77huffman", n, io) for n, io in HUFFMAN_SIZES]


@pytest.mark.parametrize("scenario", ["mirror2", "read-nonowner"])
@pytest.mark.parametrize("compression,nbytes,io_size", CASES, ids=[f"{c}-{io}" for c, _, io in CASES])
def test_tshark_decompresses_what_synth_wrote(synth, tmp_path, compression, scenario, nbytes, io_size):
    base = {"scenario": scenario, "bytes": nbytes, "io_size": io_size, "seed": 5, "dialect": "3.1.1",
            "zero_fill": 0.5}
    path = tmp_path / f"{compression}.pcap"
    truth = synth({**base, "compression": compression}, path)
    plain = tmp_path / "plain.pcap"
    plain_truth = synth({**base, "compression": "none"}, plain)

    assert oracle.problems(path) == []
    smb = truth["smb2"]
    ios = smb["write_requests"] + smb["read_responses"]
    assert ios == -(-nbytes // io_size) > 0

    # Every data message went compressed, with the algorithm asked for; the NEGOTIATE offered it.
    algs = oracle.values(path, "smb2.header.comp_transform.comp_alg")
    transforms = oracle.fields(path, "smb2.header.comp_transform.original_size", ["frame.number"])
    assert len(transforms) == ios
    assert {int(a, 0) for a in algs} == ALGORITHM_IDS[compression]
    offered = {int(a, 0) for a in oracle.values(path, "smb2.negotiate_context.comp_alg_id")}
    assert offered == ALGORITHM_IDS[compression] - {0}
    if compression == "chained":
        # Leading/trailing zero blocks went as Pattern_V1 payloads.
        reps = [int(r) for r in oracle.values(path, "smb2.pattern_v1.repetitions")]
        assert reps and all(r >= 32 for r in reps)

    # tshark's decompressed messages carry the lengths the generator wrote...
    writes, wbytes, reads, rbytes = data_counts(path)
    assert (writes, wbytes, reads, rbytes) == (
        smb["write_requests"], smb["write_data_bytes"], smb["read_responses"], smb["read_data_bytes"])
    assert wbytes + rbytes == nbytes
    # ...and the data: the files tshark rebuilds equal those of the uncompressed twin capture.
    files = exported(path, tmp_path / "compressed-objects")
    twin = exported(plain, tmp_path / "plain-objects")
    assert files == twin
    assert sum(len(b) for b in files.values()) >= nbytes
    assert plain_truth["smb2"] == smb
    # Compression made the capture smaller (half the blocks are zeros).
    assert path.stat().st_size < plain.stat().st_size * 0.8


def test_the_oracle_notices_a_damaged_compressed_payload(synth, tmp_path):
    """The comparison can fail: a flipped byte inside compressed data changes (or breaks) what
    tshark decompresses."""
    base = {"scenario": "mirror2", "bytes": 128 * KiB, "io_size": 128 * KiB, "seed": 5, "dialect": "3.1.1",
            "zero_fill": 0.5}
    path = tmp_path / "lznt1.pcap"
    synth({**base, "compression": "lznt1"}, path)
    plain = tmp_path / "plain.pcap"
    synth({**base, "compression": "none"}, plain)
    data = bytearray(path.read_bytes())
    at = data.find(b"\xfcSMB")
    # Past the 16-byte header and the 112-byte uncompressed WRITE head: LZNT1 chunk data.
    data[at + 16 + 112 + 40] ^= 0x41
    damaged = tmp_path / "damaged.pcap"
    damaged.write_bytes(bytes(data))
    opts = ["-o", "tcp.check_checksum:FALSE"]
    broken = oracle.problems(damaged, opts) != [] or exported(damaged, tmp_path / "d") != exported(plain, tmp_path / "p")
    assert broken
