"""tshark as the independent oracle: run the commands recorded in
captures/public/expected.json (and the same ones on our own captures) and reduce their
output exactly as expected.json's "post" notes describe. Nothing here is taken from the
expected numbers: the test recomputes them with the installed tshark."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

SMB2_WRITE = 9
SMB2_READ = 8
SMB2_CREATE = 5


def recorded_keys(expected_json: Path) -> dict[str, list[str]]:
    """The encrypted captures of expected.json with the keys tshark was run with: name ->
    [SessionId, SessionKey, ServerToClientKey, ClientToServerKey] (hex, as in a keys file)."""
    files = json.loads(expected_json.read_text())["files"]
    out = {}
    for name, v in files.items():
        if "with_keys" in v["variants"]:
            fields = v["variants"]["with_keys"]["tshark_extra_options"][1].split(":", 2)[2].split(",")
            out[name] = [f.strip('"') for f in fields]
    return out


def require_tshark() -> str:
    exe = shutil.which("tshark")
    if exe is None:
        raise RuntimeError("tshark is not installed: run `make test`, which installs it")
    return exe


def _run(path: Path, extra: list[str], args: list[str]) -> str:
    cmd = [require_tshark(), "-n", "-r", str(path), *extra, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    return out.stdout


def _values(text: str) -> list[str]:
    vals = []
    for line in text.splitlines():
        vals.extend(v for v in line.strip().split(",") if v)
    return vals


def pdu_counts(path: Path, extra: list[str] = ()) -> dict[tuple[int, bool], int]:
    """(command, is_response) -> number of SMB2 PDUs (compounds expanded)."""
    text = _run(path, list(extra), ["-Y", "smb2", "-T", "fields", "-E", "occurrence=a",
                                    "-E", "aggregator=,", "-e", "smb2.cmd", "-e", "smb2.flags.response"])
    counts: dict[tuple[int, bool], int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = line.split("\t")
        cmds = [c for c in cols[0].split(",") if c]
        resp = [r for r in (cols[1].split(",") if len(cols) > 1 else []) if r]
        for c, r in zip(cmds, resp):
            key = (int(c, 0), r in ("1", "True"))
            counts[key] = counts.get(key, 0) + 1
    return counts


def write_length_sum(path: Path, extra: list[str] = ()) -> int:
    text = _run(path, list(extra), ["-Y", "smb2.write_length", "-T", "fields", "-E", "occurrence=a",
                                    "-E", "aggregator=,", "-e", "smb2.write_length"])
    return sum(int(v, 0) for v in _values(text))


def _walk(obj, found: list):
    if isinstance(obj, dict):
        if "SMB2 Header" in obj:
            found.append(obj)
        for v in obj.values():
            _walk(v, found)
    elif isinstance(obj, list):
        for v in obj:
            _walk(v, found)


def _first(obj, key):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key:
                return v
            r = _first(v, key)
            if r is not None:
                return r
    elif isinstance(obj, list):
        for v in obj:
            r = _first(v, key)
            if r is not None:
                return r
    return None


def read_resp_data_length_sum(path: Path, extra: list[str] = ()) -> int:
    text = _run(path, list(extra), ["-Y", "smb2.cmd==8 && smb2.flags.response==1", "-T", "json",
                                    "-J", "smb2", "--no-duplicate-keys"])
    if not text.strip():
        return 0
    pdus: list = []
    _walk(json.loads(text), pdus)
    total = 0
    for pdu in pdus:
        hdr = pdu["SMB2 Header"]
        if int(_first(hdr, "smb2.cmd") or -1) != SMB2_READ:
            continue
        if _first(hdr, "smb2.flags.response") not in ("1", "True", True):
            continue
        if int(_first(hdr, "smb2.nt_status") or "0", 0) != 0:
            continue
        body = {k: v for k, v in pdu.items() if k != "SMB2 Header"}
        length = _first(body, "smb2.olb.length")
        if length is not None:
            total += int(length, 0)
    return total


def create_file_names(path: Path, extra: list[str] = ()) -> set[str]:
    text = _run(path, list(extra), ["-Y", "smb2.cmd==5 && smb2.flags.response==0", "-T", "fields",
                                    "-E", "occurrence=a", "-E", "aggregator=\x1f", "-e", "smb2.filename"])
    names: set[str] = set()
    for line in text.splitlines():
        names.update(n for n in line.split("\x1f") if n)
    return names


def field_rows(path: Path, extra: list[str], fields: list[str], display_filter: str = "") -> list[list[list[str]]]:
    """One row per frame (matching `display_filter`), one list of values per field."""
    args = ["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]
    if display_filter:
        args += ["-Y", display_filter]
    for f in fields:
        args += ["-e", f]
    rows = []
    for line in _run(path, list(extra), args).splitlines():
        cols = line.split("\t")
        cols += [""] * (len(fields) - len(cols))
        rows.append([[v for v in c.split(",") if v] for c in cols])
    return rows


def histogram(path: Path, extra: list[str], field: str, display_filter: str = "", fmt=lambda v: v) -> dict[str, int]:
    """Occurrences of each value of `field` (all occurrences in each frame)."""
    counts: dict[str, int] = {}
    for row in field_rows(path, extra, [field], display_filter):
        for v in row[0]:
            k = fmt(v)
            counts[k] = counts.get(k, 0) + 1
    return counts


def transform_header_counts(path: Path, extra: list[str] = ()) -> tuple[int, int]:
    """(encrypted, compressed): SMB2 TRANSFORM (0xFD 'SMB') and COMPRESSION_TRANSFORM (0xFC 'SMB')
    headers tshark finds, one occurrence of the header's size field per header."""
    enc = sum(len(r[0]) for r in field_rows(path, extra, ["smb2.header.transform.msg_size"],
                                             "smb2.header.transform.msg_size"))
    comp = sum(len(r[0]) for r in field_rows(path, extra, ["smb2.header.comp_transform.original_size"],
                                              "smb2.header.comp_transform.original_size"))
    return enc, comp


SMBD_NO_REASSEMBLY = ["-o", "smb_direct.reassemble_smb_direct:FALSE",
                      "-o", "iwarp_ddp_rdmap.reassemble_iwarp_rdma_send:FALSE"]


def smb_direct_counts(path: Path, extra: list[str] = ()) -> dict[str, int]:
    """SMB Direct message counters, each message header dissected on its own (reassembly off:
    tshark 4.0 drops the tail fragment of a message whose two fragments share a TCP segment)."""
    fields = ["smb_direct.negotiate_request", "smb_direct.negotiate_response", "smb_direct.data_message",
              "smb_direct.data_length", "smb_direct.credits.granted", "smb_direct.credits.requested"]
    out = dict.fromkeys(["negotiate_requests", "negotiate_responses", "data_messages", "data_length_sum",
                         "credits_granted", "credits_requested"], 0)
    for row in field_rows(path, [*extra, *SMBD_NO_REASSEMBLY], fields, "smb_direct"):
        out["negotiate_requests"] += len(row[0])
        out["negotiate_responses"] += len(row[1])
        out["data_messages"] += len(row[2])
        out["data_length_sum"] += sum(int(v, 0) for v in row[3])
        out["credits_granted"] += sum(int(v, 0) for v in row[4])
        out["credits_requested"] += sum(int(v, 0) for v in row[5])
    return out


def smb2_command_histogram(path: Path, extra: list[str] = ()) -> dict[tuple[int, bool], int]:
    return pdu_counts(path, list(extra))


# Tunnel kinds as smbwire names them (docs/json-schema.md, `tunnels`), from tshark's
# protocol layers: ERSPAN by its version field (absent in type I, 1 in type II, 2 in III).
_ERSPAN_KIND = {None: "erspan1", "1": "erspan2", "2": "erspan3"}
_INNER = ("eth", "ip", "ipv6")

# tshark options a tunnel capture needs to decode what smbwire decodes without being told:
# Linux's legacy VXLAN port (8472), which smbwire opens as VXLAN and tshark only when asked.
TUNNEL_DECODE_AS: dict[str, list[str]] = {
    "vxlan_port_8472.pcap": ["-d", "udp.port==8472,vxlan"],
}


def _pdml_packets(path: Path, extra: list[str]):
    """tshark's PDML of the capture: one `packet` element per frame."""
    import xml.etree.ElementTree as ET

    return ET.fromstring(_run(path, list(extra), ["-T", "pdml"])).iter("packet")


def tunnel_counts(path: Path, extra: list[str] = ()) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Frames that tshark decodes from inside a tunnel, as smbwire's `tunnels` reports them:
    kind ("outer+inner" when nested) -> {"frames", "bytes"}, where bytes are everything before
    the innermost frame (its offset, from PDML's `pos`) plus the outer frame's trailer (after
    the outer IP packet's length; a Cisco MetaData header after GRE is part of the tunnel).
    Second: tunnels whose next layer in tshark is not Ethernet or IP (ERSPAN frame types other than Ethernet, NSH in VXLAN-GPE, ...), by kind, frames."""
    decoded: dict[str, dict[str, int]] = {}
    undecoded: dict[str, int] = {}
    for packet in _pdml_packets(path, extra):
        protos = packet.findall("proto")
        caplen = int(packet.find("proto[@name='geninfo']/field[@name='caplen']").get("show"))
        kinds: list[str] = []
        last = -1
        outer_end = None
        for i, p in enumerate(protos):
            name = p.get("name")
            if name in ("ip", "ipv6") and outer_end is None:
                field = p.find("field[@name='ip.len']" if name == "ip" else "field[@name='ipv6.plen']")
                if field is not None:
                    outer_end = int(p.get("pos")) + int(field.get("show")) + (40 if name == "ipv6" else 0)
            nxt = protos[i + 1].get("name") if i + 1 < len(protos) else None
            if name == "erspan":
                version = p.find(".//field[@name='erspan.version']")
                kinds.append(_ERSPAN_KIND.get(None if version is None else version.get("show"), "erspan?"))
            elif name == "gre" and nxt == "eth":
                kinds.append("gretap")
            elif name == "gre" and nxt in ("ip", "ipv6"):
                kinds.append("gre_ip")
            elif name == "gre" and nxt == "cmd":
                # Cisco MetaData (TrustSec's SGT) between GRE and what it carries.
                after = protos[i + 2].get("name") if i + 2 < len(protos) else None
                kinds.append("gretap" if after == "eth" else "gre_ip")
                last = i + 1
                continue
            elif name in ("vxlan", "geneve"):
                kinds.append(name)
            else:
                continue
            last = i
        if not kinds:
            continue
        key = "+".join(kinds)
        if last + 1 >= len(protos) or protos[last + 1].get("name") not in _INNER:
            undecoded[key] = undecoded.get(key, 0) + 1
            continue
        trailer = caplen - outer_end if outer_end is not None and outer_end < caplen else 0
        entry = decoded.setdefault(key, {"frames": 0, "bytes": 0})
        entry["frames"] += 1
        entry["bytes"] += int(protos[last + 1].get("pos")) + trailer
    return decoded, undecoded


def frame_layers(path: Path, extra: list[str] = ()) -> list[list[tuple[str, int]]]:
    """Per frame, tshark's protocol layers in order with the offset each starts at (PDML `pos`)."""
    return [[(p.get("name"), int(p.get("pos") or 0)) for p in packet.findall("proto")]
            for packet in _pdml_packets(path, extra)]
