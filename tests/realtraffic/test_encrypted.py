"""smbwire --keys on real Samba traffic: the copies3 workload on a share with
`server smb encrypt = required` (Samba encrypts every message of the session, SMB 3.1.1
TRANSFORM). With the client's session keys the edge figures equal the unencrypted run's and the
workload's truth; without them the bytes are encrypted and nothing is hashed."""

from __future__ import annotations

import pytest

from .analyzer_cli import analyze, edge_sum
from .workloads import ALL

pytestmark = pytest.mark.netns

NAME = "copies3"


def _keys_file(run, path, directional: bool):
    lines = ["# SessionId,SessionKey,ServerToClientKey,ClientToServerKey (from the smbprotocol client)"]
    for s in run.summaries:
        k = s["keys"]
        if directional:
            lines.append(f'"{k["session_id"]}","","{k["s2c"]}","{k["c2s"]}"')
        else:
            lines.append(f'{k["session_id"]},{k["session_key"]}')
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def runs(workload_runs):
    return workload_runs(NAME), workload_runs(f"{NAME}+encrypted")


@pytest.mark.parametrize("directional", [True, False], ids=["s2c-c2s-keys", "session-key"])
def test_with_keys_the_figures_equal_the_unencrypted_run(runs, tmp_path, directional):
    plain_run, enc_run = runs
    plain = analyze(plain_run.capture.path, plain_run.topology, tmp_path / "plain.json")
    keys = _keys_file(enc_run, tmp_path / "keys.txt", directional)
    dec = analyze(enc_run.capture.path, enc_run.topology, tmp_path / "dec.json", "--keys", str(keys))
    s = dec["smb2"]
    assert s["encrypted_messages"] > 0 and s["decrypted_messages"] == s["encrypted_messages"]
    assert (s["encrypted_without_key"], s["decrypt_failed"]) == (0, 0)
    assert "3.1.1" in s["dialects"]
    for t in ALL[NAME].truth:
        e, p = edge_sum(dec, t.src, t.dst), edge_sum(plain, t.src, t.dst)
        assert e == p, f"{t.src}->{t.dst}"
        assert (e["payload_bytes"], e["unique_bytes"], e["sends"]) == (t.payload_bytes, t.unique_bytes, t.sends)
    assert dec["totals"]["amplification"] == pytest.approx(plain["totals"]["amplification"], rel=1e-9)
    cats = dec["accounting"]["categories"]
    assert cats["smb_payload"] == plain["accounting"]["categories"]["smb_payload"]
    assert "smb_encrypted" not in cats and "smb_decrypt_failed" not in cats
    assert dec["accounting"]["reconciled"]


def test_without_keys_the_bytes_are_encrypted(runs, tmp_path):
    _, enc_run = runs
    r = analyze(enc_run.capture.path, enc_run.topology, tmp_path / "r.json")
    s = r["smb2"]
    assert s["encrypted_messages"] == s["encrypted_without_key"] > 0
    cats = r["accounting"]["categories"]
    assert cats["smb_encrypted"] > 4 * 1024 * 1024 * 3  # at least the three 4 MiB copies
    assert "smb_payload" not in cats
    assert all(e["payload_bytes"] == 0 for e in r["edges"])
    assert "smb_encrypted" in {f["code"] for f in r["findings"]}
