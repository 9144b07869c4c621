"""`smbwire live --keys`: encrypted SMB3 seen on the capture interface is decrypted as offline.

The veth lab (tests/live/conftest.py `lab`): the frames of a public encrypted capture
(captures/public/smb300-aes128ccm-wiki.pcap, SMB 3.0 AES-128-CCM, 44 TRANSFORM messages; its
session key from MANIFEST.md) are sent out of A's end; `smbwire live --keys` captures on B's end.
Its final JSON must decrypt the same messages as `smbwire analyze --keys` on the file, and
without keys the same bytes stay encrypted. Needs root (namespaces, BPF): fails, never skips.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from paths import CAPTURES, ROOT
from live.test_metrics import pcap_frames
from smbwire.tables import categories_with

CAPTURE = CAPTURES / "public" / "smb300-aes128ccm-wiki.pcap"
KEYS = "3d00009400480000,28f2847263c83dc00621f742dd3f2e7b\n"


def analyze(*args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", str(CAPTURE), "-q", "--json", "-", *args],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def live(lab, tmp_path, *args: str) -> dict:
    out_json = tmp_path / "live.json"
    err_path = tmp_path / "live.stderr"
    with open(err_path, "w+") as err:
        cmd = ["ip", "netns", "exec", lab.b, sys.executable, "-m", "smbwire", "live", "-i", lab.vb, "--plain",
               "--json", str(out_json), "--duration", "8", *args]
        p = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + 30
            while "capturing on" not in err_path.read_text():
                assert p.poll() is None and time.monotonic() < deadline, err_path.read_text()
                time.sleep(0.05)
            # The file is pcapng whatever its name: editcap (Wireshark's) writes the frames as pcap.
            plain = tmp_path / "frames.pcap"
            subprocess.run(["editcap", "-F", "pcap", str(CAPTURE), str(plain)], check=True)
            lab.inject(pcap_frames(plain))
            assert p.wait(timeout=40) == 0, err_path.read_text()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    return json.loads(out_json.read_text())


def test_live_decrypts_with_keys_like_analyze(lab, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text(KEYS)
    offline = analyze("--keys", str(keys))
    assert offline["smb2"]["decrypted_messages"] == 44 and offline["smb2"]["decrypt_failed"] == 0
    got = live(lab, tmp_path, "--keys", str(keys))
    assert got["live"]["stats"]["kernel_drops"] == 0 and got["live"]["stats"]["ring_drops"] == 0
    for key in ("decrypted_messages", "decrypted_bytes", "encrypted_without_key", "decrypt_failed", "commands", "files"):
        assert got["smb2"][key] == offline["smb2"][key], key
    cats = got["accounting"]["categories"]
    assert cats.get("smb_encrypted", 0) == 0 and cats.get("smb_decrypt_failed", 0) == 0
    # What was not analysed is what the file leaves unanalysed with the same keys.
    not_analysed = categories_with("not_analysed")
    want = sum(v for k, v in offline["accounting"]["categories"].items() if k in not_analysed)
    assert got["live"]["analysed"]["not_analysed_bytes"] == want


def test_live_without_keys_leaves_them_encrypted(lab, tmp_path):
    offline = analyze()
    got = live(lab, tmp_path)
    assert got["smb2"]["decrypted_messages"] == 0
    assert got["accounting"]["categories"]["smb_encrypted"] == offline["accounting"]["categories"]["smb_encrypted"] > 0
    assert got["live"]["analysed"]["not_analysed_bytes"] >= got["accounting"]["categories"]["smb_encrypted"]
    assert got["live"]["analysed"]["fraction"] < 1.0
