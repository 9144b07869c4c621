"""tshark agrees with the time series: per interval and (sender, receiver) address pair, the
WRITE data bytes tshark decodes (`smb2.write_length` of every WRITE request) equal the
series' payload bytes, each WRITE counted in the interval of its first frame (the SMB2
header and the first payload bytes share it in these captures), which is where the engine
puts a send (the capture time of its first payload byte; docs/json-schema.md `series`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import tshark_oracle as oracle
from paths import CAPTURES
from smbwire import engine

pytestmark = pytest.mark.usefixtures("tshark_required")

#: Bundled captures whose every payload is WRITE data, each frame seen once.
WRITE_ONLY = ["mirror2-1MiB.pcap", "nested4-1MiB.pcap", "redirect4-1MiB.pcap", "six-1MiB.pcap"]
INTERVAL_NS = 500_000


def ns(epoch: str) -> int:
    whole, _, frac = epoch.partition(".")
    return int(whole) * 1_000_000_000 + int((frac + "000000000")[:9])


def tshark_series(path: Path) -> Counter:
    times = {int(r[0][0]): ns(r[1][0]) for r in oracle.field_rows(path, [], ["frame.number", "frame.time_epoch"])}
    out: Counter = Counter()
    rows = oracle.field_rows(path, [], ["frame.number", "ip.src", "ip.dst", "smb2.write_length", "tcp.segment"],
                             "smb2.cmd == 9 && smb2.flags.response == 0")
    for number, src, dst, lengths, segments in rows:
        assert len(lengths) == 1, f"one WRITE request per frame expected, frame {number}"
        first = min(int(f) for f in (segments or number))
        out[(times[first] // INTERVAL_NS, src[0], dst[0])] += int(lengths[0])
    return out


@pytest.mark.parametrize("capture", WRITE_ONLY)
def test_series_agrees_with_tshark_per_interval(capture: str) -> None:
    path = CAPTURES / capture
    r = engine.analyze([path], interval=INTERVAL_NS / 1e9)  # no topology: nodes are addresses
    ours: Counter = Counter()
    for row in r["series"]["rows"]:
        k = round(row["t"] / (INTERVAL_NS / 1e9))  # t is the start of interval k
        ours[(k, row["src"], row["dst"])] += row["payload_bytes"]
    theirs = tshark_series(path)
    assert ours == theirs
    assert len({k for k, _, _ in ours}) >= 3  # several intervals, not one
