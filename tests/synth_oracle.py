"""tshark as the oracle for the captures the scenario generator writes (the TCP, SMB Direct and
RoCEv1 tshark tests share it): run the generator, read fields back with tshark, find every
expert item that is not TCP sequence analysis, and check the SMB Direct and SMB2 counts of an
SMB Direct capture against the generator's Truth."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from smbwire import _core

TSHARK = shutil.which("tshark")

# Expert info values (Wireshark epan/proto.h): severities and the Sequence / Malformed groups.
SEVERITY_WARN = 0x00600000
SEVERITY_ERROR = 0x00800000
GROUP_SEQUENCE = 0x02000000
GROUP_MALFORMED = 0x07000000

CM_FIELDS = {"ConnectRequest": "infiniband.cm.req", "ConnectReply": "infiniband.cm.rep",
             "ReadyToUse": "infiniband.cm.rtu.localcommid", "DisconnectRequest": "infiniband.cm.dreq.localcommid",
             "DisconnectReply": "infiniband.cm.drsp.localcommid"}


def synth(spec: dict, path: Path) -> dict:
    """Write the capture `spec` describes to `path`; return the generator's Truth."""
    return json.loads(_core.synth(json.dumps(spec), str(path)))


def fields(path: Path, flt: str, names: list[str], opts: list[str] = ()) -> list[list[str]]:
    """One row per frame matching `flt` (every frame when empty), one '|'-joined string per field."""
    cmd = [TSHARK, "-n", "-r", str(path), *opts, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|"]
    if flt:
        cmd += ["-Y", flt]
    for n in names:
        cmd += ["-e", n]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


def values(path: Path, name: str, opts: list[str] = ()) -> list[str]:
    """Every occurrence of one field, over all frames."""
    return [v for row in fields(path, name, [name], opts) for v in row[0].split("|") if v]


def ints(vals: list[str]) -> list[int]:
    return [int(v, 0) for v in vals]


def problems(path: Path, opts: list[str] = ()) -> list[str]:
    """Every malformed or error item, and every warning outside TCP sequence analysis
    (retransmissions, out-of-order, "previous segment not captured" belong to noisy captures)."""
    bad = []
    for frame, sev, group, msg, malformed in fields(
            path, "_ws.expert || _ws.malformed",
            ["frame.number", "_ws.expert.severity", "_ws.expert.group", "_ws.expert.message", "_ws.malformed"], opts):
        if malformed:
            bad.append(f"frame {frame}: malformed")
        for s, g, m in zip(sev.split("|"), group.split("|"), msg.split("|")):
            if not s:
                continue
            s, g = int(s), int(g)
            if g == GROUP_MALFORMED or s >= SEVERITY_ERROR or (s >= SEVERITY_WARN and g != GROUP_SEQUENCE):
                bad.append(f"frame {frame}: {m} (severity {s:#x}, group {g:#x})")
    return bad


def check_smbd_smb2_counts(path: Path, truth: dict, opts: list[str] = ()) -> None:
    """tshark's SMB Direct messages and the SMB2 WRITE requests / READ responses over them, with
    the bytes they move by RDMA (RemainingBytes, buffer descriptors, DataRemaining), equal the
    Truth; no READ data travels inline."""
    rdma, smb = truth["rdma"], truth["smb2"]
    assert len(values(path, "smb_direct.negotiate_request", opts)) == rdma["smbd_negotiate_requests"] == rdma["connections"]
    assert len(values(path, "smb_direct.negotiate_response", opts)) == rdma["smbd_negotiate_responses"]
    dl = ints(values(path, "smb_direct.data_length", opts))
    assert (len(dl), sum(dl)) == (rdma["smbd_data_messages"], rdma["smbd_data_length"])
    assert len(values(path, "smb2.cmd", opts)) == smb["messages"]
    writes = fields(path, "smb2.cmd == 9 && smb2.flags.response == 0",
                    ["smb2.channel", "smb2.remaining_bytes", "smb2.write_length", "smb2.buffer_descriptor.length"], opts)
    assert len(writes) == smb["write_requests"]
    assert all(int(c, 0) in (1, 2) and int(n) == 0 for c, _, n, _ in writes)
    assert sum(int(r) for _, r, _, _ in writes) == smb["write_data_bytes"]
    assert sum(sum(ints(d.split("|"))) for *_, d in writes) == smb["write_data_bytes"]
    reads = fields(path, "smb2.cmd == 8 && smb2.flags.response == 1", ["smb2.read_remaining", "smb2.read_data"], opts)
    assert len(reads) == smb["read_responses"]
    assert sum(int(r) for r, _ in reads) == smb["read_data_bytes"]
    assert all(d == "" for _, d in reads), "no inline READ data"
