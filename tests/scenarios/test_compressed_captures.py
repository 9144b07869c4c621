"""End to end on generated SMB 3.1.1 compressed captures (the synthesizer's `compression`
option): smbwire decompresses every compressed WRITE/READ and finds exactly the figures of the
same scenario generated without compression; the wire bytes are `smb_decompressed` and fewer
than the payload they carried (docs/json-schema.md, `smb2.decompressed_*`)."""

from __future__ import annotations

import pytest

from smbwire.engine import analyze

KiB = 1 << 10
EDGE_KEYS = ("src", "dst", "class", "payload_bytes", "unique_bytes", "sends", "trivial_bytes",
             "per_copy_duplicate_bytes", "repeated_content_bytes", "dup_ratio")


def _edges(r: dict) -> list[dict]:
    return sorted(({k: e.get(k) for k in EDGE_KEYS} for e in r["edges"]), key=lambda e: (e["src"], e["dst"], e["class"]))


@pytest.mark.parametrize("scenario", ["mirror2", "read-nonowner"])
@pytest.mark.parametrize("compression,io_size", [("lznt1", 100_000), ("lz77", 192 * KiB), ("lz77huffman", 64 * KiB),
                                                 ("chained", 100_000)])
def test_compressed_capture_gives_the_plain_figures(synth, tmp_path, scenario, compression, io_size):
    base = {"scenario": scenario, "bytes": 512 * KiB, "io_size": io_size, "seed": 7, "dialect": "3.1.1",
            "zero_fill": 0.5}
    comp, plain = tmp_path / "c.pcap", tmp_path / "p.pcap"
    truth = synth({**base, "compression": compression}, comp)
    synth({**base, "compression": "none"}, plain)
    rc, rp = analyze([str(comp)]), analyze([str(plain)])
    ios = truth["smb2"]["write_requests"] + truth["smb2"]["read_responses"]
    s = rc["smb2"]
    assert s["compressed_messages"] == s["decompressed_messages"] == ios > 0
    assert s["decompress_failed"] == 0
    assert not any(k.startswith("smb2.decompress") for k in rc["anomalies"])
    # Hashed, deduplicated and attributed on the decompressed bytes: the plain twin's figures.
    assert _edges(rc) == _edges(rp)
    assert rc["totals"] == rp["totals"]
    for k in ("write_req_pdus", "write_bytes", "read_resp_pdus", "read_bytes", "payloads_sent", "payload_bytes_sent"):
        assert s[k] == rp["smb2"][k], k
    assert s["decompressed_payload_bytes"] == rp["accounting"]["categories"]["smb_payload"]
    # The wire carried fewer bytes than the payload (zero_fill 0.5 compresses).
    cats = rc["accounting"]["categories"]
    assert cats["smb_decompressed"] == s["decompressed_wire_bytes"] < s["decompressed_payload_bytes"]
    assert "smb_compressed" not in cats and "smb_payload" not in cats
    assert rc["accounting"]["reconciled"]
