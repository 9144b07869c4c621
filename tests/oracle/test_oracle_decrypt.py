"""Oracle: with --keys, smbwire decrypts the five encrypted public captures and agrees with
tshark run with the same keys (`-o uat:smb2_seskey_list:...`): per-command PDU counts, WRITE
and READ lengths, file names. A wrong key gives the smb_decrypt_failed category, anomaly and
finding and no payload; no keys keeps the messages encrypted (docs/decryption.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tshark_oracle as oracle
from paths import PUBLIC
from smbwire.engine import analyze

pytestmark = pytest.mark.usefixtures("tshark_required")

# MS-SMB2 command codes of the engine's counter names.
CODES = {name: i for i, name in enumerate([
    "NEGOTIATE", "SESSION_SETUP", "LOGOFF", "TREE_CONNECT", "TREE_DISCONNECT", "CREATE", "CLOSE", "FLUSH",
    "READ", "WRITE", "LOCK", "IOCTL", "CANCEL", "ECHO", "QUERY_DIRECTORY", "CHANGE_NOTIFY", "QUERY_INFO",
    "SET_INFO", "OPLOCK_BREAK"])}


def _encrypted() -> list[str]:
    files = json.loads((PUBLIC / "expected.json").read_text())["files"]
    names = sorted(n for n, v in files.items() if "with_keys" in v["variants"])
    assert len(names) == 5, names
    return names


def _tshark_keys(name: str) -> list[str]:
    """The tshark options recorded for the capture: ['-o', 'uat:smb2_seskey_list:sid,key,s2c,c2s']."""
    entry = json.loads((PUBLIC / "expected.json").read_text())["files"][name]
    return entry["variants"]["with_keys"]["tshark_extra_options"]


def _keys_line(name: str, quoted: bool) -> str:
    fields = oracle.recorded_keys(PUBLIC / "expected.json")[name]
    return ",".join(f'"{f}"' for f in fields) if quoted else ",".join(fields)


def _ours(result: dict) -> dict:
    smb2 = result["smb2"]
    pdus = {}
    for k, v in smb2["commands"].items():
        name, direction = k.split(".")
        pdus[(CODES[name], direction == "response")] = v
    return {"pdus": pdus, "write_bytes": smb2["write_bytes"], "read_bytes": smb2["read_bytes"],
            "files": set(smb2["files"])}


@pytest.mark.tshark
@pytest.mark.parametrize("name", _encrypted())
@pytest.mark.parametrize("quoted", [False, True], ids=["plain", "quoted"])
def test_decrypted_capture_agrees_with_tshark_with_the_same_keys(name: str, quoted: bool, tmp_path: Path) -> None:
    capture = PUBLIC / name
    extra = _tshark_keys(name)
    theirs = {"pdus": oracle.pdu_counts(capture, extra), "write_bytes": oracle.write_length_sum(capture, extra),
              "read_bytes": oracle.read_resp_data_length_sum(capture, extra),
              "files": oracle.create_file_names(capture, extra)}
    keys = tmp_path / "keys.txt"
    keys.write_text(f"# {name}\n{_keys_line(name, quoted)}\n")
    result = analyze([str(capture)], keys=str(keys))
    assert _ours(result) == theirs
    smb2 = result["smb2"]
    enc, _ = oracle.transform_header_counts(capture, [])
    assert smb2["decrypted_messages"] == smb2["encrypted_messages"] == enc > 0
    assert (smb2["encrypted_without_key"], smb2["decrypt_failed"]) == (0, 0)
    cats = result["accounting"]["categories"]
    assert "smb_encrypted" not in cats and "smb_decrypt_failed" not in cats
    assert result["accounting"]["reconciled"]
    assert result["anomalies"] == {}
    # tshark sees more decoded PDUs with the keys than without.
    assert sum(theirs["pdus"].values()) > sum(oracle.pdu_counts(capture, []).values())


@pytest.mark.tshark
def test_wrong_key_fails_loudly_and_no_key_is_todays_behaviour(tmp_path: Path) -> None:
    capture = PUBLIC / "smb300-aes128ccm-wiki.pcap"
    plain = analyze([str(capture)])
    keys = tmp_path / "wrong.txt"
    keys.write_text("3d00009400480000,00112233445566778899aabbccddeeff\n")
    wrong = analyze([str(capture)], keys=str(keys))
    n = plain["smb2"]["encrypted_messages"]
    assert plain["smb2"]["encrypted_without_key"] == n == 44
    assert wrong["smb2"]["decrypt_failed"] == n and wrong["smb2"]["decrypted_messages"] == 0
    assert wrong["anomalies"]["smb2.decrypt_failed"] == n
    cats = wrong["accounting"]["categories"]
    assert cats["smb_decrypt_failed"] == plain["accounting"]["categories"]["smb_encrypted"]
    assert "smb_encrypted" not in cats and "smb_payload" not in cats
    codes = {f["code"] for f in wrong["findings"]}
    assert "smb_decrypt_failed" in codes and "smb_encrypted" not in codes
    assert wrong["accounting"]["reconciled"]
    # A key that does not decrypt decodes nothing more than no key at all.
    assert plain["smb2"]["commands"] == wrong["smb2"]["commands"]
    assert "smb_decrypt_failed" not in plain["accounting"]["categories"]


def test_cli_keys_option_and_errors(tmp_path: Path) -> None:
    capture = PUBLIC / "smb311-aes128ccm-filt-wiki.pcap"
    keys = tmp_path / "k.txt"
    keys.write_text(_keys_line("smb311-aes128ccm-filt-wiki.pcap", True) + "\n")
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", str(capture), "--keys", str(keys),
                        "--json", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["smb2"]["decrypted_messages"] == 28
    assert "decrypted messages" in r.stdout
    bad = tmp_path / "bad.txt"
    bad.write_text("# ok\n690000ac1c280000,nothex\n")
    r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", str(capture), "--keys", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "line 2" in r.stderr and "not hex" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", str(capture), "--keys", str(tmp_path / "none")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--keys" in r.stderr
    # live reads and checks the file before it captures anything.
    r = subprocess.run([sys.executable, "-m", "smbwire", "live", "-i", "lo", "--keys", str(bad), "--duration", "1",
                        "--plain"], capture_output=True, text=True)
    assert r.returncode == 2 and "line 2" in r.stderr, r.stderr
