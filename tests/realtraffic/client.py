"""An SMB2/3 client that runs one workload, meant to run inside a lab namespace.

Run as a script (``ip netns exec NS python3 tests/realtraffic/client.py < workload.json``)
so it needs nothing from the repository on ``sys.path``. The workload is JSON on stdin::

    {"server": "198.18.0.2", "share": "data", "username": "...", "password": "...",
     "dialect": "3.1.1",
     "ops": [{"op": "write", "file": "copy1.bin", "offset": 0, "length": 65536,
              "data_seed": "copies/0"},
             {"op": "write", "file": "z.bin", "offset": 0, "length": 65536, "zero": true},
             {"op": "write", "file": "t.bin", "offset": 0, "length": 4096,
              "data_hex_pattern": "a5"},
             {"op": "read", "file": "r.bin", "offset": 0, "length": 65536}]}

Every op is exactly one SMB2 WRITE or READ request, issued in list order, each one waited
for before the next is sent (smbprotocol's ``Open.write``/``Open.read`` are synchronous).
Files are created on their first write (FILE_OVERWRITE_IF) or opened on their first read
(FILE_OPEN) and closed at the end.

It prints one JSON object on stdout: counts and byte totals of the WRITE and READ
requests it sent, and a SHA-256 per file of the data it read, so a test can check the
capture and the read path without any payload bytes being written anywhere.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import uuid

from smbprotocol.connection import Connection, Dialects
from smbprotocol.open import (
    CreateDisposition,
    CreateOptions,
    FileAttributes,
    FilePipePrinterAccessMask,
    ImpersonationLevel,
    Open,
    ShareAccess,
)
from smbprotocol.session import Session
from smbprotocol.tree import TreeConnect

DIALECTS = {
    "2.1.0": Dialects.SMB_2_1_0,
    "3.0.0": Dialects.SMB_3_0_0,
    "3.0.2": Dialects.SMB_3_0_2,
    "3.1.1": Dialects.SMB_3_1_1,
}


def op_data(op: dict) -> bytes:
    """The bytes one write op carries, derived from its description (never stored)."""
    length = int(op["length"])
    if op.get("zero"):
        return bytes(length)
    if "data_hex_pattern" in op:
        pattern = bytes.fromhex(op["data_hex_pattern"])
        if not pattern:
            raise ValueError("empty data_hex_pattern")
        return (pattern * (length // len(pattern) + 1))[:length]
    if "data_hex" in op:
        data = bytes.fromhex(op["data_hex"])
        if len(data) != length:
            raise ValueError(f"data_hex holds {len(data)} bytes, not {length}")
        return data
    if "data_seed" in op:
        # random.Random seeds a str through SHA-512: the same seed gives the same bytes
        # in every process and on every platform.
        return random.Random(str(op["data_seed"])).randbytes(length)
    raise ValueError(f"write op without data_seed/data_hex/data_hex_pattern/zero: {op!r}")


def open_file(tree: TreeConnect, name: str, for_write: bool) -> Open:
    handle = Open(tree, name)
    access = FilePipePrinterAccessMask.GENERIC_READ
    if for_write:
        access |= FilePipePrinterAccessMask.GENERIC_WRITE
    handle.create(
        ImpersonationLevel.Impersonation,
        access,
        FileAttributes.FILE_ATTRIBUTE_NORMAL,
        ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE,
        CreateDisposition.FILE_OVERWRITE_IF if for_write else CreateDisposition.FILE_OPEN,
        CreateOptions.FILE_NON_DIRECTORY_FILE,
    )
    return handle


def run(workload: dict) -> dict:
    server = workload["server"]
    conn = Connection(uuid.uuid4(), server, int(workload.get("port", 445)), require_signing=False)
    conn.connect(dialect=DIALECTS[workload.get("dialect", "3.1.1")], timeout=30)
    summary: dict = {
        "server": server,
        "dialect": f"0x{conn.dialect:04x}",
        "max_write_size": conn.max_write_size,
        "max_read_size": conn.max_read_size,
        "writes": 0,
        "write_bytes": 0,
        "reads": 0,
        "read_bytes": 0,
        "read_sha256": {},
    }
    try:
        session = Session(
            conn, workload["username"], workload["password"], require_encryption=bool(workload.get("encrypt")),
            auth_protocol="ntlm",
        )
        session.connect()
        if workload.get("encrypt"):
            # The session's keys, for smbwire --keys (Wireshark smb2_seskey_list fields): the
            # SessionId as its wire bytes, the session key, server-to-client and
            # client-to-server keys (smbprotocol: decryption_key / encryption_key).
            summary["keys"] = {
                "session_id": session.session_id.to_bytes(8, "little").hex(),
                "session_key": session.session_key.hex(),
                "s2c": session.decryption_key.hex(),
                "c2s": session.encryption_key.hex(),
            }
        tree = TreeConnect(session, rf"\\{server}\{workload.get('share', 'data')}")
        # Samba refuses an unsigned TREE_CONNECT on an authenticated session that is
        # neither signed nor encrypted (downgrade protection), so sign just that request;
        # everything after it, the WRITEs and READs included, goes unsigned.
        if not workload.get("encrypt"):
            session.signing_required = True
        tree.connect()
        session.signing_required = False
        opens: dict[str, Open] = {}
        read_hash: dict[str, "hashlib._Hash"] = {}
        for op in workload["ops"]:
            name = op["file"]
            offset = int(op["offset"])
            length = int(op["length"])
            if op["op"] == "write":
                if length > conn.max_write_size:
                    raise ValueError(f"write of {length} > server MaxWriteSize {conn.max_write_size}")
                if name not in opens:
                    opens[name] = open_file(tree, name, for_write=True)
                written = opens[name].write(op_data(op), offset)
                if written != length:
                    raise RuntimeError(f"short write {written}/{length} to {name}@{offset}")
                summary["writes"] += 1
                summary["write_bytes"] += length
            elif op["op"] == "read":
                if length > conn.max_read_size:
                    raise ValueError(f"read of {length} > server MaxReadSize {conn.max_read_size}")
                if name not in opens:
                    opens[name] = open_file(tree, name, for_write=False)
                data = opens[name].read(offset, length)
                read_hash.setdefault(name, hashlib.sha256()).update(data)
                summary["reads"] += 1
                summary["read_bytes"] += len(data)
            else:
                raise ValueError(f"unknown op {op['op']!r}")
        for handle in opens.values():
            handle.close()
        tree.disconnect()
        session.disconnect()
        summary["read_sha256"] = {k: v.hexdigest() for k, v in read_hash.items()}
    finally:
        conn.disconnect()
    return summary


def main() -> int:
    workload = json.load(sys.stdin)
    json.dump(run(workload), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
