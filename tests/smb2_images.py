"""SMB2 messages as bytes, written from MS-SMB2 for the tests that plant their images inside a
file's data (a capture file copied to or read from a share): a NetBIOS session message header
(RFC 1002: type 0, 24-bit length) and the SMB2 header (MS-SMB2 2.2.1.2) with its body. Not an
encoder of the engine's: the tests build what the engine must read."""

from __future__ import annotations

import struct

SERVER_TO_REDIR = 1


def _message(command: int, flags: int, message_id: int, session_id: int, body: bytes, status: int = 0) -> bytes:
    header = struct.pack("<4sHHIHHIIQIIQ16s", b"\xfeSMB", 64, 1, status, command, 1, flags, 0, message_id, 0xFEFF,
                         1 if command in (8, 9) else 0, session_id, b"\0" * 16)
    msg = header + body
    return struct.pack(">I", len(msg)) + msg


def unframed(message: bytes) -> bytes:
    """The SMB2 message alone, without its NetBIOS header (what the preauth hash and a
    TRANSFORM take)."""
    return message[4:]


def write_request(message_id: int, offset: int, data: bytes, session_id: int = 0x1000) -> bytes:
    """A WRITE request (2.2.21) carrying `data` at `offset`."""
    body = struct.pack("<HHIQ16sIIHHI", 49, 64 + 48, len(data), offset, b"\x11" * 16, 0, 0, 0, 0, 0)
    return _message(9, 0, message_id, session_id, body + data)


def read_response(message_id: int, data: bytes, session_id: int = 0x1000) -> bytes:
    """A READ response (2.2.20) carrying `data`: Flags has SMB2_FLAGS_SERVER_TO_REDIR."""
    body = struct.pack("<HBBIII", 17, 0x50, 0, len(data), 0, 0)
    return _message(8, SERVER_TO_REDIR, message_id, session_id, body + data)


def negotiate_response(guid: bytes, max_size: int) -> bytes:
    """A NEGOTIATE response (2.2.4), dialect 3.0.2, empty security buffer: MaxTransactSize,
    MaxReadSize and MaxWriteSize are `max_size`."""
    body = struct.pack("<HHHH16sIIIIQQHHI", 65, 1, 0x0302, 0, guid, 0x7F, max_size, max_size, max_size, 0, 0, 128, 0, 0)
    return _message(0, SERVER_TO_REDIR, 0, 0, body + b"\0")


def session_setup_response(message_id: int, session_id: int, status: int = 0) -> bytes:
    """A SESSION_SETUP response (2.2.6); with status 0 the session is up
    (STATUS_MORE_PROCESSING_REQUIRED: another leg follows)."""
    body = struct.pack("<HHHH", 9, 0, 72, 0)
    return _message(1, SERVER_TO_REDIR, message_id, session_id, body + b"\0", status)


def write_response(message_id: int, count: int, session_id: int = 0x1000) -> bytes:
    """A WRITE response (2.2.22) for `count` bytes."""
    return _message(9, SERVER_TO_REDIR, message_id, session_id, struct.pack("<HHIIHH", 17, 0, count, 0, 0, 0))


def _contexts(entries: list[tuple[int, bytes]], start: int) -> bytes:
    """Negotiate contexts (2.2.3.1), the first at `start` (a multiple of 8) in the message."""
    out = b""
    for i, (kind, data) in enumerate(entries):
        out += struct.pack("<HHI", kind, len(data), 0) + data
        if i + 1 < len(entries):
            out += b"\0" * (-(start + len(out)) % 8)
    return out


def negotiate_request_311() -> bytes:
    """A NEGOTIATE request (2.2.3) offering 3.1.1, with the preauth integrity (SHA-512) and
    encryption (AES-128-GCM) contexts."""
    at = 64 + 36 + 2 + 2  # header, fixed part, one dialect, padding to 8
    ctx = _contexts([(1, struct.pack("<HHH", 1, 32, 1) + bytes(range(32))), (2, struct.pack("<HH", 1, 2))], at)
    body = struct.pack("<HHHHI16sIHH", 36, 1, 1, 0, 0x48, b"C" * 16, at, 2, 0) + struct.pack("<H", 0x0311) + b"\0\0"
    return _message(0, 0, 0, 0, body + ctx)


def negotiate_response_311(guid: bytes, max_size: int) -> bytes:
    """A NEGOTIATE response (2.2.4) choosing 3.1.1 and AES-128-GCM (its contexts), an 8-byte
    security buffer; MaxTransactSize, MaxReadSize and MaxWriteSize are `max_size`."""
    at = 64 + 64 + 8
    ctx = _contexts([(1, struct.pack("<HHH", 1, 32, 1) + bytes(range(32, 64))), (2, struct.pack("<HH", 1, 2))], at)
    body = struct.pack("<HHHH16sIIIIQQHHI", 65, 1, 0x0311, 2, guid, 0x48, max_size, max_size, max_size, 0, 0, 128, 8, at)
    return _message(0, SERVER_TO_REDIR, 0, 0, body + b"\x60\x06" + b"\0" * 6 + ctx)


def negotiate_request() -> bytes:
    """A NEGOTIATE request (2.2.3) offering 2.0.2 and 3.0.2."""
    body = struct.pack("<HHHHI16sQHH", 36, 2, 1, 0, 0x7F, b"\xc1" * 16, 0, 0x0202, 0x0302)
    return _message(0, 0, 0, 0, body)


def session_setup_request(message_id: int, session_id: int, binding: bool) -> bytes:
    """A SESSION_SETUP request (2.2.5), with SMB2_SESSION_FLAG_BINDING when `binding`."""
    body = struct.pack("<HBBIIHHQ", 25, 1 if binding else 0, 1, 0, 0, 88, 1, 0) + b"\x60"
    return _message(1, 0, message_id, session_id, body)


def create_request(message_id: int, session_id: int, name: str) -> bytes:
    """A CREATE request (2.2.13) for `name`, no create contexts."""
    encoded = name.encode("utf-16-le")
    body = struct.pack("<HBBIQQIIIIIHHII", 57, 0, 0, 2, 0, 0, 0x12019F, 0x80, 7, 5, 0x40, 120, len(encoded), 0, 0)
    return _message(5, 0, message_id, session_id, body + encoded)
