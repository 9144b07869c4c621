"""A classic pcap file split into its file header and its records (record header and frame),
for the tests that cut a capture or drop records from it."""

from __future__ import annotations

import struct

FILE_HEADER = 24
RECORD_HEADER = 16
# Magic numbers (microsecond, nanosecond) and the byte order they say.
BYTE_ORDER = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}


def split(data: bytes) -> tuple[bytes, list[bytes]]:
    """The file header and the records in file order; a file that does not end where its
    last record does is refused."""
    order = BYTE_ORDER[data[:4]]
    out, at = [], FILE_HEADER
    while at + RECORD_HEADER <= len(data):
        incl = struct.unpack_from(order + "I", data, at + 8)[0]
        out.append(data[at:at + RECORD_HEADER + incl])
        at += RECORD_HEADER + incl
    if at != len(data):
        raise ValueError(f"pcap ends {len(data) - at} bytes from its last record's end")
    return data[:FILE_HEADER], out
