"""Oracle: smbwire's SMB2 counts agree with tshark on every public capture and on ours.

For each capture the test runs tshark itself (commands as recorded in expected.json) and
smbwire's engine, and compares: WRITE request PDUs, summed WRITE Length, READ response PDUs,
summed READ response DataLength (status 0), and the file names of CREATE requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tshark_oracle as oracle
from smbwire.engine import analyze

from paths import ROOT
from paths import PUBLIC
OURS = ROOT / "captures"


def _captures() -> list[Path]:
    if not PUBLIC.is_dir():
        raise RuntimeError(f"{PUBLIC} is missing: the bundled public captures are part of the repository")
    files = sorted(p for p in PUBLIC.iterdir() if p.suffix in (".pcap", ".pcapng"))
    files += sorted(p for p in OURS.glob("*.pcap*"))
    return files


def _extra_options(path: Path) -> list[str]:
    expected = PUBLIC / "expected.json"
    if path.parent == PUBLIC:
        entry = json.loads(expected.read_text())["files"][path.name]
        return entry["variants"]["nokeys"].get("tshark_extra_options", [])
    return []


# Differences that are not smbwire bugs, per file, with the reason. Each names the fields that
# differ; every other field must still agree. (The compressed captures agree since compressed
# messages are decompressed.)
DEFERRED: dict[str, set[str]] = {}


@pytest.mark.tshark
@pytest.mark.parametrize("capture", _captures(), ids=lambda p: p.name)
def test_smb2_counts_agree_with_tshark(capture: Path) -> None:
    extra = _extra_options(capture)
    pdus = oracle.pdu_counts(capture, extra)
    theirs = {
        "write_req_pdus": pdus.get((oracle.SMB2_WRITE, False), 0),
        "write_bytes": oracle.write_length_sum(capture, extra),
        "read_resp_pdus": pdus.get((oracle.SMB2_READ, True), 0),
        "read_bytes": oracle.read_resp_data_length_sum(capture, extra),
        "files": oracle.create_file_names(capture, extra),
    }
    result = analyze([str(capture)])
    smb2 = result["smb2"]
    ours = {
        "write_req_pdus": smb2["write_req_pdus"],
        "write_bytes": smb2["write_bytes"],
        "read_resp_pdus": smb2["read_resp_pdus"],
        "read_bytes": smb2["read_bytes"],
        "files": set(smb2["files"]),
    }
    deferred = DEFERRED.get(capture.name, set())
    for field in theirs:
        if field in deferred:
            continue
        assert ours[field] == theirs[field], f"{capture.name}: {field}: smbwire {ours[field]!r} != tshark {theirs[field]!r}"
    # Encrypted and compressed messages are recognised one for one with tshark, on every
    # capture; the deferred fields above are exactly what sits inside compressed messages.
    enc, comp = oracle.transform_header_counts(capture, extra)
    assert (smb2["encrypted_messages"], smb2["compressed_messages"]) == (enc, comp), capture.name
    if comp:
        # Compressed messages are decompressed (their wire bytes are smb_decompressed).
        assert smb2["decompressed_messages"] == comp, capture.name
        assert result["accounting"]["categories"].get("smb_decompressed", 0) > 0, capture.name
    # Every byte of the file is accounted for in some category.
    acct = result["accounting"]
    assert acct["reconciled"], f"{capture.name}: accounting {acct}"
    assert acct["input_bytes"] == capture.stat().st_size
