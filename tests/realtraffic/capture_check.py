"""Independent checks of a span capture with tshark (the oracle, not smbwire): how many SMB2
WRITE requests / READ responses crossed each address pair and how many data bytes they
declared, and whether the span saw every frame exactly once, MTU-sized, with valid checksums.
Only header fields are extracted; no payload bytes leave tshark."""

from __future__ import annotations

import collections
import dataclasses
import subprocess
from pathlib import Path

SMB2_READ = 8
SMB2_WRITE = 9


def tshark(pcap: Path, *args: str) -> list[list[str]]:
    """Rows of tab-separated fields (``-T fields``) from ``tshark -r pcap args``."""
    proc = subprocess.run(
        ["tshark", "-n", "-r", str(pcap), "-T", "fields", "-E", "separator=/t", "-E", "occurrence=a",
         "-E", "aggregator=,", *args],
        capture_output=True, text=True, timeout=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"tshark failed on {pcap}: {proc.stderr.strip()}")
    return [line.split("\t") for line in proc.stdout.splitlines() if line.strip()]


def _ints(field: str) -> list[int]:
    return [int(x, 0) for x in field.split(",") if x]


def _bools(field: str) -> list[bool]:
    return [x.strip().lower() in ("1", "true") for x in field.split(",") if x]


@dataclasses.dataclass
class PairIo:
    write_requests: int = 0
    write_bytes: int = 0
    read_responses: int = 0
    read_bytes: int = 0


def smb2_io(pcap: Path) -> dict[tuple[str, str], PairIo]:
    """(ip.src, ip.dst) -> WRITE requests sent and READ responses sent on that direction.

    The client issues one request at a time, so a frame holding a READ response holds
    nothing else. (tshark leaves ``smb2.nt_status`` out of requests, so it cannot be zipped
    with ``smb2.cmd``.)"""
    out: dict[tuple[str, str], PairIo] = collections.defaultdict(PairIo)
    seen: set[tuple[str, int, int, str]] = set()
    # A span port may deliver a sender's segments out of order (veth hops queue frames on the
    # CPU the sender ran on; a sender moved between CPUs mid-burst overtakes itself): tshark
    # reassembles PDUs from reordered segments only when asked to.
    rows = tshark(pcap, "-o", "tcp.reassemble_out_of_order:TRUE", "-Y", "smb2.cmd == 8 || smb2.cmd == 9",
                  "-e", "ip.src", "-e", "ip.dst", "-e", "tcp.stream", "-e", "smb2.cmd",
                  "-e", "smb2.flags.response", "-e", "smb2.msg_id",
                  "-e", "smb2.write_length", "-e", "smb2.olb.length")
    for row in rows:
        row += [""] * (8 - len(row))
        src, dst, stream, cmds, resps, msg_ids, wlen, blobs = row[:8]
        msgs = list(zip(_ints(cmds), _bools(resps), _ints(msg_ids)))
        io = out[(src, dst)]
        # tshark may dissect a PDU again when a real TCP retransmission overlaps it: count
        # each (connection, command, MessageId) once.
        def fresh(cmd: int, mid: int) -> bool:
            key = (stream, cmd, mid, src)
            if key in seen:
                return False
            seen.add(key)
            return True

        write_lengths = iter(_ints(wlen))
        for c, r, mid in msgs:
            if c == SMB2_WRITE and not r:
                length = next(write_lengths, 0)
                if fresh(c, mid):
                    io.write_requests += 1
                    io.write_bytes += length
        read_resps = [(c, r, mid) for c, r, mid in msgs if c == SMB2_READ and r]
        if read_resps:
            # The READ response's DataLength is a generic offset/length blob in tshark
            # (smb2.olb.length), so only count frames that hold nothing but READ responses.
            if len(read_resps) != len(msgs):
                raise AssertionError(f"frame {src}->{dst} mixes READ responses with other SMB2 messages")
            # An interim (STATUS_PENDING) or failed READ response has no data blob; Samba
            # sends an interim one when the read goes async. Only a frame holding exactly
            # one READ response with a blob is counted (the client has one READ in flight).
            lengths = _ints(blobs)
            if len(read_resps) == 1 and len(lengths) == 1 and fresh(SMB2_READ, read_resps[0][2]):
                io.read_responses += 1
                io.read_bytes += lengths[0]
            elif len(read_resps) > 1:
                raise AssertionError(f"frame {src}->{dst} holds {len(read_resps)} READ responses")
    return dict(out)


@dataclasses.dataclass
class FrameHealth:
    frames: int
    tcp_frames: int
    duplicate_frames: int  # same IP/TCP identity (IP ID included) seen more than once
    # Real TCP retransmissions: the sender sent the segment again (a drop past the mirror
    # point, or a timer); both copies are on the wire, so the span rightly holds both.
    retransmissions: int
    # Stretches of a TCP direction's sequence space the span never held although later data
    # or the other side's ACKs show they were sent: frames the span missed.
    lost_segments: int
    bad_checksums: int
    max_frame_len: int
    non_lab_frames: int  # IP frames with an address outside 198.18.0.0/15
    # Frames tshark flags "previous segment not captured" / "ACKed unseen segment". Not a loss
    # by itself: a segment that arrives on the span after a later one is flagged too, and
    # is in the capture (`lost_segments` counts what never arrived).
    tshark_gap_flags: int = 0


def frame_health(pcap: Path) -> FrameHealth:
    rows = tshark(
        pcap, "-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
        "-e", "frame.len", "-e", "ip.src", "-e", "ip.dst", "-e", "ip.id", "-e", "tcp.srcport",
        "-e", "tcp.dstport", "-e", "tcp.seq_raw", "-e", "tcp.ack_raw", "-e", "tcp.len", "-e", "tcp.flags",
        "-e", "tcp.analysis.retransmission", "-e", "tcp.analysis.fast_retransmission",
        "-e", "tcp.analysis.spurious_retransmission",
        "-e", "ip.checksum.status", "-e", "tcp.checksum.status",
        "-e", "tcp.analysis.lost_segment", "-e", "tcp.analysis.ack_lost_segment",
        "-e", "tcp.checksum", "-e", "tcp.checksum_calculated",
    )
    seen: collections.Counter = collections.Counter()
    tcp_frames = retrans = bad = max_len = non_lab = lost = 0
    for row in rows:
        row += [""] * (19 - len(row))
        max_len = max(max_len, int(row[0]))
        src, dst = row[1], row[2]
        # ICMP errors quote an inner IP header: tshark then aggregates two addresses.
        addrs = [a for a in (src + "," + dst).split(",") if a]
        if addrs and not all(_in_lab(a) for a in addrs):
            non_lab += 1
        if row[4]:
            tcp_frames += 1
            seen[tuple(row[1:10])] += 1
        if any(row[10:13]):
            retrans += 1
        # Wireshark checksum status: 0 bad, 1 good, 2 unverified. A TCP checksum whose value
        # is zero may be sent as 0xffff, the other zero of one's complement arithmetic (RFC
        # 1624 §3; Linux does, about once in 65,536 segments); tshark 4.0 calls that bad.
        tcp_bad = "0" in row[14].split(",") and not _ones_complement_zero(row[17], row[18])
        if "0" in row[13].split(",") or tcp_bad:
            bad += 1
        if any(row[15:17]):
            lost += 1
    dup = sum(n - 1 for n in seen.values() if n > 1)
    return FrameHealth(len(rows), tcp_frames, dup, retrans, uncaptured_stretches(rows), bad, max_len, non_lab, lost)


def uncaptured_stretches(rows: list[list[str]]) -> int:
    """Per TCP direction (rows of `frame_health`'s fields): holes in the sequence space its
    captured segments cover (SYN and FIN count one each), plus one when the other direction
    acknowledges beyond the last byte captured. Order does not matter: a segment the span
    delivered late still covers its bytes."""
    spans: dict[tuple, list[tuple[int, int]]] = collections.defaultdict(list)
    acks: dict[tuple, list[int]] = collections.defaultdict(list)
    for row in rows:
        src, dst, sport, dport, seq, ack, length, flags = row[1], row[2], row[4], row[5], row[6], row[7], row[8], row[9]
        if not (sport and seq and flags):
            continue
        f = int(flags, 16)
        n = int(length or 0) + (1 if f & 0x02 else 0) + (1 if f & 0x01 else 0)
        direction = (src, sport, dst, dport)
        if n:
            spans[direction].append((int(seq), n))
        if f & 0x10 and ack:
            acks[(dst, dport, src, sport)].append(int(ack))
    holes = 0
    for direction, segs in spans.items():
        # Sequence numbers wrap at 2^32: measure from well before the first one seen (a
        # reordered earlier segment may come later).
        base = (segs[0][0] - (1 << 30)) % (1 << 32)
        rel = sorted(((s - base) % (1 << 32), n) for s, n in segs)
        end = rel[0][0]
        for start, n in rel:
            if start > end:
                holes += 1
            end = max(end, start + n)
        if any((a - base) % (1 << 32) > end for a in acks.get(direction, [])):
            holes += 1
    return holes


def _ones_complement_zero(sent: str, calculated: str) -> bool:
    """Both checksums are zero, one written 0x0000 and the other 0xffff."""
    try:
        return {int(sent, 16), int(calculated, 16)} == {0x0000, 0xFFFF}
    except ValueError:
        return False


def _in_lab(addr: str) -> bool:
    parts = addr.split(".")
    return len(parts) == 4 and parts[0] == "198" and parts[1] in ("18", "19")
