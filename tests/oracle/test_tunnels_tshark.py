"""Oracle: on tunnel captures written by other tools than ours (tcpdump's test suite:
ERSPAN sessions of switches, GENEVE and VXLAN, GRE variants; captures/tunnels/MANIFEST.md),
smbwire opens the same frames as tshark, names the same kind of tunnel, and counts the same
bytes around the inner frames; every byte of every file lands in one accounting category.

smbwire's own encoders are checked in tests/scenarios/test_remote_span.py and the kernel's
VXLAN device in tests/realtraffic/test_remote_span.py; this kernel has no GRE or GENEVE
devices, so these captures are where ERSPAN, GRE and GENEVE as other implementations write
them are tested."""

from __future__ import annotations

from pathlib import Path

import pytest

import tshark_oracle as oracle
from smbwire.engine import analyze

from paths import CAPTURES

pytestmark = pytest.mark.usefixtures("tshark_required")

TUNNELS = CAPTURES / "tunnels"

# Where smbwire and tshark differ, per file, with the reason: tshark's counts minus these are
# smbwire's. A WCCP redirect (GRE protocol 0x883E, a 4-byte redirect header before the IP
# packet, used by WAN optimisers) is not a mirror session; smbwire does not open it, and
# counts the frame as other protocols.
NOT_OPENED: dict[str, dict[str, dict[str, int]]] = {
    "wccp_redirect_gre.pcap": {"gre_ip": {"frames": 1, "bytes": 42}},
}

# The files whose tunnels tshark does not open to Ethernet or IP directly, with what it finds:
# ERSPAN type III with frame type 7 (not Ethernet), an ERSPAN III header cut by the capture's
# snap length, VXLAN-GPE (UDP 4790) carrying NSH (tshark opens NSH, and IP inside it; smbwire
# opens neither). smbwire counts none of them as tunnelled.
UNDECODED = {
    "erspan-type-iii-ft-7.pcap": {"erspan3": 58},
    "erspan-type-iii-pb-1.pcap": {"erspan3": 1},
    "nsh-over-vxlan-gpe.pcap": {"vxlan": 1},
}


def _captures() -> list[Path]:
    files = sorted(TUNNELS.glob("*.pcap"))
    if len(files) < 20:
        raise RuntimeError(f"{TUNNELS}: the bundled tunnel captures are part of the repository ({len(files)} found)")
    return files


@pytest.mark.tshark
@pytest.mark.parametrize("capture", _captures(), ids=lambda p: p.name)
def test_tunnels_agree_with_tshark(capture: Path) -> None:
    theirs, undecoded = oracle.tunnel_counts(capture, oracle.TUNNEL_DECODE_AS.get(capture.name, []))
    assert undecoded == UNDECODED.get(capture.name, {}), capture.name
    for kind, diff in NOT_OPENED.get(capture.name, {}).items():
        assert theirs.get(kind) == diff, f"{capture.name}: tshark no longer finds {kind} {diff}"
        del theirs[kind]
    result = analyze([str(capture)])
    assert result["tunnels"] == theirs, capture.name
    assert result["inputs"][0]["frames"] == len(oracle.field_rows(capture, [], ["frame.number"])), capture.name
    assert result["accounting"]["reconciled"], f"{capture.name}: accounting {result['accounting']}"


def test_the_bundle_covers_every_kind() -> None:
    """The captures hold every kind of tunnel smbwire opens except gretap (none among tcpdump's
    captures; Linux's gretap is GRE protocol 0x6558, as NVGRE, checked on synthesized captures)."""
    kinds: set[str] = set()
    for capture in _captures():
        kinds |= set(analyze([str(capture)])["tunnels"])
    assert kinds == {"erspan1", "erspan2", "erspan3", "gre_ip", "vxlan", "geneve"}
